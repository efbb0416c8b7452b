"""What a model computes at run time that is not data: lengths, positions, sizes in integer tensors.

A layer benchmarked alone gets its activations as synthetic feeds. For data that is right:
a kernel's cost does not depend on its values. An integer tensor that a model computes from
its inputs is different when it says how much work there is. onnxruntime-genai's Llama, Phi and
Mistral exports compute from the attention mask the lengths their attention kernel reads
(``seqlens_k = ReduceSum(attention_mask) - 1`` and ``total_sequence_length``, inputs of
``com.microsoft::GroupQueryAttention``). Fed zeros, the attention layer alone attends over one
token instead of the whole sequence, and the model whole fails (``seqlens_k[0] = -1 is out of
range``) when the mask is zeros too. So:

- ``input_fills``: a model's integer and boolean inputs are fed zeros where they reach an
  index slot (token, segment and position ids: Gather indices stay in range whatever the
  vocabulary) or a setting (a Reshape's shape, as before), and ones (True) where they are only
  data: an attention mask with every position valid, the full work.
  ``benanza.runtimes.onnxruntime.feeds_for`` feeds every model and benchmark so.
- ``run_values``: the values of the small int32 and int64 tensors (at most
  ``VALUE_MAX_ELEMENTS`` elements; narrower integers are a quantized model's data) that a model
  reads as inputs or computes from them and its constants by integer operations alone, computed
  by running that part of the model in ONNX Runtime on those inputs. A layer that reads one
  carries the value into its key and its benchmark (``LayerInput.value`` of an activation; the
  benchmark's input is built as an initializer ONNX Runtime may override but not fold:
  ``benanza.bench.build``).

Only integer computations are run (a tensor computed from float data, an ``ArgMax`` over
logits, is the model's work, not its bookkeeping, and stays fed as synthetic data), and no
node of more than ``MAX_RUN_ELEMENTS`` elements: a model's run values cost milliseconds.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from benanza.crashes import native
from benanza.errors import one_line
from benanza.model.dtypes import dtype_name
from benanza.model.keys import INDEX_DTYPES, INTEGER_DTYPES, MAX_RUN_ELEMENTS, VALUE_MAX_ELEMENTS
from benanza.model.load import has_data
from benanza.model.schemas import Differentiation, op_schema
from benanza.model.synthetic import synthetic_array
from benanza.model.walks import LENGTH_BY_DATA, SHAPE_READERS, domain_of

log = logging.getLogger(__name__)

Types = Mapping[str, tuple[tuple[int, ...] | None, str]]  # tensor -> static shape (None: unknown), numpy dtype name

# integer and boolean element types (numpy names; ONNX enums: INTEGER_TYPES) whose values run_values computes
# and input_fills decides, and that may decide an If (``model.steering``)
_INTEGERS = INTEGER_DTYPES - {"int4", "uint4"}
INTEGER_TYPES = frozenset(helper.np_dtype_to_tensor_dtype(np.dtype(t)) for t in _INTEGERS)
# ops that hand an integer tensor's values on unchanged in meaning (a token id stays a token id)
_PASS_THROUGH = frozenset(
    {"Cast", "Identity", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Expand", "Concat", "Slice", "Transpose", "Tile"}
)
# ops that combine masks into a mask (their inputs are settings to ONNX, but a mask's values are data); not
# ``Not``, which would turn the ones a mask is fed into the zeros NonZero counts none of
_MASK_OPS = frozenset({"And", "Or", "Xor"})


def _opsets(model: onnx.ModelProto) -> dict[str, int]:
    return {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}


def _keeps_zeros(node: onnx.NodeProto, position: int, opsets: Mapping[str, int]) -> bool:
    """Whether input ``position`` of ``node`` is a slot where zeros are the safe synthetic value: one that
    indexes (its schema names it ``indices`` or ``..._ids``: Gather, GatherND, ScatterND, OneHot,
    EmbedLayerNormalization's ids) or that ONNX marks a setting (NonDifferentiable: a Reshape's shape,
    Slice's starts and ends, a Tile's repeats, a Where's condition), or of an op nobody describes."""
    domain = domain_of(node)
    if domain == "" and position in LENGTH_BY_DATA.get(node.op_type, ()):
        return False  # what NonZero counts, what Compress keeps: data (zeros would leave nothing)
    opset = opsets.get(domain)
    schema = op_schema(node.op_type, opset, domain) if opset is not None else None
    if schema is None or not schema.inputs:
        return True
    slot = schema.inputs[min(position, len(schema.inputs) - 1)]
    name = slot.name.lower()
    indexes = name.endswith("indices") or name == "ids" or name.endswith("_ids")
    return indexes or slot.differentiation is Differentiation.NON_DIFFERENTIABLE


def input_fills(model: onnx.ModelProto) -> dict[str, int]:
    """For each integer or boolean graph input of ``model``: 0 where its values reach an index or a
    setting slot (through ops that pass them on unchanged), else 1: data, a mask (see the module docstring)."""
    opsets = _opsets(model)
    readers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in model.graph.node:
        for i, x in enumerate(node.input):
            if x:
                readers.setdefault(x, []).append((node, i))
    inits = {t.name for t in model.graph.initializer}
    fills = {}
    for vi in model.graph.input:
        if vi.name in inits or vi.type.tensor_type.elem_type not in INTEGER_TYPES:
            continue
        fills[vi.name] = 0 if _reaches_zeros(vi.name, readers, opsets) else 1
    return fills


def _reaches_zeros(
    name: str, readers: Mapping[str, list[tuple[onnx.NodeProto, int]]], opsets: Mapping[str, int]
) -> bool:
    seen, todo = {name}, [name]
    while todo:
        for node, i in readers.get(todo.pop(), ()):
            if node.op_type in SHAPE_READERS and domain_of(node) == "":
                continue  # reads the shape alone: a file as exported reads its mask's length so
            mask = node.op_type in _MASK_OPS and domain_of(node) == ""
            if not mask and _keeps_zeros(node, i, opsets):
                return True
            passes = node.op_type in _PASS_THROUGH and (i == 0 or node.op_type == "Concat")
            if (passes and domain_of(node) == "") or mask:
                todo.extend(o for o in node.output if o and o not in seen)
                seen.update(node.output)
    return False


def run_values(
    model: onnx.ModelProto,
    types: Types,
    feeds: Mapping[str, np.ndarray],
    path: str = "",
) -> dict[str, tuple[Any, ...]]:
    """name -> flattened values of the small integer tensors ``model`` computes by integer operations
    from ``feeds`` (its inputs) and its constants, read by a node (see the module docstring).

    Args:
        types: every tensor's static shape (None: unknown) and numpy dtype name, as the model was bound.
        feeds: the model's inputs, as it is fed whole.
        path: the model's file, named where its part cannot run (else the graph's name).

    A part ONNX Runtime cannot run leaves its values out (their layers are fed synthetic data, as before).
    """
    # initializers with their values in the model: not a structure-only tensor, nor one left in its data file
    inits = {t.name: t for t in model.graph.initializer if has_data(t)}
    known = set(inits) | set(feeds)  # tensors the part that run_values runs can have
    nodes: list[onnx.NodeProto] = []
    for node in model.graph.node:
        if _runnable(node, known, types):
            reads_shape = node.op_type in SHAPE_READERS and domain_of(node) == ""
            nodes.append(_constant_shape(node, types) if reads_shape else node)
            known.update(o for o in node.output if o)
    read = {x for node in model.graph.node for x in node.input if x}
    made = {o for node in nodes for o in node.output if o}
    wanted = [x for x in sorted((made | set(feeds)) & read) if _small_integer(x, types)]
    if not wanted:
        return {}
    computed = [x for x in wanted if x in made]
    values = {x: np.asarray(feeds[x]) for x in wanted if x in feeds}
    if computed:
        try:
            with native("run", "integer values", "the part of the model that computes its integer values"):
                values.update(_run(model, _needed(nodes, computed), inits, feeds, computed, types))
        except Exception as exc:  # any failure (a crash earlier: ``crashes``) leaves these values to synthetic feeds
            log.warning(
                "%s: the integer values it computes could not be run, its layers are fed synthetic ones: %s",
                path or model.graph.name,
                one_line(exc),
            )
            values = {x: v for x, v in values.items() if x not in made}
    return {x: tuple(v.ravel().tolist()) for x, v in values.items()}


def _integer(name: str, types: Types) -> bool:
    """Whether tensor ``name`` is an integer (or boolean) tensor of a known shape and at most ``MAX_RUN_ELEMENTS``."""
    shape, dtype = types.get(name, (None, ""))
    return shape is not None and dtype in _INTEGERS and int(np.prod(shape, dtype=np.int64)) <= MAX_RUN_ELEMENTS


def carried_by_value(shape: tuple[int, ...] | None, dtype: str) -> bool:
    """Whether a tensor of ``shape`` and ``dtype`` (numpy name) is one whose values run_values carries into its
    layers' keys and benchmarks: a small int32 or int64 one (a length, positions, a shape). Narrower integers
    are a quantized model's data, whatever their size: synthetic, as always. (``resolve`` shapes a tensor from
    the model's run on given values only where this carries the values that decided it.)"""
    return shape is not None and dtype in INDEX_DTYPES and int(np.prod(shape, dtype=np.int64)) <= VALUE_MAX_ELEMENTS


def _small_integer(name: str, types: Types) -> bool:
    """A tensor of ``types`` whose values run_values carries (``carried_by_value``)."""
    return carried_by_value(*types.get(name, (None, "")))


def _runnable(node: onnx.NodeProto, known: set[str], types: Types) -> bool:
    """Whether ``node`` computes integers from integers the run has: no subgraph, no float data read
    (a shape op reads only its input's bound shape), every output an integer tensor of a known shape."""
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return False
    if not node.output or not all(o and _integer(o, types) for o in node.output):
        return False
    if node.op_type in SHAPE_READERS and domain_of(node) == "":
        return bool(node.input) and types.get(node.input[0], (None, ""))[0] is not None
    if node.op_type == "Constant":
        return True
    present = [x for x in node.input if x]
    return bool(present) and all(x in known and _integer(x, types) for x in present)


def _constant_shape(node: onnx.NodeProto, types: Types) -> onnx.NodeProto:
    """A ``Shape`` (its ``start`` and ``end``) or ``Size`` of a bound tensor, as the constant it is."""
    shape = types[node.input[0]][0] or ()
    if node.op_type == "Size":
        value = np.array(int(np.prod(shape, dtype=np.int64)), np.int64)
    else:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        value = np.array(shape[slice(attrs.get("start", 0), attrs.get("end"))], np.int64)
    return helper.make_node("Constant", [], [node.output[0]], value=numpy_helper.from_array(value))


def _needed(nodes: list[onnx.NodeProto], outputs: Iterable[str]) -> list[onnx.NodeProto]:
    """The nodes ``outputs`` depend on, in order."""
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    keep: set[int] = set()
    todo = [producer[x] for x in outputs if x in producer]
    while todo:
        i = todo.pop()
        if i not in keep:
            keep.add(i)
            todo.extend(producer[x] for x in nodes[i].input if x in producer)
    return [n for i, n in enumerate(nodes) if i in keep]


def _run(
    model: onnx.ModelProto,
    nodes: list[onnx.NodeProto],
    inits: Mapping[str, onnx.TensorProto],
    feeds: Mapping[str, np.ndarray],
    outputs: list[str],
    types: Types,
) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    read = {x for n in nodes for x in n.input if x}

    def info(name: str, dtype: np.dtype) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(dtype), None)

    graph = helper.make_graph(
        nodes,
        "run_values",
        [info(x, np.asarray(feeds[x]).dtype) for x in sorted(read & set(feeds))],
        [info(x, np.dtype(types[x][1])) for x in outputs],
        [inits[x] for x in sorted(read & set(inits))],
    )
    part = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 4
    session = ort.InferenceSession(part.SerializeToString(), options, providers=["CPUExecutionProvider"])
    fed = {i.name: np.asarray(feeds[i.name]) for i in session.get_inputs()}
    return dict(zip(outputs, session.run(outputs, fed), strict=True))


def model_feeds(model: onnx.ModelProto, seed: int = 0, skip: Iterable[str] = ()) -> dict[str, np.ndarray]:
    """Synthetic inputs for every runtime input of ``model`` (shapes must be static) but ``skip``: integers and
    booleans by ``integer_feeds``, floats random (``synthetic.synthetic_array``, one generator of ``seed`` in
    input order). An input with an initializer (a default, a value the model computes) is left to it. What
    every model and benchmark is fed (``runtimes.onnxruntime.feeds_for``, which adds a built network's sinks)."""
    rng = np.random.default_rng(seed)
    left = {i.name for i in model.graph.initializer} | set(skip)
    types = {
        vi.name: (tuple(d.dim_value for d in vi.type.tensor_type.shape.dim), dtype_name(vi.type.tensor_type.elem_type))
        for vi in model.graph.input
        if vi.name not in left
    }
    integers = integer_feeds(model, types)
    return {
        name: integers[name] if name in integers else synthetic_array(list(shape), dtype, rng)
        for name, (shape, dtype) in types.items()
    }


def integer_feeds(model: onnx.ModelProto, types: Types) -> dict[str, np.ndarray]:
    """The integer and boolean inputs of ``model`` as it is fed whole and as every benchmark is fed
    (``input_fills``; ``feeds_for``), where ``types`` binds their shapes."""
    out = {}
    for name, fill in input_fills(model).items():
        shape, dtype = types.get(name, (None, ""))
        if shape is not None and dtype in _INTEGERS:
            out[name] = np.full(shape, fill, np.dtype(dtype))
    return out
