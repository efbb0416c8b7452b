"""The host CPU's caches: their size, and emptying them of a benchmark's data (``bench.cold_weights``).

``evict`` reads up to twice the last-level cache of a buffer kept for it, so that whatever a call
left there (its weights) is replaced as far as that much other data replaces it on this host (a
cache shared with other tenants keeps less than its size). Reading 64 MiB takes 2-3 ms on a
2-core VM. The buffer is allocated once per process, on first use, and kept.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np

CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")
DEFAULT_LLC_BYTES = 32 << 20  # where the host does not say
MAX_EVICT_BYTES = 1 << 30  # the buffer never exceeds this, whatever the host says
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _size_bytes(text: str) -> int | None:
    text = text.strip().upper()
    if not text:
        return None
    unit = _UNITS.get(text[-1], 1)
    digits = text[:-1] if text[-1] in _UNITS else text
    return int(digits) * unit if digits.isdigit() else None


@functools.cache
def last_level_cache_bytes(caches: Path = CPU_CACHES) -> int:
    """The size of the largest data cache of CPU 0 (sysfs), or ``os.sysconf``'s L3, or ``DEFAULT_LLC_BYTES``."""
    sizes = []
    for index in sorted(caches.glob("index*")):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            size = _size_bytes((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if size:
            sizes.append(size)
    if sizes:
        return max(sizes)
    try:
        size = os.sysconf("SC_LEVEL3_CACHE_SIZE")
    except (ValueError, OSError, AttributeError):  # not a name this platform's sysconf knows
        size = 0
    return size if size > 0 else DEFAULT_LLC_BYTES


@functools.cache
def _buffer() -> np.ndarray:
    size = min(2 * last_level_cache_bytes(), MAX_EVICT_BYTES)
    return np.ones(size // 4, np.float32)


def flush_bytes() -> int:
    """What empties the last-level cache: a read of twice its size (at most ``MAX_EVICT_BYTES``)."""
    return _buffer().nbytes


def evict(nbytes: int | None = None) -> None:
    """Read ``nbytes`` of a buffer kept for it (None: ``flush_bytes``, all of it): what was cached before
    and does not fit in the caches beside them is out."""
    buffer = _buffer()
    count = buffer.size if nbytes is None else min(buffer.size, max(1, nbytes // buffer.itemsize))
    buffer[:count].max()


def touch(array: np.ndarray) -> None:
    """Read ``array`` into the caches (a tensor a layer before has just written, in a model)."""
    if array.dtype != object and array.size:
        np.ascontiguousarray(array).reshape(-1).view(np.uint8).max()
