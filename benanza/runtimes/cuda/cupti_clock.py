"""Kernel durations from CUPTI's activity records: the GPU's own start and end of each kernel.

The cold sampler (``device.ColdSampler``) reads CUDA events recorded around one launch. On an H200
(2026-11-29) that was 1.6 to 2.1 us a launch over Nsight Compute's ``gpu__time_duration`` of the
same kernels whatever the kernel, the empty kernel's own excess: the events' cost, which no flush
or gate removes, and most of a kernel of a few microseconds. CUPTI's activity API
(``CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL``) reports each kernel's start and end from the GPU's
timestamps, as ncu and Benanza's own measurements (which used CUPTI) read them.

``CuptiSampler`` has the samplers' contract (``sample(k)``: seconds per launch): ``k`` launches,
each after an L2 flush and alone on the stream (the flush's kernel is outside its window), each
launch's kernels summed (a candidate may launch several). It is measured beside the cold sampler
by ``benchmarks/gpu_fidelity.py`` (the ncu check), not used for stored records yet: it has not run
on a GPU.

``cupti-python`` (NVIDIA's bindings, matching the CUDA major version) is imported when a sampler is
made, never at import time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from benanza.errors import GpuError, one_line

# the activity buffers CUPTI asks for (bytes); 0 records: as many as fit
_BUFFER_BYTES = 8 << 20


def cupti_missing() -> str | None:
    """Why CUPTI's Python bindings cannot be used here (None: they can)."""
    try:
        from cupti import cupti  # noqa: F401
    except Exception as exc:  # ImportError, or the library the bindings load is missing
        return f"cupti-python is not usable: {one_line(exc)} (pip install cupti-python)"
    return None


def window_sums(spans: Sequence[tuple[int, int]], windows: Sequence[tuple[int, int]]) -> list[float | None]:
    """Seconds of kernel time in each window: the summed ``end - start`` (ns) of the kernel spans that start
    inside it (``t0 <= start <= t1``); None for a window that holds none (its launch ran no kernel CUPTI saw).

    Windows do not overlap (one launch at a time, synchronised), so each span is counted once.
    """
    out: list[float | None] = []
    for t0, t1 in windows:
        inside = [end - start for start, end in spans if t0 <= start <= t1]
        out.append(sum(inside) * 1e-9 if inside else None)
    return out


class _KernelRecorder:
    """The process's CUPTI activity subscription: every kernel's (start, end), collected as buffers complete.

    CUPTI takes one pair of buffer callbacks per process, so there is one recorder (``recorder``).
    """

    def __init__(self) -> None:
        from cupti import cupti

        self._cupti = cupti
        self._lock = threading.Lock()
        self._spans: list[tuple[int, int]] = []
        kernel = cupti.ActivityKind.CONCURRENT_KERNEL

        def requested() -> tuple[int, int]:
            return _BUFFER_BYTES, 0

        def completed(activities: list) -> None:
            found = [(a.start, a.end) for a in activities if a.kind == kernel]
            with self._lock:
                self._spans.extend(found)

        cupti.activity_register_callbacks(requested, completed)
        self._kind = kernel

    def start(self) -> None:
        """Record kernels from now on (off between samples: what else the process times is not traced)."""
        self._cupti.activity_enable(self._kind)

    def stop(self) -> None:
        self._cupti.activity_disable(self._kind)

    def now(self) -> int:
        """CUPTI's timestamp (ns), in the domain of its activity records."""
        return int(self._cupti.get_timestamp())

    def take(self) -> list[tuple[int, int]]:
        """Every kernel span recorded so far (its buffers flushed first), and forget them."""
        self._cupti.activity_flush_all(1)  # forced: buffers not yet full are completed too, in this call
        with self._lock:
            spans, self._spans = self._spans, []
        return spans


# one sample at a time in a process (the subscription, and what it records, is the process's), and one subscription
_SAMPLING = threading.Lock()
_SUBSCRIBING = threading.Lock()
_RECORDER: _KernelRecorder | None = None


def recorder() -> _KernelRecorder:
    """The process's kernel recorder, subscribed on first use (once, whichever thread asks first).

    Raises:
        GpuError: CUPTI's bindings are missing or refuse the subscription.
    """
    global _RECORDER
    with _SUBSCRIBING:
        if _RECORDER is None:
            missing = cupti_missing()
            if missing:
                raise GpuError(missing)
            try:
                _RECORDER = _KernelRecorder()
            except Exception as exc:  # cuptiError: another profiler holds the subscription, an old driver
                raise GpuError(f"CUPTI refused to record kernels: {one_line(exc)}") from None
        return _RECORDER


class CuptiSampler:
    """``sample(k)``: seconds per launch from CUPTI's kernel records, each launch after an L2 flush.

    ``flush`` enqueues the flush, ``launch`` the candidate, ``synchronize`` waits for the stream: the
    flush is finished before a launch's window opens, so its kernel is never counted.
    """

    def __init__(self, launch: Callable[[], None], flush: Callable[[], None], synchronize: Callable[[], None]) -> None:
        self._launch, self._flush, self._synchronize = launch, flush, synchronize
        self._recorder = recorder()

    def __call__(self, k: int) -> float:
        if k < 1:
            raise ValueError(f"a sample takes at least one launch, not {k}")
        rec = self._recorder
        with _SAMPLING:
            try:
                rec.take()  # what earlier samples left
                windows = []
                rec.start()
                try:
                    for _ in range(k):
                        self._flush()
                        self._synchronize()
                        start = rec.now()
                        self._launch()
                        self._synchronize()
                        windows.append((start, rec.now()))
                finally:
                    rec.stop()
                spans = rec.take()
            except GpuError:
                raise
            except Exception as exc:  # cuptiError, or the launch's own CUDA error
                raise GpuError(f"a CUPTI-timed sample failed: {one_line(exc)}") from None
        sums = window_sums(spans, windows)
        if any(s is None for s in sums):
            raise GpuError(f"CUPTI recorded no kernel for {sums.count(None)} of {k} launches")
        return sum(s for s in sums if s is not None) / k
