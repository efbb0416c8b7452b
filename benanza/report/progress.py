"""Progress bars' rate and time left, over the run so far rather than rich's recent window.

Results come back a chunk at a time, and an interleaved group's records all at once after
minutes of measuring: a window of the last seconds then holds only that burst. rich's own
speed read "53095.8/s" at the end of the README's main command, which measured about 1.2
benchmarks a second, and its time left swung the same way.
"""

from __future__ import annotations

from datetime import timedelta

from rich.progress import ProgressColumn, Task
from rich.text import Text


def pace(done: float, total: float | None, elapsed_s: float | None) -> tuple[str, str]:
    """The rate and the time left, as printed, from what is done after ``elapsed_s`` seconds."""
    if not done or not elapsed_s:
        return "", "-:--:--"
    rate = done / elapsed_s
    left = max((total or 0) - done, 0) / rate
    return f"{rate:.2f}/s", str(timedelta(seconds=round(left)))


class PaceColumn(ProgressColumn):
    """``0.55/s 0:01:13``: a task's average rate so far and the time left at it."""

    def render(self, task: Task) -> Text:
        rate, left = pace(task.completed, task.total, task.elapsed)
        return Text(f"{rate} {left}".strip(), style="progress.remaining")
