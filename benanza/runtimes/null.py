"""The null runtime: runs nothing, so its timings are the harness's own overhead.

It supports every spec and needs no libraries; it is the baseline that real runtimes'
per-call times are read against, and a runtime for testing the pipeline end to end.
"""

from __future__ import annotations

from typing import Any

from benanza.bench.spec import BenchmarkSpec
from benanza.runtimes.base import Prepared, Runtime, register_runtime


class NullPrepared(Prepared):
    """A prepared benchmark whose call does nothing."""

    __slots__ = ()

    def call(self) -> None:
        return None

    def kernel_times(self, runs: int, evict_bytes: int = 0) -> list[float] | None:
        return None

    def close(self) -> None:
        return None


@register_runtime("null")
class NullRuntime(Runtime):
    """Supports every spec; ``prepare`` returns a do-nothing call."""

    name = "null"

    def supports(self, spec: BenchmarkSpec) -> str | None:
        return None

    def prepare(self, spec: BenchmarkSpec) -> NullPrepared:
        return NullPrepared()

    def stack(self) -> dict[str, Any]:
        return {"null": "1"}

    def variant(self) -> dict[str, Any]:
        return {}
