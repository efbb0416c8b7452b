"""`benanza bench ...` and `benanza analyze ...`: the single-machine pipeline."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from benanza.cli.common import FormatOpt, ModelsArg, ShapeOpt, handles_errors, model_paths, parse_int_list
from benanza.report.output import OutputFormat, console, emit_json

bench_app = typer.Typer(help="Benchmark unique layers, execution groups, sequences and models.", no_args_is_help=True)
analyze_app = typer.Typer(
    help="Lower bounds and composed estimates from the performance database.", no_args_is_help=True
)

DbOpt = Annotated[str | None, typer.Option("--db", help="store URI (default: $BENANZA_DB or sqlite:///benanza.db)")]
BatchesOpt = Annotated[str, typer.Option("--batch", "-b", help="batch sizes, comma-separated")]
GranOpt = Annotated[str, typer.Option("--granularity", "-g", help="DLBricks sequence sizes G, comma-separated")]
ThreadsOpt = Annotated[int | None, typer.Option("--threads", help="intra-op threads (default: all cores)", min=1)]
OptLevelOpt = Annotated[str, typer.Option("--opt-level", help="ONNX Runtime graph optimisation level")]
SystemOpt = Annotated[str | None, typer.Option("--system", help="system name (default: $BENANZA_SYSTEM or hostname)")]
MinTimeOpt = Annotated[float | None, typer.Option("--min-time", help="minimum seconds of samples per benchmark")]
MaxTimeOpt = Annotated[float | None, typer.Option("--max-time", help="time cap in seconds per benchmark")]


def _context(db, threads, opt_level, system, min_time=None, max_time=None):
    from benanza.bench.harness import HarnessSettings
    from benanza.local import open_local

    overrides = {k: v for k, v in {"min_time_s": min_time, "max_time_s": max_time}.items() if v is not None}
    settings = HarnessSettings.from_env(**overrides)  # flags over BENANZA_HARNESS_*; invalid -> UsageError
    return open_local(db, "onnxruntime", {"threads": threads, "opt_level": opt_level}, system, settings)


def _plans(ctx, models, batch, shape, granularity):
    from benanza.local import plan_models
    from benanza.model.shapes import parse_shape_overrides

    batches = parse_int_list(batch, "--batch") if batch else [None]
    grans = parse_int_list(granularity, "--granularity") if granularity else []
    return plan_models(model_paths(models), ctx.runtime, batches, parse_shape_overrides(shape), grans)


def _bench(ctx, plans, e2e, retry_failed, quiet):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from benanza.local import bench, specs_for

    total = len(specs_for(ctx, plans, e2e))
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console(file=sys.stderr),
        disable=quiet,
        transient=True,
    ) as bar:
        task = bar.add_task(f"benchmarking on {ctx.system}", total=total)
        bar.update(task, completed=0)

        def progress(spec, record):
            bar.update(task, advance=1, description=f"{spec.kind}: {spec.label[:40]}")

        summary = bench(ctx, plans, e2e=e2e, retry_failed=retry_failed, progress=progress)
    return summary


@bench_app.command("run")
@handles_errors
def bench_run(
    models: ModelsArg = None,
    batch: BatchesOpt = "",
    shape: ShapeOpt = None,
    granularity: GranOpt = "",
    db: DbOpt = None,
    e2e: Annotated[bool, typer.Option("--e2e", help="also measure every model end to end")] = False,
    retry_failed: Annotated[bool, typer.Option("--retry-failed", help="measure stored failures again")] = False,
    threads: ThreadsOpt = None,
    opt_level: OptLevelOpt = "extended",
    system: SystemOpt = None,
    min_time: MinTimeOpt = None,
    max_time: MaxTimeOpt = None,
    format: FormatOpt = OutputFormat.table,
) -> None:
    """Benchmark what the database lacks for this system and software stack."""
    ctx = _context(db, threads, opt_level, system, min_time, max_time)
    try:
        plans = _plans(ctx, models, batch, shape, granularity)
        summary = _bench(ctx, plans, e2e, retry_failed, quiet=format is OutputFormat.json)
    finally:
        ctx.close()
    out = {
        **summary.to_dict(),
        "system": ctx.system,
        "stack_id": ctx.stack_id,
        "runtime": ctx.runtime.name,
        "variant": ctx.variant,
    }
    if format is OutputFormat.json:
        emit_json(out)
    else:
        console().print(
            f"[bold]{ctx.system}[/] stack {ctx.stack_id} ({ctx.variant}): measured {summary.measured}, "
            f"reused {summary.reused}, failed {summary.failed}, skipped {summary.skipped}"
        )


def _analyze(ctx, plans, format, plot):
    from benanza.local import analyze
    from benanza.report.bench import lower_bound_table

    rows = analyze(ctx, plans)
    if plot is not None:
        from benanza.report.plots import lower_bound_bars, unit_breakdown

        lower_bound_bars(rows, plot)
        for row in rows:
            unit_breakdown(row, plot.with_name(f"{plot.stem}_{row.model}_b{row.batch_size}_layers{plot.suffix}"))
    if format is OutputFormat.json:
        emit_json([r.to_dict() for r in rows])
    else:
        console().print(lower_bound_table(rows))


@analyze_app.command("lower-bound")
@handles_errors
def lower_bound_cmd(
    models: ModelsArg = None,
    batch: BatchesOpt = "",
    shape: ShapeOpt = None,
    granularity: GranOpt = "1,2,3,4,5",
    db: DbOpt = None,
    threads: ThreadsOpt = None,
    opt_level: OptLevelOpt = "extended",
    system: SystemOpt = None,
    plot: Annotated[Path | None, typer.Option(help="save bars (and per-layer breakdowns beside it) as PNG")] = None,
    format: FormatOpt = OutputFormat.table,
) -> None:
    """Sequential and parallel lower bounds, DLBricks composition and end-to-end latency."""
    ctx = _context(db, threads, opt_level, system)
    try:
        plans = _plans(ctx, models, batch, shape, granularity)
        _analyze(ctx, plans, format, plot)
    finally:
        ctx.close()


def run_command(
    models: ModelsArg = None,
    batch: BatchesOpt = "1",
    shape: ShapeOpt = None,
    granularity: GranOpt = "1,3",
    db: DbOpt = None,
    threads: ThreadsOpt = None,
    opt_level: OptLevelOpt = "extended",
    system: SystemOpt = None,
    min_time: MinTimeOpt = 0.02,
    max_time: MaxTimeOpt = 0.5,
    plot: Annotated[Path | None, typer.Option(help="save bars and per-layer breakdowns as PNG")] = None,
    format: FormatOpt = OutputFormat.table,
) -> None:
    """The main job: benchmark the models (layers, groups, sequences, end to end), then analyze."""
    ctx = _context(db, threads, opt_level, system, min_time, max_time)
    try:
        plans = _plans(ctx, models, batch, shape, granularity)
        summary = _bench(ctx, plans, e2e=True, retry_failed=False, quiet=format is OutputFormat.json)
        if format is not OutputFormat.json:
            console().print(
                f"[bold]{ctx.system}[/] stack {ctx.stack_id} ({ctx.variant}): measured {summary.measured}, "
                f"reused {summary.reused}, failed {summary.failed}, skipped {summary.skipped}"
            )
        _analyze(ctx, plans, format, plot)
    finally:
        ctx.close()
