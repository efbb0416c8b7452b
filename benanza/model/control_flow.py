"""Control flow (``If``, ``Loop``, ``Scan``) as one opaque layer that carries its subgraphs.

A node with subgraph attributes is benchmarked as one unit: the node, its subgraphs intact,
run by the runtime as the model runs it. What this module adds to an ordinary layer:

- *Captures.* A subgraph may read any tensor of an enclosing scope. The outer tensors a
  node's subgraphs read (``captured_names``, in order of first use, nested subgraphs
  included) become extra inputs of the layer after the node's own inputs
  (``Layer.captured`` counts them), so they are wired, keyed and fed like any other input:
  activations as inputs of the benchmark, constants as values or synthetic weights.
- *Keys.* Each subgraph attribute is keyed by a digest (``subgraph_digest``) of the same
  canonical, name-free description the model identity uses (``benanza.model.identity``):
  per node its op type, domain, opset, attributes (nested subgraphs recursively), output
  types and where each input comes from (a subgraph input by position, a node output, a
  capture by its position among the layer's captures, a constant by shape and dtype, and by
  value when it has at most ``VALUE_MAX_ELEMENTS`` elements). Two nodes whose subgraphs
  differ only in names share the key; a different body gives another.
- *Benchmarks.* A subgraph travels in the layer's network as a canonical ``GraphProto``
  (``encode_subgraph``): tensor names numbered in order of appearance, captures named
  ``CAPTURE_PREFIX{k}``, node names and docs dropped, constants above the value limit
  stripped to shape and dtype (synthetic data is filled in when the benchmark is built).
  ``decode_subgraph`` binds the captures to the names the built model gives them.

A ``Loop`` is a layer only when its iterations are a constant the benchmark can repeat
(``loop_trip_reason``): a runtime trip count, none or an unbounded one (a while loop), a
runtime condition, or a body whose condition reads the data (an early exit) would make the
benchmark measure some other number of iterations than the model runs.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable, Collection, Mapping, Sequence

import numpy as np
import onnx
from onnx import AttributeProto, numpy_helper
from onnx.external_data_helper import set_external_data

from benanza.model.identity import MODEL_KEY_VERSION, GraphScope
from benanza.model.keys import VALUE_MAX_ELEMENTS, stable_id
from benanza.model.load import has_data
from benanza.model.walks import (
    RANDOM_OPS,
    captured_reads,
    graphs_of,
    node_reads,
    subgraph_attributes,
    topological_nodes,
)

CAPTURE_PREFIX = "benanza_capture"
SUBGRAPH_KEY_VERSION = 1  # bump when the description or its canonical form changes
# A trip count at or above this is an exporter's "no limit" (INT32_MAX, INT64_MAX): the body decides
UNBOUNDED_TRIP_COUNT = 2**31 - 1
_STRIPPED = "benanza-synthetic"  # external-data location of a stripped constant (filled when built)


def subgraph_domains(node: onnx.NodeProto) -> set[str]:
    """Domains of the nodes inside the node's subgraphs, nested ones included ("" for ONNX's own)."""
    out: set[str] = set()
    for attr in subgraph_attributes(node):
        for sub in graphs_of(attr):
            for inner in sub.node:
                out.add("" if inner.domain in ("", "ai.onnx") else inner.domain)
                out |= subgraph_domains(inner)
    return out


def unbounded_loop_reason(
    node: onnx.NodeProto,
    values: Mapping[str, Sequence | None],
    value_of: Callable[[str], np.ndarray | None] | None = None,
    opset: int = 0,
) -> str | None:
    """Why a ``Loop`` has no bound on its iterations but its body's condition (so running it may not end), or None.

    None too where that condition counts and its iterations are found without running the loop
    (``counted_iterations``, given ``value_of`` and the ``opset``): a TensorFlow ``tf.while_loop`` with a
    Python bound and no ``maximum_iterations`` (``cond = i < 10``). A condition that is the same whatever the
    data may still never turn false (one passed through): it is followed alone, up to a cap, never run whole.

    Args:
        values: input name -> its flattened values when it is a constant, else absent or None.
    """
    if not _unbounded(node, values):
        return None
    if value_of is not None and counted_iterations(node, value_of, opset) is not None:
        return None
    if not node.input or not node.input[0]:
        return "Loop without a trip count M: the body's condition decides the iterations at run time"
    m = int(values[node.input[0]][0])
    return f"Loop's trip count M is {m} (no limit): the body's condition decides the iterations at run time"


def _unbounded(node: onnx.NodeProto, values: Mapping[str, Sequence | None]) -> bool:
    """Whether a ``Loop`` has no trip count M, or one that means no limit (``UNBOUNDED_TRIP_COUNT`` and above)."""
    trip = node.input[0] if node.input else ""
    m = values.get(trip) if trip else None
    return not trip or (m is not None and int(m[0]) >= UNBOUNDED_TRIP_COUNT)


def loop_trip_reason(
    node: onnx.NodeProto,
    values: Mapping[str, tuple | None],
    outer_constants: Collection[str] = (),
    value_of: Callable[[str], np.ndarray | None] | None = None,
    opset: int = 0,
) -> str | None:
    """Why a ``Loop`` cannot be benchmarked as one layer (its iterations are not fixed), or None.

    Args:
        values: input name -> its flattened values when it is a constant value, else None.
        outer_constants: the enclosing graph's constants (its body's condition may read them).
        value_of, opset: for a while loop whose condition counts (``unbounded_loop_reason``).
    """
    if (why := unbounded_loop_reason(node, values, value_of, opset)) is not None:
        return why
    if _unbounded(node, values):
        return None  # a while loop whose iterations its counting condition gave
    trip = node.input[0]
    cond = node.input[1] if len(node.input) > 1 else ""
    if values.get(trip) is None:
        return f"Loop's trip count M '{trip}' is a runtime value; its iterations, and its cost, depend on it"
    if cond and values.get(cond) is None:
        return f"Loop's condition '{cond}' is a runtime value; whether it runs at all depends on it"
    if not counts(node, values, outer_constants):
        limit = int(values[trip][0])
        return f"Loop's body computes its condition from data (an early exit): they decide how many of its {limit} run"
    return None


def counts(node: onnx.NodeProto, values: Mapping[str, Sequence | None], outer_constants: Collection[str]) -> bool:
    """Whether a ``Loop`` runs as many iterations whatever the data: its first condition a constant (or none)
    and its body's computed from the iteration number, constants and loop-carried values that start from
    constants and follow from such values alone (``_condition_is_fixed``)."""
    cond = node.input[1] if len(node.input) > 1 else ""
    if cond and values.get(cond) is None and cond not in outer_constants:
        return False
    body = next((a.g for a in subgraph_attributes(node) if a.name == "body"), None)
    if body is None:
        return False
    # which loop-carried values start from a constant (a counter's 0, a limit passed through)
    initial = [bool(x) and (values.get(x) is not None or x in outer_constants) for x in node.input[2:]]
    return _condition_is_fixed(body, outer_constants, initial)


def _condition_is_fixed(
    body: onnx.GraphProto, outer_constants: Collection[str], initial_fixed: Sequence[bool] = ()
) -> bool:
    """Whether the body's condition output follows from the iteration number and constants alone.

    Then the iterations are the same whatever the data (``cond = i < 3``). So is a loop-carried value
    that starts from a constant (``initial_fixed``, per carried value) and that each iteration computes from
    such values, the iteration number and constants alone: a counter and the limit a ``while`` loop carries,
    as tf2onnx exports every TensorFlow ``while_loop`` (``tf.map_fn``: ``cond = i + 1 < n``), which was
    refused as "an early exit on the data". A condition that reads any other carried value, a scan input or
    an outer activation (an early exit on the data) is not, nor one drawn at random.
    """
    if len(body.input) < 2 or not body.output:
        return True
    return _fixed_carried(body, outer_constants, initial_fixed) is not None


def _fixed_carried(
    body: onnx.GraphProto, outer_constants: Collection[str], initial_fixed: Sequence[bool]
) -> tuple[set[str], set[str]] | None:
    """(the carried values that follow from constants alone, every tensor that does) where the body's condition
    is among those tensors, else None (``_condition_is_fixed``)."""
    base = {body.input[0].name, body.input[1].name} | {t.name for t in body.initializer}
    carried = [vi.name for vi in body.input[2:]]
    nexts = [o.name for o in body.output[1 : 1 + len(carried)]]
    candidates = {name for name, fixed0 in zip(carried, initial_fixed, strict=False) if fixed0}
    while True:  # drop the carried values whose next one is not fixed, until none is dropped
        fixed = _fixed_tensors(body, base | candidates, outer_constants)
        kept = {name for name, nxt in zip(carried, nexts, strict=False) if name in candidates and nxt in fixed}
        if kept == candidates:
            return (candidates, fixed) if body.output[0].name in fixed else None
        candidates = kept


# the iterations a while loop's counting condition is followed for, at most (``counted_iterations``)
COUNTED_ITERATIONS_CAP = 10_000


def counted_iterations(node: onnx.NodeProto, value_of: Callable[[str], np.ndarray | None], opset: int) -> int | None:
    """How many iterations a ``Loop`` runs whose condition counts (``counts``), its trip count absent or no limit
    (a TensorFlow ``tf.while_loop(lambda i, ...: i < 10, ...)`` without ``maximum_iterations``, as tf2onnx
    exports it): the body's condition and the carried values it follows from, evaluated alone (ONNX's reference
    evaluator) from their constant starts. None where a value it reads is not known here, or where it is still
    true after ``COUNTED_ITERATIONS_CAP`` iterations (a condition passed through never turns false).

    Args:
        value_of: a constant's value by name (the node's inputs, the outer tensors its body reads), else None.
        opset: the model's default-domain opset (the body's).
    """
    from onnx.reference import ReferenceEvaluator

    body = next((a.g for a in subgraph_attributes(node) if a.name == "body"), None)
    cond_name = node.input[1] if len(node.input) > 1 else ""
    starts = [value_of(x) if x else None for x in node.input[2:]]
    if body is None or len(body.input) < 2 or (cond_name and value_of(cond_name) is None):
        return None
    outer = {x for x in captured_reads(body) if value_of(x) is not None}
    found = _fixed_carried(body, outer, [v is not None for v in starts])
    if found is None:
        return None
    candidates, fixed = found
    carried = [vi.name for vi in body.input[2:]]
    nexts = {name: o.name for name, o in zip(carried, body.output[1:], strict=False)}
    available = {vi.name for vi in body.input} | {t.name for t in body.initializer}
    nodes = [n for n in topological_nodes(body.node, available) if all(o in fixed for o in n.output if o)]
    reads = {x for n in nodes for x in node_reads(n)}
    inner = {vi.name for vi in body.input} | {o for n in nodes for o in n.output} | {t.name for t in body.initializer}
    graph = onnx.helper.make_graph(
        nodes,
        "counter",
        [body.input[0], body.input[1], *(vi for vi in body.input[2:] if vi.name in candidates)],
        [
            onnx.ValueInfoProto(name=body.output[0].name),
            *(onnx.ValueInfoProto(name=nexts[c]) for c in sorted(candidates)),
        ],
        [*body.initializer, *(numpy_helper.from_array(value_of(x), x) for x in sorted(reads - inner))],
    )
    opsets = [onnx.helper.make_opsetid("", opset)]
    try:
        evaluator = ReferenceEvaluator(onnx.helper.make_model(graph, opset_imports=opsets))
        state = {c: np.asarray(starts[carried.index(c)]) for c in candidates}
        cond = bool(np.asarray(value_of(cond_name)).ravel()[0]) if cond_name else True
        count = 0
        while cond and count < COUNTED_ITERATIONS_CAP:
            feeds = {body.input[0].name: np.array(count, np.int64), body.input[1].name: np.array(cond), **state}
            out = evaluator.run(None, feeds)
            cond = bool(np.asarray(out[0]).ravel()[0])
            state = {c: np.asarray(v) for c, v in zip(sorted(candidates), out[1:], strict=True)}
            count += 1
    except Exception:  # an op the reference evaluator lacks, a shape it refuses: not known here
        return None
    return None if cond else count


def _fixed_tensors(body: onnx.GraphProto, fixed: set[str], outer_constants: Collection[str]) -> set[str]:
    """``fixed`` and every tensor of ``body`` computed from them and constants alone (no random op)."""
    fixed = set(fixed)
    available = {vi.name for vi in body.input} | {t.name for t in body.initializer}
    for node in topological_nodes(body.node, available):
        reads = node_reads(node)
        if node.op_type not in RANDOM_OPS and all(x in fixed or x in outer_constants for x in reads):
            fixed.update(o for o in node.output if o)
    return fixed


class _KeyScope(GraphScope):
    """The identity's scope, with a subgraph's small constants described by value (as layer keys do)."""

    def const_ref(self, tensor: onnx.TensorProto) -> list:
        ref = super().const_ref(tensor)
        if ref[3] is None and math.prod(tensor.dims) <= VALUE_MAX_ELEMENTS and has_data(tensor):
            ref[3] = numpy_helper.to_array(tensor).ravel().tolist()
        return ref


def subgraph_digest(graph: onnx.GraphProto, captures: Sequence[str], opsets: Mapping[str, int]) -> str:
    """16 hex digits over the canonical description of one subgraph (see the module docstring).

    Args:
        captures: the layer's captured outer names; a capture is described by its position here.
    """
    root = _KeyScope(onnx.GraphProto(), None, opsets)
    root.refs.update((name, ["capture", k]) for k, name in enumerate(captures))
    return stable_id({"subgraph": root.subgraph(graph)}, version=SUBGRAPH_KEY_VERSION * 100 + MODEL_KEY_VERSION)


def encode_subgraph(graph: onnx.GraphProto, captures: Sequence[str]) -> str:
    """The canonical subgraph a benchmark network carries (base64 of its ``GraphProto``)."""
    names = {x: f"{CAPTURE_PREFIX}{k}" for k, x in enumerate(captures)}
    canonical = onnx.GraphProto()
    canonical.CopyFrom(graph)
    _canonicalise(canonical, names)
    return base64.b64encode(canonical.SerializeToString(deterministic=True)).decode("ascii")


def decode_subgraph(encoded: str, bound: Sequence[str], renamed: Mapping[str, str] | None = None) -> onnx.GraphProto:
    """A carried subgraph with capture ``k`` read from ``bound[k]`` (and any name in ``renamed`` renamed)."""
    graph = onnx.GraphProto()
    graph.ParseFromString(base64.b64decode(encoded))
    mapping = {f"{CAPTURE_PREFIX}{k}": name for k, name in enumerate(bound)}
    mapping.update(renamed or {})
    rename_reads(graph, mapping)
    return graph


def rename_reads(graph: onnx.GraphProto, mapping: Mapping[str, str]) -> None:
    """Rename, in place, the outer tensors ``graph`` and its nested subgraphs read."""
    for node in graph.node:
        for k, x in enumerate(node.input):
            if x in mapping:
                node.input[k] = mapping[x]
        for attr in subgraph_attributes(node):
            for sub in graphs_of(attr):
                rename_reads(sub, mapping)
    for out in graph.output:
        if out.name in mapping:
            out.name = mapping[out.name]


def _canonicalise(graph: onnx.GraphProto, names: dict[str, str]) -> None:
    """Rename every tensor in order of appearance, drop names and docs, strip large constants; in place."""

    def canon(x: str) -> str:
        if not x:
            return x
        if x not in names:
            names[x] = f"t{len(names)}"
        return names[x]

    graph.name = "body"
    graph.doc_string = ""
    del graph.value_info[:]  # the runtime infers them; their names and symbolic dims differ between exports
    for vi in (*graph.input, *graph.output):
        vi.doc_string = ""
        if vi.type.HasField("tensor_type"):
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_param"):
                    d.ClearField("dim_param")
                d.denotation = ""
    for vi in graph.input:
        vi.name = canon(vi.name)
    for tensor in graph.initializer:
        tensor.name = canon(tensor.name)
        _strip_if_large(tensor)
    for sparse in graph.sparse_initializer:
        sparse.values.name = canon(sparse.values.name)
    for node in graph.node:
        node.name = ""
        node.doc_string = ""
        for k, x in enumerate(node.input):
            node.input[k] = canon(x)
        for attr in node.attribute:
            if attr.type == AttributeProto.TENSOR:
                _strip_if_large(attr.t)
            for sub in graphs_of(attr) if attr.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) else ():
                _canonicalise(sub, names)
        for k, x in enumerate(node.output):
            node.output[k] = canon(x)
    for out in graph.output:
        out.name = canon(out.name)


def _strip_if_large(tensor: onnx.TensorProto) -> None:
    """Keep only shape and dtype of a constant above the value limit: a network carries no weights."""
    if math.prod(tensor.dims) <= VALUE_MAX_ELEMENTS or not has_data(tensor):
        return
    name = tensor.name
    dims, dtype = list(tensor.dims), tensor.data_type
    tensor.Clear()
    tensor.name, tensor.data_type = name, dtype
    tensor.dims.extend(dims)
    tensor.raw_data = b""  # set_external_data needs the field present
    set_external_data(tensor, location=_STRIPPED)
