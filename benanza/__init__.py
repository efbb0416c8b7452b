"""benanza: lower-bound latencies of deep-learning models from per-layer benchmarks.

The public Python API is the names in ``__all__``; each is imported on first use, so
``import benanza`` stays light (no ONNX Runtime, no Ray) until one is needed::

    import benanza

    model = benanza.process_model("resnet50.onnx", batch=1)        # layers, shapes, keys
    ctx = benanza.open_local("sqlite:///benanza.db")                # this machine, ONNX Runtime
    plans = benanza.plan_models(["resnet50.onnx"], ctx.runtime, [1], granularities=[1, 3])
    benanza.benchmark(ctx, plans, e2e=True)                         # what the database lacks
    for row in benanza.analyze(ctx, plans):                         # LowerBound values
        print(row.model, row.sequential_ms, row.e2e_ms)

    summary = benanza.run_fleet(benanza.default_fleet_config())     # the same on a Ray fleet
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> the module that defines it (and its name there, where the package's own would clash)
_RENAMED = {"benchmark": ("benanza.local", "bench")}  # ``benanza.bench`` is the subpackage
_EXPORTS = {
    "BenanzaError": "benanza.errors",
    "process_model": "benanza.model.process",
    "plan_model": "benanza.bench.generate",
    "HarnessSettings": "benanza.bench.harness",
    "BenchmarkRecord": "benanza.bench.records",
    "open_store": "benanza.store.base",
    "open_local": "benanza.local",
    "plan_models": "benanza.local",
    "analyze": "benanza.local",
    "analyze_stored": "benanza.analysis.stored",
    "LowerBound": "benanza.analysis.lower_bound",
    "FleetConfig": "benanza.config",
    "SystemConfig": "benanza.config",
    "default_fleet_config": "benanza.config",
    "load_fleet_config": "benanza.config",
    "run_fleet": "benanza.fleet.driver",
}

__all__ = ["__version__", *sorted([*_EXPORTS, *_RENAMED])]


def __getattr__(name: str) -> Any:
    module, attribute = _RENAMED.get(name) or (_EXPORTS.get(name), name)
    if module is None:
        raise AttributeError(f"module 'benanza' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS) | set(_RENAMED))
