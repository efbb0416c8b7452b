"""The runtime interface and its registry.

A runtime turns a ``BenchmarkSpec`` into a prepared benchmark outside any timed region;
the harness owns all timing. ``supports`` returns ``None`` or the reason the spec is
skipped (stored as an outcome, never dropped).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from benanza.bench.spec import BenchmarkSpec
from benanza.errors import RegistryError, UsageError


@runtime_checkable
class Prepared(Protocol):
    """A benchmark ready to run: ``call`` is what the harness times."""

    def call(self) -> object: ...

    def kernel_times(self, runs: int) -> list[float] | None:
        """Per-run library kernel time in seconds (the runtime's own profiler), or None."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class KernelProfiler(Protocol):
    """Optional (``Prepared.profiler()``): a profiled twin of a prepared benchmark.

    The interleaved schedule runs it once per round beside the timed call, outside the
    timed region, so kernel times cover the same period as the call latencies.
    ``Prepared.profiler(precalls=n)`` makes ``run`` do ``n`` unkept runs before each kept
    one, as the timed samples are preceded by untimed calls.
    """

    def run(self) -> None: ...

    def finish(self) -> list[float]:
        """Kernel time in seconds of every run so far, in order."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Runtime(Protocol):
    name: str

    def supports(self, spec: BenchmarkSpec) -> str | None: ...

    def prepare(self, spec: BenchmarkSpec) -> Prepared: ...

    def stack(self) -> dict[str, Any]:
        """Software-stack fingerprint parts (library versions) this runtime depends on."""
        ...

    def variant(self) -> dict[str, Any]:
        """The settings that distinguish this runtime's measurements (threads, opt level)."""
        ...


RuntimeFactory = Callable[..., Runtime]
_RUNTIMES: dict[str, RuntimeFactory] = {}


def register_runtime(name: str) -> Callable[[RuntimeFactory], RuntimeFactory]:
    def decorate(factory: RuntimeFactory) -> RuntimeFactory:
        _RUNTIMES[name] = factory
        return factory

    return decorate


def runtime_names() -> list[str]:
    _load_builtin()
    return sorted(_RUNTIMES)


def get_runtime(name: str, **options: Any) -> Runtime:
    """A runtime instance by registered name; unknown names list the known ones."""
    _load_builtin()
    try:
        factory = _RUNTIMES[name]
    except KeyError:
        raise RegistryError("runtime", name, list(_RUNTIMES)) from None
    check_options(name, factory, options)
    return factory(**options)


def runtime_options(name: str) -> tuple[str, ...]:
    """The options a runtime takes: its factory's keyword parameters, declared once, there."""
    _load_builtin()
    try:
        factory = _RUNTIMES[name]
    except KeyError:
        raise RegistryError("runtime", name, list(_RUNTIMES)) from None
    return tuple(inspect.signature(factory).parameters)


def check_options(name: str, factory: RuntimeFactory, options: Mapping[str, Any]) -> None:
    """``UsageError`` naming the runtime's options when ``options`` holds one it does not take."""
    try:
        inspect.signature(factory).bind(**options)
    except TypeError:
        takes = list(inspect.signature(factory).parameters)
        unknown = sorted(set(options) - set(takes))
        raise UsageError(
            f"runtime {name!r} takes no option {', '.join(unknown) or sorted(options)}; it takes {', '.join(takes)}"
        ) from None


# The modules that register the runtimes shipped with benanza, imported by name on first use, as
# ``store.base`` does for stores: the registry depends on none of them (each imports this module), and
# the cuda module imports no GPU library until a runtime is made.
_BUILTIN = ("benanza.runtimes.null", "benanza.runtimes.onnxruntime", "benanza.runtimes.cuda.runtime")


def _load_builtin() -> None:
    for module in _BUILTIN:
        importlib.import_module(module)  # registers its runtimes
