"""Who had the CPU while a benchmark sampled: this process, and every other process of the host.

A benchmark whose calls run ``threads`` threads needs that many cores. When other processes
use more than the cores those threads leave free, they compete with it, and a composition of
parts measured alone against a whole measured alone stops holding (on a 2-core VM at 2
threads, beside a process burning one core in on/off bursts, the zoo's layers summed to
1.14-1.30x their end to end, while the CPU pressure the kernel reports, ``/proc/pressure/cpu``,
stayed at zero for 99.9% of the samples: the slowdown is not a queue the guest can see). What
can be seen is the CPU time: the host's busy time from ``/proc/stat`` (all CPUs; ``steal``, the
time a hypervisor gave a virtual CPU to another machine, counted as busy) less this process's
own CPU time is what the other processes used.

``mark`` takes a reading; ``since`` turns two readings into a ``CpuUse``. Where ``/proc/stat``
cannot be read (not Linux), ``others`` is None and only this process's share is known.

``free_cores`` reads the other processes' CPU use over a short window before benchmarking and
says how many threads leave them their cores (``threads = "auto"``, the main job's default):
beside a neighbour burning one of 2 cores in 0.3 s bursts, the zoo's layers composed within
2.0% of their end to end at one thread per session, and within 12.3% at two.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from benanza.crashes import decided
from benanza.settings import HarnessSettings

PROC_STAT = Path("/proc/stat")
# /proc/stat's first line: cpu user nice system idle iowait irq softirq steal guest guest_nice
# (guest time is already in user); busy = all but idle and iowait
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


def _ticks_per_s() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, ValueError, OSError):
        return 100


TICKS_PER_S = _ticks_per_s()


def host_busy_s(stat: Path = PROC_STAT) -> float | None:
    """Every CPU's busy time since boot, in seconds; None where ``/proc/stat`` cannot be read."""
    try:
        with stat.open("rb") as f:
            line = f.readline().split()
    except OSError:
        return None
    if len(line) < 9 or line[0] != b"cpu":
        return None
    try:
        values = [int(line[1 + i]) for i in _BUSY_FIELDS]
    except ValueError:
        return None
    return sum(values) / TICKS_PER_S


@dataclass(frozen=True, slots=True)
class CpuMark:
    """One reading: the wall clock, this process's CPU time, and the host's busy time."""

    wall_ns: int
    process_ns: int
    host_busy_s: float | None


@dataclass(frozen=True, slots=True)
class CpuUse:
    """CPU use between two readings, over their wall time."""

    share: float | None  # this process's CPU time over wall time (1.0: one core the whole time)
    others: float | None  # the other processes' CPU time over wall time, in cores (None: not known)


def mark() -> CpuMark:
    return CpuMark(time.perf_counter_ns(), time.process_time_ns(), host_busy_s())


def since(start: CpuMark) -> CpuUse:
    end = mark()
    wall = end.wall_ns - start.wall_ns
    if wall <= 0:
        return CpuUse(None, None)
    mine_s = (end.process_ns - start.process_ns) / 1e9
    share = mine_s * 1e9 / wall
    if start.host_busy_s is None or end.host_busy_s is None:
        return CpuUse(share, None)
    # the host's ticks and this process's precise time disagree by a tick or so: never below zero
    others = max((end.host_busy_s - start.host_busy_s) - mine_s, 0.0) * 1e9 / wall
    return CpuUse(share, others)


def host_cores() -> int:
    """The CPUs ``/proc/stat`` counts (all of the host's, not only this process's affinity)."""
    return max(os.cpu_count() or 1, 1)


AUTO = "auto"  # the threads option's value that asks for ``free_cores``


def is_threads_setting(value: object) -> bool:
    """Whether ``value`` is a thread setting: a positive integer (not a bool) or ``AUTO``."""
    return value == AUTO or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)


FREE_CORES_WINDOW_S = 0.5  # long enough to see a neighbour's bursts of a few hundred milliseconds
# other processes' use, in cores, tolerated beside the threads: the harness's ``max_other_cores`` default,
# so that the threads chosen are those its interference check accepts
FREE_CORES_TOLERANCE: float = HarnessSettings.model_fields["max_other_cores"].default


def threads_left(cores: int, others: float, tolerance: float = FREE_CORES_TOLERANCE) -> int:
    """The most threads (at least one) that leave ``others`` cores to the other processes, within ``tolerance``.

    The harness flags a measurement whose other processes used more than ``cores - threads +
    tolerance`` cores; the largest ``threads`` it accepts is ``floor(cores + tolerance - others)``.
    """
    return max(1, min(cores, math.floor(cores + tolerance - others + 1e-9)))


@dataclass(frozen=True, slots=True)
class FreeCores:
    """What ``free_cores`` saw: the host's cores, the others' use, and the threads it leaves."""

    cores: int
    others: float | None  # other processes' CPU use over the window, in cores (None: cannot be read here)
    threads: int
    window_s: float

    def note(self) -> str:
        """One line for a run's output: the threads chosen and why."""
        if self.others is None:
            return f"threads {self.threads} (auto: every core; other processes' CPU use cannot be read here)"
        return (
            f"threads {self.threads} of {self.cores} cores (auto: other processes used {self.others:.2f} cores "
            f"over {self.window_s:g} s before it started; set threads to fix the count)"
        )


def kept_threads(free: int, stored: Iterable[int]) -> int | None:
    """The thread count ``threads = "auto"`` keeps: the most among ``stored`` that ``free`` allows; None: none does.

    ``stored``: the counts a system's stored results of the same stack and variant use. A run at
    another count is another variant that reuses nothing, so auto takes a stored count whenever it
    leaves the other processes their cores (fewer threads than are free always do).
    """
    return max((s for s in stored if 1 <= s <= free), default=None)


def kept_note(threads: int, free: FreeCores) -> str:
    """The run's note when auto kept a stored count below the free cores (``kept_threads``)."""
    seen = f"other processes used {free.others:.2f} cores over {free.window_s:g} s, " if free.others is not None else ""
    return (
        f"threads {threads} of {free.cores} cores (auto: the count this system's stored results use, so that they "
        f"are reused; {seen}{free.threads} would be free; set threads to fix the count)"
    )


def unfit_note(stored: Iterable[int], free: FreeCores) -> str:
    """The run's note when every count stored is more than the free cores allow: nothing stored is reused."""
    counts = ", ".join(str(s) for s in sorted(set(stored)))
    return (
        f"{free.note()}; this system's stored results use threads {counts}, more than are free now: "
        "this run's results are another variant and reuse none of them"
    )


def free_cores(window_s: float = FREE_CORES_WINDOW_S, tolerance: float = FREE_CORES_TOLERANCE) -> FreeCores:
    """The other processes' CPU use over ``window_s`` (this process sleeps) and the threads it leaves free."""
    cores = host_cores()
    start = mark()
    time.sleep(window_s)
    use = since(start)
    if use.others is None:
        return FreeCores(cores, None, cores, window_s)
    return FreeCores(cores, use.others, threads_left(cores, use.others, tolerance), window_s)


@functools.cache
def free_cores_once() -> FreeCores:
    """``free_cores``, read once per command: every runtime a process builds runs the same threads, so its
    records stay one variant however the load moves during the run; a run of the command after a crash
    (``benanza.crashes``) takes the first run's, whose records it reuses."""
    return FreeCores(**decided("free cores", lambda: dataclasses.asdict(free_cores())))
