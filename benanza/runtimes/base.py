"""The runtime registry, and the contract every runtime keeps.

A runtime turns a ``BenchmarkSpec`` into a prepared benchmark outside any timed region;
the harness owns all timing. ``supports`` returns ``None`` or the reason the spec is
skipped (stored as an outcome, never dropped). The contract (``Runtime``, ``Prepared``,
``KernelProfiler``, ``Measured``) is declared in ``benanza.bench.contract``, beside the code
that drives it, and exported here for the modules that implement it.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from benanza.bench.contract import KernelProfiler, Measured, Prepared, Runtime
from benanza.errors import RegistryError, UsageError

__all__ = [
    "KernelProfiler",
    "Measured",
    "Prepared",
    "Runtime",
    "get_runtime",
    "register_runtime",
    "runtime_names",
    "runtime_options",
]


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
