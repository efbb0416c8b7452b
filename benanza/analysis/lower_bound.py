"""Lower bounds, DLBricks composition and coverage for one model on one system and stack.

Figures and the statistic behind each (also in every JSON row under ``method``):

- ``sequential_ms``: sum over the runtime's execution units (fused groups and single
  layers) of the median *kernel time* (the runtime's own profiler), each unit counted every
  time it occurs. ``sequential_unfused_ms`` does the same with every layer run alone.
- ``parallel_ms``: the critical path of the layer DAG with those unit kernel times.
- ``composed_ms[G]``: DLBricks' estimate, the sum of the 20% trimmed mean *call latency* of
  the model's sequences of at most G units.
- ``e2e_ms``: the 20% trimmed mean call latency of the whole model in the same runtime and
  settings.

A figure with any input missing is ``None`` (never a sum that counts missing as zero); the
sum over what is present is given separately as ``partial_sequential_ms`` with
``coverage`` and the ``missing`` nodes, each with its reason. Coverage counts every node of
the model that does work: the layers whose unit has data over the layers plus the nodes that
are not layers because benanza cannot benchmark them (a ``Loop`` whose iterations are not
fixed, ops without a schema, unknown shapes). A layer whose benchmark failed (a control-flow
layer whose subgraph holds an op the runtime lacks) is missing with its stored error. A
model with such a node has no lower bound and no composition: the model runs them, the sums
would not.

``checks`` lists what contradicts the method in the figures themselves: a lower bound above
the measured end-to-end latency (by more than ``LOWER_BOUND_SLACK``) means a kernel time was
inflated (profiler overhead, a unit run cold) or the host changed speed between
measurements; such a bound is reported, never silently clipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a ModelPlan or a stored plan (bench/plans.py): analysis loads no model
    from benanza.bench.generate import ModelPlan
    from benanza.bench.plans import StoredPlan


# A lower bound takes a low quantile of each unit's kernel samples: interference, cache
# misses and clock dips only ever add time, and the 10th percentile is what the kernel
# achieves repeatedly on this system while one stray sample (the minimum) cannot set it. On a
# shared 2-core machine the zoo's medians summed above end to end for DenseNet (1.06x);
# 10th percentiles did not (0.99x), with every other model at 0.88-0.95x.
KERNEL_STATISTIC = "p10"
LOWER_BOUND_SLACK = 0.01  # relative excess of a lower bound over e2e that ``checks`` reports
CALL_STATISTIC = "trimmed_mean"

METHOD = {
    "sequential_ms": f"sum of unit kernel time ({KERNEL_STATISTIC}, runtime profiler less its overhead), fused units",
    "sequential_unfused_ms": f"sum of single-layer kernel time ({KERNEL_STATISTIC})",
    "parallel_ms": "critical path of the layer DAG with unit kernel times",
    "composed_ms": f"sum of sequence call latency ({CALL_STATISTIC} 20%), sequences of <= G units",
    "e2e_ms": f"whole-model call latency ({CALL_STATISTIC} 20%)",
}


@dataclass(frozen=True)
class UnitCost:
    unit: int
    label: str
    layers: tuple[int, ...]
    kernel_ms: float | None
    call_ms: float | None


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
            "coverage": self.coverage,
            "missing": list(self.missing),
            "checks": list(self.checks),
            "method": METHOD,
        }


def _ms(record: Any, which: str) -> float | None:
    if record is None or record.outcome != "ok":
        return None
    stats = record.kernel_stats if which == "kernel" else record.stats
    if not stats:
        return None
    return float(stats[KERNEL_STATISTIC if which == "kernel" else CALL_STATISTIC]) * 1e3


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
        kernel, call = _ms(rec, "kernel"), _ms(rec, "call")
        ops = "+".join(graph.layers[i].op_type for i in members)
        units.append(UnitCost(u, f"{graph.layers[members[-1]].name} ({ops})", members, kernel, call))
        if kernel is not None:
            layer_cost[members[-1]] = kernel
            for i in members:
                covered[i] = True
    unbenchmarked = graph.unsupported  # nodes the model runs that no benchmark covers
    n = len(graph.layers) + len(unbenchmarked)
    complete = all(covered) and bool(graph.layers) and not unbenchmarked
    partial = sum(u.kernel_ms for u in units if u.kernel_ms is not None)
    unfused = [_ms(results.get(layer.layer_key), "kernel") for layer in graph.layers]
    composed: dict[int, float | None] = {}
    for g, keys in plan.sequence_keys.items():
        costs = [_ms(results.get(k), "call") for k in keys]
        whole = bool(costs) and all(c is not None for c in costs) and not unbenchmarked
        composed[g] = sum(c for c in costs if c is not None) if whole else None
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
    parallel = graph.critical_path(layer_cost).length if complete else None
    every_layer = bool(unfused) and all(v is not None for v in unfused) and not unbenchmarked
    unfused_ms = sum(v for v in unfused if v is not None) if every_layer else None
    e2e_ms = _ms(e2e, "call")
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
        coverage=(sum(covered) / n) if n else 0.0,
        missing=missing,
        units=tuple(units),
        checks=bound_checks({"sequential_ms": sequential, "parallel_ms": parallel}, e2e_ms),
    )


def _why_missing(record: Any) -> str:
    """Why a layer's unit has no kernel time: its record's outcome and reason, or no record."""
    if record is None:
        return "not measured on this system and stack"
    if record.outcome != "ok":
        return f"{record.outcome}: {record.reason}" if record.reason else str(record.outcome)
    return "its record holds no kernel time"


def bound_checks(bounds: Mapping[str, float | None], e2e_ms: float | None) -> tuple[str, ...]:
    """A message for every bound above ``e2e_ms`` by more than ``LOWER_BOUND_SLACK``."""
    if not e2e_ms:
        return ()
    return tuple(
        f"{name} {value:.3f} ms exceeds e2e {e2e_ms:.3f} ms by {value / e2e_ms - 1:.1%}: "
        "a kernel time was inflated (profiler, cold cache) or the host's speed changed between measurements"
        for name, value in bounds.items()
        if value is not None and value > e2e_ms * (1 + LOWER_BOUND_SLACK)
    )
