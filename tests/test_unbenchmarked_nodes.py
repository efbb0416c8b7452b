"""Nodes benanza cannot benchmark (control flow, ops of unknown domains): model identity and coverage.

A model's identity covers its whole graph, so a model with a ``Loop`` never takes the
end-to-end result of the model made of its other layers; coverage counts the nodes that are
not layers as missing. An op of an unknown domain (which ONNX Runtime cannot plan) is
reported per node in one line, the model's other layers are planned each alone and
benchmarked, and the rest of the corpus goes on, through ``bench run``, ``run`` and
``fleet run``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

from benanza.analysis.lower_bound import lower_bound
from benanza.bench.generate import model_key, plan_model, specs_for_plan
from benanza.bench.stats import describe
from benanza.cli import app
from benanza.runtimes.null import NullRuntime
from benanza.store import Outcome, make_record

SYSTEM = "unbenchmarked-test-system"
FAST_ENV = {
    "BENANZA_DB": None,
    "BENANZA_SYSTEM": None,
    "BENANZA_HARNESS_WARMUP_RUNS": "1",
    "BENANZA_HARNESS_MIN_SAMPLES": "3",
    "BENANZA_HARNESS_KERNEL_RUNS": "2",
}
FAST_FLAGS = ["--min-time", "0.001", "--max-time", "0.02", "--threads", "1", "--system", SYSTEM]
FLOAT = TensorProto.FLOAT
FROB_REASON = "no ONNX operator schema for com.example::Frob at opset 1"


def invoke(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args], env=FAST_ENV)


def loop_body(op: str = "Add") -> onnx.GraphProto:
    """A Loop body that adds the captured ``r`` to its carried value each iteration."""
    return helper.make_graph(
        [
            helper.make_node(op, ["acc_in", "r"], ["acc_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
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
            helper.make_node("Loop", ["trip", "", "r"], [f"{prefix}y"], name=f"{prefix}loop", body=loop_body(op)),
        ]
        return build_model(
            nodes,
            [(f"{prefix}x", FLOAT, [1, 4])],
            [(f"{prefix}y", FLOAT, [1, 4])],
            {"trip": np.array(trip, dtype=np.int64)},
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
            stats=describe(samples).to_dict(),
            kernel_samples=samples,
            kernel_stats=describe(samples).to_dict(),
        )
    row = lower_bound(plan, results, system="s", stack_id="k", runtime="null", variant="")
    assert row.coverage == 0.5  # Relu measured, Loop not benchmarkable
    assert row.sequential_ms is None and row.parallel_ms is None and row.sequential_unfused_ms is None
    assert row.composed_ms == {1: None}
    assert row.e2e_ms == pytest.approx(1.0)  # the whole model still ran end to end
    (loop,) = [m for m in row.missing if m["op_type"] == "Loop"]
    assert loop["name"] == "loop" and "control flow" in loop["reason"]
