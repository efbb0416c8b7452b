"""DeviceContext: buffers, the L2-flushed cold sampler and the CUDA-graph hot sampler.

Three kinds of tests:

- on any machine, the samplers' bookkeeping against a scripted stand-in for CuPy (a clock
  that launches advance; graph replays cost half a launch, so the tests can tell which way
  a sample was taken; an L2 flush costs 100 launches, so a flush inside the timed events
  would show);
- without a GPU, ``DeviceContext()`` is a one-line ``GpuError``;
- on a GPU (``gpu`` marker), real launches through both samplers and real arrays.
"""

from __future__ import annotations

import itertools
import math
import sys
import types
from typing import Any

import numpy
import pytest

from benanza.errors import GpuError, UsageError
from benanza.runtimes.cuda.device import DeviceContext

LAUNCH_MS = 1.0
REPLAY_FACTOR = 0.5  # a graph replay runs its launches at half the cost of plain launches
FLUSH_MS = 100.0


# -- a scripted CuPy ------------------------------------------------------------------------------


class FakeGpu:
    """The device's clock (ms) and counts of what was asked of it."""

    def __init__(self) -> None:
        self.clock_ms = 0.0
        self.plain_launches = 0
        self.captures = 0
        self.replays = 0
        self.flushes = 0
        self.read_flushes = 0
        self.memsets = 0
        self.pointers = itertools.count(0x1000, 0x1000)
        self.pinned: dict[int, PinnedBuffer] = {}
        self.gate_opens = True
        self.nvrtc_error: str | None = None


class FakeGraph:
    def __init__(self, gpu: FakeGpu, captured_ms: list[float]) -> None:
        self.gpu, self.captured_ms = gpu, captured_ms

    def launch(self, stream: FakeStream) -> None:
        self.gpu.replays += 1
        self.gpu.clock_ms += REPLAY_FACTOR * sum(self.captured_ms)


class FakeStream:
    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu
        self.ptr = next(gpu.pointers)
        self.capturing = False
        self.invalidated = False
        self.captured_ms: list[float] = []
        self.gate: tuple[PinnedBuffer, int] | None = None

    def held(self) -> bool:
        """Whether a gate holds the stream: the GPU waits, so host time is not on its clock."""
        if self.gate is None:
            return False
        buffer, ticket = self.gate
        return int(numpy.frombuffer(buffer, dtype=numpy.int64)[0]) < ticket

    def __enter__(self) -> FakeStream:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def synchronize(self) -> None:
        if self.capturing:
            self.invalidated = True
            raise RuntimeError("cudaErrorStreamCaptureUnsupported: operation not permitted when stream is capturing")

    def begin_capture(self) -> None:
        assert not self.capturing
        self.capturing, self.invalidated, self.captured_ms = True, False, []

    def end_capture(self) -> FakeGraph:
        if not self.capturing:
            raise RuntimeError("cudaErrorIllegalState")
        self.capturing = False
        if self.invalidated:
            raise RuntimeError("cudaErrorStreamCaptureInvalidated")
        self.gpu.captures += 1
        return FakeGraph(self.gpu, self.captured_ms)

    def enqueue(self, ms: float) -> None:
        if self.capturing:
            self.captured_ms.append(ms)
        else:
            self.gpu.plain_launches += 1
            self.gpu.clock_ms += ms


class FakeEvent:
    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu, self.at_ms = gpu, None

    def record(self, stream: FakeStream) -> None:
        self.at_ms = self.gpu.clock_ms

    def synchronize(self) -> None:
        pass


class PinnedBuffer(bytearray):
    """Pinned host memory: bytes the host writes (through NumPy) and the fake GPU reads."""

    ptr = 0


class FakeKernel:
    """A raw kernel built by NVRTC: ``compile`` fails as ``gpu.nvrtc_error`` says; ``marker``: what its source uses."""

    marker = ""

    def __init__(self, gpu: FakeGpu, source: str, name: str) -> None:
        assert name in source and self.marker in source
        self.gpu = gpu

    def compile(self) -> None:
        if self.gpu.nvrtc_error:
            raise RuntimeError(self.gpu.nvrtc_error)


class FakeGateKernel(FakeKernel):
    """The gate: holds its stream until the host's flag reaches the ticket, or (``gpu.gate_opens``
    False, a gate that never sees the flag) gives up at once and counts a timeout."""

    marker = "globaltimer"

    def __call__(self, grid: tuple, block: tuple, args: tuple, stream: FakeStream) -> None:
        flag_ptr, ticket, _, timed_out_ptr = (int(a) for a in args)
        assert timed_out_ptr == flag_ptr + 8 and grid == block == (1,)
        buffer = self.gpu.pinned[flag_ptr]
        if self.gpu.gate_opens:
            stream.gate = (buffer, ticket)
        else:
            counts = numpy.frombuffer(buffer, dtype=numpy.int64)
            counts[1] += 1


class FakeFlushKernel(FakeKernel):
    """The reading L2 flush: costs FLUSH_MS on the stream it is launched on."""

    marker = "int4"

    def __call__(self, grid: tuple, block: tuple, args: tuple, stream: FakeStream) -> None:
        assert int(args[1]) * 16 == 2 * L2_BYTES and grid == (8 * SM_COUNT,)
        self.gpu.flushes += 1
        self.gpu.read_flushes += 1
        self.gpu.clock_ms += FLUSH_MS


L2_BYTES = 4 << 20
SM_COUNT = 4


def fake_cupy(gpu: FakeGpu) -> types.ModuleType:
    def memset_async(ptr: int, value: int, size: int, stream: int) -> None:
        gpu.memsets += 1  # the buffer zeroed once, or a writing flush
        gpu.clock_ms += FLUSH_MS

    kernels = {"benanza_gate": FakeGateKernel, "benanza_l2_flush": FakeFlushKernel}
    runtime = types.SimpleNamespace(
        getDeviceCount=lambda: 1,
        getDeviceProperties=lambda ordinal: {"l2CacheSize": L2_BYTES, "multiProcessorCount": SM_COUNT},
        memsetAsync=memset_async,
        deviceGetPCIBusId=lambda ordinal: "0000:00:00.0",
    )

    class Device:
        def __init__(self, ordinal: int) -> None:
            self.ordinal = ordinal

        def use(self) -> None:
            pass

        def __enter__(self) -> Device:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

    def alloc_pinned_memory(nbytes: int) -> PinnedBuffer:
        buffer = PinnedBuffer(nbytes)
        buffer.ptr = next(gpu.pointers)
        gpu.pinned[buffer.ptr] = buffer
        return buffer

    module = types.ModuleType("cupy")
    module.RawKernel = lambda source, name: kernels[name](gpu, source, name)  # type: ignore[attr-defined]
    module.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        alloc_pinned_memory=alloc_pinned_memory,
        runtime=runtime,
        Device=Device,
        Stream=lambda non_blocking=False: FakeStream(gpu),
        Event=lambda: FakeEvent(gpu),
        get_elapsed_time=lambda start, stop: stop.at_ms - start.at_ms,
        alloc=lambda nbytes: types.SimpleNamespace(ptr=next(gpu.pointers), size=nbytes),
    )
    module.random = types.SimpleNamespace(default_rng=lambda seed: object())  # type: ignore[attr-defined]
    return module


@pytest.fixture
def fake() -> Any:
    """A DeviceContext over the scripted CuPy, with NVML absent; yields (context, gpu)."""
    gpu = FakeGpu()
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "cupy", fake_cupy(gpu))
        patch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
        context = DeviceContext(0)
        yield context, gpu
        context.close()


def plain_launch(context: DeviceContext):
    return lambda: context.stream.enqueue(LAUNCH_MS)


# -- the samplers' bookkeeping, on any machine ---------------------------------------------------


def test_cold_sampler_flushes_before_each_launch_outside_the_events(fake: Any) -> None:
    context, gpu = fake
    sample = context.cold_sampler(plain_launch(context))
    assert sample(5) == pytest.approx(LAUNCH_MS / 1e3)  # a flush inside the events would add 100 ms
    assert gpu.flushes == 5 and gpu.plain_launches == 5
    assert sample(3) == pytest.approx(LAUNCH_MS / 1e3)
    assert len(context._cold_events) == 5  # reused, not made per sample


def test_the_flush_reads_by_default_and_writes_where_asked_or_where_it_cannot_be_built(fake: Any) -> None:
    """A memset leaves the L2 full of dirty lines the timed kernel must write back; ncu's cache control
    leaves it clean. Both ways flush outside the events."""
    context, gpu = fake
    assert context.flush.info() == {"mode": "read", "bytes": 2 * L2_BYTES, "error": None}
    sample = context.cold_sampler(plain_launch(context))
    assert sample(3) == pytest.approx(LAUNCH_MS / 1e3)
    assert gpu.read_flushes == 3 and gpu.memsets == 1  # the one memset zeroed the buffer read
    context.flush.use("write")
    assert sample(2) == pytest.approx(LAUNCH_MS / 1e3)
    assert gpu.read_flushes == 3 and gpu.memsets == 3
    with pytest.raises(UsageError, match="unknown L2 flush"):
        context.flush.use("invalidate")
    gpu.nvrtc_error = "nvrtc: libnvrtc.so.13 not found"
    without = DeviceContext(0)
    try:
        assert without.flush.info()["mode"] == "write" and "libnvrtc" in without.flush.info()["error"]
        with pytest.raises(GpuError, match="cannot be built"):
            without.flush.use("read")
        assert without.cold_sampler(plain_launch(without))(1) == pytest.approx(LAUNCH_MS / 1e3)
    finally:
        without.close()


def test_hot_sampler_replays_one_graph_per_k(fake: Any) -> None:
    context, gpu = fake
    sample = context.hot_sampler(plain_launch(context))
    assert sample(4) == pytest.approx(REPLAY_FACTOR * LAUNCH_MS / 1e3)
    assert gpu.plain_launches == 1  # the one uncaptured launch before the first capture
    assert (gpu.captures, gpu.replays) == (1, 2)  # the warm replay, then the timed one
    assert sample(4) == pytest.approx(REPLAY_FACTOR * LAUNCH_MS / 1e3)
    assert (gpu.captures, gpu.replays) == (1, 3)  # the graph of 4 is kept
    assert sample(8) == pytest.approx(REPLAY_FACTOR * LAUNCH_MS / 1e3)
    assert (gpu.captures, gpu.replays, gpu.plain_launches) == (2, 5, 1)
    assert sample.mode == "graph" and sample.capture_error is None  # type: ignore[attr-defined]
    assert context.hot_mode == "graph"


def test_hot_sampler_times_plain_launches_when_capture_fails(fake: Any) -> None:
    context, gpu = fake

    def launch_that_synchronizes() -> None:  # a call capture forbids, as some library calls are
        context.stream.enqueue(LAUNCH_MS)
        context.stream.synchronize()

    sample = context.hot_sampler(launch_that_synchronizes)
    assert sample(4) == pytest.approx(LAUNCH_MS / 1e3)
    assert sample.mode == "stream" and context.hot_mode == "stream"  # type: ignore[attr-defined]
    assert "not permitted" in sample.capture_error  # type: ignore[attr-defined]
    assert not context.stream.capturing  # the failed capture was ended
    assert gpu.captures == 0 and gpu.plain_launches == 1 + 4
    assert sample(2) == pytest.approx(LAUNCH_MS / 1e3)  # no second capture attempt
    assert gpu.plain_launches == 1 + 4 + 2


HOST_MS = 0.02  # what the host spends in a library call before its kernel is enqueued


def slow_host_launch(context: DeviceContext, gpu: FakeGpu):
    """A launch whose call takes host time: the GPU idles through it unless a gate holds the stream."""

    def launch() -> None:
        if not context.stream.held():
            gpu.clock_ms += HOST_MS
        context.stream.enqueue(LAUNCH_MS)

    return launch


def test_a_gated_sample_times_the_kernel_not_the_host_call(fake: Any) -> None:
    """On an H200 the ungated cold median of AlexNet's batch-32 GEMM was 60.0 us against ncu's 45.0."""
    context, gpu = fake
    assert context.gating() == {"gated": True, "error": None, "timeouts": 0}
    cold = context.cold_sampler(slow_host_launch(context, gpu))
    assert cold(3) == pytest.approx(LAUNCH_MS / 1e3)
    hot = context.hot_sampler(slow_host_launch(context, gpu))
    assert hot(4) == pytest.approx(REPLAY_FACTOR * LAUNCH_MS / 1e3)
    assert cold.gated.on and hot.gated.on and context.gating()["timeouts"] == 0  # type: ignore[attr-defined]


def test_without_a_gate_the_host_call_is_timed_and_the_context_says_why(fake: Any) -> None:
    _, gpu = fake
    gpu.nvrtc_error = "nvrtc: libnvrtc.so.13 not found"
    ungated = DeviceContext(0)
    try:
        assert ungated.gating() == {
            "gated": False,
            "error": "RuntimeError: nvrtc: libnvrtc.so.13 not found",
            "timeouts": 0,
        }
        cold = ungated.cold_sampler(slow_host_launch(ungated, gpu))
        assert cold(2) == pytest.approx((LAUNCH_MS + HOST_MS) / 1e3)
        assert not cold.gated.on  # type: ignore[attr-defined]
    finally:
        ungated.close()


def test_a_gate_that_times_out_is_left_off_first_by_its_sampler_then_by_the_context(fake: Any) -> None:
    from benanza.runtimes.cuda.device import GATE_MAX_TIMEOUTS

    context, gpu = fake
    gpu.gate_opens = False
    for i in range(GATE_MAX_TIMEOUTS):
        sample = context.cold_sampler(plain_launch(context))
        sample(1)
        assert not sample.gated.on and sample.gated.timeouts == 1  # type: ignore[attr-defined]
        assert context.gating()["timeouts"] == i + 1
    assert context.gating()["gated"] is False and "timed out 3 times" in context.gating()["error"]
    (pinned,) = gpu.pinned.values()
    counted = int(numpy.frombuffer(pinned, dtype=numpy.int64)[1])
    later = context.cold_sampler(plain_launch(context))
    assert later(2) == pytest.approx(LAUNCH_MS / 1e3) and not later.gated.on  # type: ignore[attr-defined]
    assert int(numpy.frombuffer(pinned, dtype=numpy.int64)[1]) == counted  # no gate kernel ran since


def test_the_collector_is_held_off_while_a_sample_is_gated_or_captured(fake: Any) -> None:
    """An object it collects there may free device memory: a free synchronises, so it waited for the
    gate until it timed out (an H100 run lost its gate so, after three), and it breaks a capture."""
    import gc

    context, _ = fake
    seen: list[tuple[bool, bool]] = []

    def launch() -> None:
        seen.append((context.stream.held() or context.stream.capturing, gc.isenabled()))
        context.stream.enqueue(LAUNCH_MS)

    assert gc.isenabled()
    context.cold_sampler(launch)(2)
    context.hot_sampler(launch)(2)
    assert seen and all(not enabled for held, enabled in seen if held)
    assert (True, False) in seen and (False, True) in seen  # the uncaptured first launch runs with it on
    assert gc.isenabled() and context.gating()["timeouts"] == 0
    gc.disable()  # a caller that had it off keeps it off
    try:
        context.cold_sampler(launch)(1)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_launch_that_fails_on_its_own_raises_instead_of_falling_back(fake: Any) -> None:
    context, _ = fake

    def broken() -> None:
        raise RuntimeError("CUDNN_STATUS_BAD_PARAM")

    sample = context.hot_sampler(broken)
    with pytest.raises(RuntimeError, match="BAD_PARAM"):
        sample(4)
    assert sample.mode == "graph"  # type: ignore[attr-defined]
    assert not context.stream.capturing


def test_a_sample_needs_a_launch(fake: Any) -> None:
    context, _ = fake
    for sampler in (context.cold_sampler, context.hot_sampler):
        with pytest.raises(UsageError):
            sampler(plain_launch(context))(0)


def test_workspace_grows_and_keeps_earlier_pointers_valid(fake: Any) -> None:
    context, _ = fake
    assert context.workspace(0) == 0
    first = context.workspace(100)
    assert first and context.workspace(60) == first
    second = context.workspace(1000)
    assert second != first and context._workspace_bytes >= 1000
    assert context.workspace(150) == second  # at least doubled: no new buffer for a bit more
    assert len(context._retired_workspaces) == 1  # the first buffer lives until close()
    with pytest.raises(UsageError):
        context.workspace(-1)


def test_clocks_are_empty_without_nvml_and_a_closed_context_refuses_work(fake: Any) -> None:
    context, _ = fake
    assert context.clocks() == {}
    context.close()
    context.close()  # idempotent
    with pytest.raises(GpuError, match="closed"):
        context.workspace(10)


# -- without a GPU -------------------------------------------------------------------------------


def test_without_a_gpu_a_context_says_what_is_missing(no_gpu: None) -> None:
    with pytest.raises(GpuError) as raised:
        DeviceContext()
    message = str(raised.value)
    assert "\n" not in message and ("CuPy" in message or "CUDA device" in message), message


# -- on a GPU ------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_samplers_time_a_cupy_kernel_on_the_private_stream() -> None:
    import cupy

    with DeviceContext() as context:
        n = 1 << 20
        a, b = context.array((n,), "float32"), context.array((n,), "float32")
        out = context.array((n,), "float32", "zeros")

        def launch() -> None:
            cupy.add(a, b, out=out)

        cold = context.cold_sampler(launch)(5)
        hot = context.hot_sampler(launch)
        times = [cold, hot(8), hot(8), hot(1)]
        assert all(math.isfinite(t) and 0 < t < 0.1 for t in times), times
        assert hot.mode == "graph" and context.hot_mode == "graph", hot.capture_error  # type: ignore[attr-defined]

        # The replays really ran the kernel on these buffers (an empty graph would time nothing).
        with context.stream:
            out.fill(0)
        hot(8)
        context.synchronize()
        assert cupy.allclose(out, a + b)


CHASE_SOURCE = r"""
extern "C" __global__ void chase(const unsigned int* next, unsigned int steps, unsigned int* out) {
    unsigned int i = 0;
    for (unsigned int s = 0; s < steps; ++s) {
        i = next[i];
    }
    *out = i;
}
"""


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["read", "write"])
def test_both_flushes_evict_what_a_kernel_read(mode: str) -> None:
    """One thread follows 4096 dependent loads through 16 MB, a cache line apart: each waits for the
    last, so the kernel's time is the loads' latency. Hot, every line is in the L2; flushed, none is."""
    import cupy

    with DeviceContext(flush=mode) as context:
        assert context.flush.info()["mode"] == mode, context.flush.error
        n = 4 << 20
        with context.stream:
            nxt = (cupy.arange(n, dtype=cupy.uint32) + 1031) % n  # 4124 bytes apart: a new line each step
            out = cupy.zeros((1,), dtype=cupy.uint32)
        kernel = cupy.RawKernel(CHASE_SOURCE, "chase")

        def launch() -> None:
            kernel((1,), (1,), (nxt, numpy.uint32(4096), out), stream=context.stream)

        cold_sample, hot_sample = context.cold_sampler(launch), context.hot_sampler(launch)
        cold = sorted(cold_sample(1) for _ in range(15))[7]
        hot = sorted(hot_sample(4) for _ in range(15))[7]
        assert cold > 1.3 * hot, (cold, hot)


@pytest.mark.gpu
def test_the_gate_keeps_host_time_out_of_a_sample_on_the_gpu() -> None:
    """A launch that spends 2 ms on the host before its kernel: gated, the sample is the kernel's."""
    import time

    import cupy

    with DeviceContext() as context:
        assert context.gating()["gated"], context.gate_error
        x = context.array((1024,), "float32")
        y = context.array((1024,), "float32", "zeros")

        def slow_launch() -> None:
            time.sleep(0.002)
            cupy.multiply(x, 2, out=y)

        cold = context.cold_sampler(slow_launch)
        hot = context.hot_sampler(slow_launch)
        assert cold(3) < 5e-4 and hot(2) < 5e-4  # ungated, each would be about 2 ms
        assert cold.gated.on and hot.gated.on and context.gating()["timeouts"] == 0  # type: ignore[attr-defined]


@pytest.mark.gpu
def test_hot_sampler_falls_back_on_the_gpu_when_a_launch_cannot_be_captured() -> None:
    import cupy

    with DeviceContext() as context:
        x = context.array((1024,), "float32")
        y = context.array((1024,), "float32", "zeros")

        def launch() -> None:
            cupy.multiply(x, 2, out=y)
            context.stream.synchronize()  # cudaStreamSynchronize is illegal while capturing

        sample = context.hot_sampler(launch)
        seconds = sample(4)
        assert math.isfinite(seconds) and seconds > 0
        assert sample.mode == "stream" and context.hot_mode == "stream"  # type: ignore[attr-defined]
        context.synchronize()  # the stream works after the abandoned capture


@pytest.mark.gpu
def test_arrays_hold_what_their_dtype_and_fill_say() -> None:
    import cupy

    with DeviceContext() as context:
        arrays = {dtype: context.array((64, 1000), dtype) for dtype in ("float32", "float16", "float64")}
        bf16 = context.array((64, 1000), "bfloat16")
        ones_bf16 = context.array((3,), "bfloat16", "ones")
        ints = context.array((5,), "int64")
        int_ones = context.array((5,), "int32", "ones")
        empty = context.array((0, 4), "float16")
        context.synchronize()  # filled on the private stream; read back on the default one

        for dtype, values in arrays.items():
            assert values.dtype == cupy.dtype(dtype)
            assert float(values.min()) >= -1.0 and float(values.max()) < 1.0
            assert float(values.std()) > 0.3  # uniform on [-1, 1): std 0.577
        assert bf16.dtype == cupy.uint16
        as_float = (bf16.astype(cupy.uint32) << 16).view(cupy.float32)
        assert float(as_float.min()) >= -1.0 and float(as_float.max()) < 1.0 and float(as_float.std()) > 0.3
        assert ((ones_bf16.astype(cupy.uint32) << 16).view(cupy.float32) == 1.0).all()
        assert ints.dtype == cupy.int64 and not ints.any()
        assert (int_ones == 1).all()
        assert empty.shape == (0, 4)

        assert context.workspace(0) == 0 and context.workspace(1 << 20) != 0
        clocks = context.clocks()
        assert clocks["sm_clock_mhz"] > 0 and isinstance(clocks["throttled"], bool)
        assert isinstance(clocks["clocks_event_reason_names"], list)
