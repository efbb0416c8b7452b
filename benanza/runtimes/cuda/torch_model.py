"""A whole ONNX model in PyTorch on the GPU: the framework end to end when ONNX Runtime has no CUDA EP.

The model is converted to a ``torch.nn.Module`` by ``onnx2torch`` and run under
``torch.inference_mode`` with inputs already on the device; the call returns after
``torch.cuda.synchronize``, so its latency is what a PyTorch user waits for. cuDNN's
autotuner stays as PyTorch leaves it by default (``torch.backends.cudnn.benchmark`` off:
the heuristic's pick, the framework's default), TF32 follows the runtime's
``tensor_cores`` setting, and a float16 or bfloat16 variant runs the module cast to that type.
Imported only when a model is prepared.

Before conversion, ``for_onnx2torch`` rewrites what onnx2torch has no converter for into what
PyTorch would run in its place, and the record's ``settings.rewrites`` lists each rewrite:

- ``Dropout`` (inference: its input, unchanged; the mask output unused) becomes ``Identity``;
- an ``AveragePool`` with pads that differ at the two ends of an axis (PyTorch pads both
  ends alike) becomes an explicit ``Pad`` and an unpadded pool: one kernel more, as a PyTorch
  model does; border averages then count the padded zeros.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from benanza.bench.contract import Prepared
from benanza.errors import GpuError


def for_onnx2torch(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, int]]:
    """``model`` with the nodes onnx2torch cannot convert rewritten (module docstring), and how many of each."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    opset = next((o.version for o in out.opset_import if o.domain in ("", "ai.onnx")), 1)
    used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    rewrites: Counter[str] = Counter()
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        if node.domain in ("", "ai.onnx") and node.op_type == "Dropout" and not any(o in used for o in node.output[1:]):
            nodes.append(helper.make_node("Identity", [node.input[0]], [node.output[0]], name=node.name))
            rewrites["Dropout -> Identity"] += 1
            continue
        if node.domain in ("", "ai.onnx") and node.op_type == "AveragePool":
            padded = _explicit_pad(node, opset, graph)
            if padded:
                nodes.extend(padded)
                rewrites["AveragePool with uneven pads -> Pad + AveragePool"] += 1
                continue
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    return out, dict(rewrites)


def _explicit_pad(node: onnx.NodeProto, opset: int, graph: onnx.GraphProto) -> list[onnx.NodeProto] | None:
    """A Pad and an unpadded AveragePool for a pool whose pads differ at the ends of an axis; else None."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    pads = list(attrs.get("pads") or [])
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") or not pads:
        return None
    rank = len(pads) // 2
    if pads[:rank] == pads[rank:]:
        return None
    padded = f"{node.output[0]}__padded"
    full = [0, 0, *pads[:rank], 0, 0, *pads[rank:]]  # N and C are not padded
    if opset >= 11:
        pads_name = f"{node.output[0]}__pads"
        graph.initializer.append(numpy_helper.from_array(np.asarray(full, dtype=np.int64), pads_name))
        pad = helper.make_node("Pad", [node.input[0], pads_name], [padded], name=f"{node.name}__pad")
    else:
        pad = helper.make_node("Pad", [node.input[0]], [padded], name=f"{node.name}__pad", pads=full)
    kept = [a for a in node.attribute if a.name != "pads"]
    pool = helper.make_node("AveragePool", [padded], list(node.output), name=node.name)
    pool.attribute.extend(kept)
    return [pad, pool]


def torch_missing() -> str | None:
    """None when PyTorch with CUDA and onnx2torch can run a model here, else why not (one line)."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    try:
        import onnx2torch  # noqa: F401
    except ImportError:
        return "onnx2torch is not installed (pip install onnx2torch): no ONNX-to-PyTorch conversion"
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA device"
    return None


PRECISIONS = ("float32", "float16", "bfloat16")


class TorchModel(Prepared):
    """``call`` runs the converted model once and waits for the GPU.

    ``precision`` other than float32: the module's floating parameters and buffers and the
    float inputs are cast to it (``Module.to(dtype=...)``, what ``model.half()`` does).
    """

    def __init__(
        self,
        model: Any,
        device: int = 0,
        precision: str = "float32",
        tensor_cores: bool = True,
        feeds: Mapping[str, Any] | None = None,
    ) -> None:
        """``feeds``: the model's inputs by name (default: ``runtimes.onnxruntime.feeds_for(model)``)."""
        missing = torch_missing()
        if missing:
            raise GpuError(missing)
        if precision not in PRECISIONS:
            raise GpuError(f"the end-to-end model runs in {', '.join(PRECISIONS)}, not {precision}")
        import torch
        from onnx2torch import convert

        from benanza.runtimes.onnxruntime import feeds_for

        self._torch = torch
        self._device = torch.device("cuda", device)
        dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[precision]
        torch.backends.cuda.matmul.allow_tf32 = tensor_cores
        torch.backends.cudnn.allow_tf32 = tensor_cores
        converted, rewrites = for_onnx2torch(model)
        # float16/bfloat16: parameters, buffers and float inputs cast, as model.half() does
        self._module = convert(converted).eval().to(self._device, dtype=dtype)
        self._inputs = [
            tensor.to(self._device, dtype=dtype) if tensor.is_floating_point() else tensor.to(self._device)
            for tensor in (torch.from_numpy(a) for a in (feeds_for(model) if feeds is None else feeds).values())
        ]
        self.provenance = {
            "framework": "pytorch",
            "dtype": precision,
            "torch": torch.__version__,
            "torch_cudnn": torch.backends.cudnn.version(),
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            "rewrites": rewrites,
        }

    def call(self) -> object:
        with self._torch.inference_mode():
            self._module(*self._inputs)
        self._torch.cuda.synchronize(self._device)
        return None

    def kernel_times(self, runs: int, evict_bytes: int = 0) -> list[float] | None:
        return None

    def close(self) -> None:
        self._module = None
        self._inputs = []
