"""A whole ONNX model in PyTorch on the GPU: the framework end to end when ONNX Runtime has no CUDA EP.

The model is converted to a ``torch.nn.Module`` by ``onnx2torch`` and run under
``torch.inference_mode`` with inputs already on the device; the call returns after
``torch.cuda.synchronize``, so its latency is what a PyTorch user waits for. cuDNN's
autotuner stays as PyTorch leaves it by default (``torch.backends.cudnn.benchmark`` off:
the heuristic's pick, the framework's default), and TF32 follows the runtime's
``tensor_cores`` setting. Imported only when a model is prepared.
"""

from __future__ import annotations

from typing import Any

from benanza.bench.contract import Prepared
from benanza.errors import GpuError


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


class TorchModel(Prepared):
    """``call`` runs the converted model once and waits for the GPU."""

    def __init__(self, model: Any, device: int = 0, precision: str = "float32", tensor_cores: bool = True) -> None:
        missing = torch_missing()
        if missing:
            raise GpuError(missing)
        if precision != "float32":
            raise GpuError(f"the end-to-end model runs in its own float32, not {precision}")
        import torch
        from onnx2torch import convert

        from benanza.runtimes.onnxruntime import feeds_for

        self._torch = torch
        self._device = torch.device("cuda", device)
        torch.backends.cuda.matmul.allow_tf32 = tensor_cores
        torch.backends.cudnn.allow_tf32 = tensor_cores
        self._module = convert(model).eval().to(self._device)
        self._inputs = [torch.from_numpy(a).to(self._device) for a in feeds_for(model).values()]
        self.provenance = {
            "framework": "pytorch",
            "torch": torch.__version__,
            "torch_cudnn": torch.backends.cudnn.version(),
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        }

    def call(self) -> object:
        with self._torch.inference_mode():
            self._module(*self._inputs)
        self._torch.cuda.synchronize(self._device)
        return None

    def kernel_times(self, runs: int) -> list[float] | None:
        return None

    def close(self) -> None:
        self._module = None
        self._inputs = []
