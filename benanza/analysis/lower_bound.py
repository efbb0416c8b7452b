"""Lower bounds, DLBricks composition and coverage for one model on one system and stack.

Figures and the statistic behind each (also in every JSON row under ``method``):

- ``sequential_ms``: sum over the runtime's execution units (fused groups and single
  layers) of the median *kernel time* (the runtime's own profiler), each unit counted every
  time it occurs. ``sequential_unfused_ms`` does the same with every layer run alone.
- ``parallel_ms``: the critical path of the layer DAG with those unit kernel times.
- ``composed_ms[G]``: DLBricks' estimate, the sum of the 20% trimmed mean *call latency* of
  the model's sequences of at most G units, less the runtime's fixed cost of a call
  (``call_overhead_ms``) counted once per sequence beyond the first: each sequence measured
  alone paid it, the model pays it once (never more than the cheapest sequence's own latency: an
  overhead measured under another load is capped so, and ``checks`` says it). DLBricks' plain sum is
  ``composed_sum_ms[G]``; a plan stored before the overhead was measured has only the plain sum.
- ``e2e_ms``: the 20% trimmed mean call latency of the whole model in the same runtime and
  settings.
- ``defaults_e2e_ms``: the same at the runtime's defaults where the variant's settings are not
  them (``Runtime.runtime_defaults``: ONNX Runtime's level ``all``, whose layouts span layers, where
  the layers are measured at ``extended``); ``defaults_what`` says what the defaults do. Where it lies
  below the sequential bound beyond the noise of both, ``defaults_notes`` says so: what the defaults
  gain is in no bound here.
- ``exported_e2e_ms``: the same of the model as its file is, where the file leaves input dimensions
  free (``BenchmarkSpec.as_exported``): ``e2e_ms`` runs the model bound, what its shapes make
  constant folded; the export as it is runs those shape computations on every call. Where it lies
  more than 5% above ``e2e_ms``, beyond the noise of both, ``exported_notes`` says by how much: what
  fixing the dimensions (ONNX Runtime's free-dimension overrides, or a static export) saves; more than
  5% below, that binding changed how ONNX Runtime runs the model.

A figure with any input missing is ``None`` (never a sum that counts missing as zero); the
sum over what is present is given separately as ``partial_sequential_ms`` with
``coverage`` and the ``missing`` nodes, each with its reason. Coverage counts every node of
the model that does work: the layers whose unit has data over the layers plus the nodes that
are not layers because benanza cannot benchmark them (a ``Loop`` whose iterations are not
fixed, ops without a schema, unknown shapes). A layer whose benchmark failed (a control-flow
layer whose subgraph holds an op the runtime lacks) is missing with its stored error. A
model with such a node has no lower bound and no composition: the model runs them, the sums
would not; ``coverage_notes`` says so, with the first such node's reason and the partial sum.

Every figure has its 95% interval (``intervals``, ``composed_intervals``): the interval of
the statistic each record stores (``benanza.bench.stats``), derived from the record's raw
samples where it was stored before intervals existed; a sum of units adds their intervals
in quadrature (measured apart, their errors are independent), the parallel bound takes the
intervals of the units on its critical path. A figure built from a measurement that the
harness found disturbed (the host's speed changed while it was measured and a re-measure did
not help) is named in ``disturbed``: it is shown marked, never as fact.

``checks`` lists what contradicts the method in the figures themselves: a lower bound above
the measured end-to-end latency beyond the noise of both (its interval entirely above
e2e's) means a kernel time was inflated (profiler overhead, a unit run cold) or the host
changed speed between measurements; such a bound is reported, never silently clipped.

``departures`` says where the composition is no estimate of this model's latency: a composed
figure more than ``COMPOSITION_TOLERANCE`` (20%) away from the measured end to end, their
intervals apart: more than a composition's ordinary error. Below it, the whole model pays
what its parts measured alone do not (an int8 decoder block at one token composed at 0.46x on
a 2-core VM, one thread: each part, called again and again, found its weights and inputs in the
core's caches; inside the model every memory-bound op ran 1.5-2.5x slower, the whole's profiled
kernel time 2.27x its units'). The message says which it is: the whole's kernel time above its
units' (the kernels ran slower inside the model) or not (the time went between them). Above it,
the parts ran slower than the whole. The zoo's farthest, ShuffleNet at G = 1, sat at 0.85-0.94x.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a ModelPlan or a stored plan (bench/plans.py): analysis loads no model
    from benanza.bench.generate import ModelPlan
    from benanza.bench.plans import StoredPlan
    from benanza.bench.records import BenchmarkRecord

from benanza.bench.spec import exported_key, runtime_defaults_key
from benanza.bench.stats import CONFIDENCE, Interval, interval_of, sum_intervals

# A lower bound takes a low quantile of each unit's kernel samples: interference, cache
# misses and clock dips only ever add time, and the 10th percentile is what the kernel
# achieves repeatedly on this system while one stray sample (the minimum) cannot set it. On a
# shared 2-core machine the zoo's medians summed above end to end for DenseNet (1.06x);
# 10th percentiles did not (0.99x), with every other model at 0.88-0.95x.
KERNEL_STATISTIC = "p10"
# How far a composition may sit from end to end before ``departures`` says it is no estimate of the model
COMPOSITION_TOLERANCE = 0.20
CALL_STATISTIC = "trimmed_mean"

METHOD = {
    "sequential_ms": f"sum of unit kernel time ({KERNEL_STATISTIC}, runtime profiler less its overhead), fused units",
    "sequential_unfused_ms": f"sum of single-layer kernel time ({KERNEL_STATISTIC})",
    "parallel_ms": "critical path of the layer DAG with unit kernel times",
    "composed_ms": f"sum of sequence call latency ({CALL_STATISTIC} 20%), sequences of <= G units, "
    "less (sequences - 1) x the call overhead (at most the cheapest sequence's call latency)",
    "call_overhead_ms": f"call latency ({CALL_STATISTIC} 20%) of one Relu of one float: a call's fixed cost",
    "e2e_ms": f"whole-model call latency ({CALL_STATISTIC} 20%)",
    "defaults_e2e_ms": f"whole-model call latency ({CALL_STATISTIC} 20%) at the runtime's defaults",
    "exported_e2e_ms": f"whole-model call latency ({CALL_STATISTIC} 20%) of the file as exported, dimensions free",
}


@dataclass(frozen=True)
class UnitCost:
    unit: int
    label: str
    layers: tuple[int, ...]
    kernel_ms: float | None
    call_ms: float | None
    kernel_interval: Interval | None = None  # of kernel_ms


@dataclass(frozen=True)
class LowerBound:
    model: str
    system: str
    stack_id: str
    runtime: str
    variant: str | None  # None: the system has no result for this model to take it from
    batch_size: int
    sequential_ms: float | None
    sequential_unfused_ms: float | None
    parallel_ms: float | None
    partial_sequential_ms: float
    e2e_ms: float | None
    e2e_kernel_ms: float | None
    composed_ms: Mapping[int, float | None]
    coverage: float
    missing: tuple[dict[str, Any], ...]
    units: tuple[UnitCost, ...] = field(repr=False, default=())
    checks: tuple[str, ...] = ()
    # figure name ("sequential_ms", "e2e_ms", ...) -> its interval (ms); absent where the figure is None
    intervals: Mapping[str, Interval] = field(default_factory=dict)
    composed_intervals: Mapping[int, Interval] = field(default_factory=dict)
    # figures ("e2e_ms", "composed_ms[2]", ...) with a measurement the harness found disturbed
    disturbed: tuple[str, ...] = ()
    call_overhead_ms: float | None = None  # None: not measured (composed_ms is then DLBricks' plain sum)
    composed_sum_ms: Mapping[int, float | None] = field(default_factory=dict)  # DLBricks' plain sum
    departures: tuple[str, ...] = ()  # compositions that are no estimate of end to end (``composition_departures``)
    defaults_e2e_ms: float | None = None  # end to end at the runtime's defaults (None: not measured)
    defaults_what: str = ""  # what the runtime's defaults do that the variant does not
    defaults_notes: tuple[str, ...] = ()  # the defaults end to end below the bounds (``defaults_below_bound``)
    exported_e2e_ms: float | None = None  # end to end as the file is, its dimensions free (None: not measured)
    exported_notes: tuple[str, ...] = ()  # what the export's free dimensions cost (``free_dims_cost``)
    # why the bounds are missing, and the sum of what is present (``coverage_notes``)
    coverage_notes: tuple[str, ...] = ()
    # why a whole-model figure is missing: its run failed or was skipped (``whole_model_notes``)
    whole_model_notes: tuple[str, ...] = ()
    # conversions the runtime inserts at each unit's edges run alone, left out of its kernel time (None: none)
    units_left_out_ms: float | None = None
    # fused units slower than their layers run alone, by what they fuse (``fusion_notes``)
    fusion_notes: tuple[str, ...] = ()

    @property
    def notes(self) -> tuple[str, ...]:
        """Every message of the row for people, in the order the CLI and the report print them."""
        return (
            *self.coverage_notes,
            *self.whole_model_notes,
            *self.departures,
            *self.fusion_notes,
            *self.defaults_notes,
            *self.exported_notes,
        )

    @property
    def kernels_inside_ratio(self) -> float | None:
        """How much longer the model's kernels ran inside it than its units alone (``kernels_inside_ratio``)."""
        return kernels_inside_ratio(self.intervals.get("e2e_kernel_ms"), self.intervals.get("sequential_ms"))

    def interval(self, figure: str) -> Interval | None:
        """The interval of ``figure``: a field name, or ``composed_ms[G]``."""
        if figure.startswith("composed_ms["):
            return self.composed_intervals.get(int(figure[len("composed_ms[") : -1]))
        return self.intervals.get(figure)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "system": self.system,
            "stack_id": self.stack_id,
            "runtime": self.runtime,
            "variant": self.variant,
            "batch_size": self.batch_size,
            "sequential_ms": self.sequential_ms,
            "sequential_unfused_ms": self.sequential_unfused_ms,
            "parallel_ms": self.parallel_ms,
            "partial_sequential_ms": self.partial_sequential_ms,
            "e2e_ms": self.e2e_ms,
            "e2e_kernel_ms": self.e2e_kernel_ms,
            "composed_ms": {str(g): v for g, v in sorted(self.composed_ms.items())},
            "composed_sum_ms": {str(g): v for g, v in sorted(self.composed_sum_ms.items())},
            "call_overhead_ms": self.call_overhead_ms,
            "coverage": self.coverage,
            "missing": list(self.missing),
            "checks": list(self.checks),
            "departures": list(self.departures),
            "defaults_e2e_ms": self.defaults_e2e_ms,
            "defaults_what": self.defaults_what,
            "defaults_notes": list(self.defaults_notes),
            "exported_e2e_ms": self.exported_e2e_ms,
            "exported_notes": list(self.exported_notes),
            "coverage_notes": list(self.coverage_notes),
            "whole_model_notes": list(self.whole_model_notes),
            "fusion_notes": list(self.fusion_notes),
            "units_left_out_ms": self.units_left_out_ms,
            "intervals": {
                **{name: {"low": i.low, "high": i.high} for name, i in self.intervals.items()},
                "composed_ms": {
                    str(g): {"low": i.low, "high": i.high} for g, i in sorted(self.composed_intervals.items())
                },
            },
            "confidence": CONFIDENCE,
            "disturbed": list(self.disturbed),
            "method": METHOD,
        }


def _ms(record: Any, which: str) -> float | None:
    figure = _figure(record, which)
    return None if figure is None else figure.value


def _figure(record: BenchmarkRecord | None, which: str) -> Interval | None:
    """A record's kernel or call figure in ms with its interval (None: no such figure)."""
    if record is None or record.outcome != "ok":
        return None
    if which == "kernel":
        found = interval_of(record.kernel_stats, KERNEL_STATISTIC, record.kernel_samples)
    else:
        found = interval_of(record.stats, CALL_STATISTIC, record.samples)
    return None if found is None else found.scaled(1e3)


def _total(figures: Iterable[tuple[str, Interval | None]], more: Mapping[str, int] | None = None) -> Interval:
    """The sum of keyed figures: one measurement counted c times adds c times its error (the same
    error each time), distinct measurements add in quadrature (independent errors). ``more``: counts to add to
    keys among ``figures`` (negative: a figure taken off as often)."""
    counts: dict[str, int] = {}
    by_key: dict[str, Interval] = {}
    for key, figure in figures:
        if figure is not None:
            counts[key] = counts.get(key, 0) + 1
            by_key[key] = figure
    for key, extra in (more or {}).items():
        counts[key] += extra
    return sum_intervals(by_key[k].scaled(c) for k, c in counts.items() if c)


def _disturbed(record: BenchmarkRecord | None) -> bool:
    return bool(record is not None and record.stats is not None and record.stats.disturbed)


def lower_bound(
    plan: ModelPlan | StoredPlan,
    results: Mapping[str, Any],
    *,
    system: str,
    stack_id: str,
    runtime: str,
    variant: str | None,
) -> LowerBound:
    """Compose one model's figures from ``results`` (network or model key -> record)."""
    graph = plan.graph
    units: list[UnitCost] = []
    layer_cost = [0.0] * len(graph.layers)
    covered = [False] * len(graph.layers)
    for u, (members, key) in enumerate(zip(plan.units, plan.unit_keys, strict=True)):
        rec = results.get(key)
        kernel_figure, call = _figure(rec, "kernel"), _ms(rec, "call")
        kernel = None if kernel_figure is None else kernel_figure.value
        ops = "+".join(graph.layers[i].op_type for i in members)
        units.append(UnitCost(u, f"{graph.layers[members[-1]].name} ({ops})", members, kernel, call, kernel_figure))
        if kernel is not None:
            layer_cost[members[-1]] = kernel
            for i in members:
                covered[i] = True
    unbenchmarked = graph.unsupported  # nodes the model runs that no benchmark covers
    n = len(graph.layers) + len(unbenchmarked)
    complete = all(covered) and bool(graph.layers) and not unbenchmarked
    partial = math.fsum(u.kernel_ms for u in units if u.kernel_ms is not None)  # exactly rounded, any Python
    unfused = [_ms(results.get(layer.layer_key), "kernel") for layer in graph.layers]
    composed: dict[int, float | None] = {}
    composed_sum: dict[int, float | None] = {}
    composed_intervals: dict[int, Interval] = {}
    disturbed: list[str] = []
    overhead_record = results.get(plan.call_overhead_key) if plan.call_overhead_key else None
    overhead = _figure(overhead_record, "call")
    overhead_checks: list[str] = []
    sequence_calls = {k: _figure(results.get(k), "call") for keys in plan.sequence_keys.values() for k in keys}
    cheapest = fixed_call_cost(overhead, sequence_calls, overhead_checks) if overhead is not None else None
    for g, keys in plan.sequence_keys.items():
        costs = [sequence_calls[k] for k in keys]
        whole = bool(costs) and all(c is not None for c in costs) and not unbenchmarked
        composed[g] = composed_sum[g] = None
        if whole:
            total = _total(zip(keys, costs, strict=True))
            composed_sum[g] = total.value
            if cheapest is not None:  # one of the sequences: its error counted as often as it is, net
                key = cheapest
                total = _total([*zip(keys, costs, strict=True), (key, sequence_calls[key])], {key: -len(keys)})
            elif overhead is not None:  # measured apart: an independent error
                total = sum_intervals([total, overhead.scaled(-(len(keys) - 1))])
            composed[g], composed_intervals[g] = total.value, total
            taken_off = results.get(cheapest) if cheapest is not None else overhead_record  # the fixed cost's record
            if any(_disturbed(results.get(k)) for k in keys) or _disturbed(taken_off):
                disturbed.append(f"composed_ms[{g}]")
    e2e = results.get(plan.model_key)
    unit_of = {i: key for members, key in zip(plan.units, plan.unit_keys, strict=True) for i in members}
    missing = tuple(
        {
            "index": layer.index,
            "name": layer.name,
            "op_type": layer.op_type,
            "domain": layer.domain,
            "layer_key": layer.layer_key,
            "reason": _why_missing(results.get(unit_of[layer.index])),
        }
        for layer, ok in zip(graph.layers, covered, strict=True)
        if not ok
    ) + tuple(
        {"index": None, "name": u.node, "op_type": u.op_type, "domain": u.domain, "layer_key": None, "reason": u.reason}
        for u in unbenchmarked
    )
    sequential = partial if complete else None
    critical = graph.critical_path(layer_cost) if complete else None
    # a path is never longer than the whole; summed by plain additions it can come out one rounding over
    parallel = min(critical.length, partial) if critical is not None else None
    every_layer = bool(unfused) and all(v is not None for v in unfused) and not unbenchmarked
    unfused_ms = sum(v for v in unfused if v is not None) if every_layer else None
    e2e_ms = _ms(e2e, "call")
    unit_records = [results.get(key) for key in plan.unit_keys]
    intervals: dict[str, Interval] = {}
    if complete:
        unit_figures = [_figure(r, "kernel") for r in unit_records]
        intervals["sequential_ms"] = _total(zip(plan.unit_keys, unit_figures, strict=True))
        unit_at = {members[-1]: u for u, members in enumerate(plan.units)}
        assert critical is not None
        on_path = [unit_at[i] for i in critical.layers if i in unit_at]
        intervals["parallel_ms"] = _total((plan.unit_keys[u], unit_figures[u]) for u in on_path)
        if any(_disturbed(r) for r in unit_records):
            disturbed += ["sequential_ms", "parallel_ms"]
    if every_layer:
        intervals["sequential_unfused_ms"] = _total(
            (layer.layer_key, _figure(results.get(layer.layer_key), "kernel")) for layer in graph.layers
        )
        if any(_disturbed(results.get(layer.layer_key)) for layer in graph.layers):
            disturbed.append("sequential_unfused_ms")
    for name, which in (("e2e_ms", "call"), ("e2e_kernel_ms", "kernel")):
        if (figure := _figure(e2e, which)) is not None:
            intervals[name] = figure
    if _disturbed(e2e):
        disturbed += ["e2e_ms", "e2e_kernel_ms"]
    left_out = units_left_out_ms(unit_records)
    at_defaults = results.get(runtime_defaults_key(plan.model_key))
    if (defaults_figure := _figure(at_defaults, "call")) is not None:
        intervals["defaults_e2e_ms"] = defaults_figure
    if _disturbed(at_defaults):
        disturbed.append("defaults_e2e_ms")
    as_exported = results.get(exported_key(plan.model_key))
    if (exported_figure := _figure(as_exported, "call")) is not None:
        intervals["exported_e2e_ms"] = exported_figure
    if _disturbed(as_exported):
        disturbed.append("exported_e2e_ms")
    return LowerBound(
        model=plan.model,
        system=system,
        stack_id=stack_id,
        runtime=runtime,
        variant=variant,
        batch_size=plan.batch_size,
        sequential_ms=sequential,
        sequential_unfused_ms=unfused_ms,
        parallel_ms=parallel,
        partial_sequential_ms=partial,
        e2e_ms=e2e_ms,
        e2e_kernel_ms=_ms(e2e, "kernel"),
        composed_ms=composed,
        composed_sum_ms=composed_sum,
        call_overhead_ms=None if overhead is None else overhead.value,
        coverage=(sum(covered) / n) if n else 0.0,
        missing=missing,
        units=tuple(units),
        checks=bound_checks(
            {name: intervals[name] for name in ("sequential_ms", "parallel_ms") if name in intervals},
            intervals.get("e2e_ms"),
        )
        + tuple(overhead_checks),
        intervals=intervals,
        composed_intervals=composed_intervals,
        disturbed=tuple(disturbed),
        departures=composition_departures(
            composed_intervals,
            intervals.get("e2e_ms"),
            intervals.get("e2e_kernel_ms"),
            intervals.get("sequential_ms"),
            left_out,
        ),
        units_left_out_ms=left_out,
        defaults_e2e_ms=None if defaults_figure is None else defaults_figure.value,
        defaults_what=str((at_defaults.settings or {}).get("defaults", "")) if at_defaults is not None else "",
        defaults_notes=defaults_below_bound(intervals.get("defaults_e2e_ms"), intervals.get("sequential_ms")),
        exported_e2e_ms=None if exported_figure is None else exported_figure.value,
        exported_notes=free_dims_cost(intervals.get("exported_e2e_ms"), intervals.get("e2e_ms")),
        coverage_notes=coverage_notes(missing, n, partial, any(v is not None for v in composed.values())),
        whole_model_notes=whole_model_notes(
            {"its end to end": e2e, "at the runtime's defaults": at_defaults, "as exported": as_exported}
        ),
        fusion_notes=fusion_notes(
            [
                (
                    "+".join(graph.layers[i].op_type for i in members),
                    (key, _figure(results.get(key), "kernel")),
                    [
                        (graph.layers[i].layer_key, _figure(results.get(graph.layers[i].layer_key), "kernel"))
                        for i in members
                    ],
                )
                for members, key in zip(plan.units, plan.unit_keys, strict=True)
                if len(members) > 1
            ]
        ),
    )


# how much slower than their layers alone a runtime's fused units must run, beyond the noise of both, for a note
FUSION_COST_TOLERANCE = 0.20
OVERHEAD_TOLERANCE = 0.20  # a call overhead this much above the cheapest sequence (and beyond noise) is a check


def fusion_notes(
    fused: Sequence[tuple[str, tuple[str, Interval | None], Sequence[tuple[str, Interval | None]]]],
) -> tuple[str, ...]:
    """A message per kind of fused unit (the op types it fuses) whose units take more kernel time than their
    layers run alone, more than ``FUSION_COST_TOLERANCE`` and beyond the noise of both: the runtime's fusion
    costs time there, and what it costs is part of the sequential bound (which is of the units as the runtime
    runs them). ONNX Runtime fuses a BERT-like encoder's Add and LayerNormalization into one
    SkipLayerNormalization; on a 2-core VM's CPU a DeBERTa-v2's (hidden size 64) took 8.9 us fused against 2.9
    us for its two layers alone, and its ``fusion`` figure (every layer alone over the units) 0.93x said only
    that something fused ran slower, not what.

    ``fused``: per unit of more than one layer, what it fuses (``Add+LayerNormalization``), its key and kernel
    figure, and its layers' keys and kernel figures; a unit or layer without a figure is left out."""
    kinds: dict[str, list[tuple[tuple[str, Interval], list[tuple[str, Interval]]]]] = {}
    for ops, (key, figure), layers in fused:
        alone = [(k, f) for k, f in layers if f is not None]
        if figure is not None and alone and len(alone) == len(layers):
            kinds.setdefault(ops, []).append(((key, figure), alone))
    notes = []
    for ops, units in kinds.items():
        together = _total(unit for unit, _ in units)
        apart = _total(layer for _, layers in units for layer in layers)
        if not apart.value or together.value <= apart.value * (1 + FUSION_COST_TOLERANCE) or not together.above(apart):
            continue
        n = len(units)
        what, their, each, them = (
            (f"its {n} fused {ops} units take", "their", " each", "them")
            if n > 1
            else (f"its fused {ops} unit takes", "its", "", "it")
        )
        notes.append(
            f"{what} {together.value / apart.value:.2f}x the kernel time of {their} layers run alone: "
            f"{together.value * 1e3 / n:.1f} us{each} against {apart.value * 1e3 / n:.1f} us "
            f"({together.low * 1e3 / n:.1f}-{together.high * 1e3 / n:.1f} against "
            f"{apart.low * 1e3 / n:.1f}-{apart.high * 1e3 / n:.1f}), "
            f"{(together.value - apart.value) * 1e3:.1f} us more of its units' kernel time: "
            f"the runtime's fusion of {them} costs time here"
        )
    return tuple(notes)


def whole_model_notes(records: Mapping[str, Any]) -> tuple[str, ...]:
    """One message per whole-model figure whose run failed or was skipped, with its record's reason: the
    figure is empty in every table, and nothing else says why (a text-to-speech model whose output length
    changes from call to call had no end to end, silently)."""
    return tuple(
        f"{what} {'failed' if r.outcome == 'failed' else 'was skipped'}: {r.reason or 'no reason stored'}"
        for what, r in records.items()
        if r is not None and r.outcome != "ok"
    )


def units_left_out_ms(unit_records: Iterable[BenchmarkRecord | None]) -> float | None:
    """What the runtime inserted at the edges of the units run alone and their kernel times left out
    (``settings.kernel_time.left_out_median_s``: float16 casts, layout reorders), summed over the
    model's units, each as often as it occurs (ms); None where no unit has any."""
    found = [
        (r.settings.get("kernel_time") or {}).get("left_out_median_s")
        for r in unit_records
        if r is not None and r.outcome == "ok"
    ]
    seconds = [s for s in found if s]
    return sum(seconds) * 1e3 if seconds else None


def defaults_below_bound(defaults: Interval | None, sequential: Interval | None) -> tuple[str, ...]:
    """A message where the model end to end at its runtime's defaults lies below its sequential bound
    beyond the noise of both: the bound is of the variant's settings, and what the defaults gain spans
    layers (ONNX Runtime's NCHWc blocks run from one convolution to the next), so no bound here holds
    it."""
    if defaults is None or sequential is None or not sequential.value or not sequential.above(defaults):
        return ()
    return (
        f"at the runtime's defaults it runs in {defaults.value:.3f} ms ({defaults.low:.3f}-{defaults.high:.3f}), "
        f"{defaults.value / sequential.value:.2f}x its sequential bound {sequential.value:.3f} ms "
        f"({sequential.low:.3f}-{sequential.high:.3f}): the bounds are of the layers at this variant's settings, "
        "and what the defaults gain spans layers, so no bound here holds it",
    )


# how far apart the end to end as exported and bound must be, beyond the noise of both, for a note: runs of
# one model on a shared host differ by a few percent from one process to the next (a Wav2Vec2 export: 0.98x)
FREE_DIMS_TOLERANCE = 0.05


def free_dims_cost(exported: Interval | None, bound: Interval | None) -> tuple[str, ...]:
    """A message where the model as its file is (its dimensions free) runs slower than bound, beyond the noise
    of both: the export's shape computations, which a session with the dimensions fixed folds, run on
    every call (Optimum's T5 decoder with its cache: 1.21x; ``benchmarks/free_dims.py``). And one where it
    runs faster: then binding and folding changed how ONNX Runtime runs the model (a fusion it makes only
    at known shapes runs slower: SkipLayerNormFusion in an Optimum BERT, 0.88x as exported at one thread,
    1.01x with it disabled: ``benchmarks/free_dims.py --without``), and the figures of the model bound
    are not the file's."""
    if exported is None or bound is None or not bound.value:
        return ()
    if abs(exported.value / bound.value - 1) <= FREE_DIMS_TOLERANCE:
        return ()
    if bound.above(exported):
        return (
            f"as exported, its input dimensions free, it runs in {exported.value:.3f} ms "
            f"({exported.low:.3f}-{exported.high:.3f}), {exported.value / bound.value:.2f}x its end to end at "
            f"the bound shapes {bound.value:.3f} ms ({bound.low:.3f}-{bound.high:.3f}): binding its dimensions "
            "and folding what they make constant changed how ONNX Runtime runs it (it makes some fusions only at "
            "known shapes, and one may run slower than what it fuses: in BERT-like encoders on the CPU, an Add and a "
            "LayerNormalization into one SkipLayerNormalization), and its bounds are of the model bound",
        )
    if not exported.above(bound):
        return ()
    return (
        f"as exported, its input dimensions free, it runs in {exported.value:.3f} ms "
        f"({exported.low:.3f}-{exported.high:.3f}), {exported.value / bound.value:.2f}x its end to end at the "
        f"bound shapes {bound.value:.3f} ms ({bound.low:.3f}-{bound.high:.3f}): its shape computations run on "
        f"every call; fixing the dimensions (ONNX Runtime's free-dimension overrides, or a static export) saves "
        f"{exported.value - bound.value:.3f} ms",
    )


def coverage_notes(
    missing: Sequence[Mapping[str, Any]], nodes: int, partial_ms: float, composed: bool = False
) -> tuple[str, ...]:
    """A message where nodes of the model have no figure, so that a table's empty bounds say why: how many,
    the first with its reason, and the kernel time of the units that have one (``partial_sequential_ms``),
    which bounds the model from below however long the rest takes (an NMS detector's backbone and head,
    its ``NonMaxSuppression`` unshaped: how many boxes it keeps depends on the image). ``composed``: a
    composition has its figure all the same (its sequences' call latencies, where only kernel times lack)."""
    if not missing:
        return ()
    first = missing[0]
    more = f"; and {len(missing) - 1} more (JSON: missing)" if len(missing) > 1 else ""
    verb = "has" if len(missing) == 1 else "have"
    return (
        f"no bound{'' if composed else ' and no composition'}: {len(missing)} of its {nodes} nodes {verb} no "
        f"figure, {first['name']} "
        f"({first['op_type']}): {first['reason']}{more}; the units that have one sum to {partial_ms:.3f} ms of "
        "kernel time, below whatever the model takes",
    )


def _why_missing(record: Any) -> str:
    """Why a layer's unit has no kernel time: its record's outcome and reason, or no record."""
    if record is None:
        return "not measured on this system and stack"
    if record.outcome != "ok":
        return f"{record.outcome}: {record.reason}" if record.reason else str(record.outcome)
    return "its record holds no kernel time"


def fixed_call_cost(overhead: Interval, calls: Mapping[str, Interval | None], checks: list[str]) -> str | None:
    """Where the fixed cost of a call to take off each sequence beyond the first is not the call overhead measured
    but the cheapest sequence's own call latency, that sequence's key (else None): every call pays the fixed cost,
    so none costs less (a sequence of one view, a Reshape, is little more than the fixed cost itself). One cap for
    every G, so that the compositions stay comparable. An overhead above that latency by more than
    ``OVERHEAD_TOLERANCE`` and beyond the noise of both was
    measured under another load (a figure reused from another run, a busy host): taken off a hundred sequences it
    made a composition negative; that case is added to ``checks``."""
    measured = [(figure.value, key) for key, figure in calls.items() if figure is not None]
    if not measured or min(measured)[0] >= overhead.value:
        return None
    value, key = min(measured)
    cheapest = calls[key]
    if cheapest is not None and overhead.value > value * (1 + OVERHEAD_TOLERANCE) and overhead.above(cheapest):
        checks.append(
            f"the call overhead ({overhead.value:.4f} ms) is above the call latency of the cheapest sequence "
            f"({value:.4f} ms), beyond the noise of both: measured under another load (reused from another run, "
            f"a busy host), or a Relu of one float costs this runtime more than the model's cheapest call; the "
            f"composition takes that sequence's latency off each sequence instead (benanza bench run --repeat "
            f"measures both again together)"
        )
    return key


def bound_checks(bounds: Mapping[str, Interval], e2e: Interval | None) -> tuple[str, ...]:
    """A message for every bound above ``e2e`` beyond the noise of both: their intervals apart.

    A bound whose interval overlaps e2e's is not known to be above it; one entirely above it is a
    defect of the measurement.
    """
    if e2e is None or not e2e.value:
        return ()
    return tuple(
        f"{name} {b.value:.3f} ms (95% interval {b.low:.3f}-{b.high:.3f}) exceeds e2e {e2e.value:.3f} ms "
        f"({e2e.low:.3f}-{e2e.high:.3f}) by {b.value / e2e.value - 1:.1%}, beyond the noise of both: "
        "a kernel time was inflated (profiler, cold cache) or the host's speed changed between measurements"
        for name, b in bounds.items()
        if b.above(e2e)
    )


def composition_departures(
    composed: Mapping[int, Interval],
    e2e: Interval | None,
    e2e_kernel: Interval | None = None,
    sequential: Interval | None = None,
    left_out_ms: float | None = None,
) -> tuple[str, ...]:
    """What to say of the compositions more than ``COMPOSITION_TOLERANCE`` away from ``e2e`` with their
    intervals apart (one message for those below it, one for those above): there the composition is no
    estimate of the model's latency on this system. Below it, the profiled kernel time of the whole
    (``e2e_kernel``) against its units' (``sequential``) says whether the kernels themselves ran slower
    inside the model or the time went between them. Above it, ``left_out_ms`` (``units_left_out_ms``) says
    what the parts alone pay at their edges that the whole pays once per region."""
    if e2e is None or not e2e.value:
        return ()
    below, above = [], []
    for g, c in sorted(composed.items()):
        ratio = c.value / e2e.value
        if abs(ratio - 1) > COMPOSITION_TOLERANCE and (c.above(e2e) or e2e.above(c)):
            (below if ratio < 1 else above).append(f"G={g} {c.value:.3f} ms ({c.low:.3f}-{c.high:.3f}, {ratio:.2f}x)")
    whole = f"end to end {e2e.value:.3f} ms ({e2e.low:.3f}-{e2e.high:.3f}, 95% intervals)"
    out = []
    if below:
        out.append(
            f"composed {', '.join(below)} below {whole}: the whole model pays what its parts measured alone do "
            f"not; {_kernels_inside(e2e_kernel, sequential)}; no estimate of this model's latency here"
        )
    if above:
        why = (
            f"each part alone converts at its edges what the whole converts once per region ({left_out_ms:.3f} ms "
            "over its units of casts and layout reorders the runtime inserted, in their call latency)"
            if left_out_ms
            else "a part timed colder than it runs inside the model, or the host's speed changed between them"
        )
        out.append(
            f"composed {', '.join(above)} above {whole}: its parts ran slower than the whole ({why}); no estimate "
            "of this model's latency here"
        )
    return tuple(out)


def kernels_inside_ratio(e2e_kernel: Interval | None, sequential: Interval | None) -> float | None:
    """The whole model's profiled kernel time over its units' (the sequential bound) where it lies above
    it beyond the noise of both; 1.0 where it does not (the kernels ran no slower inside the model); None
    where either is not known (a GPU framework's end to end has no kernel time)."""
    if e2e_kernel is None or sequential is None or not sequential.value:
        return None
    return e2e_kernel.value / sequential.value if e2e_kernel.above(sequential) else 1.0


def _kernels_inside(e2e_kernel: Interval | None, sequential: Interval | None) -> str:
    """Whether a model's kernels ran slower inside it than its units alone, from their profiled kernel times."""
    ratio = kernels_inside_ratio(e2e_kernel, sequential)
    if ratio is None or e2e_kernel is None or sequential is None:
        return "data that leaves the caches between its layers, thread wake-ups, the framework's own work"
    figures = f"profiled kernel time of the whole {e2e_kernel.value:.3f} ms, of its units {sequential.value:.3f} ms"
    if ratio > 1:
        return (
            f"its kernels ran {ratio:.2f}x slower inside the model than alone "
            f"({figures}): each part alone found its weights and inputs in the caches, or the model ran in a "
            "slower state than its parts"
        )
    point = e2e_kernel.value / sequential.value if sequential.value else 1.0
    if point > 1 + COMPOSITION_TOLERANCE:  # apart by their values, not beyond the noise of both
        return (
            f"its kernels ran {point:.2f}x as long inside the model as alone, within the noise of both ({figures}; "
            f"intervals {e2e_kernel.low:.3f}-{e2e_kernel.high:.3f} and {sequential.low:.3f}-{sequential.high:.3f}): "
            "not known to be slower there; measure again on a quieter machine to tell"
        )
    return (
        f"its kernels ran no slower inside the model than alone ({figures}): the time goes between them "
        "(the framework's work per node, thread wake-ups)"
    )
