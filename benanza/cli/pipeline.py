"""What the commands that benchmark share: the system's context from their flags, plans, progress, summaries.

``benanza run`` and ``bench run`` open the same context: the store, this system's runtime
with the options its flags give, and the harness settings (flags over
``BENANZA_HARNESS_*``). ``analyze`` opens none: it reads the database only.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from benanza.bench.generate import ModelPlan, plan_report
from benanza.cli.common import cli_settings, model_paths, parse_batches, parse_int_list, parse_threads
from benanza.crashes import first_time
from benanza.errors import BenanzaError, UsageError
from benanza.local import LocalContext, bench, open_local, plan_models, specs_for
from benanza.model.request import BindingRequest
from benanza.report.bench import plan_notes, plan_warnings
from benanza.report.output import console
from benanza.report.progress import PaceColumn
from benanza.runtimes.base import runtime_options
from benanza.store.uri import StoreURI


def open_context(
    db: StoreURI | None,
    runtime: str = "onnxruntime",
    *,
    system: str | None = None,
    min_time: float | None = None,
    max_time: float | None = None,
    schedule: str | None = None,
    **flags: object,
) -> LocalContext:
    """This system's context from the command's flags; ``flags`` are the runtime flags it was given.

    A runtime takes the flags its factory declares (``runtimes.base.runtime_options``).

    A runtime flag (``--threads``, ``--precision``...) that was set but that the runtime does
    not declare is a ``UsageError``; one left at its default is dropped.
    """
    if "threads" in flags:
        flags["threads"] = parse_threads(flags["threads"], "--threads")
    env = cli_settings()
    harness = {"min_time_s": min_time, "max_time_s": max_time, "schedule": schedule}
    settings = env.harness_settings(**{k: v for k, v in harness.items() if v is not None})
    takes = set(runtime_options(runtime))
    stray = [k for k, v in flags.items() if v is not None and k not in takes and k in _STRICT_FLAGS]
    if stray:
        raise UsageError(f"--{stray[0].replace('_', '-')} is not an option of runtime {runtime!r}")
    options = {k: v for k, v in flags.items() if k in takes and v is not None}
    return open_local(db, runtime, options, system, settings, env=env)


# GPU flags are refused by a runtime without them; --threads and --opt-level have defaults and are ignored
_STRICT_FLAGS = ("ep", "precision", "tensor_cores")


@dataclass(frozen=True)
class Requested:
    """The parsed --batch, --granularity, --shape, --dim, --value and --input flags."""

    batches: list[int | None]
    request: BindingRequest
    granularities: list[int]


def requested(
    batch: str | None,
    shape: list[str] | None,
    granularity: str,
    dim: list[str] | None = None,
    value: list[str] | None = None,
    input: list[str] | None = None,
) -> Requested:
    """Parse the flags that bind the models, before anything is opened: a bad one is one line."""
    return Requested(
        parse_batches(batch),
        BindingRequest.parse(shape, dim, value, input),
        parse_int_list(granularity, "--granularity") if granularity else [],
    )


def plans_for(ctx: LocalContext, models: list[Path] | None, wanted: Requested) -> list[ModelPlan]:
    """Each model's plan per batch size, with a warning line for what no benchmark covers."""
    plans = plan_models(
        model_paths(models),
        ctx.runtime,
        wanted.batches,
        wanted.request,
        wanted.granularities,
        known=ctx.store.model_names(),
        on_crash=_left_out,  # the rest of the corpus goes on
    )
    warn_plans(plans)
    return plans


def _say_once(line: str) -> None:
    """``line`` on stderr, once over the runs of a command that ran again after a crash (``benanza.crashes``)."""
    if first_time(line):
        print(line, file=sys.stderr)


def _left_out(exc: BenanzaError) -> None:
    _say_once(f"warning: {exc}; left out")


def warn_plans(plans: Sequence[ModelPlan]) -> None:
    """What planning decided, for the record (``note:``), then every node no benchmark covers and every way a
    plan departs from what was asked (``warning:``): one line each."""
    said = plan_report(plans)
    lines = [f"note: {line}" for line in plan_notes(said)] + [f"warning: {line}" for line in plan_warnings(said)]
    for line in lines:
        _say_once(line)


def bench_with_progress(
    ctx: LocalContext, plans: Sequence[ModelPlan], e2e: bool, retry_failed: bool, quiet: bool, repeat: bool = False
):
    """``local.bench`` with a progress bar on stderr (none when ``quiet``)."""
    total = len(specs_for(ctx, plans, e2e))
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        PaceColumn(),
        console=console(file=sys.stderr),
        disable=quiet,
        transient=True,
    ) as bar:
        task = bar.add_task(f"benchmarking on {ctx.system}", total=total)
        bar.update(task, completed=0)

        def progress(spec, record):
            bar.update(task, advance=1, description=f"{spec.kind}: {spec.label[:40]}")

        return bench(ctx, plans, e2e=e2e, retry_failed=retry_failed, progress=progress, repeat=repeat)


def print_summary(ctx, summary) -> None:
    deferred = f", deferred {summary.deferred}" if summary.deferred else ""
    failures = summary.reused_failed
    reused_failed = f" ({failures} of them failures: --retry-failed measures them again)" if failures else ""
    disturbed = f" ({summary.disturbed} disturbed)" if summary.disturbed else ""
    console().print(
        f"[bold]{ctx.system}[/] stack {ctx.stack_id} ({ctx.variant}): measured {summary.measured}{disturbed}, "
        f"reused {summary.reused}{reused_failed}, failed {summary.failed}, skipped {summary.skipped}{deferred}"
    )


def print_notes(ctx) -> None:
    """One ``note:`` line on stderr per thing the runtime decided when it was built (the threads ``auto`` chose)."""
    for note in ctx.notes:
        print(f"note: {note}", file=sys.stderr)


def warn_run(summary) -> None:
    """One line on stderr for benchmarks the memory guard held back (not stored, a later run retries),
    and one for disturbed measurements the re-measure budget did not let measure again."""
    if summary.remeasure_note:
        print(f"note: {summary.remeasure_note}", file=sys.stderr)
    if summary.deferred:
        print(
            f"warning: {summary.deferred} benchmark(s) not run for lack of free memory, not stored "
            f"(the largest {summary.deferred_reason}); a later run retries them",
            file=sys.stderr,
        )
