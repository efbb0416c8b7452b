"""Shapes for every node: real export patterns, contrib ops, values that decide shapes.

The graphs are built with ``onnx.helper`` the way the exporters write them: TorchScript's
``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` chains and its ``Expand`` of a computed
shape (``Where(Equal(shape, -1), 1, shape)`` over a ``ConstantOfShape``), PyTorch's ``F.pad``
with pads computed from the input's shape (Swin's window padding), and ONNX Runtime's
QOperator int8 graphs with ``com.microsoft`` contrib ops.
"""

from __future__ import annotations

import collections
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from benanza.host_memory import SystemMemory
from benanza.model.graph import InputKind
from benanza.model.shapes import apply_binding, bind_shapes, fold_and_infer

F = TensorProto.FLOAT
I64 = TensorProto.INT64
U8 = TensorProto.UINT8
I8 = TensorProto.INT8
SHAPE_OPS = {"Shape", "Size", "Gather", "Unsqueeze", "Concat", "ConstantOfShape", "Equal", "Where", "Mod", "Slice"}


def i64(*values) -> np.ndarray:
    return np.array(values, np.int64)


def ort_shapes(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, tuple[int, ...]]:
    """Every intermediate tensor's shape as ONNX Runtime computes it (each node output made a graph output)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    known = {o.name for o in m.graph.output}
    for node in m.graph.node:
        for out in node.output:
            if out and out not in known:
                m.graph.output.append(onnx.ValueInfoProto(name=out))
                known.add(out)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return {n: tuple(v.shape) for n, v in zip(names, session.run(None, feeds), strict=True)}


def unknown_shape_reasons(graph) -> list[str]:
    return [f"{u.node}: {u.reason}" for u in graph.unsupported if "shape" in u.reason]


# ================================================================== BERT-style attention (TorchScript export)


def _dims_of(prefix: str, tensor: str, axes: list[int]) -> tuple[list[onnx.NodeProto], list[str]]:
    """``Unsqueeze(Gather(Shape(tensor), axis))`` per axis, as TorchScript writes ``x.size(axis)``."""
    nodes, outs = [], []
    for a in axes:
        nodes += [
            helper.make_node("Shape", [tensor], [f"{prefix}_shape{a}"]),
            helper.make_node("Gather", [f"{prefix}_shape{a}", f"c{a}"], [f"{prefix}_dim{a}"], axis=0),
            helper.make_node("Unsqueeze", [f"{prefix}_dim{a}", "axes0"], [f"{prefix}_udim{a}"]),
        ]
        outs.append(f"{prefix}_udim{a}")
    return nodes, outs


def bert_attention_model(build_model, d: int = 32, heads: int = 4) -> onnx.ModelProto:
    """One encoder attention block as ``torch.onnx.export`` (TorchScript, opset 17) writes it.

    The mask is expanded to ``[batch, 1, seq, seq]`` through TorchScript's ``expand`` pattern,
    heads are split and merged by ``Reshape``s whose targets are computed from ``Shape``,
    and the scale is ``1 / sqrt(q.size(-1))`` (scaled_dot_product_attention).
    """
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["x"], axis=0)]
    # mask: Expand(mask[:, None, None, :], Where(Equal(s, -1 * ones), ones, s)), s = [b, 1, seq, seq]
    dims, (ub, us) = _dims_of("ids", "input_ids", [0, 1])
    nodes += dims
    nodes += [
        helper.make_node("Concat", [ub, "one", us, us], ["mshape_c"], axis=0),
        helper.make_node("Reshape", ["mshape_c", "minus1"], ["mshape"]),
        helper.make_node("Shape", ["mshape"], ["mshape_shape"]),
        helper.make_node("ConstantOfShape", ["mshape_shape"], ["ones"], value=numpy_helper.from_array(i64(1), "v")),
        helper.make_node("Mul", ["ones", "minus1_scalar"], ["minus_ones"]),
        helper.make_node("Equal", ["mshape", "minus_ones"], ["is_minus1"]),
        helper.make_node("Where", ["is_minus1", "ones", "mshape"], ["expand_to"]),
        helper.make_node("Unsqueeze", ["attention_mask", "axes1"], ["m1"]),
        helper.make_node("Unsqueeze", ["m1", "axes2"], ["m2"]),
        helper.make_node("Expand", ["m2", "expand_to"], ["m3"]),
        helper.make_node("Cast", ["m3"], ["m4"], to=F),
        helper.make_node("Sub", ["one_f", "m4"], ["m5"]),
        helper.make_node("Mul", ["m5", "neg_big"], ["mask_add"]),
    ]
    for name, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        dims, (ub_, us_) = _dims_of(name, f"{name}_lin", [0, 1])
        nodes += [
            helper.make_node("MatMul", ["x", f"w_{name}"], [f"{name}_mm"]),
            helper.make_node("Add", [f"b_{name}", f"{name}_mm"], [f"{name}_lin"]),
            *dims,
            helper.make_node("Concat", [ub_, us_, "heads", "minus1"], [f"{name}_target"], axis=0),
            helper.make_node("Reshape", [f"{name}_lin", f"{name}_target"], [f"{name}_heads"]),
            helper.make_node("Transpose", [f"{name}_heads"], [f"{name}_t"], perm=perm),
        ]
    nodes += [
        helper.make_node("Shape", ["q_t"], ["q_shape"]),
        helper.make_node("Slice", ["q_shape", "minus1", "int_max"], ["head_dim"]),
        helper.make_node("Cast", ["head_dim"], ["head_dim_f"], to=F),
        helper.make_node("Sqrt", ["head_dim_f"], ["sqrt_d"]),
        helper.make_node("Div", ["one_f", "sqrt_d"], ["scale"]),
        helper.make_node("MatMul", ["q_t", "k_t"], ["scores_raw"]),
        helper.make_node("Mul", ["scores_raw", "scale"], ["scores"]),
        helper.make_node("Add", ["scores", "mask_add"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "v_t"], ["ctx"]),
        helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
    ]
    dims, (ub_, us_) = _dims_of("ctx", "ctx_t", [0, 1])
    nodes += [
        *dims,
        helper.make_node("Concat", [ub_, us_, "minus1"], ["merge_target"], axis=0),
        helper.make_node("Reshape", ["ctx_t", "merge_target"], ["merged"]),
        helper.make_node("MatMul", ["merged", "w_o"], ["out_mm"]),
        helper.make_node("Add", ["out_mm", "x"], ["y"]),
    ]
    weights = {f"w_{n}": rng.standard_normal((d, d)).astype(np.float32) for n in "qkvo"}
    weights |= {f"b_{n}": rng.standard_normal(d).astype(np.float32) for n in "qkv"}
    consts = {
        "emb": rng.standard_normal((100, d)).astype(np.float32),
        "c0": i64(0)[0],
        "c1": i64(1)[0],
        "axes0": i64(0),
        "axes1": i64(1),
        "axes2": i64(2),
        "one": i64(1),
        "minus1": i64(-1),
        "minus1_scalar": i64(-1)[0],
        "int_max": i64(2**63 - 1),
        "heads": i64(heads),
        "one_f": np.array(1.0, np.float32),
        "neg_big": np.array(-10000.0, np.float32),
    }
    return build_model(
        nodes,
        [("input_ids", I64, ["batch", "seq"]), ("attention_mask", I64, ["batch", "seq"])],
        [("y", F, ["batch", "seq", d])],
        weights | consts,
    )


BERT_LAYERS = set("Gather Add MatMul Reshape Transpose Unsqueeze Expand Cast Sub Mul Softmax".split())


@pytest.mark.parametrize("batch,seq", [(1, 8), (2, 5)])
def test_bert_attention_every_node_shaped_and_shape_arithmetic_folded(build_model, process_proto, batch, seq):
    model = bert_attention_model(build_model)
    processed = process_proto(model, shapes={"input_ids": (batch, seq), "attention_mask": (batch, seq)})
    graph = processed.graph
    assert unknown_shape_reasons(graph) == []
    assert graph.unsupported == ()
    ops = collections.Counter(layer.op_type for layer in graph.layers)
    assert set(ops) <= BERT_LAYERS, ops
    # the shape arithmetic (Gather with output [], Concat with output [4]) is folded, never a layer
    assert all(layer.outputs[0].shape != () for layer in graph.layers), [
        (lay.op_type, lay.output_shapes) for lay in graph.layers if lay.outputs[0].shape == ()
    ]
    assert ops["Gather"] == 1 and ops["Concat"] == 0 and ops["Shape"] == 0
    assert ops["MatMul"] == 6 and ops["Reshape"] == 4
    heads = [lay for lay in graph.layers if lay.op_type == "Reshape"][:3]
    for reshape in heads:
        assert reshape.output_shapes == [[batch, seq, 4, 8]]
        assert reshape.inputs[1].kind is InputKind.VALUE and reshape.inputs[1].value == (batch, seq, 4, -1)
    feeds = {"input_ids": np.zeros((batch, seq), np.int64), "attention_mask": np.ones((batch, seq), np.int64)}
    truth = ort_shapes(model, feeds)
    for layer in graph.layers:
        for out in layer.outputs:
            assert out.shape == truth[out.name], (layer.name, out.name)
    assert graph.shape_method == "onnx"
    assert graph.summary()["shape_method"] == "onnx"


# ================================================================== Swin-style windows: Pad with computed pads


def swin_window_model(build_model, size: int = 9, c: int = 8, window: int = 7) -> onnx.ModelProto:
    """LayerNorm, pad H and W up to a multiple of ``window`` with ``F.pad``'s exported pads, attend per window.

    The pads are ``(window - dim % window) % window``, computed from ``Shape`` and written the way
    PyTorch's exporter writes ``F.pad`` with computed pads: a ``ConstantOfShape`` of zeros joins
    them, then ``Reshape``, ``Slice`` (reversed), ``Transpose``, ``Reshape`` and ``Cast``.
    """
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("LayerNormalization", ["x", "ln_s", "ln_b"], ["xn"], axis=-1)]
    pad_parts = []
    for axis in (2, 1):  # W then H, as F.pad lists the last dimensions first
        nodes += [
            helper.make_node("Shape", ["xn"], [f"s{axis}"]),
            helper.make_node("Gather", [f"s{axis}", f"c{axis}"], [f"d{axis}"], axis=0),
            helper.make_node("Mod", [f"d{axis}", "win"], [f"m{axis}"], fmod=0),
            helper.make_node("Sub", ["win", f"m{axis}"], [f"r{axis}"]),
            helper.make_node("Mod", [f"r{axis}", "win"], [f"p{axis}"], fmod=0),
            helper.make_node("Unsqueeze", [f"p{axis}", "axes0"], [f"up{axis}"]),
        ]
        pad_parts += ["zero1", "zero1", "zero1", f"up{axis}"] if axis == 2 else ["zero1", f"up{axis}"]
    nodes += [
        helper.make_node("Concat", pad_parts, ["given"], axis=0),
        helper.make_node("Shape", ["given"], ["given_shape"]),
        helper.make_node("Gather", ["given_shape", "c0"], ["given_len"], axis=0),
        helper.make_node("Sub", ["eight", "given_len"], ["rest_len"]),
        helper.make_node("Unsqueeze", ["rest_len", "axes0"], ["rest_len1"]),
        helper.make_node("ConstantOfShape", ["rest_len1"], ["rest"], value=numpy_helper.from_array(i64(0), "v")),
        helper.make_node("Concat", ["given", "rest"], ["all_pads"], axis=0),
        helper.make_node("Reshape", ["all_pads", "pairs"], ["pairs2"]),
        helper.make_node("Slice", ["pairs2", "minus1", "int_min", "axes0", "minus1"], ["rev"]),
        helper.make_node("Transpose", ["rev"], ["rev_t"], perm=[1, 0]),
        helper.make_node("Reshape", ["rev_t", "minus1"], ["pads_flat"]),
        helper.make_node("Cast", ["pads_flat"], ["pads"], to=I64),
        helper.make_node("Pad", ["xn", "pads"], ["padded"]),
    ]
    # window partition: [B, Hp/w, w, Wp/w, w, C] -> [B*nW, w*w, C], sizes from Shape(padded)
    parts = []
    for axis in (1, 2):
        nodes += [
            helper.make_node("Shape", ["padded"], [f"ps{axis}"]),
            helper.make_node("Gather", [f"ps{axis}", f"c{axis}"], [f"pd{axis}"], axis=0),
            helper.make_node("Div", [f"pd{axis}", "win"], [f"nw{axis}"]),
            helper.make_node("Unsqueeze", [f"nw{axis}", "axes0"], [f"unw{axis}"]),
        ]
        parts += [f"unw{axis}", "win1"]
    nodes += [
        helper.make_node("Concat", ["minus1", *parts, "chan"], ["part_shape"], axis=0),
        helper.make_node("Reshape", ["padded", "part_shape"], ["parted"]),
        helper.make_node("Transpose", ["parted"], ["parted_t"], perm=[0, 1, 3, 2, 4, 5]),
        helper.make_node("Reshape", ["parted_t", "windows_shape"], ["windows"]),
        helper.make_node("MatMul", ["windows", "w_q"], ["q"]),
        helper.make_node("MatMul", ["windows", "w_k"], ["k"]),
        helper.make_node("Transpose", ["k"], ["k_t"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "k_t"], ["att"]),
        helper.make_node("Softmax", ["att"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "windows"], ["y"]),
    ]
    consts = {
        "ln_s": np.ones(c, np.float32),
        "ln_b": np.zeros(c, np.float32),
        "w_q": rng.standard_normal((c, c)).astype(np.float32),
        "w_k": rng.standard_normal((c, c)).astype(np.float32),
        "c0": i64(0)[0],
        "c1": i64(1)[0],
        "c2": i64(2)[0],
        "win": i64(window)[0],
        "win1": i64(window),
        "axes0": i64(0),
        "zero1": i64(0),
        "eight": i64(8)[0],
        "pairs": i64(-1, 2),
        "minus1": i64(-1),
        "int_min": i64(-(2**63) + 1),
        "chan": i64(c),
        "windows_shape": i64(-1, window * window, c),
    }
    return build_model(nodes, [("x", F, ["b", "h", "w", c])], [("y", F, None)], consts)


def test_swin_pad_with_computed_pads_shapes_every_matmul(build_model, process_proto):
    model = swin_window_model(build_model)
    graph = process_proto(model, shapes={"x": (1, 9, 9, 8)}).graph
    assert unknown_shape_reasons(graph) == []
    assert graph.unsupported == ()
    ops = collections.Counter(layer.op_type for layer in graph.layers)
    assert not set(ops) & SHAPE_OPS, ops
    (pad,) = [lay for lay in graph.layers if lay.op_type == "Pad"]
    assert pad.output_shapes == [[1, 14, 14, 8]]
    assert pad.inputs[1].kind is InputKind.VALUE and pad.inputs[1].value == (0, 0, 0, 0, 0, 5, 5, 0)
    assert ops["MatMul"] == 4
    truth = ort_shapes(model, {"x": np.zeros((1, 9, 9, 8), np.float32)})
    for layer in graph.layers:
        assert [o.shape for o in layer.outputs] == [truth[o.name] for o in layer.outputs], layer.name
    assert graph.shape_method == "onnx"


# ================================================================== ONNX Runtime's QOperator int8 graphs


def qoperator_model(build_model, channels: int = 8) -> onnx.ModelProto:
    """QuantizeLinear, QLinearConv, QLinearAdd, QLinearGlobalAveragePool, QLinearConv, flatten, DequantizeLinear.

    ``QLinearAdd`` and ``QLinearGlobalAveragePool`` are ``com.microsoft`` contrib ops (ONNX has no
    schema for them); the flatten's target is computed from ``Shape`` of the pooled tensor,
    so it can only be folded once that shape is known.
    """
    rng = np.random.default_rng(2)

    def q(name):
        return [f"{name}_s", f"{name}_z"]

    nodes = [
        helper.make_node("QuantizeLinear", ["x", *q("x")], ["xq"]),
        helper.make_node("QLinearConv", ["xq", *q("x"), "w1", *q("w1"), *q("c1"), "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("QLinearAdd", ["c1", *q("c1"), "xq2", *q("x"), *q("add")], ["add"], domain="com.microsoft"),
        helper.make_node("QLinearGlobalAveragePool", ["add", *q("add"), *q("gap")], ["gap"], domain="com.microsoft"),
        helper.make_node("QLinearConv", ["gap", *q("gap"), "w2", *q("w2"), *q("c2")], ["c2"]),
        helper.make_node("Shape", ["c2"], ["c2_shape"]),
        helper.make_node("Gather", ["c2_shape", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["flat_shape"], axis=0),
        helper.make_node("Reshape", ["c2", "flat_shape"], ["flat"]),
        helper.make_node("DequantizeLinear", ["flat", *q("c2")], ["y"]),
    ]
    consts = {
        "xq2": rng.integers(0, 255, (1, channels, 6, 6), dtype=np.uint8),
        "w1": rng.integers(-127, 127, (channels, 3, 3, 3), dtype=np.int8),
        "b1": rng.integers(-100, 100, channels, dtype=np.int32),
        "w2": rng.integers(-127, 127, (10, channels, 1, 1), dtype=np.int8),
        "zero": i64(0)[0],
        "axes0": i64(0),
        "minus1": i64(-1),
    }
    for name, scale in (("x", 0.02), ("c1", 0.1), ("add", 0.15), ("gap", 0.05), ("c2", 0.2)):
        consts[f"{name}_s"] = np.array(scale, np.float32)
        consts[f"{name}_z"] = np.array(128, np.uint8)
    for name in ("w1", "w2"):
        consts[f"{name}_s"] = np.array(0.01, np.float32)
        consts[f"{name}_z"] = np.array(0, np.int8)
    return build_model(
        nodes, [("x", F, ["batch", 3, 6, 6])], [("y", F, None)], consts, extra_opsets={"com.microsoft": 1}
    )


def test_qoperator_contrib_ops_do_not_stop_shapes(build_model, process_proto):
    model = qoperator_model(build_model)
    graph = process_proto(model, batch=1).graph
    assert unknown_shape_reasons(graph) == []
    ops = collections.Counter(layer.op_type for layer in graph.layers)
    assert ops["QLinearConv"] == 2, ops
    assert not set(ops) & SHAPE_OPS, ops  # Shape of the pooled tensor is folded once it is known
    truth = ort_shapes(model, {"x": np.zeros((1, 3, 6, 6), np.float32)})
    for layer in graph.layers:
        assert [o.shape for o in layer.outputs] == [truth[o.name] for o in layer.outputs], layer.name
    (reshape,) = [lay for lay in graph.layers if lay.op_type == "Reshape"]
    assert reshape.inputs[1].kind is InputKind.VALUE and reshape.inputs[1].value == (1, -1)
    assert reshape.output_shapes == [[1, 10]]
    # QLinearAdd is known to ONNX Runtime's symbolic shape inference; QLinearGlobalAveragePool is
    # not, so ONNX Runtime runs it once on synthetic inputs
    assert graph.shape_method == "onnx+symbolic+onnxruntime"
    assert dict(graph.shaped_by)["symbolic"] == 1 and dict(graph.shaped_by)["onnxruntime"] == 1


def test_inspect_says_which_methods_shaped_the_model(build_model, tmp_path):
    from typer.testing import CliRunner

    from benanza.cli import app

    path = tmp_path / "qop.onnx"
    onnx.save(qoperator_model(build_model), path)
    runner = CliRunner()
    result = runner.invoke(app, ["models", "inspect", str(path), "--batch", "1", "--format", "json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["shape_method"] == "onnx+symbolic+onnxruntime"
    assert out["shaped_by"]["symbolic"] == 1 and out["shaped_by"]["onnxruntime"] == 1
    table = runner.invoke(app, ["models", "inspect", str(path), "--batch", "1"], terminal_width=200)
    assert table.exit_code == 0 and "symbolic 1, onnxruntime 1" in table.stdout


def test_probe_that_does_not_fit_memory_is_skipped_with_the_reason(build_model):
    """A node ONNX Runtime would have to run is not run where the memory guard says it cannot fit."""
    from benanza.model.resolve import resolve_shapes

    model = qoperator_model(build_model)
    bound = fold_and_infer(apply_binding(model, bind_shapes(model, "q.onnx", 1)), "q.onnx")
    tiny = SystemMemory(physical=4096, available=4096)
    _, report = resolve_shapes(bound, "q.onnx", memory=lambda: tiny)
    reasons = dict(report.unresolved)
    assert "GiB" in reasons["gap"] and "not run" in reasons["gap"], reasons
    assert dict(report.shaped_by).get("onnxruntime", 0) == 0


# ================================================================== a graph input's value decides a shape


@pytest.mark.parametrize(
    "node,inputs,decider,out",
    [
        (helper.make_node("Reshape", ["x", "target"], ["y"]), [("x", F, [2, 3, 4]), ("target", I64, [2])], "target", F),
        (helper.make_node("TopK", ["x", "k"], ["y", "i"], axis=1), [("x", F, [2, 6]), ("k", I64, [1])], "k", F),
        # NonZero's count is its data's: taken from the model's run (tests/test_lengths_by_data.py)
        (helper.make_node("Tile", ["x", "reps"], ["y"]), [("x", F, [2, 3]), ("reps", I64, [2])], "reps", F),
    ],
)
def test_a_runtime_value_that_decides_a_shape_is_reported(build_model, process_proto, node, inputs, decider, out):
    model = build_model([node, helper.make_node("Neg", ["y"], ["z"])], inputs, [("z", out, None)])
    graph = process_proto(model).graph
    reasons = {u.op_type: u.reason for u in graph.unsupported}
    assert f"depends on the value of runtime input '{decider}'" in reasons[node.op_type], reasons
    assert "depends on the value of runtime input" in reasons["Neg"], reasons  # and downstream says why
    assert graph.layers == ()


def test_a_setting_computed_from_a_constant_too_large_to_compute_is_unknown_not_synthetic(build_model, process_proto):
    """``Range(0, ReduceSum(Cast(mask)))`` of a 1024x1024 mask: the walk computes no constant from more than
    ``FOLD_MAX_ELEMENTS`` elements, and ONNX Runtime ran the ``Range`` on a synthetic limit instead: a length
    of 1 for 524,800, silently. Now it is unknown, and says why."""
    model = build_model(
        [
            helper.make_node("Cast", ["mask"], ["mask64"], to=TensorProto.INT64),
            helper.make_node("ReduceSum", ["mask64"], ["ones"], keepdims=0),
            helper.make_node("Range", ["zero", "ones", "one"], ["positions"]),
            helper.make_node("Add", ["positions", "x"], ["y"]),
        ],
        [("x", TensorProto.INT64, [1])],
        [("y", TensorProto.INT64, None)],
        {
            "mask": np.tril(np.ones((1024, 1024), bool)),
            "zero": np.array(0, np.int64),
            "one": np.array(1, np.int64),
        },
    )
    processed = process_proto(model)
    (add,) = processed.graph.unsupported
    assert add.op_type == "Add"
    assert "the value of 'ones', a constant not computed here" in add.reason
    assert "onnxruntime" not in dict(processed.shapes.shaped_by)
