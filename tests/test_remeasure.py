"""The re-measure budget (issue 16): what measuring disturbed benchmarks again may cost a run.

The arithmetic here; the harness and the measurer drawing on it, with real ONNX Runtime
benchmarks disturbed for real, in ``test_interference.py``, ``test_host_reference.py`` and
``test_cli_bench.py``.
"""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from benanza.bench.remeasure import RemeasureBudget, remeasure_note
from benanza.settings import HarnessSettings


def test_the_reserve_comes_first_then_each_first_measurement_earns_its_share() -> None:
    budget = RemeasureBudget(share=0.25, reserve_s=10.0)
    assert budget.grant(10.0) and not budget.grant(10.1)  # the reserve, before anything was measured
    budget.book(40.0)  # first measurements: 10 s more
    assert budget.earned_s == 20.0
    budget.book(12.0, again=True)
    assert budget.spent_s == 12.0 and budget.measured_s == 40.0
    assert budget.grant(8.0) and not budget.grant(8.5)
    assert (budget.taken, budget.declined) == (2, 2)


def test_everything_measured_inside_again_is_a_re_measure() -> None:
    budget = RemeasureBudget(share=1.0, reserve_s=0.0)
    budget.book(5.0)
    with budget.again():
        budget.book(2.0)  # a harness's first attempt inside a group measured again as a whole
        with budget.again():
            budget.book(1.0)
    budget.book(3.0)
    assert (budget.measured_s, budget.spent_s) == (8.0, 3.0)


def test_an_unlimited_budget_declines_nothing_and_writes_json() -> None:
    budget = RemeasureBudget.unlimited()
    budget.book(1.0, again=True)
    assert budget.grant(1e12) and budget.earned_s == math.inf
    assert budget.summary_note() is None
    assert json.loads(json.dumps(budget.to_dict()))["share"] is None


def test_the_note_sums_the_budgets_of_a_systems_workers() -> None:
    assert remeasure_note([]) is None
    quiet = RemeasureBudget(share=0.25, reserve_s=60.0)
    assert quiet.grant(5.0) and quiet.summary_note() is None  # nothing declined: nothing to say
    a, b = RemeasureBudget(share=0.25, reserve_s=0.0), RemeasureBudget(share=0.25, reserve_s=0.0)
    a.book(100.0)
    b.book(20.0)
    assert a.grant(25.0)
    a.book(25.0, again=True)  # what the re-measure took
    assert not a.grant(1.0) and not b.grant(6.0)
    note = remeasure_note([a.to_dict(), b.to_dict(), quiet.to_dict()])
    assert note.startswith("2 disturbed measurement(s) were not measured again, 2 were:")
    assert "spent 25 s of the 90 s the run allowed them (25% of the 120 s measured first, and 60 s)" in note
    assert "BENANZA_HARNESS_REMEASURE_SHARE" in note


def test_the_settings_default_to_once_the_first_measurements_and_a_minute() -> None:
    settings = HarnessSettings()
    assert (settings.remeasure_share, settings.remeasure_reserve_s) == (1.0, 60.0)
    for value in ("inf", "nan"):  # stored with every record as strict JSON, which has no spelling for them
        with pytest.raises(ValidationError, match="remeasure_share"):
            HarnessSettings(remeasure_share=value)
