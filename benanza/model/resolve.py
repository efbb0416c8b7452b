"""Shapes ONNX shape inference leaves unknown, resolved with stronger tools; shape computations folded.

After binding, the onnxscript optimizer and ONNX shape inference with data propagation shape
most graphs (``benanza.model.shapes``). What they leave unknown is resolved here, node by node
in topological order, with the first tool that shapes the node:

1. ONNX's own per-node inference, given the value of every input that is a constant. The
   whole-graph pass misses values that flow through ops it does not propagate, and every value
   computed from a shape it learns only here;
2. ONNX Runtime's symbolic shape inference, for ops outside ONNX's domain: it knows ONNX
   Runtime's contrib ops (``com.microsoft::QLinearAdd``). It is not asked about ONNX ops: for
   an ONNX op whose shape ONNX cannot infer from shapes and constants it guesses (equal Split
   parts, squeezing every 1) where a value decides the shape;
3. ONNX Runtime itself, running the one node on synthetic inputs of the known shapes, its
   constant inputs with their real values. Memory is bounded by one node's tensors, and a node
   the memory guard (``benanza.bench.memory``) says cannot fit is not run, with the reason. The
   node runs once more per runtime input with only that input's synthetic values changed: a
   shape that changes, or a run that fails only then, means that input's value decides it.

4. ONNX Runtime running the whole model, for an output whose length its data decides
   (``LENGTH_BY_DATA``: the boxes NonMaxSuppression keeps, NonZero's count) and no setting:
   once, on the inputs its benchmarks and its end to end get (``run_values.model_feeds``), the
   model's synthetic weights where the file holds none, memory guarded as a node's run; the
   length it gives is the one benchmarked, and ``ShapeReport.by_data`` says so per tensor. The same
   run shapes a shape that inputs given their values alone decide (``--input``: ``_carried``) and the
   outputs of an ``If`` whose branch the data decides (``ShapeReport.data_work``: what reads them is
   benchmarked, and the ``If`` itself on what it read in that run, ``ShapeReport.work_values``), as a
   ``NonMaxSuppression`` is on the boxes and scores of that run (``WORK_BY_DATA``: its work is theirs).
   The same run gives the values of the settings the model computes from data (``_data_settings``: a
   ``Reshape`` to the frames a text-to-speech model's float durations add up to), which every layer that
   reads one carries (``ShapeReport.setting_values``), and shapes what such a setting decides (a ``Range``
   to that number of frames).

A tensor is *runtime* when its value depends on a graph input's value. ``Shape`` and ``Size``
read only shapes, so once inputs are bound their outputs, and everything computed from them
and constants, are constants: the walk evaluates each small one (ONNX Runtime), and the
nodes that computed them are replaced by initializers, as the optimizer folds the rest. Shape
computations are thus never layers, however their shapes were found. A tensor whose shape
depends on a runtime value (a Reshape target, TopK's k fed at run time, random values) has
no shape that binding input shapes can give: it is left unknown with that reason, and so is
everything computed from it; a length the data decides is the model's run's (4. above).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from benanza.crashes import crashed, native
from benanza.errors import one_line
from benanza.host_memory import refusal, system_memory
from benanza.model.constants import constant_value
from benanza.model.control_flow import unbounded_loop_reason
from benanza.model.dtypes import ort_value, proto_bytes, tensor_bytes
from benanza.model.extract import (
    RANDOM_OPS,
    SHAPE_READERS,
    WORK_VALUE_MAX_ELEMENTS,
    dtype_name,
    node_reads,
    schema_of,
    tensor_type_of,
    topological_nodes,
)
from benanza.model.graph import SHAPE_METHODS, ShapeReport
from benanza.model.held_weights import hold_weights
from benanza.model.keys import MAX_RUN_ELEMENTS, VALUE_MAX_ELEMENTS
from benanza.model.load import has_data, held_apart, on_file
from benanza.model.run_values import INTEGER_TYPES, carried_by_value, model_feeds
from benanza.model.schemas import Differentiation
from benanza.model.walks import LENGTH_BY_DATA, WORK_BY_DATA, subgraphs_hold

log = logging.getLogger(__name__)

FOLD_MAX_ELEMENTS = 8192  # constants evaluated and folded; larger ones are weights, shaped only
_SYMBOLIC_MAX_PASSES = 8
_NO_KERNEL = ("NOT_IMPLEMENTED", "Could not find an implementation", "is not a registered function/op")
_INTEGER_TYPES = frozenset(
    f"tensor({t})" for t in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool")
)

# Copies of a node's tensors ONNX Runtime may hold while it runs to show its output shapes: the
# allowance the benchmarks' memory guard makes for activations (``bench.memory.ACTIVATION_COPIES``).
RUN_COPIES = 4

_LENGTH_RUNS = 16  # model runs at most, one per link of a chain of lengths by data (a Faster R-CNN took 5)


def needs_resolution(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]] | None = None) -> bool:
    """Whether a used tensor's shape is unknown, or a shape computation is left to fold.

    ``shapes``: ``known_shapes(model)`` where the caller has it already.
    """
    shapes = known_shapes(model) if shapes is None else shapes
    used = _used(model)
    for node in model.graph.node:
        if node.op_type in SHAPE_READERS and node.domain in ("", "ai.onnx"):
            return True
        if any(o and o in used and o not in shapes for o in node.output):
            return True
    return False


def resolve_if_needed(
    model: onnx.ModelProto,
    path: object,
    *,
    memory: Callable[[], Any] | None = None,
    given: Mapping[str, np.ndarray] | None = None,
) -> tuple[onnx.ModelProto, ShapeReport]:
    """``resolve_shapes`` where ``needs_resolution`` says so; else ``model`` as it is, with its ``shape_report``."""
    shapes = known_shapes(model)
    if not needs_resolution(model, shapes):
        return model, shape_report(model, shapes=shapes)
    return resolve_shapes(model, path, memory=memory, given=given)


def shape_report(
    model: onnx.ModelProto,
    methods: Mapping[str, str] | None = None,
    reasons: Mapping[str, str] | None = None,
    *,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
    by_data: Mapping[str, str] | None = None,
    data_work: Iterable[str] = (),
    decided: Iterable[str] = (),
    work_values: Mapping[str, np.ndarray] | None = None,
    setting_values: Mapping[str, np.ndarray] | None = None,
) -> ShapeReport:
    """Per method, how many node outputs of ``model`` it shaped (``onnx`` where none other is named).

    ``shapes``: ``known_shapes(model)`` where the caller has it already.
    """
    shapes = known_shapes(model) if shapes is None else shapes
    methods = methods or {}
    counts = dict.fromkeys(SHAPE_METHODS, 0)
    for node in model.graph.node:
        for o in node.output:
            if o and o in shapes:
                counts[methods.get(o, "onnx")] += 1
    return ShapeReport(
        shaped_by=tuple((m, n) for m, n in counts.items() if n),
        unresolved=tuple(sorted((reasons or {}).items())),
        by_data=tuple(sorted((by_data or {}).items())),
        data_work=tuple(sorted(data_work)),
        decided=tuple(sorted(decided)),
        work_values=tuple(sorted((work_values or {}).items())),
        setting_values=tuple(sorted((setting_values or {}).items())),
    )


def known_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Every tensor of the graph whose shape is fully known (inputs, initializers, value infos, outputs)."""
    out: dict[str, tuple[int, ...]] = {i.name: tuple(i.dims) for i in model.graph.initializer}
    for vi in (*model.graph.input, *model.graph.value_info, *model.graph.output):
        tensor = tensor_type_of(vi.type)
        if tensor is not None and tensor.HasField("shape"):
            dims = tensor.shape.dim
            if all(d.HasField("dim_value") for d in dims):
                out.setdefault(vi.name, tuple(d.dim_value for d in dims))
    return out


def resolve_shapes(
    model: onnx.ModelProto,
    path: object,
    *,
    memory: Callable[[], Any] | None = None,
    given: Mapping[str, np.ndarray] | None = None,
) -> tuple[onnx.ModelProto, ShapeReport]:
    """Shape what inference left unknown and fold shape computations (see the module docstring).

    Args:
        model: a bound, folded and shape-inferred model (``shapes.fold_and_infer``).
        path: the model's file, for log messages.
        memory: returns the system's memory now (``benanza.host_memory.SystemMemory``), which
            decides whether ONNX Runtime may run a node; this machine's by default.
        given: runtime inputs given their values (``--input``: ``model.given_inputs``): the model's run is
            fed them, and a shape that they alone decide is taken from that run.
    """
    walk = _Walk(model, memory, given)
    walk.run()
    for _ in range(_LENGTH_RUNS):
        if not walk.lengths_from_a_run():
            break
        walk.run()  # what reads them
    resolved = walk.result()
    report = shape_report(
        resolved,
        walk.method,
        walk.unresolved(),
        by_data=walk.by_data,
        data_work=walk.data_work & set(walk.shape),
        decided=walk.decided & set(walk.by_data),
        work_values=walk.work_values,
        setting_values=walk.setting_values,
    )
    if report.unresolved:
        log.info("%s: %d tensors have no shape after resolution", path, len(report.unresolved))
    return resolved, report


def _used(model: onnx.ModelProto) -> set[str]:
    used = {o.name for o in model.graph.output}
    for node in model.graph.node:
        used.update(node_reads(node))
    return used


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute)


def _is_onnx_domain(node: onnx.NodeProto) -> bool:
    return node.domain in ("", "ai.onnx")


def _quoted(names: Iterable[str]) -> str:
    return ", ".join(f"'{n}'" for n in sorted(names))


# control flow whose branch (If) or work (Loop) the model's data may decide: shaped by the model's run and
# benchmarked on what it read there (``_by_data``)
DATA_CONTROL_FLOW = frozenset({"If", "Loop"})


class _Walk:
    """One topological walk over a prepared model: shapes, constant values and reasons per tensor."""

    def __init__(
        self, model: onnx.ModelProto, memory: Callable[[], Any] | None, given: Mapping[str, np.ndarray] | None = None
    ) -> None:
        self.model = model
        self.memory = memory
        self.opsets = {(o.domain if o.domain != "ai.onnx" else ""): o.version for o in model.opset_import}
        self.shape = known_shapes(model)
        self.elem: dict[str, int] = {i.name: i.data_type for i in model.graph.initializer}
        for vi in (*model.graph.input, *model.graph.value_info, *model.graph.output):
            tensor = tensor_type_of(vi.type)
            if tensor is not None and tensor.elem_type:
                self.elem.setdefault(vi.name, tensor.elem_type)
        self.values: dict[str, np.ndarray] = {}
        # structure-only tensors (not those left in their data file, which it holds)
        self.stripped = {i.name for i in model.graph.initializer if not has_data(i) and not on_file(i)}
        for init in model.graph.initializer:
            if math.prod(init.dims) <= FOLD_MAX_ELEMENTS and has_data(init):  # structure-only: no values
                self.values[init.name] = numpy_helper.to_array(init)
        inits = {i.name for i in model.graph.initializer}
        # runtime tensor -> the graph inputs its value depends on ("random" for random generators)
        self.runtime: dict[str, frozenset[str]] = {
            i.name: frozenset({i.name}) for i in model.graph.input if i.name not in inits
        }
        self.model_inputs = frozenset(self.runtime)
        # runtime inputs whose values the model's run is fed (``--input``): what they alone decide, it shapes
        self.given = {name: array for name, array in (given or {}).items() if name in self.runtime}
        self.reasons: dict[str, str] = {}
        self.method: dict[str, str] = {}  # tensor -> the method that shaped it, where not the first ONNX pass
        self.used = _used(model)
        self.evaluated: set[str] = set()  # constants whose values this walk computed
        self.length_by_data: dict[str, str] = {}  # tensor -> why: its length its data decides, to run for
        self.by_data: dict[str, str] = {}  # tensor -> how the model's run shaped it
        # outputs of a layer whose work the data decides: an If's branch, an NMS's boxes (``_by_data``)
        self.data_work: set[str] = set()
        self.decided: set[str] = set()  # outputs whose length or branch the model's data decides (``_by_data``)
        # of ``data_work``: outputs of a layer whose work (not branch) the data decides, an NMS's or a Loop's holding
        # one: benchmarked on synthetic values, as before, where its run's cannot be carried (not left out)
        self.work_kind: set[str] = set()
        self.work_reads: dict[str, list[str]] = {}  # such an output -> what its layer reads (subgraphs too)
        self.work_values: dict[str, np.ndarray] = {}  # what such a layer reads -> its value in the model's run
        # settings computed from data (``_data_settings``) -> their values in the model's run
        self.setting_values: dict[str, np.ndarray] = {}
        self.settings_run: set[str] = set()  # such settings a model's run was asked for (given or not)
        self.data_deciders: set[str] = set()  # settings from data that a probe saw decide a shape (``_by_data``)
        self.nodes = topological_nodes(model.graph.node, inits | {i.name for i in model.graph.input})
        self.producer = {o: node for node in self.nodes for o in node.output if o}

    # ------------------------------------------------------------------ the walk

    def run(self) -> None:
        for node in self.nodes:
            outs = [o for o in node.output if o]
            reads = node_reads(node)
            if node.op_type in SHAPE_READERS and _is_onnx_domain(node):
                # its value is its input's shape: constant once that is known, until then as much a runtime
                # value as the input (a detector's boxes after NonZero: never a synthetic value's shape)
                sources: frozenset[str] | None = (
                    None if node.input[0] in self.shape else self.runtime.get(node.input[0])
                )
            elif node.op_type in RANDOM_OPS:
                sources = frozenset({"random"})
            else:
                runtime = [self.runtime[x] for x in reads if x in self.runtime]
                sources = frozenset().union(*runtime) if runtime else None
            if sources is not None:
                for o in outs:
                    self.runtime[o] = sources
            else:
                for o in outs:  # a walk after the model's run: what a shape it gave makes constant
                    self.runtime.pop(o, None)
            if sources is None and not _has_subgraph(node):
                self._evaluate(node, outs)
            needed = [o for o in outs if o in self.used] or outs
            if all(o in self.shape for o in needed):
                continue
            missing = [x for x in node.input if x and x not in self.shape]
            if missing:
                why = next((self.reasons[x] for x in missing if x in self.reasons), None)
                for o in needed:
                    if why is not None and o not in self.shape:
                        self.reasons[o] = why
                continue
            if self._infer_onnx(node, needed):
                continue
            if not _is_onnx_domain(node) and self._infer_symbolic(node, needed):
                continue
            self._probe(node, needed)

    def unresolved(self) -> dict[str, str]:
        return {t: why for t, why in self.reasons.items() if t not in self.shape}

    # ------------------------------------------------------------------ constants

    def _evaluate(self, node: onnx.NodeProto, outs: list[str]) -> None:
        """Compute the value of a constant node's small outputs (a shape computation, a Constant)."""
        if all(o in self.values for o in outs):
            return
        if node.op_type == "Constant" and len(node.attribute) == 1:
            value = constant_value(node)
            if value is not None:
                if value.size <= FOLD_MAX_ELEMENTS:
                    self._set_value(outs[0], value)
                return
        if node.op_type in SHAPE_READERS and _is_onnx_domain(node):
            shape = self.shape.get(node.input[0])
            if shape is None:
                return
            if node.op_type == "Size":
                self._set_value(outs[0], np.array(math.prod(shape), np.int64))
            else:
                attrs = {a.name: a.i for a in node.attribute}
                rank = len(shape)
                start, end = attrs.get("start", 0), attrs.get("end", rank)
                self._set_value(outs[0], np.array(shape[slice(start, end)], np.int64))
            return
        present = [x for x in node.input if x]
        if any(x not in self.values for x in present):
            return
        if sum(self.values[x].size for x in present) > FOLD_MAX_ELEMENTS:
            return
        self._infer_onnx(node, outs)  # the output's size, before anything runs
        if any(o in self.shape and math.prod(self.shape[o]) > FOLD_MAX_ELEMENTS for o in outs):
            return  # a large constant (a weight): shaped, not evaluated
        model = self._node_model(node, embed=set(present))
        results = constant_outputs(model, f"the constant {node.op_type} {outs[0]!r} alone")
        if results is None:
            return
        for o, value in zip(outs, results, strict=False):
            if isinstance(value, np.ndarray):
                if o not in self.shape:
                    self.method[o] = "onnxruntime"
                if value.size <= FOLD_MAX_ELEMENTS:
                    self._set_value(o, value)
                else:
                    self.shape[o] = tuple(value.shape)

    def _set_value(self, name: str, value: np.ndarray) -> None:
        self.values[name] = value
        self.evaluated.add(name)
        self.shape.setdefault(name, tuple(value.shape))
        self.elem.setdefault(name, helper.np_dtype_to_tensor_dtype(value.dtype))

    # ------------------------------------------------------------------ the three methods

    def _infer_onnx(self, node: onnx.NodeProto, needed: list[str]) -> bool:
        domain = "" if _is_onnx_domain(node) else node.domain
        described = schema_of(node.op_type, self.opsets.get(domain, 0), domain)
        schema = described.onnx_schema if described is not None else None
        if schema is None:  # ONNX's inference knows only ONNX's schemas; contrib ops go to the next method
            return False
        types = {x: self._type_proto(x) for x in node_reads(node) if x in self.shape and x in self.elem}
        data = {
            x: numpy_helper.from_array(self.values[x], x)
            for x in node.input
            if x in self.values and self.values[x].dtype != object
        }
        try:
            inferred = onnx.shape_inference.infer_node_outputs(
                schema, node, types, data, opset_imports=list(self.model.opset_import), ir_version=self.model.ir_version
            )
        except Exception:  # ONNX's inference refuses the node (a type it does not expect): not shaped by it
            return False
        for o, tp in inferred.items():
            tensor = tensor_type_of(tp)
            if o in self.shape or tensor is None or not tensor.HasField("shape"):
                continue
            if all(d.HasField("dim_value") for d in tensor.shape.dim):
                self.shape[o] = tuple(d.dim_value for d in tensor.shape.dim)
                self.elem[o] = tensor.elem_type or self.elem.get(o, 0)
                self.method[o] = "onnx"
        return all(o in self.shape for o in needed)

    def _infer_symbolic(self, node: onnx.NodeProto, needed: list[str]) -> bool:
        shapes = self._one_node(node, embed={x for x in node_reads(node) if x in self.values}).symbolic_shapes(needed)
        if any(shapes.get(o) is None for o in needed):
            return False
        for o in needed:
            self.shape[o], self.elem[o] = shapes[o]
            self.method[o] = "symbolic"
        return True

    def _probe(self, node: onnx.NodeProto, needed: list[str]) -> None:
        """Run the node in ONNX Runtime on synthetic inputs; see which runtime inputs decide its shape.

        Two kinds of runtime input decide a shape without being run: an integer setting of an
        ONNX op that ONNX, knowing every constant and input shape, could not shape (a slot the
        schema types with integers only: axes, a target shape, pads, k; ONNX's inference lacked
        exactly that value, and two synthetic values can coincide in shape, as axes 1 and 2 of
        a 3x2x2 tensor do), and a string (no two synthetic strings can show that words, lengths
        and separators do not matter). An ONNX op that ONNX Runtime cannot run on synthetic
        inputs either is likewise decided by its runtime settings (NonDifferentiable slots, such
        as Resize's scales, first): ONNX's inference knows its own ops and lacked only values.
        """
        reads = [x for x in dict.fromkeys(node_reads(node)) if x]
        if any(x not in self.shape or x not in self.elem for x in reads):
            self._unresolved(needed, "an input's shape or type is unknown (a sequence or an optional value)")
            return
        if node.op_type == "Loop" and _is_onnx_domain(node):  # synthetic data may never end a while loop
            trips = {x: self.values[x].ravel().tolist() for x in node.input[:1] if x in self.values}
            opset = self.opsets.get("", 0)
            if (why := unbounded_loop_reason(node, trips, self.values.get, opset)) is not None:
                self._unresolved(needed, f"not run by ONNX Runtime to find its shape: {why}")
                return
        fed = [x for x in reads if x not in self.values]
        varied = [x for x in fed if x in self.runtime and math.prod(self.shape[x])]  # an empty tensor has no value
        decided = [x for x in varied if self.elem[x] == onnx.TensorProto.STRING]
        if _is_onnx_domain(node) and not _has_subgraph(node):
            decided += [x for x in varied if self._setting(node, x) == 2 and x not in decided]
        if decided:
            self._unresolved(needed, self._depends_on(decided))
            self._by_data(node, needed, decided)
            return
        missing = [x for x in fed if x in self.stripped and (not _is_onnx_domain(node) or self._setting(node, x))]
        if missing and _is_onnx_domain(node):
            # ONNX's inference, which knows its own ops, lacked exactly these settings' values
            self._unresolved(needed, self._stripped_reason(missing))
            return
        uncomputed = [
            x
            for x in fed
            if x not in self.runtime
            and x not in self.stripped
            and (self._setting(node, x) or math.prod(self.shape[x]) <= VALUE_MAX_ELEMENTS)  # a setting's size
        ]
        if uncomputed and _is_onnx_domain(node) and not _has_subgraph(node):
            # a constant setting this walk has no value of: a synthetic one would shape the node wrong, and
            # silently (a Range to the sum of a 1024x1024 mask came out of length 1)
            self._unresolved(needed, self._uncomputed_reason(uncomputed))
            return
        refusal = self._memory_refusal(fed)
        if refusal is not None:
            self._unresolved(needed, f"not run by ONNX Runtime to find its shape: {refusal}")
            return
        named = next((o for o in node.output if o), node.name)
        probe = ("run", f"node {named}")
        if (crash := crashed(*probe)) is not None:  # it crashed the process when run earlier (``benanza.crashes``)
            self._unresolved(needed, f"not run by ONNX Runtime to find its shape: {crash.reason()}")
            return
        deciders: dict[str, list[str]] = {o: [] for o in needed}  # output -> runtime inputs deciding it
        with native(*probe, f"the {node.op_type} {node.name or named!r} alone"):
            try:
                session = _session(self._node_model(node, embed=set(reads) - set(fed)))
            except Exception as exc:
                self._unresolved(needed, self._failure(node, varied, exc))
                return
            rng = np.random.default_rng(0)
            base = {x: (_synthetic(self.shape[x], self.elem[x], rng, variant=False), self.elem[x]) for x in fed}
            shapes, error = _run_shapes(session, base, node.output)
            for x in varied:
                variant = {**base, x: (_synthetic(self.shape[x], self.elem[x], rng, variant=True), self.elem[x])}
                changed, changed_error = _run_shapes(session, variant, node.output)
                for o in needed:
                    if (error is None) != (changed_error is None) or (error is None and changed[o] != shapes[o]):
                        deciders[o].append(x)
            del session  # its teardown is native work too
        for o in needed:
            if deciders[o]:
                self._unresolved([o], self._depends_on(deciders[o]))
                self._by_data(node, [o], deciders[o])
            elif error is None and shapes[o] is not None:
                self.shape[o], self.elem[o] = shapes[o]
                self.method[o] = "onnxruntime"
            elif error is None:
                self._unresolved([o], "its value is not a tensor")
            else:
                failure = self._failure(node, varied, error)
                self._unresolved([o], failure)
                if varied and node.op_type in DATA_CONTROL_FLOW and _is_onnx_domain(node):
                    # what the model's data makes it run (a Resize inside a Loop scaled by box sizes) synthetic
                    # values do not: the model's run may shape it, and its benchmark get what it read there
                    self._by_data(node, [o], varied, why=failure)

    # ------------------------------------------------------------------ lengths the data decides

    def _by_data(self, node: onnx.NodeProto, outs: list[str], deciders: list[str], why: str | None = None) -> None:
        """Mark ``outs`` for the model's run where ``node``'s data, and no setting, decides their length
        (``LENGTH_BY_DATA``), where inputs given their values (``self.given``) alone decide them, or where
        ``node`` is an ``If`` whose branch the model's data decides or a ``Loop`` whose work it decides
        (``DATA_CONTROL_FLOW``: a Keypoint R-CNN's per-box Loop resizes by the boxes' sizes); not where random
        values do.

        Such an ``If`` (torchvision's ``batched_nms``: "no box left?", then an NMS of the boxes) is shaped by
        the run so that what reads it (a two-stage detector's whole second stage) is benchmarked, and what it
        reads is kept from that run (``work_reads``, ``work_values``): its work is its data's, and on
        synthetic boxes an SSDlite's (an NMS of 27,000 candidates) took 423 ms, five times the whole model, so
        its benchmark is fed the run's values (``extract``)."""
        data = LENGTH_BY_DATA.get(node.op_type) if _is_onnx_domain(node) else None
        slots = {i for i, x in enumerate(node.input) if x in deciders}
        sources = self._sources(deciders)
        by_length = data is not None and slots and slots <= data and "random" not in sources
        # given values decide it, and its benchmark gets them: not an op with a subgraph (an If that the data
        # decides, benchmarked alone on synthetic data), nor a setting computed from data (synthetic alone)
        by_given = bool(self.given) and not _has_subgraph(node) and bool(deciders)
        by_given = by_given and all(self._carried(x) for x in deciders)
        # an If the data steers; a Loop where no synthetic value ran it at all (``why``), or whose body holds an
        # op whose length its data decides (a per-image NMS in a Loop over the batch, as tf2onnx exports TF's
        # ``map_fn``): one that ran and changed with its inputs otherwise (a Range's expansion, to its limit) is
        # decided by a setting, as before
        looped = node.op_type == "Loop" and (why is not None or subgraphs_hold(node, LENGTH_BY_DATA))
        control = node.op_type == "If" or looped
        by_branch = control and _is_onnx_domain(node) and bool(sources) and "random" not in sources
        if node.op_type == "Loop":  # a trip count fed as a model input is a setting its caller gives, not data
            by_branch = by_branch and not any(x in self.model_inputs for x in deciders)
        # settings the model computes from data (a Range to the frames a TTS model's durations add up to): the
        # run shapes it, and its benchmark carries their values from that run (``_data_settings``)
        by_setting = _is_onnx_domain(node) and not _has_subgraph(node) and bool(deciders)
        by_setting = by_setting and all(self._from_data(x) for x in deciders)
        if by_setting:
            self.data_deciders.update(deciders)
        if by_length or by_given or by_branch or by_setting:
            for o in outs:
                self.length_by_data[o] = why or self._depends_on(deciders)
        if by_length or by_branch or by_setting:  # not a length given integers alone decide: a benchmark carries those
            self.decided.update(outs)
        # an NMS's work is its boxes' as an If's is its branch's: benchmarked on what it read in the run
        by_work = by_length and node.op_type in WORK_BY_DATA and not by_given
        if (by_branch and not (by_length or by_given)) or by_work:
            self.data_work.update(outs)
            if by_work:
                self.work_kind.update(outs)
            reads = [x for x in node_reads(node) if x]
            self.work_reads.update((o, reads) for o in outs)

    def _carried(self, tensor: str) -> bool:
        """Whether ``tensor`` is a small integer tensor whose value is computed from given inputs and constants
        by integer operations alone, as ``run_values`` computes what a layer carries by value into its benchmark
        (a length input, what a ``Range`` to it reads); not a value computed from data, which a benchmark alone
        is fed synthetic."""
        if not self._small_integer(tensor):
            return False
        for x, node in self._ancestry(tensor):
            if self.elem.get(x) not in INTEGER_TYPES:
                return False
            if x in self.given:
                if self.given[x].size > MAX_RUN_ELEMENTS:
                    return False
            elif node is None or _has_subgraph(node):
                return False
        return True

    def _from_data(self, tensor: str) -> bool:
        """Whether ``tensor`` is a small integer tensor (``carried_by_value``) that the model computes from float
        data by plain ops, everything it is computed from shaped: ``run_values`` leaves it to synthetic values. Not
        from random values; not from integers alone (``run_values`` computes those); not through a ``Shape`` of a
        tensor still unshaped (a detector's ``NonZero`` count: constant once the model's run gives that length,
        folded then) nor through control flow (a while-``Loop`` the probe would not run may never end)."""
        sources = self.runtime.get(tensor)
        if not sources or "random" in sources or not self._small_integer(tensor):
            return False
        floats = False
        for x, node in self._ancestry(tensor):
            if x not in self.shape:
                return False
            if node is not None and (_has_subgraph(node) or (node.op_type in SHAPE_READERS and _is_onnx_domain(node))):
                return False
            floats = floats or self.elem.get(x) not in INTEGER_TYPES
        return floats

    def _small_integer(self, tensor: str) -> bool:
        """A tensor whose values a layer carries into its benchmark (``carried_by_value``)."""
        return tensor in self.elem and carried_by_value(self.shape.get(tensor), dtype_name(self.elem[tensor]))

    def _ancestry(self, tensor: str) -> Iterator[tuple[str, onnx.NodeProto | None]]:
        """``tensor`` and the runtime tensors it is computed from, each once, with the node that writes it (None:
        a model input); constants are left out, and so is what a given input (``--input``) is computed from."""
        seen, todo = set(), [tensor]
        while todo:
            x = todo.pop()
            if x in seen or x not in self.runtime:  # a constant
                continue
            seen.add(x)
            node = self.producer.get(x)
            yield x, node
            if node is not None and x not in self.given:
                todo.extend(r for r in node_reads(node) if r)

    def _data_settings(self) -> list[str]:
        """The settings (a slot ``_setting`` names) of the model's ONNX ops that it computes from data
        (``_from_data``) and no model's run was asked for yet: a layer alone is fed synthetic integers there, which
        is another length (a VITS's Reshape to what its durations add up to, fed [1, 1], failed). The model's run
        gives their values, which every layer that reads one carries (``ShapeReport.setting_values``)."""
        found = [x for x in sorted(self.data_deciders) if x not in self.settings_run]
        for node in self.nodes:
            if not _is_onnx_domain(node) or _has_subgraph(node):
                continue
            for x in node.input:
                if x and x not in found and x not in self.settings_run and x not in self.model_inputs:
                    if self._shapes_by_value(node, x) and self._from_data(x):
                        found.append(x)
        # and the integers they are computed from: a unit that computes a setting inside it (a Slice's end
        # unsqueezed from a frame count) is fed what the setting is computed from, not the setting
        for x in list(found):
            for a, _ in self._ancestry(x):
                if a not in found and a not in self.settings_run and a not in self.model_inputs and self._from_data(a):
                    found.append(a)
        return found

    def _shapes_by_value(self, node: onnx.NodeProto, name: str) -> bool:
        """Whether ``name`` fills a slot of ``node`` that ONNX types with integers alone and that does not index
        (a target shape, axes, pads, repeats, k: ``_setting``), whose value the op's output shape follows; not
        the indices of a Gather, whose values move no shape."""
        if self._setting(node, name) != 2:
            return False
        schema = schema_of(node.op_type, self.opsets.get("", 0), "")
        slots = [schema.inputs[min(i, len(schema.inputs) - 1)] for i, x in enumerate(node.input) if x == name]
        return not any(s.name.lower().endswith("indices") for s in slots)

    def _sources(self, tensors: Iterable[str]) -> frozenset[str]:
        return frozenset().union(*(self.runtime.get(x, frozenset()) for x in tensors))

    def _work_in_subgraphs(self) -> list[str]:
        """Outputs of control flow whose subgraphs hold an op whose work its data decides (``WORK_BY_DATA``: a
        per-image NMS in a ``Loop`` over the batch, as tf2onnx exports ``tf.map_fn``), shaped already (its
        output's length fixed: a sum of the boxes kept), reading runtime data not drawn at random: marked as
        the data decides its work (``data_work``, ``decided``), for the model's run to give what it reads.
        On synthetic boxes its NMS would do other work, as a top-level one does."""
        found = []
        for node in self.nodes:
            outs = [o for o in node.output if o and o in self.used]  # a Loop's unread carried values: unshaped
            if not outs or any(o in self.data_work or o not in self.shape for o in outs):
                continue
            if not (_is_onnx_domain(node) and _has_subgraph(node) and subgraphs_hold(node, WORK_BY_DATA)):
                continue
            reads = [x for x in node_reads(node) if x]
            sources = self._sources(reads)
            if not sources or "random" in sources:
                continue
            for o in outs:
                self.data_work.add(o)
                self.work_kind.add(o)
                self.decided.add(o)
                self.work_reads[o] = reads
            found += outs
        return found

    def lengths_from_a_run(self) -> bool:
        """Shape the tensors whose length their data decides (``LENGTH_BY_DATA``) by running the model once,
        as its benchmarks are fed (``run_values.model_feeds``; synthetic weights where the file holds none);
        True when it shaped any. A run that fails, or that the memory guard refuses, leaves them unshaped,
        with that reason. The same run gives what control flow whose work the data decides reads
        (``_work_in_subgraphs``)."""
        wanted = [o for o in self.length_by_data if o not in self.shape]
        work = self._work_in_subgraphs()
        settings = self._data_settings()
        self.settings_run.update(settings)
        if not wanted and not work and not settings:
            return False
        why = {o: self.length_by_data.pop(o) for o in wanted}
        weights = sum(proto_bytes(t) for t in self.model.graph.initializer)
        inits = {t.name for t in self.model.graph.initializer}
        input_bytes = sum(tensor_bytes(self.shape[x], dtype_name(self.elem[x])) for x in self.model_inputs)
        # the weights twice (the copy that runs), the inputs and activations as a node's run counts them
        refused = refusal(2 * weights + input_bytes * RUN_COPIES, (self.memory or system_memory)())
        if refused is not None:
            for o in wanted:
                self.reasons[o] = f"{why[o]}; the model was not run to see its length: {refused.reason}"
            for o in work:
                self._say_work_in_body(o, f"the model was not run: {refused.reason}")
            return False
        held = held_apart(self.model)  # a copy where it fills or holds weights; the model itself where none
        model = held.proto
        if model is self.model:
            model = onnx.ModelProto()
            model.CopyFrom(self.model)  # outputs are added to it
        # what an If whose branch the data decides reads: its values in this run are what it is benchmarked on,
        # where they are few enough to carry (``WORK_VALUE_MAX_ELEMENTS``; extract says why not where not)
        reads = set()
        for o in (*wanted, *work):
            branch = set(self.work_reads.get(o, ())) - inits
            sizes = [math.prod(self.shape[x]) if x in self.shape else None for x in branch]
            if None not in sizes and sum(sizes) <= WORK_VALUE_MAX_ELEMENTS:
                reads |= branch
        captured = sorted((reads | set(settings)) - self.model_inputs - set(wanted))
        # what reads a setting, shaped already: the run says whether its value shapes them so (``_setting_from_run``)
        reading = {x: [n for n in self.nodes if x in n.input] for x in settings}
        readers = {x: [o for n in nodes for o in n.output if o in self.shape] for x, nodes in reading.items()}
        checked = sorted({o for outs in readers.values() for o in outs} - set(captured) - self.model_inputs)
        captured += checked
        outputs = {o.name for o in model.graph.output}
        model.graph.output.extend(onnx.ValueInfoProto(name=o) for o in (*wanted, *captured) if o not in outputs)
        # drawn for every input, then the given ones substituted: the random values the end to end gets too
        fed = {**model_feeds(model), **self.given}
        feeds = {name: (value, self.elem[name]) for name, value in fed.items()}
        try:  # the session cannot be built, or the run crashed the process earlier (``crashes``)
            with native("run", "model", "the model to find its shapes"):
                session = _session(model, held.weights, held.folder)
                shapes, kept, error = _run_outputs(session, feeds, (*wanted, *captured), keep=reads | set(settings))
                del session  # its teardown is native work too
        except Exception as exc:
            shapes, kept, error = {}, {}, exc
        if error is None:
            self.work_values.update((x, value) for x, value in kept.items() if x in reads)
            read_inputs = {x: fed[x] for x in reads & self.model_inputs if x in fed and fed[x].dtype.kind in "biuf"}
            self.work_values.update(read_inputs)
        on = "the given inputs (--input)" if self.given else "the benchmark inputs"
        for x in settings:
            found = {o: shapes.get(o) for o in readers[x]}
            self._setting_from_run(x, kept.get(x) if error is None else None, on, reading[x], found)
        # why what a layer whose work the data decides reads was not kept (None: it was): on synthetic values then
        not_carried = {o: self._not_carried(o, inits, error) for o in (*wanted, *work) if o in self.work_kind}
        for o in work:
            self._say_work_in_body(o, not_carried[o], on)
        shaped = False
        for o in wanted:
            found = shapes.get(o) if error is None else None
            if found is None:
                failure = one_line(error) if error is not None else "its value is not a tensor"
                self.reasons[o] = f"{why[o]}; the model's run did not give its length: {failure}"
                continue
            self.shape[o], self.elem[o] = found
            self.method[o] = "model"
            shape = "x".join(map(str, found[0])) or "a scalar"
            if o in self.work_kind:
                if not_carried[o] is not None:
                    self.data_work.discard(o)  # its length still the run's (``decided``)
                self.by_data[o] = f"{why[o]}: benchmarked at the length its run on {on} gave, {shape}, " + (
                    "and on the values its inputs had in that run (its work is theirs)"
                    if not_carried[o] is None
                    else f"on synthetic values ({not_carried[o]}): the figure is of other work than the model's"
                )
            elif o in self.data_work:
                self.by_data[o] = (
                    f"{why[o]}, and so does what it runs: shaped by its run on {on}, {shape}; what reads it "
                    f"is benchmarked at that length, the {self.producer[o].op_type} itself on the values its inputs "
                    "had in that run where they can be carried (else it is reported not benchmarked, with the reason)"
                )
            else:
                self.by_data[o] = f"{why[o]}: benchmarked at the length its run on {on} gave, {shape}"
            shaped = True
        return shaped

    def _setting_from_run(
        self,
        tensor: str,
        value: np.ndarray | None,
        on: str,
        nodes: Sequence[onnx.NodeProto],
        read: Mapping[str, tuple[tuple[int, ...], int] | None],
    ) -> None:
        """Keep a setting computed from data (``_data_settings``) at its value in the model's run, said per tensor
        (``by_data``; ``nodes``: those that read it); a run that gave none of the model's shape leaves its
        readers fed synthetic integers. So does
        one where what reads it, shaped before the run (``read``: its outputs' shapes in the run), came out of
        another shape: their shapes, and all that follows from them, are not that value's (a FastSpeech2's
        Slices, shaped on synthetic values that the probe saw shape them alike), and carried into them it
        failed their benchmarks; said too."""
        if value is None or tuple(value.shape) != self.shape.get(tensor):
            return
        readers = sorted({n.op_type for n in nodes})
        # said where an op reads it as a setting; the integers it is computed from are carried unsaid
        said = tensor in self.data_deciders or any(self._shapes_by_value(n, tensor) for n in nodes)
        if any(found is None or found[0] != self.shape[o] for o, found in read.items()):
            if not said:
                return
            self.by_data.setdefault(
                tensor,
                f"a setting of {', '.join(readers)} computed from data: what reads it is shaped here otherwise than "
                f"the model's run on {on} shapes it, and is benchmarked on synthetic values at those shapes",
            )
            return
        self.setting_values[tensor] = value
        if said:
            shown = str(value.ravel().tolist()) if value.size <= 8 else f"{value.size} values"
            self.by_data.setdefault(
                tensor,
                f"a setting of {', '.join(readers)} computed from data, carried at its value in the model's "
                f"run on {on}: {shown}",
            )

    def _not_carried(self, out: str, inits: set[str], error: BaseException | None) -> str | None:
        """Why what the layer writing ``out`` reads was not kept from the model's run, or None where it all was."""
        reads = set(self.work_reads.get(out, ())) - inits
        sizes = [math.prod(self.shape[x]) if x in self.shape else None for x in reads]
        if None not in sizes and sum(sizes) > WORK_VALUE_MAX_ELEMENTS:
            return (
                f"what it reads holds {sum(sizes)} values, more than benanza carries into a benchmark "
                f"({WORK_VALUE_MAX_ELEMENTS})"
            )
        if error is not None:
            return f"the model's run gave none of them: {one_line(error)}"
        missing = sorted(x for x in reads if x not in self.work_values)
        return f"the model's run gave no value of {', '.join(repr(x) for x in missing)}" if missing else None

    def _say_work_in_body(self, out: str, why_not: str | None, on: str = "") -> None:
        """How control flow holding an NMS (``_work_in_subgraphs``) writing ``out`` is benchmarked: on the values
        its inputs had in the model's run on ``on``, or, where ``why_not`` they were not carried, on synthetic ones
        as before (not left out), and then no data-decided layer (its length was never the data's)."""
        node = self.producer[out]
        op = next(n for n in WORK_BY_DATA if subgraphs_hold(node, [n]))
        said = f"the {op} in its {node.op_type}'s body does the work its data decides: benchmarked on"
        if why_not is None:
            self.by_data[out] = f"{said} the values its inputs had in the model's run on {on}"
            return
        self.data_work.discard(out)
        self.decided.discard(out)
        self.by_data[out] = f"{said} synthetic values ({why_not}): the figure is of other work than the model's"

    # ------------------------------------------------------------------ reasons

    def _unresolved(self, outs: list[str], why: str) -> None:
        for o in outs:
            if o not in self.shape:
                self.reasons[o] = why

    @staticmethod
    def _stripped_reason(tensors: list[str]) -> str:
        return (
            f"its shape depends on the value of {_quoted(tensors)}, which the file holds no data for "
            "(a structure-only model keeps small tensors such as shapes and axes in the file)"
        )

    @staticmethod
    def _uncomputed_reason(tensors: list[str]) -> str:
        return (
            f"its shape depends on the value of {_quoted(tensors)}, a constant not computed here (computed from "
            f"more than {FOLD_MAX_ELEMENTS} elements, or by a node ONNX Runtime could not run alone)"
        )

    def _depends_on(self, tensors: Iterable[str]) -> str:
        sources = self._sources(tensors)
        named = sorted(s for s in sources if s != "random")
        parts = []
        if named:
            parts.append(f"the value of runtime input{'s' if len(named) > 1 else ''} {_quoted(named)}")
        if "random" in sources:
            parts.append("random values")
        return f"its shape depends on {' and '.join(parts) or 'runtime values'}"

    def _failure(self, node: onnx.NodeProto, varied: list[str], exc: BaseException) -> str:
        """Why a node ONNX Runtime cannot run on synthetic inputs has no shape."""
        message = one_line(exc)
        label = f"{node.domain}::{node.op_type}" if not _is_onnx_domain(node) else node.op_type
        no_kernel = any(marker in message for marker in _NO_KERNEL)
        if varied and _is_onnx_domain(node) and not _has_subgraph(node):
            ranks = {x: self._setting(node, x) for x in varied}
            best = max(ranks.values())
            evidence = "it has no kernel" if no_kernel else f"it fails on synthetic values: {message}"
            return (
                f"{self._depends_on(x for x in varied if ranks[x] == best)} "
                f"(ONNX cannot infer it without them; in ONNX Runtime {evidence})"
            )
        if no_kernel:
            return f"neither ONNX nor ONNX Runtime can shape {label} (ONNX Runtime has no kernel for it)"
        return f"ONNX Runtime cannot run {label} on synthetic inputs: {message}"

    def _setting(self, node: onnx.NodeProto, name: str) -> int:
        """Whether ``name`` fills a slot that configures the ONNX op: 2 integer-typed, 1 NonDifferentiable, 0 not."""
        schema = schema_of(node.op_type, self.opsets.get("", 0), "")
        if schema is None or not schema.inputs:
            return 0
        for i, x in enumerate(node.input):
            if x == name:
                param = schema.inputs[min(i, len(schema.inputs) - 1)]
                if schema.allowed_types(param) <= _INTEGER_TYPES:
                    return 2
                return 1 if param.differentiation is Differentiation.NON_DIFFERENTIABLE else 0
        return 0

    def _memory_refusal(self, fed: list[str]) -> str | None:
        """The memory guard's reason when the node's synthetic inputs and outputs cannot fit, else None."""
        inputs = sum(tensor_bytes(self.shape[x], dtype_name(self.elem[x])) for x in fed)
        # the outputs are unknown until it runs: counted as large as the inputs, held as activations are
        needed = inputs + inputs * RUN_COPIES
        refused = refusal(needed, (self.memory or system_memory)())
        return refused.reason if refused is not None else None

    # ------------------------------------------------------------------ single-node models

    def _type_proto(self, name: str) -> onnx.TypeProto:
        return helper.make_tensor_type_proto(self.elem[name], list(self.shape[name]))

    def _node_model(self, node: onnx.NodeProto, embed: set[str]) -> onnx.ModelProto:
        """A model of the one node: ``embed``'s values as initializers, every other input a graph input."""
        return self._one_node(node, embed).model()

    def _one_node(self, node: onnx.NodeProto, embed: set[str]) -> OneNode:
        """The node alone at the shapes known here, ``embed``'s values embedded."""
        inputs = {x: (self.shape[x], self.elem[x]) for x in node_reads(node) if x in self.shape and x in self.elem}
        return OneNode(node, inputs, {x: self.values[x] for x in embed}, self.model)

    # ------------------------------------------------------------------ the resolved model

    def result(self) -> onnx.ModelProto:
        """The model with the new shapes as value infos and the evaluated shape computations folded."""
        m = onnx.ModelProto()
        m.CopyFrom(self.model)
        graph_outputs = {o.name for o in m.graph.output}
        folded = [
            n
            for n in m.graph.node
            if n.op_type != "Constant"
            and [o for o in n.output if o]
            and all(o in self.evaluated and o not in graph_outputs for o in n.output if o)
        ]
        if folded:
            gone = {id(n) for n in folded}
            kept = [n for n in m.graph.node if id(n) not in gone]
            read = {x for n in kept for x in node_reads(n)}
            existing = {i.name for i in m.graph.initializer}
            for n in folded:
                for o in n.output:
                    if o and o in read and o not in existing:
                        m.graph.initializer.append(numpy_helper.from_array(self.values[o], o))
            del m.graph.node[:]
            m.graph.node.extend(_without_dead_constants(kept, graph_outputs, set(self.runtime)))
        present = {o for n in m.graph.node for o in n.output if o}
        listed: dict[str, list[onnx.ValueInfoProto]] = {}
        for existing_vi in m.graph.value_info:
            listed.setdefault(existing_vi.name, []).append(existing_vi)
        for name in self.method:
            if name in present and name in self.shape and name in self.elem:
                vi = helper.make_tensor_value_info(name, self.elem[name], list(self.shape[name]))
                if name in listed:
                    for existing_vi in listed[name]:
                        existing_vi.CopyFrom(vi)
                else:
                    m.graph.value_info.append(vi)
        for out in m.graph.output:
            if out.name in self.method and out.name in self.shape and out.name in self.elem:
                out.type.CopyFrom(helper.make_tensor_type_proto(self.elem[out.name], list(self.shape[out.name])))
        return m


def _without_dead_constants(
    nodes: list[onnx.NodeProto], graph_outputs: set[str], runtime: set[str]
) -> list[onnx.NodeProto]:
    """``nodes`` less the constant nodes nothing reads any more (the rest of a folded shape computation).

    A node goes when none of its outputs is runtime, a graph output or read by a node that
    stays; its inputs' readers are then counted down, so a dead chain goes in one pass.
    """
    readers: dict[str, int] = {}
    for n in nodes:
        for x in node_reads(n):
            readers[x] = readers.get(x, 0) + 1
    producers: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            if o:
                producers.setdefault(o, []).append(i)

    def dead(n: onnx.NodeProto) -> bool:
        outs = [o for o in n.output if o]
        return not any(o in runtime for o in outs) and not any(readers.get(o) or o in graph_outputs for o in outs)

    gone: set[int] = set()
    pending = [i for i, n in enumerate(nodes) if dead(n)]
    while pending:
        i = pending.pop()
        if i in gone:
            continue
        gone.add(i)
        for x in node_reads(nodes[i]):
            readers[x] -= 1
            if not readers[x]:
                pending.extend(j for j in producers.get(x, ()) if j not in gone and dead(nodes[j]))
    return [n for i, n in enumerate(nodes) if i not in gone]


def constant_outputs(model: onnx.ModelProto, label: str) -> list[Any] | None:
    """The values of the outputs of ``model``, which computes from constants alone: ONNX Runtime's, run unoptimised
    on one thread and journaled (``benanza.crashes``), else ONNX's reference evaluator's (ONNX Runtime lacks the
    kernel, or crashed); None where neither computes them (said at debug level). ``label``: what is computed."""
    outputs = [o.name for o in model.graph.output]
    try:
        with native("run", f"constant {outputs[0]}", label):
            values, error = _run_values(_session(model), {}, outputs)
        if error is not None:
            raise error
        return [values[o] for o in outputs]
    except Exception:  # ONNX Runtime lacks the kernel (or crashed: ``crashes``): ONNX's evaluator has every op
        try:
            from onnx.reference import ReferenceEvaluator

            return ReferenceEvaluator(model).run(None, {})
        except Exception as exc:
            log.debug("%s not evaluated: %s", label, one_line(exc))
            return None


def _session(model: onnx.ModelProto, held: Mapping[str, np.ndarray] | None = None, folder: str = ""):
    """An unoptimised one-thread CPU session of ``model``; ``held``, ``folder``: its held-apart weights
    (``HeldModel``)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 4
    options.add_session_config_entry("session.disable_prepacking", "1")  # no packed copy of each weight: runs once
    hold_weights(options, held or {}, folder)
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _run_values(
    session: Any, feeds: dict[str, np.ndarray], outputs: Iterable[str]
) -> tuple[dict[str, Any], BaseException | None]:
    """Each output's value from one run, or the run's error."""
    import onnxruntime as ort

    names = [o for o in outputs if o]
    quiet = ort.RunOptions()
    quiet.log_severity_level = 4  # a failing run is an answer here, not an error to log
    try:
        return dict(zip(names, session.run(names, feeds, quiet), strict=True)), None
    except Exception as exc:
        return {}, exc


_LOW_PRECISION_FLOATS = frozenset(
    v for k, v in onnx.TensorProto.DataType.items() if k.startswith(("BFLOAT", "FLOAT8", "FLOAT4"))
)
_ONNX_TYPES = {f"tensor({name.lower()})": value for name, value in onnx.TensorProto.DataType.items()}


def _run_shapes(
    session: Any, feeds: dict[str, tuple[np.ndarray, int]], outputs: Iterable[str]
) -> tuple[dict[str, tuple[tuple[int, ...], int] | None], BaseException | None]:
    """Each output's (shape, element type) from one run (None: not a tensor), or the run's error."""
    shapes, _, error = _run_outputs(session, feeds, outputs)
    return shapes, error


def _run_outputs(
    session: Any, feeds: dict[str, tuple[np.ndarray, int]], outputs: Iterable[str], keep: Iterable[str] = ()
) -> tuple[dict[str, tuple[tuple[int, ...], int] | None], dict[str, np.ndarray], BaseException | None]:
    """Each output's (shape, element type) from one run (None: not a tensor), the values of those in ``keep``
    that numpy holds (not bfloat16 or float8), or the run's error.

    Inputs and outputs travel as ``OrtValue``s, so element types numpy has no type for
    (bfloat16, float8) run too.
    """
    import onnxruntime as ort

    names = [o for o in outputs if o]
    keep = set(keep)
    quiet = ort.RunOptions()
    quiet.log_severity_level = 4  # a failing run is an answer here, not an error to log
    out: dict[str, tuple[tuple[int, ...], int] | None] = {}
    kept: dict[str, np.ndarray] = {}
    if any(array.dtype.kind in "OSU" for array, _ in feeds.values()):  # strings cannot be OrtValues
        values, error = _run_values(session, {x: array for x, (array, _) in feeds.items()}, names)
        for name, value in values.items():
            ok = isinstance(value, np.ndarray)
            out[name] = (tuple(value.shape), helper.np_dtype_to_tensor_dtype(value.dtype)) if ok else None
            if ok and name in keep and value.dtype.kind in "biuf":
                kept[name] = value
        return out, kept, error
    try:
        fed = {x: ort_value(array, elem) for x, (array, elem) in feeds.items()}
        values = session.run_with_ort_values(names, fed, quiet)
    except Exception as exc:
        return {}, {}, exc
    for name, value in zip(names, values, strict=True):
        ok = value.is_tensor() and value.data_type() in _ONNX_TYPES
        out[name] = (tuple(value.shape()), _ONNX_TYPES[value.data_type()]) if ok else None
        if ok and name in keep and _ONNX_TYPES[value.data_type()] not in _LOW_PRECISION_FLOATS:
            try:
                array = value.numpy()
            except Exception:  # a type numpy holds no array of (int4): its value is not kept, the run stands
                continue
            if array.dtype.kind in "biuf":
                kept[name] = array
    return out, kept, None


def _synthetic(shape: tuple[int, ...], elem: int, rng: np.random.Generator, *, variant: bool) -> np.ndarray:
    """Synthetic data of a shape and element type; ``variant`` gives other values of the same kind.

    Floats are random in [0.5, 1.5), their variant zeros (a count of non-zeros, a box overlap,
    a scale change with them); integers are ones, their variant twos (a k, an axis, a size);
    booleans are True, their variant False; strings one word, their variant two.
    """
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    if dtype.kind == "f" or elem in _LOW_PRECISION_FLOATS:
        return np.zeros(shape, dtype) if variant else np.asarray(rng.random(shape) + 0.5).astype(dtype)
    if dtype.kind == "b":
        return np.full(shape, not variant, dtype)
    if dtype.kind in "OSU":
        return np.full(shape, "b c" if variant else "a", object)
    return np.full(shape, 2 if variant else 1, dtype)


Shaped = dict[str, tuple[tuple[int, ...], int] | None]  # tensor -> (shape, element type), None: not shaped


def _present_cache(node: onnx.NodeProto, shapes: Shaped, values: Mapping[str, np.ndarray]) -> Shaped:
    """``GroupQueryAttention``'s present key and value: ONNX Runtime's kernel makes them
    ``max(past length, total_sequence_length)`` long, where its symbolic inference copies the
    past's shape (right only where past and present share one buffer of the maximum length). A
    first step over an empty cache (``--dim past_sequence_length=0``) got a present of length 0,
    and its benchmark failed; a step after 128 tokens one of 128, not 129."""
    total = values.get(node.input[6]) if len(node.input) > 6 and node.input[6] else None
    if total is None or total.size != 1:
        return shapes
    length = int(total.ravel()[0])
    fixed = dict(shapes)
    for name in node.output[1:3]:
        found = fixed.get(name) if name else None
        if found is not None and len(found[0]) == 4:
            shape, elem = found
            fixed[name] = ((*shape[:2], max(shape[2], length), shape[3]), elem)
    return fixed


# Per op: a correction of what ONNX Runtime's symbolic shape inference gives (node, its shapes, the
# walk's known values -> the shapes), where its kernel shapes the op otherwise.
SYMBOLIC_CORRECTIONS: dict[tuple[str, str], Callable[[onnx.NodeProto, Shaped, Mapping[str, np.ndarray]], Shaped]] = {
    ("com.microsoft", "GroupQueryAttention"): _present_cache,
}


@dataclass(frozen=True)
class OneNode:
    """One node of ``of`` alone: the shapes and element types of what it reads (``inputs``) and the values known of
    them (``values``, embedded as initializers), at ``of``'s opsets and IR version."""

    node: onnx.NodeProto
    inputs: Mapping[str, tuple[tuple[int, ...], int]]
    values: Mapping[str, np.ndarray]
    of: onnx.ModelProto

    def model(self) -> onnx.ModelProto:
        """A model of the node: ``values`` as initializers, every other input it reads a graph input of its shape
        and element type in ``inputs`` (left out where not there)."""
        graph_inputs, inits = [], []
        for x in dict.fromkeys(node_reads(self.node)):
            if x in self.values:
                inits.append(numpy_helper.from_array(self.values[x], x))
            elif x in self.inputs:
                shape, elem = self.inputs[x]
                graph_inputs.append(helper.make_tensor_value_info(x, elem, list(shape)))
        outputs = [onnx.ValueInfoProto(name=o) for o in self.node.output if o]
        graph = helper.make_graph([self.node], "benanza_node", graph_inputs, outputs, inits)
        return helper.make_model(graph, opset_imports=list(self.of.opset_import), ir_version=self.of.ir_version)

    def symbolic_shapes(self, needed: list[str]) -> Shaped:
        """ONNX Runtime's symbolic shape inference of the node (an op outside ONNX's domain: it knows ONNX Runtime's
        contrib ops), corrected per op (``SYMBOLIC_CORRECTIONS``): each of ``needed``'s shape and element type, or
        None.

        Remembered per node signature (``_SYMBOLIC_SEEN``): an int4 LLM's 224 ``MatMulNBits`` are a handful of
        signatures, and each inference takes milliseconds.
        """
        key = self._key(needed)
        if key is not None and key in _SYMBOLIC_SEEN:
            return dict(zip(needed, _SYMBOLIC_SEEN[key], strict=True))
        try:
            shapes = _symbolic_shapes(self.model(), needed)
        except Exception as exc:  # symbolic inference raises on ops it does not know how to shape
            log.debug("symbolic shape inference of %s failed: %s", self.node.op_type, one_line(exc))
            shapes = dict.fromkeys(needed)
        correct = SYMBOLIC_CORRECTIONS.get((self.node.domain, self.node.op_type))
        shapes = correct(self.node, shapes, self.values) if correct is not None else shapes
        if key is not None:
            if len(_SYMBOLIC_SEEN) >= _SYMBOLIC_SEEN_MAX:
                _SYMBOLIC_SEEN.clear()
            _SYMBOLIC_SEEN[key] = tuple(shapes.get(o) for o in needed)
        return shapes

    def session_shapes(self, needed: list[str]) -> Shaped:
        """ONNX Runtime's own inference of the node, as it resolves the graph of a session of the node alone
        (nothing runs): each of ``needed``'s shape and element type, or None. For an op outside ONNX's domain that
        its symbolic inference has no rule for (QOperator int8's ``QLinearSoftmax``, ``QLinearConcat``); the
        session is made journaled (``benanza.crashes``), as a node's run is."""
        node = self.node
        named = next((o for o in node.output if o), node.name)
        subject = ("run", f"session of node {named}")
        if crashed(*subject) is not None:
            return dict.fromkeys(needed)
        try:
            with native(*subject, f"a session of the {node.op_type} {node.name or named!r} alone"):
                session = _session(self.model())
        except Exception as exc:  # ONNX Runtime's inference refuses the node at these shapes
            log.debug("ONNX Runtime's inference of %s failed: %s", node.op_type, one_line(exc))
            return dict.fromkeys(needed)
        found = {arg.name: arg for arg in session.get_outputs()}
        out: Shaped = {}
        for name in needed:
            arg = found.get(name)
            dims = arg.shape if arg is not None else None
            # ``[]`` is how a session gives an output it could not shape, as it gives a scalar: unknown here
            known = bool(dims) and all(isinstance(d, int) and d >= 0 for d in dims)
            elem = _ort_element(arg.type) if arg is not None else 0
            out[name] = (tuple(dims), elem) if known and elem else None
        return out

    def _key(self, needed: list[str]) -> tuple[Any, ...] | None:
        """What ``symbolic_shapes`` computes from, without the node's tensor names; None where a value is large or
        a subgraph reads outer tensors by name."""
        node, values = self.node, self.values
        if sum(v.nbytes for v in values.values()) > _SYMBOLIC_KEY_BYTES or any(
            v.dtype == object for v in values.values()
        ):
            return None
        if any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute):
            return None
        reads = tuple(
            (x in values and (values[x].dtype.str, values[x].shape, values[x].tobytes()), self.inputs.get(x))
            if x
            else None
            for x in node.input
        )
        names = list(node.output)
        outputs = tuple(names.index(o) if o in names else o for o in needed)
        opsets = tuple(sorted((o.domain, o.version) for o in self.of.opset_import))
        attributes = tuple(a.SerializeToString(deterministic=True) for a in node.attribute)
        return (node.domain, node.op_type, attributes, reads, outputs, opsets, self.of.ir_version)


def _ort_element(kind: str) -> int:
    """ONNX's element type of ONNX Runtime's ``tensor(uint8)``; 0 for anything else (a sequence, a map)."""
    if not (kind.startswith("tensor(") and kind.endswith(")")):
        return 0
    try:
        return TensorProto.DataType.Value(kind[len("tensor(") : -1].upper())
    except ValueError:
        return 0


# OneNode.symbolic_shapes' results by node signature; values of more bytes than ``_SYMBOLIC_KEY_BYTES`` are not keyed
_SYMBOLIC_SEEN: dict[tuple[Any, ...], tuple[tuple[tuple[int, ...], int] | None, ...]] = {}
_SYMBOLIC_SEEN_MAX = 4096
_SYMBOLIC_KEY_BYTES = 1 << 16


def _symbolic_shapes(model: onnx.ModelProto, needed: list[str]) -> Shaped:
    """ONNX Runtime's symbolic shape inference of a one-node model: each output's concrete shape or None.

    Its public ``infer_shapes`` writes ``sym_shape_infer_temp.onnx`` into the working directory
    when it cannot shape everything; its own steps, called here, keep what it found instead.
    """
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    engine = SymbolicShapeInference(2**31 - 1, False, False, 0)
    engine._preprocess(model)
    for _ in range(_SYMBOLIC_MAX_PASSES):
        if not engine.run_:
            break
        engine._infer_impl()
    out: dict[str, tuple[tuple[int, ...], int] | None] = {}
    for name in needed:
        vi = engine.known_vi_.get(name)
        tensor = tensor_type_of(vi.type) if vi is not None else None
        if tensor is None or not tensor.HasField("shape") or not tensor.elem_type:
            out[name] = None
            continue
        dims = tensor.shape.dim
        ok = all(d.HasField("dim_value") for d in dims)
        out[name] = (tuple(d.dim_value for d in dims), tensor.elem_type) if ok else None
    return out
