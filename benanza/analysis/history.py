"""How figures moved from one software stack to the next on each system.

Pure: lower-bound rows (one per model, system, stack and batch size, e.g. from
``local.analyze_stored(stack="all")``) and each system's stacks in the order they were
registered in; values out.

- ``stack_changes``: per system, its latest stack against the stack before it, for every
  model and batch size both have a figure for: the sequential lower bound and the end-to-end
  latency before and after, and their ratio (after / before; above 1 is slower). A ratio
  says how a figure moved, nothing about whether the move is beyond the noise: no
  significance test is applied here.
- ``unit_history``: one model's largest units and their kernel time on every system and
  stack, oldest stack first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benanza.analysis.lower_bound import LowerBound

FIGURES = ("sequential_ms", "e2e_ms")


@dataclass(frozen=True, slots=True)
class FigureChange:
    """One figure of one model on one system, on the stack before the latest and on the latest."""

    system: str
    model: str
    batch_size: int
    figure: str  # one of FIGURES
    before_stack: str
    after_stack: str
    before_ms: float
    after_ms: float

    @property
    def ratio(self) -> float:
        return self.after_ms / self.before_ms

    def to_dict(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "model": self.model,
            "batch_size": self.batch_size,
            "figure": self.figure,
            "before_stack": self.before_stack,
            "after_stack": self.after_stack,
            "before_ms": self.before_ms,
            "after_ms": self.after_ms,
            "ratio": self.ratio,
            "method": "after / before; no significance test",
        }


def stack_changes(rows: Iterable[LowerBound], stack_order: Mapping[str, Sequence[str]]) -> list[FigureChange]:
    """Each system's latest stack against the one before it; largest slowdown first.

    Args:
        rows: lower-bound rows of any systems and stacks.
        stack_order: per system, its stack ids oldest first (the store's ``stacks`` order).
    """
    by_key: dict[tuple[str, str, str, int], LowerBound] = {}
    for r in rows:
        by_key[(r.system, r.stack_id, r.model, r.batch_size)] = r
    changes = []
    for system, order in stack_order.items():
        if len(order) < 2:
            continue
        before_id, after_id = order[-2], order[-1]
        for (sys_, sid, model, batch), after in by_key.items():
            if sys_ != system or sid != after_id:
                continue
            before = by_key.get((system, before_id, model, batch))
            if before is None:
                continue
            for figure in FIGURES:
                old, new = getattr(before, figure), getattr(after, figure)
                if old and new is not None:
                    changes.append(FigureChange(system, model, batch, figure, before_id, after_id, old, new))
    return sorted(changes, key=lambda c: (-c.ratio, c.system, c.model, c.batch_size, c.figure))


@dataclass(frozen=True, slots=True)
class UnitHistory:
    """One unit of a model: its kernel time (ms, None where not measured) per (system, stack)."""

    unit: int
    label: str
    points: tuple[tuple[str, str, float | None], ...]  # (system, stack id, kernel ms), stack order

    def to_dict(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "label": self.label,
            "points": [{"system": s, "stack_id": k, "kernel_ms": v} for s, k, v in self.points],
        }


def unit_history(
    rows: Sequence[LowerBound], stack_order: Mapping[str, Sequence[str]], top: int = 8
) -> tuple[UnitHistory, ...]:
    """The ``top`` units with the largest kernel time on any stack, for rows of one model and batch size."""
    position = {(s, k): (s, i) for s, order in stack_order.items() for i, k in enumerate(order)}
    ordered = sorted(rows, key=lambda r: position.get((r.system, r.stack_id), (r.system, 0)))
    largest: dict[tuple[int, str], float] = {}
    for r in ordered:
        for u in r.units:
            if u.kernel_ms is not None:
                key = (u.unit, u.label)
                largest[key] = max(largest.get(key, 0.0), u.kernel_ms)
    chosen = sorted(largest, key=lambda k: (-largest[k], k))[: max(top, 0)]
    histories = []
    for unit, label in chosen:
        points = []
        for r in ordered:
            cost = next((u for u in r.units if (u.unit, u.label) == (unit, label)), None)
            points.append((r.system, r.stack_id, cost.kernel_ms if cost else None))
        histories.append(UnitHistory(unit, label, tuple(points)))
    return tuple(histories)
