"""This machine's memory, and the rule that keeps a run from exhausting it.

``refusal`` compares what something will hold (a benchmark, a node run to read its shapes)
with ``SystemMemory``: more than the physical memory can never run here; more than is free
right now (``psutil``'s available memory less a reserve for the rest of the machine) must
wait. The estimates themselves are made by whoever knows the shapes (``bench.memory``,
``model.resolve``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import psutil

RESERVE_FRACTION = 0.05  # of physical memory, left to the OS, the store and other processes
RESERVE_MIN_BYTES = 256 << 20
GIB = 1 << 30


def memory_bytes() -> int | None:
    """Physical memory of this machine in bytes, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def gib(n: int) -> str:
    """Bytes as GiB with one decimal, as every message of the guard writes them."""
    return f"{n / GIB:.1f}"


@dataclass(frozen=True, slots=True)
class SystemMemory:
    """The system's memory at one moment: physical (from the fingerprint) and available (psutil)."""

    physical: int | None
    available: int | None

    @property
    def reserve(self) -> int:
        """Memory a benchmark leaves to everything else: 5% of physical memory, at least 256 MiB."""
        return max(RESERVE_MIN_BYTES, int((self.physical or 0) * RESERVE_FRACTION))

    @property
    def free_now(self) -> int | None:
        """What a benchmark may take now: available memory less the reserve (None: unknown)."""
        return None if self.available is None else max(0, self.available - self.reserve)


MemoryReader = Callable[[], SystemMemory]


def system_memory() -> SystemMemory:
    """This machine's memory now."""
    return SystemMemory(memory_bytes(), psutil.virtual_memory().available)


@dataclass(frozen=True, slots=True)
class MemoryRefusal:
    """Why a benchmark is not run: never (it needs more than physical memory) or not now."""

    never: bool
    needed: int
    reason: str


def refusal(needed: int | None, memory: SystemMemory) -> MemoryRefusal | None:
    """None when ``needed`` bytes fit; else whether they never can here, and why, in one line."""
    if needed is None:
        return None
    if memory.physical is not None and needed > memory.physical:
        return MemoryRefusal(True, needed, f"needs ~{gib(needed)} GiB, the system has {gib(memory.physical)} GiB")
    free = memory.free_now
    if free is not None and needed > free:
        of = f" of the system's {gib(memory.physical)} GiB" if memory.physical is not None else ""
        return MemoryRefusal(
            False, needed, f"needs ~{gib(needed)} GiB, {gib(memory.available or 0)} GiB{of} is free now"
        )
    return None
