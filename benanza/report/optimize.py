"""Tables for Benanza's optimization analyses."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from benanza.analysis.optimize import Optimizations
from benanza.report.output import fmt_coverage, table, variant_column

SPEEDUPS = ("algorithm_selection", "tensor_cores", "fusion", "parallel", "framework_gap", "combined", "static_shapes")


def optimizations_table(rows: Sequence[Optimizations]) -> Table:
    """One line per model and variant: the bounds (ms) and what each optimization is worth (x)."""
    header, variants = variant_column(r.variant for r in rows)
    runtimes = ", ".join(sorted({r.bound.runtime for r in rows})) or "no runtime"
    return table(
        f"lower bounds on {runtimes} (ms, each layer's best candidate where it has several, hot) and what each "
        "optimization is worth (x)",
        [
            "model",
            *([header] if variants else []),
            ("batch", "right"),
            ("sequential", "right"),
            ("heuristic", "right"),
            ("parallel", "right"),
            ("e2e", "right"),
            "framework",
            *[(name.replace("_", " "), "right") for name in SPEEDUPS],
            ("coverage", "right"),
        ],
        (
            (
                r.model,
                *((variants[r.variant],) if variants else ()),
                r.batch_size,
                r.bound.sequential_ms,
                r.heuristic_ms,
                r.bound.parallel_ms,
                r.bound.e2e_ms,
                r.e2e_framework or "-",
                *[getattr(r, name) for name in SPEEDUPS],
                fmt_coverage(r.bound.coverage),
            )
            for r in rows
        ),
    )


def op_type_table(row: Optimizations) -> Table:
    """Per op type of one model: the framework's default pick vs the best candidate."""
    return table(
        f"{row.model} (batch {row.batch_size}): default pick vs best candidate by op type (ms)",
        ["op type", ("count", "right"), ("best", "right"), ("default", "right"), ("default/best", "right")],
        (
            (op, int(v["count"]), v["best_ms"], v["default_ms"], v["default_over_best"])
            for op, v in sorted(row.by_op_type.items(), key=lambda kv: -kv[1]["default_ms"])
        ),
    )
