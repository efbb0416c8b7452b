"""Python's cyclic garbage collector, held off where a collection would cost or break something.

Two places need it: processing a model (hundreds of thousands of objects that live until the
model is done, so each full pass walks every live object again: a fifth of the corpus's
processing time), and a GPU sample whose stream is gated or captured (an object collected
there may free device memory, and a ``cudaFree`` synchronises the device: it waits for the
gate until the gate times out, or breaks the capture). Reference counting still frees what
it can; the cycles left go at the next collection after the section.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collection_paused() -> Iterator[None]:
    """The cyclic collector off inside the block, and back as it was after (off stays off)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
