"""The interference detector (issue 16): synthetic series, then a real ONNX Runtime benchmark
slowed down by a real competitor process busy on the same core during part of the run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import onnxruntime as ort
import pytest
from neighbours import spinning
from onnx import TensorProto, helper

from benanza.bench.harness import (
    HarnessSettings,
    disturbance,
    measure,
    measure_interleaved,
    speed_step,
)
from benanza.bench.remeasure import RemeasureBudget
from benanza.runtimes.onnxruntime import session_options

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")


def test_a_flat_series_has_no_step() -> None:
    rng = np.random.default_rng(0)
    flat = (1.0 + 0.05 * rng.standard_normal(300)).tolist()
    found = speed_step(flat)
    assert found is not None and not (found.apart and abs(found.step) > 0.05)
    assert disturbance(flat, 1.0, HarnessSettings()) is None


def test_a_step_in_the_last_third_is_found() -> None:
    rng = np.random.default_rng(1)
    series = (1.0 + 0.05 * rng.standard_normal(300)).tolist()
    series[200:] = [x * 1.3 for x in series[200:]]
    found = speed_step(series)
    assert found.apart and found.step == pytest.approx(0.3, abs=0.05)
    reason = disturbance(series, 1.0, HarnessSettings())
    assert reason.startswith("the host's speed changed by +")


def test_short_bursts_are_noise_not_a_step() -> None:
    # a neighbour on for 5 samples, off for 5, through the whole measurement: every third alike
    rng = np.random.default_rng(2)
    series = [(1.4 if (i // 5) % 2 else 1.0) * (1 + 0.02 * rng.standard_normal()) for i in range(300)]
    assert disturbance(series, 1.0, HarnessSettings()) is None


def test_one_long_stall_widens_its_third_instead_of_moving_it() -> None:
    rng = np.random.default_rng(3)
    series = (1.0 + 0.02 * rng.standard_normal(300)).tolist()
    series[250] = 80.0  # one 80x stall (a page fault storm, a migration): noise, not a new speed
    found = speed_step(series)
    assert abs(found.step) > 0.05 and not found.apart
    assert disturbance(series, 1.0, HarnessSettings()) is None


def test_a_neighbour_taking_time_slices_in_the_last_third_is_a_step() -> None:
    # one sample in three stalled 8x from the 200th on: the time-sliced core of a shared machine
    series = [1.0 + 0.01 * (i % 7) for i in range(300)]
    series[200:] = [x * (8.0 if i % 3 == 0 else 1.0) for i, x in enumerate(series[200:])]
    reason = disturbance(series, 1.0, HarnessSettings())
    assert reason is not None and "speed changed by +" in reason


def test_too_few_samples_tell_nothing_and_a_small_step_is_not_a_disturbance() -> None:
    assert speed_step([1.0] * 14) is None
    series = [1.0] * 100 + [1.02] * 50  # apart (no noise at all) but 2% < disturbance_step
    found = speed_step(series)
    assert found.apart and disturbance(series, 1.0, HarnessSettings()) is None


def test_too_little_cpu_is_a_disturbance() -> None:
    reason = disturbance([1.0] * 30, 0.55, HarnessSettings())
    assert reason.startswith("the process had 55% of a CPU")
    assert disturbance([1.0] * 30, 0.55, HarnessSettings(min_cpu_share=0.5)) is None


def test_other_processes_beyond_the_cores_the_threads_leave_free_are_a_disturbance() -> None:
    settings = HarnessSettings()
    flat = [1.0] * 30
    reason = disturbance(flat, 1.9, settings, other_cores=0.6, threads=2, cores=2)
    assert reason.startswith("other processes used 0.60 of the host's 2 cores while it was measured")
    assert "more than the 0 its 2 threads left free" in reason
    assert disturbance(flat, 1.9, settings, other_cores=0.2, threads=2, cores=2) is None  # within 0.25
    assert disturbance(flat, 1.0, settings, other_cores=1.1, threads=1, cores=2) is None  # a core left free
    assert disturbance(flat, 1.0, settings, other_cores=1.3, threads=1, cores=2) is not None
    assert disturbance(flat, 1.9, settings, other_cores=3.0, threads=None, cores=2) is None  # threads not known
    assert disturbance(flat, 1.9, HarnessSettings(max_other_cores=1.0), other_cores=0.6, threads=2, cores=2) is None


def test_the_host_cpu_reading_sees_another_process_busy() -> None:
    from benanza.bench import host_cpu

    if host_cpu.host_busy_s() is None:
        pytest.skip("no /proc/stat")
    with spinning():
        start = host_cpu.mark()
        time.sleep(0.6)
        use = host_cpu.since(start)
    assert use.share is not None and use.share < 0.05  # this process slept
    assert use.others is not None and use.others > 0.7  # the other one used about a core


def test_host_busy_time_reads_proc_stat_and_nothing_else(tmp_path) -> None:
    from benanza.bench.host_cpu import TICKS_PER_S, host_busy_s

    stat = tmp_path / "stat"
    stat.write_text("cpu  100 5 50 9000 40 3 2 7 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
    assert host_busy_s(stat) == pytest.approx((100 + 5 + 50 + 3 + 2 + 7) / TICKS_PER_S)  # not idle, not iowait
    stat.write_text("intr 1 2 3\n")
    assert host_busy_s(stat) is None
    assert host_busy_s(tmp_path / "missing") is None


# -- a real ONNX Runtime benchmark, a real competitor --------------------------------------------


@pytest.fixture(scope="module")
def conv_session():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 28, 28])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = helper.make_tensor("w", TensorProto.FLOAT, [32, 32, 3, 3], np.random.default_rng(0).random(32 * 32 * 9))
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "g", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(
        model.SerializeToString(), session_options("extended", 1), providers=["CPUExecutionProvider"]
    )
    feeds = {"x": np.random.default_rng(1).random((1, 32, 28, 28), dtype=np.float32)}
    return lambda: session.run(None, feeds)


BUSY = (
    "import os, sys, time\n"
    "os.sched_setaffinity(0, {int(sys.argv[1])})\n"
    "print('ready', flush=True)\n"
    "sys.stdin.readline()\n"
    "time.sleep(float(sys.argv[2]))\n"
    "while True: pass\n"
)


@contextmanager
def competitor_on_my_core(after_s: float, processes: int = 1) -> Iterator[None]:
    """This thread pinned to one core; ``processes`` processes busy-looping on that core from ``after_s`` on,
    counted from when this yields (their interpreters have started by then).

    Several competitors make the step large against whatever else shares the machine (a CI
    runner's other jobs): this thread's share of its core falls to at most 1 / (1 + processes).
    """
    before = os.sched_getaffinity(0)
    core = min(before)
    os.sched_setaffinity(0, {core})
    busy = [
        subprocess.Popen(
            [sys.executable, "-c", BUSY, str(core), str(after_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    try:
        # Each competitor's interpreter starts (the CPU it takes would land in the measurement's first
        # third, a speed-up later on a slow host), pins itself, then waits; all are let go at once.
        for p in busy:
            assert p.stdout.readline().strip() == "ready"
        for p in busy:
            p.stdin.write("go\n")
            p.stdin.flush()
        yield
    finally:
        for p in busy:
            p.kill()
            p.wait()
        os.sched_setaffinity(0, before)


# long enough to sample for ~1.5 s whatever the noise: the competitor starts after a third of it
SLOW = {
    "warmup_runs": 2,
    "min_samples": 10,
    "min_time_s": 1.5,
    "max_time_s": 1.5,
    "target_rel_stderr": 0.0,
    "min_sample_time_s": 0.005,
    "interleave_max_rounds": 100_000,  # these measurements end at their time cap, whatever their rounds
}


def test_a_step_on_a_real_onnxruntime_benchmark_is_found(conv_session) -> None:
    # only the step detector may fire (CPU share off), and no second try: the step is in this one
    settings = HarnessSettings(**SLOW, min_cpu_share=0.0, disturbance_retries=0)
    with competitor_on_my_core(after_s=0.75, processes=3):
        timing = measure(conv_session, settings)
    assert timing.disturbed, timing.samples
    assert timing.disturbed_reason.startswith("the host's speed changed by +")
    found = speed_step(timing.samples)
    assert found.apart and found.step > 0.3  # sharing one core with three others: far slower
    assert timing.remeasured == 0


def test_a_competitor_throughout_is_measured_again_then_flagged(conv_session) -> None:
    # the step detector off: the CPU share finds a competitor busy for the whole measurement
    settings = HarnessSettings(**{**SLOW, "min_time_s": 0.4, "max_time_s": 0.4}, disturbance_step=10.0)
    with competitor_on_my_core(after_s=0.0):
        time.sleep(0.05)  # the competitor is running
        timing = measure(conv_session, settings)
    assert timing.disturbed and timing.remeasured == 1
    assert timing.cpu_share < 0.8
    assert timing.disturbed_reason.startswith("the process had")


def test_a_spent_remeasure_budget_flags_without_measuring_again(conv_session) -> None:
    """A competitor throughout, and a budget that allows no re-measure: one attempt each, marked with why."""
    settings = HarnessSettings(**{**SLOW, "min_time_s": 0.4, "max_time_s": 0.4}, disturbance_step=10.0)
    spent = RemeasureBudget(share=0.0, reserve_s=0.0)
    profiled: list[int] = []
    with competitor_on_my_core(after_s=0.0):
        time.sleep(0.05)  # the competitor is running
        timing = measure(conv_session, settings, budget=spent)
        group = measure_interleaved(
            [conv_session, conv_session],
            settings,
            untimed=[lambda: profiled.append(1), None],
            untimed_runs=3,
            budget=spent,
        )
        ample = RemeasureBudget(share=0.0, reserve_s=100.0)
        again = measure(conv_session, settings, budget=ample)
    assert timing.disturbed and timing.remeasured == 0
    assert timing.disturbed_reason.startswith("the process had")
    assert "; not measured again: re-measures had spent 0 s of the 0 s this run allows them" in timing.disturbed_reason
    for t in group.timings:
        assert t.disturbed and t.remeasured == 0 and "not measured again" in t.disturbed_reason
    assert len(group.companions_kept) == len(profiled) and sum(group.companions_kept) >= 3  # the one attempt's
    assert (spent.taken, spent.declined, spent.spent_s) == (0, 2, 0.0)
    assert spent.measured_s >= 0.8  # both first measurements booked (0.4 s of rounds each, at least)
    assert again.disturbed and again.remeasured == 1 and "not measured again" not in again.disturbed_reason
    assert ample.taken == 1 and ample.spent_s >= 0.4


def test_a_step_during_interleaved_rounds_flags_every_call(conv_session) -> None:
    settings = HarnessSettings(**SLOW, min_cpu_share=0.0, disturbance_retries=0)
    with competitor_on_my_core(after_s=0.75 * 2, processes=3):  # the group's time cap is per call: 2 x 1.5 s
        rounds = measure_interleaved([conv_session, conv_session], settings)
    first, second = rounds.timings
    assert first.disturbed and second.disturbed
    assert first.disturbed_reason == second.disturbed_reason
    assert "speed changed by +" in first.disturbed_reason


def test_a_competitor_beside_a_benchmark_using_every_core_is_flagged(conv_session) -> None:
    # the step and CPU-share checks off: only the other processes' CPU time can find it; the
    # benchmark's threads are all the host's cores, so any core the competitor takes is theirs
    from benanza.bench.host_cpu import host_busy_s, host_cores

    if host_busy_s() is None:
        pytest.skip("no /proc/stat")
    settings = HarnessSettings(
        **{**SLOW, "min_time_s": 0.4, "max_time_s": 0.4}, disturbance_step=10.0, min_cpu_share=0.0
    )
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.1)
        timing = measure(conv_session, settings, threads=host_cores())
        group = measure_interleaved([conv_session, conv_session], settings, threads=host_cores())
    finally:
        busy.kill()
        busy.wait()
    assert timing.disturbed and timing.remeasured == 1
    assert timing.other_cores > 0.7
    assert timing.disturbed_reason.startswith("other processes used")
    assert all(t.disturbed and t.disturbed_reason.startswith("other processes used") for t in group.timings)


def test_a_flagged_timing_round_trips_and_old_timings_read_as_undisturbed() -> None:
    from benanza.bench.harness import Timing
    from benanza.bench.stats import describe

    samples = (1e-3, 1.1e-3, 0.9e-3)
    flagged = Timing(samples, 4, describe(samples), "noise", 0.01, True, "a step", 0.5, 1, 0.8)
    assert Timing.from_dict(flagged.to_dict()) == flagged
    newer = ("disturbed", "disturbed_reason", "cpu_share", "other_cores")
    old = {k: v for k, v in flagged.to_dict().items() if k not in newer}
    restored = Timing.from_dict({**old, "remeasured": 0})
    assert not restored.disturbed and restored.cpu_share is None and restored.other_cores is None


# -- threads = "auto": the cores other processes leave free ------------------------------------


def test_the_threads_left_are_those_the_interference_check_accepts() -> None:
    from benanza.bench.host_cpu import threads_left

    assert threads_left(2, 0.0) == 2 and threads_left(2, 0.25) == 2  # within the tolerance
    assert threads_left(2, 0.3) == 1 and threads_left(2, 0.5) == 1 and threads_left(2, 1.9) == 1
    assert threads_left(8, 3.2) == 5 and threads_left(8, 3.3) == 4
    assert threads_left(1, 0.9) == 1  # never none
    for cores, others in ((2, 0.5), (8, 3.2), (4, 0.0), (16, 7.9)):
        threads = threads_left(cores, others)

        def flagged(at: int, cores: int = cores, others: float = others) -> bool:
            flat = [1.0] * 30
            return disturbance(flat, None, HarnessSettings(), other_cores=others, threads=at, cores=cores) is not None

        # the harness would not flag a measurement beside that load at these threads, and would at one more
        assert not flagged(threads)
        assert threads == cores or flagged(threads + 1)


def test_auto_threads_leave_a_busy_neighbour_its_core() -> None:
    """A real process spinning on one core: ``free_cores`` sees it and leaves it that core."""
    from benanza.bench import host_cpu

    if host_cpu.host_busy_s() is None:
        pytest.skip("no /proc/stat")
    if host_cpu.host_cores() < 2:
        pytest.skip("needs two cores")
    with spinning():
        found = host_cpu.free_cores(window_s=0.5)
    assert found.others is not None and found.others > 0.7, found
    assert found.threads <= found.cores - 1
    assert found.note().startswith(f"threads {found.threads} of {found.cores} cores (auto: other processes used")


def test_the_runtime_reads_auto_once_per_process_and_says_what_it_chose() -> None:
    from benanza.bench import host_cpu
    from benanza.errors import UsageError
    from benanza.runtimes.onnxruntime import OnnxRuntimeCPU

    first, second = OnnxRuntimeCPU(threads="auto"), OnnxRuntimeCPU(threads="auto")
    chosen = host_cpu.free_cores_once()
    assert first.threads == second.threads == chosen.threads  # one variant per process
    assert first.variant()["threads"] == chosen.threads and first.notes() == (chosen.note(),)
    assert OnnxRuntimeCPU(threads=3).notes() == () and OnnxRuntimeCPU(threads=3).threads == 3
    assert OnnxRuntimeCPU().threads == host_cpu.host_cores()  # the library's default: every core
    for bad in (0, -1, "two", 1.5, True):
        with pytest.raises(UsageError, match="threads must be a positive integer or 'auto'"):
            OnnxRuntimeCPU(threads=bad)


def test_auto_keeps_the_most_stored_threads_that_the_free_cores_allow() -> None:
    from benanza.bench.host_cpu import kept_threads

    assert kept_threads(2, [1]) == 1  # fewer than are free: kept, so that the stored results are reused
    assert kept_threads(4, [1, 2, 8]) == 2
    assert kept_threads(2, [2, 1]) == 2
    assert kept_threads(1, [2]) is None  # more than are free: the neighbour's core is not taken
    assert kept_threads(3, []) is None


def test_auto_keeps_only_a_count_stored_for_the_same_variant_otherwise(monkeypatch) -> None:
    """Stored counts of another optimisation level or provider are not the same variant: auto ignores them."""
    from benanza.bench import host_cpu
    from benanza.targets import keep_stored_threads, open_target

    four = host_cpu.FreeCores(cores=4, others=0.1, threads=4, window_s=0.5)
    monkeypatch.setattr(host_cpu, "free_cores_once", lambda: four)  # a quiet 4-core host, on any machine
    options = {"threads": "auto"}
    target = open_target("onnxruntime", options)
    assert target.runtime.variant() == {"ep": "cpu", "opt": "extended", "threads": 4}
    assert target.notes == (four.note(),)
    other = {"ep=cpu,opt=basic,threads=1": 9, "ep=cuda,opt=extended,threads=2": 9, "ep=cpu,opt=extended,threads=x": 1}
    assert keep_stored_threads(target, "onnxruntime", options, other) is target
    alike = {**other, "ep=cpu,opt=extended,threads=2": 5, "ep=cpu,opt=extended,threads=1": 7}
    kept = keep_stored_threads(target, "onnxruntime", options, alike)
    assert kept.runtime.variant()["threads"] == kept.runtime.threads == 2 and kept.stack_id == target.stack_id
    assert kept.notes == (host_cpu.kept_note(2, four),) and "so that they are reused" in kept.notes[0]
    assert keep_stored_threads(target, "onnxruntime", {"threads": 4}, alike) is target  # a number is never changed
    current = {"ep=cpu,opt=extended,threads=4": 3, **alike}
    assert keep_stored_threads(target, "onnxruntime", options, current) is target  # the free count is stored too
    over = keep_stored_threads(target, "onnxruntime", options, {"ep=cpu,opt=extended,threads=6": 3})
    assert over.runtime is target.runtime and over.notes == (host_cpu.unfit_note([6], four),)
    assert "threads 6, more than are free now" in over.notes[0]
