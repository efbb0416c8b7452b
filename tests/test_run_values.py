"""Integer values a model computes at run time (lengths, positions), carried into its layers' benchmarks.

An LLM decoder as onnxruntime-genai's builder exports it computes, from its attention mask,
the lengths its ``GroupQueryAttention`` reads. Fed zeros, the model whole failed
(``seqlens_k[0] = -1 is out of range``) and the attention layer alone attended over one token.
Real ONNX Runtime throughout: the model runs whole, and each layer's benchmark runs alone.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from decoders import decoder, shapes
from onnx import TensorProto, helper, numpy_helper

from benanza.bench.build import build_onnx
from benanza.bench.generate import plan_model
from benanza.local import analyze, bench, open_local
from benanza.model.network import Network, network_of
from benanza.model.process import process_model
from benanza.model.run_values import input_fills, run_values
from benanza.runtimes.onnxruntime import feeds_for, session_options
from benanza.settings import HarnessSettings

F, I64, I32, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL
MS = "com.microsoft"


@pytest.fixture
def decoder_file(build_model, tmp_path):
    path = tmp_path / "decoder.onnx"
    onnx.save(decoder(build_model), path)
    return path


def test_integer_inputs_are_ones_unless_they_index_or_set(build_model) -> None:
    """Ids reach a Gather's indices (directly or cast and unsqueezed): zeros stay in range. A mask reaches
    arithmetic: ones, every position valid; a boolean one cast to floats: True. A Reshape's shape and a
    Where's condition are settings: zeros, as before (a shape of ones would be refused)."""
    model = build_model(
        [
            helper.make_node("Gather", ["table", "input_ids"], ["x"], name="ids"),
            helper.make_node("Cast", ["token_type_ids"], ["tt"], to=I32),
            helper.make_node("Unsqueeze", ["tt", "zero"], ["tt1"]),
            helper.make_node("Gather", ["types", "tt1"], ["t"], name="types"),
            helper.make_node("ReduceSum", ["attention_mask", "zero"], ["n"], keepdims=0),
            helper.make_node("Shape", ["attention_mask"], ["mask_shape"]),  # its length, not its values
            helper.make_node("ConstantOfShape", ["mask_shape"], ["by_mask"]),
            helper.make_node("Where", ["pick", "x", "x"], ["y"]),
            helper.make_node("Cast", ["keep"], ["keep_f"], to=F),
            helper.make_node("Mul", ["x", "keep_f"], ["kept"]),
            helper.make_node("Reshape", ["x", "shape"], ["flat"]),
        ],
        [
            ("input_ids", I64, [1, 4]),
            ("token_type_ids", I64, [1, 4]),
            ("attention_mask", I64, [1, 4]),
            ("keep", B, [1, 4, 8]),
            ("pick", B, [1, 4, 8]),
            ("shape", I64, [3]),
        ],
        [
            ("y", F, [1, 4, 8]),
            ("t", F, None),
            ("n", I64, None),
            ("kept", F, None),
            ("flat", F, None),
            ("by_mask", F, None),
        ],
        {"table": np.ones((10, 8), np.float32), "types": np.ones((1, 8), np.float32), "zero": np.array([0])},
    )
    fills = {"input_ids": 0, "token_type_ids": 0, "attention_mask": 1, "keep": 1, "pick": 0, "shape": 0}
    assert input_fills(model) == fills
    feeds = feeds_for(model)
    assert feeds["attention_mask"].tolist() == [[1, 1, 1, 1]] and feeds["keep"].all()
    assert not feeds["input_ids"].any() and feeds["token_type_ids"].dtype == np.int64
    # a type vocabulary of one (RoBERTa's): ones would be out of range, zeros run
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_the_lengths_a_model_computes_are_run_from_its_inputs(decoder_file) -> None:
    processed = process_model(decoder_file, None, shapes(past=255))
    (gqa,) = [layer for layer in processed.graph.layers if layer.op_type == "GroupQueryAttention"]
    by_name = {i.tensor.name: i for i in gqa.inputs}
    assert by_name["seqlens_k"].kind == "activation" and by_name["seqlens_k"].value == (255,)
    assert by_name["total_seq"].value == (256,)  # from the bound shape: a constant value, as before
    assert by_name["q"].value is None  # data: synthetic, as always
    # the key says how much work: another cache length is another benchmark
    other = process_model(decoder_file, None, shapes(past=127))
    (gqa_other,) = [layer for layer in other.graph.layers if layer.op_type == "GroupQueryAttention"]
    assert gqa_other.layer_key != gqa.layer_key


def test_only_integer_bookkeeping_is_run(build_model) -> None:
    """An ArgMax over float data is the model's work: never run, left to synthetic feeds."""
    model = build_model(
        [
            helper.make_node("ArgMax", ["x"], ["best"], axis=1, keepdims=0),
            helper.make_node("Add", ["best", "n"], ["shifted"]),
            helper.make_node("Gather", ["x", "shifted"], ["y"], axis=1),
            helper.make_node("Mul", ["n", "n"], ["n2"]),
            helper.make_node("Gather", ["x", "n2"], ["z"], axis=1),
        ],
        [("x", F, [1, 8]), ("n", I64, [1])],
        [("y", F, [1, 1]), ("z", F, [1, 1])],
    )
    types = {"x": ((1, 8), "float32"), "n": ((1,), "int64"), "best": ((1,), "int64"), "shifted": ((1,), "int64"),
             "n2": ((1,), "int64"), "y": ((1, 1), "float32"), "z": ((1, 1), "float32")}  # fmt: skip
    values = run_values(model, types, {"n": np.array([3], np.int64)})
    assert values == {"n": (3,), "n2": (9,)}


def test_a_layer_alone_is_fed_the_value_and_nothing_folds_it(decoder_file) -> None:
    processed = process_model(decoder_file, None, shapes(past=31))
    (index,) = [layer.index for layer in processed.graph.layers if layer.op_type == "GroupQueryAttention"]
    _, network = network_of(processed.graph, [index])
    assert Network.from_doc(network.to_doc()) == network  # the value travels with the spec
    model = build_onnx(network, sink=True)
    (value_input,) = [t for t in model.graph.initializer if t.name in {i.name for i in model.graph.input}]
    assert numpy_helper.to_array(value_input).tolist() == [31]
    feeds = feeds_for(model)
    assert value_input.name not in feeds
    options = session_options("extended", 1)
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    session.run(None, feeds)
    # ONNX Runtime may be fed it, so its optimizers keep it an input: the attention's length as given
    assert value_input.name in {i.name for i in session.get_overridable_initializers()}


def test_the_decoder_is_benchmarked_whole_and_layer_by_layer(decoder_file, tmp_path) -> None:
    """Before: the model whole failed (``seqlens_k[0] = -1``), so its bound had no end to end."""
    fast = HarnessSettings(warmup_runs=1, min_samples=3, min_time_s=0.001, max_time_s=0.05, kernel_runs=2)
    bound = shapes(past=63)
    ctx = open_local(f"sqlite:///{tmp_path / 'd.db'}", runtime_options={"threads": 1}, system="rv", settings=fast)
    try:
        plan = plan_model(process_model(decoder_file, None, bound), ctx.runtime, request=bound)
        assert plan.not_benchmarked == ()
        summary = bench(ctx, [plan], e2e=True)
        assert summary.failed == 0 and summary.measured > 0, [r.reason for r in summary.records if r.reason]
        (row,) = analyze(ctx, [plan])
    finally:
        ctx.close()
    assert row.coverage == 1.0 and row.e2e_ms is not None and row.e2e_ms > 0


def test_an_ir3_models_integer_values_are_run_too(build_model) -> None:
    """IR 3 (the zoo's exports) lists every initializer as a graph input; the part run_values runs keeps
    the model's IR version with its initializers apart, which ONNX Runtime takes."""
    model = build_model(
        [
            helper.make_node("ReduceSum", ["mask", "axes"], ["n"], keepdims=0),
            helper.make_node("Sub", ["n", "one"], ["last"]),
            helper.make_node("Gather", ["x", "last"], ["y"], axis=1),
        ],
        [("x", F, [1, 8]), ("mask", I64, [1, 6])],
        [("y", F, None)],
        {"axes": np.array([1], np.int64), "one": np.array([1], np.int64)},
    )
    model.ir_version = 3
    model.graph.input.extend(helper.make_tensor_value_info(t.name, I64, list(t.dims)) for t in model.graph.initializer)
    types = {"x": ((1, 8), "float32"), "mask": ((1, 6), "int64"), "n": ((1,), "int64"), "last": ((1,), "int64")}
    types |= {"axes": ((1,), "int64"), "one": ((1,), "int64")}
    assert run_values(model, types, {"mask": np.ones((1, 6), np.int64)})["last"] == (5,)
