"""A model's own input values from files (``--input``: ``benanza.model.given_inputs``).

Fed synthetic values, a shape that an input's values decide (a ``Range`` to a length input, an ``Expand``
to a shape input) is unknown and its layers are not benchmarked, and a length that data decides (what a
``NonZero`` keeps of a detector's scores) is what random values give. Given the values, the model's runs
are fed them: such shapes are the model's own, its end to end is run on them, and its key says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_checks import FAST_ENV, fast_flags, json_command, one_line_error
from onnx import TensorProto, helper, numpy_helper
from pydantic import ValidationError
from typer.testing import CliRunner

from benanza.bench.generate import plan_model_file, specs_for_plan
from benanza.bench.plans import StoredPlan
from benanza.bench.spec import SpecKind, model_binding, requested_binding
from benanza.cli import app
from benanza.config import FleetConfig, SystemConfig
from benanza.errors import ModelError, UsageError
from benanza.model.given_inputs import GivenInput, parse_input_flags, read_input_file, values_digest
from benanza.model.process import process_model
from benanza.model.request import BindingRequest
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU
from benanza.store import open_store

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
ENV = {**FAST_ENV, "BENANZA_SYSTEM": "given-inputs-test"}
SCORES = 512


def ranged(build_model) -> onnx.ModelProto:
    """``MatMul(Gather(x, Range(0, n)), w)``, and ``Softmax`` over the ``scores`` above 0.9 (``NonZero``)."""
    w = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)
    return build_model(
        [
            helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array(0, np.int64))),
            helper.make_node("Constant", [], ["one"], value=numpy_helper.from_array(np.array(1, np.int64))),
            helper.make_node("Range", ["zero", "n", "one"], ["idx"]),
            helper.make_node("Gather", ["x", "idx"], ["picked"]),
            helper.make_node("MatMul", ["picked", "w"], ["y"]),
            helper.make_node("Constant", [], ["cut"], value=numpy_helper.from_array(np.array(0.9, np.float32))),
            helper.make_node("Greater", ["scores", "cut"], ["keep"]),
            helper.make_node("NonZero", ["keep"], ["nz"]),
            helper.make_node("Squeeze", ["nz", "axis0"], ["kept"]),
            helper.make_node("Gather", ["scores", "kept"], ["top"]),
            helper.make_node("Softmax", ["top"], ["probs"], axis=0),
        ],
        [("x", F, ["rows", 16]), ("n", I64, []), ("scores", F, [SCORES])],
        [("y", F, None), ("probs", F, None)],
        {"w": w, "axis0": np.array([0], np.int64)},
    )


def scores(kept: int) -> np.ndarray:
    out = np.zeros(SCORES, np.float32)
    out[:kept] = 0.95
    return out


@pytest.fixture
def files(tmp_path, build_model) -> Path:
    """The model and its inputs as a user has them: ``ranged.onnx``, ``n.npy``, ``scores.npy``, ``both.npz``."""
    onnx.save(ranged(build_model), tmp_path / "ranged.onnx")
    np.save(tmp_path / "n.npy", np.array(30, np.int64))
    np.save(tmp_path / "scores.npy", scores(37))
    np.savez(tmp_path / "both.npz", n=np.array(30, np.int64), scores=scores(37))
    return tmp_path


def _request(*texts: str, dims: dict | None = None) -> BindingRequest:
    return BindingRequest(dims=dims or {"rows": 64}, inputs=parse_input_flags(texts))


def _shape(processed, name: str) -> list[int] | None:
    for layer in processed.graph.layers:
        for t in layer.outputs:
            if t.name == name:
                return list(t.shape)
    return None


def test_without_values_a_shape_a_length_input_decides_is_unknown_and_with_them_it_is_the_models(files):
    synthetic = process_model(files / "ranged.onnx", None, _request())
    assert "runtime input 'n'" in synthetic.shapes.reason("idx")
    assert {u.op_type for u in synthetic.graph.unsupported} >= {"Range", "MatMul"}
    request = _request(f"n={files / 'n.npy'}", f"scores={files / 'scores.npy'}")
    given = process_model(files / "ranged.onnx", None, request)
    assert not given.graph.unsupported
    assert _shape(given, "idx") == [30] and _shape(given, "y") == [30, 16]
    assert _shape(given, "nz") == [1, 37]  # what the scores hold above the cut, not what random values do
    notes = given.notes()
    assert any("input 'n' fed a scalar int64 from" in n and str(files / "n.npy") in n for n in notes)
    assert any("'idx'" in n and "its run on the given inputs (--input) gave, 30" in n for n in notes)


def test_a_setting_computed_from_given_data_is_the_runs_and_its_layer_carries_it(tmp_path, build_model):
    """``Range(0, count of scores above 0.9)``: the model's run on the given scores knows the length, and the
    Range benchmarked alone, fed a synthetic limit (a value computed from float data was not carried), would have
    measured another length: it stayed unknown, and so did all that read it (a VITS's duration-shaped half). Now
    the limit's value in that run is carried into the Range's key and benchmark, as values computed from integers
    alone are, and the Range is shaped by the run."""
    model = build_model(
        [
            helper.make_node("Constant", [], ["cut"], value=numpy_helper.from_array(np.array(0.9, np.float32))),
            helper.make_node("Greater", ["scores", "cut"], ["keep"]),
            helper.make_node("Cast", ["keep"], ["ones"], to=I64),
            helper.make_node("ReduceSum", ["ones"], ["count"], keepdims=0),
            helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array(0, np.int64))),
            helper.make_node("Constant", [], ["one"], value=numpy_helper.from_array(np.array(1, np.int64))),
            helper.make_node("Range", ["zero", "count", "one"], ["idx"]),
            helper.make_node("Gather", ["scores", "idx"], ["top"]),
        ],
        [("scores", F, [SCORES])],
        [("top", F, None)],
    )
    onnx.save(model, tmp_path / "counted.onnx")
    np.save(tmp_path / "scores.npy", scores(37))
    given = process_model(
        tmp_path / "counted.onnx", None, BindingRequest.parse(inputs=[f"scores={tmp_path / 'scores.npy'}"])
    )
    assert given.graph.unsupported == () and _shape(given, "idx") == [37] and _shape(given, "top") == [37]
    (ranged,) = [layer for layer in given.graph.layers if layer.op_type == "Range"]
    assert [i.value for i in ranged.inputs] == [(0,), (37,), (1,)] and ranged.data_decided
    by_data = dict(given.shapes.by_data)
    assert "its run on the given inputs (--input) gave, 37" in by_data["idx"]
    assert by_data["count"] == (
        "a setting of Range computed from data, carried at its value in the model's run on the given inputs (--input): "
        "[37]"
    )
    other = tmp_path / "fewer.npy"
    np.save(other, scores(5))  # other scores, another length: another Range
    fewer = process_model(tmp_path / "counted.onnx", None, BindingRequest.parse(inputs=[f"scores={other}"]))
    (short,) = [layer for layer in fewer.graph.layers if layer.op_type == "Range"]
    assert short.inputs[1].value == (5,) and short.layer_key != ranged.layer_key


def test_a_reshape_to_lengths_durations_decide_is_benchmarked_at_the_runs_values(tmp_path, build_model):
    """A text-to-speech model's shape: each token's duration computed from float data (``Ceil`` of a predictor's
    output), their sum the number of frames, a ``Range`` over the frames and a ``Reshape`` to ``[1, frames]``
    whose target is computed from that sum. A VITS (transformers, random weights) was 50.5% covered with no
    bound, on its own inputs or synthetic ones: the Range had no shape, and the Reshape, fed a synthetic target
    alone, failed. Now both take the run's values (on the benchmark inputs, as its end to end)."""
    i64 = lambda name, value: helper.make_node(  # noqa: E731
        "Constant", [], [name], value=numpy_helper.from_array(np.array(value, np.int64))
    )
    model = build_model(
        [
            helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.array(3.0, np.float32))),
            helper.make_node("Abs", ["x"], ["a"]),
            helper.make_node("Mul", ["a", "k"], ["scaled"]),
            helper.make_node("Ceil", ["scaled"], ["up"]),
            helper.make_node("Cast", ["up"], ["durations"], to=I64),
            helper.make_node("ReduceSum", ["durations"], ["frames"], keepdims=1),
            helper.make_node("Squeeze", ["frames"], ["limit"]),
            i64("zero", 0),
            i64("step", 1),
            i64("batch", [1]),
            helper.make_node("Range", ["zero", "limit", "step"], ["t"]),
            helper.make_node("Cast", ["t"], ["tf"], to=TensorProto.FLOAT),
            helper.make_node("Concat", ["batch", "frames"], ["target"], axis=0),
            helper.make_node("Reshape", ["tf", "target"], ["y"]),
        ],
        [("x", F, [8])],
        [("y", F, None)],
    )
    path = tmp_path / "durations.onnx"
    onnx.save(model, path)
    db = f"sqlite:///{tmp_path / 'd.db'}"
    result = CliRunner().invoke(
        app, ["run", str(path), *fast_flags("given-inputs-test"), "--db", db, "--format", "json"], env=ENV
    )
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert row["coverage"] == 1.0 and row["missing"] == [] and row["e2e_ms"] is not None
    assert "output 'target': a setting of Reshape computed from data, carried at its value" in result.stderr
    # what a setting is computed from is carried too, unsaid: a unit that computes the setting inside it is fed
    # that (a FastSpeech2's frame count, unsqueezed into a Slice's end in one ONNX Runtime unit, failed the unit)
    assert "output 'frames'" not in result.stderr and None not in row["composed_ms"].values()
    with open_store(db, create=False) as store:
        assert [r.key for r in store.records(outcome="failed")] == []
    (concat,) = [layer for layer in process_model(path).graph.layers if layer.op_type == "Concat"]
    assert concat.inputs[1].tensor.name == "frames" and concat.inputs[1].value is not None


def test_an_npz_gives_every_input_it_names_and_a_model_key_tells_values_apart(files):
    npz = process_model(files / "ranged.onnx", None, _request(str(files / "both.npz")))
    npy = process_model(files / "ranged.onnx", None, _request(f"n={files / 'n.npy'}", f"scores={files / 'scores.npy'}"))
    assert npz.graph.graph_key == npy.graph.graph_key  # the same values, from two files: one workload
    np.save(files / "more.npy", scores(38))
    other = process_model(files / "ranged.onnx", None, _request(f"n={files / 'n.npy'}", f"scores={files / 'more.npy'}"))
    assert _shape(other, "nz") == [1, 38] and other.graph.graph_key != npy.graph.graph_key


def test_a_given_input_that_decides_no_shape_keeps_the_layer_keys_but_not_the_model_key(tmp_path, build_model):
    """A convolution's image changes nothing of its work: its layers are the same benchmarks (their results
    reused), its end to end another measurement (on the user's values), under another model key."""
    model = build_model(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        [("x", F, ["batch", 3, 8, 8])],
        [("y", F, None)],
        {"w": np.ones((4, 3, 3, 3), np.float32)},
    )
    onnx.save(model, tmp_path / "conv.onnx")
    np.save(tmp_path / "x.npy", np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32))
    synthetic = process_model(tmp_path / "conv.onnx", 2)
    given = process_model(tmp_path / "conv.onnx", None, _request(f"x={tmp_path / 'x.npy'}"))
    assert given.graph.layer_keys == synthetic.graph.layer_keys
    assert given.graph.graph_key != synthetic.graph.graph_key
    assert given.binding.shapes == {"x": (2, 3, 8, 8)}


def test_a_given_input_binds_its_symbolic_dimensions_in_every_other_input(tmp_path, build_model):
    model = build_model(
        [helper.make_node("Gather", ["table", "ids"], ["e"]), helper.make_node("Mul", ["e", "mask"], ["y"])],
        [("ids", I64, ["batch", "seq"]), ("mask", F, ["batch", "seq", 1])],
        [("y", F, None)],
        {"table": np.ones((100, 8), np.float32)},
    )
    onnx.save(model, tmp_path / "emb.onnx")
    np.save(tmp_path / "ids.npy", np.arange(3 * 7, dtype=np.int64).reshape(3, 7))
    processed = process_model(tmp_path / "emb.onnx", None, _request(f"ids={tmp_path / 'ids.npy'}", dims={}))
    assert processed.binding.shapes == {"ids": (3, 7), "mask": (3, 7, 1)}
    with pytest.raises(ModelError, match=r"--input ids .* is 7 in dimension 1 \('seq'\), --dim seq makes it 5"):
        process_model(tmp_path / "emb.onnx", None, _request(f"ids={tmp_path / 'ids.npy'}", dims={"seq": 5}))


@pytest.mark.parametrize(
    ("make", "flag", "message"),
    [
        (lambda d: np.save(d / "v.npy", np.array(3, np.int32)), "n=v.npy", "holds int32 values, the input is int64"),
        (lambda d: np.save(d / "v.npy", np.zeros((2, SCORES), np.float32)), "scores=v.npy", "has rank 2 but the input"),
        (lambda d: np.save(d / "v.npy", np.array(3, np.int64)), "q=v.npy", "--input names unknown input(s) q"),
    ],
)
def test_a_given_input_the_model_cannot_take_is_a_one_line_model_error(files, make, flag, message):
    make(files)
    name, _, file = flag.partition("=")
    with pytest.raises(ModelError, match=r"ranged\.onnx") as caught:
        process_model(files / "ranged.onnx", None, _request(f"{name}={files / file}"))
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("n=missing.npy", "missing.npy: no such file"),
        ("n=bad.npy", "bad.npy: cannot be read as npy"),
        ("n.npy", "holds one array without a name; pass --input NAME="),
        ("n=both.npz", "--input NAME=FILE takes a .npy or .pb file"),
        ("=n.npy", "bad --input '=n.npy': expected NAME=FILE or FILE"),
        ("n=text.npy", "'n' is <U5 data; given inputs are booleans, integers and float16/32/64"),
        ("ranged.onnx", "not an input file"),
        ("empty", "the folder holds no .pb tensor files"),
    ],
)
def test_a_file_that_cannot_be_read_is_a_one_line_usage_error_naming_it(files, monkeypatch, flag, message):
    (files / "bad.npy").write_text("not numpy")
    np.save(files / "text.npy", np.array(["hello"]))
    (files / "empty").mkdir()
    monkeypatch.chdir(files)
    with pytest.raises(UsageError) as caught:
        parse_input_flags([flag])
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_an_input_given_twice_or_with_a_value_or_another_shape_is_refused(files):
    np.save(files / "n2.npy", np.array(31, np.int64))
    with pytest.raises(UsageError, match="--input n is given twice"):
        parse_input_flags([f"n={files / 'n.npy'}", f"n={files / 'n2.npy'}"])
    assert set(parse_input_flags([f"n={files / 'n.npy'}", str(files / "both.npz")])) == {"n", "scores"}  # the same
    with pytest.raises(UsageError, match="--value n and --input n"):
        BindingRequest.parse(values=["n=3"], inputs=[f"n={files / 'n.npy'}"])
    with pytest.raises(UsageError, match=r"--shape scores=3 but --input scores \(.*scores\.npy\) holds 512"):
        BindingRequest.parse(shapes=["scores=3"], inputs=[f"scores={files / 'scores.npy'}"])


def test_an_archives_array_that_is_no_input_is_left_out_and_said_but_a_named_one_is_an_error(files):
    """``np.savez(f, **tokenizer(text, return_tensors="np"))`` holds ``token_type_ids`` for models that take none."""
    np.savez(files / "extra.npz", n=np.array(30, np.int64), token_type_ids=np.zeros((1, 4), np.int64))
    processed = process_model(files / "ranged.onnx", None, _request(str(files / "extra.npz")))
    assert set(processed.binding.given) == {"n"}
    assert f"{files / 'extra.npz'} holds 'token_type_ids', no input of this model: not fed" in processed.warnings()
    np.save(files / "ids.npy", np.zeros((1, 4), np.int64))
    with pytest.raises(ModelError, match=r"--input names unknown input\(s\) token_type_ids"):
        process_model(files / "ranged.onnx", None, _request(f"token_type_ids={files / 'ids.npy'}"))
    np.savez(files / "none.npz", labels=np.zeros(3, np.int64))
    with pytest.raises(ModelError, match=r"none\.npz gives no input of this model; inputs are x, n, scores"):
        process_model(files / "ranged.onnx", None, _request(str(files / "none.npz")))


def test_onnx_tensor_files_and_a_test_data_folder_are_read_by_their_names(tmp_path):
    folder = tmp_path / "test_data_set_0"
    folder.mkdir()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (folder / "input_0.pb").write_bytes(numpy_helper.from_array(x, "x").SerializeToString())
    shape = numpy_helper.from_array(np.array([2, 3], np.int64), "shape")
    (folder / "input_1.pb").write_bytes(shape.SerializeToString())
    (folder / "output_0.pb").write_bytes(numpy_helper.from_array(x, "y").SerializeToString())  # not an input
    given = parse_input_flags([str(folder)])
    assert set(given) == {"x", "shape"} and given["x"].array.tolist() == x.tolist()
    assert parse_input_flags([f"images={folder / 'input_0.pb'}"])["images"].digest == given["x"].digest
    (tmp_path / "nameless.pb").write_bytes(numpy_helper.from_array(x).SerializeToString())
    with pytest.raises(UsageError, match="the tensor has no name; pass --input NAME="):
        read_input_file(tmp_path / "nameless.pb")


def test_the_onnx_wheels_own_test_data_shapes_an_expand_to_a_shape_input():
    """A model and test data as the ONNX project ships them (``test_data_set_0/input_*.pb``): an ``Expand``
    to the values of its ``shape`` input, unknown fed synthetic values, the model's own given them."""
    folder = Path(onnx.__file__).parent / "backend" / "test" / "data" / "simple" / "test_expand_shape_model1"
    if not folder.is_dir():
        pytest.skip("this onnx wheel ships no backend test data")
    synthetic = process_model(folder / "model.onnx")
    assert [u.op_type for u in synthetic.graph.unsupported] == ["Expand"]
    given = process_model(folder / "model.onnx", None, BindingRequest.parse(inputs=[str(folder / "test_data_set_0")]))
    expected = numpy_helper.to_array(onnx.load_tensor(str(folder / "test_data_set_0" / "output_0.pb")))
    assert not given.graph.unsupported
    assert given.graph.layers[0].output_shapes == [list(expected.shape)]


def save_merged(build_model, path: Path, flag_shape: list) -> None:
    """``If(flag)``: Relu on its then branch, Tanh on its else, saved at ``path``."""

    def branch(name: str, op: str) -> onnx.GraphProto:
        node = helper.make_node(op, ["x"], [f"{name}_y"])
        return helper.make_graph([node], name, [], [helper.make_tensor_value_info(f"{name}_y", F, None)])

    model = build_model(
        [helper.make_node("If", ["flag"], ["y"], then_branch=branch("a", "Relu"), else_branch=branch("b", "Tanh"))],
        [("x", F, [2, 4]), ("flag", B, flag_shape)],
        [("y", F, None)],
    )
    onnx.save(model, path)


def test_an_input_that_chooses_a_branch_takes_its_files_value_if_it_holds_one(tmp_path, build_model):
    save_merged(build_model, tmp_path / "merged.onnx", [1])
    np.save(tmp_path / "off.npy", np.array([False]))
    off = process_model(tmp_path / "merged.onnx", None, BindingRequest.parse(inputs=[f"flag={tmp_path / 'off.npy'}"]))
    assert [layer.op_type for layer in off.graph.layers] == ["Tanh"] and off.binding.values == {"flag": 0}
    assert any(note.startswith("flag=0 (as given)") for note in off.notes(BindingRequest(inputs=off.binding.given)))


def test_the_end_to_end_is_fed_the_given_values_and_a_spec_reads_them_again_checked(files):
    runtime = OnnxRuntimeCPU()
    request = _request(f"n={files / 'n.npy'}", f"scores={files / 'scores.npy'}")
    ((plan,),) = plan_model_file(files / "ranged.onnx", [runtime], [None], request)
    n, scores_ = request.inputs["n"], request.inputs["scores"]
    assert plan.fed == {"n": f"n.npy@{n.digest[:8]}", "scores": f"scores.npy@{scores_.digest[:8]}"}
    specs = specs_for_plan(plan, runtime.name, runtime.variant(), e2e=True, defaults=True, exported=True)
    models = [s for s in specs if s.kind is SpecKind.MODEL]
    assert len(models) == 3
    for spec in models:
        assert spec.model["inputs"]["n"] == {"path": str(files / "n.npy"), "digest": request.inputs["n"].digest}
        prepared = runtime.prepare(spec)
        try:
            prepared.call()
            assert prepared._feeds["n"].tolist() == 30
            assert prepared._feeds["scores"].tolist() == scores(37).tolist()
        finally:
            prepared.close()
    np.save(files / "n.npy", np.array(29, np.int64))  # changed after the plan: refused, not measured on other values
    with pytest.raises(UsageError, match="holds other values than when the model was planned"):
        model_binding(models[0].model)


def test_a_spec_and_a_plan_carry_given_inputs_only_when_given_so_others_keep_their_ids(files):
    assert "inputs" not in requested_binding(1, BindingRequest())
    doc = {"schema_version": 1, "model": "m", "model_key": "k", "batch_size": 1, "runtime": "r", "variant": "v"}
    doc |= {"layers": [], "units": [], "unit_keys": []}
    plain = StoredPlan.from_doc(doc)
    assert "fed" not in plain.to_doc()
    fed = StoredPlan.from_doc({**doc, "fed": {"n": "n.npy"}})
    assert StoredPlan.from_doc(fed.to_doc()) == fed and fed.plan_id != plain.plan_id


def test_digests_are_of_dtype_shape_and_values():
    a = np.arange(4, dtype=np.int64)
    assert values_digest(a) == values_digest(a.copy()) == GivenInput.of("a", "a.npy", a).digest
    assert len({values_digest(a), values_digest(a.astype(np.int32)), values_digest(a.reshape(2, 2))}) == 3


def test_the_main_job_runs_a_model_on_given_inputs_and_names_the_two_workloads_apart(files):
    db = f"sqlite:///{files / 'g.db'}"
    flags = [*fast_flags("given-inputs-test"), "--dim", "rows=64", "--db", db]
    (synthetic,) = json_command(ENV, "run", files / "ranged.onnx", *flags)
    assert synthetic["coverage"] < 1
    (given,) = json_command(ENV, "run", files / "ranged.onnx", *flags, "--input", files / "both.npz")
    assert given["coverage"] == 1.0 and given["sequential_ms"] is not None and given["e2e_ms"] is not None
    rows = json_command(ENV, "analyze", "lower-bound", "--db", db)
    n = parse_input_flags([str(files / "both.npz")])["n"]
    assert sorted(r["model"] for r in rows) == [
        f"ranged (n from both.npz@{n.digest[:8]})",
        "ranged (n from synthetic values)",
    ]


def test_the_main_job_refuses_an_unreadable_input_in_one_line_before_opening_anything(files):
    result = CliRunner().invoke(app, ["run", str(files / "ranged.onnx"), "--input", "n=nowhere.npy"], env=ENV)
    one_line_error(result, "nowhere.npy: no such file")


def test_a_fleet_config_reads_inputs_relative_to_its_folder(files):
    from benanza.fleet.driver import plan_corpus

    (files / "fleet.toml").write_text(
        f'models = ["ranged.onnx"]\ninputs = ["both.npz"]\ndims = {{rows = 64}}\ndb = "sqlite:///{files / "f.db"}"\n'
        '[[systems]]\nname = "a"\nruntimes = ["null"]\n'
    )
    from benanza.config import load_fleet_config

    cfg = load_fleet_config(files / "fleet.toml")
    assert cfg.inputs == [str(files / "both.npz")]
    (work,) = plan_corpus(cfg).works.values()
    (plan,) = work.plans
    assert {name: label.partition("@")[0] for name, label in plan.fed.items()} == {
        "n": "both.npz",
        "scores": "both.npz",
    }
    assert not plan.graph.unsupported
    with pytest.raises(ValidationError, match=r"nowhere\.npz: no such file"):
        FleetConfig(systems=[SystemConfig(name="a", runtimes=["null"])], inputs=["nowhere.npz"])


def test_a_folders_tensor_that_is_no_input_stays_out_of_the_spec_which_the_runtime_prepares(tmp_path, build_model):
    """The spec carried every array of the folder; read again through its .pb it was a named unknown input,
    and every end to end failed on the worker ("--input names unknown input(s) extra")."""
    onnx.save(
        build_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2, 3])], [("y", F, None)]),
        tmp_path / "relu.onnx",
    )
    folder = tmp_path / "test_data_set_0"
    folder.mkdir()
    (folder / "input_0.pb").write_bytes(numpy_helper.from_array(np.ones((2, 3), np.float32), "x").SerializeToString())
    (folder / "input_1.pb").write_bytes(numpy_helper.from_array(np.ones(4, np.float32), "extra").SerializeToString())
    runtime = OnnxRuntimeCPU()
    ((plan,),) = plan_model_file(tmp_path / "relu.onnx", [runtime], [None], BindingRequest.parse(inputs=[str(folder)]))
    (spec, *_) = [
        s for s in specs_for_plan(plan, runtime.name, runtime.variant(), e2e=True) if s.kind is SpecKind.MODEL
    ]
    assert set(spec.model["inputs"]) == {"x"}
    prepared = runtime.prepare(spec)
    try:
        prepared.call()
    finally:
        prepared.close()
    assert runtime.supports(spec) is None
    (folder / "input_0.pb").unlink()
    assert runtime.supports(spec) == f"input file not available on this system: {folder / 'input_0.pb'} (--input)"


def test_a_folders_unnamed_tensors_are_the_models_inputs_by_position():
    """131 of the 171 input_*.pb files of the ONNX wheel's test data (pytorch-converted, pytorch-operator)
    have no name: ONNX's own runner feeds them by position."""
    folder = Path(onnx.__file__).parent / "backend" / "test" / "data" / "pytorch-operator" / "test_operator_maxpool"
    if not folder.is_dir():
        pytest.skip("this onnx wheel ships no backend test data")
    tensor = onnx.load_tensor(str(folder / "test_data_set_0" / "input_0.pb"))
    assert not tensor.name
    processed = process_model(
        folder / "model.onnx", None, BindingRequest.parse(inputs=[str(folder / "test_data_set_0")])
    )
    ((name, given),) = processed.binding.given.items()
    assert name == processed.graph.inputs[0].name and given.array.shape == tuple(tensor.dims)


def test_a_narrow_integer_length_is_not_taken_from_the_run_as_its_benchmark_could_not_carry_it(tmp_path, build_model):
    """run_values carries int32 and int64 values into a layer's benchmark: a Range to an int16 length shaped at
    the given 30 was benchmarked at a synthetic 1."""
    model = build_model(
        [
            helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array(0, np.int16))),
            helper.make_node("Constant", [], ["one"], value=numpy_helper.from_array(np.array(1, np.int16))),
            helper.make_node("Range", ["zero", "n", "one"], ["idx"]),
        ],
        [("n", TensorProto.INT16, [])],
        [("idx", TensorProto.INT16, None)],
    )
    onnx.save(model, tmp_path / "r16.onnx")
    np.save(tmp_path / "n.npy", np.array(30, np.int16))
    processed = process_model(tmp_path / "r16.onnx", None, BindingRequest.parse(inputs=[f"n={tmp_path / 'n.npy'}"]))
    assert "runtime input 'n'" in processed.shapes.reason("idx") and processed.shapes.by_data == ()


def test_a_given_batch_that_is_not_the_one_asked_is_said(tmp_path, build_model):
    model = build_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, ["batch", 3])], [("y", F, None)])
    onnx.save(model, tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    processed = process_model(tmp_path / "m.onnx", 8, BindingRequest.parse(inputs=[f"x={tmp_path / 'x.npy'}"]))
    assert processed.binding.shapes == {"x": (2, 3)}
    assert "input 'x' is fed its file's leading dimension, 2, not the batch size asked, 8" in processed.warnings()


def test_a_given_array_the_file_fixes_the_leading_dimension_of_is_no_batch_departure(tmp_path, build_model):
    """``x [64]`` fixed in the file, fed 64 values at ``--batch 1``: it warned "fed its file's leading
    dimension, 64, not the batch size asked, 1", of a dimension that is no batch and no batch that was asked."""
    model = build_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [64])], [("y", F, None)])
    onnx.save(model, tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.ones(64, np.float32))
    processed = process_model(tmp_path / "m.onnx", 1, BindingRequest.parse(inputs=[f"x={tmp_path / 'x.npy'}"]))
    assert processed.binding.shapes == {"x": (64,)} and processed.warnings() == []


def test_a_given_array_of_the_files_batch_is_said_where_other_inputs_take_the_batch_asked(tmp_path, build_model):
    """x [1, 3] fed (1, 3) beside z [1, 3] rebatched to 8: x is not at the batch asked, though its file fixes it."""
    model = build_model(
        [helper.make_node("Add", ["x", "z"], ["y"])], [("x", F, [1, 3]), ("z", F, [1, 3])], [("y", F, None)]
    )
    onnx.save(model, tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.ones((1, 3), np.float32))
    processed = process_model(tmp_path / "m.onnx", 8, BindingRequest.parse(inputs=[f"x={tmp_path / 'x.npy'}"]))
    assert processed.binding.shapes == {"x": (1, 3), "z": (8, 3)}
    assert "input 'x' is fed its file's leading dimension, 1, not the batch size asked, 8" in processed.warnings()


def test_an_empty_file_for_an_input_that_chooses_a_branch_is_refused(tmp_path, build_model):
    save_merged(build_model, tmp_path / "merged.onnx", ["k"])
    np.save(tmp_path / "none.npy", np.zeros(0, bool))
    with pytest.raises(ModelError, match="chooses an If's branch and holds no value"):
        process_model(tmp_path / "merged.onnx", None, BindingRequest.parse(inputs=[f"flag={tmp_path / 'none.npy'}"]))


def test_two_files_of_one_name_are_two_workloads_apart(tmp_path):
    from benanza.analysis.stored import binding_names

    doc = {"schema_version": 1, "model": "m", "model_key": "k", "batch_size": 1, "runtime": "r", "variant": "v"}
    doc |= {"layers": [], "units": [], "unit_keys": [], "shapes": {"n": []}}
    labels = []
    for folder, value in (("a", 1), ("b", 2)):
        (tmp_path / folder).mkdir()
        np.save(tmp_path / folder / "x.npy", np.array(value, np.int64))
        labels.append(parse_input_flags([f"n={tmp_path / folder / 'x.npy'}"])["n"].label())
    plans = [StoredPlan.from_doc({**doc, "model_key": f"k{i}", "fed": {"n": label}}) for i, label in enumerate(labels)]
    names = [p.model for p in binding_names(plans)]
    assert len(set(names)) == 2 and all(name.startswith("m (n from x.npy@") for name in names)


def test_the_command_lines_inputs_replace_the_configs(files):
    cfg = FleetConfig(systems=[SystemConfig(name="a", runtimes=["null"])], inputs=[f"n={files / 'n.npy'}"])
    np.save(files / "n2.npy", np.array(31, np.int64))
    changed = cfg.with_overrides(inputs=[f"n={files / 'n2.npy'}"])
    assert changed.inputs == [f"n={files / 'n2.npy'}"] and set(changed.binding_request().inputs) == {"n"}
