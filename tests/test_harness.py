"""The timing harness: stopping rules, calibration, per-call samples, and the null runtime."""

from __future__ import annotations

import itertools
import math
import random
import time
from collections.abc import Callable

import pytest
from pydantic import ValidationError

from benanza.bench.harness import (
    HarnessSettings,
    Judge,
    Timing,
    _group_settled,
    _settle_floor,
    _Track,
    measure,
    measure_device,
    measure_interleaved,
)
from benanza.bench.remeasure import RemeasureBudget
from benanza.bench.spec import BenchmarkSpec, SpecKind
from benanza.bench.stats import (
    TRIM_PROPORTION,
    describe,
    statistic_interval,
    trimmed_mean_sorted,
    trimmed_stderr_sorted,
)
from benanza.errors import UsageError
from benanza.runtimes import base
from benanza.runtimes.base import Prepared, Runtime, get_runtime
from benanza.settings import load_settings

SPEC = BenchmarkSpec(kind=SpecKind.LAYER, key="k", batch_size=1, dtype="float32", runtime="null")
# short caps keep each measurement well under a second; the stopping rules are tested here with
# sleeps and fake clocks, which the interference check would measure again (tests/test_interference.py)
QUICK = {"warmup_runs": 1, "min_time_s": 0.005, "max_time_s": 0.5, "disturbance_retries": 0}


def settings(**overrides: object) -> HarnessSettings:
    return HarnessSettings(**{**QUICK, **overrides})


def trivial() -> None:
    return None


def busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class FakeClock:
    """A nanosecond clock that only moves when a fake call says so: stopping becomes exact."""

    def __init__(self) -> None:
        self.now = 1_000_000_000
        self.calls = 0

    def __call__(self) -> int:
        return self.now

    def call_taking(self, *durations_ns: int) -> Callable[[], None]:
        """A call that advances the clock by the given durations in turn."""
        cycle = itertools.cycle(durations_ns)

        def call() -> None:
            self.calls += 1
            self.now += next(cycle)

        return call


def test_min_samples_honoured_even_when_noise_target_is_met_at_once() -> None:
    clock = FakeClock()
    fn = clock.call_taking(1000)
    t = measure(fn, settings(min_samples=50, min_time_s=0.0, target_rel_stderr=10.0), clock=clock)
    assert t.stopped_by == "noise"
    assert len(t.samples) == t.stats.n == 50


def test_min_time_honoured() -> None:
    # k = 256 calls of 1 us per sample (>= 200 us); 20 ms of measured time needs 79 samples
    clock = FakeClock()
    t = measure(clock.call_taking(1000), settings(min_samples=2, min_time_s=0.02), clock=clock)
    assert (t.stopped_by, t.iterations, t.stats.n) == ("noise", 256, 79)
    assert sum(t.samples) * t.iterations >= 0.02


def test_deterministic_fn_stops_by_noise_once_stderr_is_met() -> None:
    # alternating 0.9 / 1.1 us, one call per sample: rel. stdev ~0.1, so stderr <= 1% needs ~100 samples
    clock = FakeClock()
    fn = clock.call_taking(900, 1100)
    t = measure(fn, settings(min_sample_time_s=0.0, min_time_s=0.0, max_time_s=10.0), clock=clock)
    assert t.stopped_by == "noise"
    assert t.iterations == 1
    assert t.stats.rel_stderr <= 0.01
    assert describe(t.samples[:-1]).rel_stderr > 0.01  # it stopped at the first sample that met the target
    assert 90 <= t.stats.n <= 110


def test_real_fast_fn_stops_by_noise() -> None:
    t = measure(trivial, settings(target_rel_stderr=0.05, max_time_s=5.0))
    assert t.stopped_by == "noise"
    ordered = sorted(t.samples)  # the mean, or the 20% trimmed mean, known to 5%
    trimmed_rse = trimmed_stderr_sorted(ordered) / trimmed_mean_sorted(ordered, TRIM_PROPORTION)
    assert min(t.stats.rel_stderr, trimmed_rse) <= 0.05
    assert t.total_s < 5.0


def test_warmup_and_calibration_sample_kept() -> None:
    # 30 ns calls: calibration doubles k up to 8192 (>= 200 us); its last sample is the first sample
    clock = FakeClock()
    fn = clock.call_taking(30)
    t = measure(fn, settings(warmup_runs=3, min_samples=5, min_time_s=0.0), clock=clock)
    assert t.iterations == 8192
    assert t.stats.n == 5
    assert clock.calls == 3 + (2 * 8192 - 1) + 4 * 8192
    assert all(s == pytest.approx(30e-9) for s in t.samples)


def test_rare_stalls_stop_by_the_trimmed_mean_not_the_time_cap() -> None:
    # one call in ten stalls for 1 ms: the plain standard error stays far above 1%, the 20%
    # trimmed mean's (the statistic compositions use) is met at once
    clock = FakeClock()
    fn = clock.call_taking(1000, 1010, 990, 1005, 995, 1000, 1002, 998, 1000, 1_000_000)
    t = measure(fn, settings(warmup_runs=0, min_samples=10, min_time_s=0.0, min_sample_time_s=0.0), clock=clock)
    assert (t.stopped_by, t.stats.n) == ("noise", 10)
    assert t.stats.rel_stderr > 0.5  # the plain rule alone would have run to the cap
    assert t.stats.trimmed_mean == pytest.approx(1000e-9, rel=0.01)


def test_stalls_in_more_than_a_fifth_of_the_samples_still_run_to_the_cap() -> None:
    clock = FakeClock()
    fn = clock.call_taking(1000, 1_000_000, 1000, 1000)  # a quarter of the calls stall: trimming cannot hide it
    t = measure(fn, settings(warmup_runs=0, min_samples=10, min_time_s=0.0, min_sample_time_s=0.0), clock=clock)
    assert t.stopped_by == "time_cap"


def test_time_cap_stops_noisy_fn_exactly() -> None:
    # calls of 0 and 1 ms in turn can never reach a 1e-6 target; the cap is 200 ms of wall time
    clock = FakeClock()
    fn = clock.call_taking(0, 1_000_000)
    t = measure(fn, settings(min_samples=1000, target_rel_stderr=1e-6, max_time_s=0.2), clock=clock)
    assert t.stopped_by == "time_cap"
    assert 0.2 <= t.total_s <= 0.2 + 0.001  # overruns the cap by at most one sample
    assert t.stats.n < 1000  # the cap wins over min_samples


def test_time_cap_stops_noisy_fn() -> None:
    pauses = itertools.cycle([0.0, 0.001])
    cap = 0.2
    t0 = time.perf_counter()
    t = measure(lambda: time.sleep(next(pauses)), settings(min_samples=1000, target_rel_stderr=1e-6, max_time_s=cap))
    wall = time.perf_counter() - t0
    assert t.stopped_by == "time_cap"
    assert cap <= t.total_s < cap + 0.1
    assert wall < cap + 0.15


def test_time_cap_shorter_than_one_call_still_takes_one_sample() -> None:
    # one warm-up call (the cap stops the other two) and one sample
    clock = FakeClock()
    t = measure(clock.call_taking(30_000_000), settings(warmup_runs=3, max_time_s=0.01), clock=clock)
    assert (t.stopped_by, t.stats.n, t.iterations, clock.calls) == ("time_cap", 1, 1, 2)
    assert t.total_s == pytest.approx(0.06)


def test_a_time_cap_waits_for_the_samples_asked() -> None:
    # 30 ms calls, a 10 ms cap: one sample by default (above), five when asked
    clock = FakeClock()
    capped = settings(warmup_runs=0, max_time_s=0.01)
    t = measure(clock.call_taking(30_000_000), capped, clock=clock, min_samples_at_cap=5)
    assert (t.stopped_by, t.stats.n) == ("time_cap", 5)


def test_max_samples() -> None:
    clock = FakeClock()
    fn = clock.call_taking(1000)
    t = measure(fn, settings(min_sample_time_s=0.0, max_samples=25, target_rel_stderr=0.0, min_time_s=0.5), clock=clock)
    assert t.stopped_by == "max_samples"
    assert len(t.samples) == 25


def test_calibration_batches_trivial_calls() -> None:
    t = measure(trivial, settings(min_sample_time_s=2e-4))
    assert t.iterations > 1
    assert t.iterations & (t.iterations - 1) == 0  # doubled from 1


def test_calibration_leaves_slow_calls_unbatched() -> None:
    t = measure(lambda: time.sleep(0.001), settings(min_samples=3, max_time_s=0.1))
    assert t.iterations == 1


def test_unbatched_when_min_sample_time_is_zero() -> None:
    assert measure(trivial, settings(min_sample_time_s=0.0)).iterations == 1


def test_samples_are_seconds_per_call() -> None:
    t = measure(lambda: time.sleep(0.002), settings(min_samples=5, max_time_s=0.2))
    assert t.iterations == 1
    assert min(t.samples) >= 0.0019  # a sleep never returns early; a loaded machine may stretch one
    assert 0.0019 <= t.stats.median <= 0.010


def test_batched_samples_are_divided_by_iterations() -> None:
    t = measure(lambda: busy_wait(20e-6), settings(min_sample_time_s=2e-4, min_samples=5))
    assert t.iterations > 1
    assert min(t.samples) >= 19e-6  # each of the k calls busy-waits 20 us
    assert t.stats.median <= 100e-6


def test_timing_stats_and_dict_round_trip() -> None:
    t = measure(trivial, settings())
    assert t.stats == describe(t.samples)
    assert Timing.from_dict(t.to_dict()) == t
    with pytest.raises(AttributeError):
        t.iterations = 2  # type: ignore[misc]


def test_exceptions_propagate() -> None:
    def broken() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        measure(broken, settings())


def test_settings_defaults_validation_and_frozen() -> None:
    s = HarnessSettings()
    assert (s.warmup_runs, s.min_samples, s.max_samples) == (3, 10, 100_000)
    assert (s.min_time_s, s.max_time_s, s.target_rel_stderr) == (0.01, 2.0, 0.01)
    assert (s.min_sample_time_s, s.kernel_runs) == (2e-4, 10)
    with pytest.raises(ValidationError):
        s.max_time_s = 1.0  # type: ignore[misc]
    with pytest.raises(ValidationError):
        HarnessSettings(min_samples=20, max_samples=10)
    with pytest.raises(ValidationError):
        HarnessSettings(max_time_s=0)
    with pytest.raises(ValidationError):
        HarnessSettings(max_tme_s=1.0)  # type: ignore[call-arg]


def test_settings_from_env() -> None:
    env = {"BENANZA_HARNESS_MAX_TIME_S": "0.5", "BENANZA_HARNESS_MIN_SAMPLES": "4", "OTHER": "x"}
    s = load_settings(env).harness_settings(min_samples=7)
    assert s.max_time_s == 0.5
    assert s.min_samples == 7  # explicit overrides beat the environment
    assert load_settings(env).harness_settings().min_samples == 4
    assert load_settings({}).harness_settings() == HarnessSettings()
    with pytest.raises(UsageError, match=r"BENANZA_HARNESS_MAX_TIME_S: .*'soon'"):
        load_settings({"BENANZA_HARNESS_MAX_TIME_S": "soon"})
    with pytest.raises(UsageError, match="max_time_s"):
        load_settings({}).harness_settings(max_time_s="soon")


@pytest.fixture
def null_runtime() -> Runtime:
    try:
        return get_runtime("null")
    except ModuleNotFoundError as exc:
        # benanza.runtimes.onnxruntime is written concurrently; the null runtime must not wait for it
        if exc.name != "benanza.runtimes.onnxruntime":
            raise
        import benanza.runtimes.null  # noqa: F401

        return base._RUNTIMES["null"]()


def test_null_runtime(null_runtime: Runtime) -> None:
    assert isinstance(null_runtime, Runtime)
    assert null_runtime.name == "null"
    assert null_runtime.supports(SPEC) is None
    assert null_runtime.supports(BenchmarkSpec(SpecKind.MODEL, "m", 8, "float16", "null")) is None
    assert null_runtime.stack() == {"null": "1"}
    assert null_runtime.variant() == {}
    prepared = null_runtime.prepare(SPEC)
    assert isinstance(prepared, Prepared)
    assert prepared.call() is None
    assert prepared.kernel_times(5) is None
    prepared.close()


def test_null_runtime_overhead_is_small(null_runtime: Runtime) -> None:
    prepared = null_runtime.prepare(SPEC)
    t = measure(prepared.call, settings())
    assert t.iterations > 1
    assert t.stats.median < 2e-6  # the goal; typically tens of ns


# -- interleaved rounds ---------------------------------------------------------------------------


def test_interleaved_rounds_take_one_sample_of_each_call_per_round() -> None:
    clock = FakeClock()
    order: list[str] = []

    def call(name: str, ns: int) -> Callable[[], None]:
        def run() -> None:
            order.append(name)
            clock.now += ns

        return run

    fast, slow = call("a", 300_000), call("b", 5_000_000)
    s = settings(warmup_runs=2, min_samples=7, min_time_s=0.0, target_rel_stderr=10.0)
    ta, tb = measure_interleaved([fast, slow], s, clock=clock).timings
    assert isinstance(ta, Timing) and isinstance(tb, Timing)
    assert (ta.stats.n, tb.stats.n) == (7, 7)  # one sample each per round
    assert ta.samples == pytest.approx((3e-4,) * 7) and tb.samples == pytest.approx((5e-3,) * 7)
    rounds = order[-28:]  # each sample is preceded by one untimed call of the same benchmark
    assert all(sorted(rounds[i : i + 4]) == ["a", "a", "b", "b"] for i in range(0, 28, 4))
    assert all(rounds[i] == rounds[i + 1] for i in range(0, 28, 2))
    assert {ta.stopped_by, tb.stopped_by} == {"noise"}
    order.clear()
    measure_interleaved([fast, slow], s.model_copy(update={"interleave_precalls": 0}), clock=clock)
    assert all(sorted(order[-14:][i : i + 2]) == ["a", "b"] for i in range(0, 14, 2))


def test_interleaved_noise_rule_weighs_a_tiny_call_by_the_groups_average() -> None:
    # a 1-3 us call beside a steady 10 ms one: alone it needs ~1000 samples for 1%;
    # here its error is judged against the average call (5 ms), so the group stops at min_samples
    clock = FakeClock()
    tiny, big = clock.call_taking(1_000, 3_000), clock.call_taking(10_000_000)
    s = settings(
        warmup_runs=0, min_samples=10, min_time_s=0.0, min_sample_time_s=0.0, max_time_s=100.0, interleave_precalls=0
    )
    tt, _ = measure_interleaved([tiny, big], s, clock=clock).timings
    assert tt.stopped_by == "noise" and tt.stats.n == 10
    assert tt.stats.rel_stderr > 0.1
    assert measure(tiny, s, clock=clock).stats.n > 500


def _rounds_only(**overrides: object) -> HarnessSettings:
    """Exact rounds on a fake clock: no warm-up, precalls or minimum times, 10 samples, no time or rounds cap near."""
    exact = {
        "warmup_runs": 0,
        "min_samples": 10,
        "min_time_s": 0.0,
        "min_sample_time_s": 0.0,
        "max_time_s": 100.0,
        "interleave_precalls": 0,
        "interleave_max_rounds": 100_000,
    }
    return settings(**{**exact, **overrides})


def test_the_group_rule_lets_one_noisy_call_keep_a_larger_error_and_stops_sooner() -> None:
    # a steady 10 ms call (the model), twenty steady 0.2 ms layers and a noisy 1 ms one. Each call to
    # 1% of max(itself, the floor: 10 ms / sqrt(22)) takes the noisy one hundreds of rounds; the
    # layers' sum known to 1% of itself (5 ms) is met in a few dozen
    def group(rule: bool) -> list[Timing]:
        clock = FakeClock()
        calls = [clock.call_taking(10_000_000), *(clock.call_taking(200_000) for _ in range(20))]
        calls.append(clock.call_taking(1_000_000, 1_600_000, 500_000, 1_400_000, 700_000))
        s = _rounds_only(interleave_group_rule=rule)
        return measure_interleaved(calls, s, clock=clock, parts=["model", *["layer"] * 21]).timings

    each, grouped = group(False), group(True)
    assert all(t.stopped_by == "noise" for t in (*each, *grouped))
    assert grouped[-1].stats.n < each[-1].stats.n / 4
    layers = grouped[1:]
    errors = math.sqrt(sum((t.stats.stdev / math.sqrt(t.stats.n)) ** 2 for t in layers))
    assert errors <= 0.01 * sum(t.stats.mean for t in layers)  # the layers' sum known to 1% of itself


def test_a_group_whose_model_does_not_settle_stops_at_its_rounds_cap_not_its_time_cap() -> None:
    # a model end to end 10% slower or faster in turn beside steady layers: its own figure would take
    # ~100 rounds to be known to 1%; the group stops at interleave_max_rounds instead,
    # long before its time cap (100 s a call), never before min_samples
    def group(**overrides: object) -> list[Timing]:
        clock = FakeClock()
        calls = [clock.call_taking(9_000_000, 11_000_000), *(clock.call_taking(500_000) for _ in range(20))]
        s = _rounds_only(**overrides)
        return measure_interleaved(calls, s, clock=clock, parts=["model", *["layer"] * 20]).timings

    capped = group(interleave_max_rounds=25)
    assert all(t.stopped_by == "max_samples" and t.stats.n == 25 for t in capped)
    assert capped[0].stats.rel_stderr > 0.015  # its interval says how little is known
    assert all(t.stopped_by == "noise" and t.stats.n > 25 for t in group(interleave_max_rounds=10_000))
    floor = group(interleave_max_rounds=1)  # the cap never cuts the rounds below min_samples
    assert all(t.stopped_by == "max_samples" and t.stats.n == 10 for t in floor)


def _track_of(durations_ns: list[int], part: str | None = None) -> _Track:
    track = _Track(fn=lambda: None, untimed=None, durations=[], part_of=part)
    for d in durations_ns:
        track.add(d)
    return track


def test_the_group_rule_keeps_the_models_own_error_out_of_its_layers_budget() -> None:
    # the model (10 ms) known to 0.9% of itself, twenty 0.5 ms layers whose errors together are 0.9%
    # of their sum (10 ms): both sums of the group are known to 1%, so it is settled, although all of
    # the errors together (1.27%) are not within 1% of the longest call
    n = 40
    model = _track_of([10_000_000 + (1 if i % 2 else -1) * 569_000 for i in range(n)], "model")
    layers = [_track_of([500_000 + (1 if i % 2 else -1) * 127_000 for i in range(n)], "layer") for _ in range(20)]
    tracks = [model, *layers]
    s = settings(min_samples=10, interleave_group_rule=True, interleave_each_rel_stderr=0.05)
    e_model = model.stderr_per_call() / model.per_call()
    e_layers = math.sqrt(sum(t.stderr_per_call() ** 2 for t in layers)) / sum(t.per_call() for t in layers)
    assert 0.0085 < e_model < 0.01 and 0.0085 < e_layers < 0.01
    assert math.hypot(e_model, e_layers) > 0.01
    floor = _settle_floor([t.per_call() for t in tracks])
    assert _group_settled(tracks, s, floor)
    # each sum must still be known to the target of itself: the model, and the layers
    noisy_model = _track_of([10_000_000 + (1 if i % 2 else -1) * 700_000 for i in range(n)], "model")
    assert not _group_settled([noisy_model, *layers], s, floor)
    noisy_layers = [_track_of([500_000 + (1 if i % 2 else -1) * 160_000 for i in range(n)], "layer") for _ in range(20)]
    assert not _group_settled([model, *noisy_layers], s, floor)


@pytest.mark.parametrize("seed", range(5))
def test_the_group_rule_never_samples_longer_than_the_per_call_rule(seed: int) -> None:
    # a noisy model and noisy layers: with the group rule the rounds stop no later than without it
    rng = random.Random(seed)
    model = [int(10_000_000 * rng.uniform(0.8, 1.2)) for _ in range(97)]
    layers = [[int(400_000 * rng.uniform(0.7, 1.3)) for _ in range(89)] for _ in range(12)]

    def group(rule: bool) -> list[Timing]:
        clock = FakeClock()
        calls = [clock.call_taking(*model), *(clock.call_taking(*d) for d in layers)]
        s = _rounds_only(interleave_group_rule=rule)
        return measure_interleaved(calls, s, clock=clock, seed=seed).timings

    each, grouped = group(False), group(True)
    assert all(t.stopped_by == "noise" for t in (*each, *grouped))
    assert grouped[0].stats.n <= each[0].stats.n


def test_interleaving_cancels_a_drift_that_biases_one_after_the_other() -> None:
    # The host slows down linearly with time; call B costs exactly twice call A.
    # Measured one after the other, B runs later, on a slower host, and looks > 2x A.
    def drifting_clock() -> tuple[FakeClock, Callable[[int], Callable[[], None]]]:
        clock = FakeClock()
        start = clock.now

        def call_of(base_ns: int) -> Callable[[], None]:
            def run() -> None:
                clock.now += int(base_ns * (1 + (clock.now - start) / 2e9))  # 50% slower after 1 s

            return run

        return clock, call_of

    s = settings(warmup_runs=0, min_samples=50, min_time_s=0.0, target_rel_stderr=10.0, min_sample_time_s=0.0)
    clock, call_of = drifting_clock()
    a = measure(call_of(2_000_000), s, clock=clock)
    b = measure(call_of(4_000_000), s, clock=clock)
    sequential = b.stats.mean / a.stats.mean
    clock, call_of = drifting_clock()
    ia, ib = measure_interleaved([call_of(2_000_000), call_of(4_000_000)], s, clock=clock).timings
    interleaved = ib.stats.mean / ia.stats.mean
    assert sequential > 2.1
    assert interleaved == pytest.approx(2.0, rel=0.03)


def test_interleaved_untimed_companions_run_outside_the_samples() -> None:
    clock = FakeClock()
    companion_runs = []

    def companion() -> None:
        companion_runs.append(clock.now)
        clock.now += 10_000_000  # 10 ms that no sample may contain

    fn = clock.call_taking(1_000_000)
    s = settings(warmup_runs=0, min_samples=3, min_time_s=0.0, target_rel_stderr=10.0)
    rounds = measure_interleaved([fn], s, untimed=[companion], untimed_runs=5, clock=clock)
    (t,) = rounds.timings
    assert len(companion_runs) == 5  # the rounds go on until the companion has run 5 times
    assert rounds.companions_kept == (True,) * 5
    assert t.stats.n == 5 and t.samples == pytest.approx((1e-3,) * 5)

    # 50 rounds, 5 kept companions wanted: the stride doubles each time 10 are kept
    companion_runs.clear()
    s50 = s.model_copy(update={"min_samples": 50})
    rounds = measure_interleaved([fn], s50, untimed=[companion], untimed_runs=5, clock=clock)
    assert rounds.timings[0].stats.n == 50
    ran_in = [*range(10), 10, 12, 14, 16, 18, 20, 24, 28, 32, 36, 40, 48]
    assert len(companion_runs) == len(rounds.companions_kept) == len(ran_in)
    kept = [r for r, keep in zip(ran_in, rounds.companions_kept, strict=True) if keep]
    assert kept == [0, 8, 16, 24, 32, 40, 48]  # evenly over the 50 rounds, like the samples
    with pytest.raises(ValueError):
        measure_interleaved([fn, fn], s, untimed=[companion], clock=clock)


def test_interleaved_failure_leaves_the_rounds_and_the_others_go_on() -> None:
    clock = FakeClock()
    calls = 0

    def breaks_in_round_three() -> None:
        nonlocal calls
        calls += 1
        clock.now += 1_000_000
        if calls > 3:
            raise MemoryError("out of memory")

    ok = clock.call_taking(1_000_000)
    s = settings(warmup_runs=1, min_samples=10, min_time_s=0.0, target_rel_stderr=10.0)
    broken, fine = measure_interleaved([breaks_in_round_three, ok], s, clock=clock).timings
    assert isinstance(broken, MemoryError)
    assert isinstance(fine, Timing) and fine.stats.n == 10


def test_interleaved_time_cap_is_the_groups_budget() -> None:
    # two calls, 200 ms cap each: the group stops after 400 ms of wall time
    clock = FakeClock()
    start = clock.now
    fns = [clock.call_taking(0, 1_000_000), clock.call_taking(1_000_000, 0)]
    s = settings(warmup_runs=0, min_samples=10_000, target_rel_stderr=1e-6, max_time_s=0.2, min_sample_time_s=0.0)
    timings = measure_interleaved(fns, s, clock=clock).timings
    assert {t.stopped_by for t in timings} == {"time_cap"}
    assert 0.4e9 <= clock.now - start <= 0.4e9 + 3_000_000


def test_an_interleaved_group_past_its_time_cap_takes_three_rounds_or_the_rounds_asked() -> None:
    # one 100 ms call, a 0.1 s cap: the cap has passed after the first round
    s = settings(warmup_runs=0, min_samples=1000, target_rel_stderr=1e-6, max_time_s=0.1, min_sample_time_s=0.0)
    clock = FakeClock()
    (t,) = measure_interleaved([clock.call_taking(100_000_000, 110_000_000)], s, clock=clock).timings
    assert (t.stopped_by, t.stats.n) == ("time_cap", 3)
    clock = FakeClock()
    (t,) = measure_interleaved([clock.call_taking(100_000_000, 110_000_000)], s, clock=clock, min_rounds=10).timings
    assert (t.stopped_by, t.stats.n) == ("time_cap", 10)


def test_interleaved_real_calls() -> None:
    timings = measure_interleaved([trivial, lambda: busy_wait(1e-4)], settings(target_rel_stderr=0.05)).timings
    assert all(isinstance(t, Timing) and t.stats.n >= 10 for t in timings)
    assert timings[1].stats.median > timings[0].stats.median


# -- device-timed samples ---------------------------------------------------------------------


class FakeDevice:
    """``sample(k)``: the device reports ``per_run_s`` per run; the wall clock moves 10 us per run."""

    def __init__(self, clock: FakeClock, per_run_s: Callable[[int], float]) -> None:
        self.clock, self.per_run_s = clock, per_run_s
        self.ks: list[int] = []

    def sample(self, k: int) -> float:
        self.ks.append(k)
        self.clock.now += 10_000 * k
        return self.per_run_s(len(self.ks))


def test_device_samples_calibrate_k_and_keep_the_device_figure() -> None:
    # 30 us per run as the device times it: k doubles until one sample lasts >= 200 us (k = 8)
    clock = FakeClock()
    device = FakeDevice(clock, lambda i: 30e-6)
    t = measure_device(device.sample, settings(warmup_runs=2, min_samples=5, min_time_s=0.0), clock=clock)
    assert device.ks == [1, 1] + [1, 2, 4, 8] + [8] * 4  # warm-up, calibration (its last is kept), sampling
    assert t.iterations == 8 and t.stats.n == 5 and t.stopped_by == "noise"
    assert all(s == pytest.approx(30e-6) for s in t.samples)


def test_device_samples_stop_at_the_wall_clock_cap() -> None:
    # the device reports alternating 1 and 3 ms runs: never within 1e-6; the wall cap (50 ms) stops it
    clock = FakeClock()
    device = FakeDevice(clock, lambda i: 1e-3 if i % 2 else 3e-3)
    cap = settings(min_samples=1000, target_rel_stderr=1e-6, max_time_s=0.05, warmup_runs=0)
    t = measure_device(device.sample, cap, clock=clock)
    assert t.stopped_by == "time_cap"
    assert t.iterations == 1  # a 1 ms run already lasts 200 us
    assert len(t.samples) == 5000  # 10 us of wall time per run, 50 ms cap
    assert sorted({round(x, 9) for x in t.samples}) == [1e-3, 3e-3]


def test_an_interleaved_group_past_its_time_cap_still_takes_three_rounds() -> None:
    # a 126 ms call alone with a 0.5 s cap: warm-up and calibration spend the budget, yet three samples
    # are taken, so its trimmed mean has an interval (one sample would be printed "126 ± 0")
    clock = FakeClock()
    s = settings(warmup_runs=3, min_samples=10, max_time_s=0.5, min_sample_time_s=0.0)
    t = measure_interleaved([clock.call_taking(126_000_000, 130_000_000, 128_000_000)], s, clock=clock).timings[0]
    assert (t.stopped_by, t.stats.n) == ("time_cap", 3)
    interval = statistic_interval(t.samples, "trimmed_mean")
    assert interval is not None and interval.high > interval.low


def test_a_judge_that_finds_the_rounds_disturbed_has_them_sampled_again_with_the_same_calls() -> None:
    """``measure_interleaved``'s judge (the run's reference call): its verdict takes the rounds again, as
    the group's own checks do, within ``disturbance_retries`` and the budget, without calibrating again."""
    clock = FakeClock()
    fast, slow = clock.call_taking(300_000), clock.call_taking(5_000_000)
    # the fake clock's rounds take no real time: the host's own CPU reading over them (a busy CI runner's) must
    # not judge them first, or the judge is never asked again
    s = settings(
        warmup_runs=1, min_samples=5, min_time_s=0.0, target_rel_stderr=10.0, disturbance_retries=1, min_cpu_share=0.0
    )
    seen: list[dict] = []

    def slow_once(samples):
        seen.append(samples)
        return "the host ran slower" if len(seen) == 1 else None

    judge = Judge(slow_once)
    ta, tb = measure_interleaved([fast, slow], s, clock=clock, judge=judge).timings
    assert judge.again == 1 and len(seen) == 2
    assert sorted(seen[0]) == [0, 1] and seen[0][1] == pytest.approx((5e-3,) * 5)  # by call position, seconds
    assert not ta.disturbed and ta.remeasured == tb.remeasured == 1
    assert ta.stats.n == 5  # fresh samples, not appended to the first rounds'

    always = Judge(lambda samples: "the host ran slower")
    ta, _ = measure_interleaved([fast, slow], s, clock=clock, judge=always).timings
    assert always.again == 1 and ta.disturbed and ta.disturbed_reason == "the host ran slower"

    budget = RemeasureBudget(share=0.0, reserve_s=0.0)
    declined = Judge(lambda samples: "the host ran slower")
    ta, _ = measure_interleaved([fast, slow], s, clock=clock, judge=declined, budget=budget).timings
    assert declined.again == 0 and ta.remeasured == 0 and budget.declined == 1
    assert ta.disturbed_reason.startswith("the host ran slower; not measured again")
