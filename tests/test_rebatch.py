"""A static export at another batch (``benanza.model.rebatch``): what it bakes of its batch is rewritten, and the
rebatched model computes, sample by sample, what the export computes (real ONNX Runtime on both)."""

from __future__ import annotations

import logging
import math

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from benanza.model.shapes import prepare_model

F, I64 = TensorProto.FLOAT, TensorProto.INT64
S, H, D = 5, 2, 3  # tokens, heads, head size
E = H * D


def _session(model) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _in_chunks(model, samples: dict[str, np.ndarray], chunk: int) -> list[np.ndarray]:
    sess, total = _session(model), len(next(iter(samples.values())))
    parts = [sess.run(None, {n: a[i : i + chunk] for n, a in samples.items()}) for i in range(0, total, chunk)]
    return [np.concatenate([p[k] for p in parts]) for k in range(len(parts[0]))]


def _same_per_sample(model, old: int, new: int, samples: dict[str, np.ndarray]) -> None:
    """The model prepared at ``new`` (what benanza's end to end runs) against the file, on the same samples."""
    rebatched = prepare_model(model, "mem.onnx", new, keep_branches=True).proto
    ours, theirs = _in_chunks(rebatched, samples, new), _in_chunks(model, samples, old)
    for a, b in zip(ours, theirs, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def _attention(build_model, batch: int, *, cls_token: bool = False, mask: bool = False):
    """A self-attention block as a static export bakes it at ``batch``: ``[B, S, E] -> [B, S, H, D] -> [B*H, S, D]``
    (the batch folded into the heads) ``-> [B, H, S, S]`` (unfolded again); with ``cls_token`` a class token
    concatenated first (a ``[B, 1, E]`` constant, or ``[1, 1, E]`` unexpanded at batch 1), with ``mask`` a
    constant mask of ones broadcast to ``[B, 1, S', S']``."""
    rng = np.random.default_rng(batch)
    s = S + 1 if cls_token else S
    inits = {
        "wq": rng.standard_normal((E, E)).astype(np.float32),
        "heads": np.array([batch, s, H, D], np.int64),
        "folded": np.array([batch * H, s, D], np.int64),
        "unfolded": np.array([batch, H, s, s], np.int64),
        "merged": np.array([batch, s, E], np.int64),
    }
    nodes = []
    x = "x"
    if cls_token:
        token = rng.standard_normal((1, 1, E)).astype(np.float32)
        inits["cls"] = np.repeat(token, batch, axis=0)  # the exporter's folded cls_token.expand(B, -1, -1)
        nodes.append(helper.make_node("Concat", ["cls", "x"], ["xc"], axis=1))
        x = "xc"
    nodes += [
        helper.make_node("MatMul", [x, "wq"], ["q"]),
        helper.make_node("Reshape", ["q", "heads"], ["q4"]),
        helper.make_node("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["qt", "folded"], ["q3"]),
        helper.make_node("Transpose", ["q3"], ["k3"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q3", "k3"], ["scores3"]),
        helper.make_node("Reshape", ["scores3", "unfolded"], ["scores"]),
    ]
    scores = "scores"
    if mask:
        inits["mask"] = np.zeros((batch, 1, s, s), np.float32)
        inits["mask"][..., -1] = -1e4  # the same in every sample: a broadcast the exporter folded
        nodes.append(helper.make_node("Add", ["scores", "mask"], ["masked"]))
        scores = "masked"
    nodes += [
        helper.make_node("Softmax", [scores], ["p"], axis=-1),
        helper.make_node("Reshape", ["p", "folded_p"], ["p3"]),
        helper.make_node("MatMul", ["p3", "q3"], ["o3"]),
        helper.make_node("Reshape", ["o3", "heads_o"], ["o4"]),
        helper.make_node("Transpose", ["o4"], ["ot"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ot", "merged"], ["y"]),
    ]
    inits["folded_p"] = np.array([batch * H, s, s], np.int64)
    inits["heads_o"] = np.array([batch, H, s, D], np.int64)
    return build_model(nodes, [("x", F, [batch, S, E])], [("y", F, [batch, s, E])], inits)


def _samples(total: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(7).standard_normal((total, S, E)).astype(np.float32)}


@pytest.mark.parametrize(("old", "new"), [(1, 3), (2, 1), (2, 3), (2, 4)])
def test_attention_with_its_batch_folded_into_the_heads_computes_the_same_at_another_batch(build_model, old, new):
    """``[B*H, S, D]`` and ``[B, H, S, S]`` targets: the old rule (a leading old batch over a leading old batch)
    rewrote neither (the first's leading dimension is ``B*H``; the second's input's too), and the model failed."""
    _same_per_sample(_attention(build_model, old), old, new, _samples(math.lcm(old, new)))


@pytest.mark.parametrize(("old", "new"), [(1, 4), (2, 1), (2, 3)])
def test_a_class_token_and_a_mask_the_export_folded_are_broadcast_at_another_batch(
    build_model, process_proto, old, new
):
    """A ``[B, 1, E]`` class token (``[1, 1, E]`` at batch 1, its expand dropped) concatenated to the tokens and a
    ``[B, 1, S, S]`` mask of equal slices: one slice, broadcast (the token by an ``Expand`` before the ``Concat``)."""
    model = _attention(build_model, old, cls_token=True, mask=True)
    _same_per_sample(model, old, new, _samples(math.lcm(old, new)))
    layers = {layer.op_type: layer for layer in process_proto(model, batch=new).graph.layers}
    assert layers["Concat"].input_shapes == [[new, 1, E], [new, S, E]]
    assert layers["Add"].input_shapes == [[new, H, S + 1, S + 1], [1, 1, S + 1, S + 1]]


def test_a_sequence_first_reshape_scales_the_axis_the_batch_goes_to(build_model):
    """``[S, B, E] -> [S, B*H, D]`` (a sequence-first attention's): the batch is on axis 1 of both."""
    old, new = 2, 3
    nodes = [
        helper.make_node("Transpose", ["x"], ["xs"], perm=[1, 0, 2]),
        helper.make_node("Reshape", ["xs", "t"], ["xh"]),
        helper.make_node("Transpose", ["xh"], ["y"], perm=[1, 0, 2]),
    ]
    model = build_model(
        nodes, [("x", F, [old, S, E])], [("y", F, [old * H, S, D])], {"t": np.array([S, old * H, D], np.int64)}
    )
    _same_per_sample(model, old, new, _samples(math.lcm(old, new)))


@pytest.mark.parametrize("old", [1, 2])
def test_mask_gather_indices_that_count_the_batch_count_the_new_one(build_model, old):
    """``mask[batch_idx, kv_idx]`` traced with ``batch_idx = arange(B)``: ``GatherND`` indices ``[B, S, 2]`` whose
    first component is the sample; each sample of the new batch must pick its own mask (not the first's)."""
    grid = np.stack(np.meshgrid(np.arange(old), np.arange(S), indexing="ij"), axis=-1).astype(np.int64)
    nodes = [
        helper.make_node("GatherND", ["m", "grid"], ["picked"]),
        helper.make_node("Cast", ["picked"], ["pf"], to=F),
        helper.make_node("Unsqueeze", ["pf", "axis"], ["pf3"]),
        helper.make_node("Mul", ["x", "pf3"], ["y"]),
    ]
    model = build_model(
        nodes,
        [("x", F, [old, S, E]), ("m", I64, [old, S])],
        [("y", F, [old, S, E])],
        {"grid": grid, "axis": np.array([2], np.int64)},
    )
    new = 3
    total = math.lcm(old, new)
    lengths = np.array([1, 3, 5, 2, 4, 5])[:total]
    samples = {**_samples(total), "m": (np.arange(S)[None, :] < lengths[:, None]).astype(np.int64)}
    _same_per_sample(model, old, new, samples)


@pytest.mark.parametrize("old", [1, 2])
def test_a_sequence_first_attention_keeps_each_sample_apart(build_model, old):
    """torch's ``MultiheadAttention`` out-projection: ``[S, B, E] -> [S*B, E]`` (the batch the inner factor of axis
    0), a ``MatMul`` by ``[E, E]``, ``-> [S, B, E]``. At batch 1 ``[S, 1, E] -> [S, E]`` could be ``[S, B*E]`` too:
    the ``MatMul`` that reads it says which."""
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("Transpose", ["x"], ["xl"], perm=[1, 0, 2]),
        helper.make_node("Reshape", ["xl", "t1"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w"], ["proj"]),
        helper.make_node("Reshape", ["proj", "t2"], ["yl"]),
        helper.make_node("Transpose", ["yl"], ["y"], perm=[1, 0, 2]),
    ]
    inits = {
        "t1": np.array([S * old, E], np.int64),
        "t2": np.array([S, old, E], np.int64),
        "w": rng.standard_normal((E, E)).astype(np.float32),
    }
    model = build_model(nodes, [("x", F, [old, S, E])], [("y", F, [old, S, E])], inits)
    _same_per_sample(model, old, 3, _samples(math.lcm(old, 3)))


def test_a_target_the_file_computes_from_its_shapes_is_left_to_follow(build_model):
    """``x.view(1, x.size(0) * x.size(1), E)``, a softmax over the leading axis, and back to ``Shape(x)``: the
    targets follow the new batch at run time; rewritten to the walk's guess, the softmax read other values."""
    old = 2
    nodes = [
        helper.make_node("Shape", ["x"], ["sh"]),
        helper.make_node("Gather", ["sh", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["sh", "i1"], ["s"], axis=0),
        helper.make_node("Mul", ["b", "s"], ["bs"]),
        helper.make_node("Concat", ["one", "bs", "e"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["packed"]),
        helper.make_node("Softmax", ["packed"], ["p"], axis=0),
        helper.make_node("Mul", ["packed", "p"], ["pm"]),
        helper.make_node("Reshape", ["pm", "sh"], ["y"]),
    ]
    consts = {"i0": [0], "i1": [1], "one": [1], "e": [E]}
    model = build_model(
        nodes, [("x", F, [old, S, E])], [("y", F, [old, S, E])], {k: np.array(v, np.int64) for k, v in consts.items()}
    )
    _same_per_sample(model, old, 4, _samples(4))


def test_a_batch_merged_behind_a_leading_one_goes_where_it_is(build_model):
    """``[B, S, E] -> [1, B*S, E]`` with a constant target: the batch goes to axis 1, not the leading 1."""
    old = 2
    nodes = [
        helper.make_node("Reshape", ["x", "t"], ["packed"]),
        helper.make_node("Softmax", ["packed"], ["p"], axis=0),  # over the leading 1: ones, [4, S, E] if batched there
        helper.make_node("Mul", ["packed", "p"], ["pm"]),
        helper.make_node("Reshape", ["pm", "back"], ["y"]),
    ]
    inits = {"t": np.array([1, old * S, E], np.int64), "back": np.array([old, S, E], np.int64)}
    model = build_model(nodes, [("x", F, [old, S, E])], [("y", F, [old, S, E])], inits)
    _same_per_sample(model, old, 4, _samples(4))


def test_heads_as_many_as_the_old_batch_are_not_rebatched(build_model):
    """Exported at batch 4 with 4 heads, a per-head bias ``Expand``ed from ``[1, S, S]`` to ``[H, S, S]``: its
    leading axis meets the scores' heads, not their batch."""
    old, heads = 4, 4
    rng = np.random.default_rng(5)
    nodes = [
        helper.make_node("Expand", ["c", "t"], ["per_head"]),
        helper.make_node("Add", ["x", "per_head"], ["y"]),
    ]
    inits = {"c": rng.standard_normal((1, S, S)).astype(np.float32), "t": np.array([heads, S, S], np.int64)}
    model = build_model(nodes, [("x", F, [old, heads, S, S])], [("y", F, [old, heads, S, S])], inits)
    x = rng.standard_normal((4, heads, S, S)).astype(np.float32)
    for new in (1, 2):
        _same_per_sample(model, old, new, {"x": x})


def test_an_axis_the_batch_grew_that_an_expand_broadcasts_is_named_and_the_rest_goes_on(
    build_model, process_proto, caplog
):
    """``[1, S] -> [4, S]`` at batch 1 (four beams of the one sample): at batch 3 no target says four beams of each;
    named once (the model's end to end prepares it again), left as exported, and the layers before it run."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Expand", ["r", "beams"], ["y"], name="beams_of_one"),
    ]
    model = build_model(nodes, [("x", F, [1, S])], [("y", F, None)], {"beams": np.array([4, S], np.int64)})
    with caplog.at_level(logging.WARNING):
        processed = process_proto(model, batch=3)
        process_proto(model, batch=3)
    said = [r.getMessage() for r in caplog.records if "beams_of_one" in r.getMessage()]
    assert len(said) == 1 and "--batch 3" in said[0] and "left as exported" in said[0] and "mem.onnx" in said[0]
    assert [layer.op_type for layer in processed.graph.layers][:1] == ["Relu"]


def test_data_of_its_own_per_sample_is_not_taken_for_a_broadcast(build_model, process_proto):
    """A ``[B, E]`` constant whose rows differ (a bias per sample) is no folded broadcast: left as it is, the ``Add``
    no longer broadcasts at another batch, and that is said of the layer, not papered over."""
    old = 2
    model = build_model(
        [helper.make_node("Add", ["x", "bias"], ["y"], name="per_sample")],
        [("x", F, [old, E])],
        [("y", F, [old, E])],
        {"bias": np.arange(old * E, dtype=np.float32).reshape(old, E)},
    )
    processed = process_proto(model, batch=3)
    assert not processed.graph.layers
    (left,) = processed.graph.unsupported
    assert left.node == "per_sample"


def test_a_setting_as_long_as_the_old_batch_is_not_rebatched(build_model):
    """``ReduceMean``'s axes ``[-2, -1]`` and ``Unsqueeze``'s ``[1, 2]`` at batch 2, a ``Gather``'s indices
    ``[0, 1]`` along another axis, and token types ``[[0, 0, 1, 1, 1], [0, 1, 1, 1, 1]]`` (two rows always step by
    their difference): as many as the old batch, and none counts the samples."""
    old, new = 2, 3
    types = np.array([[0, 0, 1, 1, 1], [0, 1, 1, 1, 1]], np.int64)
    model = build_model(
        [
            helper.make_node("Gather", ["x", "picked"], ["g"], axis=1),
            helper.make_node("ReduceMean", ["g", "axes"], ["m"], keepdims=1),
            helper.make_node("Unsqueeze", ["scale", "axes12"], ["scale3"]),
            helper.make_node("Mul", ["m", "scale3"], ["y"]),
            helper.make_node("Cast", ["types"], ["typesf"], to=F),
            helper.make_node("Unsqueeze", ["typesf", "axis2"], ["types3"]),
            helper.make_node("Add", ["x", "types3"], ["z"]),
        ],
        [("x", F, [old, S, E]), ("scale", F, [old])],
        [("y", F, [old, 1, 1]), ("z", F, [old, S, E])],
        {
            "picked": np.array([0, 1], np.int64),
            "axes": np.array([-2, -1], np.int64),
            "axes12": np.array([1, 2], np.int64),
            "types": types,
            "axis2": np.array([2], np.int64),
        },
        opset=18,
    )
    total = math.lcm(old, new)
    samples = {**_samples(total), "scale": np.arange(1, total + 1, dtype=np.float32)}
    with pytest.raises(Exception, match=r"Add|Incompatible|broadcast"):
        _same_per_sample(model, old, new, samples)  # the token types are data per sample: the Add fails, said


def test_past_an_op_the_walk_cannot_shape_the_old_rule_is_said(build_model, process_proto, caplog):
    """Control flow (a ``Loop``: what its body computes is not carried through) stops the walk: the ``Reshape``s
    after it keep only the old rule (a leading old batch is the batch), and the warning says so and where."""
    old = 2
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Relu", ["v"], ["v_out"])],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v", F, [old, S, E]),
        ],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), helper.make_tensor_value_info("v_out", F, None)],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Loop", ["trips", "", "r"], ["g"], body=body, name="control_flow"),
        helper.make_node("Reshape", ["g", "heads"], ["y"]),
    ]
    model = build_model(
        nodes,
        [("x", F, [old, S, E])],
        [("y", F, None)],
        {"heads": np.array([old, S, H, D], np.int64), "trips": np.array(1, np.int64)},
    )
    with caplog.at_level(logging.WARNING):
        processed = process_proto(model, batch=3)
    (said,) = [r.getMessage() for r in caplog.records if "control_flow" in r.getMessage()]
    assert "not carried past node control_flow (Loop)" in said and "1 Reshape target(s)" in said
    reshape = next(layer for layer in processed.graph.layers if layer.op_type == "Reshape")
    assert reshape.output_shapes == [[3, S, H, D]]


def _with_int4_projection(model):
    """``model`` with its first ``MatMul`` by a weight made ``com.microsoft::MatMulNBits`` (a 4-bit weight in one
    block of 16 per output column, as ``MatMulNBitsQuantizer`` writes an int4 export): ONNX has no schema for it."""
    node = model.graph.node[0]
    assert node.op_type == "MatMul"
    rng = np.random.default_rng(5)
    packed, scales = f"{node.input[1]}_q4", f"{node.input[1]}_scales"
    model.graph.initializer.extend(
        [
            helper.make_tensor(packed, TensorProto.UINT8, [E, 1, 8], rng.integers(0, 256, E * 8).tolist()),
            helper.make_tensor(scales, F, [E], (rng.random(E) * 0.1 + 0.01).tolist()),
        ]
    )
    int4 = helper.make_node(
        "MatMulNBits", [node.input[0], packed, scales], list(node.output), domain="com.microsoft",
        K=E, N=E, bits=4, block_size=16,
    )  # fmt: skip
    model.graph.node.remove(node)
    model.graph.node.insert(0, int4)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


@pytest.mark.parametrize(("old", "new"), [(1, 3), (2, 3)])
def test_a_contrib_op_is_shaped_by_onnx_runtime_and_the_walk_goes_on(build_model, process_proto, caplog, old, new):
    """An int4 export's ``MatMulNBits`` in front of attention whose batch is folded into the heads: ONNX Runtime's
    symbolic inference shapes it at the new batch, and the ``[B*H, S, D]`` targets after it are rewritten (the old
    rule, a leading old batch, rewrote none of them and the model failed)."""
    model = _with_int4_projection(_attention(build_model, old))
    with caplog.at_level(logging.WARNING):
        _same_per_sample(model, old, new, _samples(math.lcm(old, new)))
        processed = process_proto(model, batch=new)
    assert not [r.getMessage() for r in caplog.records if "not carried past" in r.getMessage()]
    assert processed.graph.unsupported == ()
    assert {tuple(layer.output_shapes[0]) for layer in processed.graph.layers if layer.op_type == "Softmax"} == {
        (new, H, S, S)
    }


@pytest.mark.parametrize("old", [1, 2])
def test_a_buffer_gathered_per_sample_is_as_long_as_the_new_batch(build_model, old):
    """RoBERTa's token types: a ``[1, 512]`` buffer expanded to the batch (folded: ``[B, 512]`` of equal rows) read by
    ``GatherElements`` at each sample's positions ``[B, S]``: its indices may reach no row past its data's, so the
    buffer takes as many rows as the new batch (one row broadcasts nowhere here)."""
    buffer = np.tile((np.arange(64) % 3).astype(np.float32), (old, 1))
    nodes = [
        helper.make_node("GatherElements", ["buffer", "positions"], ["picked"], axis=1),
        helper.make_node("Unsqueeze", ["picked", "axis"], ["picked3"]),
        helper.make_node("Add", ["x", "picked3"], ["y"]),
    ]
    model = build_model(
        nodes,
        [("x", F, [old, S, E]), ("positions", I64, [old, S])],
        [("y", F, [old, S, E])],
        {"buffer": buffer, "axis": np.array([2], np.int64)},
    )
    new = 3
    total = math.lcm(old, new)
    positions = np.random.default_rng(2).integers(0, 64, (total, S)).astype(np.int64)
    _same_per_sample(model, old, new, {**_samples(total), "positions": positions})


@pytest.mark.parametrize("old", [1, 2])
def test_a_qoperator_int8_export_at_another_batch_computes_what_the_file_does(build_model, tmp_path, old):
    """``quantize_static`` in QOperator format makes the class token's ``Concat`` a ``com.microsoft::QLinearConcat``
    of a baked uint8 token and the attention's ``Softmax`` a ``QLinearSoftmax``, ops ONNX has no schema for and ONNX
    Runtime's symbolic inference no rule for: its own inference shapes them (a session of the node alone), and the
    token is broadcast to the new batch as a ``Concat``'s is. Fixed scales: every sample computes as in the file."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Samples(CalibrationDataReader):
        def __init__(self) -> None:
            self.left = [{"x": _samples(old * 4)["x"][i * old : (i + 1) * old]} for i in range(4)]

        def get_next(self):
            return self.left.pop() if self.left else None

    path, quantized = tmp_path / "float.onnx", tmp_path / "qop.onnx"
    onnx.save(_attention(build_model, old, cls_token=True, mask=True), path)
    quantize_static(
        str(path), str(quantized), Samples(), quant_format=QuantFormat.QOperator,
        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
    )  # fmt: skip
    model = onnx.load(quantized)
    contrib = {n.op_type for n in model.graph.node if n.domain == "com.microsoft"}
    assert {"QLinearConcat", "QLinearSoftmax"} <= contrib
    _same_per_sample(model, old, 3, _samples(math.lcm(old, 3)))


def _qoperator(nodes, shape, inits, elem=TensorProto.UINT8):
    """A QOperator graph of ``nodes`` between a ``QuantizeLinear`` of ``x`` (of ``shape``) and a ``DequantizeLinear``
    of ``q``."""
    import onnx

    dtype = helper.tensor_dtype_to_np_dtype(elem)
    scales = {"s": np.array(0.05, np.float32), "z": np.array(0, dtype)}
    graph = helper.make_graph(
        [
            helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
            *nodes,
            helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
        ],
        "qoperator",
        [helper.make_tensor_value_info("x", F, shape)],
        [helper.make_tensor_value_info("y", F, None)],
        [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in {**scales, **inits}.items()],
    )
    imports = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=imports)


def test_an_int8_token_the_walk_broadcasts_is_inferred_at_its_new_shape():
    """An int8 ``QLinearConcat`` of a ``[1, 1, E]`` token (a small constant, which the one-node model embeds) with
    ``[B, 2, E]``: embedded at its old shape it contradicted the shape the walk broadcast it to, the walk stopped
    there and the ``[B*3, E]`` target after it stayed ``[3, E]``."""
    concat = helper.make_node(
        "QLinearConcat", ["s", "z", "tok", "s", "z", "xq", "s", "z"], ["cq"], domain="com.microsoft", axis=1
    )
    nodes = [concat, helper.make_node("Reshape", ["cq", "target"], ["q"])]
    inits = {"tok": np.arange(4, dtype=np.int8).reshape(1, 1, 4), "target": np.array([3, 4], np.int64)}
    model = _qoperator(nodes, [1, 2, 4], inits, TensorProto.INT8)
    samples = {"x": np.random.default_rng(2).standard_normal((3, 2, 4)).astype(np.float32)}
    _same_per_sample(model, 1, 3, samples)


def test_quantized_data_of_its_own_per_sample_is_not_taken_for_indices():
    """A uint8 constant read by ``QLinearAdd`` at an old batch of 2 whose rows differ: its integers are quantized
    values, not indices counting the batch, so no third row is made up (the model is left to fail, said per layer)."""
    from onnx import numpy_helper

    per_sample = np.array([[10, 10, 10, 10], [200, 50, 7, 90]], np.uint8)
    add = helper.make_node("QLinearAdd", ["xq", "s", "z", "c", "s", "z", "s", "z"], ["q"], domain="com.microsoft")
    model = _qoperator([add], [2, 4], {"c": per_sample})
    proto = prepare_model(model, "mem.onnx", 3, keep_branches=True).proto
    [node] = [n for n in proto.graph.node if n.op_type == "QLinearAdd"]
    read = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}[node.input[3]]
    np.testing.assert_array_equal(read, per_sample)


def test_an_op_neither_onnx_nor_onnx_runtime_shapes_stops_the_walk_and_is_said(build_model, process_proto, caplog):
    """An op of a domain no runtime here knows: neither ONNX Runtime's symbolic inference nor a session shapes it, so
    the walk stops there, past it only the old rule rewrites targets, and the warning names it."""
    old = 2
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Scramble", ["r"], ["g"], domain="example.custom", name="custom_op"),
        helper.make_node("Reshape", ["g", "heads"], ["y"]),
    ]
    model = build_model(
        nodes,
        [("x", F, [old, S, E])],
        [("y", F, None)],
        {"heads": np.array([old, S, H, D], np.int64)},
        extra_opsets={"example.custom": 1},
        check=False,
    )
    with caplog.at_level(logging.WARNING):
        processed = process_proto(model, batch=3)
    (said,) = [r.getMessage() for r in caplog.records if "not carried past node custom_op" in r.getMessage()]
    assert "(Scramble)" in said and "1 Reshape target(s)" in said
    assert any(u.op_type == "Scramble" for u in processed.graph.unsupported)


def _recurrent(build_model, op: str, old: int, *, layout: int = 0, state=None, expanded: bool = False):
    """A batch-first sequence into a bidirectional ``op`` (``LSTM``, ``GRU``, ``RNN``) whose zero initial state the
    export baked at batch ``old`` (PyTorch's dynamo exporter folds ``h0`` of ``[directions, B, hidden]`` into a
    constant; ``expanded``: TorchScript's expands that constant to ``[2, B, hidden]``, ``B`` read off the sequence's
    shape); ``layout`` 1: the op reads ``[B, S, input]`` and its state ``[B, directions, hidden]``."""
    hidden, gates = 4, {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    rng = np.random.default_rng(0)
    weights = {
        "W": rng.standard_normal((2, gates * hidden, E)).astype(np.float32),
        "R": rng.standard_normal((2, gates * hidden, hidden)).astype(np.float32),
        "B": rng.standard_normal((2, 2 * gates * hidden)).astype(np.float32),
    }
    shape = [2, old, hidden] if layout == 0 else [old, 2, hidden]
    weights["h0"] = np.zeros(shape, np.float32) if state is None else state
    states = ["h0", "h0"] if op == "LSTM" else ["h0"]
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2])] if layout == 0 else []
    if expanded:
        weights.update(two=np.array([2]), hidden=np.array([hidden]), one=np.array(1), zero=np.array([0]))
        nodes += [
            helper.make_node("Shape", ["t"], ["shape"]),
            helper.make_node("Gather", ["shape", "one"], ["b"]),
            helper.make_node("Unsqueeze", ["b", "zero"], ["b1"]),
            helper.make_node("Concat", ["two", "b1", "hidden"], ["to"], axis=0),
            helper.make_node("Expand", ["h0", "to"], ["h0_expanded"], name="expand_state"),
        ]
        states = [f"{h}_expanded" for h in states]
    x = "t" if layout == 0 else "x"
    nodes.append(
        helper.make_node(
            op,
            [x, "W", "R", "B", "", *states],
            ["y"],
            hidden_size=hidden,
            direction="bidirectional",
            layout=layout,
            name="rnn",
        )
    )
    nodes.append(helper.make_node("Transpose", ["y"], ["out"], perm=[2, 0, 1, 3] if layout == 0 else [0, 1, 2, 3]))
    return build_model(nodes, [("x", F, [old, S, E])], [("out", F, None)], weights)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize(("old", "new"), [(2, 1), (2, 5), (1, 3)])
@pytest.mark.parametrize("expanded", [False, True])
def test_a_recurrent_op_s_zero_state_baked_at_the_old_batch_is_made_at_the_new(build_model, op, old, new, expanded):
    """A dynamo export of an ``nn.LSTM`` at batch 2 run at batch 1 failed in ONNX Runtime: "Input initial_h must have
    shape {2,1,256}. Actual:{2,2,256}"; a TorchScript one's ``Expand`` of its state at batch 5: "Incompatible
    dimensions". The ``Expand`` the rewrite leaves unread is gone, not run."""
    model = _recurrent(build_model, op, old, expanded=expanded)
    _same_per_sample(model, old, new, _samples(old * new))
    rebatched = prepare_model(model, "mem.onnx", new, keep_branches=True).proto
    assert "Expand" not in {n.op_type for n in rebatched.graph.node}
    assert "h0" not in {i.name for i in rebatched.graph.initializer}  # the state at the old batch: read no more


def test_a_batch_first_recurrent_op_s_state_grows_along_its_leading_axis(build_model):
    """``layout`` 1 (``[B, directions, hidden]``; ONNX Runtime's CPU kernels refuse it, other runtimes run it)."""
    rebatched = prepare_model(_recurrent(build_model, "LSTM", 2, layout=1), "mem.onnx", 3, keep_branches=True).proto
    (lstm,) = [n for n in rebatched.graph.node if n.op_type == "LSTM"]
    shapes = {i.name: list(i.dims) for i in rebatched.graph.initializer}
    assert shapes[lstm.input[5]] == shapes[lstm.input[6]] == [3, 2, 4]


def test_a_recurrent_state_of_its_own_per_sample_is_named_and_left(build_model, caplog):
    """A state that differs from sample to sample is data, not a broadcast: left as exported, and said (its layer
    then fails in the runtime, by name)."""
    state = np.arange(2 * 2 * 4, dtype=np.float32).reshape(2, 2, 4)
    with caplog.at_level(logging.WARNING):
        rebatched = prepare_model(_recurrent(build_model, "GRU", 2, state=state), "mem.onnx", 3).proto
    assert "node rnn (GRU): its input 'h0' of [2, 2, 4] holds its own value per sample" in caplog.text
    (gru,) = [n for n in rebatched.graph.node if n.op_type == "GRU"]
    assert gru.input[5] == "h0"


def test_a_dynamically_quantized_lstm_s_state_is_made_at_the_new_batch_too(build_model, tmp_path):
    """``quantize_dynamic`` makes an ``LSTM`` ONNX Runtime's ``DynamicQuantizeLSTM`` (int8 weights): its state baked at
    batch 2 failed at batch 5 as the float one did. (Its sequence's scale is taken over the whole batch at run time:
    its outputs are not those of the file sample by sample, by design.)"""
    import onnx
    from onnxruntime.quantization import quantize_dynamic

    onnx.save(_recurrent(build_model, "LSTM", 2), tmp_path / "lstm.onnx")
    quantize_dynamic(tmp_path / "lstm.onnx", tmp_path / "lstm_int8.onnx")
    model = onnx.load(tmp_path / "lstm_int8.onnx")
    assert "DynamicQuantizeLSTM" in {n.op_type for n in model.graph.node}
    rebatched = prepare_model(model, "mem.onnx", 5, keep_branches=True).proto
    (out,) = _session(rebatched).run(None, _samples(5))
    assert out.shape == (5, S, 2, 4)


def test_a_recurrent_state_fed_at_the_old_batch_is_named(build_model, caplog):
    """A streaming model's state is an input of its own, ``[directions, B, hidden]``: ``--batch`` sets its leading
    axis, not the batch on its second, and the walk says so by name rather than leaving the runtime to fail."""
    model = _recurrent(build_model, "GRU", 2)
    model.graph.initializer.remove(next(i for i in model.graph.initializer if i.name == "h0"))
    model.graph.input.append(helper.make_tensor_value_info("h0", F, [2, 2, 4]))
    with caplog.at_level(logging.WARNING):
        prepare_model(model, "mem.onnx", 3)
    assert "node rnn (GRU): its input 'h0' of [3, 2, 4] comes from the model's inputs and keeps the old batch" in (
        caplog.text
    )
