"""The re-measure budget: how much of a run's time measuring disturbed benchmarks again may take.

A measurement the host disturbed is taken again (``harness.disturbance``, the reference call's
verdict in ``benanza.bench.reference``), because a neighbour's burst or a slow minute of a
shared machine usually passes. On a machine whose speed moves all the time it may not: on the
project's 2-core VM, with no other process the guest could see, the README's main command took
28 minutes (3 when quiet), 821 of its 1240 records had been measured again, and 168 of those came
out clean (another day, over four zoo models, 169 of 254). And the levels multiply: the harness's
own second try inside a group measured again for its reference call, then again at the end of
the run: up to eight times a group's first measurement.

So re-measures draw on a budget, as a client's retries do in a retry budget: each first
measurement earns ``share`` of its wall time, ``reserve_s`` is there from the start, and a
re-measure is taken only while what re-measures have spent, with this one's expected cost (the
attempt it repeats), stays within what was earned. A quiet machine's rare disturbances are all
measured again; a machine that is disturbed all the time costs at most ``1 + share`` times its
first measurements (and the reserve), and the measurements left disturbed are kept, marked, with
the reason and that the budget declined to measure them again: no report shows them as fact.
The default share, 1.0, lets every group be measured again once and stops the levels from
multiplying; 0.25 left the largest groups unmeasured again, their figures marked, and saved no
time the host's swings did not hide (``benchmarks/main_job_cost.py``, README).

One budget per ``Measurer`` (a ``benanza run``, a fleet worker's runtime): the run's re-measures
share it, whichever level asks. The GPU runtime's device-timed measurements, run one by one in
their own child process, are measured again as before, without a budget.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass
class RemeasureBudget:
    """What re-measures may spend: ``reserve_s`` plus ``share`` of the first measurements' time.

    ``RemeasureBudget.unlimited()`` declines nothing (a measurement on its own, a test).
    """

    share: float
    reserve_s: float
    measured_s: float = 0.0  # wall time of first measurements
    spent_s: float = 0.0  # wall time of re-measures
    taken: int = 0  # re-measures allowed
    declined: int = 0  # re-measures the budget did not allow
    _again: int = 0  # depth of ``again()``: everything measured inside is a re-measure

    @classmethod
    def unlimited(cls) -> RemeasureBudget:
        return cls(share=math.inf, reserve_s=math.inf)

    @property
    def earned_s(self) -> float:
        if math.isinf(self.share) or math.isinf(self.reserve_s):
            return math.inf
        return self.reserve_s + self.share * self.measured_s

    @property
    def booked_s(self) -> float:
        """All measuring time booked so far, first and again."""
        return self.measured_s + self.spent_s

    def grant(self, cost_s: float) -> bool:
        """Whether a re-measure expected to take ``cost_s`` fits, counted as taken or declined: ask only
        when about to measure again (it is not a pure query)."""
        fits = self.spent_s + max(cost_s, 0.0) <= self.earned_s
        if fits:
            self.taken += 1
        else:
            self.declined += 1
        return fits

    def book(self, seconds: float, *, again: bool = False) -> None:
        """``seconds`` of measuring: a re-measure's (``again``, or inside ``again()``) or a first one's."""
        if again or self._again:
            self.spent_s += seconds
        else:
            self.measured_s += seconds

    @contextmanager
    def again(self) -> Iterator[None]:
        """Everything measured inside is a re-measure (a group measured again as a whole)."""
        self._again += 1
        try:
            yield
        finally:
            self._again -= 1

    def declined_note(self) -> str:
        """What a record left disturbed because of the budget says of it."""
        return (
            f"not measured again: re-measures had spent {self.spent_s:.0f} s of the "
            f"{self.earned_s:.0f} s this run allows them ({self.reserve_s:.0f} s, and "
            f"{self.share:.0%} of the {self.measured_s:.0f} s measured first)"
        )

    def summary_note(self) -> str | None:
        """One line on the re-measures the budget declined in a run, or None where it declined none."""
        return remeasure_note([self.to_dict()])

    def to_dict(self) -> dict[str, float | int | None]:
        """Its figures (None for an unlimited one's share and reserve: JSON has no infinity)."""
        return {
            "share": None if math.isinf(self.share) else self.share,
            "reserve_s": None if math.isinf(self.reserve_s) else self.reserve_s,
            "measured_s": round(self.measured_s, 3),
            "spent_s": round(self.spent_s, 3),
            "taken": self.taken,
            "declined": self.declined,
        }


def remeasure_note(budgets: Iterable[Mapping[str, Any]]) -> str | None:
    """One line on the re-measures declined, over budgets in ``to_dict`` form (a fleet system's
    workers each hold one), or None where none was declined."""
    budgets = list(budgets)
    if not any(b.get("declined") for b in budgets):
        return None
    limited = [b for b in budgets if b.get("share") is not None]  # an unlimited one declines nothing
    declined = sum(int(b["declined"]) for b in limited)
    taken = sum(int(b["taken"]) for b in limited)
    spent = sum(float(b["spent_s"]) for b in limited)
    measured = sum(float(b["measured_s"]) for b in limited)
    share, reserve = float(limited[0]["share"]), sum(float(b["reserve_s"]) for b in limited)
    return (
        f"{declined} disturbed measurement(s) were not measured again, {taken} were: re-measures spent "
        f"{spent:.0f} s of the {reserve + share * measured:.0f} s the run allowed them ({share:.0%} of the "
        f"{measured:.0f} s measured first, and {reserve:.0f} s); they stay marked (disturbed), and a group of "
        "calls sampled together counts as one measurement. A larger "
        "remeasure_share (BENANZA_HARNESS_REMEASURE_SHARE) lets more be measured again"
    )
