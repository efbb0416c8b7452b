"""`benanza bench ...` and `benanza analyze ...`: the single-machine pipeline."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from benanza.cli.common import FormatOpt, ModelsArg, ShapeOpt, handles_errors, model_paths, parse_count, parse_int_list
from benanza.cli.store_options import DbFileOpt, DbOpt, store_uri
from benanza.config import MAIN_JOB_GRANULARITIES, MAIN_JOB_HARNESS
from benanza.report.output import OutputFormat, console, emit

bench_app = typer.Typer(help="Benchmark unique layers, execution groups, sequences and models.", no_args_is_help=True)
analyze_app = typer.Typer(
    help="Lower bounds and composed estimates from the performance database.", no_args_is_help=True
)

BatchesOpt = Annotated[str, typer.Option("--batch", "-b", help="batch sizes, comma-separated")]
GranOpt = Annotated[str, typer.Option("--granularity", "-g", help="DLBricks sequence sizes G, comma-separated")]
ThreadsOpt = Annotated[str | None, typer.Option("--threads", metavar="N", help="intra-op threads (default: all cores)")]
OptLevelOpt = Annotated[str, typer.Option("--opt-level", help="ONNX Runtime graph optimisation level")]
SystemOpt = Annotated[str | None, typer.Option("--system", help="system name (default: $BENANZA_SYSTEM or hostname)")]
SystemsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--system",
        help="stored systems to analyze: names (repeatable or comma-separated) or 'all' (default: this machine)",
    ),
]
StackOpt = Annotated[str, typer.Option("--stack", help="with --system: 'latest' stack of each system, 'all', or an id")]
MinTimeOpt = Annotated[float | None, typer.Option("--min-time", help="minimum seconds of samples per benchmark")]
MaxTimeOpt = Annotated[float | None, typer.Option("--max-time", help="time cap in seconds per benchmark")]
RuntimeOpt = Annotated[
    str, typer.Option("--runtime", help="onnxruntime (CPU, or --ep cuda) or cudnn (the GPU runtime)")
]
EpOpt = Annotated[str | None, typer.Option("--ep", help="onnxruntime: execution provider, cpu or cuda")]
PrecisionOpt = Annotated[
    str | None, typer.Option("--precision", help="cudnn: float32, float16 or bfloat16 (default float32)")
]
TensorCoresOpt = Annotated[
    bool | None,
    typer.Option("--tensor-cores/--no-tensor-cores", help="cudnn: allow tensor cores (float32: TF32); default on"),
]
ScheduleOpt = Annotated[
    str | None,
    typer.Option(
        "--schedule",
        help="sequential (one benchmark after another) or interleaved (each model's benchmarks sampled together "
        "in rounds, so host drift hits the parts and the whole alike; holds a model's benchmarks in memory at once)",
    ),
]


_MAIN_JOB_GRANULARITY = ",".join(map(str, MAIN_JOB_GRANULARITIES))

# Which command-line flags each runtime takes; a flag given to a runtime that has none is an error.
RUNTIME_FLAGS = {
    "onnxruntime": ("threads", "opt_level", "ep"),
    "cudnn": ("precision", "tensor_cores"),
    "null": (),
}


def _context(db, threads, opt_level, system, min_time=None, max_time=None, schedule=None, runtime=None, **gpu):
    from benanza.bench.harness import HarnessSettings
    from benanza.errors import UsageError
    from benanza.local import open_local

    threads = parse_count(threads, "--threads")
    flags = {"min_time_s": min_time, "max_time_s": max_time, "schedule": schedule}
    overrides = {k: v for k, v in flags.items() if v is not None}
    settings = HarnessSettings.from_env(**overrides)  # flags over BENANZA_HARNESS_*; invalid -> UsageError
    runtime = runtime or "onnxruntime"
    given = {"threads": threads, "opt_level": opt_level, **gpu}
    takes = RUNTIME_FLAGS.get(runtime, tuple(given))
    stray = [k for k, v in gpu.items() if v is not None and k not in takes]
    if stray:
        raise UsageError(f"--{stray[0].replace('_', '-')} is not an option of runtime {runtime!r}")
    options = {k: v for k, v in given.items() if k in takes and v is not None}
    return open_local(db, runtime, options, system, settings)


@dataclass(frozen=True)
class _Requested:
    """The parsed --batch, --shape and --granularity flags."""

    batches: list[int | None]
    overrides: dict[str, tuple[int, ...]]
    granularities: list[int]


def _requested(batch: str, shape: list[str] | None, granularity: str) -> _Requested:
    """Parse the flags that bind the models, before anything is opened: a bad one is one line."""
    from benanza.model.shapes import parse_shape_overrides

    return _Requested(
        parse_int_list(batch, "--batch") if batch else [None],
        parse_shape_overrides(shape),
        parse_int_list(granularity, "--granularity") if granularity else [],
    )


def _plans(ctx, models, requested: _Requested):
    from benanza.local import plan_models

    plans = plan_models(
        model_paths(models), ctx.runtime, requested.batches, requested.overrides, requested.granularities
    )
    _warn(plans)
    return plans


def _warn(plans):
    """Every node no benchmark covers, and every model planned without its fusion groups: one line each."""
    from benanza.bench.generate import plan_report
    from benanza.report.bench import plan_warnings

    for line in plan_warnings(plan_report(plans)):
        print(f"warning: {line}", file=sys.stderr)


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
    db_file: DbFileOpt = None,
    e2e: Annotated[bool, typer.Option("--e2e", help="also measure every model end to end")] = False,
    retry_failed: Annotated[bool, typer.Option("--retry-failed", help="measure stored failures again")] = False,
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
    requested = _requested(batch, shape, granularity)
    ctx = _context(
        store_uri(db, db_file),
        threads,
        opt_level,
        system,
        min_time,
        max_time,
        schedule,
        runtime,
        ep=ep,
        precision=precision,
        tensor_cores=tensor_cores,
    )
    try:
        plans = _plans(ctx, models, requested)
        summary = _bench(ctx, plans, e2e, retry_failed, quiet=format is not OutputFormat.table)
    finally:
        ctx.close()
    from benanza.bench.generate import plan_report

    out = {
        **summary.to_dict(),
        "deferred_reason": summary.deferred_reason,
        "system": ctx.system,
        "stack_id": ctx.stack_id,
        "runtime": ctx.runtime.name,
        "variant": ctx.variant,
        **plan_report(plans),
    }
    if not emit(format, out, [out]):
        _print_summary(ctx, summary)
    _warn_deferred(summary)


def _print_summary(ctx, summary) -> None:
    deferred = f", deferred {summary.deferred}" if summary.deferred else ""
    console().print(
        f"[bold]{ctx.system}[/] stack {ctx.stack_id} ({ctx.variant}): measured {summary.measured}, "
        f"reused {summary.reused}, failed {summary.failed}, skipped {summary.skipped}{deferred}"
    )


def _warn_deferred(summary) -> None:
    """One line on stderr for benchmarks the memory guard held back: not stored, a later run retries."""
    if summary.deferred:
        print(
            f"warning: {summary.deferred} benchmark(s) not run for lack of free memory, not stored "
            f"(the largest {summary.deferred_reason}); a later run retries them",
            file=sys.stderr,
        )


def _analyze(ctx, plans, format, plot, compare=False, config=None):
    from benanza.local import analyze

    report_lower_bounds(ctx.store, analyze(ctx, plans), format, plot, compare=compare, config=config)


@analyze_app.command("lower-bound")
@handles_errors
def lower_bound_cmd(
    models: ModelsArg = None,
    batch: BatchesOpt = "",
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
    requested = _requested(batch, shape, granularity)
    if not system:
        if stack != "latest":
            from benanza.errors import UsageError

            raise UsageError("--stack selects stored stacks and needs --system")
        ctx = _context(
            store_uri(db, db_file),
            threads,
            opt_level,
            None,
            runtime=runtime,
            ep=ep,
            precision=precision,
            tensor_cores=tensor_cores,
        )
        try:
            _analyze(ctx, _plans(ctx, models, requested), format, plot, compare, config)
        finally:
            ctx.close()
        return
    from benanza.local import analyze_stored
    from benanza.store import open_store

    parse_count(threads, "--threads")  # not used with --system, but a bad value is still an error
    paths = model_paths(models)
    with open_store(store_uri(db, db_file), read_only=True) as store:
        rows = analyze_stored(
            store,
            paths,
            system,
            stack=stack,
            batches=requested.batches,
            overrides=requested.overrides,
            granularities=requested.granularities,
            opt_level=opt_level,
        )
        report_lower_bounds(store, rows, format, plot, compare=compare, config=config, by_system=True)


def report_lower_bounds(store, rows, format, plot, *, compare=False, config=None, by_system=False):
    """Lower-bound rows as JSON or a table, or the comparison across systems.

    The comparison replaces the rows with --compare and joins the table when the rows hold
    several systems or stacks; JSON without --compare is always the list of rows.
    """
    from benanza.report.bench import lower_bound_table

    several = by_system and len({(r.system, r.stack_id) for r in rows}) > 1
    if plot is not None:
        _plot(rows, plot, several)
    if compare or (several and format is OutputFormat.table):
        from benanza.analysis.compare import compare_systems
        from benanza.local import prices
        from benanza.report.compare import comparison_table

        comparisons = compare_systems(rows, prices(store, config))
        if emit(format, [c.to_dict() for c in comparisons], _comparison_rows(comparisons)):
            return
        if not compare:
            console().print(lower_bound_table(rows, by_system=True))
        console().print(comparison_table(comparisons))
    elif not emit(format, [r.to_dict() for r in rows]):
        console().print(lower_bound_table(rows, by_system=by_system))
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
    import dataclasses

    from benanza.report.plots import lower_bound_bars, unit_breakdown

    if several_systems:  # bars and file names tell systems and stacks apart
        rows = [dataclasses.replace(r, model=f"{r.system}_{r.stack_id}_{r.model}") for r in rows]
    lower_bound_bars(rows, plot)
    for row in rows:
        unit_breakdown(row, plot.with_name(f"{plot.stem}_{row.model}_b{row.batch_size}_layers{plot.suffix}"))


@analyze_app.command("optimizations")
@handles_errors
def optimizations_cmd(
    models: ModelsArg = None,
    batch: BatchesOpt = "",
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
    from benanza.local import optimize
    from benanza.report.optimize import op_type_table, optimizations_table

    requested = _requested(batch, shape, "")
    ctx = _context(
        store_uri(db, db_file), None, None, None, runtime=runtime, precision=precision, tensor_cores=tensor_cores
    )
    try:
        rows = optimize(ctx, _plans(ctx, models, requested))
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


@analyze_app.command("systems")
@handles_errors
def systems_cmd(
    models: ModelsArg = None,
    system: Annotated[
        list[str] | None, typer.Option("--system", help="system names (repeatable or comma-separated) or 'all'")
    ] = None,
    db: DbOpt = None,
    db_file: DbFileOpt = None,
    batch: Annotated[str, typer.Option("--batch", "-b", metavar="N", help="batch size of the corpus coverage")] = "1",
    shape: ShapeOpt = None,
    top: Annotated[str, typer.Option("--top", metavar="N", help="slowest layers to list per system")] = "10",
    format: FormatOpt = OutputFormat.table,
) -> None:
    """Per system: hardware, stacks over time, records by kind and outcome, slowest layers, corpus coverage.

    The corpus (for coverage) is MODELS, or the zoo when none are given.
    """
    from benanza.local import system_reports
    from benanza.model.shapes import parse_shape_overrides
    from benanza.report.compare import systems_tables
    from benanza.store import open_store

    batch_size, overrides = parse_count(batch, "--batch"), parse_shape_overrides(shape)
    slowest = parse_count(top, "--top", minimum=0)
    paths = model_paths(models)
    with open_store(store_uri(db, db_file), read_only=True) as store:
        reports = system_reports(store, system or ["all"], paths, batch=batch_size, overrides=overrides, top=slowest)
    if not emit(format, [r.to_dict() for r in reports]):
        console().print(systems_tables(reports))


def run_command(
    models: ModelsArg = None,
    batch: BatchesOpt = "1",
    shape: ShapeOpt = None,
    granularity: GranOpt = _MAIN_JOB_GRANULARITY,
    db: DbOpt = None,
    db_file: DbFileOpt = None,
    threads: ThreadsOpt = None,
    opt_level: OptLevelOpt = "extended",
    system: SystemOpt = None,
    min_time: MinTimeOpt = MAIN_JOB_HARNESS["min_time_s"],
    max_time: MaxTimeOpt = MAIN_JOB_HARNESS["max_time_s"],
    schedule: ScheduleOpt = None,
    runtime: RuntimeOpt = "onnxruntime",
    ep: EpOpt = None,
    precision: PrecisionOpt = None,
    tensor_cores: TensorCoresOpt = None,
    plot: Annotated[Path | None, typer.Option(help="save bars and per-layer breakdowns as PNG")] = None,
    format: FormatOpt = OutputFormat.table,
) -> None:
    """The main job: benchmark the models (layers, groups, sequences, end to end), then analyze."""
    requested = _requested(batch, shape, granularity)
    ctx = _context(
        store_uri(db, db_file),
        threads,
        opt_level,
        system,
        min_time,
        max_time,
        schedule,
        runtime,
        ep=ep,
        precision=precision,
        tensor_cores=tensor_cores,
    )
    try:
        plans = _plans(ctx, models, requested)
        summary = _bench(ctx, plans, e2e=True, retry_failed=False, quiet=format is not OutputFormat.table)
        if format is OutputFormat.table:
            _print_summary(ctx, summary)
        _warn_deferred(summary)
        _analyze(ctx, plans, format, plot)
    finally:
        ctx.close()
