"""The timing harness: the one place that times a prepared call.

``measure`` runs a callable through three phases:

1. warm-up: ``warmup_runs`` untimed calls (lazy initialisation, caches, allocator);
2. calibration: double the calls per sample ``k`` until one sample lasts at least
   ``min_sample_time_s``, so that sub-microsecond calls are not lost in the timer's
   resolution and overhead; the last calibration sample is kept as the first sample;
3. sampling: time ``k`` back-to-back calls per sample until a stopping rule fires.

Stopping rules, checked after every sample in this order:

- ``noise``: at least ``min_samples`` samples, at least ``min_time_s`` of measured time,
  and the mean known to ``target_rel_stderr`` (stdev / sqrt(n) / mean), or the 20% trimmed
  mean (the call statistic compositions use) known to it, its standard error taken from
  the winsorized samples: a shared machine's rare stalls inflate the plain standard error
  so much that, on 2 busy cores, every layer of a ResNet-50 ran to the time cap under the
  plain rule alone. The trimmed rule is checked whenever the samples have grown by an
  eighth (a sort each time), not after every sample;
- ``max_samples``: ``max_samples`` samples taken;
- ``time_cap``: ``max_time_s`` of wall time since ``measure`` began (warm-up and
  calibration count). The cap wins over ``min_samples``; at least one warm-up call and one
  sample always run, so a call longer than the cap overruns it by about two calls.

Samples are stored per call (sample duration / ``k``), in seconds.

``measure_interleaved`` times several prepared calls together, in rounds: after warm-up
and calibration of each call, every round takes one sample of every call in a shuffled
order, so each call's samples spread over the same period. A slow drift of the host's
speed (frequency, neighbours on a shared machine) then shifts every call alike instead of
whichever happened to run during it; the DLBricks composition compares sums of one set of
calls with another call, which is where drift hurt. ``schedule = "interleaved"`` selects it
(the default).

Interference. Both schedules check, after sampling, whether the host's speed changed while
they measured (``speed_step``): the samples in time order are cut into thirds, and a third
whose mean differs from another's by more than ``disturbance_step`` with their 95% intervals
apart is a step in the host's speed, not noise. The mean, not a trimmed one: a neighbour
that shares the core shows as a share of samples stalled by its time slices, which a
trimmed mean would cut away, while one rare stall widens its third's interval instead of
moving it. ``measure`` tests a call's own samples; ``measure_interleaved`` tests the rounds'
speed index (per round, the time the round's samples took over the time their calls'
medians would take), which every call of the group shares. They also take the process's CPU time over the wall
time of the sampling (``cpu_share``): below ``min_cpu_share`` another process had the CPU
for part of it. And, given the threads a call runs (``threads``), they take the other
processes' CPU time over the same wall time (``other_cores``, ``benanza.bench.host_cpu``): beyond
``max_other_cores`` more than the cores those threads leave free of the host's, the others
competed with the benchmark's threads, which biases parts measured alone against a whole (on
a 2-core VM at 2 threads, beside a one-core on/off burner, the zoo's layers summed to
1.14-1.30x their end to end, while at one thread they composed within 3%). A disturbed
measurement is taken again, up to ``disturbance_retries`` times while the run's re-measure
budget allows (``benanza.bench.remeasure``); one still disturbed is kept and marked
(``Timing.disturbed`` and its reason), and reports never show it as fact. A
periodic load (a neighbour's on/off bursts much shorter than a third of the measurement) is
noise for the step check: it widens the intervals instead; the other processes' CPU time
still finds it where it competes with the benchmark's threads. A slow period of the host
that covers a whole interleaved group passes these checks; the measurer finds it by a
reference call sampled in every group and compared across groups (``benanza.bench.reference``).
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from benanza.bench import host_cpu
from benanza.bench.host_cpu import host_cores
from benanza.bench.remeasure import RemeasureBudget
from benanza.bench.stats import (
    TRIM_PROPORTION,
    SampleStats,
    describe,
    mean_interval,
    trimmed_mean_sorted,
    trimmed_stderr_sorted,
)

# defined beside the other settings (benanza.settings); re-exported: the harness is measured with them
from benanza.settings import HarnessSettings as HarnessSettings
from benanza.settings import Schedule as Schedule

StopReason = Literal["noise", "time_cap", "max_samples"]


@dataclass(frozen=True, slots=True)
class Timing:
    """The raw result of ``measure``: per-call samples and how sampling ended."""

    samples: tuple[float, ...]  # seconds per call, one value per sample
    iterations: int  # calls per sample
    stats: SampleStats
    stopped_by: StopReason
    total_s: float  # wall time of the whole measurement, warm-up included
    disturbed: bool = False  # the host's speed changed while it was measured, every time it was
    disturbed_reason: str | None = None
    cpu_share: float | None = None  # process CPU time over wall time while sampling (None: not taken)
    remeasured: int = 0  # times it was taken again because it was disturbed
    other_cores: float | None = None  # other processes' CPU time over wall time while sampling (None: not taken)

    def to_dict(self) -> dict[str, Any]:
        return {
            "samples": list(self.samples),
            "iterations": self.iterations,
            "stats": self.stats.to_dict(),
            "stopped_by": self.stopped_by,
            "total_s": self.total_s,
            "disturbed": self.disturbed,
            "disturbed_reason": self.disturbed_reason,
            "cpu_share": self.cpu_share,
            "remeasured": self.remeasured,
            "other_cores": self.other_cores,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Timing:
        samples = tuple(float(x) for x in data["samples"])
        share, others = data.get("cpu_share"), data.get("other_cores")
        return cls(
            samples=samples,
            iterations=int(data["iterations"]),
            stats=SampleStats.from_dict(data["stats"]) if "stats" in data else describe(samples),
            stopped_by=data["stopped_by"],
            total_s=float(data["total_s"]),
            disturbed=bool(data.get("disturbed", False)),
            disturbed_reason=data.get("disturbed_reason"),
            cpu_share=None if share is None else float(share),
            remeasured=int(data.get("remeasured", 0)),
            other_cores=None if others is None else float(others),
        )


@dataclass(frozen=True, slots=True)
class SpeedStep:
    """The largest change of speed between thirds of a measurement (``speed_step``)."""

    step: float  # relative: later third over earlier third, less one (+0.1: 10% slower later)
    apart: bool  # the two thirds' 95% intervals do not overlap
    thirds: tuple[float, float, float]  # each third's mean


MIN_PER_THIRD = 5  # fewer samples per third cannot tell a step from noise


def speed_step(series: Sequence[float]) -> SpeedStep | None:
    """Whether ``series`` (time-ordered samples or a speed index) stepped between its thirds.

    Each third's mean and its interval; the pair of thirds whose means differ most,
    among those whose intervals are apart, else the pair that differs most. None with fewer
    than ``MIN_PER_THIRD`` values per third.
    """
    n = len(series)
    if n < 3 * MIN_PER_THIRD:
        return None
    cuts = (0, n // 3, 2 * n // 3, n)
    parts = [mean_interval(series[cuts[i] : cuts[i + 1]]) for i in range(3)]
    best: SpeedStep | None = None
    for a, b in ((0, 1), (1, 2), (0, 2)):
        first, later = parts[a], parts[b]
        if first.value <= 0:
            continue
        step = later.value / first.value - 1
        apart = later.above(first) or first.above(later)
        candidate = SpeedStep(step, apart, (parts[0].value, parts[1].value, parts[2].value))
        if best is None or (apart, abs(step)) > (best.apart, abs(best.step)):
            best = candidate
    return best


def disturbance(
    series: Sequence[float],
    cpu_share: float | None,
    settings: HarnessSettings,
    *,
    other_cores: float | None = None,
    threads: int | None = None,
    cores: int | None = None,
) -> str | None:
    """Why a measurement is disturbed (a step in the host's speed, too little CPU, other processes
    competing with its ``threads`` on the host's ``cores``), or None."""
    found = speed_step(series)
    if found is not None and found.apart and abs(found.step) > settings.disturbance_step:
        means = ", ".join(f"{m:.4g}" for m in found.thirds)
        return (
            f"the host's speed changed by {found.step:+.1%} between thirds of the measurement "
            f"(means {means}), beyond the noise of both"
        )
    if cpu_share is not None and cpu_share < settings.min_cpu_share:
        return (
            f"the process had {cpu_share:.0%} of a CPU while sampling (under {settings.min_cpu_share:.0%}): "
            "another process took the rest"
        )
    if other_cores is not None and threads is not None:
        cores = cores or host_cores()
        free = max(cores - threads, 0)
        if other_cores > free + settings.max_other_cores:
            return (
                f"other processes used {other_cores:.2f} of the host's {cores} cores while it was measured, "
                f"more than the {free} its {threads} threads left free: they competed with it"
            )
    return None


def _checked(
    take: Callable[[], Timing],
    settings: HarnessSettings,
    *,
    cpu: bool,
    threads: int | None,
    budget: RemeasureBudget | None = None,
) -> Timing:
    """``take()`` until it is not disturbed, at most ``1 + disturbance_retries`` times, each time again
    only while ``budget`` allows it (None: always); the last is kept."""
    budget = budget if budget is not None else RemeasureBudget.unlimited()
    retries = settings.disturbance_retries
    for attempt in range(retries + 1):
        start = host_cpu.mark() if cpu else None  # a device's speed: no host reading to take
        timing = take()
        budget.book(timing.total_s, again=attempt > 0)
        use = host_cpu.since(start) if start is not None else host_cpu.CpuUse(None, None)
        reason = disturbance(timing.samples, use.share, settings, other_cores=use.others, threads=threads)
        taken = replace(timing, cpu_share=use.share, other_cores=use.others, remeasured=attempt)
        if reason is None:
            return taken
        if attempt < retries and not budget.grant(timing.total_s):
            return replace(taken, disturbed=True, disturbed_reason=f"{reason}; {budget.declined_note()}")
    return replace(taken, disturbed=True, disturbed_reason=reason)


DEFAULT_SETTINGS = HarnessSettings()


def measure(
    fn: Callable[[], object],
    settings: HarnessSettings = DEFAULT_SETTINGS,
    *,
    clock: Callable[[], int] = time.perf_counter_ns,
    threads: int | None = None,
    min_samples_at_cap: int = 1,
    budget: RemeasureBudget | None = None,
    before: Callable[[], object] | None = None,
) -> Timing:
    """Time ``fn`` until the mean is known well enough or a cap is reached.

    A measurement the host disturbed (``disturbance``) is taken again, up to
    ``disturbance_retries`` times; the last is returned, flagged if still disturbed.
    Exceptions from ``fn`` propagate: the caller records them as a failed outcome.

    Args:
        fn: the prepared call; its return value is ignored.
        settings: warm-up, calibration and stopping rules.
        clock: a monotonic nanosecond clock; tests inject a fake one to make stopping exact.
        threads: the CPU threads one call runs (the interference check's ``threads``); None: not known.
        min_samples_at_cap: the samples the time cap waits for (``execute.samples_at_cap``).
        budget: what re-measures of this run may still spend (``benanza.bench.remeasure``); None: no limit.
        before: untimed work before every timed call (``Prepared.evict_weights``); each call is then
            timed alone and a sample is the sum of its calls' times (``timed_calls_ns``).
    """

    def timed_ns(k: int) -> int:
        return timed_calls_ns(fn, k, clock, before)

    def take() -> Timing:
        return _sampled(timed_ns, fn, settings, clock, min_samples_at_cap)

    return _checked(take, settings, cpu=True, threads=threads, budget=budget)


def timed_calls_ns(
    fn: Callable[[], object], k: int, clock: Callable[[], int], before: Callable[[], object] | None = None
) -> int:
    """Nanoseconds of ``k`` calls of ``fn``: timed together, or with ``before`` run untimed before
    each call, each timed alone and summed."""
    repeat = itertools.repeat
    if before is None:
        t0 = clock()
        for _ in repeat(None, k):
            fn()
        return clock() - t0
    total = 0
    for _ in repeat(None, k):
        before()
        t0 = clock()
        fn()
        total += clock() - t0
    return total


def measure_device(
    sample: Callable[[int], float],
    settings: HarnessSettings = DEFAULT_SETTINGS,
    *,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> Timing:
    """The same rules as ``measure`` over samples that a device times itself.

    Args:
        sample: ``sample(k)`` runs ``k`` times and returns the seconds per run that the
            device measured (CUDA events around one L2-flushed launch each, or around one
            replay of a graph of ``k`` launches). Calibration doubles ``k`` until a sample
            lasts ``min_sample_time_s``; the wall clock only enforces ``max_time_s``.
        settings: warm-up, calibration and stopping rules.
        clock: the wall clock for the time cap.
    """
    # the host's CPU share says nothing of a device's speed: only steps are checked
    return _checked(
        lambda: _sampled(lambda k: round(sample(k) * k * 1e9), lambda: sample(1), settings, clock),
        settings,
        cpu=False,
        threads=None,
    )


def _sampled(
    timed_ns: Callable[[int], int],
    warm: Callable[[], object],
    settings: HarnessSettings,
    clock: Callable[[], int],
    min_samples_at_cap: int = 1,
) -> Timing:
    """Warm-up, calibration and adaptive sampling; ``timed_ns(k)`` is one sample of ``k`` calls.

    The time cap stops sampling once it has ``min_samples_at_cap`` samples (one: any).
    """
    start = clock()
    deadline = start + round(settings.max_time_s * 1e9)

    for i in range(settings.warmup_runs):
        if i and clock() >= deadline:
            break
        warm()

    # Calibration: the sample that first reaches min_sample_time_s is already a valid sample.
    min_sample_ns = settings.min_sample_time_s * 1e9
    k = 1
    while True:
        duration = timed_ns(k)
        now = clock()
        if duration >= min_sample_ns or now >= deadline:
            break
        k *= 2

    durations = [duration]
    # Welford's running mean and squared deviations of the sample durations (ns).
    n, mean, m2 = 1, float(duration), 0.0
    measured_ns = duration
    min_samples, max_samples = settings.min_samples, settings.max_samples
    min_measured_ns = settings.min_time_s * 1e9
    target = settings.target_rel_stderr
    target_sq = target**2
    trimmed_check_at = 0  # sample count at which the trimmed rule is checked next
    stopped_by: StopReason
    while True:
        if n >= min_samples and measured_ns >= min_measured_ns:
            # stderr^2 / mean^2 <= target^2, i.e. var / n <= (target * mean)^2, without a sqrt
            if n < 2 or m2 / (n - 1) / n <= target_sq * mean * mean:
                stopped_by = "noise"
                break
            if n >= trimmed_check_at:
                trimmed_check_at = n + max(1, n // 8)
                ordered = sorted(durations)
                if trimmed_stderr_sorted(ordered, TRIM_PROPORTION) <= target * trimmed_mean_sorted(
                    ordered, TRIM_PROPORTION
                ):
                    stopped_by = "noise"
                    break
        if n >= max_samples:
            stopped_by = "max_samples"
            break
        if now >= deadline and n >= min_samples_at_cap:
            stopped_by = "time_cap"
            break
        duration = timed_ns(k)
        now = clock()
        durations.append(duration)
        n += 1
        delta = duration - mean
        mean += delta / n
        m2 += delta * (duration - mean)
        measured_ns += duration

    total_s = (clock() - start) / 1e9
    scale = 1.0 / (k * 1e9)
    samples = tuple(d * scale for d in durations)
    return Timing(samples=samples, iterations=k, stats=describe(samples), stopped_by=stopped_by, total_s=total_s)


@dataclass(frozen=True, slots=True)
class Rounds:
    """What ``measure_interleaved`` returns.

    ``timings``: per call its ``Timing`` or the exception it raised. ``companions_kept``:
    per companion run, in order, whether to keep its result: companions ran in rounds
    0, s', 2s', ... for a stride s' doubled whenever twice ``untimed_runs`` were kept; the
    kept ones are the rounds 0, s, 2s, ... of the final stride s, spread evenly over all
    rounds like the timed samples.
    """

    timings: list[Timing | Exception]
    companions_kept: tuple[bool, ...]


@dataclass
class Judge:
    """A verdict on an interleaved group's rounds beside the group's own checks (``measure_interleaved``).

    ``verdict`` is given, per call position, the samples of the attempt just taken (seconds a
    call; None for a call that raised) and says why the attempt was disturbed, or None. The
    run's reference call judges this way (``execute.Measurer``): a group its reference finds
    slow is sampled again with the calls it has, instead of being prepared, warmed up and
    calibrated again. ``again`` counts the attempts taken again on its verdict.
    """

    verdict: Callable[[Mapping[int, Sequence[float] | None]], str | None]
    again: int = 0


@dataclass(slots=True)
class _Track:
    """One call of an interleaved measurement: its calibration and running statistics."""

    fn: Callable[[], object]
    untimed: Callable[[], object] | None
    before: Callable[[], object] | None = None  # untimed work before every timed call (``timed_calls_ns``)
    k: int = 1
    durations: list[int] | None = None
    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    spent_ns: int = 0  # warm-up, calibration and samples of this call
    error: Exception | None = None
    part_of: Hashable = None  # the sum (composition) of the group this call is part of
    _ordered: list[int] | None = None  # the durations sorted, until the next sample

    def add(self, duration: int) -> None:
        assert self.durations is not None
        self.durations.append(duration)
        self._ordered = None
        self.n += 1
        delta = duration - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (duration - self.mean)

    def restart(self) -> None:
        """No samples: a measurement taken again keeps the calibration, not the samples or their order."""
        self.durations, self._ordered = [], None
        self.n, self.mean, self.m2 = 0, 0.0, 0.0

    def per_call(self) -> float:
        return self.mean / self.k

    def ordered(self) -> list[int]:
        """The durations sorted: once per round, however many rules look at them."""
        if self._ordered is None:
            self._ordered = sorted(self.durations or ())
        return self._ordered

    def stderr_per_call(self) -> float:
        """The smaller of its mean's and its 20% trimmed mean's standard error, per call (ns)."""
        n = self.n
        if n < 2:
            return math.inf
        plain = math.sqrt(self.m2 / (n - 1) / n)
        trimmed = trimmed_stderr_sorted(self.ordered(), TRIM_PROPORTION)
        return min(plain, trimmed) / self.k

    def settled(self, min_samples: int, target: float, floor: float) -> bool:
        """``min_samples`` taken, and the mean or the trimmed mean known to ``target`` of max(itself, ``floor``)."""
        n = self.n
        if n < min_samples:
            return False
        if n < 2:
            return True
        scale = max(self.per_call(), floor) * self.k
        if self.m2 / (n - 1) / n <= (target * scale) ** 2:
            return True
        ordered = self.ordered()
        trimmed = max(trimmed_mean_sorted(ordered, TRIM_PROPORTION), floor * self.k)
        return trimmed_stderr_sorted(ordered, TRIM_PROPORTION) <= target * trimmed


def measure_interleaved(
    fns: Sequence[Callable[[], object]],
    settings: HarnessSettings = DEFAULT_SETTINGS,
    *,
    untimed: Sequence[Callable[[], object] | None] | None = None,
    untimed_runs: int = 0,
    clock: Callable[[], int] = time.perf_counter_ns,
    seed: int = 0,
    parts: Sequence[Hashable] | None = None,
    threads: int | None = None,
    min_rounds: int = 0,
    budget: RemeasureBudget | None = None,
    judge: Judge | None = None,
    before: Sequence[Callable[[], object] | None] | None = None,
) -> Rounds:
    """Time several calls in shuffled rounds, one sample of each call per round.

    Each call is warmed up and calibrated (``k`` calls per sample) as in ``measure``; the
    calibration sample is not kept, so every kept sample comes from the rounds. Each
    sample is preceded by ``interleave_precalls`` untimed calls of the same call: the
    previous call in the round left other data in the caches, and a sample timed cold
    would be slower than the same work inside a model, where a layer reads what the layer
    before it has just written (on a 2-core VM, timed cold, the zoo's layers summed to
    1.15-1.25x the whole model; preceded by one call, 0.97-1.05x). Stopping rules, checked
    after every round:

    - ``noise``: every call has ``min_samples`` samples, the rounds have lasted ``min_time_s``,
      ``untimed_runs`` companion runs are kept, and the calls are known well enough: each call's per-call mean, or its
      20% trimmed mean (standard error from the winsorized samples, robust to a shared
      machine's rare stalls), known to ``target_rel_stderr`` of the largest of itself, the
      group's average call and its longest call over sqrt(calls) (``_settle_floor``: a call
      far shorter than the rest weighs little in any sum, so its relative error may be larger),
      or, with ``interleave_group_rule``, whichever comes first of that and ``_group_settled``
      (the calls of each sum in ``parts`` known together to the target of that sum), so the
      group rule never samples longer than the per-call rule;
    - ``max_samples``: ``max_samples`` rounds, or ``interleave_max_rounds`` (never fewer than
      ``min_samples``): every round samples every call, so one call whose figure does not
      settle (a whole model end to end on a host that stalls it) would keep the whole group
      sampling until the time cap, which grows with its calls (84 s for Inception v2's 169 on
      the main job's 0.5 s): such a group stops with the wider intervals it has, as a call
      measured alone stops at its own cap;
    - ``time_cap``: ``max_time_s`` per call of wall time since the start (the group has the
      budget its calls would have one after another). At least ``MIN_ROUNDS`` (3) rounds always
      run, so that every call's trimmed mean has an interval, or ``min_rounds`` if more.

    Args:
        fns: the prepared calls.
        untimed: per call, an optional companion run right after that call's sample,
            outside the timed region (a profiled run for kernel times), in rounds spread over
            the whole measurement (see ``Rounds``) until ``untimed_runs`` of them are kept,
            so that kernel times cover the same period as the samples.
        seed: the shuffle's seed; rounds are reproducible in order.
        parts: per call, the sum it is part of (for instance its kind: the model end to end, its
            layers, its sequences), for the group rule (``_group_settled``); None: one sum.
        threads: the CPU threads one call runs (the interference check's ``threads``); None: not known.
        min_rounds: the rounds the time cap waits for, if more than ``MIN_ROUNDS``
            (``execute.samples_at_cap``: ``min_samples`` for a group that holds a whole model).
        budget: what re-measures of this run may still spend (``benanza.bench.remeasure``); None: no limit.
            Each attempt's rounds are booked to it; warm-up and calibration, which a re-measure keeps, as
            first measuring time.
        judge: a verdict beside the group's own checks (``disturbance``), asked after each attempt
            its checks pass (``Judge``). A judged attempt counts among ``disturbance_retries`` and
            the budget like any other.
        before: per call, optional untimed work before each of its timed calls, after its pre-calls
            (``Prepared.evict_weights``): its calls are then timed one at a time (``timed_calls_ns``),
            in calibration too.

    Returns:
        ``Rounds``: per call its ``Timing`` or the exception it (or its companion) raised (a
        call that raises leaves the rounds, the others go on), and which companion runs to keep.
    """
    if untimed is not None and len(untimed) != len(fns):
        raise ValueError("untimed needs one entry per call")
    if parts is not None and len(parts) != len(fns):
        raise ValueError("parts needs one entry per call")
    if before is not None and len(before) != len(fns):
        raise ValueError("before needs one entry per call")
    tracks = [
        _Track(
            fn,
            untimed[i] if untimed else None,
            before=before[i] if before else None,
            part_of=parts[i] if parts else None,
        )
        for i, fn in enumerate(fns)
    ]
    repeat = itertools.repeat
    start = clock()
    deadline = start + round(settings.max_time_s * 1e9) * max(len(fns), 1)
    min_sample_ns = settings.min_sample_time_s * 1e9
    floor_rounds = max(min_rounds, MIN_ROUNDS)

    for t in tracks:
        t0 = clock()
        try:
            for _ in repeat(None, settings.warmup_runs):
                t.fn()
            while True:
                if timed_calls_ns(t.fn, t.k, clock, t.before) >= min_sample_ns or t.k >= 1 << 30:
                    break
                t.k *= 2
        except Exception as exc:  # the caller stores it as this call's failure
            t.error = exc
        t.durations = []
        t.spent_ns += clock() - t0

    rng = random.Random(seed)
    order = list(range(len(tracks)))
    min_time_ns = settings.min_time_s * 1e9
    precalls = settings.interleave_precalls
    cap_ns = deadline - start
    remeasures = budget if budget is not None else RemeasureBudget.unlimited()
    remeasures.book((clock() - start) / 1e9)  # warm-up and calibration, not repeated by a re-measure
    discarded: tuple[bool, ...] = ()  # companion runs of disturbed attempts: never kept
    remeasured = 0
    for attempt in range(settings.disturbance_retries + 1):
        if attempt:  # measure again: the same calibration, fresh samples and a fresh time budget
            for t in tracks:
                t.restart()
            deadline = clock() + cap_ns
        rounds_start = clock()
        cpu_start = host_cpu.mark()
        stopped_by, companion_rounds, stride = _rounds(
            tracks, settings, rng, order, deadline, min_time_ns, precalls, untimed_runs, clock, floor_rounds
        )
        use = host_cpu.since(cpu_start)
        sampled_ns = clock() - rounds_start
        remeasures.book(sampled_ns / 1e9, again=attempt > 0)
        index = _speed_index([t for t in tracks if t.error is None])
        reason = disturbance(index, use.share, settings, other_cores=use.others, threads=threads)
        judged = False  # the reason, if any, is the judge's
        if reason is None and judge is not None:
            samples = {i: None if t.error is not None else _samples_s(t) for i, t in enumerate(tracks)}
            reason, judged = judge.verdict(samples), True
        kept = tuple(r % stride == 0 for r in companion_rounds)
        if reason is None or attempt == settings.disturbance_retries:
            break
        if not remeasures.grant(sampled_ns / 1e9):
            reason = f"{reason}; {remeasures.declined_note()}"
            break
        discarded += (False,) * len(kept)
        remeasured = attempt + 1
        if judged and judge is not None:
            judge.again += 1

    results: list[Timing | Exception] = []
    for t in tracks:
        if t.error is not None:
            results.append(t.error)
            continue
        samples = _samples_s(t)
        results.append(
            Timing(
                samples=samples,
                iterations=t.k,
                stats=describe(samples),
                stopped_by=stopped_by,
                total_s=t.spent_ns / 1e9,
                disturbed=reason is not None,
                disturbed_reason=reason,
                cpu_share=use.share,
                remeasured=remeasured,
                other_cores=use.others,
            )
        )
    return Rounds(results, discarded + kept)


def _samples_s(track: _Track) -> tuple[float, ...]:
    """A call's samples so far, in seconds a call."""
    scale = 1.0 / (track.k * 1e9)
    return tuple(d * scale for d in track.durations or ())


# rounds an interleaved group always takes, past its time cap too: the fewest samples whose 20% trimmed
# mean has an interval (one sample is a point, two leave no degree of freedom), so no figure is printed
# "± 0" because a long model end to end spent its budget on its warm-up (vgg19, 126 ms a call, 0.5 s cap)
MIN_ROUNDS = 3


def _speed_index(tracks: Sequence[_Track]) -> list[float]:
    """Per round, the time its samples took over the time their calls' medians take: the host's speed.

    A stall during a round adds its time to that round whichever call it hit. A call that left
    the rounds (it raised) is not in ``tracks``; every other call has one sample per round.
    """
    timed = [t.durations for t in tracks if t.durations]
    if not timed:
        return []
    typical = math.fsum(statistics.median(d) for d in timed)
    if typical <= 0:
        return []
    rounds = min(len(d) for d in timed)
    return [math.fsum(d[r] for d in timed) / typical for r in range(rounds)]


def _group_settled(tracks: Sequence[_Track], settings: HarnessSettings, floor: float) -> bool:
    """The group rule (``interleave_group_rule``): every sum the group serves known to the target of itself.

    A group's calls make up sums that are compared with each other: the model end to end (a sum
    of one call), its layers (the DLBricks composition at G = 1), its longer sequences, its fused
    groups. Each ``_Track.part_of`` names the sum a call belongs to (one sum for the whole group
    where the caller named none). The group is settled once, for every sum, its calls' standard
    errors together, in quadrature, are within ``target_rel_stderr`` of the sum itself: the error
    budget goes where the noise is, instead of every call reaching the target alone, so one noisy
    layer no longer keeps a hundred others sampling, and the model's own error is not in its
    layers' budget. Each call is still known to ``interleave_each_rel_stderr`` of the larger of
    itself and the group's floor (``_settle_floor``), and has ``min_samples`` samples.
    """
    if not tracks or any(t.n < settings.min_samples for t in tracks):
        return False
    each = settings.interleave_each_rel_stderr
    sums: dict[Hashable, list[float]] = {}  # part -> [sum of means, sum of squared errors]
    for t in tracks:
        m, e = t.per_call(), t.stderr_per_call()
        if e > each * max(m, floor):
            return False
        acc = sums.setdefault(t.part_of, [0.0, 0.0])
        acc[0] += m
        acc[1] += e * e
    target = settings.target_rel_stderr
    return all(math.sqrt(var) <= target * total for total, var in sums.values())


def _settle_floor(calls: Sequence[float]) -> float:
    """The error each call of a group may have, as a latency: the larger of the average call and the
    longest call over sqrt(number of calls).

    With every call known to ``target`` of the second, a sum of all of them (a composition) is
    known to ``target`` of the longest call (the model end to end) in quadrature: the figure that
    matters is known as well as the model's own, without running every layer to 1% of itself
    (on a shared 2-core VM that made the interleaved main job 6x slower than one after another).
    """
    if not calls:
        return 0.0
    return max(sum(calls) / len(calls), max(calls) / math.sqrt(len(calls)))


def _rounds(
    tracks: Sequence[_Track],
    settings: HarnessSettings,
    rng: random.Random,
    order: list[int],
    deadline: int,
    min_time_ns: float,
    precalls: int,
    untimed_runs: int,
    clock: Callable[[], int],
    min_rounds: int,
) -> tuple[StopReason, list[int], int]:
    """Sampling rounds until a stopping rule fires: why it stopped, the companion rounds, their final stride."""
    repeat = itertools.repeat
    sampling_start = clock()
    rounds = 0
    max_rounds = min(settings.max_samples, max(settings.interleave_max_rounds, settings.min_samples))
    stride = 1  # companions run every ``stride`` rounds; doubled to spread them over all rounds
    companion_rounds: list[int] = []
    stopped_by: StopReason
    while True:
        rng.shuffle(order)
        companions = untimed_runs > 0 and rounds % stride == 0
        for i in order:
            t = tracks[i]
            if t.error is not None:
                continue
            try:
                start_i = clock()
                for _ in repeat(None, precalls):
                    t.fn()
                t.add(timed_calls_ns(t.fn, t.k, clock, t.before))
                if companions and t.untimed is not None:
                    t.untimed()
                t.spent_ns += clock() - start_i
            except Exception as exc:
                t.error = exc
        if companions:
            companion_rounds.append(rounds)
            if sum(r % stride == 0 for r in companion_rounds) >= 2 * untimed_runs:
                stride *= 2
        rounds += 1
        now = clock()
        live = [t for t in tracks if t.error is None]
        floor = _settle_floor([t.per_call() for t in live])
        if (
            now - sampling_start >= min_time_ns
            and sum(r % stride == 0 for r in companion_rounds) >= untimed_runs
            and (
                all(t.settled(settings.min_samples, settings.target_rel_stderr, floor) for t in live)
                or (settings.interleave_group_rule and _group_settled(live, settings, floor))
            )
        ):
            stopped_by = "noise"
            break
        if rounds >= max_rounds:
            stopped_by = "max_samples"
            break
        if (now >= deadline and rounds >= min_rounds) or not live:
            stopped_by = "time_cap"
            break
    return stopped_by, companion_rounds, stride
