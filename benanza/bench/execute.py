"""Running specs on a runtime and storing the results, incrementally.

``run_spec`` turns one spec into one ``BenchmarkRecord`` whatever happens: a spec the
runtime does not support is stored as skipped with the reason, one that raises is stored
as failed with the error; neither stops the rest. ``run_interleaved`` does the same for a
group of specs measured together in rounds (``HarnessSettings.schedule = "interleaved"``).
``run_specs`` measures only what the store lacks for this system and stack and writes
results in batches.

Nothing is allocated for a benchmark before the memory guard (``benanza.bench.memory``) has
compared its estimated memory with the system's: one that needs more than the physical
memory is stored as skipped with the reason; ``run_specs`` does not run, and does not store,
one that needs more than is free right now (a later run retries it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

from benanza.bench import host_cache
from benanza.bench.cold_weights import evicted_bytes, streamed_weight_bytes
from benanza.bench.contract import KernelProfiler, Prepared, Runtime
from benanza.bench.harness import HarnessSettings, Judge, Timing, measure, measure_interleaved
from benanza.bench.isolation import IsolatedRunner
from benanza.bench.memory import spec_memory
from benanza.bench.records import BenchmarkRecord, MeasurementStats, Outcome, make_record
from benanza.bench.reference import HostReference, reference_figure, reference_spec
from benanza.bench.remeasure import RemeasureBudget
from benanza.bench.spec import BenchmarkSpec, SpecKind
from benanza.bench.stats import Interval, describe
from benanza.crashes import measured_alone, native, note_stored, stored_earlier
from benanza.errors import UnsupportedLayer, one_line
from benanza.host_memory import MemoryReader, MemoryRefusal, refusal, system_memory

log = logging.getLogger(__name__)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _failure(exc: Exception) -> str:
    return f"{type(exc).__name__}: {one_line(exc)}"


def _timing_stats(timing: Timing) -> MeasurementStats:
    """The record's statistics: the samples', how sampling ended, and what the interference check found."""
    return MeasurementStats.of(
        timing.stats,
        stopped_by=timing.stopped_by,
        iterations=timing.iterations,
        disturbed=timing.disturbed,
        disturbed_reason=timing.disturbed_reason,
        cpu_share=timing.cpu_share,
        remeasured=timing.remeasured,
        other_cores=timing.other_cores,
        spent_s=timing.total_s,  # this benchmark's warm-up, calibration and samples (its share of a group's)
        kept_null=frozenset({"cpu_share"}),  # stored as null where it was not taken, as it always was
    )


def samples_at_cap(specs: Sequence[BenchmarkSpec], settings: HarnessSettings) -> int:
    """The samples the time cap waits for: ``min_samples`` where a whole model is measured, else 1.

    A whole model's end to end is the figure every other is compared with: three samples of
    VGG-19 (100 ms a call, alone in a memory-capped group) printed "109 ± 20" ms.
    """
    return settings.min_samples if any(s.kind is SpecKind.MODEL for s in specs) else 1


def run_spec(
    spec: BenchmarkSpec,
    runtime: Runtime,
    settings: HarnessSettings,
    *,
    system: str,
    stack_id: str,
    host: str | None = None,
    memory: MemoryReader = system_memory,
    budget: RemeasureBudget | None = None,
) -> BenchmarkRecord:
    """Measure one spec; every outcome is a record.

    A spec that needs more memory than the system has is skipped before anything is allocated.
    ``budget``: what re-measures of disturbed measurements may still spend (None: no limit).
    """
    started = time.perf_counter()
    samples: tuple[float, ...] = ()
    kernel: tuple[float, ...] = ()
    stats = None
    extra: dict[str, Any] = {}
    reason = runtime.supports(spec) or never_fits(spec, runtime, memory)
    if reason is not None:
        outcome = Outcome.SKIPPED
    else:
        prepared = None
        try:
            # a crash of the process in here, its sessions' teardown too, is survived (``benanza.crashes``):
            # a failed record when the command runs again
            with native("benchmark", spec.spec_id, benchmark_label(spec)):
                try:
                    prepared = runtime.prepare(spec)
                    extra = dict(prepared.provenance)  # which framework ran a model, say
                    measured = prepared.measure(settings)  # on a device: several candidates, device timers
                    if measured is not None:
                        samples, stats, kernel = measured.samples, measured.stats, tuple(measured.kernel_samples)
                        extra.update(measured.settings)
                    else:
                        at_cap = samples_at_cap([spec], settings)
                        threads = runtime.cpu_threads()
                        evict_bytes = eviction_bytes(spec, prepared, settings)
                        timing = measure(
                            prepared.call,
                            settings,
                            threads=threads,
                            min_samples_at_cap=at_cap,
                            budget=budget,
                            before=_evicting(prepared, evict_bytes),
                        )
                        samples, stats = timing.samples, _timing_stats(timing)
                        wanted = takes_kernel_times(spec, settings)
                        kernel, how = _kernel_figures(
                            prepared, None, (), settings, timing, wanted, evict_bytes=evict_bytes
                        )
                        if how is not None:
                            extra["kernel_time"] = how
                        extra.update(_eviction_provenance(evict_bytes))
                        extra.update(prepared.provenance)  # what the calls found out while measured
                finally:
                    if prepared is not None:
                        prepared.close()
            outcome = Outcome.OK
        except UnsupportedLayer as exc:  # found only once the libraries were asked: a skip, with why
            outcome, reason = Outcome.SKIPPED, one_line(exc)
        except Exception as exc:  # a spec that cannot run is a stored failure, not a crash
            outcome, reason = Outcome.FAILED, _failure(exc)
    return _record(
        spec, runtime, settings, outcome, reason, samples, stats, kernel, system, stack_id, host, started, extra
    )


def benchmark_label(spec: BenchmarkSpec) -> str:
    """How a crash's line names a benchmark: its kind, what it is, and its id."""
    return f"the {spec.kind} benchmark {spec.label or '?'} ({spec.spec_id[:12]})"


def _record(
    spec: BenchmarkSpec,
    runtime: Runtime,
    settings: HarnessSettings,
    outcome: Outcome,
    reason: str | None,
    samples: tuple[float, ...],
    stats: MeasurementStats | None,
    kernel: tuple[float, ...],
    system: str,
    stack_id: str,
    host: str | None,
    started: float,
    extra: dict[str, Any] | None = None,
) -> BenchmarkRecord:
    return make_record(
        spec,
        system=system,
        stack_id=stack_id,
        outcome=outcome,
        reason=reason,
        samples=samples,
        stats=stats,
        kernel_samples=kernel,
        kernel_stats=describe(kernel) if kernel else None,
        settings={"runtime": runtime.variant(), "harness": settings.model_dump(), **(extra or {})},
        measured_at=_now(),
        host=host,
        duration_s=time.perf_counter() - started,
    )


def run_interleaved(
    specs: Sequence[BenchmarkSpec],
    runtime: Runtime,
    settings: HarnessSettings,
    *,
    system: str,
    stack_id: str,
    host: str | None = None,
    memory: MemoryReader = system_memory,
    budget: RemeasureBudget | None = None,
    judge: Judge | None = None,
) -> list[BenchmarkRecord]:
    """Measure a group of specs together: all prepared at once, then sampled in rounds.

    Kernel times come from each prepared benchmark's ``profiler()`` when the runtime has
    one, run beside the timed samples in rounds spread over the whole measurement (at
    least ``kernel_runs`` kept); otherwise from ``kernel_times`` after the rounds. One
    record per spec, in order; a spec that cannot be prepared or raises during the rounds
    is a failure and the others go on; one that needs more memory than the system has is
    skipped unprepared. Every prepared benchmark of the group is in memory at once (see
    ``group_chunks``). ``budget``: what re-measures of disturbed rounds may still spend (None: no limit).
    ``judge``: a verdict on the rounds beside the group's own checks (``harness.Judge``), given the
    samples by the specs' positions in ``specs``.
    """
    started = time.perf_counter()
    results: dict[int, BenchmarkRecord] = {}
    live: list[tuple[int, Prepared, KernelProfiler | None]] = []  # (position, prepared, profiler or None)
    evicts: dict[int, int] = {}  # by position: bytes read before each timed call (``eviction_bytes``; 0: none)
    model_weights = max((w for s in specs if (w := model_weight_bytes(s)) is not None), default=None)

    def done(
        i: int, outcome: Outcome, reason: str | None = None, timing: Timing | None = None, kernel=(), extra=None
    ) -> None:
        samples, stats = (timing.samples, _timing_stats(timing)) if timing is not None else ((), None)
        results[i] = _record(
            specs[i],
            runtime,
            settings,
            outcome,
            reason,
            samples,
            stats,
            tuple(kernel),
            system,
            stack_id,
            host,
            started,
            extra,
        )

    try:
        for i, spec in enumerate(specs):
            reason = runtime.supports(spec) or never_fits(spec, runtime, memory)
            if reason is not None:
                done(i, Outcome.SKIPPED, reason)
                continue
            prepared = profiler = None
            try:
                prepared = runtime.prepare(spec)
                evicts[i] = eviction_bytes(spec, prepared, settings, model_weights)
                if takes_kernel_times(spec, settings):
                    profiler = prepared.profiler(precalls=settings.interleave_precalls, evict_bytes=evicts[i])
            except Exception as exc:
                if prepared is not None:
                    prepared.close()
                done(i, Outcome.FAILED, _failure(exc))
                continue
            live.append((i, prepared, profiler))
        by_call = None
        if judge is not None:
            positions = [i for i, _, _ in live]
            by_call = Judge(lambda samples: judge.verdict({positions[c]: v for c, v in samples.items()}))
        rounds = measure_interleaved(
            [p.call for _, p, _ in live],
            settings,
            untimed=[prof.run if prof is not None else None for _, _, prof in live],
            untimed_runs=settings.kernel_runs if any(prof is not None for _, _, prof in live) else 0,
            # the model (at the variant's settings and at its runtime's defaults: one sum, or a group waits for
            # that whole-model figure to settle on a busy host, sampling every unit meanwhile), its layers, its
            # sequences, its fused groups: a sum each
            parts=[specs[i].kind for i, _, _ in live],
            threads=runtime.cpu_threads(),
            min_rounds=samples_at_cap([specs[i] for i, _, _ in live], settings),
            budget=budget,
            judge=by_call,
            before=[_evicting(p, evicts[i]) for i, p, _ in live],
        )
        if judge is not None and by_call is not None:
            judge.again += by_call.again
        for (i, prepared, profiler), timing in zip(live, rounds.timings, strict=True):
            if isinstance(timing, Exception):
                done(i, Outcome.FAILED, _failure(timing))
                continue
            try:
                kernel, how = _kernel_figures(
                    prepared, profiler, rounds.companions_kept, settings, timing, takes_kernel_times(specs[i], settings)
                )
                provenance = dict(prepared.provenance)  # as ``run_spec`` keeps it: what ran it, at which settings
                if how is not None:
                    provenance["kernel_time"] = how
                provenance.update(_eviction_provenance(evicts[i]))
            except Exception as exc:
                done(i, Outcome.FAILED, _failure(exc))
                continue
            done(i, Outcome.OK, timing=timing, kernel=kernel, extra=provenance)
    finally:
        for _, prepared, profiler in live:
            if profiler is not None:
                profiler.close()
            prepared.close()
    return [results[i] for i in range(len(specs))]


# a record's provenance for a benchmark timed with its weights pushed out of the caches (and by how many
# bytes of other data: ``weights_evicted_by_bytes``)
COLD_WEIGHTS = (
    "pushed out of the host's caches before each timed call by what the rest of its model reads (bench.cold_weights)"
)


def eviction_bytes(
    spec: BenchmarkSpec, prepared: Prepared, settings: HarnessSettings, model_weights: int | None = None
) -> int:
    """The bytes of other data read before each timed call of ``spec`` (``bench.cold_weights``), 0 for none:
    asked for (``evict_streamed_weights``), a runtime that can (``Prepared.evicts``), a network that streams
    its weights; then what the rest of the model measured beside it reads (``model_weights``: that model's
    weights; None: none, and the last-level cache is emptied), ``cold_weights.evicted_bytes``."""
    if not (settings.evict_streamed_weights and prepared.evicts) or spec.network is None:  # a model streams its own
        return 0
    streamed = streamed_weight_bytes(spec.network)
    return evicted_bytes(streamed, model_weights, host_cache.flush_bytes()) if streamed else 0


def _evicting(prepared: Prepared, evict_bytes: int) -> Callable[[], object] | None:
    """What runs untimed before each timed call of ``prepared`` (``eviction_bytes``): None for nothing."""
    return partial(prepared.evict_weights, evict_bytes) if evict_bytes else None


def _eviction_provenance(evict_bytes: int) -> dict[str, Any]:
    """A record's provenance for a benchmark timed after ``evict_bytes`` of other data (none for 0)."""
    return {"weights": COLD_WEIGHTS, "weights_evicted_by_bytes": evict_bytes} if evict_bytes else {}


def model_weight_bytes(spec: BenchmarkSpec) -> int | None:
    """The bytes of weights a whole model reads in a run, as its plan counted them
    (``cold_weights.weights_read_per_run``; a spec from before it: every weight it holds,
    ``memory.graph_memory``); None: not a model, or not known."""
    info = (spec.model or {}) if spec.kind is SpecKind.MODEL else {}
    weights = info.get("read_weight_bytes", info.get("weight_bytes"))
    return None if weights is None else int(weights)


def takes_kernel_times(spec: BenchmarkSpec, settings: HarnessSettings) -> bool:
    """Whether ``spec`` takes kernel times: profiled runs asked for, and its kind's read (``SpecKind.kernel_timed``).

    Not a model at its runtime's defaults or as exported: only its call latency is read, and its profiled
    runs and profiling session cost as much as its timing (a whole VGG-19 ten times more).
    """
    return settings.kernel_runs > 0 and spec.kind.kernel_timed and not (spec.at_runtime_defaults or spec.as_exported)


def _kernel_figures(
    prepared: Prepared,
    profiler: KernelProfiler | None,
    keep: Sequence[bool],
    settings: HarnessSettings,
    timing: Timing,
    wanted: bool,
    evict_bytes: int = 0,
) -> tuple[tuple[float, ...], dict[str, Any] | None]:
    """A benchmark's kernel times, the profiler's cost taken out, and how they were derived.

    From ``profiler`` (the interleaved schedule's companion runs, ``keep`` saying which
    count) when there is one, else from ``prepared.kernel_times`` (``kernel_runs`` back to back,
    ``evict_bytes``: each after that much other data, ``eviction_bytes``). None where ``wanted`` is false
    (``takes_kernel_times``).
    """
    if not wanted:
        return (), None
    if profiler is not None:
        raw = [k for k, kept in zip(profiler.finish(), keep, strict=True) if kept]
        runs = [r for r, kept in zip(profiler.run_times, keep, strict=False) if kept]
        left_out = [s for s, kept in zip(profiler.left_out, keep, strict=False) if kept]
        what, floor = profiler.left_out_what, profiler.node_floor_s
    else:
        raw = prepared.kernel_times(settings.kernel_runs, evict_bytes=evict_bytes) or []
        runs = prepared.profiled_run_times or None
        left_out, what = list(prepared.profiled_left_out), prepared.left_out_what
        floor = prepared.profiled_node_floor_s
    kernel, how = without_profiler_overhead(raw, runs, timing.stats.median)
    if how is not None and floor > 0:
        how["node_floor_s"] = floor
    if any(left_out):
        how = {**(how or {}), "left_out": what, "left_out_median_s": describe(left_out).median}
    return kernel, how


def without_profiler_overhead(
    kernel: Sequence[float], run_times: Sequence[float] | None, call_s: float
) -> tuple[tuple[float, ...], dict[str, Any] | None]:
    """Kernel times with the profiler's own cost taken out, and how they were derived.

    A runtime's profiler slows the runs it profiles, inside the kernel spans too: with two
    intra-op threads ONNX Runtime's per-node kernel times summed to 1.2x the unprofiled call
    of the same unit (ShuffleNet). Each profiled run's kernel time is therefore scaled by
    the unprofiled call latency over that run's profiled duration (never up): the kernels'
    share of the profiled run, applied to the run as it is without the profiler.

    Args:
        kernel: per profiled run, the kernel time in seconds as the profiler reported it.
        run_times: per profiled run, its whole duration in the profiled session (None: the
            runtime reports none, and kernel times are kept as they are).
        call_s: the unprofiled call latency (median) of the same benchmark.

    Returns:
        The kernel times to store, and ``None`` or the provenance: the method, the raw median
        and the median scale applied.
    """
    kernel = tuple(kernel)
    if not kernel or not run_times or len(run_times) != len(kernel) or call_s <= 0:
        return kernel, None
    scales = [min(1.0, call_s / r) if r > 0 else 1.0 for r in run_times]
    scaled = tuple(k * f for k, f in zip(kernel, scales, strict=True))
    return scaled, {
        "method": "profiled kernel time x min(1, unprofiled call median / profiled run time)",
        "raw_median_s": describe(kernel).median,
        "scale_median": describe(scales).median,
    }


def spec_memory_bytes(spec: BenchmarkSpec) -> int:
    """Estimated memory of one prepared benchmark (``benanza.bench.memory.spec_memory``)."""
    return spec_memory(spec).total


def never_fits(spec: BenchmarkSpec, runtime: Runtime, memory: MemoryReader = system_memory) -> str | None:
    """Why ``spec`` can never run on this system (more memory than it has), or None."""
    refused = refusal(runtime.host_memory_bytes(spec), memory())
    return refused.reason if refused is not None and refused.never else None


def admit(
    specs: Sequence[BenchmarkSpec], runtime: Runtime, memory: MemoryReader = system_memory
) -> tuple[list[BenchmarkSpec], list[BenchmarkSpec], MemoryRefusal | None]:
    """Split ``specs``, to be held in memory together, into those to run now and those deferred.

    Those that can never fit are run (``run_spec`` and ``run_interleaved`` skip them without
    allocating); the others are deferred together, with the reason, when their sum does not
    fit the memory free now.
    """
    now = memory()
    never, rest, needed = [], [], 0
    for spec in specs:
        need = runtime.host_memory_bytes(spec)
        refused = refusal(need, now)
        if refused is not None and refused.never:
            never.append(spec)
        else:
            rest.append(spec)
            needed += need or 0
    refused = refusal(needed, now) if rest else None
    if refused is None:
        return list(specs), [], None
    return never, rest, refused


def interleave_max_specs(settings: HarnessSettings) -> int:
    """Specs one interleaved group may hold: ``interleave_max_sessions`` live sessions, two per
    spec when kernel times are taken (the profiling session beside the timed one)."""
    per_spec = 2 if settings.kernel_runs > 0 else 1
    return max(1, settings.interleave_max_sessions // per_spec)


def interleave_budget(settings: HarnessSettings, memory: MemoryReader = system_memory) -> int:
    """Bytes one interleaved group may hold: the setting, else a quarter of physical memory.

    Never more than is free now (available memory less the guard's reserve).
    """
    now = memory()
    if settings.interleave_max_bytes is not None:
        budget = settings.interleave_max_bytes
    else:
        budget = now.physical // 4 if now.physical else 2 << 30
    return budget if now.free_now is None else min(budget, now.free_now)


def group_chunks(
    specs: Sequence[BenchmarkSpec], budget: int, max_specs: int | None = None
) -> Iterator[list[BenchmarkSpec]]:
    """Consecutive chunks of a group whose estimated memory fits ``budget`` and that hold at most
    ``max_specs`` specs (at least one spec each)."""
    chunk: list[BenchmarkSpec] = []
    used = 0
    for spec in specs:
        size = spec_memory_bytes(spec)
        if chunk and (used + size > budget or (max_specs is not None and len(chunk) >= max_specs)):
            yield chunk
            chunk, used = [], 0
        chunk.append(spec)
        used += size
    if chunk:
        yield chunk


@dataclass
class RunSummary:
    """What a run did; ``deferred`` specs did not fit the memory free at the time and were not stored."""

    measured: int = 0
    reused: int = 0
    reused_failed: int = 0  # of those reused, stored failures (``--retry-failed`` measures them again)
    failed: int = 0
    skipped: int = 0
    deferred: int = 0
    deferred_reason: str | None = None  # the largest deferred benchmark's
    remeasure_note: str | None = None  # disturbed measurements the re-measure budget declined to take again
    records: list[BenchmarkRecord] = field(default_factory=list, repr=False)
    _deferred_needed: int = field(default=0, repr=False)

    def count(self, record: BenchmarkRecord, sign: int) -> None:
        """Count ``record``'s outcome in (``sign`` 1) or out (-1: a record a later one replaced)."""
        if record.outcome == Outcome.OK:
            self.measured += sign
        elif record.outcome == Outcome.FAILED:
            self.failed += sign
        else:
            self.skipped += sign

    @property
    def disturbed(self) -> int:
        """Of the records measured, those the harness or the reference call marked disturbed."""
        return sum(r.stats is not None and r.stats.disturbed for r in self.records)

    def defer(self, count: int, refused: MemoryRefusal) -> None:
        self.deferred += count
        if refused.needed >= self._deferred_needed:
            self._deferred_needed, self.deferred_reason = refused.needed, refused.reason

    def to_dict(self) -> dict[str, int]:
        return {
            "measured": self.measured,
            "reused": self.reused,
            "failed": self.failed,
            "skipped": self.skipped,
            "deferred": self.deferred,
        }


def reusable_spec_ids(store: Any, system: str, stack_id: str, retry_failed: bool = False) -> set[str]:
    """The spec ids whose stored record (system, stack) a run reuses: every one, or with
    ``retry_failed`` all but the failures (measured again after an upgrade fixed their cause)."""
    present = store.present_spec_ids(system, stack_id)
    if retry_failed:
        present -= {r.spec_id for r in store.records(system=system, stack_id=stack_id, outcome="failed")}
    return present


def run_specs(
    specs: Sequence[BenchmarkSpec],
    runtime: Runtime,
    store: Any,
    settings: HarnessSettings,
    *,
    system: str,
    stack_id: str,
    retry_failed: bool = False,
    repeat: bool = False,
    batch: int = 16,
    progress: Callable[[BenchmarkSpec, BenchmarkRecord], None] | None = None,
    groups: Sequence[Sequence[BenchmarkSpec]] = (),
    memory: MemoryReader = system_memory,
    measurer: Measurer | None = None,
) -> RunSummary:
    """Measure the specs the store lacks for (system, stack); upsert results in batches.

    With ``settings.schedule == "interleaved"`` the missing specs are measured together
    by ``groups`` (a model's specs, say; specs in no group form one last group), each
    group cut into chunks that fit ``interleave_budget``. A spec in several groups is
    measured with the first. Just before a spec (or a chunk) would be prepared, ``memory``
    is read: what does not fit the memory free then is counted as ``deferred``, not run
    and not stored.

    With ``repeat`` every spec is measured again, stored or not: the store keeps the record
    each new one replaces as a repeat (``Store.repeats``), the history from which the
    regression analysis learns each benchmark's run-to-run noise.

    ``measurer``: one the caller keeps across calls (of ``runtime``, ``system``, ``stack_id``, ``settings``;
    it reads the memory free with its own reader, not ``memory``), and closes: an isolated runtime's
    worker process then starts once, not once a call (the GPU runtime's child imports PyTorch and
    creates a CUDA context, seconds a start), and the host reference and the re-measure budget are
    the measurer's, as a fleet worker's are across its calls. None: one for this call, closed at its end.
    """
    settings = effective_settings(runtime, settings)
    if measurer is not None and (
        measurer.runtime is not runtime
        or (measurer.system, measurer.stack_id) != (system, stack_id)
        or measurer.settings != settings
    ):
        raise ValueError("run_specs: the measurer given measures another runtime, system, stack or settings")
    present = set() if repeat else reusable_spec_ids(store, system, stack_id, retry_failed)
    present |= stored_earlier()  # what this command stored before a crash ran it again (``benanza.crashes``)
    todo = missing(specs, present)
    summary = RunSummary(reused=len(specs) - len(todo))
    if summary.reused and not retry_failed:  # this command's own failures (a run before a crash's) left out
        left = {s.spec_id for s in specs} - {s.spec_id for s in todo} - stored_earlier()
        failed = {r.spec_id for r in store.records(system=system, stack_id=stack_id, outcome="failed")}
        summary.reused_failed = len(left & failed)
    pending: list[BenchmarkRecord] = []
    taken: dict[str, int] = {}  # spec id -> its record's place in summary.records

    def take(spec: BenchmarkSpec, record: BenchmarkRecord) -> None:
        nonlocal pending
        pending.append(record)
        earlier = taken.get(record.spec_id)
        if earlier is not None:  # a group measured again (``Measurer.recheck``): the new record replaces it
            summary.count(summary.records[earlier], -1)
            summary.records[earlier] = record
        else:
            taken[record.spec_id] = len(summary.records)
            summary.records.append(record)
        summary.count(record, 1)
        if progress is not None and earlier is None:
            progress(spec, record)
        if len(pending) >= batch:
            store.upsert(pending)
            note_stored(r.spec_id for r in pending)
            pending = []

    kept = measurer is not None
    measurer = measurer or Measurer(runtime, settings, system=system, stack_id=stack_id, memory=memory)
    try:
        for spec, record, refused in measurer.measure(todo, groups):
            if record is None:
                summary.defer(1, refused)
            else:
                take(spec, record)
        summary.remeasure_note = measurer.remeasures.summary_note()
    finally:
        if not kept:
            measurer.close()
    if pending:
        store.upsert(pending)
        note_stored(r.spec_id for r in pending)
    return summary


class Measurer:
    """Measures specs on one runtime with the schedule its settings take: the one place it is chosen.

    ``benanza run`` (``run_specs``) and a fleet worker both measure through it:

    - interleaved (``interleaving``): each group's specs sampled together in rounds, in chunks
      that fit ``interleave_budget`` and ``interleave_max_specs``;
    - isolated (``runtime.isolated``, the GPU runtime): one spec after another in a child
      process kept for the measurer's life and replaced when it dies;
    - otherwise one spec after another in this process.

    With ``admit`` the memory free just before a spec (or a chunk) is prepared decides whether
    it runs; one that does not fit is yielded with no record and the reason (deferred, not stored).
    """

    def __init__(
        self,
        runtime: Runtime,
        settings: HarnessSettings,
        *,
        system: str,
        stack_id: str,
        memory: MemoryReader = system_memory,
        admit: bool = True,
    ) -> None:
        self.runtime, self.settings = runtime, effective_settings(runtime, settings)
        self.system, self.stack_id = system, stack_id
        self._memory, self._admit = memory, admit
        self._runner: IsolatedRunner | None = None
        # the reference figures of the groups this measurer sampled in rounds (``benanza.bench.reference``)
        sampled = self.settings.reference_call and interleaving(runtime, self.settings)
        self.reference = HostReference(self.settings.reference_step) if sampled else None
        self._groups: dict[int, _Group] = {}  # by their index among the reference's figures
        self._probe: BenchmarkSpec | None = None  # the reference call, as a spec of this measurer's runtime
        # every re-measure of this measurer's life draws on one budget, whichever level asks for it
        self.remeasures = RemeasureBudget(self.settings.remeasure_share, self.settings.remeasure_reserve_s)

    def measure(
        self, specs: Sequence[BenchmarkSpec], groups: Sequence[Sequence[BenchmarkSpec]] = ()
    ) -> Iterator[tuple[BenchmarkSpec, BenchmarkRecord | None, MemoryRefusal | None]]:
        """``(spec, record, None)`` per spec measured, ``(spec, None, why)`` per spec deferred for memory."""
        runtime, settings, memory = self.runtime, self.settings, self._memory
        if interleaving(runtime, settings):
            # a group that crashed the process when sampled in rounds: its benchmarks one at a time (``crashes``)
            alone = [s for s in specs if measured_alone(s.spec_id)]
            if alone:
                specs = [s for s in specs if not measured_alone(s.spec_id)]
                yield from self._one_at_a_time(alone, settings.model_copy(update={"schedule": "sequential"}))
            for group in _partition(specs, groups):
                for chunk in group_chunks(group, interleave_budget(settings, memory), interleave_max_specs(settings)):
                    chunk, deferred, refused = admit(chunk, runtime, memory) if self._admit else (chunk, [], None)
                    yield from ((spec, None, refused) for spec in deferred)
                    if chunk:
                        with _in_rounds(chunk):
                            records = self._interleaved(chunk)
                        yield from ((spec, record, None) for spec, record in zip(chunk, records, strict=True))
            yield from ((spec, record, None) for spec, record in self.recheck())
            return
        yield from self._one_at_a_time(specs, settings)

    def _one_at_a_time(
        self, specs: Sequence[BenchmarkSpec], settings: HarnessSettings
    ) -> Iterator[tuple[BenchmarkSpec, BenchmarkRecord | None, MemoryRefusal | None]]:
        runtime, memory = self.runtime, self._memory
        where = {"system": self.system, "stack_id": self.stack_id}
        for spec in specs:
            if self._admit:
                _, deferred, refused = admit([spec], runtime, memory)
                if deferred:
                    yield spec, None, refused
                    continue
            if runtime.isolated:
                if self._runner is None:
                    self._runner = isolated_runner(runtime, settings, **where)
                yield spec, self._runner.run(spec, runtime), None
            else:
                yield spec, run_spec(spec, runtime, settings, memory=memory, budget=self.remeasures, **where), None

    def _rounds(
        self, chunk: Sequence[BenchmarkSpec], without: int | None = None
    ) -> tuple[list[BenchmarkRecord], Interval | None, str | None, int]:
        """One group sampled in rounds with the reference call: its records, the reference's figure
        (None without a reference), why the reference could not be measured, and how many times its
        rounds were sampled again on the reference's verdict (``without``: the group's own figure,
        left out of the run's)."""
        where = {"system": self.system, "stack_id": self.stack_id, "memory": self._memory, "budget": self.remeasures}
        reference = self.reference
        if reference is None:
            return run_interleaved(chunk, self.runtime, self.settings, **where), None, None, 0
        if self._probe is None:
            self._probe = reference_spec(chunk[0].runtime, chunk[0].variant)
        at = len(chunk)  # the reference call's position in the group
        judge = Judge(lambda samples: reference.verdict(reference_figure(samples.get(at) or ()), without=without))
        *records, own = run_interleaved([*chunk, self._probe], self.runtime, self.settings, judge=judge, **where)
        return records, reference_figure(own.samples), own.reason, judge.again

    def _until_steady(
        self, reference: HostReference, chunk: Sequence[BenchmarkSpec], without: int | None = None, again: bool = False
    ) -> _Steady:
        """A group measured, its rounds sampled again while its reference says the host ran slower than
        in the run, up to ``disturbance_retries`` times as the re-measure budget allows (``again``: the
        whole measurement is a re-measure).

        The rounds are sampled again with the sessions the group has (``harness.Judge``): measured
        again from scratch, a group was prepared, warmed up and calibrated again each time, and
        the group's own retries and its reference's multiplied (up to four measurements a group).
        """
        budget = self.remeasures
        before = budget.booked_s
        with budget.again() if again else nullcontext():
            records, figure, failed, judged = self._rounds(chunk, without)
        times = 1 + judged
        reason = reference.verdict(figure, without=without)
        return _Steady(records, figure, failed, reason, times, (budget.booked_s - before) / times)

    def _interleaved(self, chunk: Sequence[BenchmarkSpec]) -> list[BenchmarkRecord]:
        """A group's records: measured again while its reference call says the host ran slower than in the run."""
        reference = self.reference
        if reference is None:
            return self._rounds(chunk)[0]
        steady = self._until_steady(reference, chunk)
        index = reference.add(steady.figure)
        run = reference.run_figure(without=index)
        records = [
            _referenced(r, steady.figure, run, steady.reason, steady.times - 1, steady.failed) for r in steady.records
        ]
        if index is not None:
            self._groups[index] = _Group(list(chunk), records, steady.cost_s, marked=steady.reason is not None)
        return records

    def recheck(self) -> Iterator[tuple[BenchmarkSpec, BenchmarkRecord]]:
        """The groups measured so far whose reference is slow against the run's figure as it stands
        now (measured before it settled), measured again: their new records (each group at most once).

        Those still slow are marked disturbed, and so are those the re-measure budget no longer
        allows to measure again (their first records, marked). ``measure`` ends with it; a fleet
        worker, whose calls each measure one group, so rechecks earlier groups in a later call.
        """
        reference = self.reference
        if reference is None:
            return
        for index in reference.slow_groups():
            group = self._groups[index]
            if group.marked or group.rechecked:
                continue
            group.rechecked = True
            if self._admit and admit(group.chunk, self.runtime, self._memory)[1]:
                continue  # it no longer fits the memory free now: its records stand as they were
            if not self.remeasures.grant(group.cost_s):
                reason = reference.verdict(reference.figures[index], without=index)
                group.marked = True
                note = f"{reason}; {self.remeasures.declined_note()}"
                yield from zip(group.chunk, (_marked(r, note) for r in group.records), strict=True)
                continue
            log.info("%s: measuring an earlier group of %d again: its reference is slow", self.system, len(group.chunk))
            with _in_rounds(group.chunk):
                steady = self._until_steady(reference, group.chunk, without=index, again=True)
            reference.replace(index, steady.figure)
            group.marked = steady.reason is not None
            run = reference.run_figure(without=index)
            group.records = [
                _referenced(r, steady.figure, run, steady.reason, steady.times, steady.failed) for r in steady.records
            ]
            yield from zip(group.chunk, group.records, strict=True)

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _in_rounds(chunk: Sequence[BenchmarkSpec]):
    """The journal's entry of a group sampled in rounds (``benanza.crashes``): its benchmarks' ids."""
    first = chunk[0]
    label = f"{len(chunk)} benchmarks together (the first: {first.kind} {first.label or '?'})"
    return native("group", ",".join(s.spec_id for s in chunk), label)


@dataclass
class _Group:
    """A group an interleaving measurer sampled with a reference figure: what a recheck measures again."""

    chunk: list[BenchmarkSpec]
    records: list[BenchmarkRecord]  # as last yielded: what a recheck the budget declines marks
    cost_s: float  # what measuring it took from the re-measure budget's clock: a recheck's expected cost
    marked: bool = False  # its records are marked disturbed (still slow after being measured again)
    rechecked: bool = False


@dataclass(frozen=True)
class _Steady:
    """A group as ``Measurer._until_steady`` left it."""

    records: list[BenchmarkRecord]
    figure: Interval | None  # its reference's figure
    failed: str | None  # why the reference could not be measured
    reason: str | None  # why its records are disturbed (the reference's verdict, the budget's note)
    times: int  # times it was measured
    cost_s: float  # its measuring time over the times it was sampled: a recheck's expected cost


def _referenced(
    record: BenchmarkRecord,
    figure: Interval | None,
    run: Interval | None,
    reason: str | None,
    remeasured: int,
    failed: str | None,
) -> BenchmarkRecord:
    """``record`` with its group's reference figure as provenance, marked disturbed for ``reason``."""
    if figure is None:
        provenance: dict[str, Any] = {"call_s": None, "reason": failed or "no samples"}
    else:
        provenance = {
            "call_s": figure.value,
            "call_low_s": figure.low,
            "call_high_s": figure.high,
            "run_s": None if run is None else run.value,
            "remeasured": remeasured,
        }
    return replace(_marked(record, reason), settings={**record.settings, "host_reference": provenance})


def _marked(record: BenchmarkRecord, reason: str | None) -> BenchmarkRecord:
    """``record`` marked disturbed for ``reason`` (None, or a record already marked: as it is)."""
    stats = record.stats
    if reason is None or stats is None or stats.disturbed:
        return record
    return replace(record, stats=replace(stats, disturbed=True, disturbed_reason=reason))


def isolated_runner(
    runtime: Runtime, settings: HarnessSettings, *, system: str, stack_id: str
) -> IsolatedRunner | None:
    """A worker process for a runtime that asks for one (``isolated = True``: the GPU runtime), else None."""
    if not runtime.isolated:
        return None
    return IsolatedRunner(runtime.factory(), run_spec, settings, system=system, stack_id=stack_id)


def interleaving(runtime: Runtime, settings: HarnessSettings) -> bool:
    """Whether ``run_specs`` samples groups in rounds: asked for, and the runtime can be.

    A runtime says ``interleaves = False`` when its benchmarks cannot share the machine in
    rounds: the GPU runtime (timed by CUDA events with its own L2 flush). Those run one
    after another, as do an ``isolated`` runtime's, which run in a child process one spec at
    a time so that a crash loses one spec, never the caller.
    """
    return settings.schedule == "interleaved" and runtime.interleaves and not runtime.isolated


def effective_settings(runtime: Runtime, settings: HarnessSettings) -> HarnessSettings:
    """``settings`` as they will be applied: an interleaved schedule the runtime cannot take is sequential.

    Records store the schedule that was used, and the change is logged once: as a warning
    when the schedule was asked for, quietly when it was only the default.
    """
    if settings.schedule == "interleaved" and not interleaving(runtime, settings):
        asked = "schedule" in settings.model_fields_set
        log.log(
            logging.WARNING if asked else logging.INFO,
            "%s (%s) cannot be measured interleaved; measuring one benchmark after another",
            runtime.name,
            ", ".join(f"{k}={v}" for k, v in runtime.variant().items()),
        )
        return settings.model_copy(update={"schedule": "sequential"})
    return settings


def _partition(
    todo: Sequence[BenchmarkSpec], groups: Sequence[Sequence[BenchmarkSpec]]
) -> Iterator[list[BenchmarkSpec]]:
    """``todo`` split by ``groups`` (first group wins), then the specs no group names."""
    wanted = {s.spec_id: s for s in todo}
    for group in groups:
        members = [wanted.pop(s.spec_id) for s in group if s.spec_id in wanted]
        if members:
            yield members
    if wanted:
        yield list(wanted.values())


def missing(specs: Iterable[BenchmarkSpec], present: set[str]) -> list[BenchmarkSpec]:
    """The specs whose id the store does not hold yet, in order."""
    return [s for s in specs if s.spec_id not in present]
