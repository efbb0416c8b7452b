"""`benanza bench run`, `benanza analyze lower-bound` and `benanza run` through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_checks import layer_outcome, one_line_error, plant_failure
from typer.testing import CliRunner

from benanza.cli import app
from benanza.store import open_store

SYSTEM = "cli-test-system"
# Keep every benchmark to milliseconds; flags set the times, the environment the rest.
FAST_ENV = {
    "BENANZA_DB": None,
    "BENANZA_SYSTEM": None,
    "BENANZA_HARNESS_WARMUP_RUNS": "1",
    "BENANZA_HARNESS_MIN_SAMPLES": "3",
    "BENANZA_HARNESS_KERNEL_RUNS": "3",
}
FAST_FLAGS = ["--min-time", "0.001", "--max-time", "0.05", "--threads", "1", "--system", SYSTEM]
ANALYZE_FLAGS = ["--granularity", "1,2", "--threads", "1", "--system", SYSTEM]
LOCAL = {"BENANZA_SYSTEM": SYSTEM}  # analysis of this machine: no --system
CONTRACT_FIELDS = (
    "model",
    "system",
    "stack_id",
    "batch_size",
    "sequential_ms",
    "parallel_ms",
    "e2e_ms",
    "composed_ms",
    "coverage",
    "missing",
)


def invoke(*args: str | Path, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, [str(a) for a in args], env={**FAST_ENV, **(env or {})})


def json_of(result):
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory, conv_chain) -> Path:
    path = tmp_path_factory.mktemp("models") / "chain.onnx"
    path.write_bytes(conv_chain("reshape").SerializeToString())
    return path


@pytest.fixture(scope="module")
def benched(tmp_path_factory, model_file):
    """A database benchmarked twice with the same arguments: (uri, first summary, second summary)."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('db') / 'cli.db'}"
    args = ("bench", "run", model_file, "--db", uri, "--granularity", "1,2", "--e2e", "--format", "json", *FAST_FLAGS)
    first = json_of(invoke(*args))
    second = json_of(invoke(*args))
    return uri, first, second


def test_bench_run_reports_counts(benched):
    _, first, _ = benched
    # 5 layers, the fused Conv+BN+Relu, one G=2 sequence, the call overhead, the model end to end at the
    # variant's level (extended) and at ONNX Runtime's default (all)
    assert {k: first[k] for k in ("measured", "reused", "failed", "skipped")} == {
        "measured": 10,
        "reused": 0,
        "failed": 0,
        "skipped": 0,
    }
    assert first["system"] == SYSTEM and first["runtime"] == "onnxruntime"
    assert first["variant"] == "ep=cpu,opt=extended,threads=1"
    assert first["stack_id"]


def test_a_second_run_reuses_everything(benched):
    _, first, second = benched
    assert second["measured"] == 0
    assert second["reused"] == first["measured"]
    assert second["failed"] == second["skipped"] == 0
    assert second["stack_id"] == first["stack_id"]


def test_flags_and_environment_reach_the_harness(benched):
    uri, first, _ = benched
    with open_store(uri, create=False) as store:
        records = store.records(system=SYSTEM, stack_id=first["stack_id"])
    assert len(records) == first["measured"]
    assert first["disturbed"] == sum(r.stats.disturbed for r in records)  # the summary counts what is stored marked
    harness = records[0].settings["harness"]
    assert (harness["min_time_s"], harness["max_time_s"]) == (0.001, 0.05)  # flags
    assert (harness["kernel_runs"], harness["min_samples"]) == (3, 3)  # BENANZA_HARNESS_*
    # the default (interleaved) schedule keeps kernel_runs to twice as many profiled runs, spread over the rounds;
    # a DLBricks sequence takes none (nothing reads its kernel time), nor the model at ORT's default level
    untimed = [r for r in records if r.kind == "sequence" or r.settings.get("session")]
    assert all(3 <= len(r.kernel_samples) < 6 for r in records if r not in untimed)
    assert {r.kind for r in untimed} == {"sequence", "model"} and all(r.kernel_samples == () for r in untimed)
    assert {r.settings["harness"]["schedule"] for r in records} == {"interleaved"}


def test_lower_bound_json_contract(benched, model_file):
    uri, first, _ = benched
    rows = json_of(invoke("analyze", "lower-bound", model_file, "--db", uri, "--format", "json", *ANALYZE_FLAGS))
    assert isinstance(rows, list) and len(rows) == 1
    (row,) = rows
    for field in CONTRACT_FIELDS:
        assert field in row, field
    assert row["model"] == "chain" and row["system"] == SYSTEM and row["stack_id"] == first["stack_id"]
    assert row["batch_size"] == 1
    assert set(row["composed_ms"]) == {"1", "2"}
    assert row["coverage"] == 1.0 and row["missing"] == []
    for value in (row["sequential_ms"], row["parallel_ms"], row["e2e_ms"], *row["composed_ms"].values()):
        assert isinstance(value, float) and value >= 0
    assert row["parallel_ms"] <= row["sequential_ms"] * (1 + 1e-9)


def test_analysis_of_what_was_not_measured_says_so(tmp_path, benched, model_file):
    # analysis reads stored plans only: a database that does not exist is an error, never created
    empty = tmp_path / "empty.db"
    flags = ("--granularity", "1,2", "--threads", "1")
    line = one_line_error(invoke("analyze", "lower-bound", model_file, "--db", f"sqlite:///{empty}", *flags, env=LOCAL))
    assert "no database here" in line and not empty.exists()
    # a model this system never measured: no row, and a warning that says why
    uri, _, _ = benched
    result = invoke("analyze", "lower-bound", "other_model.onnx", "--db", uri, "-f", "json", *flags, env=LOCAL)
    assert result.exit_code == 0 and json.loads(result.stdout) == []
    assert "no stored plan" in result.stderr and "benanza run" in result.stderr


def test_this_machine_and_the_stored_system_agree(benched, model_file):
    # without --system: this machine's current stack and flags; with it: what the store says
    uri, _, _ = benched
    local = ("analyze", "lower-bound", model_file, "--db", uri, "-g", "1,2", "--threads", "1", "-f", "json")
    (mine,) = json_of(invoke(*local, env=LOCAL))
    (stored,) = json_of(
        invoke("analyze", "lower-bound", model_file, "--db", uri, "-g", "1,2", "-f", "json", "--system", SYSTEM)
    )
    assert mine == stored
    assert mine["coverage"] == 1.0 and mine["variant"] == "ep=cpu,opt=extended,threads=1"


def test_unknown_system_lists_the_known_ones(benched, model_file):
    uri, _, _ = benched
    result = invoke("analyze", "lower-bound", model_file, "--db", uri, "--system", "elsewhere", "-f", "json")
    line = one_line_error(result)
    assert "unknown system 'elsewhere'" in line and f"known: {SYSTEM}" in line
    assert result.stdout == ""


def test_lower_bound_plot_writes_pngs(benched, model_file, tmp_path):
    uri, _, _ = benched
    plot = tmp_path / "plots" / "lb.png"
    result = invoke("analyze", "lower-bound", model_file, "--db", uri, "--plot", plot, *ANALYZE_FLAGS)
    assert result.exit_code == 0, result.output
    assert "chain" in result.stdout  # the table
    for png in (plot, plot.with_name("lb_chain_b1_layers.png")):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png


def test_bench_run_table_output(benched, model_file):
    uri, _, _ = benched
    result = invoke("bench", "run", model_file, "--db", uri, "--granularity", "1,2", "--e2e", *FAST_FLAGS)
    assert result.exit_code == 0, result.output
    assert "measured 0, reused 10, failed 0, skipped 0" in result.stdout


def test_run_benchmarks_and_analyzes(model_file, tmp_path):
    uri = f"sqlite:///{tmp_path / 'run.db'}"
    rows = json_of(invoke("run", model_file, "--db", uri, "--granularity", "1,2", "--format", "json", *FAST_FLAGS))
    (row,) = rows
    assert row["coverage"] == 1.0
    assert row["e2e_ms"] is not None and row["sequential_ms"] is not None
    assert set(row["composed_ms"]) == {"1", "2"}


def test_run_measures_a_static_export_at_its_own_batch(tmp_path, build_model):
    """A file fixed at batch 2 whose export folded its batch into a Reshape target (2x4 frames -> 8):
    ``benanza run``'s default batch was 1, which rewrote its input, warned, and left the Reshape failing (a
    TimeSformer export 75% covered, a DPT one 1%); now a model runs at its file's own batch unless --batch says
    otherwise, wholly covered, nothing warned."""
    import numpy as np
    from onnx import TensorProto, helper

    path = tmp_path / "frames.onnx"
    model = build_model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "folded"], ["y"])],
        [("x", TensorProto.FLOAT, [2, 4, 6])],
        [("y", TensorProto.FLOAT, None)],
        initializers={"folded": np.array([8, 6], np.int64)},
    )
    path.write_bytes(model.SerializeToString())
    uri = f"sqlite:///{tmp_path / 'own.db'}"
    result = invoke("run", path, "--db", uri, "--granularity", "1", "--format", "json", *FAST_FLAGS)
    (row,) = json_of(result)
    assert (row["batch_size"], row["coverage"]) == (2, 1.0) and row["e2e_ms"] is not None
    assert "warning" not in result.stderr
    asked = invoke("run", path, "--db", uri, "--batch", "1", "--granularity", "1", "--format", "json", *FAST_FLAGS)
    assert "its file fixes its leading dimension at 2, bound here to 1" in asked.stderr


def test_disturbed_measurements_the_remeasure_budget_declines_stay_marked_and_the_run_says_so(model_file, tmp_path):
    """Every measurement disturbed (a CPU share no process reaches), no budget for re-measures: each is measured
    once, stored marked with why, and the run's note says how many were not measured again."""
    uri = f"sqlite:///{tmp_path / 'budget.db'}"
    env = {
        "BENANZA_HARNESS_MIN_CPU_SHARE": "4",  # a process of one working thread is far from 4 CPUs
        "BENANZA_HARNESS_REMEASURE_SHARE": "0",
        "BENANZA_HARNESS_REMEASURE_RESERVE_S": "0",
    }
    result = invoke("run", model_file, "--db", uri, "--granularity", "1", "--format", "json", *FAST_FLAGS, env=env)
    rows = json_of(result)
    assert rows and rows[0]["coverage"] == 1.0
    with open_store(uri, create=False) as store:
        records = store.records(system=SYSTEM)
    assert records and all(r.stats.disturbed and r.stats.remeasured == 0 for r in records)
    assert all("; not measured again: re-measures had spent 0 s" in r.stats.disturbed_reason for r in records)
    (note,) = [line for line in result.stderr.splitlines() if "were not measured again" in line]
    assert note.startswith("note: ") and ", 0 were: re-measures spent 0 s of the 0 s the run allowed them" in note


def test_a_missing_model_file_is_a_one_line_error(tmp_path):
    missing = tmp_path / "no_such_model.onnx"
    for command in (("bench", "run", missing, *FAST_FLAGS),):
        result = invoke(*command, "--db", f"sqlite:///{tmp_path / 'x.db'}", "--format", "json")
        line = one_line_error(result)
        assert str(missing) in line and "no such file" in line
        assert result.stdout == ""


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--min-time", "1", "--max-time", "0.5"], "min_time_s"),
        (["--granularity", "0"], "--granularity"),
        (["--batch", "x"], "--batch"),
        (["--opt-level", "max"], "optimisation level"),
    ],
)
def test_bad_arguments_are_one_line_errors(model_file, tmp_path, flags, message):
    result = invoke("bench", "run", model_file, "--db", f"sqlite:///{tmp_path / 'x.db'}", *flags)
    assert message in one_line_error(result)


def test_threads_auto_runs_at_the_free_cores_and_says_so(tmp_path, model_file) -> None:
    """``--threads auto``: the threads ``host_cpu.free_cores_once`` chose, in the variant and in a note."""
    from benanza.bench.host_cpu import free_cores_once

    uri = f"sqlite:///{tmp_path / 'auto.db'}"
    flags = ["--min-time", "0.001", "--max-time", "0.05", "--threads", "auto", "--system", SYSTEM]
    result = invoke("bench", "run", model_file, "--db", uri, "--granularity", "1", *flags)
    assert result.exit_code == 0, result.output
    chosen = free_cores_once()
    assert f"threads={chosen.threads})" in result.stdout
    assert f"note: {chosen.note()}" in result.stderr


def test_threads_auto_keeps_the_count_stored_results_use(tmp_path, model_file) -> None:
    """A run at 1 thread, then ``--threads auto``: auto keeps 1 (fewer than the free cores), so it reuses all.

    A count more than the free cores, stored before, is not kept: the run says that it reuses none of it.
    """
    from benanza.bench.host_cpu import free_cores_once, kept_note, unfit_note

    uri = f"sqlite:///{tmp_path / 'kept.db'}"
    flags = ["--min-time", "0.001", "--max-time", "0.05", "--system", SYSTEM, "--granularity", "1"]
    first = invoke("bench", "run", model_file, "--db", uri, *flags, "--threads", "1")
    assert first.exit_code == 0, first.output
    again = invoke("bench", "run", model_file, "--db", uri, *flags, "--threads", "auto")
    assert again.exit_code == 0, again.output
    assert "(ep=cpu,opt=extended,threads=1): measured 0, reused" in again.stdout
    chosen = free_cores_once()
    assert f"note: {kept_note(1, chosen) if chosen.threads > 1 else chosen.note()}" in again.stderr
    # stored only at more threads than are free (the host's cores and one): auto runs at the free count
    over = chosen.cores + 1
    uri = f"sqlite:///{tmp_path / 'over.db'}"
    assert invoke("bench", "run", model_file, "--db", uri, *flags, "--threads", str(over)).exit_code == 0
    fresh = invoke("bench", "run", model_file, "--db", uri, *flags, "--threads", "auto")
    assert fresh.exit_code == 0, fresh.output
    assert f"(ep=cpu,opt=extended,threads={chosen.threads}): measured" in fresh.stdout
    assert ", reused 0," in fresh.stdout
    assert f"note: {unfit_note([over], chosen)}" in fresh.stderr


def test_the_main_job_measures_stored_failures_again_only_when_asked(tmp_path, conv_chain):
    """A failure stored by an earlier version (whose cause was fixed since) is reused until ``--retry-failed``."""
    model = tmp_path / "chain.onnx"
    model.write_bytes(conv_chain("reshape").SerializeToString())
    path = tmp_path / "perf.db"
    run = ["run", str(model), "--db", f"sqlite:///{path}", "-g", "1", "--format", "json", *FAST_FLAGS]
    assert CliRunner().invoke(app, run, env=FAST_ENV).exit_code == 0
    key = plant_failure(path)
    assert CliRunner().invoke(app, run, env=FAST_ENV).exit_code == 0
    assert layer_outcome(path, key) == "failed"  # reused, as every stored result of this stack
    assert CliRunner().invoke(app, [*run, "--retry-failed"], env=FAST_ENV).exit_code == 0
    assert layer_outcome(path, key) == "ok"
