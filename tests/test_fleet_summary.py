"""The fleet run's summary: how many of the records it measured are marked disturbed, and how it prints that.

The counts from real workers (every measurement disturbed, a worker killed mid-run) are in
``test_fleet.py``; here the arithmetic of a group measured again and the table a user reads.
"""

from __future__ import annotations

import io

from benanza.fleet.driver import FleetSummary, SystemResult
from benanza.report.fleet import summary_table
from benanza.report.output import console


def test_a_spec_counts_once_by_its_latest_record() -> None:
    result = SystemResult("sys-a", measured=3)
    result.mark({"a": True, "b": True, "c": False})
    assert result.disturbed == 2
    result.mark({"a": False})  # its group measured again in a later call, clean this time
    assert result.disturbed == 1 and result.to_dict()["disturbed"] == 1


def test_the_table_shows_the_disturbed_records_beside_the_measured() -> None:
    quiet, busy = SystemResult("sys-q", stack_id="s1", measured=5), SystemResult("sys-b", stack_id="s2", measured=4)
    busy.mark({"x": True, "y": True, "z": False})
    summary = FleetSummary({"sys-q": quiet, "sys-b": busy}, models=1, model_errors=[], duration_s=2.0)
    out = io.StringIO()
    console(out, width=200).print(summary_table(summary.to_dict()))
    text = out.getvalue()
    assert "fleet run: 9 measured (2 disturbed), 0 reused, 0 failed in 2.0 s (1 models)" in text
    header = next(line for line in text.splitlines() if "measured" in line and "system" in line)
    assert header.index("measured") < header.index("disturbed") < header.index("reused")
    (row,) = [line for line in text.splitlines() if "sys-b" in line]
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[:6] == ["sys-b", "s2", "", "4", "2", "0"]  # system, stack, new stack, measured, disturbed, reused
