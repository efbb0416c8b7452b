"""The GPU runtime's CuPy layers against ONNX Runtime: each case is a one-node ONNX model, derived into
the runtime's parameters (``params.layer_params``) and call (``framework.layer_call``) as a model's
layer is, then run on NumPy (the reference its ``gpu`` test holds the device's kernel to) and
compared with what ONNX Runtime's CPU provider computes for the same node and data. Pure: no GPU."""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from benanza.model.network import network_of
from benanza.runtimes.cuda.framework import empty_outputs, layer_call, numpy_ops
from benanza.runtimes.cuda.params import Unsupported, layer_params

F = TensorProto.FLOAT
_ELEM = {np.dtype("float32"): F, np.dtype("int64"): TensorProto.INT64, np.dtype("bool"): TensorProto.BOOL}


def against_onnx_runtime(
    build_model, process_proto, node, feeds, constants=None, opset=18, outputs=(F,), check=True, ms=False
):
    """Run ``node`` in ONNX Runtime and as the GPU runtime's call on NumPy; returns both results.

    ``feeds``: the graph inputs (name -> array), ``constants`` the initializers; the call's inputs are
    the node's first inputs that are there, as many as it takes; ``outputs``: the element types of the node's
    outputs that are there (named); ``ms``: the node is ONNX Runtime's (``com.microsoft``)."""
    constants = constants or {}
    inputs = [(n, _ELEM[a.dtype], list(a.shape)) for n, a in feeds.items()]
    outs = [(o, t, None) for o, t in zip([o for o in node.output if o], outputs, strict=False)]
    extra = {"com.microsoft": 1} if ms else None
    proto = build_model([node], inputs, outs, constants, opset=opset, check=check, extra_opsets=extra)
    expected = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    params = layer_params(network_of(process_proto(proto).graph, [0])[1])
    assert not isinstance(params, Unsupported), params.reason
    call = layer_call(params)
    arrays = {**feeds, **constants}
    given = [np.asarray(arrays[name]) for name in [n for n in node.input if n][: len(call.inputs)]]
    assert [a.shape for a in given] == [s.shape for s in call.inputs]
    got = empty_outputs(call.outputs)
    call.run(numpy_ops(), given, got)
    return call, expected, got


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_instance_normalization(build_model, process_proto):
    node = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-3)
    consts = {"s": rand(6, seed=1), "b": rand(6, seed=2)}
    call, expected, got = against_onnx_runtime(build_model, process_proto, node, {"x": rand(2, 6, 5, 7)}, consts)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-4, atol=1e-4)
    assert call.raw.name == "benanza_layer_norm_float32_bias_row_affine" and call.raw.grid == (12,)
    assert call.raw.scalars[2:] == (("int64", 6), ("int64", 1), ("int64", 35))


@pytest.mark.parametrize("opset, scale", [(18, 3), (21, 12)])
def test_group_normalization_per_group_and_per_channel(build_model, process_proto, opset, scale):
    """Opset 18 scales a group, 21 a channel (12 channels in 3 groups: 4 a group). ONNX 1.23's checker
    calls opset 18's deprecated; ONNX Runtime still runs it (models of opset 18 hold it)."""
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3, epsilon=1e-4)
    consts = {"s": rand(scale, seed=1), "b": rand(scale, seed=2)}
    call, expected, got = against_onnx_runtime(
        build_model, process_proto, node, {"x": rand(2, 12, 3, 5)}, consts, opset=opset, check=opset > 18
    )
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-4, atol=1e-4)
    assert call.raw.grid == (6,)  # a sample's group a block
    assert call.raw.name.endswith("_channel_affine" if opset == 21 else "_row_affine")


@pytest.mark.parametrize(
    "shape, k, axis, largest",
    [((5, 8), 2, -1, 1), ((2, 7, 3), 3, 1, 0), ((3, 200), 100, 1, 1), ((4, 6), 6, 1, 1)],
    ids=["router", "inner-axis-smallest", "beyond-the-kernel", "all"],
)
def test_topk_values_and_indices(build_model, process_proto, shape, k, axis, largest):
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)
    x = rand(*shape)
    first = (0,) * len(shape)
    second = tuple(1 if d == axis % len(shape) else 0 for d in range(len(shape)))
    x[second] = x[first]  # a tie along the axis: the lower index first
    consts = {"k": np.array([k], np.int64)}
    call, expected, got = against_onnx_runtime(
        build_model, process_proto, node, {"x": x}, consts, outputs=(F, TensorProto.INT64)
    )
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])
    assert (call.raw is None) == (k > 64) and [o.dtype for o in call.outputs] == ["float32", "int64"]


@pytest.mark.parametrize("largest", [1, 0])
def test_topk_puts_nan_where_onnx_runtime_does(build_model, process_proto, largest):
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1, largest=largest)
    x = np.array([[np.nan, 0.5, 0.9, 0.1, np.nan, 0.3]], np.float32)
    consts = {"k": np.array([4], np.int64)}
    _, expected, got = against_onnx_runtime(
        build_model, process_proto, node, {"x": x}, consts, outputs=(F, TensorProto.INT64)
    )
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])


def test_gather_nd_with_constant_indices(build_model, process_proto):
    """A mask's positions computed at a fixed shape and folded into a constant: still the gather's input."""
    node = helper.make_node("GatherND", ["x", "idx"], ["y"])
    idx = np.array([[[0, 1]], [[1, 2]], [[0, 0]]], np.int64)
    _, expected, got = against_onnx_runtime(build_model, process_proto, node, {"x": rand(2, 3, 4)}, {"idx": idx})
    np.testing.assert_array_equal(got[0], expected[0])


@pytest.mark.parametrize(
    "inputs, attrs",
    [(["x", "sizes"], {"axis": -1}), (["x"], {"axis": 2, "num_outputs": 3})],
    ids=["sizes-input", "num-outputs-uneven"],
)
def test_split_into_the_parts_its_outputs_have(build_model, process_proto, inputs, attrs):
    """Opset 18's Split: its sizes an input (onnxruntime-genai's QKV split, 256/64/64 columns), or
    ``num_outputs`` with an uneven last part; the call writes every part ONNX Runtime does."""
    node = helper.make_node("Split", inputs, ["q", "k", "v"], **attrs)
    consts = {"sizes": np.array([4, 2, 2], np.int64)} if "sizes" in inputs else {}
    call, expected, got = against_onnx_runtime(
        build_model, process_proto, node, {"x": rand(1, 3, 8)}, consts, outputs=(F, F, F)
    )
    assert [o.shape for o in call.outputs] == [e.shape for e in expected]
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize(
    "op, inputs, consts",
    [
        ("Tile", ["x", "reps"], {"reps": np.array([2, 1, 3], np.int64)}),  # RT-DETR's query indices per batch
        ("Pad", ["x", "pads"], {"pads": np.array([0, 0, 0, 0, 1, 2], np.int64)}),  # at the end, as inferred
    ],
)
def test_integer_copies_run_as_onnx_runtime_runs_them(build_model, process_proto, op, inputs, consts):
    """Index tensors a model copies on the GPU too: a Tile or Pad of int64 data has a call, not a refusal."""
    node = helper.make_node(op, inputs, ["y"])
    x = np.arange(24, dtype=np.int64).reshape(1, 4, 6)
    I64 = TensorProto.INT64
    _, expected, got = against_onnx_runtime(build_model, process_proto, node, {"x": x}, consts, outputs=(I64,))
    assert got[0].dtype == np.int64
    np.testing.assert_array_equal(got[0], expected[0])


@pytest.mark.parametrize(
    "opset, attrs",
    [
        (16, {"mode": "bilinear", "padding_mode": "zeros", "align_corners": 0}),  # RT-DETR's deformable attention
        (16, {"mode": "bilinear", "padding_mode": "border", "align_corners": 1}),
        (16, {"mode": "nearest", "padding_mode": "zeros", "align_corners": 0}),
        (20, {"mode": "linear", "padding_mode": "border", "align_corners": 0}),
        (20, {"mode": "nearest", "padding_mode": "border", "align_corners": 1}),
    ],
)
def test_grid_sample(build_model, process_proto, opset, attrs):
    """Sampling points spread past the input's edges (normalised coordinates in [-1.2, 1.2]): zeros or the
    border there, as ONNX Runtime computes it."""
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], **attrs)
    grid = np.random.default_rng(3).uniform(-1.2, 1.2, (2, 5, 7, 2)).astype(np.float32)
    feeds = {"x": rand(2, 3, 6, 9), "grid": grid}
    call, expected, got = against_onnx_runtime(build_model, process_proto, node, feeds, opset=opset)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5, atol=1e-5)
    assert call.fused is not None and call.outputs[0].shape == (2, 3, 5, 7)


@pytest.mark.parametrize(
    "attrs, reason",
    [({"mode": "bicubic"}, "cubic"), ({"padding_mode": "reflection"}, "reflection")],
)
def test_grid_sample_that_is_not_mapped_says_why(build_model, process_proto, attrs, reason):
    from benanza.errors import UnsupportedLayer

    node = helper.make_node("GridSample", ["x", "grid"], ["y"], **attrs)
    proto = build_model([node], [("x", F, [1, 2, 4, 4]), ("grid", F, [1, 3, 3, 2])], [("y", F, None)], opset=16)
    params = layer_params(network_of(process_proto(proto).graph, [0])[1])
    with pytest.raises(UnsupportedLayer, match=reason):
        layer_call(params)


def test_scatter_nd_writes_a_static_kv_cache_at_its_position(build_model, process_proto):
    """transformers' StaticCache exported by torch.onnx: the step's keys written into the (positions, batch,
    heads, dim) cache at the cache position, an index the model computes (here an input)."""
    node = helper.make_node("ScatterND", ["cache", "pos", "step"], ["y"])
    feeds = {"cache": rand(16, 1, 2, 8), "pos": np.array([[5]], np.int64), "step": rand(1, 1, 2, 8, seed=1)}
    call, expected, got = against_onnx_runtime(build_model, process_proto, node, feeds)
    np.testing.assert_array_equal(got[0], expected[0])
    assert call.inputs[1].index_bound == 16 and "copied" in " ".join(call.notes)


@pytest.mark.parametrize(
    "op, inputs, table, feeds",
    [
        ("Gather", ["table", "ids"], (100, 8), {"ids": np.array([[3, 7, 99, 0]], np.int64)}),  # an embedding
        ("ScatterND", ["table", "pos", "step"], (16, 2, 8), {"pos": np.array([[5]], np.int64), "step": rand(1, 2, 8)}),
    ],
)
def test_a_constant_table_is_read_in_its_own_type_not_its_indices(build_model, process_proto, op, inputs, table, feeds):
    """The table a gather reads (an embedding) or the cache a scatter writes, constant, with indices computed:
    the layer moves float32 values (it was derived as int64, the indices' type, and measured moving those)."""
    node = helper.make_node(op, inputs, ["y"])
    consts = {"table": rand(*table, seed=2)}
    call, expected, got = against_onnx_runtime(build_model, process_proto, node, feeds, consts)
    assert call.inputs[0].dtype == "float32" and call.outputs[0].dtype == "float32"
    np.testing.assert_array_equal(got[0], expected[0])


@pytest.mark.parametrize("axis", [0, 1])
def test_scatter_elements(build_model, process_proto, axis):
    node = helper.make_node("ScatterElements", ["x", "idx", "upd"], ["y"], axis=axis)
    idx = np.array([[1, 0, 2], [0, 2, 1]], np.int64)  # distinct along each axis: no two writes to one place
    feeds = {"x": rand(3, 3), "idx": idx, "upd": rand(2, 3, seed=1)}
    _, expected, got = against_onnx_runtime(build_model, process_proto, node, feeds)
    np.testing.assert_array_equal(got[0], expected[0])


def test_scatter_with_a_reduction_is_not_mapped(build_model, process_proto):
    from benanza.errors import UnsupportedLayer

    node = helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction="add")
    inputs = [("x", F, [4, 3]), ("i", TensorProto.INT64, [2, 1]), ("u", F, [2, 3])]
    proto = build_model([node], inputs, [("y", F, None)], opset=18)
    with pytest.raises(UnsupportedLayer, match="reduction 'add'"):
        layer_call(layer_params(network_of(process_proto(proto).graph, [0])[1]))


def test_layer_normalization_still_scales_each_column(build_model, process_proto):
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)
    consts = {"s": rand(16, seed=1), "b": rand(16, seed=2)}
    call, expected, got = against_onnx_runtime(build_model, process_proto, node, {"x": rand(3, 4, 16)}, consts)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-4, atol=1e-5)
    assert call.raw.name == "benanza_layer_norm_float32_bias" and len(call.raw.scalars) == 2


_DOMAINS = {"Acosh": (1.0, 3.0), "Atanh": (-0.9, 0.9), "Asin": (-1.0, 1.0), "Acos": (-1.0, 1.0)}
_ONE_INPUT = [
    *("Ceil", "Floor", "Round", "Sign", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan"),
    *("Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Mish", "Softsign"),
    *("Selu", "Celu", "ThresholdedRelu", "Shrink"),
]
_ATTRIBUTES = {
    "Selu": {"alpha": 1.5, "gamma": 1.1},
    "Celu": {"alpha": 0.7},
    "ThresholdedRelu": {"alpha": 0.2},
    "Shrink": {"bias": 0.1, "lambd": 0.3},
}


@pytest.mark.parametrize("op", _ONE_INPUT)
def test_one_input_math_and_activations(build_model, process_proto, op):
    low, high = _DOMAINS.get(op, (-3.0, 3.0))
    x = np.random.default_rng(3).uniform(low, high, (4, 33)).astype(np.float32)
    if op == "Round":
        x[0, :4] = [0.5, 1.5, -2.5, 0.0]  # halves to even
    node = helper.make_node(op, ["x"], ["y"], **_ATTRIBUTES.get(op, {}))
    call, expected, got = against_onnx_runtime(build_model, process_proto, node, {"x": x})
    np.testing.assert_allclose(got[0], expected[0], rtol=2e-5, atol=2e-6)
    assert (call.fused is not None) == (op in ("Mish", "Softsign", *_ATTRIBUTES))


@pytest.mark.parametrize(
    "op, dtype, fmod, out",
    [
        ("Mod", np.int64, 0, TensorProto.INT64),  # the divisor's sign
        ("Mod", np.float32, 1, F),  # the dividend's
        ("LessOrEqual", np.float32, None, TensorProto.BOOL),
        ("GreaterOrEqual", np.int64, None, TensorProto.BOOL),
    ],
)
def test_two_input_ops(build_model, process_proto, op, dtype, fmod, out):
    rng = np.random.default_rng(5)
    a = rng.integers(-20, 20, (3, 8)).astype(dtype)
    b = rng.integers(1, 6, (8,)).astype(dtype) * np.where(np.arange(8) % 2, 1, -1).astype(dtype)
    node = helper.make_node(op, ["a", "b"], ["y"], **({} if fmod is None else {"fmod": fmod}))
    _, expected, got = against_onnx_runtime(build_model, process_proto, node, {"a": a, "b": b}, outputs=(out,))
    np.testing.assert_array_equal(got[0], expected[0])


def test_xor_of_booleans(build_model, process_proto):
    a, b = np.array([True, True, False, False]), np.array([True, False, True, False])
    node = helper.make_node("Xor", ["a", "b"], ["y"])
    _, expected, got = against_onnx_runtime(
        build_model, process_proto, node, {"a": a, "b": b}, outputs=(TensorProto.BOOL,)
    )
    assert got[0].tolist() == expected[0].tolist() == [False, True, True, False]


# ------------------------------------------------------------------------ ONNX Runtime's contrib ops


@pytest.mark.parametrize(
    "skip_shape, beta, bias, sum_out",
    [((2, 5, 32), True, True, True), ((5, 32), True, False, False), ((2, 5, 32), False, True, True)],
    ids=["whole", "skip-over-the-batch", "no-beta"],
)
def test_skip_layer_normalization(build_model, process_proto, skip_shape, beta, bias, sum_out):
    names = ["x", "skip", "gamma", "beta" if beta else "", "bias" if bias else ""]
    while not names[-1]:
        names.pop()
    outputs = ["y", "", "", "s"] if sum_out else ["y"]
    node = helper.make_node("SkipLayerNormalization", names, outputs, domain="com.microsoft", epsilon=1e-5)
    consts = {"gamma": rand(32, seed=1), "beta": rand(32, seed=2), "bias": rand(32, seed=3)}
    consts = {k: v for k, v in consts.items() if k in names}
    feeds = {"x": rand(2, 5, 32), "skip": rand(*skip_shape, seed=4)}
    kinds = (F, F) if sum_out else (F,)
    call, expected, got = against_onnx_runtime(build_model, process_proto, node, feeds, consts, outputs=kinds, ms=True)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)
    assert [i.shape for i in call.inputs][:2] == [(2, 5, 32), skip_shape] and len(call.outputs) == len(kinds)


def test_skip_simplified_and_simplified_layer_normalization(build_model, process_proto):
    node = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "g", "b"], ["y"], domain="com.microsoft")
    consts = {"g": rand(16, seed=1), "b": rand(16, seed=2)}
    feeds = {"x": rand(3, 16), "skip": rand(3, 16, seed=3)}
    call, expected, got = against_onnx_runtime(build_model, process_proto, node, feeds, consts, ms=True)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-4, atol=1e-4)
    assert "rms_norm" in call.raw.name and "prebias" in call.raw.name
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y"], axis=-1, epsilon=1e-6)
    call, expected, got = against_onnx_runtime(  # ONNX's checker knows no SimplifiedLayerNormalization
        build_model, process_proto, node, {"x": rand(4, 16)}, {"g": consts["g"]}, check=False
    )
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "op, inputs",
    [("Gelu", 1), ("FastGelu", 1), ("FastGelu", 2), ("BiasGelu", 2), ("QuickGelu", 1)],
)
def test_gelu_kinds(build_model, process_proto, op, inputs):
    names = ["x", "b"][:inputs]
    node = helper.make_node(op, names, ["y"], domain="com.microsoft")
    consts = {"b": rand(24, seed=1)} if inputs > 1 else {}
    call, expected, got = against_onnx_runtime(build_model, process_proto, node, {"x": rand(3, 24)}, consts, ms=True)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-4, atol=1e-5)
    assert call.fused is not None


@pytest.mark.parametrize(
    "a, b, trans_a, trans_b",
    [
        ((2, 3, 8, 5), (2, 3, 8, 6), 1, 0),
        ((4, 7), (9, 7), 0, 1),
        ((2, 6, 7), (9, 7), 0, 1),
        ((2, 7, 6), (7, 9), 1, 0),  # a batch of transposed A over one B
    ],
)
def test_fused_matmul_is_a_gemm_with_transposes_and_alpha(build_model, process_proto, a, b, trans_a, trans_b):
    node = helper.make_node(
        "FusedMatMul", ["a", "b"], ["y"], domain="com.microsoft", alpha=0.5, transA=trans_a, transB=trans_b
    )
    proto = build_model(
        [node], [("a", F, list(a)), ("b", F, list(b))], [("y", F, None)], extra_opsets={"com.microsoft": 1}
    )
    feeds = {"a": rand(*a), "b": rand(*b, seed=1)}
    (expected,) = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    p = layer_params(network_of(process_proto(proto).graph, [0])[1])
    assert (p.trans_a, p.trans_b, p.alpha) == (bool(trans_a), bool(trans_b), 0.5)
    folded = len(a) == 3 and not trans_a  # A's batch folded into its rows
    rows = expected.shape[-2] * (2 if folded else 1)
    assert (p.m, p.n, p.k) == (rows, expected.shape[-1], a[-2 if trans_a else -1])
    assert p.batch == math.prod(expected.shape[:-2]) // (2 if folded else 1)
    assert p.a_batched == (p.batch > 1)


def test_other_contrib_ops_say_what_they_are(build_model, process_proto):
    node = helper.make_node("PackedAttention", ["x", "w", "b", "ti", "cs"], ["y"], domain="com.microsoft", num_heads=2)
    proto = build_model(
        [node],
        [("x", F, [4, 8]), ("ti", TensorProto.INT32, [1, 4]), ("cs", TensorProto.INT32, [2])],
        [("y", F, None)],
        {"w": rand(8, 24), "b": rand(24)},
        extra_opsets={"com.microsoft": 1},
        check=False,
    )
    p = layer_params(network_of(process_proto(proto).graph, [0])[1])
    assert (
        isinstance(p, Unsupported)
        and "com.microsoft::PackedAttention: ONNX Runtime's attention over packed" in p.reason
    )
    assert "SkipLayerNormalization" in p.reason  # the ones it knows
    node = helper.make_node("Inverse", ["x"], ["y"], domain="com.microsoft")  # one it has no word for
    proto = build_model([node], [("x", F, [2, 4, 4])], [("y", F, None)], extra_opsets={"com.microsoft": 1})
    p = layer_params(network_of(process_proto(proto).graph, [0])[1])
    assert isinstance(p, Unsupported) and "com.microsoft::Inverse: an ONNX Runtime contrib op with no GPU" in p.reason


def test_matmul_nbits_of_the_wrong_block_count_or_zero_points_is_unsupported(build_model, process_proto):
    """ONNX Runtime refuses such a file; the derivation names what does not fit instead of reading past it."""
    for blocks, zero_points, said in ((3, 8, "blocks of 32"), (2, 7, "zero points")):
        consts = {
            "b": np.zeros((8, blocks, 16), np.uint8),
            "s": np.ones((8 * blocks,), np.float32),
            "zp": np.zeros((zero_points,), np.uint8),
        }
        node = helper.make_node(
            "MatMulNBits", ["a", "b", "s", "zp"], ["y"], domain="com.microsoft", K=64, N=8, bits=4, block_size=32
        )
        proto = build_model([node], [("a", F, [1, 64])], [("y", F, None)], consts, extra_opsets={"com.microsoft": 1})
        p = layer_params(network_of(process_proto(proto).graph, [0])[1])
        assert isinstance(p, Unsupported) and said in p.reason, p


def simulate_block_gemv(call, a, b, scales, zero_points=None, bias=None):
    """The dequantising GEMV kernel's loops, statement for statement, on NumPy: its word, block and
    zero-point indexing checked against ONNX Runtime where no GPU runs the CUDA."""
    n, k, k_blocks, blob, zp_stride = (v for _, v in call.raw.scalars)
    bits = 4 if "_4bit_" in call.raw.name else 8
    block = blob * 8 // bits
    words = np.ascontiguousarray(b).reshape(n, -1).view("<u4")
    rows = a.reshape(-1, k)
    y = np.zeros((rows.shape[0], n))
    for row in range(rows.shape[0]):
        for col in range(n):
            total = 0.0
            for w in range(k_blocks * blob // 4):  # the lanes' words, in any order
                word = int(words[col, w])
                kb = (w * 4) // blob
                k0 = kb * block + ((w * 4) % blob) * (8 // bits)
                s = float(scales.reshape(-1)[col * k_blocks + kb])
                if zero_points is None:
                    z = 2 ** (bits - 1)
                elif bits == 4:
                    z = (int(zero_points.reshape(-1)[col * zp_stride + (kb >> 1)]) >> ((kb & 1) * 4)) & 15
                else:
                    z = int(zero_points.reshape(-1)[col * zp_stride + kb])
                for e in range(32 // bits):
                    if k0 + e < k:
                        total += float(rows[row, k0 + e]) * (((word >> (e * bits)) & ((1 << bits) - 1)) - z) * s
            y[row, col] = total + (float(bias[col]) if bias is not None else 0.0)
    return y


@pytest.mark.parametrize(
    "rows, k, n, bits, block, zero_points, bias",
    [
        (1, 64, 24, 4, 32, False, False),  # a decoder step: the GEMV kernel
        (3, 40, 9, 4, 16, True, False),  # K not a whole number of blocks; an odd count of blocks' zero points
        (2, 64, 8, 8, 32, True, True),
        (20, 64, 16, 4, 32, True, False),  # a prompt: dequantised, then a matmul
    ],
)
def test_matmul_nbits(build_model, process_proto, rows, k, n, bits, block, zero_points, bias):
    rng = np.random.default_rng(7)
    k_blocks, blob = -(-k // block), block * bits // 8
    consts = {
        "b": rng.integers(0, 256, (n, k_blocks, blob), dtype=np.uint8),
        "scales": (rng.random((n, k_blocks)) * 0.1 + 0.01).astype(np.float32),
    }
    names = ["a", "b", "scales"]
    if zero_points:
        consts["zp"] = rng.integers(0, 256, (n * ((k_blocks * bits + 7) // 8),), dtype=np.uint8)
        names.append("zp")
    if bias:
        consts["bias"] = rand(n, seed=9)
        names += [""] * (5 - len(names)) + ["bias"]
    node = helper.make_node("MatMulNBits", names, ["y"], domain="com.microsoft", K=k, N=n, bits=bits, block_size=block)
    feeds = {"a": rand(1, rows, k)}
    call, expected, got = against_onnx_runtime(build_model, process_proto, node, feeds, consts, ms=True)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-4, atol=1e-3)
    assert (call.raw is not None) == (rows <= 16)
    if call.raw is not None:
        assert call.raw.grid == (-(-n // 4), rows) and call.raw.block == (128,)
        args = [consts["b"], consts["scales"], consts.get("zp"), consts.get("bias")]
        simulated = simulate_block_gemv(call, feeds["a"], *args)
        np.testing.assert_allclose(simulated.reshape(expected[0].shape), expected[0], rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(
    "op, axes, keepdims",
    [
        ("ReduceL1", [1], 1),
        ("ReduceL2", [-1], 0),  # an embedding's norm (CLIP, sentence encoders)
        ("ReduceSumSquare", [0, 2], 1),
        ("ReduceLogSum", [2], 0),
        ("ReduceLogSumExp", [1], 1),
    ],
)
def test_composite_reductions(build_model, process_proto, op, axes, keepdims):
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)
    x = np.abs(rand(3, 5, 7)) + 0.1  # positive: ReduceLogSum's sums
    consts = {"axes": np.array(axes, np.int64)}
    call, expected, got = against_onnx_runtime(build_model, process_proto, node, {"x": x}, consts)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5, atol=1e-6)
    assert call.notes and "one after another" in call.notes[0]


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_reductions_with_ties(build_model, process_proto, op, last):
    x = np.array([[1.0, 3.0, 3.0, 0.0], [0.0, 0.0, 2.0, 2.0]], np.float32)
    node = helper.make_node(op, ["x"], ["y"], axis=1, keepdims=0, select_last_index=last)
    _, expected, got = against_onnx_runtime(build_model, process_proto, node, {"x": x}, outputs=(TensorProto.INT64,))
    np.testing.assert_array_equal(got[0], expected[0])


@pytest.mark.parametrize(
    "op, attrs, shape",
    [
        ("DepthToSpace", {"blocksize": 2, "mode": "DCR"}, (1, 8, 3, 4)),
        ("DepthToSpace", {"blocksize": 2, "mode": "CRD"}, (2, 12, 3, 2)),  # pixel shuffle
        ("SpaceToDepth", {"blocksize": 2}, (1, 3, 4, 6)),
    ],
)
def test_depth_and_space(build_model, process_proto, op, attrs, shape):
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    _, expected, got = against_onnx_runtime(build_model, process_proto, node, {"x": rand(*shape)})
    np.testing.assert_array_equal(got[0], expected[0])


@pytest.mark.parametrize("upper, k", [(1, 0), (0, -1), (1, 2)])
def test_trilu(build_model, process_proto, upper, k):
    node = helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper)
    consts = {"k": np.array(k, np.int64)}
    _, expected, got = against_onnx_runtime(build_model, process_proto, node, {"x": rand(2, 5, 6)}, consts)
    np.testing.assert_array_equal(got[0], expected[0])


def test_a_masks_length_is_an_integer_reduction(build_model, process_proto):
    """onnxruntime-genai's decoders count the attention mask (``seqlens_k = ReduceSum(mask) - 1``): an int64
    reduction the GPU runs too, no longer skipped as data of no floating-point type."""
    node = helper.make_node("ReduceSum", ["mask", "axes"], ["n"], keepdims=0)
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], np.int64)
    consts = {"axes": np.array([1], np.int64)}
    _, expected, got = against_onnx_runtime(
        build_model, process_proto, node, {"mask": mask}, consts, outputs=(TensorProto.INT64,)
    )
    np.testing.assert_array_equal(got[0], expected[0])


def _caches(positions: int, half: int, batch_seq: tuple[int, int] | None = None) -> dict[str, np.ndarray]:
    angles = np.arange(positions)[:, None] * (1.0 / 10000 ** (np.arange(half) / half))[None]
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    if batch_seq is not None:  # ONNX's form without position ids: the rows already gathered
        rows = np.arange(batch_seq[1]) + 3
        cos, sin = (
            np.broadcast_to(cos[rows], (*batch_seq, half)).copy(),
            np.broadcast_to(sin[rows], (*batch_seq, half)).copy(),
        )
    return {"cos": cos, "sin": sin}


@pytest.mark.parametrize(
    "x, attrs, half, ids",
    [
        ((2, 5, 32), {"num_heads": 4}, 4, True),  # 3-D, the heads named
        ((2, 4, 5, 8), {"interleaved": 1}, 4, True),  # 4-D, neighbouring pairs
        ((2, 5, 32), {"num_heads": 4, "rotary_embedding_dim": 4}, 2, True),  # half of each head rotated
        ((2, 5, 32), {"num_heads": 4}, 4, False),  # the caches already at the tokens' positions
    ],
    ids=["3d", "4d-interleaved", "partial", "no-ids"],
)
def test_onnx_rotary_embedding(build_model, process_proto, x, attrs, half, ids):
    """ONNX's RotaryEmbedding (opset 23): what ``torch.onnx`` may write for a Llama's RoPE."""
    inputs = ["x", "cos", "sin", "pos"] if ids else ["x", "cos", "sin"]
    node = helper.make_node("RotaryEmbedding", inputs, ["y"], **attrs)
    feeds = {"x": rand(*x)}
    if ids:
        feeds["pos"] = np.array([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]], np.int64)
    caches = _caches(16, half, None if ids else (2, 5))
    call, expected, got = against_onnx_runtime(build_model, process_proto, node, feeds, caches, opset=23)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5, atol=1e-6)
    assert call.kernel == "rotary_embedding"


@pytest.mark.parametrize(
    "x, pos, attrs",
    [
        ((2, 5, 32), [[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]], {}),  # ids; the heads from the caches' width
        ((2, 5, 32), [6], {"interleaved": 1}),  # one offset the sequence counts from
        ((2, 5, 64), [[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]], {"num_heads": 4, "rotary_embedding_dim": 8}),  # partial
        ((2, 4, 5, 8), [3], {}),  # 4-D, an offset
        ((1, 1, 32), [[9]], {}),  # a decode step: one id, not an offset
    ],
    ids=["ids", "offset-interleaved", "partial", "4d-offset", "decode"],
)
def test_onnxruntime_rotary_embedding(build_model, process_proto, x, pos, attrs):
    """ONNX Runtime's RotaryEmbedding (onnxruntime-genai's exports without GQA's do_rotary)."""
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain="com.microsoft", **attrs)
    feeds = {"x": rand(*x), "pos": np.array(pos, np.int64)}
    call, expected, got = against_onnx_runtime(build_model, process_proto, node, feeds, _caches(16, 4), ms=True)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5, atol=1e-6)
    seq = x[1] if len(x) == 3 else x[2]
    ids = np.array(pos).ndim == 2  # (batch, seq) ids, even one; a (1,) offset: the positions it may start at
    assert call.inputs[1].index_bound == (16 if ids else 16 - seq + 1)


@pytest.mark.parametrize(
    "x, pos, caches, attrs, reason",
    [
        ((2, 5, 32), (2, 5), (16, 2), {"rotary_embedding_dim": 4}, "no num_heads"),
        ((1, 20, 32), (1,), (16, 4), {}, "20 positions from an offset over a cache of 16"),
        ((2, 5, 32), (2, 5), (16, 4), {"is_packed_batching": 1}, "packed batching"),
    ],
    ids=["rotary-without-heads", "offset-past-the-cache", "packed"],
)
def test_onnxruntime_rotary_embedding_refusals(build_model, process_proto, x, pos, caches, attrs, reason):
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain="com.microsoft", **attrs)
    proto = build_model(
        [node],
        [("x", F, list(x)), ("pos", TensorProto.INT64, list(pos))],
        [("y", F, None)],
        {"cos": rand(*caches), "sin": rand(*caches, seed=1)},
        check=False,
        extra_opsets={"com.microsoft": 1},
    )
    p = layer_params(network_of(process_proto(proto).graph, [0])[1])
    assert isinstance(p, Unsupported) and reason in p.reason, p
