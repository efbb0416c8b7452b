"""Tables for comparisons across systems and for per-system reports."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group
from rich.table import Table

from benanza.analysis.compare import E2E, Comparison, SystemReport
from benanza.report.output import fmt, fmt_coverage, table

_BASIS = {E2E: "e2e", "sequential_ms": "lower bound", None: "-"}


def comparison_table(comparisons: Sequence[Comparison]) -> Table:
    """Per model and batch size, one line per system: lower bound, e2e, cost, and the fastest."""
    several_stacks = len({(s.system, s.stack_id) for c in comparisons for s in c.systems}) > len(
        {s.system for c in comparisons for s in c.systems}
    )
    rows = []
    for c in comparisons:
        best = c.fastest
        for s in c.systems:
            is_best = best is not None and (s.system, s.stack_id) == (best.system, best.stack_id)
            rows.append(
                (
                    c.model,
                    c.batch_size,
                    f"{s.system} @{s.stack_id}" if several_stacks else s.system,
                    s.sequential_ms,
                    s.e2e_ms,
                    fmt_coverage(s.coverage),
                    s.price_per_hour,
                    s.cost_per_1000,
                    _BASIS[s.cost_basis] if s.cost_per_1000 is not None else "-",
                    f"fastest ({_BASIS[c.fastest_by]})" if is_best else "",
                )
            )
    return table(
        "across systems (ms; cost in USD per 1000 inferences)",
        [
            "model",
            ("batch", "right"),
            "system",
            ("lower bound", "right"),
            ("e2e", "right"),
            ("coverage", "right"),
            ("$/hour", "right"),
            ("$/1000", "right"),
            "cost basis",
            "",
        ],
        rows,
    )


def _when(timestamp: str | None) -> str | None:
    """An ISO-8601 UTC timestamp to the second, for tables (JSON keeps the full value)."""
    return timestamp[:19].replace("T", " ") if timestamp else None


def _versions(versions: dict) -> str:
    return ", ".join(f"{k} {fmt(v)}" for k, v in versions.items())


def _change(report_stack) -> str:
    if report_stack.previous is None:
        return "first"
    if not report_stack.changes:
        return "no change"
    return "; ".join(f"{c.field}: {fmt(c.before)} -> {fmt(c.after)}" for c in report_stack.changes)


def system_tables(report: SystemReport) -> Group:
    """One system's hardware, stacks over time, counts, slowest layers and coverage."""
    hw = report.hardware
    cov = report.coverage
    facts = [
        ("kind", hw.get("kind")),
        ("cpu", hw.get("cpu_model")),
        ("cores (physical/logical)", f"{fmt(hw.get('physical_cores'))}/{fmt(hw.get('logical_cores'))}"),
        ("gpus", ", ".join(hw["gpus"]) if hw.get("gpus") else None),
        ("price per hour (USD)", hw.get("price_per_hour")),
        ("first seen", _when(report.first_seen)),
        ("last seen", _when(report.last_seen)),
        ("latest stack", report.latest_stack_id),
        (
            (
                f"corpus coverage (batch {cov.batch_size})"
                if cov.batch_size is not None
                else "corpus coverage (own batch)"
            )
            if cov
            else "corpus coverage",
            f"{cov.covered}/{cov.unique_layers} unique layers ({fmt_coverage(cov.share)})"
            if cov and cov.share is not None
            else None,
        ),
    ]
    parts: list[Table] = [table(f"system {report.name}", ["", ""], facts)]
    parts.append(
        table(
            "stacks over time",
            ["stack", "first seen", "last seen", ("records", "right"), "versions", "changed"],
            (
                (s.stack_id, _when(s.first_seen), _when(s.last_seen), s.records, _versions(s.key_versions), _change(s))
                for s in report.stacks
            ),
        )
    )
    outcomes = sorted({o for per in report.counts.values() for o in per})
    parts.append(
        table(
            None,
            ["kind (latest stack)", *[(o, "right") for o in outcomes]],
            ((kind, *[per.get(o, 0) for o in outcomes]) for kind, per in report.counts.items()),
        )
    )
    parts.append(
        table(
            f"slowest layers (top {len(report.slowest_layers)}, median ms)",
            ["label", ("batch", "right"), "variant", ("call", "right"), ("kernel", "right"), "key"],
            ((s.label, s.batch_size, s.variant, s.ms, s.kernel_ms, s.key) for s in report.slowest_layers),
        )
    )
    return Group(*parts)


def systems_tables(reports: Sequence[SystemReport]) -> Group:
    return Group(*(system_tables(r) for r in reports))
