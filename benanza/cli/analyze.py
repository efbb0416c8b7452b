"""`benanza analyze ...`: lower bounds, optimisation analyses and systems, from the performance database.

Every command reads the database only (stored plans and records, ``benanza.analysis.stored``):
no model file is loaded and no runtime is built, so results can be analysed read-only on a
machine that has neither. MODELS name the models to show (files, whose stem is the name, or
names); without them every stored model is shown.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Annotated

import typer

from benanza.analysis.compare import compare_systems
from benanza.analysis.regressions import RegressionSettings
from benanza.analysis.stored import (
    ALL,
    PlanSelection,
    analyze_stored,
    prices,
    stored_analyses,
    stored_optimizations,
    system_reports,
)
from benanza.analysis.stored_regressions import regressions
from benanza.bench.repro import write_repro
from benanza.cli.common import (
    BaseStackOpt,
    BenanzaGroup,
    ConfidenceOpt,
    CorpusBatchOpt,
    EpOpt,
    FailOn,
    FailOnOpt,
    FormatOpt,
    GranOpt,
    HeadStackOpt,
    HistoryOpt,
    PrecisionOpt,
    ReproOpt,
    ShapeOpt,
    StackOpt,
    StoredBatchesOpt,
    StoredModelsArg,
    SystemsOpt,
    TensorCoresOpt,
    ThreadsFilterOpt,
    ThresholdOpt,
    cli_settings,
    model_names,
    one_batch,
    parse_count,
    parse_fraction,
)
from benanza.cli.pipeline import requested
from benanza.cli.store_options import DbFileOpt, DbOpt, open_read_only
from benanza.config import load_fleet_config
from benanza.errors import UsageError
from benanza.local import repro_targets
from benanza.report.bench import defaults_legend, lower_bound_table
from benanza.report.compare import comparison_table, systems_tables
from benanza.report.optimize import op_type_table, optimizations_table
from benanza.report.output import DISTURBED_NOTE, OutputFormat, console, emit
from benanza.report.plots import lower_bound_bars, unit_breakdown
from benanza.report.regressions import regression_documents, regression_group, regression_rows

# Filters on the stored plans' runtime and variant (None: any); a stored variant names its settings
StoredRuntimeOpt = Annotated[
    str | None, typer.Option("--runtime", help="only this runtime's results (onnxruntime, cudnn); default any")
]
StoredOptLevelOpt = Annotated[
    str | None, typer.Option("--opt-level", help="only results of this ONNX Runtime optimisation level")
]

app = typer.Typer(
    cls=BenanzaGroup, help="Lower bounds and composed estimates from the performance database.", no_args_is_help=True
)


def _selection(store, models, wanted, runtime=None, **variant) -> PlanSelection:
    return PlanSelection.of(
        models=model_names(models, store.model_names() if models else ()),
        batches=wanted.batches,
        runtime=runtime,
        variant=variant,
        granularities=wanted.granularities,
        shapes=wanted.request.shapes,
    )


def _systems(system: list[str] | None) -> list[str]:
    """--system values, or this machine's name ($BENANZA_SYSTEM or the hostname)."""
    return list(system) if system else [cli_settings().system_name()]


def config_prices(config: Path | None) -> dict[str, float | None]:
    """The ``price_per_hour`` of each system of a fleet config (none without one)."""
    if config is None:
        return {}
    return {s.name: s.price_per_hour for s in load_fleet_config(config).systems}


def _warn_nothing_stored(store, systems, runtime: str | None = None) -> None:
    names = {n for s in systems for n in s.split(",")}
    stored = [p for p in store.plans() if "all" in names or p.system in names] if runtime else []
    others = sorted({p.runtime for p in stored} - {runtime})  # of the systems asked: the flag then finds them
    hint = (
        f" for runtime {runtime} (stored for {', '.join(others)}: pass --runtime {others[0]})"
        if others
        else " (measure them first with benanza run or benanza fleet run; a database from before plans "
        "were stored needs a new run, which reuses its results)"
    )
    print(f"warning: {store.shown_uri}: no stored plan of these models on {', '.join(systems)}{hint}", file=sys.stderr)


@app.command("lower-bound")
def lower_bound_cmd(
    models: StoredModelsArg = None,
    batch: StoredBatchesOpt = None,
    shape: ShapeOpt = None,
    granularity: GranOpt = "",
    db: DbOpt = None,
    db_file: DbFileOpt = None,
    threads: ThreadsFilterOpt = None,
    opt_level: StoredOptLevelOpt = None,
    system: SystemsOpt = None,
    stack: StackOpt = "latest",
    compare: Annotated[bool, typer.Option("--compare", help="print the comparison across systems instead")] = False,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="fleet config TOML whose systems' price_per_hour replace stored ones"),
    ] = None,
    plot: Annotated[Path | None, typer.Option(help="save bars (and per-layer breakdowns beside it) as PNG")] = None,
    runtime: StoredRuntimeOpt = None,
    ep: EpOpt = None,
    precision: PrecisionOpt = None,
    tensor_cores: TensorCoresOpt = None,
    format: FormatOpt = OutputFormat.table,
) -> None:
    """Sequential and parallel lower bounds, DLBricks composition and end-to-end latency.

    From the stored plans and records of the named systems (default: this machine's name),
    each system's latest stack unless --stack says otherwise; one row per stored plan (model,
    batch size, runtime variant). --runtime, --threads, --opt-level, --ep, --precision and
    --tensor-cores select among the stored variants; --granularity the G values shown
    (default: every stored one). With several systems or stacks, a comparison across them.
    """
    wanted = requested(batch, shape, granularity)
    if threads is not None:
        parse_count(threads, "--threads")  # a bad value is an error, not a filter that matches nothing
    with open_read_only(db, db_file) as store:
        selection = _selection(
            store,
            models,
            wanted,
            runtime,
            threads=threads,
            opt=opt_level,
            ep=ep,
            precision=precision,
            tensor_cores=tensor_cores,
        )
        rows = analyze_stored(store, _systems(system), stack=stack, selection=selection)
        if not rows:
            _warn_nothing_stored(store, _systems(system))
        report_lower_bounds(store, rows, format, plot, compare=compare, config=config, by_system=bool(system))


def report_lower_bounds(store, rows, format, plot, *, compare=False, config=None, by_system=False):
    """Lower-bound rows as JSON or a table, or the comparison across systems.

    The comparison replaces the rows with --compare and joins the table when the rows hold
    several systems or stacks; JSON without --compare is always the list of rows.
    """
    several = by_system and len({(r.system, r.stack_id) for r in rows}) > 1
    if plot is not None:
        _plot(rows, plot, several)
    if compare or (several and format is OutputFormat.table):
        comparisons = compare_systems(rows, prices(store, config_prices(config)))
        if emit(format, [c.to_dict() for c in comparisons], _comparison_rows(comparisons)):
            return
        if not compare:
            console().print(lower_bound_table(rows, by_system=True))
        console().print(comparison_table(comparisons))
    elif not emit(format, [r.to_dict() for r in rows]):
        console().print(lower_bound_table(rows, by_system=by_system))
        for line in defaults_legend(rows):
            console().print(line)
        if any(r.disturbed for r in rows):
            console().print(f"{DISTURBED_NOTE}; measure again on a quieter machine")
        for r in rows:
            for check in r.checks:
                console().print(f"check: {r.model} (batch {r.batch_size}): {check}")
            for note in r.notes:
                console().print(f"note: {r.model} (batch {r.batch_size}): {note}")


def _comparison_rows(comparisons):
    """CSV rows of comparisons: one per compared system, the comparison's fields beside ``systems.*``."""
    rows = []
    for c in comparisons:
        doc = c.to_dict()
        rows += [{**{k: v for k, v in doc.items() if k != "systems"}, "systems": s} for s in doc["systems"]]
    return rows


def _plot(rows, plot, several_systems):
    if several_systems:  # bars and file names tell systems and stacks apart
        rows = [dataclasses.replace(r, model=f"{r.system}_{r.stack_id}_{r.model}") for r in rows]
    lower_bound_bars(rows, plot)
    for row in rows:
        unit_breakdown(row, plot.with_name(f"{plot.stem}_{row.model}_b{row.batch_size}_layers{plot.suffix}"))


@app.command("optimizations")
def optimizations_cmd(
    models: StoredModelsArg = None,
    batch: StoredBatchesOpt = None,
    shape: ShapeOpt = None,
    db: DbOpt = None,
    db_file: DbFileOpt = None,
    system: SystemsOpt = None,
    stack: StackOpt = "latest",
    runtime: Annotated[
        str,
        typer.Option(
            "--runtime",
            help="only this runtime's results (cudnn, onnxruntime); cudnn's records hold every candidate, "
            "so algorithm choice is a figure there only",
        ),
    ] = "cudnn",
    precision: PrecisionOpt = None,
    tensor_cores: TensorCoresOpt = None,
    by_op: Annotated[bool, typer.Option("--by-op", help="also the default-vs-best table per op type")] = False,
    format: FormatOpt = OutputFormat.table,
) -> None:
    """Benanza's analyses: algorithm choice, tensor cores, fusion, parallelism, framework gap.

    From the stored plans and records of the named systems (default: this machine's name)
    for --runtime (default cudnn, the GPU runtime whose records hold every candidate).
    """
    wanted = requested(batch, shape, "")
    with open_read_only(db, db_file) as store:
        selection = _selection(store, models, wanted, runtime, precision=precision, tensor_cores=tensor_cores)
        analyses = stored_analyses(store, _systems(system), stack=stack, selection=selection)
        if not analyses:
            _warn_nothing_stored(store, _systems(system), runtime)
    rows = [stored_optimizations(a) for a in analyses]
    if emit(format, [r.to_dict() for r in rows]):
        return
    console().print(optimizations_table(rows))
    for r in rows:
        if by_op:
            console().print(op_type_table(r))
        for check in r.bound.checks:
            console().print(f"check: {r.model} (batch {r.batch_size}): {check}")


@app.command("systems")
def systems_cmd(
    models: StoredModelsArg = None,
    system: SystemsOpt = None,
    db: DbOpt = None,
    db_file: DbFileOpt = None,
    batch: CorpusBatchOpt = None,
    shape: ShapeOpt = None,
    top: Annotated[str, typer.Option("--top", metavar="N", help="slowest layers to list per system")] = "10",
    format: FormatOpt = OutputFormat.table,
) -> None:
    """Per system: hardware, stacks over time, records by kind and outcome, slowest layers, corpus coverage.

    The corpus (for coverage) is the stored models (or MODELS) at one batch size, from their stored plans.
    """
    batch_size = one_batch(batch, "analyze systems")
    slowest = parse_count(top, "--top", minimum=0)
    overrides = requested(None, shape, "").request.shapes
    with open_read_only(db, db_file) as store:
        selection = PlanSelection.of(models=model_names(models, store.model_names()), shapes=overrides)
        reports = system_reports(store, system or [ALL], batch=batch_size, top=slowest, selection=selection)
    if not emit(format, [r.to_dict() for r in reports]):
        console().print(systems_tables(reports))


@app.command("regressions")
def regressions_cmd(
    models: StoredModelsArg = None,
    system: SystemsOpt = None,
    base: BaseStackOpt = None,
    head: HeadStackOpt = None,
    history: HistoryOpt = False,
    threshold: ThresholdOpt = "0.05",
    confidence: ConfidenceOpt = "0.99",
    fail_on: FailOnOpt = FailOn.none,
    repro: ReproOpt = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="list every compared benchmark, not only flagged ones")
    ] = False,
    db: DbOpt = None,
    db_file: DbFileOpt = None,
    format: FormatOpt = OutputFormat.table,
) -> None:
    """Layers, units and models that got slower or faster: between a system's stacks, or along a stack's runs.

    Each system's latest stack is compared with the stack before it (or --base/--head), or with
    --history its own repeated runs over time. A change is flagged when its interval (bootstrap
    over the raw samples, widened by the run-to-run noise learned from repeats) excludes no
    change and it is at least --threshold. A model's change (end to end where measured with
    --e2e, else the sum of its units) is attributed to its units, read from the plans stored
    with the results (MODELS selects among them). The stack diff says which libraries changed.
    """
    settings = RegressionSettings(
        threshold=parse_fraction(threshold, "--threshold", high=10.0),
        confidence=parse_fraction(confidence, "--confidence"),
    )
    if history and base is not None:
        raise UsageError("--history looks at one stack (--head); --base is for comparing two")
    with open_read_only(db, db_file) as store:
        found = regressions(
            store,
            system or [cli_settings().system_name()],
            base=base,
            head=head,
            history=history,
            models=model_names(models, store.model_names()) or (),
            settings=settings,
        )
    reports = [f.report for f in found]
    if repro is not None:
        for f in found:
            sides = [f.report.base] if f.report.base == f.report.head else [f.report.base, f.report.head]
            diff = [f"{d.path}: {d.before} -> {d.after}" for d in f.report.stack_diff]
            folder = repro / f.report.system if len(found) > 1 else repro
            write_repro(
                f.report.system, repro_targets(f), {s: f.stacks.get(s, {}) for s in sides}, folder, stack_diff=diff
            )
    if not emit(format, regression_documents(reports), regression_rows(reports)):
        for report in reports:
            console().print(regression_group(report, show_all=show_all))
    flagged = sum(len(r.regressions) + (len(r.improvements) if fail_on is FailOn.change else 0) for r in reports)
    if fail_on is not FailOn.none and flagged:
        raise typer.Exit(1)
