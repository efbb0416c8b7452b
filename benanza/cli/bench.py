"""`benanza bench run` and `benanza run` (the main job without Ray): benchmark on this machine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from benanza.bench.generate import plan_report
from benanza.cli.analyze import report_lower_bounds
from benanza.cli.common import (
    MAIN_JOB_GRANULARITY,
    BatchesOpt,
    BenanzaGroup,
    DimOpt,
    EpOpt,
    FormatOpt,
    GranOpt,
    InputOpt,
    MainThreadsOpt,
    MaxTimeOpt,
    MinTimeOpt,
    ModelsArg,
    OptLevelOpt,
    PrecisionOpt,
    RepeatOpt,
    RetryFailedOpt,
    RuntimeOpt,
    ScheduleOpt,
    ShapeOpt,
    SystemOpt,
    TensorCoresOpt,
    ThreadsOpt,
    ValueOpt,
)
from benanza.cli.pipeline import (
    bench_with_progress,
    open_context,
    plans_for,
    print_notes,
    print_summary,
    requested,
    warn_run,
)
from benanza.cli.store_options import DbFileOpt, DbOpt, store_uri
from benanza.config import MAIN_JOB_HARNESS, MAIN_JOB_THREADS
from benanza.local import analyze
from benanza.report.output import OutputFormat, emit

app = typer.Typer(
    cls=BenanzaGroup, help="Benchmark unique layers, execution groups, sequences and models.", no_args_is_help=True
)


def analyze_plans(ctx, plans, format, plot):
    """This machine's lower bounds of the plans it just measured (its current stack's records), rendered."""
    report_lower_bounds(ctx.store, analyze(ctx, plans), format, plot)


@app.command("run")
def bench_run(
    models: ModelsArg = None,
    batch: BatchesOpt = None,
    shape: ShapeOpt = None,
    dim: DimOpt = None,
    value: ValueOpt = None,
    input: InputOpt = None,
    granularity: GranOpt = "",
    db: DbOpt = None,
    db_file: DbFileOpt = None,
    e2e: Annotated[bool, typer.Option("--e2e", help="also measure every model end to end")] = False,
    retry_failed: RetryFailedOpt = False,
    repeat: RepeatOpt = False,
    threads: ThreadsOpt = None,
    opt_level: OptLevelOpt = "extended",
    system: SystemOpt = None,
    min_time: MinTimeOpt = None,
    max_time: MaxTimeOpt = None,
    schedule: ScheduleOpt = None,
    runtime: RuntimeOpt = "onnxruntime",
    ep: EpOpt = None,
    precision: PrecisionOpt = None,
    tensor_cores: TensorCoresOpt = None,
    format: FormatOpt = OutputFormat.table,
) -> None:
    """Benchmark what the database lacks for this system and software stack."""
    wanted = requested(batch, shape, granularity, dim, value, input)
    ctx = open_context(
        store_uri(db, db_file),
        runtime,
        system=system,
        min_time=min_time,
        max_time=max_time,
        schedule=schedule,
        threads=threads,
        opt_level=opt_level,
        ep=ep,
        precision=precision,
        tensor_cores=tensor_cores,
    )
    try:
        plans = plans_for(ctx, models, wanted)
        summary = bench_with_progress(
            ctx, plans, e2e, retry_failed, quiet=format is not OutputFormat.table, repeat=repeat
        )
    finally:
        ctx.close()
    out = {
        **summary.to_dict(),
        "disturbed": summary.disturbed,
        "deferred_reason": summary.deferred_reason,
        "system": ctx.system,
        "stack_id": ctx.stack_id,
        "runtime": ctx.runtime.name,
        "variant": ctx.variant,
        **plan_report(plans),
    }
    if not emit(format, out, [out]):
        print_summary(ctx, summary)
    print_notes(ctx)
    warn_run(summary)


def run_command(
    models: ModelsArg = None,
    batch: BatchesOpt = None,
    shape: ShapeOpt = None,
    dim: DimOpt = None,
    value: ValueOpt = None,
    input: InputOpt = None,
    granularity: GranOpt = MAIN_JOB_GRANULARITY,
    db: DbOpt = None,
    db_file: DbFileOpt = None,
    threads: MainThreadsOpt = MAIN_JOB_THREADS,
    opt_level: OptLevelOpt = "extended",
    system: SystemOpt = None,
    min_time: MinTimeOpt = MAIN_JOB_HARNESS["min_time_s"],
    max_time: MaxTimeOpt = MAIN_JOB_HARNESS["max_time_s"],
    schedule: ScheduleOpt = None,
    runtime: RuntimeOpt = "onnxruntime",
    ep: EpOpt = None,
    precision: PrecisionOpt = None,
    tensor_cores: TensorCoresOpt = None,
    retry_failed: RetryFailedOpt = False,
    plot: Annotated[Path | None, typer.Option(help="save bars and per-layer breakdowns as PNG")] = None,
    format: FormatOpt = OutputFormat.table,
) -> None:
    """The main job: benchmark the models (layers, groups, sequences, end to end), then analyze."""
    wanted = requested(batch, shape, granularity, dim, value, input)
    ctx = open_context(
        store_uri(db, db_file),
        runtime,
        system=system,
        min_time=min_time,
        max_time=max_time,
        schedule=schedule,
        threads=threads,
        opt_level=opt_level,
        ep=ep,
        precision=precision,
        tensor_cores=tensor_cores,
    )
    try:
        plans = plans_for(ctx, models, wanted)
        summary = bench_with_progress(
            ctx, plans, e2e=True, retry_failed=retry_failed, quiet=format is not OutputFormat.table
        )
        if format is OutputFormat.table:
            print_summary(ctx, summary)
        print_notes(ctx)
        warn_run(summary)
        analyze_plans(ctx, plans, format, plot)
    finally:
        ctx.close()
