"""Rendering of fleet runs and fleet status (analysis lives in benanza.fleet)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from benanza.report.output import table
from benanza.report.progress import PaceColumn


def summary_table(summary: dict[str, Any]) -> Table:
    rows = []
    for name, s in summary["systems"].items():
        rows.append(
            [
                name,
                s["stack_id"] or "-",
                "yes" if s["new_stack"] else "",
                s["measured"],
                s["disturbed"] or "",
                s["reused"],
                s["failed"],
                s["skipped"],
                s["spilled"] or "",
                s["error"] or "",
            ]
        )
    cols = ["system", "stack_id", "new stack", ("measured", "right"), ("disturbed", "right"), ("reused", "right")]
    cols.append(("failed", "right"))
    cols += [("skipped", "right"), ("spilled", "right"), "problem"]
    disturbed = f" ({summary['disturbed']} disturbed)" if summary["disturbed"] else ""
    title = (
        f"fleet run: {summary['measured']} measured{disturbed}, {summary['reused']} reused, {summary['failed']} "
        f"failed in {summary['duration_s']:.1f} s ({summary['models']} models)"
    )
    return table(title, cols, rows)


def status_table(statuses: Sequence[dict[str, Any]]) -> Table:
    rows = []
    for s in statuses:
        where = "config+db" if s["configured"] and s["registered"] else ("config" if s["configured"] else "db")
        lacks = "?" if s["lacks"] is None else s["lacks"]
        rows.append(
            [
                s["name"],
                where,
                s["current_stack"] or "-",
                len(s["stacks"]),
                lacks,
                s["total"],
                "-" if s.get("regressions") is None else s["regressions"],
                "stack changed" if s["changed"] else "",
            ]
        )
    cols = ["system", "known from", "current stack", ("stacks", "right"), ("lacks", "right"), ("corpus", "right")]
    cols.append(("regressions", "right"))
    return table("fleet status (lacks: benchmarks the current stack has no result for)", [*cols, "note"], rows)


class FleetProgress:
    """Live per-system bars (done / total, failed, rate, time left) on stderr; a ProgressHook."""

    def __init__(self, console: Any, clock: Callable[[], float] | None = None) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("failed {task.fields[failed]}"),
            TimeElapsedColumn(),
            PaceColumn(),
            console=console,
            transient=False,
            get_time=clock,  # None: rich's monotonic clock
        )
        self.tasks: dict[str, Any] = {}

    def __enter__(self) -> FleetProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def __call__(self, system: str, event: str, n: int) -> None:
        task = self.tasks.get(system)
        if task is None:
            task = self.tasks[system] = self.progress.add_task(system, total=0, failed=0)
        t = self.progress.tasks[task]
        if event == "total":
            self.progress.update(task, total=(t.total or 0) + n)
            return
        if event == "failed":
            self.progress.update(task, failed=t.fields["failed"] + n)
        self.progress.advance(task, n)
