"""Progress bars: rate and time left over the run so far, whatever the bursts of results."""

from __future__ import annotations

import io

from benanza.report.fleet import FleetProgress
from benanza.report.output import console
from benanza.report.progress import PaceColumn, pace


def test_pace_is_the_average_over_the_run_so_far() -> None:
    assert pace(60, 100, 120.0) == ("0.50/s", "0:01:20")
    assert pace(100, 100, 50.0) == ("2.00/s", "0:00:00")
    assert pace(0, 100, 10.0) == ("", "-:--:--")  # nothing done yet: no rate to tell
    assert pace(5, 100, None) == ("", "-:--:--")


def test_a_burst_of_results_after_a_long_group_does_not_read_as_thousands_a_second() -> None:
    now = [0.0]
    bars = FleetProgress(console(io.StringIO()), clock=lambda: now[0])
    bars("sys-a", "total", 100)
    for _ in range(10):  # one chunk's records a second
        now[0] += 1.0
        bars("sys-a", "measured", 1)
    now[0] += 100.0  # a large group measured for 100 s, then its 50 records in one go
    for _ in range(50):
        bars("sys-a", "measured", 1)
    bars("sys-a", "failed", 1)
    (task,) = bars.progress.tasks
    assert task.completed == 61 and task.fields["failed"] == 1
    # 61 in 110 s, and 39 more at that rate (rich's recent-window speed: 51 in no time)
    assert PaceColumn().render(task).plain == "0.55/s 0:01:10"
