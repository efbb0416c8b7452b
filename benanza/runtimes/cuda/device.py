"""One GPU for benchmarking: a private stream, buffers, L2 flush and the two samplers.

The library modules (cudnn_legacy, cudnn_graph, cublaslt, framework) build their candidates
against a ``DeviceContext``: arrays and workspace from it, every launch enqueued on its
private stream (``stream`` for CuPy, ``stream_ptr`` for library handles). The runtime times
a candidate's ``launch`` with one of the two samplers, which the harness calls as
``sample(k)`` and reads seconds per launch from:

- cold: CUDA events around each of ``k`` launches, each after an L2 flush (a kernel that reads
  twice the L2 size, outside the events; ``flush``): the layer as it runs on data that is not cached.
- hot: CUDA events around one replay of a CUDA graph of ``k`` back-to-back launches, divided
  by ``k``: no launch overhead, no host gaps, data in L2 as inside a model. A launch that
  cannot be captured (a library call that synchronises or allocates in a way capture
  forbids) is timed as ``k`` plain launches on the stream instead; ``hot_mode`` says which.

Both samplers hold the stream with a gate (``StreamGate``, nvbench's blocking kernel) while they
enqueue a sample: a one-thread kernel spins on a flag in pinned host memory that the host sets
once the start event, the launches and the stop event are all enqueued. Without it the GPU
reaches the start event while the host is still making the library call (a cuDNN call through
ctypes takes tens of microseconds), and the events time the host's call, not the kernel. A
gate that cannot be built (no NVRTC) or that times out (a launch that waits for the GPU while
the stream is held) is left off; ``gating()``, and each record's ``stats.gating``, say so.

GPU settings are never changed (no clock locking, no persistence mode): clocks and throttle
reasons are read from NVML (``clocks``) and stored with the results instead.

CuPy and NVML are imported when a context is made, never at import time.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any

from benanza.collector import collection_paused
from benanza.errors import GpuError, UsageError, one_line
from benanza.runtimes.cuda.flush import L2Flush
from benanza.runtimes.cuda.stack import (
    nvml_device,
    nvml_value,
    open_nvml,
    require_cupy,
    throttle_reason_names,
    throttled,
)

FILLS = ("random", "zeros", "ones")
HOT_MODES = ("graph", "stream")
# A bfloat16 1.0 is the top half of float32 1.0 (0x3F800000).
_BF16_ONE = 0x3F80
# The largest float16 below 1: float32 randoms close to 1 would round up to 1.0 in float16.
_FP16_BELOW_ONE = 1.0 - 2.0**-11


GATE_SOURCE = r"""
extern "C" __global__ void benanza_gate(const volatile long long* flag, long long target,
                                        unsigned long long timeout_ns, volatile long long* timed_out) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    while (*flag < target) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - start > timeout_ns) {
            *timed_out = *timed_out + 1;
            return;
        }
    }
}
"""
# Long enough for any host to enqueue one sample; short enough that a launch which synchronises
# while the stream is held (a deadlock the timeout breaks) costs little before the gate is left off.
GATE_TIMEOUT_S = 0.25
GATE_MAX_TIMEOUTS = 3


class StreamGate:
    """Holds a stream until a sample's work is all enqueued, so that no host time is timed.

    ``held(stream)`` enqueues the gate kernel, waiting for the flag to reach a new ticket, and
    on exit writes the ticket to the flag (pinned host memory the GPU reads through unified
    addressing). ``timeouts()`` reads, after a synchronise, how many gates gave up waiting.
    """

    def __init__(self, cupy: Any, timeout_s: float = GATE_TIMEOUT_S) -> None:
        import numpy

        self._numpy = numpy
        self._pinned = cupy.cuda.alloc_pinned_memory(16)
        self._host = numpy.frombuffer(self._pinned, dtype=numpy.int64, count=2)
        self._host[:] = 0
        # Unified addressing (every 64-bit CUDA platform): pinned host memory is read by kernels
        # through its host pointer (CuPy has no cudaHostGetDevicePointer binding)
        host_ptr = int(self._pinned.ptr)
        self._flag, self._timed_out = numpy.uint64(host_ptr), numpy.uint64(host_ptr + 8)
        self._timeout_ns = numpy.uint64(round(timeout_s * 1e9))
        self._kernel = cupy.RawKernel(GATE_SOURCE, "benanza_gate")
        self._kernel.compile()  # NVRTC now: a gate that cannot be built fails here, not in a sample
        self._ticket = 0
        self._seen_timeouts = 0

    @contextlib.contextmanager
    def held(self, stream: Any) -> Any:
        self._ticket += 1
        ticket = self._ticket
        args = (self._flag, self._numpy.int64(ticket), self._timeout_ns, self._timed_out)
        with collection_paused():  # a free the collector makes here would wait for the gate
            self._kernel((1,), (1,), args, stream=stream)
            try:
                yield
            finally:
                self._host[0] = ticket

    def timeouts(self) -> int:
        """Gates that gave up waiting since the last call (read after the stream is synchronised)."""
        total = int(self._host[1])
        new, self._seen_timeouts = total - self._seen_timeouts, total
        return new

    def close(self) -> None:
        self._host[0] = 1 << 62  # no gate still enqueued waits for a ticket that never comes


class DeviceContext:
    """One CUDA device, one private non-blocking stream, and the buffers of its benchmarks.

    Attributes:
        ordinal: the CUDA device ordinal.
        stream: the private ``cupy.cuda.Stream`` every launch goes on.
        stream_ptr: its ``cudaStream_t`` as an int (for ctypes and library handles).
        l2_bytes: the device's L2 cache size.
        hot_mode: how the latest hot sampler timed its launches: ``"graph"`` (replays of a
            captured CUDA graph) or ``"stream"`` (plain launches: the launch could not be
            captured); None before any hot sample.
        gate_error: why samples are not gated (the gate kernel could not be built), or None.
        flush: the L2 flush of the cold samples (``flush.L2Flush``: its mode, and why not by reading).
    """

    ordinal: int
    stream: Any
    stream_ptr: int
    l2_bytes: int
    hot_mode: str | None
    gate_error: str | None
    flush: L2Flush

    def __init__(self, ordinal: int = 0, flush: str = "read") -> None:
        """Select device ``ordinal``, make the stream, the random generator and the L2 flush (``flush``: its mode).

        Raises:
            GpuError: no CuPy, no CUDA device ``ordinal``, or the device cannot be set up.
        """
        cupy = require_cupy(ordinal)
        self._cupy = cupy
        self.ordinal = ordinal
        self.hot_mode = None
        self._closed = False
        self._nvml: Any = None
        self._nvml_handle: Any = None
        self._nvml_missing = False
        self._workspace: Any = None
        self._workspace_bytes = 0
        self._retired_workspaces: list[Any] = []
        self._cold_events: list[tuple[Any, Any]] = []
        try:
            self._device = cupy.cuda.Device(ordinal)
            self._device.use()
            self.stream = cupy.cuda.Stream(non_blocking=True)
            self.stream_ptr = int(self.stream.ptr)
            properties = cupy.cuda.runtime.getDeviceProperties(ordinal)
            self.l2_bytes = int(properties["l2CacheSize"])
            self.flush = L2Flush(cupy, self.l2_bytes, int(properties["multiProcessorCount"]), self.stream, flush)
            self._hot_events = (cupy.cuda.Event(), cupy.cuda.Event())
            with self.stream:  # the generator's state is initialised by a kernel on the current stream
                self._rng = cupy.random.default_rng(0)
        except (RuntimeError, MemoryError) as exc:  # CUDARuntimeError, OutOfMemoryError
            raise GpuError(f"CUDA device {ordinal} cannot be set up for benchmarking: {one_line(exc)}") from exc
        self.gate: StreamGate | None = None
        self.gate_error = None
        self.gate_timeouts = 0
        try:
            self.gate = StreamGate(cupy)
        except Exception as exc:  # NVRTC missing or refusing: samples are taken ungated, and say so
            self.gate_error = f"{type(exc).__name__}: {one_line(exc)}"

    # -- buffers ---------------------------------------------------------------------------------

    def array(self, shape: tuple[int, ...], dtype: str, fill: str = "random") -> Any:
        """A device array (CuPy) of ``shape``; ``fill``: random (floats in [-1, 1)), zeros or ones.

        ``bfloat16`` arrays are uint16 arrays holding bfloat16 bit patterns. Integer and
        boolean arrays are zeros for ``random``: they are indices and masks, and zero is
        valid for every axis. The values are generated by kernels on the private stream (a
        fixed seed: the same data every run), so they are ready for the launches that follow.
        """
        cupy = self._cupy
        self._check_open()
        if fill not in FILLS:
            raise UsageError(f"unknown fill {fill!r}; known: {', '.join(FILLS)}")
        dims = tuple(int(d) for d in shape)
        if any(d < 0 for d in dims):
            raise UsageError(f"negative dimension in shape {tuple(shape)}")
        with self._device, self.stream:
            if dtype == "bfloat16":
                return self._bfloat16(dims, fill)
            kind = _dtype(dtype)
            if fill == "zeros" or (fill == "random" and kind.kind in "biu"):
                return cupy.zeros(dims, dtype=kind)
            if fill == "ones":
                return cupy.ones(dims, dtype=kind)
            return self._uniform(dims, kind)

    def _uniform(self, dims: tuple[int, ...], kind: Any) -> Any:
        cupy = self._cupy
        if 0 in dims:  # nothing to draw (and no zero-sized launch for the generator to refuse)
            return cupy.empty(dims, dtype=kind)
        generated = cupy.float64 if kind == cupy.float64 else cupy.float32  # what the generator draws
        values = self._rng.random(dims, dtype=generated)
        values *= 2
        values -= 1
        if kind == generated:
            return values
        out = values.astype(kind)
        if kind == cupy.float16:
            cupy.minimum(out, kind.type(_FP16_BELOW_ONE), out=out)
        return out

    def _bfloat16(self, dims: tuple[int, ...], fill: str) -> Any:
        cupy = self._cupy
        if fill == "zeros":
            return cupy.zeros(dims, dtype=cupy.uint16)
        if fill == "ones":
            return cupy.full(dims, _BF16_ONE, dtype=cupy.uint16)
        # Truncating a float32 to its top 16 bits rounds toward zero: values stay in [-1, 1).
        values = self._uniform(dims, cupy.dtype(cupy.float32))
        return cupy.right_shift(values.view(cupy.uint32), cupy.uint32(16)).astype(cupy.uint16)

    def workspace(self, nbytes: int) -> int:
        """A device pointer to at least ``nbytes`` of scratch memory (0 for 0 bytes), owned by the context.

        One buffer serves every candidate; it grows (at least doubling, so it grows rarely).
        A pointer handed out stays valid until ``close()``: candidates built earlier keep it
        in their launch, so a buffer that is outgrown is kept, not freed.
        """
        self._check_open()
        size = int(nbytes)
        if size < 0:
            raise UsageError(f"workspace size must be non-negative, got {nbytes}")
        if size == 0:
            return 0
        if size > self._workspace_bytes:
            cupy = self._cupy
            grown = max(size, 2 * self._workspace_bytes)
            with self._device, self.stream:  # in the pool's arena of the stream that uses it
                try:
                    buffer = cupy.cuda.alloc(grown)
                except MemoryError:  # the doubled size does not fit: the exact one may
                    grown = size
                    buffer = cupy.cuda.alloc(grown)
            if self._workspace is not None:
                self._retired_workspaces.append(self._workspace)
            self._workspace, self._workspace_bytes = buffer, grown
        return int(self._workspace.ptr)

    # -- samplers --------------------------------------------------------------------------------

    def cold_sampler(self, launch: Callable[[], None]) -> Callable[[int], float]:
        """``sample(k)``: seconds per launch over ``k`` launches, each after an L2 flush, CUDA events around each."""
        self._check_open()
        return ColdSampler(self, launch)

    def cupti_sampler(self, launch: Callable[[], None]) -> Callable[[int], float]:
        """``sample(k)``: seconds per launch from CUPTI's kernel records over ``k`` launches, each after an L2
        flush (``cupti_clock.CuptiSampler``: the kernels' own GPU timestamps, no events around them).

        Raises:
            GpuError: CUPTI's Python bindings are missing or refuse to record.
        """
        from benanza.runtimes.cuda.cupti_clock import CuptiSampler

        self._check_open()

        def on_stream(call: Callable[[], None]) -> Callable[[], None]:
            def run() -> None:
                with self._device, self.stream:
                    call()

            return run

        return CuptiSampler(on_stream(launch), on_stream(self._flush_l2), self.synchronize)

    def hot_sampler(self, launch: Callable[[], None]) -> Callable[[int], float]:
        """``sample(k)``: seconds per launch of one replay of a CUDA graph of ``k`` back-to-back launches."""
        self._check_open()
        return HotSampler(self, launch)

    def _flush_l2(self) -> None:
        self.flush(self.stream)

    def _cold_event_pairs(self, runs: int) -> list[tuple[Any, Any]]:
        """``runs`` (start, stop) event pairs, reused between samples (all are read after one sync)."""
        events = self._cold_events
        while len(events) < runs:
            events.append((self._cupy.cuda.Event(), self._cupy.cuda.Event()))
        return events[:runs]

    # -- state -----------------------------------------------------------------------------------

    def synchronize(self) -> None:
        """Wait for everything enqueued on the private stream."""
        self._check_open()
        self.stream.synchronize()

    def clocks(self) -> dict[str, Any]:
        """An NVML snapshot: SM and memory clocks, throttle reasons (bitmask and names), temperature, power.

        Returns {} where NVML is not available: clocks are provenance, never a reason not to
        measure. A value this GPU does not report is None.
        """
        self._check_open()
        pynvml, handle = self._nvml_device()
        if handle is None:
            return {}
        reasons = _clocks_event_reasons(pynvml, handle)
        power_mw = nvml_value(pynvml, pynvml.nvmlDeviceGetPowerUsage, handle)
        return {
            "sm_clock_mhz": nvml_value(pynvml, pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM),
            "memory_clock_mhz": nvml_value(pynvml, pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_MEM),
            "max_sm_clock_mhz": nvml_value(pynvml, pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM),
            "clocks_event_reasons": reasons,
            "clocks_event_reason_names": throttle_reason_names(reasons) if reasons is not None else None,
            "throttled": throttled(reasons) if reasons is not None else None,
            "temperature_c": _temperature(pynvml, handle),
            "power_w": power_mw / 1000.0 if power_mw is not None else None,
        }

    def _nvml_device(self) -> tuple[Any, Any]:
        """NVML and this device's handle, opened once per context; (None, None) without NVML."""
        if self._nvml_handle is None and not self._nvml_missing:
            try:
                pynvml = open_nvml()
            except GpuError:
                self._nvml_missing = True
                return None, None
            try:
                self._nvml_handle = nvml_device(pynvml, self._cupy, self.ordinal)
            except GpuError:
                self._nvml_missing = True
                with contextlib.suppress(pynvml.NVMLError):
                    pynvml.nvmlShutdown()
                return None, None
            self._nvml = pynvml
        return self._nvml, self._nvml_handle

    def gate_timed_out(self, count: int) -> None:
        """``count`` gates of a sampler gave up waiting: after GATE_MAX_TIMEOUTS the gate is left off
        for good (a gate that never opens would otherwise cost every candidate its timeout)."""
        self.gate_timeouts += count
        if self.gate is not None and self.gate_timeouts >= GATE_MAX_TIMEOUTS:
            self.gate.close()
            self.gate = None
            self.gate_error = f"the gate timed out {self.gate_timeouts} times: samples taken ungated since"

    def gating(self) -> dict[str, Any]:
        """How samples are held (provenance): gate on or not, why not, and the gates timed out so far."""
        return {"gated": self.gate is not None, "error": self.gate_error, "timeouts": self.gate_timeouts}

    def close(self) -> None:
        """Wait for the stream, then free the buffers and shut NVML; the context is unusable after."""
        if self._closed:
            return
        self._closed = True
        if self.gate is not None:
            self.gate.close()
        try:
            self.stream.synchronize()
        finally:
            self.flush.close()
            self._workspace = None
            self._retired_workspaces.clear()
            self._cold_events.clear()
            if self._nvml is not None:
                with contextlib.suppress(self._nvml.NVMLError):
                    self._nvml.nvmlShutdown()
                self._nvml = self._nvml_handle = None

    def _check_open(self) -> None:
        if self._closed:
            raise GpuError(f"the context of CUDA device {self.ordinal} is closed")

    def __enter__(self) -> DeviceContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ColdSampler:
    """``sample(k)`` of ``DeviceContext.cold_sampler``: seconds per launch, each launch after an L2 flush.

    Attributes:
        gated: whether its samples are held by the context's gate (``Gated``).
    """

    def __init__(self, context: DeviceContext, launch: Callable[[], None]) -> None:
        self._context = context
        self._launch = launch
        self.gated = Gated(context)

    def __call__(self, k: int) -> float:
        runs = _check_runs(k)
        context = self._context
        events = context._cold_event_pairs(runs)
        stream = context.stream
        with context._device, stream:
            for start, stop in events:
                with self.gated.held(stream):  # each launch alone: the queue never holds many
                    context._flush_l2()
                    start.record(stream)
                    self._launch()
                    stop.record(stream)
        stream.synchronize()
        self.gated.check()
        elapsed_ms = sum(context._cupy.cuda.get_elapsed_time(start, stop) for start, stop in events)
        return elapsed_ms / 1e3 / runs


class HotSampler:
    """``sample(k)`` of ``DeviceContext.hot_sampler``: seconds per launch, from graph replays.

    The launch runs once uncaptured first. A graph of ``k`` launches is captured on the
    private stream the first time ``k`` is asked for, replayed once untimed (the first replay
    uploads the graph), and kept for the later samples of that ``k``. If capture fails, the
    launch is timed as ``k`` plain launches from then on.

    Attributes:
        mode: ``"graph"`` or ``"stream"`` (capture failed).
        capture_error: why capture failed (one line), or None.
    """

    def __init__(self, context: DeviceContext, launch: Callable[[], None]) -> None:
        self._context = context
        self._launch = launch
        self._graphs: dict[int, Any] = {}
        self._ran = False
        self.mode = "graph"
        self.capture_error: str | None = None
        self.gated = Gated(context)

    def __call__(self, k: int) -> float:
        runs = _check_runs(k)
        context = self._context
        context._check_open()
        stream = context.stream
        start, stop = context._hot_events
        graph = self._graph(runs) if self.mode == "graph" else None
        context.hot_mode = self.mode
        # plain launches are not held: many queued behind a gate could fill the launch queue
        hold = self.gated.held(stream) if graph is not None else contextlib.nullcontext()
        with context._device, stream:
            with hold:
                start.record(stream)
                if graph is not None:
                    graph.launch(stream)
                else:
                    for _ in range(runs):
                        self._launch()
                stop.record(stream)
        stop.synchronize()
        self.gated.check()
        return context._cupy.cuda.get_elapsed_time(start, stop) / 1e3 / runs

    def _graph(self, runs: int) -> Any:
        """The graph of ``runs`` launches, captured and warmed on first use; None if capture failed."""
        graph = self._graphs.get(runs)
        if graph is not None:
            return graph
        context = self._context
        stream = context.stream
        with context._device, stream:
            if not self._ran:
                # Once outside capture first: lazy module loading, kernel compilation and a
                # library's first-call setup cannot happen inside a capture, and a launch that
                # fails here fails for its own reasons, not capture's.
                self._launch()
                stream.synchronize()
                self._ran = True
            with collection_paused():  # a free the collector makes inside a capture breaks it
                stream.begin_capture()
                try:
                    for _ in range(runs):
                        self._launch()
                except Exception as exc:  # a call capture forbids fails here, whatever the library
                    _end_abandoned_capture(stream)
                    return self._fall_back(exc)
                try:
                    graph = stream.end_capture()  # also instantiates: invalid captures fail here
                except Exception as exc:
                    _end_abandoned_capture(stream)
                    return self._fall_back(exc)
            graph.launch(stream)
        stream.synchronize()
        self._graphs[runs] = graph
        return graph

    def _fall_back(self, exc: BaseException) -> None:
        self.mode = "stream"
        self.capture_error = f"{type(exc).__name__}: {one_line(exc)}"
        self._graphs.clear()
        return None


class Gated:
    """One sampler's use of its context's gate: on until a gate times out, then off for good.

    Attributes:
        on: whether this sampler's samples are held by the gate.
        timeouts: gates that gave up waiting (the sample they held may include host time).
    """

    def __init__(self, context: DeviceContext) -> None:
        self._context = context
        self.on = context.gate is not None
        self.timeouts = 0

    def held(self, stream: Any) -> Any:
        gate = self._context.gate  # None once the context has left it off
        return gate.held(stream) if self.on and gate is not None else contextlib.nullcontext()

    def check(self) -> None:
        """After a synchronise: a gate that timed out turns gating off for this sampler."""
        gate = self._context.gate
        if self.on and gate is not None and (new := gate.timeouts()):
            self.timeouts += new
            self.on = False
            self._context.gate_timed_out(new)


def _end_abandoned_capture(stream: Any) -> None:
    """End a capture that failed half-way, so that the stream runs work again."""
    with contextlib.suppress(Exception):  # invalidated or already ended: either way it is over
        stream.end_capture()


def _check_runs(k: int) -> int:
    runs = int(k)
    if runs < 1:
        raise UsageError(f"a sample needs at least one launch, got k={k}")
    return runs


def _dtype(name: str) -> Any:
    """The NumPy dtype of a numpy-style name (``float32``, ``int64``, ``bool``) the GPU can hold."""
    import numpy

    try:
        kind = numpy.dtype(name)
    except TypeError as exc:
        raise UsageError(f"unknown dtype {name!r} for a device array") from exc
    if kind.kind not in "fiub":
        raise UsageError(f"dtype {name!r} is not a float, integer or boolean type")
    return kind


def _clocks_event_reasons(pynvml: Any, handle: Any) -> int | None:
    # ...EventReasons since driver 535; ...ThrottleReasons before (deprecated, same bits).
    for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        query = getattr(pynvml, name, None)
        if query is not None:
            value = nvml_value(pynvml, query, handle)
            if value is not None:
                return int(value)
    return None


def _temperature(pynvml: Any, handle: Any) -> int | None:
    # nvmlDeviceGetTemperature is deprecated for nvmlDeviceGetTemperatureV; either may be missing.
    for name in ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"):
        query = getattr(pynvml, name, None)
        if query is not None:
            value = nvml_value(pynvml, query, handle, pynvml.NVML_TEMPERATURE_GPU)
            if value is not None and math.isfinite(value):
                return int(value)
    return None
