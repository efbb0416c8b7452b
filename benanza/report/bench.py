"""Tables for lower bounds and composed estimates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table

from benanza.analysis.lower_bound import LowerBound
from benanza.bench.stats import CONFIDENCE
from benanza.report.output import figure_cell, table, variant_column


def lower_bound_table(rows: Sequence[LowerBound], by_system: bool = False) -> Table:
    """One line per row; ``by_system`` adds the system, stack and variant columns.

    Every figure is printed with the half-width of its interval; one whose measurement the
    harness found disturbed is marked ``(disturbed)``, not printed as fact.
    """
    grans = sorted({g for r in rows for g in r.composed_ms})
    where = ["system", "stack", "variant"] if by_system else []
    # rows of one model and batch in several variants (tensor cores on and off) say which is which
    header, variants = variant_column(() if by_system else (r.variant for r in rows))
    where += [header] if variants else []
    return table(
        "lower bounds (ms, ± half the "
        f"{CONFIDENCE:.0%} interval): kernel-time sums vs DLBricks composition (call latency) vs end to end",
        [
            "model",
            *where,
            ("batch", "right"),
            ("sequential", "right"),
            ("unfused", "right"),
            ("parallel", "right"),
            *[(f"composed G={g}", "right") for g in grans],
            ("e2e", "right"),
            ("coverage", "right"),
        ],
        (
            (
                r.model,
                *((r.system, r.stack_id, r.variant) if by_system else ()),
                *((variants[r.variant],) if variants else ()),
                r.batch_size,
                figure_cell(r, "sequential_ms", r.sequential_ms),
                figure_cell(r, "sequential_unfused_ms", r.sequential_unfused_ms),
                figure_cell(r, "parallel_ms", r.parallel_ms),
                *[figure_cell(r, f"composed_ms[{g}]", r.composed_ms.get(g)) for g in grans],
                figure_cell(r, "e2e_ms", r.e2e_ms),
                f"{r.coverage:.0%}",
            )
            for r in rows
        ),
    )


def plan_warnings(report: Mapping[str, Any]) -> list[str]:
    """One line per node not benchmarked and per planning note of ``bench.generate.plan_report``."""
    lines = [
        f"{p['model']}: {p['node']} ({p['op_type']}) not benchmarked: {p['reason']}"
        for p in report.get("not_benchmarked", ())
    ]
    return lines + [f"{n['model']}: {n['note']}" for n in report.get("planning_notes", ())]
