"""benchmarks/gpu_validation.sh's bookkeeping, on a machine without a GPU: the steps it runs, each
one's exit status in steps.tsv, the deadline that leaves later steps unrun, and the logs' tarball.
(What the steps check needs a GPU: the script is what a session with one runs first.)"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).parent.parent / "benchmarks" / "gpu_validation.sh"


def run(out: Path, *steps: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The script's run into ``out``; its working folder beside ``out`` unless ``GPU_WORK`` names one
    (left to itself it makes one under /tmp that outlives pytest's temporary folders)."""
    env.setdefault("GPU_WORK", str(out.parent / f"{out.name}-work"))
    return subprocess.run(
        ["bash", str(SCRIPT), str(out), *steps],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHON": sys.executable, **env},
    )


def steps(out: Path) -> list[list[str]]:
    return [line.split("\t") for line in (out / "steps.tsv").read_text().splitlines()[1:]]


def test_a_failing_step_is_counted_and_its_log_kept(tmp_path: Path) -> None:
    done = run(tmp_path, "env", "no_such_step")
    assert done.returncode == 2, done.stdout + done.stderr  # env fails without a GPU; the unknown step counts too
    [(name, rc, _)] = steps(tmp_path)
    assert name == "env" and rc != "0"
    assert "unknown step no_such_step" in done.stdout
    with tarfile.open(tmp_path / "logs.tar.gz") as logs:
        env_log = logs.extractfile("logs/env.log").read().decode()
    assert "benanza imports" in env_log  # the package loaded; the GPU stack is what failed
    assert "CuPy is not installed" in env_log or "GpuError" in env_log


def test_the_deadline_leaves_later_steps_unrun(tmp_path: Path) -> None:
    done = run(tmp_path, "env", DEADLINE_S="16")  # 16 s less the 15 s kept to pack the logs: under 5 s
    assert done.returncode == 0, done.stdout + done.stderr
    assert steps(tmp_path) == [["env", "not-run", "0"]]
    assert (tmp_path / "logs.tar.gz").exists()


def test_the_database_in_the_logs_holds_what_a_killed_step_left_in_its_write_ahead_log(tmp_path: Path) -> None:
    """A step killed at its limit leaves its last commits in ``gpu.db-wal``: the copy packed with the
    logs holds them (a copy of ``gpu.db`` alone lost a zoo part's last models on an H200)."""
    import sqlite3

    work = tmp_path / "work"
    work.mkdir()
    writer = (  # commits, then dies without closing: the rows are in the log only
        "import os, sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('PRAGMA journal_mode=WAL'); "
        "c.execute('PRAGMA wal_autocheckpoint=0'); c.execute('CREATE TABLE results (key TEXT)'); "
        "c.executemany('INSERT INTO results VALUES (?)', [(str(i),) for i in range(100)]); c.commit(); os._exit(0)"
    )
    subprocess.run([sys.executable, "-c", writer, str(work / "gpu.db")], check=True)
    assert (work / "gpu.db-wal").stat().st_size > 0
    done = run(tmp_path / "out", "env", GPU_WORK=str(work), DEADLINE_S="16")
    assert done.returncode == 0, done.stdout + done.stderr
    with tarfile.open(tmp_path / "out" / "logs.tar.gz") as logs:
        names = logs.getnames()
        (tmp_path / "packed.db").write_bytes(logs.extractfile("logs/gpu.db").read())
    assert "logs/gpu.db-wal" not in names
    packed = sqlite3.connect(tmp_path / "packed.db")
    assert packed.execute("SELECT count(*) FROM results").fetchall() == [(100,)]
    packed.close()


def test_a_resnet_step_names_its_batch_and_tensor_cores(tmp_path: Path) -> None:
    work = tmp_path / "work"
    done = run(tmp_path / "out", "resnet50_b32_no_tc", "resnet50", GPU_WORK=str(work), RESNET_BATCH="4")
    assert done.returncode == 2, done.stdout + done.stderr  # both fail without a GPU
    first = (work / "logs" / "resnet50_b32_no_tc.log").read_text().splitlines()[0]
    assert "--runtime cudnn --no-tensor-cores --batch 32" in first
    second = (work / "logs" / "resnet50.log").read_text().splitlines()[0]
    assert "--runtime cudnn --tensor-cores --batch 4" in second
    assert f"sqlite:///{work}/gpu.db" in first  # GPU_WORK holds the database a later call adds to


def test_the_corpus_step_runs_each_model_with_the_corpus_s_input_shapes(tmp_path: Path) -> None:
    work = tmp_path / "work"
    done = run(tmp_path / "out", "corpus", GPU_WORK=str(work), CORPUS_MODELS="bert no_such_model")
    assert done.returncode == 1, done.stdout + done.stderr  # one step, failed: no GPU here, and a name unknown
    log = (work / "logs" / "corpus.log").read_text()
    assert "$ benanza bench run corpus/models/bert.onnx --shape input_ids=1x128 --shape attention_mask=1x128" in log
    assert "--runtime cudnn" in log and "no corpus model 'no_such_model'" in log  # counted; the rest went on
    assert "no GPU" in log or "CuPy" in log or "cuda" in log.lower()  # bench run says in one line why it cannot


def _fidelity_module() -> Any:
    """benchmarks/gpu_fidelity.py as a module (it is a script, not a package member)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_fidelity", SCRIPT.parent / "gpu_fidelity.py")
    fidelity = importlib.util.module_from_spec(spec)
    sys.modules["gpu_fidelity"] = fidelity  # its dataclasses look their module up
    try:
        spec.loader.exec_module(fidelity)
    finally:
        del sys.modules["gpu_fidelity"]
    return fidelity


def test_the_zoo_parts_of_several_runs_are_kept_side_by_side(tmp_path: Path) -> None:
    """The whole zoo takes more than one GPU session: each run saves its parts beside the earlier ones."""
    import json

    fidelity = _fidelity_module()
    first = fidelity.zoo_part("float32", True, 1)
    fidelity._save(tmp_path, {"zoo": {first: {"summary": 1}}, "ncu": [1], "settings": {"ncu": {"min_time_s": 0.1}}})
    second = fidelity.zoo_part("float16", True, 32)
    fidelity._save(tmp_path, {"zoo": {second: {"summary": 2}}, "ncu": [2], "settings": {"zoo": {"min_time_s": 0.002}}})
    saved = json.loads((tmp_path / "gpu_fidelity.json").read_text())
    assert saved["zoo"] == {first: {"summary": 1}, second: {"summary": 2}}
    assert saved["ncu"] == [2]  # other checks: the latest run's
    assert saved["settings"] == {"ncu": {"min_time_s": 0.1}, "zoo": {"min_time_s": 0.002}}  # each check's own
    assert first == "float32,tensor_cores=True,batch=1"


def test_a_zoo_part_cut_short_goes_on_where_it_stopped() -> None:
    """A later run of the same part, at the same settings, keeps the models, counts and failures the
    earlier run saved and skips the models it finished; a complete part, or one timed at other settings,
    starts anew."""
    fidelity = _fidelity_module()
    settings = {"min_time_s": 0.002, "max_time_s": 0.05}
    fresh = {"batch": 32, "settings": settings, "complete": False, "summary": {}, "not_ok": [], "models": []}
    cut = {
        **fresh,
        "summary": {"measured": 601, "failed": 1},
        "not_ok": [{"outcome": "failed", "label": "Conv 32x3x224x224"}],
        "models": [{"model": "light_vgg19"}, {"model": "light_resnet50"}],
        "cost": {"seconds": 280.0},
    }
    row, done = fidelity.resumed(fresh, cut)
    assert done == {"light_vgg19", "light_resnet50"}
    assert row["summary"] == cut["summary"] and row["not_ok"] == cut["not_ok"] and row["models"] == cut["models"]
    assert row["resumed_from"] == [{"models": ["light_resnet50", "light_vgg19"], "cost": {"seconds": 280.0}}]
    assert row["complete"] is False and fresh["models"] == []  # the fresh row is not changed in place
    again, _ = fidelity.resumed(fresh, {**row, "cost": {"seconds": 5.0}})  # cut short twice: both runs' costs
    assert [r["cost"] for r in again["resumed_from"]] == [{"seconds": 280.0}, {"seconds": 5.0}]
    assert fidelity.resumed(fresh, {**cut, "complete": True}) == (fresh, set())
    assert fidelity.resumed(fresh, {**cut, "settings": {"min_time_s": 0.01, "max_time_s": 0.05}}) == (fresh, set())
    assert fidelity.resumed(fresh, None) == (fresh, set())


def test_a_zoo_part_says_where_its_seconds_went() -> None:
    """By op type and by phase (the candidates' build, their hot and cold timing), from the records'
    wall seconds and ``stats.extras["cost_s"]``; a record without a cost (a model, a view) adds none."""
    import types

    fidelity = _fidelity_module()

    def record(kind: str, label: str, seconds: float, cost: dict | None) -> types.SimpleNamespace:
        extras = {"cost_s": cost} if cost is not None else {}
        return types.SimpleNamespace(
            kind=kind, label=label, duration_s=seconds, stats=types.SimpleNamespace(extras=extras)
        )

    records = [
        record("group", "Conv+Relu 1x3x224x224", 1.2, {"build": 0.2, "hot": 0.8, "cold": 0.1}),
        record("group", "Conv+Relu 1x64x56x56", 0.8, {"build": 0.1, "hot": 0.5, "cold": 0.1}),
        record("layer", "Relu 1x64x56x56", 0.2, {"build": None, "hot": 0.05, "cold": 0.12}),
        record("layer", "Reshape 1x2048x1x1", 0.0, None),
        record("model", "light_resnet50", 5.0, None),
    ]
    cost = fidelity.zoo_cost(records)
    assert cost["seconds"] == 7.2
    assert cost["phases_s"] == {"build": 0.3, "hot": 1.4, "cold": 0.3}
    assert list(cost["by_op_type"]) == ["model", "Conv+Relu", "Relu", "Reshape"]  # most seconds first
    assert cost["by_op_type"]["Conv+Relu"] == {"records": 2, "seconds_each": 1.0}


def test_the_ncu_rows_state_their_ratio_less_the_method_s_floor() -> None:
    """The empty kernel's excess over ncu (the events' cost) is taken off each layer's cold median, in a
    column beside the plain ratio; the floor row and a row ncu could not time are left as they are."""
    fidelity = _fidelity_module()
    rows = [
        {"floor": True, "benanza_cold_median_us": 3.1, "ncu_median_us": 1.5},
        {"floor": False, "benanza_cold_median_us": 20.6, "ncu_median_us": 19.0},
        {"floor": False, "benanza_cold_median_us": 9.0, "ncu_median_us": None},
    ]
    out = fidelity.less_floor(rows)
    assert out[1]["less_floor_ratio"] == pytest.approx((20.6 - 1.6) / 19.0)
    assert "less_floor_ratio" not in out[0] and "less_floor_ratio" not in out[2]
    assert fidelity.less_floor(rows[1:]) == rows[1:]  # no floor timed: nothing to take off
