"""What the benchmarking layer asks of a runtime: every hook declared here, each with its default.

A runtime (``benanza.runtimes``) subclasses ``Runtime`` and returns ``Prepared`` benchmarks; the
bench layer (``execute``, ``isolation``, ``generate``, ``memory``) and the pipelines call only
the members declared here, never probing for others. A runtime overrides what it has and
inherits the rest, as httpx's transports do with ``BaseTransport``:

- ``Runtime.prepare`` and ``Prepared.call`` are required (they raise ``NotImplementedError``);
- every other hook has a default that means "this runtime has no such thing": no kernel
  profiler, no execution groups, no host-memory estimate, nothing to close, always healthy.

The harness owns timing (``benanza.bench.harness``). A benchmark that must time on a device
(several candidate algorithms, CUDA events) implements ``Prepared.measure`` with the harness's
``measure_device``, which owns the loop and the stopping rule; it returns ``Measured``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import onnx

    from benanza.bench.harness import HarnessSettings
    from benanza.bench.records import MeasurementStats
    from benanza.bench.spec import BenchmarkSpec
    from benanza.model.graph import ModelGraph

_NOTHING: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Measured:
    """What a benchmark that times itself on a device (``Prepared.measure``) returns."""

    samples: tuple[float, ...]
    stats: MeasurementStats
    kernel_samples: tuple[float, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)


class KernelProfiler:
    """A profiled twin of a prepared benchmark (``Prepared.profiler``).

    The interleaved schedule runs it once per round beside the timed call, outside the timed
    region, so kernel times cover the same period as the call latencies.
    """

    __slots__ = ()
    #: per kept run, its whole duration inside the profiled session (empty: not known)
    run_times: Sequence[float] = ()
    #: per kept run, seconds of kernels the runtime inserted only because the benchmark runs
    #: alone, left out of its kernel time (empty: none)
    left_out: Sequence[float] = ()
    #: what ``left_out`` is, for the record's provenance
    left_out_what: str = ""
    #: seconds the profiler gives a node that does nothing, already taken out of each node's
    #: kernel time and of ``run_times`` (0: none taken out)
    node_floor_s: float = 0.0

    def run(self) -> None:
        """One profiled run (and the unkept runs asked for before it)."""
        raise NotImplementedError

    def finish(self) -> list[float]:
        """Kernel time in seconds of every kept run so far, in order."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the profiling session."""


class Prepared:
    """A benchmark ready to run, built outside any timed region: ``call`` is what the harness times."""

    __slots__ = ()
    #: what ran it where the runtime chose among frameworks (stored in the record's settings)
    provenance: Mapping[str, Any] = _NOTHING
    #: per run of the latest ``kernel_times``, its whole duration in the profiled session
    profiled_run_times: Sequence[float] = ()
    #: per run of the latest ``kernel_times``, what it left out (``KernelProfiler.left_out``)
    profiled_left_out: Sequence[float] = ()
    left_out_what: str = ""
    #: ``KernelProfiler.node_floor_s`` of the latest ``kernel_times``
    profiled_node_floor_s: float = 0.0

    def call(self) -> object:
        raise NotImplementedError

    #: whether ``evict_weights`` can push this benchmark's weights out of the host's caches (False: the runtime cannot)
    evicts: bool = False

    def evict_weights(self, nbytes: int) -> None:
        """Leave the caches as a model leaves them for a layer that streams its weights
        (``bench.cold_weights``): ``nbytes`` of other data read (what the rest of the model reads
        between two runs of the layer), its inputs read back in. Untimed, before a timed call."""

    def kernel_times(self, runs: int, evict_bytes: int = 0) -> list[float] | None:
        """Per-run library kernel time in seconds from the runtime's own profiler; None: no profiler.
        ``evict_bytes``: each run after ``evict_weights(evict_bytes)`` (0: none)."""
        return None

    def profiler(self, precalls: int = 0, evict_bytes: int = 0) -> KernelProfiler | None:
        """A profiled twin for the interleaved schedule (``precalls`` unkept runs before each kept one,
        the kept one after ``evict_weights(evict_bytes)``, 0: none); None: none."""
        return None

    def measure(self, settings: HarnessSettings) -> Measured | None:
        """Time on a device through ``harness.measure_device``; None: the harness times ``call`` on the host."""
        return None

    def close(self) -> None:
        """Release what ``prepare`` built."""


class Runtime:
    """Turns a ``BenchmarkSpec`` into a ``Prepared`` benchmark; registered by name in ``benanza.runtimes.base``."""

    name: ClassVar[str] = ""
    #: whether the interleaved schedule may sample this runtime's benchmarks in rounds
    interleaves: bool = True
    #: whether its benchmarks run in a replaceable child process (``isolation``): a crash loses one spec
    isolated: bool = False

    def supports(self, spec: BenchmarkSpec) -> str | None:
        """None, or why ``spec`` is skipped on this runtime (stored as the outcome's reason)."""
        return None

    def prepare(self, spec: BenchmarkSpec) -> Prepared:
        raise NotImplementedError

    def stack(self) -> dict[str, Any]:
        """Software-stack fingerprint parts (library versions) this runtime depends on."""
        return {}

    def runtime_defaults(self) -> str | None:
        """What the runtime does by default that this variant's sessions do not (a phrase), or None where
        they run as its defaults. Where they differ, each model is also measured end to end at the
        defaults (``spec.runtime_defaults_key``), beside its figures at this variant."""
        return None

    def runs_exported(self) -> bool:
        """Whether it measures a model end to end as its file is too (``BenchmarkSpec.as_exported``), where
        the file leaves input dimensions free: beside the model bound (``e2e_ms``), what a user who opens the
        file as it is pays for its shape computations on every call."""
        return False

    def variant(self) -> dict[str, Any]:
        """The settings that distinguish this runtime's measurements (threads, opt level)."""
        return {}

    def system(self) -> dict[str, Any]:
        """The device it drives, as ``gpu_*`` fingerprint keys; empty for a host runtime."""
        return {}

    def notes(self) -> tuple[str, ...]:
        """What it decided when it was built that a run's output should say (the threads ``auto`` chose)."""
        return ()

    def execution_groups(self, graph: ModelGraph, proto: onnx.ModelProto) -> list[list[int]] | None:
        """The model's layers grouped as the runtime executes them (fused units); None: each layer alone.

        Raises:
            PlanningError: the runtime cannot build the model's optimized graph.
        """
        return None

    def host_memory_bytes(self, spec: BenchmarkSpec) -> int | None:
        """Host memory one prepared benchmark of ``spec`` holds; None: not on the host, or not known."""
        return None

    def cpu_threads(self) -> int | None:
        """The host CPU threads one call of its benchmarks runs; None: not known, or not on the host's CPUs.

        The harness's interference check compares them with the cores the other processes of the
        host leave free (``HarnessSettings.max_other_cores``).
        """
        return None

    def factory(self) -> Callable[[], Runtime]:
        """A picklable callable that builds an equal runtime in another process (needed when ``isolated``)."""
        raise NotImplementedError(f"runtime {self.name!r} cannot be rebuilt in another process")

    def healthy(self) -> bool:
        """Whether it can go on after a failed benchmark (a sticky device error says no)."""
        return True

    def close(self) -> None:
        """Release what the runtime holds (device contexts, worker processes)."""
