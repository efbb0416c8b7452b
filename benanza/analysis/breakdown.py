"""Where a model's lower bound goes: its execution units, largest first, and the spread of a figure.

Pure: a plan, its lower-bound row and the records it was computed from in; values out.

- ``unit_breakdown``: every execution unit of the plan (a fused group or a single layer)
  with its op types, shapes, FLOPs, kernel time (the lower bound's statistic,
  ``KERNEL_STATISTIC``) and share of the sum over the units that have one, largest first.
  Units without a kernel time come last with ``kernel_ms`` None, never as zero.
- ``Spread``: the 10th to 90th percentile of one record's samples, where a figure is one
  record's statistic (an end-to-end latency, one unit's kernel time). It describes how the
  samples were spread, not a confidence interval of the figure; a figure that is a sum over
  records (a lower bound, a composition) has none here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from benanza.analysis.lower_bound import LowerBound

if TYPE_CHECKING:  # a ModelPlan or a stored plan (bench/plans.py): analysis loads no model
    from benanza.bench.generate import ModelPlan
    from benanza.bench.plans import StoredPlan
    from benanza.bench.records import BenchmarkRecord

SPREAD = ("p10", "p90")
SPREAD_METHOD = "10th to 90th percentile of the record's samples (their spread, not a confidence interval)"


@dataclass(frozen=True, slots=True)
class Spread:
    low_ms: float
    high_ms: float

    def to_dict(self) -> dict[str, Any]:
        return {"low_ms": self.low_ms, "high_ms": self.high_ms, "method": SPREAD_METHOD}


def spread(record: BenchmarkRecord | None, which: str = "call") -> Spread | None:
    """The p10-p90 spread (ms) of an ok record's call (``"call"``) or kernel (``"kernel"``) samples."""
    if record is None or record.outcome != "ok":
        return None
    stats = record.kernel_stats if which == "kernel" else record.stats
    if stats is None:
        return None
    low, high = (stats.statistic(s) for s in SPREAD)
    if low is None or high is None:
        return None
    return Spread(float(low) * 1e3, float(high) * 1e3)


@dataclass(frozen=True, slots=True)
class UnitShare:
    """One execution unit of a model and its part of the sequential lower bound."""

    unit: int
    label: str
    op_types: tuple[str, ...]
    input_shapes: tuple[tuple[int, ...], ...]  # the first layer's
    output_shapes: tuple[tuple[int, ...], ...]  # the last layer's
    flops: int | None  # None when a member's FLOPs are unknown
    kernel_ms: float | None
    share: float | None  # of the sum of the units' kernel times
    kernel_spread: Spread | None

    @property
    def op(self) -> str:
        return "+".join(self.op_types)

    def to_dict(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "label": self.label,
            "op": self.op,
            "input_shapes": [list(s) for s in self.input_shapes],
            "output_shapes": [list(s) for s in self.output_shapes],
            "flops": self.flops,
            "kernel_ms": self.kernel_ms,
            "share": self.share,
            "kernel_spread": self.kernel_spread.to_dict() if self.kernel_spread else None,
        }


def unit_breakdown(
    plan: ModelPlan | StoredPlan, bound: LowerBound, results: Mapping[str, Any]
) -> tuple[UnitShare, ...]:
    """The plan's units with their kernel time and share, largest first (see the module docstring)."""
    layers = plan.graph.layers
    total = sum(u.kernel_ms for u in bound.units if u.kernel_ms is not None)
    shares = []
    for cost, key in zip(bound.units, plan.unit_keys, strict=True):
        members = [layers[i] for i in cost.layers]
        flops = [m.flops for m in members]
        shares.append(
            UnitShare(
                unit=cost.unit,
                label=cost.label,
                op_types=tuple(m.op_type for m in members),
                input_shapes=tuple(tuple(s) for s in members[0].input_shapes),
                output_shapes=tuple(tuple(s) for s in members[-1].output_shapes),
                flops=None if any(f is None for f in flops) else sum(f for f in flops if f is not None),
                kernel_ms=cost.kernel_ms,
                share=cost.kernel_ms / total if cost.kernel_ms is not None and total else None,
                kernel_spread=spread(results.get(key), "kernel"),
            )
        )
    return tuple(sorted(shares, key=lambda s: (s.kernel_ms is None, -(s.kernel_ms or 0.0), s.unit)))
