"""Nodes benanza cannot benchmark (a while loop, ops of unknown domains): model identity and coverage.

A model's identity covers its whole graph, so a model with a ``Loop`` never takes the
end-to-end result of the model made of its other layers; coverage counts the nodes that are
not layers as missing. An op of an unknown domain (which ONNX Runtime cannot plan) is
reported per node in one line, the model's other layers are planned each alone and
benchmarked, and the rest of the corpus goes on, through ``bench run``, ``run`` and
``fleet run``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_checks import FAST_ENV, fast_flags
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from benanza.analysis.lower_bound import lower_bound
from benanza.bench.generate import model_key, plan_model, specs_for_plan
from benanza.bench.plans import StoredPlan, stored_plans
from benanza.bench.records import MeasurementStats
from benanza.bench.spec import SpecKind
from benanza.bench.stats import describe
from benanza.cli import app
from benanza.runtimes.null import NullRuntime
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU
from benanza.store import Outcome, make_record, open_store

SYSTEM = "unbenchmarked-test-system"
FAST_FLAGS = fast_flags(SYSTEM)
FLOAT = TensorProto.FLOAT
FROB_REASON = "no operator schema for com.example::Frob at opset 1 in ONNX or ONNX Runtime"


def invoke(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args], env=FAST_ENV)


def loop_body(op: str = "Add", trip: int = 3) -> onnx.GraphProto:
    """A while-loop body: adds the captured ``r`` to its carried value while the sum stays below ``trip``.

    Its Loop has no trip count M, and the body's condition reads the data (an early exit): the data decides
    the iterations at run time, so a benchmark could not repeat them and the Loop is not benchmarked. (One
    whose condition counts, ``i < trip``, is a layer: ``control_flow.counted_iterations``.)
    """
    return helper.make_graph(
        [
            helper.make_node(op, ["acc_in", "r"], ["acc_out"]),
            helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
            helper.make_node("Cast", ["total"], ["count"], to=TensorProto.INT64),
            helper.make_node("Constant", [], ["last"], value=numpy_helper.from_array(np.array(trip))),
            helper.make_node("Less", ["count", "last"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", FLOAT, [1, 4]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", FLOAT, [1, 4]),
        ],
    )


@pytest.fixture(scope="module")
def loop_model(build_model):
    """``x -> Relu -> r -> Loop(3 times: acc += r) -> y``: one layer and one control-flow node."""

    def build(trip: int = 3, op: str = "Add", prefix: str = "") -> onnx.ModelProto:
        nodes = [
            helper.make_node("Relu", [f"{prefix}x"], ["r"], name=f"{prefix}relu"),
            helper.make_node("Loop", ["", "go", "r"], [f"{prefix}y"], name=f"{prefix}loop", body=loop_body(op, trip)),
        ]
        return build_model(
            nodes,
            [(f"{prefix}x", FLOAT, [1, 4])],
            [(f"{prefix}y", FLOAT, [1, 4])],
            {"go": np.array(True)},
        )

    return build


@pytest.fixture(scope="module")
def relu_model(build_model) -> onnx.ModelProto:
    """``x -> Relu -> y``: the Loop model's only layer, alone (its key collided with the Loop model's)."""
    return build_model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], [("x", FLOAT, [1, 4])], [("y", FLOAT, None)]
    )


@pytest.fixture(scope="module")
def frob_model(build_model) -> onnx.ModelProto:
    """``x -> Relu -> r``; ``r -> com.example::Frob -> f`` and ``r -> Sigmoid -> s``: two layers, one unknown op."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Frob", ["r"], ["f"], name="frob", domain="com.example"),
        helper.make_node("Sigmoid", ["r"], ["s"], name="sigmoid"),
    ]
    return build_model(
        nodes,
        [("x", FLOAT, [1, 4])],
        [("f", FLOAT, [1, 4]), ("s", FLOAT, None)],
        extra_opsets={"com.example": 1},
        check=False,  # the checker knows no schema of com.example
    )


@pytest.fixture(scope="module")
def model_files(tmp_path_factory, loop_model, relu_model, frob_model, conv_chain) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("unbenchmarked")
    models = {"loop": loop_model(), "relu": relu_model, "frob": frob_model, "chain": conv_chain("reshape")}
    paths = {}
    for name, model in models.items():
        paths[name] = folder / f"{name}.onnx"
        onnx.save(model, paths[name])
    return paths


# -- finding 4: the model's identity is its whole graph ------------------------------------------


def test_a_loop_model_and_its_layers_alone_have_different_keys(loop_model, relu_model, process_proto):
    loop, relu = process_proto(loop_model()), process_proto(relu_model)
    assert loop.graph.layer_keys == relu.graph.layer_keys  # the same benchmarkable layers...
    assert [u.op_type for u in loop.graph.unsupported] == ["Loop"]
    assert model_key(loop.graph) != model_key(relu.graph)  # ...but not the same model


def test_the_model_key_covers_subgraphs_and_constants_but_not_names(loop_model, process_proto):
    key = model_key(process_proto(loop_model()).graph)
    assert model_key(process_proto(loop_model(prefix="renamed_")).graph) == key  # names are not identity
    assert model_key(process_proto(loop_model(trip=4)).graph) != key  # the trip count is
    assert model_key(process_proto(loop_model(op="Mul")).graph) != key  # and so is the body


def test_a_model_with_an_unbenchmarked_node_has_no_lower_bound(loop_model, process_proto):
    plan = plan_model(process_proto(loop_model()), NullRuntime(), (1,))
    results = {}
    for spec in specs_for_plan(plan, "null", {}, e2e=True):
        samples = [1e-3] * 5
        results[spec.key] = make_record(
            spec,
            system="s",
            stack_id="k",
            outcome=Outcome.OK,
            samples=samples,
            stats=MeasurementStats.of(describe(samples)),
            kernel_samples=samples,
            kernel_stats=describe(samples),
        )
    row = lower_bound(plan, results, system="s", stack_id="k", runtime="null", variant="")
    assert row.coverage == 0.5  # Relu measured, Loop not benchmarkable
    assert row.sequential_ms is None and row.parallel_ms is None and row.sequential_unfused_ms is None
    assert row.composed_ms == {1: None}
    assert row.e2e_ms == pytest.approx(1.0)  # the whole model still ran end to end
    (loop,) = [m for m in row.missing if m["op_type"] == "Loop"]
    assert loop["name"] == "loop" and "the body's condition decides the iterations" in loop["reason"]
    # the table's empty bounds say why, and what the units present sum to (a bound of the model all the same)
    (note,) = row.coverage_notes
    assert note.startswith("no bound and no composition: 1 of its 2 nodes has no figure, loop (Loop): ")
    assert f"sum to {row.partial_sequential_ms:.3f} ms of kernel time" in note and row.partial_sequential_ms == 1.0


def test_run_on_a_loop_model_after_its_layer_alone_measures_its_own_end_to_end(model_files, tmp_path):
    uri = f"sqlite:///{tmp_path / 'loop.db'}"
    first = invoke("run", model_files["relu"], "--db", uri, "--granularity", "1", "--format", "json", *FAST_FLAGS)
    assert first.exit_code == 0, first.output
    (relu_row,) = json.loads(first.stdout)
    assert relu_row["coverage"] == 1.0 and relu_row["sequential_ms"] is not None
    assert relu_row["coverage_notes"] == []

    second = invoke("run", model_files["loop"], "--db", uri, "--granularity", "1", "--format", "json", *FAST_FLAGS)
    assert second.exit_code == 0, second.output
    assert "Traceback" not in second.output
    (loop_row,) = json.loads(second.stdout)
    assert loop_row["coverage"] == 0.5, loop_row  # was 100%: the Loop did not count
    assert loop_row["sequential_ms"] is None and loop_row["parallel_ms"] is None
    assert [m["op_type"] for m in loop_row["missing"]] == ["Loop"]
    assert [n.split(",")[0] for n in loop_row["coverage_notes"]] == [
        "no bound and no composition: 1 of its 2 nodes has no figure"
    ]
    assert "the body's condition decides the iterations" in loop_row["missing"][0]["reason"]
    with open_store(uri, create=False) as store:
        e2e = [r for r in store.records(system=SYSTEM, kind=str(SpecKind.MODEL)) if "session" not in r.settings]
    assert len({r.key for r in e2e}) == 2, [r.label for r in e2e]  # each model its own end-to-end record
    assert all(r.outcome == "ok" for r in e2e)
    assert loop_row["e2e_ms"] is not None and loop_row["e2e_ms"] != relu_row["e2e_ms"]
    (warning,) = _warnings(second.stderr)  # said per node, in one line
    assert "loop (Loop) not benchmarked: Loop without a trip count M" in warning


# -- finding 5: an op of an unknown domain ---------------------------------------------------------


def test_an_unknown_op_plans_every_other_layer_alone_and_says_why(frob_model, process_proto):
    plan = plan_model(process_proto(frob_model), OnnxRuntimeCPU(threads=1), (1, 2))
    assert [layer.op_type for layer in plan.graph.layers] == ["Relu", "Sigmoid"]
    assert plan.units == ((0,), (1,))
    assert plan.notes == ()
    (note,) = plan.warnings
    assert "ONNX Runtime" in note and "each layer alone" in note and "com.example:Frob" in note
    assert "\n" not in note
    (stored,) = stored_plans([plan], "onnxruntime", "v")  # the store keeps it a warning
    assert StoredPlan.from_doc(json.loads(json.dumps(stored.to_doc()))).warnings == (note,)
    problems = plan.not_benchmarked
    assert [(p["node"], p["op_type"]) for p in problems] == [("frob", "com.example::Frob")]
    assert FROB_REASON in problems[0]["reason"]


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning: ")]


def _assert_frob_reported(stderr: str) -> None:
    assert "Traceback" not in stderr
    frob = [line for line in _warnings(stderr) if "frob (com.example::Frob) not benchmarked" in line]
    assert len(frob) == 1, stderr  # one line for the one node
    assert frob[0].endswith(FROB_REASON + "; cannot describe it")
    (note,) = [line for line in _warnings(stderr) if "each layer alone" in line]  # the plan without fusion
    assert "frob.onnx" in note


def test_bench_run_goes_on_past_an_unknown_op(model_files, tmp_path):
    uri = f"sqlite:///{tmp_path / 'bench.db'}"
    result = invoke(
        "bench", "run", model_files["frob"], model_files["chain"], "--db", uri, "--e2e", "-f", "json", *FAST_FLAGS
    )
    assert result.exit_code == 0, result.output
    _assert_frob_reported(result.stderr)
    out = json.loads(result.stdout)
    assert out["measured"] > 0
    (problem,) = out["not_benchmarked"]
    assert problem["model"].endswith("frob.onnx") and problem["node"] == "frob"
    with open_store(uri, create=False) as store:
        records = store.records(system=SYSTEM)
    ok_labels = {r.label for r in records if r.outcome == "ok"}
    assert "chain" in ok_labels  # the good model, end to end
    assert any(label.startswith("Relu") for label in ok_labels) and any(lb.startswith("Sigmoid") for lb in ok_labels)
    (frob_e2e,) = [r for r in records if r.label == "frob"]
    assert frob_e2e.outcome == "failed" and "Frob" in frob_e2e.reason and "\n" not in frob_e2e.reason


def test_run_goes_on_past_an_unknown_op_and_its_bound_says_what_is_missing(model_files, tmp_path):
    uri = f"sqlite:///{tmp_path / 'run.db'}"
    result = invoke("run", model_files["frob"], model_files["chain"], "--db", uri, "-f", "json", *FAST_FLAGS)
    assert result.exit_code == 0, result.output
    _assert_frob_reported(result.stderr)
    rows = {row["model"]: row for row in json.loads(result.stdout)}
    assert rows["chain"]["coverage"] == 1.0 and rows["chain"]["sequential_ms"] is not None
    assert rows["chain"]["e2e_ms"] is not None
    frob = rows["frob"]
    assert frob["coverage"] == pytest.approx(2 / 3) and frob["sequential_ms"] is None and frob["e2e_ms"] is None
    # Relu and Sigmoid were measured (the 2/3 covered); of four floats each, their kernel time
    # less the profiler's span of a node that does nothing may round to zero
    assert frob["partial_sequential_ms"] >= 0
    (missing,) = frob["missing"]
    assert missing["name"] == "frob" and FROB_REASON in missing["reason"]


def test_fleet_planning_goes_on_past_an_unknown_op(model_files, tmp_path):
    """The fleet's corpus plan (what ``fleet run`` and ``fleet status`` start with), without Ray."""
    from benanza.config import FleetConfig, SystemConfig
    from benanza.fleet.driver import plan_corpus

    config = FleetConfig(
        systems=[SystemConfig(name="laptop", runtimes=["onnxruntime"])],
        models=[model_files["frob"], model_files["chain"]],
        db=f"sqlite:///{tmp_path / 'plan.db'}",
    )
    corpus = plan_corpus(config)
    assert corpus.models == 2 and corpus.model_errors == []
    (problem,) = corpus.plan_report["not_benchmarked"]
    assert problem["node"] == "frob" and FROB_REASON in problem["reason"]
    (note,) = corpus.plan_report["planning_warnings"]
    assert corpus.plan_report["planning_notes"] == []  # nothing else was decided
    assert note["model"].endswith("frob.onnx") and "each layer alone" in note["note"]
    (work,) = corpus.by_runtime().values()
    labels = {spec.label for spec in work.templates}
    assert any(label.startswith("Conv+BatchNormalization+Relu") for label in labels)  # the good model, fused
    assert any(label.startswith("Sigmoid") for label in labels)  # the other layers of the unknown op's model


@pytest.mark.slow
def test_fleet_run_goes_on_past_an_unknown_op(model_files, tmp_path):
    """The embedded fleet (in-process Ray, this machine, SQLite) in a subprocess, as a user runs it."""
    env = {
        **os.environ,
        "BENANZA_SYSTEM": "laptop",
        "BENANZA_HARNESS_MIN_TIME_S": "0.001",
        "BENANZA_HARNESS_MAX_TIME_S": "0.02",
        "BENANZA_HARNESS_KERNEL_RUNS": "2",
    }
    env.pop("BENANZA_DB", None)
    repo = str(Path(__file__).resolve().parents[1])  # this checkout's benanza, not an installed one
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "benanza", "fleet", "run", "-q", "--format", "json"]
    cmd += ["--models", str(model_files["frob"]), "--models", str(model_files["chain"])]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    _assert_frob_reported(done.stderr)
    out = json.loads(done.stdout)
    assert out["models"] == 2 and out["model_errors"] == []
    (problem,) = out["not_benchmarked"]
    assert problem["node"] == "frob" and FROB_REASON in problem["reason"]
    assert out["measured"] > 0
    with open_store(f"sqlite:///{tmp_path / 'benanza.db'}", create=False) as store:
        ok_labels = {r.label for r in store.records(system="laptop", outcome="ok")}
    assert any(label.startswith("Conv+BatchNormalization+Relu") for label in ok_labels)  # the good model's group
    assert any(label.startswith("Sigmoid") for label in ok_labels)  # the other model's layers


def test_a_coverage_note_says_no_composition_only_where_there_is_none():
    """Only kernel times lacking (a unit measured without profiled runs): the composition still stands."""
    from benanza.analysis.lower_bound import coverage_notes

    missing = [{"name": "conv", "op_type": "Conv", "reason": "its record holds no kernel time"}]
    (with_composition,) = coverage_notes(missing, 3, 0.5, composed=True)
    (without,) = coverage_notes(missing, 3, 0.5)
    assert with_composition.startswith("no bound: 1 of its 3 nodes has no figure, conv (Conv): its record")
    assert without.startswith("no bound and no composition: 1 of its 3 nodes")


def test_a_model_with_many_nodes_not_benchmarked_lists_ten_then_counts_the_rest():
    """A GPT-OSS export whose traced routing failed printed 214 warning lines, one per node; all stay in JSON."""
    from benanza.report.bench import NODES_LISTED, plan_warnings

    report = {
        "not_benchmarked": [
            {"model": m, "node": f"split_{i}", "op_type": "Split", "reason": "Split size 1 exceeds the remaining size"}
            for m, n in (("gptoss", 214), ("small", 2))
            for i in range(n)
        ]
    }
    lines = plan_warnings(report)
    assert sum(line.startswith("gptoss: split_") for line in lines) == NODES_LISTED == 10
    assert sum(line.startswith("small: split_") for line in lines) == 2
    assert "gptoss: and 204 more nodes not benchmarked (each with its reason: JSON's missing" in lines[-1]
    assert len(lines) == 13
