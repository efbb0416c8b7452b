"""The public Python API: ``benanza.__all__``, guarded, light to import, and working as its docstring shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import benanza

PUBLIC = [
    "BenanzaError",
    "BenchmarkRecord",
    "FleetConfig",
    "HarnessSettings",
    "LowerBound",
    "SystemConfig",
    "__version__",
    "analyze",
    "analyze_stored",
    "benchmark",
    "default_fleet_config",
    "load_fleet_config",
    "open_local",
    "open_store",
    "plan_model",
    "plan_models",
    "process_model",
    "run_fleet",
]


def test_the_exported_names_are_the_public_api() -> None:
    """A change here is a change of the public API: deliberate, and in the changelog."""
    assert sorted(benanza.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(benanza, name) is not None, name
    assert set(PUBLIC) <= set(dir(benanza))


def test_importing_benanza_imports_no_runtime_or_fleet() -> None:
    heavy = "('onnxruntime', 'ray', 'onnx', 'matplotlib')"
    code = f"import sys, benanza; print(sorted(m for m in {heavy} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_an_unknown_name_is_an_attribute_error() -> None:
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        benanza.nope  # noqa: B018


def test_the_docstring_example_runs(tmp_path: Path, zoo_path) -> None:
    """The module docstring's single-machine example, on a zoo model with a fast harness."""
    model = zoo_path("squeezenet")
    fast = benanza.HarnessSettings(warmup_runs=1, min_samples=3, min_time_s=0.001, max_time_s=0.05, kernel_runs=2)
    ctx = benanza.open_local(f"sqlite:///{tmp_path / 'api.db'}", settings=fast, system="api-box")
    try:
        assert benanza.process_model(model, batch=1).graph.layers
        plans = benanza.plan_models([model], ctx.runtime, [1], granularities=[1, 3])
        summary = benanza.benchmark(ctx, plans, e2e=True)
        assert summary.measured > 0 and summary.failed == 0
        (row,) = benanza.analyze(ctx, plans)
    finally:
        ctx.close()
    assert isinstance(row, benanza.LowerBound) and row.coverage == 1.0
    assert row.sequential_ms > 0 and row.e2e_ms > 0
