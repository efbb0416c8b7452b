"""Analysis and the report read the performance database only (issue 15): its stored plans and records.

A small model is measured for real (``benanza run``, ONNX Runtime, one thread, a millisecond
harness) into a temporary SQLite file; then the model file is deleted. ``analyze`` and
``report`` run in a fresh process where ONNX Runtime cannot be imported, as on a laptop
reading a GPU fleet's database: they must give the figures ``run`` printed, and leave the
database file unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_checks import FAST_ENV, fast_flags
from test_store import plan_for
from typer.testing import CliRunner

from benanza.analysis.stored import PlanSelection, analyze_stored
from benanza.bench.records import MeasurementStats
from benanza.bench.stats import describe
from benanza.cli import app
from benanza.store import BenchmarkRecord, Outcome
from benanza.store.sqlite import SqliteStore

REPO = Path(__file__).resolve().parents[1]
SYSTEM = "gpu-box"  # where the results were measured; the analysing process is told nothing else


def _stored(key: str, kind: str, call_ms: float, *, variant: str = "opt=all,threads=1") -> BenchmarkRecord:
    """A stored result of ``key`` on sys-a: its call latency, and half of it inside kernels."""
    calls, kernels = [call_ms / 1e3] * 5, [call_ms / 2e3] * 3
    return BenchmarkRecord(
        system="sys-a",
        stack_id="s1",
        runtime="onnxruntime",
        kind=kind,
        key=key,
        batch_size=1,
        dtype="float32",
        variant=variant,
        spec_id=f"{key}-{variant}",
        label=key,
        outcome=Outcome.OK,
        samples=calls,
        stats=MeasurementStats.of(describe(calls)),
        kernel_samples=kernels,
        kernel_stats=describe(kernels),
    )


def test_plans_of_two_runs_with_other_granularities_are_read_as_one(tmp_path):
    """``tiny`` (Conv -> Relu -> Add as units Conv+Relu and Add) planned once with G = 1 and once with G = 3."""
    with SqliteStore(tmp_path / "perf.db") as store:
        store.register_system("sys-a", {})
        store.register_stack("sys-a", "s1", {"runtime": "onnxruntime"})
        store.put_plans("sys-a", "s1", [plan_for("tiny", grans=(1,)), plan_for("tiny", grans=(3,))])
        layers = [_stored(f"tiny-L{i}", "layer", 1.0 + i) for i in range(3)]
        store.upsert([*layers, _stored("tiny-U0", "group", 2.0), _stored("tiny-S1", "sequence", 5.0)])
        store.upsert([_stored("tiny-S3", "sequence", 4.0), _stored("tiny-model", "model", 4.5)])
        store.upsert([_stored("tiny-U0", "group", 50.0, variant="opt=basic,threads=1")])  # another variant's
        (row,) = analyze_stored(store, ["sys-a"])
        assert row.composed_ms == {1: pytest.approx(5.0), 3: pytest.approx(4.0)}
        assert row.sequential_ms == pytest.approx(1.0 + 1.5)  # kernels of U0 (2 ms call) and L2 (3 ms call)
        assert row.sequential_unfused_ms == pytest.approx(0.5 + 1.0 + 1.5)
        assert row.e2e_ms == pytest.approx(4.5) and row.coverage == 1.0 and row.variant == "opt=all,threads=1"
        (only_3,) = analyze_stored(store, ["sys-a"], selection=PlanSelection.of(granularities=[3, 5]))
        assert only_3.composed_ms == {3: pytest.approx(4.0)}
        assert analyze_stored(store, ["sys-a"], selection=PlanSelection.of(variant={"opt": "basic"})) == []
        assert analyze_stored(store, ["sys-a"], selection=PlanSelection.of(models=["other.onnx"])) == []
        assert len(analyze_stored(store, ["sys-a"], selection=PlanSelection.of(models=["tiny.onnx"]))) == 1


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def no_runtime(tmp_path_factory) -> Path:
    """A folder that, first on ``PYTHONPATH``, makes ``import onnxruntime`` fail."""
    folder = tmp_path_factory.mktemp("blocked")
    (folder / "onnxruntime").mkdir()
    (folder / "onnxruntime" / "__init__.py").write_text('raise ImportError("ONNX Runtime is not installed here")\n')
    return folder


def benanza(*args: str | Path, blocked: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m benanza ARGS`` in a fresh process without ONNX Runtime and without $BENANZA_SYSTEM."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENANZA_")}
    env["PYTHONPATH"] = os.pathsep.join([str(blocked), str(REPO)])
    return subprocess.run(
        [sys.executable, "-m", "benanza", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )


@pytest.fixture(scope="module")
def measured(tmp_path_factory, conv_chain):
    """(database URI, its file, the rows ``benanza run`` printed); the model file is gone."""
    folder = tmp_path_factory.mktemp("measured")
    model = folder / "chain.onnx"
    model.write_bytes(conv_chain("reshape").SerializeToString())
    path = folder / "perf.db"
    uri = f"sqlite:///{path}"
    result = CliRunner().invoke(
        app,
        ["run", str(model), "--db", uri, "--granularity", "1,2", "--format", "json", *fast_flags(SYSTEM)],
        env=FAST_ENV,
    )
    assert result.exit_code == 0, result.output
    model.unlink()
    return uri, path, json.loads(result.stdout)


def test_lower_bounds_need_neither_the_model_file_nor_the_runtime(measured, no_runtime, tmp_path):
    uri, path, printed = measured
    before = _digest(path)
    done = benanza(
        "analyze", "lower-bound", "--db", uri, "--system", SYSTEM, "-f", "json", blocked=no_runtime, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == printed  # the same figures run printed, from the database alone
    (row,) = printed
    assert row["coverage"] == 1.0 and row["sequential_ms"] > 0 and set(row["composed_ms"]) == {"1", "2"}
    # a model named by its file (which is not here) or by its name selects the same row
    for name in ("chain.onnx", "chain"):
        done = benanza(
            "analyze",
            "lower-bound",
            name,
            "--db",
            uri,
            "--system",
            SYSTEM,
            "-f",
            "json",
            blocked=no_runtime,
            cwd=tmp_path,
        )
        assert json.loads(done.stdout) == printed, done.stderr
    assert _digest(path) == before  # analysis never writes


def test_systems_and_optimizations_from_the_database_alone(measured, no_runtime, tmp_path):
    uri, _, _ = measured
    done = benanza("analyze", "systems", "--db", uri, "-f", "json", blocked=no_runtime, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (report,) = json.loads(done.stdout)
    assert report["system"] == SYSTEM
    assert report["coverage"]["models"] == 1 and report["coverage"]["share"] == 1.0
    done = benanza(
        "analyze", "optimizations", "--runtime", "onnxruntime", "--system", SYSTEM, "--db", uri, "-f", "json",
        blocked=no_runtime, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["model"] == "chain" and row["system"] == SYSTEM
    assert row["speedups"]["algorithm_selection"] is None  # ONNX Runtime picks no algorithm: no figure
    # its default runtime is the GPU's, which measured nothing here: the warning names what is stored
    done = benanza("analyze", "optimizations", "--system", SYSTEM, "--db", uri, blocked=no_runtime, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "for runtime cudnn (stored for onnxruntime: pass --runtime onnxruntime)" in done.stderr


def test_the_report_covers_every_stored_model_from_the_database_alone(measured, no_runtime, tmp_path):
    uri, path, _ = measured
    before = _digest(path)
    out = tmp_path / "site"
    done = benanza("report", "--db", uri, "--out", out, "-f", "json", blocked=no_runtime, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (out / "models" / "chain.html").is_file() and (out / f"systems/{SYSTEM}.html").is_file()
    headline = (out / "index.html").read_text()
    assert "chain" in headline and SYSTEM in headline
    assert _digest(path) == before


def test_analysis_and_report_modules_import_no_model_loading_and_no_runtime():
    modules = (
        "benanza.analysis.stored",
        "benanza.analysis.breakdown",
        "benanza.analysis.history",
        "benanza.survey",
        "benanza.report.site",
        "benanza.store.sqlite",
    )
    probe = (
        f"import sys\nfor m in {modules!r}: __import__(m)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('onnx', 'onnxruntime', 'ray') "
        "or m in ('benanza.model.load', 'benanza.model.process', 'benanza.bench.generate', 'benanza.local') "
        "or m.startswith('benanza.runtimes')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.slow
def test_after_a_fleet_run_analysis_needs_neither_the_model_file_nor_the_runtime(conv_chain, no_runtime, tmp_path):
    model = tmp_path / "chain.onnx"
    model.write_bytes(conv_chain("maxpool").SerializeToString())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BENANZA_", "RAY_"))}
    env.update(
        PYTHONPATH=str(REPO),
        BENANZA_SYSTEM="laptop",
        BENANZA_HARNESS_MIN_TIME_S="0.001",
        BENANZA_HARNESS_MAX_TIME_S="0.05",
        BENANZA_HARNESS_KERNEL_RUNS="2",
    )
    run = [sys.executable, "-m", "benanza", "fleet", "run", "--models", str(model), "-q", "--format", "json"]
    done = subprocess.run(run, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (bound,) = json.loads(done.stdout)["lower_bounds"]
    model.unlink()
    uri = f"sqlite:///{tmp_path / 'benanza.db'}"
    done = benanza(
        "analyze", "lower-bound", "--db", uri, "--system", "laptop", "-f", "json", blocked=no_runtime, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [bound] and bound["coverage"] == 1.0
