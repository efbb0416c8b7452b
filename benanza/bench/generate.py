"""Benchmark generation: models -> plans -> unique ``BenchmarkSpec``s.

A ``ModelPlan`` fixes, for one model at one binding on one runtime, the units the runtime
executes (execution groups), the DLBricks sequences for each granularity G (sequences of
at most G *units*, so no sequence splits a fused kernel) and their keys. The analyzer
rebuilds the same plan to look results up, so planning is deterministic and pure given
the runtime's grouping.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benanza.bench.build import DEFAULT_OPSET
from benanza.bench.cold_weights import weights_read_per_run
from benanza.bench.contract import Runtime
from benanza.bench.memory import graph_memory
from benanza.bench.spec import (
    EXPORTED,
    RUNTIME_DEFAULTS,
    BenchmarkSpec,
    SpecKind,
    canonical_variant,
    exported_key,
    requested_binding,
    runtime_defaults_key,
)
from benanza.crashes import NativeCrash, native
from benanza.errors import PlanningError
from benanza.model.graph import InputKind, Layer, LayerInput, ModelGraph
from benanza.model.identity import MODEL_KEY_VERSION
from benanza.model.keys import stable_id
from benanza.model.load import file_bytes
from benanza.model.names import NamedModel, distinct_names
from benanza.model.network import InputRef, Network, NetworkNode, NetworkOutput, NetworkTensor, network_of
from benanza.model.process import ProcessedModel, process_model
from benanza.model.request import NO_REQUEST, BindingRequest
from benanza.model.subgraphs import find_model_subgraphs


@dataclass(frozen=True)
class ModelPlan:
    """What to measure for one model (at one binding) and how results compose."""

    graph: ModelGraph
    path: str
    batch_size: int
    shapes: Mapping[str, tuple[int, ...]]
    model_key: str
    units: tuple[tuple[int, ...], ...]  # execution groups, ordered by their last layer
    unit_keys: tuple[str, ...]
    sequences: Mapping[int, tuple[tuple[int, ...], ...]] = field(default_factory=dict)  # G -> layer sets
    sequence_keys: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    networks: Mapping[str, Network] = field(default_factory=dict, repr=False)  # key -> network
    requested: Mapping[str, Any] = field(default_factory=dict)  # the batch/shape arguments, to reload the model
    notes: tuple[str, ...] = ()  # what planning decided, for the record: inputs fed, branches, lengths by data
    warnings: tuple[str, ...] = ()  # how the plan departs from what was asked or the runtime's execution
    call_overhead_key: str = ""  # the network that measures one call's fixed cost (``call_overhead_network``)
    values: Mapping[str, int] = field(default_factory=dict)  # inputs bound to a value (``model.steering``)
    fed: Mapping[str, str] = field(default_factory=dict)  # inputs given their values (``GivenInput.label``)
    # its file leaves input dimensions free and runs at this binding as it is: also measured as exported
    exported: bool = False
    file_weight_bytes: int = 0  # its large weights left in their data file (``model.load.on_file``)

    @property
    def model(self) -> str:
        return self.graph.model

    def named(self, name: str) -> ModelPlan:
        """This plan with its model shown as ``name`` (``with_distinct_names``)."""
        return self if name == self.model else replace(self, graph=replace(self.graph, model=name))

    @property
    def not_benchmarked(self) -> tuple[dict[str, str], ...]:
        """Every node of the model that no benchmark covers, with the reason: reported, never dropped."""
        return tuple(
            {"model": self.path, "node": u.node, "op_type": op_label(u.op_type, u.domain), "reason": u.reason}
            for u in self.graph.unsupported
        )


def op_label(op_type: str, domain: str) -> str:
    """``Conv`` for an ONNX op, ``com.example::Frob`` for an op of another domain."""
    return f"{domain}::{op_type}" if domain else op_type


def plan_report(plans: Iterable[ModelPlan]) -> dict[str, list[dict[str, str]]]:
    """What the plans leave out or plan in a lesser way, once per model (batch sizes and runtimes repeat it).

    ``not_benchmarked``: nodes no benchmark covers (a ``Loop`` whose iterations are not fixed,
    ops without a schema, unknown shapes), with the reason. ``planning_warnings``: where a plan departs from what
    was asked or from the runtime's execution (a model planned without its fusion groups, and why; a fixed leading
    dimension rewritten). ``planning_notes``: what planning decided, for the record (the file an input was fed
    from, a length the model's run gave).
    """
    nodes: dict[tuple, dict[str, str]] = {}
    lines: dict[str, dict[tuple, dict[str, str]]] = {"planning_warnings": {}, "planning_notes": {}}
    for plan in plans:
        for entry in plan.not_benchmarked:
            nodes.setdefault(tuple(entry.values()), entry)
        for kind, said in (("planning_warnings", plan.warnings), ("planning_notes", plan.notes)):
            for note in said:
                lines[kind].setdefault((plan.path, note), {"model": plan.path, "note": note})
    return {"not_benchmarked": list(nodes.values()), **{kind: list(found.values()) for kind, found in lines.items()}}


def model_key(graph: ModelGraph) -> str:
    """A model's identity for end-to-end results: its whole graph, every node included.

    A graph extracted from ONNX carries that key (``benanza.model.identity``). A graph made
    otherwise (tests, contracted unit graphs) is keyed by its layers, their wiring, its
    bound inputs and the nodes it could not turn into layers.
    """
    if graph.graph_key:
        return graph.graph_key
    return stable_id(
        {
            "layers": graph.layer_keys,
            "edges": [list(e) for e in graph.edges],
            "inputs": [[list(t.shape), t.dtype] for t in graph.inputs],
            "unsupported": [[u.op_type, u.domain, u.reason] for u in graph.unsupported],
        },
        version=MODEL_KEY_VERSION,
    )


def batch_size_of(graph: ModelGraph) -> int:
    """The leading dimension of the first input (1 for scalars)."""
    for t in graph.inputs:
        if t.shape:
            return t.shape[0]
    return 1


def contracted(graph: ModelGraph, units: Sequence[Sequence[int]], keys: Sequence[str]) -> ModelGraph:
    """A graph whose layers are the execution units, for splitting into sequences."""
    owner = {idx: u for u, members in enumerate(units) for idx in members}
    layers: list[Layer] = []
    edges: set[tuple[int, int]] = set()
    for u, members in enumerate(units):
        inputs: list[LayerInput] = []
        seen: set[str] = set()
        outputs = []
        for idx in members:
            layer = graph.layers[idx]
            outputs.extend(layer.outputs)
            for inp in layer.inputs:
                if inp.kind is not InputKind.ACTIVATION or inp.tensor.name in seen:
                    continue
                if any(inp.tensor.name == o.name for m in members for o in graph.layers[m].outputs):
                    continue
                seen.add(inp.tensor.name)
                inputs.append(inp)
        for idx in members:
            for p in graph.predecessors(idx):
                if owner[p] != u:
                    edges.add((owner[p], u))
        ops = "+".join(graph.layers[i].op_type for i in members)
        layers.append(
            Layer(
                index=u,
                name=f"unit{u}",
                op_type=ops,
                domain="",
                opset=0,
                inputs=tuple(inputs),
                outputs=tuple(outputs),
                attributes=(),
                flops=None,
                bytes_moved=0,
                layer_key=keys[u],
                data_decided=any(graph.layers[i].data_decided for i in members),
            )
        )
    return ModelGraph(graph.model, graph.path, graph.opset, graph.inputs, tuple(layers), tuple(sorted(edges)))


def call_overhead_network(graph: ModelGraph) -> tuple[str, Network]:
    """The network whose call latency is the runtime's fixed cost of one call, and its key.

    One ``Relu`` of one float: its kernel costs nothing next to the call around it (feeding
    the input, running the session, returning the output). Every benchmark of a DLBricks
    sequence pays that cost once and the whole model pays it once, so the composition of n
    sequences counts it n - 1 times too many (``analysis.lower_bound``). Built at the model's
    default-domain opset, so that it has a sink when the model's networks do (``bench/build.py``).

    Keyed by the model too, so that it is measured with the model's own benchmarks (in its
    interleaved group, right after the model itself: ``plan_model`` puts it first). Shared by
    every model, it was measured once with the first model's group and subtracted from the
    others' compositions measured minutes apart, at another speed of the host: a share of a
    small model's composition (ShuffleNet's 136 subtractions, 15% of its latency).
    """
    opset = graph.opset.get("", 0) or DEFAULT_OPSET
    key = stable_id({"call_overhead": "Relu float32 [1]", "opset": opset, "model": model_key(graph)})
    one = NetworkTensor((1,), "float32")
    node = NetworkNode("Relu", "", opset, (), (InputRef.of_input(0),), (one,), layer_key=key)
    return key, Network((one,), (node,), (NetworkOutput(0, 0),), 1)


def plan_model_file(
    path: str | Path,
    runtimes: Sequence[Runtime],
    batches: Sequence[int | None] = (None,),
    request: BindingRequest = NO_REQUEST,
    granularities: Iterable[int] = (),
    *,
    fits_here: bool = True,
) -> list[list[ModelPlan]]:
    """A model file's plans, per runtime (in order) and per batch size; each binding is processed once for all.

    What ``benanza run`` plans on this machine and what the fleet driver plans for every
    runtime its systems use. ``request`` and ``fits_here`` as for ``process_model``.

    Raises:
        BenanzaError: the model cannot be loaded or bound (the fleet reports it and goes on).
    """
    grans = tuple(granularities)
    processed = [process_model(path, batch, request, fits_here=fits_here) for batch in batches]
    return [
        [
            plan_model(model, runtime, grans, batch=batch, request=request)
            for batch, model in zip(batches, processed, strict=True)
        ]
        for runtime in runtimes
    ]


def with_distinct_names(plans: Sequence[ModelPlan], known: Iterable[NamedModel] = ()) -> list[ModelPlan]:
    """The plans with their models named apart from each other and from ``known`` (a store's models).

    Files of one stem in several folders (``<model>/model.onnx``, as onnxruntime-genai and
    Optimum write them) would share a name in every table, report page and selection:
    ``benanza.model.names`` says how each is named instead, and why a stored model keeps its name.
    """
    names = distinct_names([(p.path, p.model_key) for p in plans], known)
    return [p.named(name) for p, name in zip(plans, names, strict=True)]


def plan_model(
    processed: ProcessedModel,
    runtime: Runtime,
    granularities: Iterable[int] = (),
    batch: int | None = None,
    request: BindingRequest = NO_REQUEST,
) -> ModelPlan:
    """The plan of one processed model on ``runtime`` (grouping from the runtime if it can).

    ``batch`` and ``request`` are what it was bound with: a runtime loads the model again with them
    for its end to end (``ModelPlan.requested``).
    """
    graph = processed.graph
    groups: list[list[int]] = [[i] for i in range(len(graph.layers))]
    warnings = processed.warnings()
    if graph.layers:
        try:  # a crash of the process building the runtime's graph is survived (``benanza.crashes``)
            with native("graph", f"{graph.path}|batch={batch}|{runtime.name}", graph.path):
                groups = runtime.execution_groups(graph, processed.proto) or groups
        except PlanningError as exc:  # the layers can still be measured, each alone: said, not hidden
            warnings.append(f"{exc.reason}; planned without its fusion groups, each layer alone")
        except NativeCrash as exc:
            warnings.append(f"building the runtime's optimized graph: {exc}; planned without its fusion groups")
    networks: dict[str, Network] = {}
    unit_keys = []
    for members in groups:
        key, net = network_of(graph, members)
        networks.setdefault(key, net)
        unit_keys.append(key)
    try:
        unit_graph = contracted(graph, groups, unit_keys)
    except ValueError:  # groups that do not respect the topological order: fall back to layers
        warnings.append("the runtime's execution groups do not follow the layer order; planned with each layer alone")
        groups = [[i] for i in range(len(graph.layers))]
        unit_keys = [layer.layer_key for layer in graph.layers]
        networks = {}  # the rejected groups are not benchmarked
        for layer in graph.layers:
            networks.setdefault(layer.layer_key, network_of(graph, [layer.index])[1])
        unit_graph = contracted(graph, groups, unit_keys)
    sequences: dict[int, tuple[tuple[int, ...], ...]] = {}
    sequence_keys: dict[int, tuple[str, ...]] = {}
    for g in sorted(set(granularities)):
        seqs = find_model_subgraphs(unit_graph, g) if graph.layers else []
        layer_sets = []
        keys = []
        for seq in seqs:
            members = sorted(i for u in seq.layers for i in groups[u])
            key, net = network_of(graph, members)
            networks.setdefault(key, net)
            layer_sets.append(tuple(members))
            keys.append(key)
        sequences[g] = tuple(layer_sets)
        sequence_keys[g] = tuple(keys)
    # every single layer too: the unfused kernels behind Benanza's per-layer lower bound
    for layer in graph.layers:
        if layer.layer_key not in networks:
            networks[layer.layer_key] = network_of(graph, [layer.index])[1]
    overhead_key = ""
    if any(sequence_keys.values()):  # what a composition of several sequences subtracts
        overhead_key, overhead = call_overhead_network(graph)
        networks = {overhead_key: overhead, **networks}
    return ModelPlan(
        graph=graph,
        path=graph.path,
        batch_size=batch_size_of(graph),
        shapes={t.name: t.shape for t in graph.inputs},
        model_key=model_key(graph),
        units=tuple(tuple(g) for g in groups),
        unit_keys=tuple(unit_keys),
        sequences=sequences,
        sequence_keys=sequence_keys,
        networks=networks,
        requested=requested_binding(batch, replace(request, inputs=processed.binding.given)),  # those it takes
        values=dict(processed.binding.values),
        fed={name: given.label() for name, given in processed.binding.given.items()},
        exported=processed.binding.exported,
        file_weight_bytes=file_bytes(processed.proto),
        notes=tuple(processed.notes(request)),  # said: a branch, not the whole If; a length the model's run gave
        warnings=tuple(warnings),
        call_overhead_key=overhead_key,
    )


def _kind_of(network: Network, unit_keys: set[str], key: str) -> SpecKind:
    if network.layers == 1:
        return SpecKind.LAYER
    return SpecKind.GROUP if key in unit_keys else SpecKind.SEQUENCE


def _label(network: Network) -> str:
    ops = [n.op_type for n in network.nodes]
    first = network.inputs[0].shape if network.inputs else ()
    shape = "x".join(map(str, first))
    return f"{'+'.join(ops) if len(ops) <= 4 else '+'.join(ops[:3]) + f'+..({len(ops)})'} {shape}".strip()


def specs_for_plan(
    plan: ModelPlan,
    runtime_name: str,
    variant: Mapping[str, Any],
    e2e: bool = False,
    defaults: bool = False,
    exported: bool = False,
) -> list[BenchmarkSpec]:
    """Every spec one plan needs, in the order its interleaved group takes them: the model end to
    end (and, with ``defaults`` too, at its runtime's defaults: ``Runtime.runtime_defaults``; with
    ``exported``, as its file is where it leaves dimensions free: ``Runtime.runs_exported``,
    ``BenchmarkSpec.as_exported``), the call overhead, the execution groups, the sequences, then
    the layers alone.

    A group too large for one chunk (``interleave_max_specs``: DenseNet-121 has 575 specs) is
    cut in that order, so the figures each composition compares (the model, the overhead, the
    units, the sequences) are sampled together in the first chunk as far as they fit, and the
    layers alone, which only the unfused bound sums, go last. The model came last before: the
    fleet measured DenseNet's end to end in a second actor call, apart from its units.
    """
    var = canonical_variant(variant)
    unit_keys = set(plan.unit_keys)
    specs = []
    for key, net in plan.networks.items():
        dtype = net.inputs[0].dtype if net.inputs else net.nodes[0].outputs[0].dtype
        specs.append(
            BenchmarkSpec(
                kind=_kind_of(net, unit_keys, key),
                key=key,
                batch_size=plan.batch_size,
                dtype=dtype,
                runtime=runtime_name,
                variant=var,
                label=_label(net),
                network=net,
            )
        )
    if e2e:
        dtype = plan.graph.inputs[0].dtype if plan.graph.inputs else "float32"
        model = {
            "path": plan.path,
            **plan.requested,
            **graph_memory(plan.graph, plan.file_weight_bytes).to_dict(),
            "read_weight_bytes": weights_read_per_run(plan.graph),
        }
        whole = [(plan.model_key, plan.model, model)]
        if defaults:
            at_defaults = {**model, "session": RUNTIME_DEFAULTS}
            whole.append((runtime_defaults_key(plan.model_key), f"{plan.model} ({RUNTIME_DEFAULTS})", at_defaults))
        if exported and plan.exported:
            as_exported = {**model, "session": EXPORTED}
            whole.append((exported_key(plan.model_key), f"{plan.model} ({EXPORTED})", as_exported))
        specs[:0] = [
            BenchmarkSpec(
                kind=SpecKind.MODEL,
                key=key,
                batch_size=plan.batch_size,
                dtype=dtype,
                runtime=runtime_name,
                variant=var,
                label=label,
                model=info,
            )
            for key, label, info in whole
        ]
    return specs


def unique_specs(specs: Iterable[BenchmarkSpec]) -> list[BenchmarkSpec]:
    """De-duplicate by spec id, keeping the first occurrence (its payload) and the order."""
    out: dict[str, BenchmarkSpec] = {}
    for spec in specs:
        out.setdefault(spec.spec_id, spec)
    return list(out.values())
