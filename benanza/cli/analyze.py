"""`benanza analyze ...`: lower bounds, optimisation analyses and systems, from the performance database."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer

from benanza.analysis.compare import compare_systems
from benanza.cli.common import (
    BatchesOpt,
    BenanzaGroup,
    EpOpt,
    FormatOpt,
    GranOpt,
    ModelsArg,
    OptLevelOpt,
    PrecisionOpt,
    RuntimeOpt,
    ShapeOpt,
    StackOpt,
    SystemsOpt,
    TensorCoresOpt,
    ThreadsOpt,
    model_paths,
    one_batch,
    parse_count,
)
from benanza.cli.pipeline import open_context, plans_for, requested
from benanza.cli.store_options import DbFileOpt, DbOpt, store_uri
from benanza.errors import UsageError
from benanza.local import analyze, analyze_stored, optimize, prices, system_reports
from benanza.model.shapes import parse_shape_overrides
from benanza.report.bench import lower_bound_table
from benanza.report.compare import comparison_table, systems_tables
from benanza.report.optimize import op_type_table, optimizations_table
from benanza.report.output import OutputFormat, console, emit
from benanza.report.plots import lower_bound_bars, unit_breakdown
from benanza.store import open_store

app = typer.Typer(
    cls=BenanzaGroup, help="Lower bounds and composed estimates from the performance database.", no_args_is_help=True
)


def analyze_plans(ctx, plans, format, plot, compare=False, config=None):
    """This machine's lower bounds of ``plans`` from its current stack's records, rendered."""
    report_lower_bounds(ctx.store, analyze(ctx, plans), format, plot, compare=compare, config=config)


@app.command("lower-bound")
def lower_bound_cmd(
    models: ModelsArg = None,
    batch: BatchesOpt = None,
    shape: ShapeOpt = None,
    granularity: GranOpt = "1,2,3,4,5",
    db: DbOpt = None,
    db_file: DbFileOpt = None,
    threads: ThreadsOpt = None,
    opt_level: OptLevelOpt = "extended",
    system: SystemsOpt = None,
    stack: StackOpt = "latest",
    compare: Annotated[bool, typer.Option("--compare", help="print the comparison across systems instead")] = False,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="fleet config TOML whose systems' price_per_hour replace stored ones"),
    ] = None,
    plot: Annotated[Path | None, typer.Option(help="save bars (and per-layer breakdowns beside it) as PNG")] = None,
    runtime: RuntimeOpt = "onnxruntime",
    ep: EpOpt = None,
    precision: PrecisionOpt = None,
    tensor_cores: TensorCoresOpt = None,
    format: FormatOpt = OutputFormat.table,
) -> None:
    """Sequential and parallel lower bounds, DLBricks composition and end-to-end latency.

    Without --system: this machine's current stack and runtime settings. With --system:
    what the named systems stored (each system's latest stack unless --stack says otherwise),
    with a comparison across them; plans are made with the local ONNX Runtime.
    """
    wanted = requested(batch, shape, granularity)
    if not system:
        if stack != "latest":
            raise UsageError("--stack selects stored stacks and needs --system")
        ctx = open_context(
            store_uri(db, db_file),
            runtime,
            threads=threads,
            opt_level=opt_level,
            ep=ep,
            precision=precision,
            tensor_cores=tensor_cores,
        )
        try:
            analyze_plans(ctx, plans_for(ctx, models, wanted), format, plot, compare, config)
        finally:
            ctx.close()
        return
    parse_count(threads, "--threads")  # not used with --system, but a bad value is still an error
    paths = model_paths(models)
    with open_store(store_uri(db, db_file), read_only=True) as store:
        rows = analyze_stored(
            store,
            paths,
            system,
            stack=stack,
            batches=wanted.batches,
            overrides=wanted.overrides,
            granularities=wanted.granularities,
            opt_level=opt_level,
        )
        report_lower_bounds(store, rows, format, plot, compare=compare, config=config, by_system=True)


def report_lower_bounds(store, rows, format, plot, *, compare=False, config=None, by_system=False):
    """Lower-bound rows as JSON or a table, or the comparison across systems.

    The comparison replaces the rows with --compare and joins the table when the rows hold
    several systems or stacks; JSON without --compare is always the list of rows.
    """
    several = by_system and len({(r.system, r.stack_id) for r in rows}) > 1
    if plot is not None:
        _plot(rows, plot, several)
    if compare or (several and format is OutputFormat.table):
        comparisons = compare_systems(rows, prices(store, config))
        if emit(format, [c.to_dict() for c in comparisons], _comparison_rows(comparisons)):
            return
        if not compare:
            console().print(lower_bound_table(rows, by_system=True))
        console().print(comparison_table(comparisons))
    elif not emit(format, [r.to_dict() for r in rows]):
        console().print(lower_bound_table(rows, by_system=by_system))
        if any(r.disturbed for r in rows):
            console().print(
                "(disturbed): the host's speed changed while a measurement it is built from ran, and again when"
                " measured again: not a figure to trust; measure again on a quieter machine"
            )
        for r in rows:
            for check in r.checks:
                console().print(f"check: {r.model} (batch {r.batch_size}): {check}")


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
    models: ModelsArg = None,
    batch: BatchesOpt = None,
    shape: ShapeOpt = None,
    db: DbOpt = None,
    db_file: DbFileOpt = None,
    runtime: RuntimeOpt = "cudnn",
    precision: PrecisionOpt = None,
    tensor_cores: TensorCoresOpt = None,
    by_op: Annotated[bool, typer.Option("--by-op", help="also the default-vs-best table per op type")] = False,
    format: FormatOpt = OutputFormat.table,
) -> None:
    """Benanza's analyses on this GPU: algorithm choice, tensor cores, fusion, parallelism, framework gap."""
    wanted = requested(batch, shape, "")
    ctx = open_context(store_uri(db, db_file), runtime, precision=precision, tensor_cores=tensor_cores)
    try:
        rows = optimize(ctx, plans_for(ctx, models, wanted))
    finally:
        ctx.close()
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
    models: ModelsArg = None,
    system: SystemsOpt = None,
    db: DbOpt = None,
    db_file: DbFileOpt = None,
    batch: BatchesOpt = "1",
    shape: ShapeOpt = None,
    top: Annotated[str, typer.Option("--top", metavar="N", help="slowest layers to list per system")] = "10",
    format: FormatOpt = OutputFormat.table,
) -> None:
    """Per system: hardware, stacks over time, records by kind and outcome, slowest layers, corpus coverage.

    The corpus (for coverage) is MODELS at one batch size, or the zoo when none are given.
    """
    batch_size, overrides = one_batch(batch, "analyze systems"), parse_shape_overrides(shape)
    slowest = parse_count(top, "--top", minimum=0)
    paths = model_paths(models)
    with open_store(store_uri(db, db_file), read_only=True) as store:
        reports = system_reports(store, system or ["all"], paths, batch=batch_size, overrides=overrides, top=slowest)
    if not emit(format, [r.to_dict() for r in reports]):
        console().print(systems_tables(reports))
