"""The L2 flush before each cold sample: the layer runs on data that is not cached.

Two ways to evict the L2, both over a buffer of twice its size, outside the timed events:

- ``read`` (the default): a kernel reads the buffer (zeros, written once). The lines it leaves
  are clean, as Nsight Compute's cache control leaves the L2 (it writes back and invalidates
  before each profiled kernel), so the timed kernel evicts them for free. Dirty lines of the
  previous launch are written back during the flush, not during the sample.
- ``write``: a memset of the buffer, as nvbench does. It leaves the L2 full of dirty lines
  that the timed kernel must write back as it evicts them: a memory-bound layer is charged
  for writing back the flush's zeros. On an H100 (2026-11-27) memset-flushed cold medians
  ran 2 to 10 us over ncu's kernel durations, most for the memory-bound layers (batch-32
  BatchNormalization and MaxPool +8.5 us, AlexNet's 151 MB GEMM +10 us); the ncu check
  measures both ways side by side.

The read kernel is built with NVRTC; where it cannot be built the flush is a memset and
``info()`` says why. CuPy is passed in: nothing here imports it.
"""

from __future__ import annotations

from typing import Any

from benanza.errors import GpuError, UsageError, one_line

FLUSH_MODES = ("read", "write")

FLUSH_SOURCE = r"""
extern "C" __global__ void benanza_l2_flush(const int4* data, unsigned long long n, int* sink) {
    int acc = 0;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int4 v = data[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x2545F491) {  // never for the zeroed buffer: it keeps the loads from being dropped
        *sink = acc;
    }
}
"""
BLOCKS_PER_SM = 8
THREADS = 256


class L2Flush:
    """Evicts the L2 of one device: ``flush(stream)`` enqueues the eviction on ``stream``.

    Attributes:
        mode: ``read`` or ``write`` (see the module docstring).
        nbytes: the bytes the flush reads or writes (twice the L2, at least 1 MiB).
        error: why the read kernel could not be built (the flush is a memset then), or None.
    """

    mode: str
    nbytes: int
    error: str | None

    def __init__(self, cupy: Any, l2_bytes: int, sm_count: int, stream: Any, mode: str = "read") -> None:
        import numpy

        _check_mode(mode)
        self._cupy, self._numpy = cupy, numpy
        # Twice the L2, so that a flush evicts every line whatever the replacement policy.
        self.nbytes = max(2 * int(l2_bytes), 1 << 20)
        self._buffer = cupy.cuda.alloc(self.nbytes)
        cupy.cuda.runtime.memsetAsync(int(self._buffer.ptr), 0, self.nbytes, int(stream.ptr))  # the zeros read
        self._grid = (max(1, int(sm_count)) * BLOCKS_PER_SM,)
        self.error = None
        self._kernel: Any = None
        try:
            kernel = cupy.RawKernel(FLUSH_SOURCE, "benanza_l2_flush")
            kernel.compile()  # NVRTC now: a kernel that cannot be built fails here, not in a sample
            self._sink = cupy.cuda.alloc(16)
            self._kernel = kernel
        except Exception as exc:  # NVRTC missing or refusing: the memset still evicts the L2
            self.error = f"{type(exc).__name__}: {one_line(exc)}"
        self.mode = mode if self._kernel is not None else "write"

    def use(self, mode: str) -> None:
        """Flush by ``mode`` from now on.

        Raises:
            UsageError: an unknown mode.
            GpuError: ``read`` where its kernel could not be built.
        """
        _check_mode(mode)
        if mode == "read" and self._kernel is None:
            raise GpuError(f"the reading L2 flush cannot be built here: {self.error}")
        self.mode = mode

    def __call__(self, stream: Any) -> None:
        if self.mode == "read":
            u64 = self._numpy.uint64
            args = (u64(int(self._buffer.ptr)), u64(self.nbytes // 16), u64(int(self._sink.ptr)))
            self._kernel(self._grid, (THREADS,), args, stream=stream)
        else:
            self._cupy.cuda.runtime.memsetAsync(int(self._buffer.ptr), 0, self.nbytes, int(stream.ptr))

    def info(self) -> dict[str, Any]:
        """Provenance of the cold figures: how the L2 was flushed, over how many bytes, and why not by reading."""
        return {"mode": self.mode, "bytes": self.nbytes, "error": self.error}

    def close(self) -> None:
        self._buffer = self._sink = None
        self._kernel = None


def _check_mode(mode: str) -> None:
    if mode not in FLUSH_MODES:
        raise UsageError(f"unknown L2 flush {mode!r}; known: {', '.join(FLUSH_MODES)}")
