"""Where a model's lower bound goes: its execution units, largest first.

Pure: a plan and its lower-bound row in; values out.

- ``unit_breakdown``: every execution unit of the plan (a fused group or a single layer)
  with its op types, shapes, FLOPs, kernel time (the lower bound's statistic,
  ``KERNEL_STATISTIC``) with its confidence interval (the one the lower bound's interval is
  built from) and share of the sum over the units that have one, largest first. Units
  without a kernel time come last with ``kernel_ms`` None, never as zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from benanza.analysis.lower_bound import LowerBound
from benanza.bench.stats import Interval

if TYPE_CHECKING:  # a ModelPlan or a stored plan (bench/plans.py): analysis loads no model
    from benanza.bench.generate import ModelPlan
    from benanza.bench.plans import StoredPlan


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
    kernel_interval: Interval | None = None  # of kernel_ms; None where it is None

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
            "intervals": (
                {"kernel_ms": {"low": self.kernel_interval.low, "high": self.kernel_interval.high}}
                if self.kernel_interval is not None
                else {}
            ),
        }


def unit_breakdown(plan: ModelPlan | StoredPlan, bound: LowerBound) -> tuple[UnitShare, ...]:
    """The plan's units with their kernel time and share, largest first (see the module docstring)."""
    layers = plan.graph.layers
    total = sum(u.kernel_ms for u in bound.units if u.kernel_ms is not None)
    shares = []
    for cost in bound.units:
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
                kernel_interval=cost.kernel_interval,
            )
        )
    return tuple(sorted(shares, key=lambda s: (s.kernel_ms is None, -(s.kernel_ms or 0.0), s.unit)))
