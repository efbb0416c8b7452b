"""``--dim NAME=N``: a symbolic dimension bound by name in every input that has it.

A decoder exported with its KV cache (onnxruntime-genai, Optimum) has two cache inputs per
layer, ``past_key_values.<i>.key`` and ``.value``, each ``[batch_size, kv_heads,
past_sequence_length, head_size]``: 64 ``--shape`` flags for a 32-layer model, or one
``--dim past_sequence_length=128`` (what ``onnxruntime_perf_test -f`` does for ONNX Runtime).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from cli_checks import json_command
from decoders import HEAD, HIDDEN, KV_HEADS, decoder
from onnx import TensorProto, helper

from benanza.bench.spec import model_binding, requested_binding
from benanza.config import FleetConfig, SystemConfig
from benanza.errors import UnboundDimensionError, UsageError
from benanza.model.request import BindingRequest, parse_dim_overrides
from benanza.model.shapes import bind_shapes
from benanza.store import open_store

F = TensorProto.FLOAT
LAYERS = 3
ENV = {"BENANZA_DB": None, "BENANZA_SYSTEM": "dims-test", "BENANZA_HARNESS_MIN_SAMPLES": "3"}
FAST = ["--min-time", "0.001", "--max-time", "0.02", "--threads", "1", "--granularity", "1"]


def invoke(*args: object) -> list | dict:
    """A command with this file's environment, its JSON output read (``cli_checks.json_command``)."""
    return json_command(ENV, *args)


def main_job(path, uri: str, *flags: str) -> list[dict]:
    """``benanza run`` of one model into ``uri`` with the harness's shortest settings: its rows."""
    return invoke("run", path, "--db", uri, *FAST, *flags)


@pytest.fixture
def cached_decoder(build_model) -> onnx.ModelProto:
    """A decoder step's shape: ``input [batch_size, sequence_length, 8]`` and, per layer, a key and a
    value cache ``[batch_size, 2, past_sequence_length, 4]`` concatenated with the step's own
    projection and reduced into the output, as attention over the cache reads it."""
    rng = np.random.default_rng(0)
    nodes, inputs, inits = [], [("input", F, ["batch_size", "sequence_length", 8])], {}
    nodes.append(helper.make_node("Reshape", ["input", "to4"], ["step"]))  # [b, 2, s, 4]
    inits["to4"] = np.array([0, 2, -1, 4], dtype=np.int64)
    last = "step"
    for i in range(LAYERS):
        for part in ("key", "value"):
            name = f"past_key_values.{i}.{part}"
            inputs.append((name, F, ["batch_size", 2, "past_sequence_length", 4]))
            nodes.append(helper.make_node("Concat", [name, "step"], [f"present.{i}.{part}"], axis=2))
        inits[f"w{i}"] = rng.standard_normal((4, 4)).astype(np.float32)
        nodes.append(helper.make_node("MatMul", [f"present.{i}.key", f"w{i}"], [f"k{i}"]))
        nodes.append(helper.make_node("Add", [f"k{i}", f"present.{i}.value"], [f"a{i}"]))
        nodes.append(helper.make_node("ReduceMean", [f"a{i}", "axes"], [f"r{i}"], keepdims=1))
        nodes.append(helper.make_node("Add", [last, f"r{i}"], [f"h{i}"]))
        last = f"h{i}"
    inits["axes"] = np.array([2], dtype=np.int64)
    nodes.append(helper.make_node("Identity", [last], ["logits"]))
    outputs = [("logits", F, None)]
    return build_model(nodes, inputs, outputs, initializers=inits, opset=18)


def test_a_dim_binds_every_input_that_has_it(cached_decoder):
    binding = bind_shapes(
        cached_decoder, "d.onnx", 1, BindingRequest(dims={"sequence_length": 1, "past_sequence_length": 16})
    )
    assert binding.shapes["input"] == (1, 1, 8)
    for i in range(LAYERS):
        assert binding.shapes[f"past_key_values.{i}.key"] == (1, 2, 16, 4)
        assert binding.shapes[f"past_key_values.{i}.value"] == (1, 2, 16, 4)


def test_shape_wins_over_dim_and_dim_over_batch(cached_decoder):
    binding = bind_shapes(
        cached_decoder,
        "d.onnx",
        1,
        BindingRequest(
            shapes={"past_key_values.0.key": (3, 2, 5, 4)},
            dims={"sequence_length": 1, "past_sequence_length": 16, "batch_size": 3},
        ),
    )
    assert binding.shapes["past_key_values.0.key"] == (3, 2, 5, 4)  # --shape names the input
    assert binding.shapes["past_key_values.0.value"] == (3, 2, 16, 4)  # --dim names batch_size: not --batch
    assert binding.shapes["input"] == (3, 1, 8)


def test_a_dim_no_input_has_binds_nothing_and_an_unbound_one_names_the_flag(cached_decoder):
    binding = bind_shapes(
        cached_decoder, "d.onnx", 2, BindingRequest(dims={"sequence_length": 1, "past_sequence_length": 4, "height": 9})
    )
    assert binding.shapes["input"] == (2, 1, 8)
    with pytest.raises(UnboundDimensionError) as info:
        bind_shapes(cached_decoder, "d.onnx", 1, BindingRequest(dims={"sequence_length": 1}))
    message = str(info.value)
    assert message.startswith("d.onnx: input 'past_key_values.0.key' dimension 2 ('past_sequence_length')")
    assert "--dim past_sequence_length=N" in message


def test_every_unbound_dimension_is_named_in_one_error(build_model):
    """An Optimum decoder leaves four names free; one error at a time made a user run four times."""
    model = build_model(
        [helper.make_node("Concat", ["past", "step"], ["all"], axis=1), helper.make_node("Identity", ["mask"], ["m"])],
        [
            ("past", F, ["batch_size", "past_sequence_length", "width"]),
            ("step", F, ["batch_size", "sequence_length", "width"]),
            ("mask", TensorProto.INT64, ["batch_size", "past_sequence_length + sequence_length"]),
            ("bare", F, [2, None]),
        ],
        [("all", F, None), ("m", TensorProto.INT64, None)],
    )
    with pytest.raises(UnboundDimensionError) as info:
        bind_shapes(model, "d.onnx", request=BindingRequest(dims={"width": 8}))
    message = str(info.value)
    assert "\n" not in message
    # the batch is not among them: 1 without --batch (``bind_shapes``)
    assert message.startswith("d.onnx: input 'past' dimension 1 ('past_sequence_length') is not bound, nor are ")
    for listed in (
        "'sequence_length' (input 'step' dimension 1)",
        "input 'bare' dimension 1",
    ):
        assert listed in message
    assert "'past_sequence_length + sequence_length'" not in message  # bound by the names listed
    # each name once, however many inputs have it; an expression's names, not the expression
    flags = message.split("; pass ", 1)[1]
    assert flags == (
        "--dim past_sequence_length=N --dim sequence_length=N --shape bare=DIMS (or --shape INPUT=DIMS for each input)"
    )
    binding = bind_shapes(
        model,
        "d.onnx",
        1,
        BindingRequest({"bare": (2, 5)}, {"width": 8, "past_sequence_length": 3, "sequence_length": 1}),
    )
    assert binding.shapes["mask"] == (1, 4)
    with pytest.raises(
        UnboundDimensionError, match=r"'sequence_length'\) is not bound; pass --dim sequence_length=N or"
    ):
        bind_shapes(model, "d.onnx", 1, BindingRequest({"bare": (2, 5)}, {"width": 8, "past_sequence_length": 3}))


@pytest.mark.parametrize(
    "texts, message",
    [
        (["past"], "expected NAME=N"),
        (["=4"], "expected NAME=N"),
        (["past=-1"], "integers from 0"),
        (["past=1x2"], "integers from 0"),
        (["past=4", "past=5"], "given twice"),
    ],
)
def test_bad_dims_are_one_line_usage_errors(texts, message):
    with pytest.raises(UsageError, match=message):
        parse_dim_overrides(texts)


def test_a_spec_carries_dims_only_when_given_so_other_specs_keep_their_ids():
    assert requested_binding(1, BindingRequest({"x": (1, 3)})) == {"batch": 1, "shapes": {"x": [1, 3]}}
    given = requested_binding(1, BindingRequest(dims={"s": 1, "p": 16}))
    assert given == {"batch": 1, "shapes": {}, "dims": {"p": 16, "s": 1}}
    assert model_binding({"path": "m.onnx", **given}) == (1, BindingRequest(dims={"p": 16, "s": 1}))


def test_the_main_job_binds_a_kv_cache_by_dims_and_runs_the_model_end_to_end(tmp_path, cached_decoder):
    path = tmp_path / "decoder.onnx"
    onnx.save(cached_decoder, path)
    uri = f"sqlite:///{tmp_path / 'dims.db'}"
    (row,) = main_job(path, uri, "--dim", "sequence_length=1", "--dim", "past_sequence_length=16")
    assert row["coverage"] == 1.0 and row["e2e_ms"] is not None  # the runtime loaded the model with the dims
    with open_store(uri, read_only=True) as store:
        (plan,) = store.plans()
        assert plan.shapes["past_key_values.2.value"] == (1, 2, 16, 4) and plan.shapes["input"] == (1, 1, 8)
        (model,) = [r for r in store.records(kind="model") if not r.settings.get("session")]
        assert model.outcome == "ok" and model.spec["model"]["dims"] == {
            "past_sequence_length": 16,
            "sequence_length": 1,
        }


def test_a_fleet_config_binds_dims_and_the_flag_adds_to_them(tmp_path, cached_decoder):
    from benanza.fleet.driver import plan_corpus

    path = tmp_path / "decoder.onnx"
    onnx.save(cached_decoder, path)
    cfg = FleetConfig(
        systems=[SystemConfig(name="a", runtimes=["null"])],
        models=[path],
        db=f"sqlite:///{tmp_path / 'f.db'}",
        dims={"sequence_length": 1},
    )
    corpus = plan_corpus(cfg)
    assert corpus.models == 0 and "past_sequence_length" in corpus.model_errors[0]["error"]
    cfg = cfg.with_overrides(dims={"past_sequence_length": 8})
    assert cfg.dims == {"sequence_length": 1, "past_sequence_length": 8}
    corpus = plan_corpus(cfg)
    assert corpus.models == 1
    (work,) = corpus.works.values()
    (plan,) = work.plans
    assert plan.shapes["past_key_values.1.key"] == (1, 2, 8, 4)


@pytest.fixture
def gqa_decoder(build_model) -> onnx.ModelProto:
    return decoder(build_model)


@pytest.mark.parametrize(("past", "steps"), [(0, 4), (6, 1), (16, 1)])
def test_attention_over_a_kv_cache_is_shaped_as_onnx_runtime_runs_it(gqa_decoder, process_proto, past, steps):
    """The present cache is ``max(past, total)`` long, as ONNX Runtime's kernel makes it: a prompt over an
    empty cache (``--dim past_sequence_length=0``) and a step after it, not the past's length (what ORT's
    symbolic inference gives: a present of length 0 failed the first step's benchmark)."""
    from benanza.model.process import process_model

    total = past + steps
    graph = process_model(
        "gqa.onnx", 1, BindingRequest(dims={"seq": steps, "past": past, "total": total}), proto=gqa_decoder
    ).graph
    (gqa,) = [layer for layer in graph.layers if layer.op_type == "GroupQueryAttention"]
    present = (1, KV_HEADS, total, HEAD)
    assert [o.shape for o in gqa.outputs] == [(1, steps, HIDDEN), present, present]
    session = onnxruntime.InferenceSession(gqa_decoder.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {
        "input_ids": np.zeros((1, steps), np.int64),
        "attention_mask": np.ones((1, total), np.int64),
        "past_key": np.zeros((1, KV_HEADS, past, HEAD), np.float32),
        "past_value": np.zeros((1, KV_HEADS, past, HEAD), np.float32),
    }
    assert [o.shape for o in session.run(None, feeds)][1:] == [present] * 2


def test_the_main_job_measures_a_prompt_over_an_empty_kv_cache(tmp_path, gqa_decoder):
    path = tmp_path / "gqa.onnx"
    onnx.save(gqa_decoder, path)
    uri = f"sqlite:///{tmp_path / 'prompt.db'}"
    (row,) = main_job(path, uri, "--dim", "seq=4", "--dim", "past=0", "--dim", "total=4")
    assert row["coverage"] == 1.0 and row["missing"] == [] and row["e2e_ms"] is not None


def _static(model: onnx.ModelProto, sizes: dict[str, int]) -> onnx.ModelProto:
    """``model`` with its inputs' named dimensions fixed to ``sizes``, as an export without dynamic axes
    writes them (a prompt step's empty cache a ``dim_value`` of 0)."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    for vi in fixed.graph.input:
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param in sizes:
                d.dim_value = sizes[d.dim_param]  # clears dim_param: one of the two
    return fixed


def test_an_empty_dimension_the_file_fixes_is_bound_empty(gqa_decoder):
    """A ``0`` the file declares is an empty dimension (ONNX Runtime runs that size and no other), not a free
    one to ask a flag for; a leading one is the batch, still free."""
    prompt = _static(gqa_decoder, {"batch": 0, "seq": 4, "past": 0, "total": 4})
    binding = bind_shapes(prompt, "p.onnx", None)
    assert binding.shapes["past_key"] == (1, KV_HEADS, 0, HEAD) and binding.shapes["input_ids"] == (1, 4)
    assert bind_shapes(prompt, "p.onnx", 3).shapes["past_value"] == (3, KV_HEADS, 0, HEAD)
    # nothing left free: no run of the file as exported beside the bound one (which ONNX Runtime runs at a
    # batch of 0 only, where the file fixes that)
    assert not binding.exported
    assert not bind_shapes(_static(gqa_decoder, {"batch": 1, "seq": 4, "past": 0, "total": 4}), "p.onnx").exported
    assert bind_shapes(_static(gqa_decoder, {"seq": 4, "past": 0, "total": 4}), "p.onnx").exported  # the batch free


def test_the_main_job_measures_a_static_prompt_export(tmp_path, gqa_decoder):
    path = tmp_path / "prompt.onnx"
    onnx.save(_static(gqa_decoder, {"batch": 1, "seq": 4, "past": 0, "total": 4}), path)
    (row,) = main_job(path, f"sqlite:///{tmp_path / 'static.db'}")
    assert row["coverage"] == 1.0 and row["missing"] == [] and row["e2e_ms"] is not None
    assert row["exported_e2e_ms"] is None


def test_a_dimension_named_by_an_expression_of_bound_ones_is_computed(build_model):
    """Optimum names a decoder's attention mask ``past_sequence_length + sequence_length``."""
    from benanza.model.shapes import dim_size

    model = build_model(
        [helper.make_node("ReduceSum", ["attention_mask"], ["n"], keepdims=0)],
        [("attention_mask", TensorProto.INT64, ["batch_size", "past_sequence_length + sequence_length"])],
        [("n", TensorProto.INT64, None)],
    )
    binding = bind_shapes(model, "m.onnx", 1, BindingRequest(dims={"past_sequence_length": 128, "sequence_length": 1}))
    assert binding.shapes == {"attention_mask": (1, 129)}
    bound = {"p": 128, "s": 2}
    assert [dim_size(e, bound) for e in ("p + s", "2 * (p - s)", "p // s", "p - 200", "q + 1", "p // 0")] == [
        130,
        252,
        64,
        None,  # negative: not a size
        None,  # a name not bound
        None,
    ]
    assert dim_size("__import__('os').getcwd()", bound) is None  # only arithmetic on names and integers


def test_one_model_at_two_bindings_is_two_rows_and_two_report_pages(tmp_path, build_model):
    """A prompt and a step of one decoder (or BERT at two sequence lengths) at one batch size: the tables
    and the report keyed them by model and batch size alone and showed one, the other's page lost."""
    model = build_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
        [("x", F, ["batch", "sequence", 16])],
        [("z", F, None)],
        initializers={"w": np.ones((16, 16), np.float32)},
    )
    path = tmp_path / "decoder.onnx"
    onnx.save(model, path)
    uri = f"sqlite:///{tmp_path / 'bindings.db'}"
    for sequence, batches in (("1", "1,2"), ("128", "1")):
        main_job(path, uri, "--dim", f"sequence={sequence}", "--batch", batches)
    rows = sorted((r["model"], r["batch_size"]) for r in invoke("analyze", "lower-bound", "--db", uri))
    # batch sizes of one binding stay one model; the bindings are told apart by what differs, the batch B
    assert rows == [("decoder (x=Bx128x16)", 1), ("decoder (x=Bx1x16)", 1), ("decoder (x=Bx1x16)", 2)]
    site = tmp_path / "site"
    invoke("report", "--db", uri, "--out", site)
    assert sorted(p.name for p in (site / "models").glob("*.html")) == [
        "decoder__x_Bx128x16_.html",
        "decoder__x_Bx1x16_.html",
    ]
    # a model stored at one binding keeps its name
    one = f"sqlite:///{tmp_path / 'one.db'}"
    main_job(path, one, "--dim", "sequence=4")
    assert [r["model"] for r in invoke("analyze", "lower-bound", "--db", one)] == ["decoder"]
