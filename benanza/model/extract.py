"""Turning a prepared (bound, folded, shape-inferred) ONNX model into a ``ModelGraph``.

A node is a *constant node* when every input it reads is a constant (it then only
computes weights or shapes) and is skipped, unless ONNX Runtime keeps it to fuse it
(``RUNTIME_KEPT_OPS``: a QDQ model's weight DequantizeLinear); ``Shape`` and ``Size`` read
only their input's shape, so once that shape is known their outputs are constants too, and
a shape computation is never a layer. Every other node becomes a layer, control flow included
(one layer with its subgraphs, ``benanza.model.control_flow``), unless it has no operator
schema, has a tensor whose shape is not fully known, or is a ``Loop`` whose iterations are not
fixed: then it is reported as ``Unsupported`` with the reason (from the shape resolution's
``ShapeReport`` where it knows one, such as a runtime value that decides the shape), and the
model's other layers still come out. The model's identity (``ModelGraph.graph_key``) is taken
here too, over every node, layer or not (``benanza.model.identity``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

from benanza.model import control_flow, ops
from benanza.model.constants import constant_tensor
from benanza.model.dtypes import dtype_name, itemsize
from benanza.model.given_inputs import GivenInput, given_arrays
from benanza.model.graph import InputKind, Layer, LayerInput, ModelGraph, ShapeReport, TensorSpec, Unsupported
from benanza.model.identity import model_identity
from benanza.model.keys import VALUE_MAX_ELEMENTS, Slot, constant_kind, key_fields, scale_identity, stable_id
from benanza.model.load import has_data
from benanza.model.run_values import integer_feeds, run_values
from benanza.model.schemas import Differentiation, OpSchema, op_schema
from benanza.model.walks import (
    RANDOM_OPS,
    SHAPE_READERS,
    captured_names,
    domain_of,
    graphs_of,
    node_reads,
    subgraph_attributes,
    topological_nodes,
)

log = logging.getLogger(__name__)

# Ops ONNX Runtime never constant-folds, even of constants, so that its QDQ fusions can take
# them (its ConstantFolding pass skips DequantizeLinear unless QDQ is disabled): a QDQ
# model's DequantizeLinear of an int8 weight runs inside the fused QLinearConv or
# QLinearMatMul, so it is a layer of that unit, never folded into a float weight.
RUNTIME_KEPT_OPS = frozenset({"DequantizeLinear"})


class _UnsupportedNode(Exception):
    pass


@functools.cache
def schema_of(op_type: str, opset: int, domain: str) -> OpSchema | None:
    """The op's schema at an opset, ONNX's or else ONNX Runtime's (contrib ops); None for an unknown op."""
    return op_schema(op_type, opset, domain)


_INTEGER_TYPES = frozenset(
    f"tensor({t})" for t in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool")
)
# element types of quantized data: integers of 8 bits or fewer, float8 and float4
_NARROW_TYPES = frozenset(
    f"tensor({t})"
    for t in (
        *("int8", "uint8", "int4", "uint4", "int2", "uint2"),
        *("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "float8e8m0", "float4e2m1"),
    )
)
# what a quantized slot may also allow beside them: 16-bit data, int32 accumulators and biases
_QUANTIZED_TYPES = _NARROW_TYPES | {"tensor(int16)", "tensor(uint16)", "tensor(int32)"}
_FLOAT_TYPES = frozenset({"tensor(float)", "tensor(float16)", "tensor(bfloat16)", "tensor(double)"})


@functools.lru_cache(maxsize=4096)
def slot_kinds(op_type: str, opset: int, domain: str) -> tuple[Slot, ...]:
    """What each formal input of the op's schema holds; empty without a schema (see ``keys.constant_kind``).

    Where the schema marks differentiability (most ONNX ops) that decides: differentiable is
    learned, non-differentiable a setting. Otherwise (quantized ops, every ONNX Runtime contrib
    op) the types decide. An integer slot is a setting: indices, shapes, axes, lengths, zero
    points, integer biases, values a kernel may branch on and so carried, never synthesised.
    A quantized int8 weight is integer too, but it is a weight by its size (``constant_kind``);
    typing cannot tell it from its zero point, which shares its type parameter. Any other slot
    is learned when typed like the op's data (its first input: a second operand, a weight, a
    bias) and a setting when typed apart from it. A variadic last input repeats its kind for
    every further input (``slot_of``).

    Before all that, a *quantized* op's scales are ``Slot.SCALE``: an op is quantized when one
    of its slots holds only quantized data (integers of 8 bits or fewer, float8, float4, with
    at most 16-bit integers and int32 beside them: QuantizeLinear's output, QLinearConv's
    input, MatMulIntegerToFloat's operands), and its scales are the inputs after the first
    that its schema names a scale and types with floats (``x_scale``, ``B_scale``, ``scales``).
    """
    schema = schema_of(op_type, opset, domain)
    if schema is None:
        return ()
    data_type = schema.inputs[0].type_str if schema.inputs else None
    quantized = any(
        (allowed := schema.allowed_types(p)) <= _QUANTIZED_TYPES and allowed & _NARROW_TYPES
        for p in (*schema.inputs, *schema.outputs)
    )
    kinds = []
    for i, param in enumerate(schema.inputs):
        if quantized and i > 0 and "scale" in param.name.lower() and schema.allowed_types(param) & _FLOAT_TYPES:
            kinds.append(Slot.SCALE)
        elif param.differentiation is Differentiation.DIFFERENTIABLE:
            kinds.append(Slot.LEARNED)
        elif param.differentiation is Differentiation.NON_DIFFERENTIABLE:
            kinds.append(Slot.SETTING)
        elif schema.allowed_types(param) <= _INTEGER_TYPES:
            kinds.append(Slot.SETTING)
        else:
            kinds.append(Slot.LEARNED if param.type_str == data_type else Slot.SETTING)
    return tuple(kinds)


def slot_of(kinds: tuple[Slot, ...], index: int) -> Slot:
    if not kinds:
        return Slot.UNKNOWN
    return kinds[min(index, len(kinds) - 1)]


@functools.lru_cache(maxsize=4096)
def _schema_defaults(op_type: str, opset: int, domain: str) -> tuple[tuple[str, Any], ...]:
    schema = schema_of(op_type, opset, domain)
    if schema is None:
        return ()
    return tuple((name, _attr_value(default)) for name, default in schema.defaults.items())


def _attr_value(attr: AttributeProto) -> Any:
    if attr.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
        raise _UnsupportedNode(f"attribute '{attr.name}' holds a subgraph (control flow)")
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, onnx.TensorProto):
        arr = numpy_helper.to_array(value)
        return ("tensor", dtype_name(value.data_type), tuple(arr.shape), tuple(arr.ravel().tolist()[:64]))
    if isinstance(value, list):
        return tuple(v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value)
    return value


def _tensor_types(model: onnx.ModelProto) -> dict[str, tuple[tuple[int, ...] | None, str]]:
    """name -> (shape or None when any dimension is unknown, dtype)."""
    table: dict[str, tuple[tuple[int, ...] | None, str]] = {}
    for init in model.graph.initializer:
        table[init.name] = (tuple(init.dims), dtype_name(init.data_type))
    for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        tt = tensor_type_of(vi.type)
        if tt is None:
            continue
        shape = None
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            shape = tuple(d.dim_value for d in tt.shape.dim)
        if vi.name not in table or table[vi.name][0] is None:
            table[vi.name] = (shape, dtype_name(tt.elem_type))
    return table


def tensor_type_of(tp: onnx.TypeProto) -> onnx.TypeProto.Tensor | None:
    """The tensor type of a tensor or of an optional tensor; None for sequences, maps and the like."""
    if tp.HasField("tensor_type"):
        return tp.tensor_type
    if tp.HasField("optional_type") and tp.optional_type.elem_type.HasField("tensor_type"):
        return tp.optional_type.elem_type.tensor_type
    return None


def extract(
    model: onnx.ModelProto,
    name: str,
    path: str,
    shapes: ShapeReport | None = None,
    given: Mapping[str, GivenInput] | None = None,
) -> ModelGraph:
    """Build the ``ModelGraph`` of a prepared model.

    Args:
        shapes: how the model was shaped (``shapes.prepare_model``): the methods, recorded on
            the graph, and why a tensor has no shape, given in the reason of its nodes.
        given: inputs given their values (``--input``: ``model.given_inputs``): the small integers the
            model computes are computed from them, and the model's key covers their digests.
    """
    shapes = shapes or ShapeReport()
    opsets = {(o.domain if o.domain != "ai.onnx" else ""): o.version for o in model.opset_import}
    types = _tensor_types(model)
    fed = {vi.name: given[vi.name] for vi in model.graph.input if vi.name in (given or {})}
    # the small integer tensors the model computes (lengths, positions), by value: their layers carry them
    computed = run_values(model, types, {**integer_feeds(model, types), **given_arrays(fed)}, path)
    # and those it computes from data, at their values in the model's run (``ShapeReport.setting_values``)
    computed = {**{x: tuple(v.ravel().tolist()) for x, v in shapes.setting_values}, **computed}
    init_values = {i.name: i for i in model.graph.initializer}
    constants: set[str] = set(init_values)
    const_protos: dict[str, onnx.TensorProto] = dict(init_values)
    runtime_inputs = [vi for vi in model.graph.input if vi.name not in init_values]

    layers: list[Layer] = []
    layer_at: dict[int, str] = {}  # position in ``nodes`` -> layer key, for the model's identity
    unsupported: list[Unsupported] = []
    producer: dict[str, frozenset[int]] = {}  # tensor -> layers it depends on directly
    edges: set[tuple[int, int]] = set()
    constant_nodes = 0

    used = {x for n in model.graph.node for x in n.input} | {o.name for o in model.graph.output}
    by_run = set(shapes.decided)  # lengths (and If branches) the model's data decided, taken from its run
    work_values = dict(shapes.work_values)  # what layers whose work the data decides read in that run
    nodes = topological_nodes(model.graph.node, constants | {vi.name for vi in runtime_inputs})
    for pos, node in enumerate(nodes):
        present = [x for x in node.input if x]
        reads_shape = (
            node.op_type in SHAPE_READERS and domain_of(node) == "" and types.get(present[0], (None,))[0] is not None
        )
        if (
            node.op_type == "Constant"
            or reads_shape
            or (
                all(x in constants for x in present)
                and not _has_subgraph(node)
                and node.op_type not in RANDOM_OPS
                and not (node.op_type in RUNTIME_KEPT_OPS and domain_of(node) == "")
            )
        ):
            constants.update(o for o in node.output if o)
            if node.op_type == "Constant" and node.output and (tensor := constant_tensor(node)) is not None:
                const_protos[node.output[0]] = tensor
            constant_nodes += 1
            continue
        # a subgraph's captured outer tensors are dependencies too (If branches read them)
        deps = frozenset().union(*(producer.get(x, frozenset()) for x in node_reads(node)))
        node_name = node.name or f"{node.op_type}_{pos}"
        domain = domain_of(node)
        try:
            made = functools.partial(
                _make_layer, len(layers), node, node_name, domain, opsets, types, constants, const_protos, used, shapes
            )
            if any(o in shapes.data_work for o in node.output):  # benchmarked on its values in the run
                layer = made({**computed, **_work_values(node, work_values, constants, types)}, by_run=True)
                try:  # its identity without them; a Loop whose trip count the run gave has none without
                    identity = made(computed)
                except _UnsupportedNode:
                    identity = layer
            else:
                layer = identity = made(computed)
            if any(o in by_run for o in node.output):
                layer = dataclasses.replace(layer, data_decided=True)
        except _UnsupportedNode as why:
            unsupported.append(Unsupported(node_name, node.op_type, domain, str(why)))
            for o in node.output:
                producer[o] = deps
            continue
        layers.append(layer)
        # the model's identity without the values a data-decided If read in the run (its layer key has them):
        # another machine's run (other CPU kernels, another ONNX Runtime) may give others, not another model
        layer_at[pos] = scale_identity(identity.layer_key, identity.scale_values)
        edges.update((d, layer.index) for d in deps)
        for o in node.output:
            producer[o] = frozenset({layer.index})

    bound_inputs = tuple(
        TensorSpec(vi.name, types[vi.name][0] or (), types[vi.name][1]) for vi in runtime_inputs if vi.name in types
    )
    return ModelGraph(
        model=name,
        path=path,
        opset=opsets,
        inputs=bound_inputs,
        layers=tuple(layers),
        edges=tuple(sorted(edges)),
        unsupported=tuple(unsupported),
        constant_nodes=constant_nodes,
        graph_key=model_identity(model.graph, nodes, layer_at, opsets, {n: g.digest for n, g in fed.items()}),
        shaped_by=shapes.shaped_by,
    )


DATA_WORK_REASON = (
    "the model's data decides its work (an If's branch, the boxes an NMS compares), and its run gave no "
    "values of what it reads to benchmark it on (synthetic data would measure other work)"
)
# what a layer whose work the data decides may read, in elements, to be carried into its benchmark by value
WORK_VALUE_MAX_ELEMENTS = 1 << 20


def _work_values(
    node: onnx.NodeProto,
    values: Mapping[str, Any],
    constants: set[str],
    types: Mapping[str, tuple[tuple[int, ...] | None, str]],
) -> dict[str, tuple[Any, ...]]:
    """What a layer whose work the model's data decides reads, with the values the model's run gave them
    (``ShapeReport.work_values``): an ``If`` whose branch the data decides (its condition, what its branches
    read of the outer graph), a ``NonMaxSuppression`` (its boxes and scores, ``walks.WORK_BY_DATA``). Carried
    into its key and its benchmark, which then does the work the model did (torchvision's ``batched_nms``:
    an NMS of the boxes the model kept; on synthetic boxes an SSDlite's took 423 ms, five times the whole
    model, and a YOLO11's top-level NMS 18 ms, twice its model).

    Raises:
        _UnsupportedNode: a value the run did not give (a bfloat16 tensor, a failed run), one of another shape
            than the model's, or more than ``WORK_VALUE_MAX_ELEMENTS`` elements in all.
    """
    reads = [x for x in dict.fromkeys(node_reads(node)) if x and x not in constants]
    total = sum(math.prod(shape) for x in reads if (shape := types.get(x, (None, ""))[0]) is not None)
    if total > WORK_VALUE_MAX_ELEMENTS:  # the run keeps none of them then (``resolve``)
        raise _UnsupportedNode(
            f"the model's data decides its work, and what it reads holds {total} values, more than "
            f"benanza carries into a benchmark ({WORK_VALUE_MAX_ELEMENTS})"
        )
    missing = [x for x in reads if x not in values]
    if missing:
        raise _UnsupportedNode(f"{DATA_WORK_REASON}: {', '.join(repr(x) for x in missing)}")
    wrong = [x for x in reads if types.get(x, (None, ""))[0] != tuple(values[x].shape)]
    if wrong:
        raise _UnsupportedNode(f"{DATA_WORK_REASON}: the run's {wrong[0]!r} has another shape than the model's")
    return {x: tuple(values[x].ravel().tolist()) for x in reads}


def _normalise_value_inputs(
    inputs: list[LayerInput], value_slots: dict[int, str], normalise: ops.Normaliser, ctx: ops.OpContext
) -> None:
    """Normalise an attribute that moved to an input exactly as the attribute would be.

    Squeeze's ``axes=[-1]`` as an attribute (opset 11) and as an input (opset 13) must
    give the same key, so negative axes are made positive and sorted in both places.
    """
    for i, slot in value_slots.items():
        if i < len(inputs) and inputs[i].kind is InputKind.VALUE:
            value = normalise({slot: inputs[i].value}, ctx).get(slot)
            inputs[i] = dataclasses.replace(inputs[i], value=tuple(value))


def _unknown(which: str, tensor: str, shapes: ShapeReport) -> str:
    why = shapes.reason(tensor)
    return f"unknown shape of {which} '{tensor}'" + (f": {why}" if why else "")


_SUBGRAPH_TYPES = (AttributeProto.GRAPH, AttributeProto.GRAPHS)


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in _SUBGRAPH_TYPES for a in node.attribute)


def _make_layer(
    index: int,
    node: onnx.NodeProto,
    name: str,
    domain: str,
    opsets: dict[str, int],
    types: dict[str, tuple[tuple[int, ...] | None, str]],
    constants: set[str],
    const_protos: dict[str, onnx.TensorProto],
    used: set[str],
    shapes: ShapeReport,
    computed: Mapping[str, tuple[Any, ...]],
    by_run: bool = False,
) -> Layer:
    """One node as a layer; ``by_run``: ``computed`` holds what it read in the model's run (``_work_values``),
    a Loop's trip count among them."""
    op_type = node.op_type
    opset = opsets.get(domain)
    if opset is None:
        raise _UnsupportedNode(f"domain '{domain}' is not imported by the model")
    if schema_of(op_type, opset, domain) is None:
        label = f"{domain}::{op_type}" if domain else op_type
        raise _UnsupportedNode(
            f"no operator schema for {label} at opset {opset} in ONNX or ONNX Runtime; cannot describe it"
        )
    info = ops.lookup(op_type, domain)
    value_slots = info.value_inputs if info else {}
    kinds = slot_kinds(op_type, opset, domain)

    inputs: list[LayerInput] = []
    for i, x in enumerate(node.input):
        if not x:
            inputs.append(LayerInput(TensorSpec("", (), ""), InputKind.ABSENT))
            continue
        shape, dtype = types.get(x, (None, ""))
        if shape is None:
            raise _UnsupportedNode(_unknown("input", x, shapes))
        spec = TensorSpec(x, shape, dtype)
        if x not in constants:
            inputs.append(LayerInput(spec, InputKind.ACTIVATION, computed.get(x)))
            continue
        proto = const_protos.get(x)
        kind = constant_kind(spec.numel, dtype, slot_of(kinds, i)) if proto is not None and has_data(proto) else None
        if kind is not None and kind.carries_value:
            inputs.append(LayerInput(spec, kind, tuple(numpy_helper.to_array(proto).ravel().tolist())))
        else:
            inputs.append(LayerInput(spec, InputKind.WEIGHT))
    captures = captured_names(node) if _has_subgraph(node) else []
    if captures or _has_subgraph(node):  # control flow: what its subgraphs read follows its own inputs
        inputs.extend(_captured_inputs(captures, types, constants, const_protos, shapes, computed))
        if op_type == "Loop" and domain == "":
            # a constant; for a Loop whose work the data decides, also what it read in the model's run
            values = {
                x: i.value
                for x, i in zip(node.input, inputs, strict=False)
                if i.kind is InputKind.VALUE or (by_run and i.kind is InputKind.ACTIVATION and i.value is not None)
            }

            def value_of(x: str) -> np.ndarray | None:  # a constant's value, for a while loop that counts
                proto = const_protos.get(x)
                return numpy_helper.to_array(proto) if proto is not None and has_data(proto) else None

            if (why := control_flow.loop_trip_reason(node, values, constants, value_of, opset)) is not None:
                raise _UnsupportedNode(why)
    outputs: list[TensorSpec] = []
    slots: list[int] = []  # each output's position among the node's
    for slot, x in enumerate(node.output):
        if not x:
            continue
        shape, dtype = types.get(x, (None, ""))
        if shape is None:
            if x not in used:  # an unused optional output (Dropout's mask): nothing depends on it
                continue
            raise _UnsupportedNode(_unknown("output", x, shapes))
        outputs.append(TensorSpec(x, shape, dtype))
        slots.append(slot)
    # positions only where an output is skipped before another (SkipLayerNormalization's sum, output 3,
    # without its mean and inv_std_var): a unit built without them would write its sum into slot 1
    output_slots = tuple(slots) if slots != list(range(len(slots))) else ()

    attrs: dict[str, Any] = dict(_schema_defaults(op_type, opset, domain))
    carried = subgraph_attributes(node)
    attrs.update((a.name, _attr_value(a)) for a in node.attribute if a.type not in _SUBGRAPH_TYPES)
    subgraphs = []
    for a in carried:  # each keyed by its digest, carried canonical
        graphs = graphs_of(a)
        digests = tuple(f"subgraph:{control_flow.subgraph_digest(g, captures, opsets)}" for g in graphs)
        encoded = tuple(control_flow.encode_subgraph(g, captures) for g in graphs)
        single = a.type == AttributeProto.GRAPH
        attrs[a.name] = digests[0] if single else digests
        subgraphs.append((a.name, encoded[0] if single else encoded))
    ctx = ops.OpContext(tuple(None if i.kind is InputKind.ABSENT else i.tensor for i in inputs), tuple(outputs), opset)
    flops: int | None = None
    if info is not None and info.normalise is not None:
        try:
            attrs = info.normalise(attrs, ctx)
            _normalise_value_inputs(inputs, value_slots, info.normalise, ctx)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise _UnsupportedNode(f"cannot normalise {op_type} attributes: {exc!r}") from None
    if info is not None and info.flops is not None:
        try:
            flops = int(info.flops(attrs, ctx))
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            # a form the counter does not know (an attribute or input it did not expect): the layer is
            # benchmarked all the same, its FLOPs unknown (None, never 0)
            log.debug("%s: FLOPs of %s not counted: %r", name, op_type, exc)
    attributes = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in attrs.items()))
    tensors = (*(i.tensor for i in inputs if i.kind is not InputKind.ABSENT), *outputs)
    bytes_moved = sum(t.numel * itemsize(t.dtype) for t in tensors)
    fields = key_fields(op_type, domain, inputs, outputs, dict(attributes), value_slots, output_slots)
    return Layer(
        index=index,
        name=name,
        op_type=op_type,
        domain=domain,
        opset=opset,
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        attributes=attributes,
        flops=flops,
        bytes_moved=bytes_moved,
        layer_key=stable_id(fields),
        captured=len(captures),
        output_slots=output_slots,
        subgraphs=tuple(subgraphs),
        subgraph_opsets=tuple(
            sorted((d, opsets[d]) for d in control_flow.subgraph_domains(node) if d in opsets and d != domain)
        ),
    )


def _captured_inputs(
    captures: list[str],
    types: dict[str, tuple[tuple[int, ...] | None, str]],
    constants: set[str],
    const_protos: dict[str, onnx.TensorProto],
    shapes: ShapeReport,
    computed: Mapping[str, tuple[Any, ...]],
) -> list[LayerInput]:
    """The outer tensors a control-flow node's subgraphs read, as extra layer inputs.

    Nothing says what a subgraph does with a captured constant, so a small one (at most
    ``VALUE_MAX_ELEMENTS``: a shape, a bound) is carried by value and a larger one is a weight.
    """
    out = []
    for x in captures:
        shape, dtype = types.get(x, (None, ""))
        if shape is None:
            raise _UnsupportedNode(_unknown("captured outer tensor", x, shapes))
        spec = TensorSpec(x, shape, dtype)
        proto = const_protos.get(x)
        if x not in constants:
            out.append(LayerInput(spec, InputKind.ACTIVATION, computed.get(x)))
        elif proto is not None and has_data(proto) and spec.numel <= VALUE_MAX_ELEMENTS:
            out.append(LayerInput(spec, InputKind.VALUE, tuple(numpy_helper.to_array(proto).ravel().tolist())))
        else:
            out.append(LayerInput(spec, InputKind.WEIGHT))
    return out
