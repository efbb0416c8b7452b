"""Library call parameters of layers and the fused chains of the GPU runtime (pure: no GPU needed)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from onnx import TensorProto, helper

from benanza.model.network import network_of
from benanza.runtimes.cuda.fusion import fused_groups
from benanza.runtimes.cuda.params import (
    ConvParams,
    DataMovementParams,
    ElementwiseParams,
    GemmParams,
    PoolParams,
    ReductionParams,
    SoftmaxParams,
    Unsupported,
    fused_conv,
    layer_params,
)

F = TensorProto.FLOAT


@pytest.fixture
def one_node(build_model, process_proto):
    """``one_node(node, inputs, initializers, opset)`` -> the network of the model's only layer."""

    def make(node, inputs, initializers=None, opset=17):
        proto = build_model([node], inputs, [(node.output[0], F, None)], initializers or {}, opset=opset)
        graph = process_proto(proto).graph
        return network_of(graph, [0])[1]

    return make


def test_conv_geometry_from_the_normalised_attributes(conv_chain, process_proto):
    graph = process_proto(conv_chain("reshape", batch=2)).graph
    p = layer_params(network_of(graph, [0])[1])
    assert p == ConvParams(
        x=(2, 3, 8, 8),
        w=(4, 3, 3, 3),
        y=(2, 4, 8, 8),
        pads_begin=(1, 1),
        pads_end=(1, 1),
        strides=(1, 1),
        dilations=(1, 1),
        groups=1,
        dtype="float32",
        bias=True,
    )
    assert p.symmetric and p.fused  # its own bias: fusable (the runtime fuses groups only)
    assert p.flops == 2 * (2 * 4 * 8 * 8) * 3 * 9  # every output: C x R x S multiply-adds
    assert layer_params(network_of(graph, [0])[1], 0, "float16").dtype == "float16"


def test_same_upper_conv_becomes_asymmetric_explicit_pads(one_node):
    node = helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[2, 2])
    w = np.zeros((8, 3, 3, 3), np.float32)
    p = layer_params(one_node(node, [("x", F, [1, 3, 224, 224])], {"w": w}))
    # out 112: total pad (111 * 2 + 3 - 224) = 1, the odd one at the end
    assert (p.pads_begin, p.pads_end, p.y) == ((0, 0), (1, 1), (1, 8, 112, 112))
    assert not p.symmetric


def test_gemm_with_transposed_weight_as_in_alexnet(one_node):
    node = helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)
    inits = {"w": np.zeros((1000, 4096), np.float32), "b": np.zeros(1000, np.float32)}
    p = layer_params(one_node(node, [("x", F, [8, 4096])], inits))
    assert p == GemmParams(1, 8, 1000, 4096, False, True, "float32", 1.0, 1.0, True, False, False)
    assert p.flops == 2 * 8 * 1000 * 4096


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ((2, 3, 4, 5), (5, 6), (1, 24, 6, 5, False, False)),  # a weight shared by every row
        ((2, 4, 5), (2, 5, 6), (2, 4, 6, 5, True, True)),  # one strided batch
        ((4, 5), (3, 5, 6), (3, 4, 6, 5, False, True)),  # A broadcast over B's batch
    ],
)
def test_matmul_batches(one_node, a, b, expected):
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    p = layer_params(one_node(node, [("a", F, list(a)), ("b", F, list(b))]))
    assert (p.batch, p.m, p.n, p.k, p.a_batched, p.b_batched) == expected


@pytest.mark.parametrize(
    ("a", "b", "batch"),
    [
        ((2, 1, 4, 5), (1, 3, 5, 6), 6),
        ((2, 4, 16, 16), (1, 4, 16, 8), 8),  # a TorchScript attention: the heads' values shared by samples
        ((2, 1, 4, 5), (1, 2, 5, 3), 4),  # as many products each side, 4 after broadcasting
        ((3, 1, 4, 5), (1, 3, 5, 3), 9),
    ],
)
def test_matmul_batch_axes_broadcast_against_each_other_run_as_the_batch_they_expand_to(one_node, a, b, batch):
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    p = layer_params(one_node(node, [("a", F, list(a)), ("b", F, list(b))]))
    assert (p.batch, p.m, p.n, p.k, p.a_batched, p.b_batched) == (batch, a[-2], b[-1], a[-1], True, True)


def test_matmul_batch_axes_that_do_not_broadcast_are_unsupported():
    """ONNX's inference refuses such a model first; the derivation says so too, not a batch of 6."""
    from benanza.runtimes.cuda.params import _matmul_of

    p = _matmul_of((2, 3, 4, 5), (3, 2, 5, 6), "float32")
    assert isinstance(p, Unsupported) and "do not broadcast" in p.reason


def test_max_pool_with_an_extra_end_row_runs_with_the_symmetric_pad_that_keeps_its_output(one_node):
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1])
    p = layer_params(one_node(node, [("x", F, [1, 64, 112, 112])]))
    assert p == PoolParams("max", (1, 64, 112, 112), (1, 64, 56, 56), (3, 3), (1, 1), (2, 2), "float32")


def test_average_pool_window_over_the_whole_padded_input_becomes_a_window_of_the_input(one_node):
    # Inception v1's last pool: 7x7 over 6x6 with one padded row and column, one output
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[7, 7], pads=[0, 0, 1, 1])
    p = layer_params(one_node(node, [("x", F, [1, 1024, 6, 6])]))
    assert (p.mode, p.window, p.pads, p.y) == ("avg_exclude_pad", (6, 6), (0, 0), (1, 1024, 1, 1))


@pytest.mark.parametrize(
    "size, pads, y",
    [(80, (0, 0), 40), (7, (1, 1), 4)],
    ids=["changes-nothing", "one-more-output"],
)
def test_ceil_mode_pooling_runs_with_the_pads_that_give_its_output(one_node, size, pads, y):
    """RT-DETR's 2x2 stride-2 average pools over even sizes round up to what rounding down gives: the model's
    own pads; over 7, ceil_mode adds a fourth output, which one more pad on both sides gives cuDNN."""
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    p = layer_params(one_node(node, [("x", F, [1, 8, size, size])]))
    assert isinstance(p, PoolParams), p
    assert (p.window, p.pads, p.y) == ((2, 2), pads, (1, 8, y, y))


def test_ceil_mode_where_onnx_inference_and_onnx_runtime_disagree_is_refused(one_node):
    """5 wide, a 2-window at stride 2 and a pad each side: ONNX's inference rounds up to 4, ONNX Runtime drops
    the window that would start in the trailing pad (3); which one the model runs is ONNX Runtime's."""
    node = helper.make_node(
        "AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1
    )
    p = layer_params(one_node(node, [("x", F, [1, 8, 5, 5])]))
    assert isinstance(p, Unsupported) and "ONNX Runtime (3, 3)" in p.reason, p


def test_pooling_that_cudnn_cannot_express_is_unsupported_with_the_reason(one_node):
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2], dilations=[2, 2])
    p = layer_params(one_node(node, [("x", F, [1, 8, 7, 7])]))
    assert isinstance(p, Unsupported) and "dilations" in p.reason


def test_global_pool_window_is_the_spatial_size(one_node):
    node = helper.make_node("GlobalAveragePool", ["x"], ["y"])
    p = layer_params(one_node(node, [("x", F, [2, 2048, 7, 7])]))
    assert (p.window, p.pads, p.strides, p.y) == ((7, 7), (0, 0), (1, 1), (2, 2048, 1, 1))


def test_softmax_over_an_inner_axis_and_the_old_two_dimensional_semantics(one_node):
    node = helper.make_node("Softmax", ["x"], ["y"], axis=1)
    assert layer_params(one_node(node, [("x", F, [2, 10, 3, 4])])) == SoftmaxParams(2, 10, 12, False, "float32")
    old = helper.make_node("Softmax", ["x"], ["y"], axis=1)  # opset 11: flattened at axis 1
    assert layer_params(one_node(old, [("x", F, [2, 10, 3, 4])], opset=11)) == SoftmaxParams(
        2, 120, 1, False, "float32"
    )


def test_elementwise_and_views(one_node):
    add = helper.make_node("Add", ["a", "b"], ["y"])
    p = layer_params(one_node(add, [("a", F, [2, 3, 4]), ("b", F, [1, 3, 1])]))
    assert p == ElementwiseParams("Add", ((2, 3, 4), (1, 3, 1)), (2, 3, 4), "float32")
    flatten = helper.make_node("Flatten", ["x"], ["y"])
    v = layer_params(one_node(flatten, [("x", F, [2, 3, 4])]))
    assert isinstance(v, DataMovementParams) and v.view and v.bytes_moved == 0


def test_unknown_ops_and_integer_data_are_unsupported_with_reasons(one_node):
    node = helper.make_node("Hardmax", ["x"], ["y"])
    p = layer_params(one_node(node, [("x", F, [1, 10])]))
    assert isinstance(p, Unsupported) and p.reason.startswith("Hardmax has no GPU kernel mapping")
    div = helper.make_node("Div", ["x", "d"], ["y"])  # integer division: no CuPy ufunc gives ONNX's
    net = one_node(div, [("x", TensorProto.INT32, [4]), ("d", TensorProto.INT32, [4])])
    assert net.nodes[0].outputs[0].dtype == "int32"
    assert "floating-point" in layer_params(net).reason
    neg = helper.make_node("Neg", ["x"], ["y"])  # integer arithmetic a model does on the GPU (position ids)
    assert layer_params(one_node(neg, [("x", TensorProto.INT32, [4])])).dtype == "int32"


def test_fused_conv_bn_relu_chain(conv_chain, process_proto):
    graph = process_proto(conv_chain("reshape")).graph
    p = fused_conv(network_of(graph, [0, 1, 2])[1])
    assert isinstance(p, ConvParams) and p.bias and p.activation == "relu" and p.fused
    assert fused_conv(network_of(graph, [0, 1, 2, 3])[1]).reason.startswith("Conv after the activation")


def test_a_residual_add_is_not_a_bias(build_model, process_proto):
    w = np.zeros((4, 4, 3, 3), np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "x"], ["y"]),
    ]
    graph = process_proto(build_model(nodes, [("x", F, [1, 4, 8, 8])], [("y", F, None)], {"w": w})).graph
    assert isinstance(fused_conv(network_of(graph, [0, 1])[1]), Unsupported)
    assert fused_groups(graph) == [[0], [1]]


def test_fused_groups_of_resnet50(zoo_model):
    graph = zoo_model("resnet50").graph
    groups = fused_groups(graph)
    assert sorted(i for g in groups for i in g) == list(range(len(graph.layers)))
    fused = Counter("+".join(graph.layers[i].op_type for i in g) for g in groups if len(g) > 1)
    # 53 convolutions: 33 followed by BN and Relu, 20 (block ends and projections) by BN alone
    assert fused == {"Conv+BatchNormalization+Relu": 33, "Conv+BatchNormalization": 20}
    assert [g[-1] for g in groups] == sorted(g[-1] for g in groups)


# ------------------------------------------------------------------------ reductions, normalisation, Q/DQ


def test_reduction_axes_from_the_attribute_and_from_the_constant_input(one_node):
    from benanza.runtimes.cuda.params import ReductionParams

    x = [("x", F, [2, 8, 16])]
    old = helper.make_node("ReduceMean", ["x"], ["y"], axes=[-1], keepdims=1)
    assert layer_params(one_node(old, x, opset=13)) == ReductionParams(
        "ReduceMean", (2, 8, 16), (2,), True, (2, 8, 1), "float32"
    )
    new = helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)
    p = layer_params(one_node(new, x, {"axes": np.array([0, 2], np.int64)}, opset=18), 0, "float16")
    assert p == ReductionParams("ReduceSum", (2, 8, 16), (0, 2), False, (8,), "float16")
    every = helper.make_node("ReduceMax", ["x"], ["y"], keepdims=0)
    assert layer_params(one_node(every, x, opset=18)).axes == (0, 1, 2)


def test_reduction_axes_the_model_computes_come_from_the_shapes_where_they_say_them(one_node):
    from benanza.runtimes.cuda.params import _reduced_axes

    assert _reduced_axes((2, 8, 16), (2, 8, 1), keepdims=True) == (2,)
    assert _reduced_axes((2, 1, 16), (1, 1, 16), keepdims=True) == (0,)
    assert _reduced_axes((2, 8, 16), (2, 16), keepdims=False) == (1,)
    assert _reduced_axes((2, 1, 16), (2, 16), keepdims=False) == (1,)
    assert _reduced_axes((4, 4), (4,), keepdims=False) is None  # the rows or the columns
    assert _reduced_axes((2, 8), (2, 3), keepdims=True) is None
    # axes the model computes (an activation, not a constant): the shapes say which
    from benanza.model.network import InputRef, NetworkNode, NetworkTensor, RefKind
    from benanza.runtimes.cuda.params import _reduction

    def computed(y):
        data = InputRef(RefKind.INPUT, input=0, shape=(2, 8, 16), dtype="float32")
        axes = InputRef(RefKind.INPUT, input=1, shape=(1,), dtype="int64")
        return NetworkNode("ReduceMean", "", 18, (), (data, axes), (NetworkTensor(y, "float32"),), "k")

    assert _reduction(computed((2, 8, 1)), "float32").axes == (2,)
    assert "ambiguous" in _reduction(computed((2, 8, 3)), "float32").reason
    assert "of length 1 only" in _reduction(computed((2, 8, 16)), "float32").reason  # nothing reduced but 1s
    # axes that do not give the model's output shape: said, not run
    data = InputRef(RefKind.INPUT, input=0, shape=(2, 8, 16), dtype="float32")
    axes = InputRef(RefKind.VALUE, shape=(1,), dtype="int64", value=(1,))
    node = NetworkNode("ReduceMean", "", 18, (), (data, axes), (NetworkTensor((2, 8, 1), "float32"),), "k")
    assert "gives (2, 1, 16), not the model's (2, 8, 1)" in _reduction(node, "float32").reason


def test_reduction_shapes_that_disagree_with_the_axes_and_empty_axes_are_unsupported(one_node):
    x = [("x", F, [2, 8])]
    noop = helper.make_node("ReduceSum", ["x"], ["y"], noop_with_empty_axes=1)
    assert "noop_with_empty_axes" in layer_params(one_node(noop, x, opset=18)).reason


def test_layer_and_rms_normalization_see_rows_from_the_axis_on(one_node):
    from benanza.runtimes.cuda.params import NormalizationParams

    x = [("x", F, [2, 5, 768])]
    ln = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], epsilon=1e-6)
    inits = {"g": np.ones(768, np.float32), "b": np.zeros(768, np.float32)}
    p = layer_params(one_node(ln, x, inits), 0, "float16")
    assert p == NormalizationParams("LayerNormalization", (2, 5, 768), 2, float(np.float32(1e-6)), True, "float16")
    assert (p.rows, p.cols) == (10, 768)
    no_bias = helper.make_node("LayerNormalization", ["x", "g"], ["y"], axis=1)
    inits = {"g": np.ones((5, 768), np.float32)}
    p = layer_params(one_node(no_bias, x, inits))
    assert (p.rows, p.cols, p.bias, p.epsilon) == (2, 5 * 768, False, pytest.approx(1e-5))
    rms = helper.make_node("RMSNormalization", ["x", "g"], ["y"])
    p = layer_params(one_node(rms, x, {"g": np.ones(768, np.float32)}, opset=23))
    assert (p.op, p.rows, p.cols, p.bias) == ("RMSNormalization", 10, 768, False)


def test_quantize_and_dequantize_per_tensor_and_per_axis(build_model, process_proto):
    u8 = TensorProto.UINT8

    def net(node, inputs, out_type, inits, opset=19):
        proto = build_model([node], inputs, [(node.output[0], out_type, None)], inits, opset=opset)
        return network_of(process_proto(proto).graph, [0])[1]

    q = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    inits = {"s": np.array(0.1, np.float32), "z": np.array(3, np.uint8)}
    p = layer_params(net(q, [("x", F, [2, 4, 3])], u8, inits), 0, "float16")
    assert p == ElementwiseParams(
        "QuantizeLinear", ((2, 4, 3), (), ()), (2, 4, 3), "float16", (("quantized", "uint8"),)
    )
    dq = helper.make_node("DequantizeLinear", ["w", "s", "z"], ["y"], axis=0)
    inits = {"s": np.full(8, 0.1, np.float32), "z": np.zeros(8, np.int8), "w": np.ones((8, 4), np.int8)}
    p = layer_params(net(dq, [], F, inits), 0, "float16")  # the data side runs in the variant's precision
    assert p == ElementwiseParams(
        "DequantizeLinear", ((8, 4), (8, 1), (8, 1)), (8, 4), "float16", (("quantized", "int8"),)
    )
    int4 = helper.make_node("DequantizeLinear", ["w", "s"], ["y"])
    inits = {"s": np.array(0.1, np.float32), "w": np.ones(8, np.int8)}
    proto = build_model([int4], [], [("y", F, None)], inits, opset=21)
    proto.graph.initializer[1].data_type = TensorProto.INT4  # 8 int4 values, packed two a byte
    proto.graph.initializer[1].raw_data = bytes(4)
    p = layer_params(network_of(process_proto(proto).graph, [0])[1])
    assert isinstance(p, Unsupported) and "int4" in p.reason
    blocked = helper.make_node("DequantizeLinear", ["w", "s"], ["y"], axis=1, block_size=2)
    inits = {"s": np.full((8, 2), 0.1, np.float32), "w": np.ones((8, 4), np.int8)}
    p = layer_params(net(blocked, [], F, inits, opset=21))
    assert isinstance(p, Unsupported) and "blocks of 2" in p.reason


def test_where_keeps_a_constant_operand_in_its_place_and_runs_in_the_data_type(one_node):
    node = helper.make_node("Where", ["c", "x", "fill"], ["y"])
    net = one_node(
        node, [("c", TensorProto.BOOL, [2, 1, 4]), ("x", F, [2, 3, 4])], {"fill": np.array(-1e4, np.float32)}
    )
    p = layer_params(net, 0, "float16")
    assert p == ElementwiseParams("Where", ((2, 1, 4), (2, 3, 4), ()), (2, 3, 4), "float16")


def test_isnan_and_isinf_are_elementwise(one_node):
    p = layer_params(one_node(helper.make_node("IsNaN", ["x"], ["y"]), [("x", F, [6])]))
    assert p == ElementwiseParams("IsNaN", ((6,),), (6,), "float32")


def test_cumsum_takes_its_constant_axis(one_node):
    node = helper.make_node("CumSum", ["x", "axis"], ["y"])
    net = one_node(node, [("x", TensorProto.INT64, [2, 9])], {"axis": np.array(-1, np.int64)})
    assert layer_params(net) == ElementwiseParams(
        "CumSum", ((2, 9),), (2, 9), "int64", (("axis", 1), ("exclusive", 0), ("reverse", 0))
    )


def test_a_resize_of_opset_10_samples_as_upsample_does(one_node):
    """Resize-10 has no coordinate attributes: it samples at out / scale, nearest rounding down."""
    node = helper.make_node("Resize", ["x", "scales"], ["y"], mode="linear")
    net = one_node(node, [("x", F, [1, 1, 3, 5])], {"scales": np.array([1, 1, 2, 2], np.float32)}, opset=10)
    attrs = dict(layer_params(net).attributes)
    assert (attrs["coordinate_transformation_mode"], attrs["nearest_mode"]) == ("asymmetric", "floor")
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")
    net = one_node(node, [("x", F, [1, 1, 3, 5])], {"scales": np.array([1, 1, 2, 2], np.float32)}, opset=13)
    assert dict(layer_params(net).attributes)["coordinate_transformation_mode"] == "half_pixel"


def _einsum_as_derived(p, arrays):
    """What the derived call computes from the operands as they are stored: a strided batched GEMM (each read
    as (batch, m, k) or (batch, k, m) by ``trans_a``, (batch, k, n) or (batch, n, k) by ``trans_b``), a copy
    permuted, or a sum over trailing axes."""
    if isinstance(p, DataMovementParams):
        return arrays[0].transpose(dict(p.attributes)["perm"])
    if isinstance(p, ReductionParams):
        return arrays[0].sum(axis=p.axes)
    a = arrays[0].reshape(p.batch, *((p.k, p.m) if p.trans_a else (p.m, p.k)))
    b = arrays[1].reshape(p.batch, *((p.n, p.k) if p.trans_b else (p.k, p.n)))
    return np.matmul(a.swapaxes(1, 2) if p.trans_a else a, b.swapaxes(1, 2) if p.trans_b else b)


@pytest.mark.parametrize(
    "equation, shapes, kind",
    [
        ("bhqd,bhkd->bhqk", [(2, 3, 5, 8), (2, 3, 7, 8)], (6, 5, 7, 8, False, True)),  # attention's scores
        ("bhqk,bhkd->bhqd", [(2, 3, 5, 7), (2, 3, 7, 8)], (6, 5, 8, 7, False, False)),  # its weighted values
        ("btd,d->bt", [(2, 5, 8), (8,)], (1, 10, 1, 8, False, False)),  # a projection to one score
        ("bkm,bkn->bmn", [(3, 8, 4), (3, 8, 6)], (3, 4, 6, 8, True, False)),
        ("i,j->ij", [(4,), (6,)], (1, 4, 6, 1, False, False)),  # an outer product (rotary frequencies)
        ("bhqd->bqhd", [(2, 3, 5, 8)], "Transpose"),
        ("bij->b", [(2, 3, 4)], "ReduceSum"),
    ],
)
def test_einsum_as_one_library_call_computes_what_onnx_runtime_does(build_model, process_proto, equation, shapes, kind):
    import onnxruntime as ort

    names = [f"x{i}" for i in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], equation=equation)
    proto = build_model([node], [(n, F, list(s)) for n, s in zip(names, shapes, strict=True)], [("y", F, None)])
    p = layer_params(network_of(process_proto(proto).graph, [0])[1])
    arrays = [np.random.default_rng(i).standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)]
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, dict(zip(names, arrays, strict=True)))
    if isinstance(kind, tuple):
        assert isinstance(p, GemmParams) and (p.batch, p.m, p.n, p.k, p.trans_a, p.trans_b) == kind, p
    else:
        assert p.op == kind, p
    got = _einsum_as_derived(p, arrays)
    np.testing.assert_allclose(got.reshape(expected.shape), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "equation, shapes",
    [
        ("ii->i", [(4, 4)]),  # a diagonal
        ("...d,de->...e", [(2, 3, 4), (4, 5)]),  # an ellipsis
        ("bhqd,bhkd->bhkq", [(2, 3, 5, 8), (2, 3, 7, 8)]),  # the output not (batch, rows, columns)
        ("bqhd,bkhd->bhqk", [(2, 5, 3, 8), (2, 7, 3, 8)]),  # operands a framework permutes into copies first
        ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ],
)
def test_einsum_that_is_not_one_library_call_is_refused_with_its_equation(one_node, equation, shapes):
    names = [f"x{i}" for i in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], equation=equation)
    p = layer_params(one_node(node, [(n, F, list(s)) for n, s in zip(names, shapes, strict=True)]))
    assert isinstance(p, Unsupported) and repr(equation) in p.reason, p
