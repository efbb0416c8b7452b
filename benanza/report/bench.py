"""Tables for lower bounds and composed estimates."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table

from benanza.analysis.lower_bound import LowerBound
from benanza.bench.stats import CONFIDENCE
from benanza.report.output import figure_cell, fmt_coverage, table, variant_column

# the column of the model end to end at its runtime's defaults (``LowerBound.defaults_e2e_ms``)
DEFAULTS_COLUMN = "defaults"
# the column of the model end to end as exported, its dimensions free (``LowerBound.exported_e2e_ms``)
EXPORTED_COLUMN = "exported"


def defaults_legend(rows: Sequence[LowerBound]) -> list[str]:
    """What the defaults column holds, once per distinct description of the defaults and variant in ``rows``."""
    said = dict.fromkeys((r.defaults_what, r.variant) for r in rows if r.defaults_e2e_ms is not None)
    legend = [
        f"{DEFAULTS_COLUMN}: the model end to end at {what or 'its runtime defaults'}; every other figure at {variant}"
        for what, variant in said
    ]
    if any(r.exported_e2e_ms is not None for r in rows):
        legend.append(
            f"{EXPORTED_COLUMN}: the model end to end as its file is, the input dimensions it leaves free left free "
            "(e2e binds them, and folds what they make constant)"
        )
    return legend


def lower_bound_table(rows: Sequence[LowerBound], by_system: bool = False) -> Table:
    """One line per row; ``by_system`` adds the system, stack and variant columns.

    Every figure is printed with the half-width of its interval; one whose measurement the
    harness found disturbed is marked ``(disturbed)``, not printed as fact.
    """
    grans = sorted({g for r in rows for g in r.composed_ms})
    defaults = any(r.defaults_e2e_ms is not None for r in rows)  # measured where the variant is not the defaults
    exported = any(r.exported_e2e_ms is not None for r in rows)  # measured where a file leaves dimensions free
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
            *([(DEFAULTS_COLUMN, "right")] if defaults else []),
            *([(EXPORTED_COLUMN, "right")] if exported else []),
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
                *([figure_cell(r, "defaults_e2e_ms", r.defaults_e2e_ms)] if defaults else []),
                *([figure_cell(r, "exported_e2e_ms", r.exported_e2e_ms)] if exported else []),
                fmt_coverage(r.coverage),
            )
            for r in rows
        ),
    )


# nodes not benchmarked listed per model before the rest is counted in one line (all are in JSON's ``missing``)
NODES_LISTED = 10


def plan_warnings(report: Mapping[str, Any]) -> list[str]:
    """A line per node not benchmarked (the first ``NODES_LISTED`` of a model, then how many more: a GPT-OSS
    export whose traced routing failed printed 214 such lines) and per planning warning of
    ``bench.generate.plan_report``."""
    lines, per_model = [], Counter()
    for p in report.get("not_benchmarked", ()):
        per_model[p["model"]] += 1
        if per_model[p["model"]] <= NODES_LISTED:
            lines.append(f"{p['model']}: {p['node']} ({p['op_type']}) not benchmarked: {p['reason']}")
    lines += [
        f"{model}: and {count - NODES_LISTED} more nodes not benchmarked (each with its reason: JSON's missing, "
        "or benanza models inspect)"
        for model, count in per_model.items()
        if count > NODES_LISTED
    ]
    return lines + _model_lines(report, "planning_warnings")


def plan_notes(report: Mapping[str, Any]) -> list[str]:
    """One line per planning note of ``bench.generate.plan_report`` (what was decided, for the record)."""
    return _model_lines(report, "planning_notes")


def _model_lines(report: Mapping[str, Any], kind: str) -> list[str]:
    return [f"{n['model']}: {n['note']}" for n in report.get(kind, ())]
