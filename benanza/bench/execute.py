"""Running specs on a runtime and storing the results, incrementally.

``run_spec`` turns one spec into one ``BenchmarkRecord`` whatever happens: a spec the
runtime does not support is stored as skipped with the reason, one that raises is stored
as failed with the error; neither stops the rest. ``run_specs`` measures only what the
store lacks for this system and stack and writes results in batches.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from benanza.bench.harness import HarnessSettings, measure
from benanza.bench.spec import BenchmarkSpec
from benanza.bench.stats import describe
from benanza.errors import one_line
from benanza.store.records import BenchmarkRecord, Outcome, make_record


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def run_spec(
    spec: BenchmarkSpec,
    runtime: Any,
    settings: HarnessSettings,
    *,
    system: str,
    stack_id: str,
    host: str | None = None,
) -> BenchmarkRecord:
    """Measure one spec; every outcome is a record."""
    started = time.perf_counter()
    settings_doc = {"runtime": runtime.variant(), "harness": settings.model_dump()}
    samples: tuple[float, ...] = ()
    kernel: tuple[float, ...] = ()
    stats = kernel_stats = None
    reason = runtime.supports(spec)
    if reason is not None:
        outcome = Outcome.SKIPPED
    else:
        prepared = None
        try:
            prepared = runtime.prepare(spec)
            timing = measure(prepared.call, settings)
            samples, stats = timing.samples, timing.stats.to_dict()
            stats["stopped_by"] = timing.stopped_by
            stats["iterations"] = timing.iterations
            if settings.kernel_runs > 0:
                per_run = prepared.kernel_times(settings.kernel_runs)
                if per_run:
                    kernel = tuple(per_run)
                    kernel_stats = describe(kernel).to_dict()
            outcome = Outcome.OK
        except Exception as exc:  # a spec that cannot run is a stored failure, not a crash
            outcome, reason = (
                Outcome.FAILED,
                f"{type(exc).__name__}: {one_line(exc)}",
            )
        finally:
            if prepared is not None:
                prepared.close()
    return make_record(
        spec,
        system=system,
        stack_id=stack_id,
        outcome=outcome,
        reason=reason,
        samples=samples,
        stats=stats,
        kernel_samples=kernel,
        kernel_stats=kernel_stats,
        settings=settings_doc,
        measured_at=_now(),
        host=host,
        duration_s=time.perf_counter() - started,
    )


@dataclass
class RunSummary:
    measured: int = 0
    reused: int = 0
    failed: int = 0
    skipped: int = 0
    records: list[BenchmarkRecord] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, int]:
        return {"measured": self.measured, "reused": self.reused, "failed": self.failed, "skipped": self.skipped}


def run_specs(
    specs: Sequence[BenchmarkSpec],
    runtime: Any,
    store: Any,
    settings: HarnessSettings,
    *,
    system: str,
    stack_id: str,
    retry_failed: bool = False,
    batch: int = 16,
    progress: Callable[[BenchmarkSpec, BenchmarkRecord], None] | None = None,
) -> RunSummary:
    """Measure the specs the store lacks for (system, stack); upsert results in batches."""
    present = store.present_spec_ids(system, stack_id)
    if retry_failed:
        failed = {r.spec_id for r in store.records(system=system, stack_id=stack_id, outcome="failed")}
        present -= failed
    todo = missing(specs, present)
    summary = RunSummary(reused=len(specs) - len(todo))
    pending: list[BenchmarkRecord] = []
    for spec in todo:
        record = run_spec(spec, runtime, settings, system=system, stack_id=stack_id)
        pending.append(record)
        summary.records.append(record)
        if record.outcome == Outcome.OK:
            summary.measured += 1
        elif record.outcome == Outcome.FAILED:
            summary.failed += 1
        else:
            summary.skipped += 1
        if progress is not None:
            progress(spec, record)
        if len(pending) >= batch:
            store.upsert(pending)
            pending = []
    if pending:
        store.upsert(pending)
    return summary


def missing(specs: Iterable[BenchmarkSpec], present: set[str]) -> list[BenchmarkSpec]:
    """The specs whose id the store does not hold yet, in order."""
    return [s for s in specs if s.spec_id not in present]
