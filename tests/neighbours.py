"""A busy neighbour for tests that need real interference: a process spinning on a core.

Started as a bare interpreter (``-S -c``: it imports nothing, so it spins within tens of
milliseconds even on a busy host), it says so on its stdout once pinned, and ``spinning``
returns only then. A competitor started by multiprocessing's spawn imports the test module
first, seconds on a busy host, and a measurement meant to be slowed then ran partly unslowed.
Spinning all the time at the caller's priority, it takes half of a shared core under Linux's
fair scheduler, or a whole free one.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

_SPINNER = (
    "import os, sys\n"
    "if len(sys.argv) > 1:\n"
    "    os.sched_setaffinity(0, {int(sys.argv[1])})\n"
    "print('spinning', flush=True)\n"
    "while True:\n"
    "    pass\n"
)


@contextmanager
def spinning(cpu: int | None = None) -> Iterator[None]:
    """A process spinning (on ``cpu``, else where the OS puts it) while the block runs."""
    args = [] if cpu is None else [str(cpu)]
    neighbour = subprocess.Popen([sys.executable, "-S", "-c", _SPINNER, *args], stdout=subprocess.PIPE, text=True)
    try:
        assert neighbour.stdout is not None and neighbour.stdout.readline().strip() == "spinning"
        yield
    finally:
        neighbour.kill()
        neighbour.wait()
