"""Regression reports for people (rich tables) and programs (JSON documents, CSV rows of changes)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Group
from rich.text import Text

from benanza.analysis.regressions import Change, RegressionReport
from benanza.report.output import table


def _pct(value: float) -> str:
    return f"{value:+.1%}"


def _interval(change: Change) -> str:
    return f"{change.low - 1:+.1%} .. {change.high - 1:+.1%}"


def regression_group(report: RegressionReport, *, show_all: bool = False, top_units: int = 3) -> Group:
    """One system's report: heading, stack diff, flagged changes (every change with ``show_all``), models."""
    what = f"history of stack {report.head}" if report.mode == "history" else f"stack {report.base} -> {report.head}"
    parts: list[Any] = [
        Text(
            f"{report.system}: {what}: {len(report.regressions)} regressions, {len(report.improvements)} "
            f"improvements among {len(report.changes)} benchmarks (threshold {report.settings.threshold:.0%}, "
            f"{report.settings.confidence:.0%} intervals)",
            style="bold",
        )
    ]
    if report.stack_diff:
        parts.append(
            table(
                "what changed in the stack",
                ["entry", "before", "after"],
                ((d.path, d.before, d.after) for d in report.stack_diff),
            )
        )
    shown = report.changes if show_all else [c for c in report.changes if c.significant]
    if shown:
        parts.append(
            table(
                "changes" if show_all else "flagged changes",
                [
                    "kind",
                    "unit",
                    "key",
                    ("base ms", "right"),
                    ("head ms", "right"),
                    ("change", "right"),
                    "interval",
                    ("runs", "right"),
                    "verdict",
                ],
                (
                    (
                        c.subject.kind,
                        c.label,
                        c.subject.key[:8],
                        c.base_ms,
                        c.head_ms,
                        _pct(c.ratio - 1),
                        _interval(c),
                        f"{c.base_runs}/{c.head_runs}",
                        f"{c.direction} (disturbed)" if c.disturbed else c.direction,
                    )
                    for c in shown
                ),
            )
        )
    if report.models:
        parts.append(
            table(
                "models",
                ["model", ("batch", "right"), ("base ms", "right"), ("head ms", "right"), "significant", "explanation"],
                (
                    (
                        m.model,
                        m.batch_size,
                        m.base_ms,
                        m.head_ms,
                        "yes" if m.significant else "no",
                        m.summary(top_units),
                    )
                    for m in report.models
                ),
            )
        )
    parts += [Text(f"note: {n}") for n in report.notes]
    return Group(*parts)


def regression_documents(reports: Iterable[RegressionReport]) -> list[dict[str, Any]]:
    """The JSON document: one object per system."""
    return [r.to_dict() for r in reports]


def regression_rows(reports: Sequence[RegressionReport]) -> list[dict[str, Any]]:
    """CSV rows: one per compared benchmark, with its system and the two sides."""
    return [{"system": r.system, "mode": r.mode, **c.to_dict()} for r in reports for c in r.changes]
