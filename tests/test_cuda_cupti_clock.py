"""CUPTI's kernel clock: the windows' bookkeeping on any machine (a scripted recorder), and on a GPU
(``gpu`` marker, with ``cupti-python``) real kernels timed beside the cold sampler's CUDA events."""

from __future__ import annotations

import pytest

from benanza.errors import GpuError
from benanza.runtimes.cuda import cupti_clock
from benanza.runtimes.cuda.cupti_clock import CuptiSampler, window_sums


def test_each_window_sums_the_kernels_that_start_in_it_and_nothing_else() -> None:
    spans = [(5, 8), (12, 15), (16, 20), (31, 33)]  # the first: a flush's kernel, before any window
    windows = [(10, 21), (22, 30), (30, 40)]
    assert window_sums(spans, windows) == pytest.approx([7e-9, None, 2e-9])


class ScriptedRecorder:
    """CUPTI's clock as the sampler sees it: ``now`` ticks, each flush or launch adds a kernel span."""

    def __init__(self, launch_ns: int = 100, kernels_per_launch: int = 1) -> None:
        self.clock = 0
        self.spans: list[tuple[int, int]] = []
        self.launch_ns, self.kernels_per_launch = launch_ns, kernels_per_launch
        self.takes = 0
        self.recording = False

    def now(self) -> int:
        self.clock += 1
        return self.clock

    def kernel(self, ns: int) -> None:
        self.clock += 1
        self.spans.append((self.clock, self.clock + ns))
        self.clock += ns

    def start(self) -> None:
        self.recording = True

    def stop(self) -> None:
        self.recording = False

    def take(self) -> list[tuple[int, int]]:
        self.takes += 1
        spans, self.spans = self.spans, []
        return spans


def _sampler(rec: ScriptedRecorder, monkeypatch: pytest.MonkeyPatch) -> CuptiSampler:
    monkeypatch.setattr(cupti_clock, "recorder", lambda: rec)

    def launch() -> None:
        for _ in range(rec.kernels_per_launch):
            rec.kernel(rec.launch_ns)

    return CuptiSampler(launch, flush=lambda: rec.kernel(10_000), synchronize=lambda: None)


def test_a_sample_is_the_launches_kernels_never_the_flushes(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = ScriptedRecorder(launch_ns=100, kernels_per_launch=2)  # a candidate of two kernels
    sample = _sampler(rec, monkeypatch)
    rec.kernel(50_000)  # a warm-up's kernel, recorded before the sample: left out
    assert sample(4) == pytest.approx(200e-9)
    assert rec.takes == 2  # what was there before, then the sample's
    assert not rec.recording  # kernels are traced only while a sample is taken


def test_a_launch_cupti_saw_no_kernel_of_is_an_error_not_a_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = ScriptedRecorder(kernels_per_launch=0)
    with pytest.raises(GpuError, match="CUPTI recorded no kernel for 3 of 3 launches"):
        _sampler(rec, monkeypatch)(3)


def test_without_the_bindings_a_sampler_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cupti_clock, "cupti_missing", lambda: "cupti-python is not usable: no module")
    monkeypatch.setattr(cupti_clock, "_RECORDER", None)
    with pytest.raises(GpuError, match="cupti-python is not usable"):
        CuptiSampler(lambda: None, lambda: None, lambda: None)


def test_the_process_subscribes_once_whichever_thread_asks_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUPTI takes one pair of callbacks per process: a second subscription would leave the first recorder
    deaf. Eight threads asking at once get one recorder, made once."""
    import threading

    made = []

    class Recorder:
        def __init__(self) -> None:
            made.append(self)

    monkeypatch.setattr(cupti_clock, "cupti_missing", lambda: None)
    monkeypatch.setattr(cupti_clock, "_KernelRecorder", Recorder)
    monkeypatch.setattr(cupti_clock, "_RECORDER", None)
    got = []
    threads = [threading.Thread(target=lambda: got.append(cupti_clock.recorder())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1 and all(r is made[0] for r in got) and len(got) == 8


@pytest.mark.gpu
def test_cupti_times_a_kernel_without_the_events_cost() -> None:
    """An empty kernel and a 4 MB add: CUPTI's durations are positive and no longer than the cold
    sampler's events around the same launches (which hold the events' own microsecond or two)."""
    pytest.importorskip("cupti")
    import cupy

    from benanza.runtimes.cuda.device import DeviceContext

    with DeviceContext() as context:
        empty = cupy.RawKernel('extern "C" __global__ void benanza_empty() {}', "benanza_empty")
        n = 1 << 20
        a, out = context.array((n,), "float32"), context.array((n,), "float32", "zeros")
        for launch in (
            lambda: empty((1,), (1,), (), stream=context.stream),
            lambda: cupy.add(a, a, out=out),
        ):
            for _ in range(3):
                with context.stream:
                    launch()
            context.synchronize()
            cupti = min(context.cupti_sampler(launch)(20) for _ in range(3))
            cold = min(context.cold_sampler(launch)(20) for _ in range(3))
            assert 0 < cupti <= cold * 1.05, (cupti, cold)
