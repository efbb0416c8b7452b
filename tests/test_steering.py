"""Inputs that choose an ``If``'s branch (``benanza.model.steering``; ``--value NAME=V``).

Optimum's merged decoders (``decoder_model_merged.onnx``: T5, Whisper, BART, and every decoder
transformers.js ships) are one ``If`` on a boolean input ``use_cache_branch`` whose two branches are
the whole decoder without and with its KV cache. Kept as one layer, nothing in them was benchmarked:
0% covered.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from cli_checks import json_command
from onnx import TensorProto, helper
from typer.testing import CliRunner

from benanza.bench.plans import StoredPlan
from benanza.bench.spec import model_binding, requested_binding
from benanza.cli import app
from benanza.config import FleetConfig, SystemConfig
from benanza.errors import ModelError, UsageError
from benanza.model.process import process_model
from benanza.model.request import BindingRequest, parse_value_overrides
from benanza.model.steering import steering_inputs
from benanza.store import open_store

F, B, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
WIDTH = 16
ENV = {"BENANZA_DB": None, "BENANZA_SYSTEM": "steering-test", "BENANZA_HARNESS_MIN_SAMPLES": "3"}
FAST = ["--min-time", "0.001", "--max-time", "0.02", "--threads", "1", "--granularity", "1"]


def invoke(*args: object) -> list | dict:
    """A command with this file's environment, its JSON output read (``cli_checks.json_command``)."""
    return json_command(ENV, *args)


def _branch(name: str, ops: list[str]) -> onnx.GraphProto:
    """A branch that reads the outer ``x`` and ``w`` (captures, as Optimum's read the decoder's weights):
    ``MatMul(x, w)`` then ``ops`` in a chain, its result ``y``."""
    nodes, last = [helper.make_node("MatMul", ["x", "w"], [f"{name}_0"])], f"{name}_0"
    for i, op in enumerate(ops, 1):
        nodes.append(helper.make_node(op, [last], [f"{name}_{i}"]))
        last = f"{name}_{i}"
    nodes.append(helper.make_node("Identity", [last], [f"{name}_y"]))
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_y", F, None)])


def merged(
    build_model, condition: list[onnx.NodeProto] | None = None, flag=("use_cache_branch", B, [1]), constants=None
):
    """A merged decoder's form: ``If(use_cache_branch)``, its then branch (the cache's) a MatMul and a Relu,
    its else branch a MatMul, a Tanh and a Sigmoid. ``condition``: nodes that compute the ``If``'s ``cond``
    from the flag (default: the flag itself), reading ``constants`` too."""
    nodes = list(condition or [])
    cond = nodes[-1].output[0] if nodes else flag[0]
    nodes.append(
        helper.make_node(
            "If",
            [cond],
            ["y"],
            name="optimum::if",
            then_branch=_branch("with_past", ["Relu"]),
            else_branch=_branch("without_past", ["Tanh", "Sigmoid"]),
        )
    )
    w = np.random.default_rng(0).standard_normal((WIDTH, WIDTH)).astype(np.float32)
    return build_model(
        nodes,
        [("x", F, ["batch", WIDTH]), flag],
        [("y", F, None)],
        initializers={"w": w, **(constants or {})},
        opset=17,
    )


def _ops(processed) -> list[str]:
    return [layer.op_type for layer in processed.graph.layers]


def test_a_merged_decoder_is_the_branch_it_is_fed_and_value_chooses_the_other(build_model, process_proto):
    model = merged(build_model)
    fed = process_proto(model, batch=1)
    assert not fed.graph.unsupported  # the If was one layer, unsupported: its outputs' shapes depend on a value
    assert _ops(fed) == ["MatMul", "Relu", "Identity"]  # fed True (an If's condition is fed ones): the cache's
    assert fed.binding.values == {"use_cache_branch": 1}
    assert [t.name for t in fed.graph.inputs] == ["x"]  # the flag is a constant of the prepared model
    first = process_model("mem.onnx", 1, BindingRequest(values={"use_cache_branch": 0}), proto=model)
    assert _ops(first) == ["MatMul", "Tanh", "Sigmoid", "Identity"]
    assert first.binding.values == {"use_cache_branch": 0}
    assert first.graph.graph_key != fed.graph.graph_key  # two workloads, two model keys


@pytest.mark.parametrize("value", [0, 1])
def test_the_end_to_end_runs_the_model_as_shipped_its_if_on_the_value_bound(build_model, value):
    """The runtimes prepare a model's end to end with ``keep_branches``: the If stays (what it costs a run is
    part of the gap to the bound) and the input it reads keeps the bound value as a default over synthetic feeds."""
    import onnxruntime as ort

    from benanza.runtimes.onnxruntime import feeds_for

    model = merged(build_model)
    shipped = process_model(
        "mem.onnx", 1, BindingRequest(values={"use_cache_branch": value}), proto=model, keep_branches=True
    )
    assert [n.op_type for n in shipped.proto.graph.node] == ["If"]
    assert "use_cache_branch" in {vi.name for vi in shipped.proto.graph.input}
    feeds = feeds_for(shipped.proto)
    assert "use_cache_branch" not in feeds  # left to its initializer: the bound value
    session = ort.InferenceSession(shipped.proto.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, feeds)
    w = next(t for t in model.graph.initializer if t.name == "w")
    product = feeds["x"] @ onnx.numpy_helper.to_array(w)
    expected = np.maximum(product, 0) if value else 1 / (1 + np.exp(-np.tanh(product)))
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("value", [0, 1])
def test_a_merged_decoder_at_another_batch_keeps_its_flag_one_element(build_model, value):
    """``--batch 2`` rewrote every fixed leading dimension, ``use_cache_branch [1]`` too: two elements made the If's
    condition no scalar, the If stayed one layer reading the whole cache, unbenchmarked, and a Whisper decoder at
    batch 2 had no layer at all. A flag that chooses a branch is a setting, not a batch of data."""
    processed = process_model(
        "mem.onnx", 2, BindingRequest(values={"use_cache_branch": value}), proto=merged(build_model)
    )
    assert processed.binding.shapes["use_cache_branch"] == (1,) and processed.binding.shapes["x"][0] == 2
    assert "use_cache_branch" not in processed.binding.rebatch
    assert _ops(processed) == (["MatMul", "Relu", "Identity"] if value else ["MatMul", "Tanh", "Sigmoid", "Identity"])


def test_token_ids_that_a_condition_reads_are_rebatched_all_the_same(build_model):
    """Only a one-element flag keeps its shape: ids [1, 8] that steer an If (their maximum over a cut) and feed the
    model are a batch like the mask beside them."""
    then_g = helper.make_graph(
        [helper.make_node("Identity", ["m"], ["a"])], "t", [], [helper.make_tensor_value_info("a", F, None)]
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["m"], ["b"])], "e", [], [helper.make_tensor_value_info("b", F, None)]
    )
    model = build_model(
        [
            helper.make_node("ReduceMax", ["ids"], ["top"], keepdims=0),
            helper.make_node("Greater", ["top", "cut"], ["big"]),
            helper.make_node("Cast", ["ids"], ["idsf"], to=F),
            helper.make_node("Mul", ["idsf", "mask"], ["m"]),
            helper.make_node("If", ["big"], ["y"], then_branch=then_g, else_branch=else_g),
        ],
        [("ids", TensorProto.INT64, [1, 8]), ("mask", F, [1, 8])],
        [("y", F, None)],
        {"cut": np.array(5, np.int64)},
        opset=17,
    )
    processed = process_model("mem.onnx", 2, BindingRequest(), proto=model)
    assert processed.binding.shapes == {"ids": (2, 8), "mask": (2, 8)}


def test_the_end_to_end_of_a_merged_decoder_has_the_shapes_of_the_branch_the_value_chose(build_model):
    """Optimum's merged decoder: the cache branch outputs an empty placeholder ([0, 4, 1, 32]), the other the
    present keys. The run that shapes the If's outputs for the end to end took the branch synthetic feeds chose
    (ones), not ``--value use_cache_branch=0``: the model was written with the placeholder's shape and ONNX
    Runtime refused it ("invalid dimensions for output"), so a Whisper decoder had no end to end."""
    import onnxruntime as ort

    from benanza.runtimes.onnxruntime import feeds_for

    placeholder = helper.make_node(
        "Constant", [], ["none"], value=onnx.numpy_helper.from_array(np.zeros((0, 4, 1, 8), np.float32))
    )
    model = build_model(
        [
            helper.make_node("Squeeze", ["use_cache_branch"], ["cond"]),
            helper.make_node(
                "If",
                ["cond"],
                ["present"],
                then_branch=helper.make_graph(
                    [placeholder], "cache", [], [helper.make_tensor_value_info("none", F, None)]
                ),
                else_branch=helper.make_graph(
                    [helper.make_node("Relu", ["x"], ["keys"])],
                    "no_cache",
                    [],
                    [helper.make_tensor_value_info("keys", F, None)],
                ),
            ),
        ],
        [("x", F, ["batch", 4, "seq", 8]), ("use_cache_branch", B, [1])],
        [("present", F, ["batch", 4, "seq", 8])],
        opset=17,
    )
    request = BindingRequest(values={"use_cache_branch": 0}, dims={"seq": 5})
    shipped = process_model("mem.onnx", 2, request, proto=model, keep_branches=True)
    (present,) = [vi for vi in shipped.proto.graph.output if vi.name == "present"]
    assert [d.dim_value for d in present.type.tensor_type.shape.dim] == [2, 4, 5, 8]
    session = ort.InferenceSession(shipped.proto.SerializeToString(), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, feeds_for(shipped.proto))
    assert out.shape == (2, 4, 5, 8)


def test_a_condition_computed_from_small_integer_inputs_steers_and_one_from_data_does_not(build_model):
    step = [
        helper.make_node("ReduceSum", ["past_length"], ["n"], keepdims=0),
        helper.make_node("Greater", ["n", "zero"], ["cond"]),
    ]
    counted = merged(build_model, step, flag=("past_length", I64, [1]), constants={"zero": np.array(0, np.int64)})
    assert steering_inputs(counted, {"x": (1, WIDTH), "past_length": (1,)}) == ["past_length"]
    fed = process_model("mem.onnx", batch=1, proto=counted)
    assert _ops(fed) == ["MatMul", "Relu", "Identity"]  # fed 1 (data): 1 > 0
    assert _ops(process_model("mem.onnx", 1, BindingRequest(values={"past_length": 0}), proto=counted))[1] == "Tanh"
    # a condition read off float data is the model's work: its If stays one layer
    data = [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0), helper.make_node("Greater", ["m", "m"], ["c"])]
    by_data = merged(build_model, data, flag=("unused", B, [1]))
    assert steering_inputs(by_data, {"x": (1, WIDTH), "unused": (1,)}) == []
    kept = process_model("mem.onnx", batch=1, proto=by_data)
    assert _ops(kept)[-1] == "If" and kept.binding.values == {}
    # and so is one read off a large integer tensor (token ids: data, not a setting)
    many = merged(build_model, [helper.make_node("ReduceMax", ["ids"], ["c"], keepdims=0)], flag=("ids", B, [1, 4096]))
    assert steering_inputs(many, {"x": (1, WIDTH), "ids": (1, 4096)}) == []


def test_a_value_for_an_input_that_chooses_no_branch_is_a_one_line_error(build_model):
    message = r"--value binds an input that chooses an If's branch; x does not \(here: use_cache_branch\)"
    with pytest.raises(ModelError, match=message) as caught:
        process_model("merged.onnx", 1, BindingRequest(values={"x": 0}), proto=merged(build_model))
    assert "merged.onnx" in str(caught.value) and "\n" not in str(caught.value)
    # a name the model has no input of binds nothing there, as --dim: one run binds models of several kinds
    other = process_model("m.onnx", 1, BindingRequest(values={"encoder_only": 0}), proto=merged(build_model))
    assert other.binding.values == {"use_cache_branch": 1}


@pytest.mark.parametrize(
    ("texts", "message"),
    [
        (["use_cache_branch"], "expected NAME=V"),
        (["use_cache_branch=yes"], "values are integers or true/false"),
        (["=1"], "expected NAME=V"),
        (["a=1", "a=0"], "given twice"),
    ],
)
def test_bad_values_are_one_line_usage_errors(texts, message):
    with pytest.raises(UsageError, match=message):
        parse_value_overrides(texts)


def test_values_parse_as_integers_and_booleans():
    assert parse_value_overrides(["use_cache_branch=false", "b=true", "c=-3", "d = 7"]) == {
        "use_cache_branch": 0,
        "b": 1,
        "c": -3,
        "d": 7,
    }


def test_a_spec_and_a_plan_carry_values_only_when_given_so_others_keep_their_ids():
    assert "values" not in requested_binding(1, BindingRequest())
    given = requested_binding(1, BindingRequest(values={"use_cache_branch": 0}))
    assert model_binding({"path": "m.onnx", **given})[1].values == {"use_cache_branch": 0}
    doc = {
        "schema_version": 1,
        "model": "m",
        "model_key": "k",
        "batch_size": 1,
        "runtime": "r",
        "variant": "v",
        "layers": [],
        "units": [],
        "unit_keys": [],
    }
    plain = StoredPlan.from_doc(doc)
    assert plain.values == {} and "values" not in plain.to_doc()
    valued = StoredPlan.from_doc({**doc, "values": {"use_cache_branch": 0}})
    assert valued.values == {"use_cache_branch": 0} and StoredPlan.from_doc(valued.to_doc()) == valued
    assert valued.plan_id != plain.plan_id


def test_the_main_job_measures_both_branches_of_a_merged_decoder_as_two_models(tmp_path, build_model):
    path = tmp_path / "decoder_model_merged.onnx"
    onnx.save(merged(build_model), path)
    uri = f"sqlite:///{tmp_path / 'merged.db'}"
    result = CliRunner().invoke(app, ["run", str(path), "--db", uri, *FAST], env=ENV)
    assert result.exit_code == 0 and (
        "use_cache_branch=1 (as fed; --value use_cache_branch=V for the other branch) chooses an If's branch"
        in result.stderr
    ), result.output
    (cached,) = invoke("run", path, "--db", uri, *FAST)  # again: every figure reused
    assert cached["coverage"] == 1.0 and cached["e2e_ms"] is not None and cached["sequential_ms"] is not None
    (first,) = invoke("run", path, "--db", uri, *FAST, "--value", "use_cache_branch=0")
    assert first["coverage"] == 1.0 and first["e2e_ms"] is not None
    rows = sorted(r["model"] for r in invoke("analyze", "lower-bound", "--db", uri))
    assert rows == ["decoder_model_merged (use_cache_branch=0)", "decoder_model_merged (use_cache_branch=1)"]
    # a binding is selected by the name the table shows too, in analyze and in the report
    (row,) = invoke("analyze", "lower-bound", "decoder_model_merged (use_cache_branch=0)", "--db", uri)
    assert row["model"] == "decoder_model_merged (use_cache_branch=0)" and row["coverage"] == 1.0
    site = tmp_path / "site"
    chosen = "decoder_model_merged (use_cache_branch=1)"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = CliRunner().invoke(app, ["report", "--db", uri, "--out", str(site), "--models", chosen], env=ENV)
    assert result.exit_code == 0, result.output
    assert not [str(w.message) for w in caught if "layout" in str(w.message)]  # the long name's label fits, quietly
    assert [p.name for p in (site / "models").glob("*.html")] == ["decoder_model_merged__use_cache_branch_1_.html"]
    with open_store(uri, read_only=True) as store:
        plans = {p.values["use_cache_branch"]: p for p in store.plans()}
        assert [layer.op_type for layer in plans[0].layers] == ["MatMul", "Tanh", "Sigmoid", "Identity"]
        models = [r for r in store.records(kind="model") if not r.settings.get("session")]
        assert {r.outcome for r in models} == {"ok"}
        # the runtime prepared the model at the value asked: the spec carries it (only when given)
        assert sorted(r.spec["model"].get("values", {}).get("use_cache_branch", 1) for r in models) == [0, 1]


def test_models_inspect_lists_the_branch_taken_and_says_so(tmp_path, build_model):
    path = tmp_path / "decoder_model_merged.onnx"
    onnx.save(merged(build_model), path)
    result = CliRunner().invoke(app, ["models", "inspect", str(path), "--batch", "1", "--value", "use_cache_branch=0"])
    assert result.exit_code == 0, result.output
    assert "use_cache_branch=0 (as given) chooses an If's branch" in result.stderr
    document = invoke("models", "inspect", path, "--batch", "1")
    assert document["values"] == {"use_cache_branch": 1}
    assert [layer["op_type"] for layer in document["layers"]] == ["MatMul", "Relu", "Identity"]


def test_a_fleet_config_binds_values(tmp_path, build_model):
    from benanza.fleet.driver import plan_corpus

    path = tmp_path / "decoder_model_merged.onnx"
    onnx.save(merged(build_model), path)
    cfg = FleetConfig(
        systems=[SystemConfig(name="a", runtimes=["null"])],
        models=[path],
        db=f"sqlite:///{tmp_path / 'f.db'}",
        values={"use_cache_branch": 0},
    )
    (work,) = plan_corpus(cfg).works.values()
    (plan,) = work.plans
    assert plan.values == {"use_cache_branch": 0} and [u.op_type for u in plan.graph.layers][1] == "Tanh"
    assert cfg.with_overrides(values={"use_cache_branch": 1}).values == {"use_cache_branch": 1}
