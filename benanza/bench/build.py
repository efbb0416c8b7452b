"""Turning a ``Network`` (``benanza.model.network``) back into a runnable ONNX model.

Weights become random initializers of the recorded shapes and dtypes (their values do not
change a kernel's cost); ``VALUE`` inputs keep their recorded values (a Resize's scales, a
quantized op's scales and zero points: synthesised, they would change the op or be refused
by ONNX Runtime), and so does a network input the model computes (``benanza.model.run_values``:
an initializer of the input's own name, which ONNX Runtime feeds in its place); attributes are
filtered to those the operator schema of the recorded opset knows (normalisation may add
canonical ones, such as explicit dilations, that an older opset does not accept). A
control-flow node gets its carried subgraphs back, their captured outer tensors bound to the
tensors the built model feeds in their place, and their large constants synthesised.

Built for a runtime (``sink=True``), every output goes through a *sink*: a ``Slice`` of its
first element whose ``axes`` is a runtime input (``sink_feeds`` gives its values). Inside a
model a layer's output is read by the next layer; as a graph output it is not, and ONNX
Runtime's fusions refuse a pattern whose last node writes a graph output: a tanh-GELU group
of GPT-2 or ALBERT ran as eight kernels alone (267 us) where the model runs one ``FastGelu``
(80 us), and ALBERT's fused units summed above its end-to-end latency. Its ``axes`` unknown
until run time, the sink is opaque to every optimizer (none folds it, the transpose optimizer
cannot push a ``Transpose`` through it), and its one-element output spares the copy a large
output costs each call. Kernel time leaves the sink out (``is_sink``); call latency pays it
(about 2 us). ``Slice`` takes ``axes`` as an input from opset 10: a network of an older
default-domain opset is built without sinks.

One kind of output gets another sink: a ``DequantizeLinear``'s, directly or through ops that
ONNX Runtime's ``QDQPropagationTransformer`` moves a DequantizeLinear past (``QDQ_PROPAGATING``,
its ``CanNodePropagate``). That transformer would carry the DequantizeLinear past a ``Slice``
sink too, inserting a QuantizeLinear/DequantizeLinear pair the model never runs; at opset 21
with int8 data it builds a QuantizeLinear that ONNX Runtime 1.32 then refuses ("output_dtype
INT8 does not match y_zero_point type UINT8"), so every such benchmark failed. Such an output
is read by a ``GatherElements`` of its first element instead, whose indices (zeros, one per
axis) are a runtime input: as opaque and as small, and no QDQ transformer moves past it.

Where the DequantizeLinear reaches the output through such ops (a Reshape, a Transpose), the
transformer still inserts its pair after the last of them, since no QuantizeLinear follows it
in the unit: in the model one does (an int8 LeViT's 157 DequantizeLinear→Reshape/Transpose/Slice
chains all end in a QuantizeLinear, which ONNX Runtime drops with the pair), so the unit would
time a pair the model never runs, and at opset 21 with int8 data it failed as above (2 of an
unseen int8 LeViT's DLBricks sequences). The built model then names the transformer in its
``metadata_props`` (``disabled_optimizers``), and ONNX Runtime's sessions leave it out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from benanza.model.control_flow import decode_subgraph, rename_reads
from benanza.model.held_weights import HeldModel, held_bytes, make_placeholder
from benanza.model.load import held_apart, with_synthetic_weights
from benanza.model.network import Network, NetworkOutput, RefKind
from benanza.model.schemas import op_schema
from benanza.model.synthetic import WeightCopies, synthetic_weight, synthetic_weight_array
from benanza.model.walks import LENGTH_BY_DATA, graphs_of, subgraph_attributes

# ONNX's ops whose outputs are one variadic list (control flow): none of them may go unnamed (``_built``)
_VARIADIC_OUTPUTS = frozenset({"Loop", "Scan", "If"})

# IR version written for built models: old enough for any onnxruntime we support.
IR_VERSION = 8

SINK_PREFIX = "benanza_sink"  # the name of every sink node and of its runtime inputs (axes, indices)
_SINK_INDEX = f"{SINK_PREFIX}_index"  # a GatherElements sink's indices input, by rank
_SINK_MIN_OPSET = 10  # Slice reads starts, ends and axes as inputs
DEFAULT_OPSET = 13  # the default-domain opset of a network with no default-domain node (its sinks need one)
_GATHER_SINK_MIN_OPSET = 11  # GatherElements
# the ops ONNX Runtime's QDQPropagationTransformer carries a DequantizeLinear past (qdq_propagation.cc)
QDQ_PROPAGATING = frozenset({"MaxPool", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Slice"})
# a built model's metadata entry: the runtime optimizers its sessions must leave out, comma-separated
DISABLED_OPTIMIZERS_KEY = "benanza.disabled_optimizers"
QDQ_PROPAGATION = "QDQPropagationTransformer"


def is_sink(node_name: str) -> bool:
    """Whether a node (or a profiler event named after it) is a sink ``build_onnx`` added."""
    return node_name.startswith(SINK_PREFIX)


def sink_feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The values of a built model's sink inputs: a ``Slice`` sink's ``axes`` (every axis, in
    order), a ``GatherElements`` sink's indices (zeros, one element per axis)."""
    feeds = {}
    for vi in model.graph.input:
        if vi.name.startswith(_SINK_INDEX):
            feeds[vi.name] = np.zeros([d.dim_value for d in vi.type.tensor_type.shape.dim], dtype=np.int64)
        elif is_sink(vi.name):
            rank = vi.type.tensor_type.shape.dim[0].dim_value
            feeds[vi.name] = np.arange(rank, dtype=np.int64)
    return feeds


def _dequantized(network: Network, output: NetworkOutput) -> int | None:
    """How many ops ONNX Runtime's QDQ propagation would carry a DequantizeLinear past to reach
    this output (0: the DequantizeLinear writes it); None when no DequantizeLinear reaches it."""
    node, past = network.nodes[output.node], 0
    while node.domain == "" and node.op_type in QDQ_PROPAGATING:  # ONNX's domain, as ``walks.domain_of`` writes it
        first = node.inputs[0] if node.inputs else None
        if first is None or first.kind is not RefKind.NODE:
            return None
        node, past = network.nodes[first.node], past + 1  # type: ignore[index]
    return past if node.op_type == "DequantizeLinear" and node.domain in ("", "com.microsoft") else None


def disabled_optimizers(model: onnx.ModelProto) -> list[str]:
    """The runtime optimizers a built model's sessions leave out (``DISABLED_OPTIMIZERS_KEY``)."""
    for prop in model.metadata_props:
        if prop.key == DISABLED_OPTIMIZERS_KEY:
            return [name for name in prop.value.split(",") if name]
    return []


def _schema_attributes(op_type: str, opset: int, domain: str) -> frozenset[str] | None:
    schema = op_schema(op_type, opset, domain)
    return schema.attributes if schema is not None else None


def _elem_type(dtype: str) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def weight_tensor(
    name: str,
    shape: Sequence[int],
    dtype: str,
    seed: int = 0,
    slot: int = 0,
    copy: int = 0,
    held: dict[str, np.ndarray] | None = None,
) -> onnx.TensorProto:
    """An initializer of synthetic data (``synthetic_weight``).

    ``held``: where a large weight's array goes, the initializer its placeholder (``model.held_weights``).
    """
    tensor = onnx.TensorProto(name=name, data_type=_elem_type(dtype), dims=list(shape))
    if held is not None and (nbytes := held_bytes(tensor)):
        held[name] = synthetic_weight_array(shape, dtype, seed, slot, copy)
        make_placeholder(tensor, nbytes)
    else:
        tensor.raw_data = synthetic_weight(shape, dtype, seed, slot, copy)
    return tensor


def build_onnx(network: Network, seed: int = 0, sink: bool = False) -> onnx.ModelProto:
    """A runnable ONNX model of ``network``; inputs ``in{i}``, outputs ``out{j}``.

    ``sink``: each output (a tensor of rank 1 or more) is its first element, read by a sink
    (see the module docstring); the model's inputs then include the sinks' ``axes``.
    """
    return with_synthetic_weights(_built(network, seed, sink, None), seed)


def build_held(network: Network, seed: int = 0, sink: bool = False) -> HeldModel:
    """``build_onnx``'s model (the same values), its large weights held apart (``model.held_weights``).

    A large weight goes from the synthetic-weight cache (or its draw) to the runtime without a
    copy into the protobuf: what a runtime that takes weights by name (ONNX Runtime on the CPU)
    builds from.
    """
    held: dict[str, np.ndarray] = {}
    return held_apart(_built(network, seed, sink, held), seed, held)


def _built(network: Network, seed: int, sink: bool, held: dict[str, np.ndarray] | None) -> onnx.ModelProto:
    """``build_onnx``'s model before a subgraph's large constants are filled in (``held``: see ``weight_tensor``)."""
    inputs = [
        helper.make_tensor_value_info(f"in{i}", _elem_type(t.dtype), t.shape) for i, t in enumerate(network.inputs)
    ]
    # an input the model computes (a length its attention kernel reads) keeps its value: as an initializer of
    # the input's name, which ONNX Runtime feeds when nothing else is fed and never folds (it may be fed)
    initializers: list[onnx.TensorProto] = [
        numpy_helper.from_array(np.asarray(t.value, dtype=np.dtype(t.dtype)).reshape(t.shape), f"in{i}")
        for i, t in enumerate(network.inputs)
        if t.value is not None
    ]
    copies = WeightCopies()  # every initializer counted, in order, as with_synthetic_weights counts them
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
                copy = copies.next(ref.shape, _elem_type(ref.dtype), i)
                if ref.kind is RefKind.VALUE:
                    arr = np.asarray(ref.value, dtype=np.dtype(ref.dtype)).reshape(ref.shape)
                    initializers.append(numpy_helper.from_array(arr, name))
                else:
                    initializers.append(weight_tensor(name, ref.shape, ref.dtype, seed, i, copy, held))
                names.append(name)
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
        slots = node.output_slots or tuple(range(len(node.outputs)))
        outs = [""] * (max(slots, default=-1) + 1)  # a skipped output stays unnamed, as in the model
        if node.op_type in _VARIADIC_OUTPUTS and domain in ("", "ai.onnx"):
            # but control flow's outputs are all named (unread ones left dangling): they are computed all the same,
            # ONNX Runtime crashed the process (a segmentation fault) running a Loop whose unread carried values had
            # no name (a tf2onnx tf.map_fn's counter and limit), and refuses one with fewer outputs than its body
            outs = [f"n{pos}_skipped{k}" for k in range(max(len(outs), _control_flow_outputs(node.op_type, attrs)))]
        for j, slot in enumerate(slots):
            out_name[(pos, j)] = f"n{pos}_o{j}"
            outs[slot] = out_name[(pos, j)]
        nodes.append(helper.make_node(node.op_type, node_inputs, outs, name=f"n{pos}", domain=domain or None, **attrs))
    outputs = []
    rename = []
    propagation_crosses = False  # a dequantized output reached through ops QDQ propagation crosses
    default_opset = opsets.get("", 0)
    sinks = sink and (default_opset == 0 or default_opset >= _SINK_MIN_OPSET)
    for j, o in enumerate(network.outputs):
        spec = network.output_tensor(o)
        if sinks and spec.shape:
            past = _dequantized(network, o) if default_opset >= _GATHER_SINK_MIN_OPSET else None
            gather = past is not None
            propagation_crosses = propagation_crosses or bool(past)
            _sink(out_name[(o.node, o.output)], f"out{j}", spec.shape, nodes, inputs, initializers, gather)
            outputs.append(
                helper.make_tensor_value_info(f"out{j}", _elem_type(spec.dtype), [min(d, 1) for d in spec.shape])
            )
            opsets.setdefault("", DEFAULT_OPSET)
            continue
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
    model = helper.make_model(graph, opset_imports=opset_imports, ir_version=IR_VERSION, producer_name="benanza")
    if propagation_crosses:
        helper.set_model_props(model, {DISABLED_OPTIMIZERS_KEY: QDQ_PROPAGATION})
    return model  # a subgraph's large constants travel as shape and dtype: the callers fill them


def _control_flow_outputs(op_type: str, attrs: Mapping[str, Any]) -> int:
    """How many outputs a control-flow node has, from its subgraph: a Loop's body outputs but its condition, a
    Scan's body outputs, an If's branch outputs."""
    graph = attrs.get("body") if op_type in ("Loop", "Scan") else attrs.get("then_branch")
    count = len(graph.output) if isinstance(graph, onnx.GraphProto) else 0
    return count - 1 if op_type == "Loop" else count


def _sink(
    tensor: str,
    output: str,
    shape: tuple[int, ...],
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    initializers: list[onnx.TensorProto],
    gather: bool = False,
) -> None:
    """Append the sink that reads ``tensor`` (of ``shape``) and writes ``output``; its rank's axes input and
    bounds once.

    ``gather``: a ``GatherElements`` sink (a dequantized output, see the module docstring). Its indices hold
    one element per axis, none along an empty one: indices of 1 along an axis of 0 made ONNX Runtime refuse
    the unit (a quantized YOLO's boxes, none above its threshold on a random image: 33 layers failed).
    """
    rank = len(shape)
    if gather:
        dims = [min(d, 1) for d in shape]
        index = f"{_SINK_INDEX}{rank}" + ("" if all(dims) else "_" + "x".join(map(str, dims)))
        if all(vi.name != index for vi in inputs):
            inputs.append(helper.make_tensor_value_info(index, TensorProto.INT64, dims))
        nodes.append(helper.make_node("GatherElements", [tensor, index], [output], name=f"{SINK_PREFIX}_{output}"))
        return
    axes, starts, ends = (f"{SINK_PREFIX}_{what}{rank}" for what in ("axes", "starts", "ends"))
    if all(vi.name != axes for vi in inputs):
        inputs.append(helper.make_tensor_value_info(axes, TensorProto.INT64, [rank]))
        initializers.append(numpy_helper.from_array(np.zeros(rank, np.int64), starts))
        initializers.append(numpy_helper.from_array(np.ones(rank, np.int64), ends))
    nodes.append(helper.make_node("Slice", [tensor, starts, ends, axes], [output], name=f"{SINK_PREFIX}_{output}"))


def _attr(value: Any) -> Any:
    """Attribute values as recorded (tuples) back to what ``make_node`` takes."""
    if isinstance(value, tuple) and len(value) == 4 and value[0] == "tensor":
        _, dtype, shape, values = value
        arr = np.asarray(values, dtype=np.dtype(dtype))
        if arr.size != int(np.prod(shape)):
            return None  # a large tensor attribute was recorded truncated; cannot rebuild
        return numpy_helper.from_array(arr.reshape(shape))
    return value


def data_length_feeds(network: Network, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``feeds`` with each network input that a ``NonZero`` counts or a ``Compress`` keeps by (its
    condition) made to give the length the network has for that op's output: the length the model's own
    run gave (``walks.LENGTH_BY_DATA``), as exactly that many ones, evenly spread.

    Synthetic data gives another count: a mask's ones (``run_values.input_fills``) and random floats count
    every element, zeros none (an empty output where the network holds 450 made ONNX Runtime refuse the
    run: a torchvision Faster R-CNN's ``NonZero``, fed zeros before). An input computed inside the network
    is left as it comes.
    """
    out = dict(feeds)
    for node in network.nodes:
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("NonZero", "Compress"):
            continue
        (slot,) = LENGTH_BY_DATA[node.op_type]  # what it counts, what it keeps by
        ref = node.inputs[slot] if len(node.inputs) > slot else None
        name = f"in{ref.input}" if ref is not None and ref.kind is RefKind.INPUT else None
        if name not in out:
            continue
        shape = node.outputs[0].shape
        if node.op_type == "NonZero":
            length = shape[1] if len(shape) == 2 else None
        else:
            axis = dict(node.attributes).get("axis")
            length = shape[0] if axis is None else shape[int(axis) % len(shape)] if shape else None
        given = out[name]
        if length is None or not 0 <= length <= given.size:
            continue
        values = np.zeros(given.size, given.dtype)
        values[np.arange(length) * given.size // max(length, 1)] = 1
        out[name] = values.reshape(given.shape)
    return out
