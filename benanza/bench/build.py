"""Turning a ``Network`` (``benanza.model.network``) back into a runnable ONNX model.

Weights become random initializers of the recorded shapes and dtypes (their values do not
change a kernel's cost); ``VALUE`` inputs keep their recorded values (a Resize's scales, a
quantized op's scales and zero points: synthesised, they would change the op or be refused
by ONNX Runtime); attributes are
filtered to those the operator schema of the recorded opset knows (normalisation may add
canonical ones, such as explicit dilations, that an older opset does not accept). A
control-flow node gets its carried subgraphs back, their captured outer tensors bound to the
tensors the built model feeds in their place, and their large constants synthesised.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from benanza.model.control_flow import decode_subgraph, rename_reads
from benanza.model.load import with_synthetic_weights
from benanza.model.network import Network, RefKind
from benanza.model.schemas import op_schema
from benanza.model.synthetic import synthetic_weight
from benanza.model.walks import graphs_of, subgraph_attributes

# IR version written for built models: old enough for any onnxruntime we support.
_IR_VERSION = 8


def _schema_attributes(op_type: str, opset: int, domain: str) -> frozenset[str] | None:
    schema = op_schema(op_type, opset, domain)
    return schema.attributes if schema is not None else None


def _elem_type(dtype: str) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def weight_tensor(name: str, shape: Sequence[int], dtype: str, seed: int = 0, slot: int = 0) -> onnx.TensorProto:
    """An initializer of synthetic data (``synthetic_weight``)."""
    tensor = onnx.TensorProto(name=name, data_type=_elem_type(dtype), dims=list(shape))
    tensor.raw_data = synthetic_weight(shape, dtype, seed, slot)
    return tensor


def build_onnx(network: Network, seed: int = 0) -> onnx.ModelProto:
    """A runnable ONNX model of ``network``; inputs ``in{i}``, outputs ``out{j}``."""
    inputs = [
        helper.make_tensor_value_info(f"in{i}", _elem_type(t.dtype), t.shape) for i, t in enumerate(network.inputs)
    ]
    initializers: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    opsets: dict[str, int] = {}
    out_name = {}
    for pos, node in enumerate(network.nodes):
        domain = node.domain
        for d, version in ((domain, node.opset), *node.subgraph_opsets):
            opsets[d] = max(opsets.get(d, 0), version)
        names: list[str] = []
        for i, ref in enumerate(node.inputs):
            if ref.kind is RefKind.ABSENT:
                names.append("")
            elif ref.kind is RefKind.INPUT:
                names.append(f"in{ref.input}")
            elif ref.kind is RefKind.NODE:
                names.append(out_name[(ref.node, ref.output)])
            else:
                name = f"n{pos}_c{i}"
                if ref.kind is RefKind.VALUE:
                    arr = np.asarray(ref.value, dtype=np.dtype(ref.dtype)).reshape(ref.shape)
                    initializers.append(numpy_helper.from_array(arr, name))
                else:
                    initializers.append(weight_tensor(name, ref.shape, ref.dtype, seed, i))
                names.append(name)
        outs = []
        for j, _ in enumerate(node.outputs):
            out_name[(pos, j)] = f"n{pos}_o{j}"
            outs.append(out_name[(pos, j)])
        allowed = _schema_attributes(node.op_type, node.opset, domain)
        subgraphs = dict(node.subgraphs)
        attrs = {k: _attr(v) for k, v in node.attributes if allowed is None or k in allowed}
        attrs = {k: v for k, v in attrs.items() if k not in subgraphs}
        attrs = {k: v for k, v in attrs.items() if v is not None}
        captured = node.captured
        node_inputs, bound = names[: len(names) - captured], names[len(names) - captured :]
        for k, encoded in subgraphs.items():
            graphs = [decode_subgraph(g, bound) for g in ([encoded] if isinstance(encoded, str) else encoded)]
            attrs[k] = graphs[0] if isinstance(encoded, str) else graphs
        nodes.append(helper.make_node(node.op_type, node_inputs, outs, name=f"n{pos}", domain=domain or None, **attrs))
    outputs = []
    rename = []
    for j, o in enumerate(network.outputs):
        spec = network.output_tensor(o)
        outputs.append(helper.make_tensor_value_info(f"out{j}", _elem_type(spec.dtype), spec.shape))
        rename.append((out_name[(o.node, o.output)], f"out{j}"))
    # Graph outputs take the internal tensor names through Identity-free renaming.
    mapping = dict(rename)
    for n in nodes:
        for k, name in enumerate(n.output):
            if name in mapping:
                n.output[k] = mapping[name]
        for k, name in enumerate(n.input):
            if name in mapping:
                n.input[k] = mapping[name]
        for attr in subgraph_attributes(n):  # a subgraph may capture a renamed output
            for sub in graphs_of(attr):
                rename_reads(sub, mapping)
    graph = helper.make_graph(nodes, "benanza_network", inputs, outputs, initializers)
    opset_imports = [helper.make_opsetid(d, v) for d, v in sorted(opsets.items())]
    model = helper.make_model(graph, opset_imports=opset_imports, ir_version=_IR_VERSION, producer_name="benanza")
    return with_synthetic_weights(model, seed)  # a subgraph's large constants travel as shape and dtype


def _attr(value: Any) -> Any:
    """Attribute values as recorded (tuples) back to what ``make_node`` takes."""
    if isinstance(value, tuple) and len(value) == 4 and value[0] == "tensor":
        _, dtype, shape, values = value
        arr = np.asarray(values, dtype=np.dtype(dtype))
        if arr.size != int(np.prod(shape)):
            return None  # a large tensor attribute was recorded truncated; cannot rebuild
        return numpy_helper.from_array(arr.reshape(shape))
    return value
