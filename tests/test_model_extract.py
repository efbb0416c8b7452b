"""Layers out of prepared models: the zoo end to end, then one in-memory graph per op."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from benanza.errors import ModelError
from benanza.model.extract import extract
from benanza.model.graph import InputKind, Layer
from benanza.model.shapes import prepare

F = TensorProto.FLOAT
I64 = TensorProto.INT64
POOLS = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"})

# Measured on the onnx wheel's light zoo: (Conv, Gemm, pooling) nodes in the file, then
# layers and unique layer keys at batch 1. A change here is a change of the processor.
ZOO_COUNTS = {
    "bvlc_alexnet": (5, 3, 3, 24, 21),
    "densenet121": (121, 0, 5, 668, 390),
    "inception_v1": (57, 1, 14, 143, 108),
    "inception_v2": (69, 1, 13, 371, 144),
    "resnet50": (53, 1, 2, 176, 56),
    "shufflenet": (49, 1, 5, 203, 53),
    "squeezenet": (26, 0, 4, 66, 38),
    "vgg19": (16, 3, 5, 46, 26),
    "zfnet512": (5, 3, 3, 22, 19),
}
# the classifier output of each model at batch 8 (two end in a 1x1 conv, not a Gemm)
ZOO_LOGITS_AT_8 = {name: [8, 1000] for name in ZOO_COUNTS} | {n: [8, 1000, 1, 1] for n in ("densenet121", "squeezenet")}


def the_layer(processed, op_type: str | None = None) -> Layer:
    layers = [lay for lay in processed.graph.layers if op_type is None or lay.op_type == op_type]
    assert len(layers) == 1, [lay.op_type for lay in processed.graph.layers]
    assert not processed.graph.unsupported, processed.graph.unsupported
    return layers[0]


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


# ================================================================== the zoo, end to end


@pytest.mark.parametrize("name", sorted(ZOO_COUNTS))
def test_zoo_file_op_counts(zoo_path, name):
    """The literals above are the files' own node counts."""
    conv, gemm, pool, _, _ = ZOO_COUNTS[name]
    ops = collections.Counter(n.op_type for n in onnx.load(zoo_path(name)).graph.node)
    assert (ops["Conv"], ops["Gemm"], sum(ops[p] for p in POOLS)) == (conv, gemm, pool)


@pytest.mark.parametrize("name", sorted(ZOO_COUNTS))
def test_zoo_at_batch_1(zoo_model, name):
    conv, gemm, pool, layers, unique = ZOO_COUNTS[name]
    graph = zoo_model(name, 1).graph
    assert graph.unsupported == ()
    assert len(graph.layers) == layers
    assert len(graph.unique_layer_keys) == unique
    assert graph.summary()["unique_layers"] == unique
    ops = collections.Counter(lay.op_type for lay in graph.layers)
    assert (ops["Conv"], ops["Gemm"], sum(ops[p] for p in POOLS)) == (conv, gemm, pool)
    assert "ConstantOfShape" not in ops  # the light zoo's stand-in weights are constants
    assert graph.constant_nodes > 0
    assert [t.shape for t in graph.inputs] == [(1, 3, 224, 224)]
    assert [lay.index for lay in graph.layers] == list(range(layers))
    for lay in graph.layers:
        assert lay.flops is not None and lay.flops >= 0, lay
        assert lay.outputs and all(all(d > 0 for d in o.shape) for o in lay.outputs), lay
        assert len(lay.layer_key) == 16 and int(lay.layer_key, 16) >= 0
        if lay.op_type in ("Conv", "Gemm") or lay.op_type in POOLS:
            assert lay.flops > 0
            assert lay.bytes_moved > 0
            assert all(all(d > 0 for d in s) for s in lay.input_shapes), lay
            assert lay.outputs[0].dtype == "float32"
        if lay.op_type == "Conv":
            attrs = lay.attrs
            assert len(lay.output_shapes[0]) == 4
            assert lay.inputs[1].kind is InputKind.WEIGHT
            assert attrs["auto_pad"] == "NOTSET"
            assert len(attrs["kernel_shape"]) == len(attrs["strides"]) == len(attrs["dilations"]) == 2
            assert len(attrs["pads"]) == 4
            assert tuple(lay.inputs[1].tensor.shape[2:]) == attrs["kernel_shape"]
        if lay.op_type == "Gemm":
            assert len(lay.output_shapes[0]) == 2 and lay.output_shapes[0][0] == 1
        if lay.op_type in ("MaxPool", "AveragePool"):
            assert len(lay.attrs["pads"]) == 4 and len(lay.attrs["strides"]) == 2


def test_resnet50_flops(zoo_model):
    graph = zoo_model("resnet50", 1).graph
    flops = sum(lay.flops for lay in graph.layers if lay.op_type in ("Conv", "Gemm"))
    assert 7.7e9 <= flops <= 8.3e9
    assert flops == 8_178_369_512
    gemm = the_layer_of(graph, "Gemm")
    assert gemm.input_shapes == [[1, 2048], [1000, 2048], [1000]]
    assert gemm.flops == 2 * 1000 * 2048 + 1000


def the_layer_of(graph, op_type: str) -> Layer:
    (layer,) = [lay for lay in graph.layers if lay.op_type == op_type]
    return layer


def test_resnet50_first_conv(zoo_model):
    conv = zoo_model("resnet50", 1).graph.layers[0]
    assert conv.op_type == "Conv"
    assert conv.input_shapes == [[1, 3, 224, 224], [64, 3, 7, 7]]  # no bias: a BatchNormalization follows
    assert conv.output_shapes == [[1, 64, 112, 112]]
    assert conv.attrs["strides"] == (2, 2) and conv.attrs["pads"] == (3, 3, 3, 3)
    assert conv.flops == 2 * 64 * 112 * 112 * 3 * 7 * 7


@pytest.mark.parametrize("name", sorted(ZOO_COUNTS))
def test_zoo_rebatched_to_8(zoo_model, name):
    """Fixed-batch exports hard-code batch 1 in Reshape targets; batch 8 reaches every layer."""
    at1, at8 = zoo_model(name, 1), zoo_model(name, 8)
    graph = at8.graph
    assert at8.binding.rebatch == {graph.inputs[0].name: (1, 8)}
    assert [t.shape for t in graph.inputs] == [(8, 3, 224, 224)]
    assert graph.unsupported == ()
    assert len(graph.layers) == len(at1.graph.layers)
    assert len(graph.unique_layer_keys) == len(at1.graph.unique_layer_keys)
    for lay in graph.layers:
        for inp in lay.inputs:
            if inp.kind is InputKind.ACTIVATION:
                assert inp.tensor.shape[0] == 8, (lay.name, lay.input_shapes)
        for out in lay.outputs:
            assert out.shape[0] == 8, (lay.name, lay.output_shapes)
        if lay.op_type == "Reshape":
            assert lay.inputs[1].kind is InputKind.VALUE and lay.inputs[1].value[0] == 8
    assert graph.layers[-1].output_shapes == [ZOO_LOGITS_AT_8[name]]
    if ZOO_COUNTS[name][1]:
        assert [lay.output_shapes for lay in graph.layers if lay.op_type == "Gemm"][-1] == [[8, 1000]]
    # conv cost is linear in the batch
    convs1 = [lay.flops for lay in at1.graph.layers if lay.op_type == "Conv"]
    convs8 = [lay.flops for lay in graph.layers if lay.op_type == "Conv"]
    assert convs8 == [8 * f for f in convs1]
    # a rebatched layer is another benchmark than its batch-1 self
    assert not (graph.unique_layer_keys & at1.graph.unique_layer_keys)


def test_shufflenet_channel_shuffle_rebatched(zoo_model):
    at8 = zoo_model("shufflenet", 8).graph
    targets = collections.Counter(lay.inputs[1].value for lay in at8.layers if lay.op_type == "Reshape")
    assert targets[(8, 4, 68, 14, 14)] == 8  # split channels into 4 groups ...
    assert targets[(8, 272, 14, 14)] == 8  # ... and merge them back, shuffled
    assert targets[(8, 544)] == 1
    assert sum(targets.values()) == 33
    shuffles = [lay for lay in at8.layers if lay.op_type == "Transpose"]
    assert len(shuffles) == 16
    assert all(lay.attrs["perm"] == (0, 2, 1, 3, 4) and lay.output_shapes[0][0] == 8 for lay in shuffles)


def test_rebatch_leaves_weight_reshapes_alone(build_model, process_proto):
    """A weight of shape [1, ...] reshaped with target [1, ...] is not a batch to rewrite."""
    model = build_model(
        [
            helper.make_node("ConstantOfShape", ["wshape"], ["w"], value=helper.make_tensor("v", F, [1], [0.5])),
            helper.make_node("Reshape", ["w", "wtarget"], ["w3"]),
            helper.make_node("Reshape", ["x", "xtarget"], ["x3"]),
            helper.make_node("Add", ["x3", "w3"], ["y"]),
        ],
        [("x", F, [1, 4096])],
        [("y", F, [1, 64, 64])],
        initializers={
            "wshape": np.array([1, 4096], np.int64),
            "wtarget": np.array([1, 64, 64], np.int64),
            "xtarget": np.array([1, 64, 64], np.int64),
        },
    )
    processed = process_proto(model, batch=8)
    assert processed.binding.rebatch == {"x": (1, 8)}
    add = the_layer(processed, "Add")
    assert add.input_shapes == [[8, 64, 64], [1, 64, 64]]
    assert add.inputs[1].kind is InputKind.WEIGHT
    assert the_layer(processed, "Reshape").inputs[1].value == (8, 64, 64)


# ================================================================== Conv and ConvTranspose


def conv_model(build_model, x_shape, w_shape, bias=True, **attrs):
    inputs = ["x", "w", "b"] if bias else ["x", "w"]
    inits = {"w": np.random.default_rng(0).standard_normal(w_shape).astype(np.float32)}
    if bias:
        inits["b"] = np.zeros(w_shape[0], np.float32)
    return build_model([helper.make_node("Conv", inputs, ["y"], **attrs)], [("x", F, x_shape)], [("y", F, None)], inits)


def test_conv_defaults_and_flops(build_model, process_proto):
    conv = the_layer(process_proto(conv_model(build_model, [1, 3, 32, 32], [8, 3, 3, 3])))
    assert conv.output_shapes == [[1, 8, 30, 30]]
    assert conv.attrs == {
        "auto_pad": "NOTSET",
        "dilations": (1, 1),
        "group": 1,
        "kernel_shape": (3, 3),  # omitted in the node: taken from the weight
        "pads": (0, 0, 0, 0),
        "strides": (1, 1),
    }
    assert [i.kind for i in conv.inputs] == [InputKind.ACTIVATION, InputKind.WEIGHT, InputKind.WEIGHT]
    assert conv.weight_indices == (1, 2)
    outputs = 8 * 30 * 30
    assert conv.flops == 2 * outputs * 3 * 3 * 3 + outputs  # multiply-adds, then the bias
    assert conv.bytes_moved == 4 * (3 * 32 * 32 + 8 * 3 * 3 * 3 + 8 + outputs)


def test_conv_kernel_shape_given_or_taken_from_weight_keys_alike(build_model, process_proto):
    implicit = the_layer(process_proto(conv_model(build_model, [1, 3, 16, 16], [4, 3, 3, 3])))
    explicit = the_layer(process_proto(conv_model(build_model, [1, 3, 16, 16], [4, 3, 3, 3], kernel_shape=[3, 3])))
    assert implicit.layer_key == explicit.layer_key


@pytest.mark.parametrize(
    ("auto_pad", "pads", "out"),
    [
        ("SAME_UPPER", (0, 0, 1, 1), 16),  # total padding 1: the odd one at the end
        ("SAME_LOWER", (1, 1, 0, 0), 16),  # ... or at the start
        ("VALID", (0, 0, 0, 0), 15),
    ],
)
def test_conv_auto_pad_resolved(build_model, process_proto, auto_pad, pads, out):
    model = conv_model(build_model, [1, 3, 32, 32], [8, 3, 3, 3], bias=False, strides=[2, 2], auto_pad=auto_pad)
    conv = the_layer(process_proto(model))
    assert conv.attrs["auto_pad"] == "NOTSET"
    assert conv.attrs["pads"] == pads
    assert conv.output_shapes == [[1, 8, out, out]]
    assert conv.flops == 2 * 8 * out * out * 27
    # the same conv written with explicit pads is the same benchmark ...
    written = conv_model(build_model, [1, 3, 32, 32], [8, 3, 3, 3], bias=False, strides=[2, 2], pads=list(pads))
    assert the_layer(process_proto(written)).layer_key == conv.layer_key
    # ... and computes the same thing
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.testing.assert_allclose(run_ort(model, {"x": x})[0], run_ort(written, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_conv_same_pads_with_dilation_and_odd_input(build_model, process_proto):
    model = conv_model(
        build_model, [1, 2, 15, 10], [4, 2, 3, 3], bias=False, auto_pad="SAME_UPPER", strides=[1, 2], dilations=[2, 1]
    )
    conv = the_layer(process_proto(model))
    # H: out 15, span 5 -> total 4 (2, 2); W: out 5, stride 2, span 3 -> total 1 (0, 1)
    assert conv.attrs["pads"] == (2, 0, 2, 1)
    assert conv.output_shapes == [[1, 4, 15, 5]]


def test_grouped_conv_flops(build_model, process_proto):
    model = conv_model(build_model, [2, 8, 16, 16], [8, 1, 3, 3], bias=False, group=8, pads=[1, 1, 1, 1])
    conv = the_layer(process_proto(model))
    assert conv.output_shapes == [[2, 8, 16, 16]]
    assert conv.attrs["group"] == 8
    assert conv.flops == 2 * (2 * 8 * 16 * 16) * 1 * 3 * 3


def convt_model(build_model, **attrs):
    w = np.random.default_rng(2).standard_normal((4, 2, 3, 3)).astype(np.float32)
    return build_model(
        [helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], **attrs)],
        [("x", F, [1, 4, 8, 8])],
        [("y", F, None)],
        {"w": w},
    )


def test_conv_transpose(build_model, process_proto):
    layer = the_layer(process_proto(convt_model(build_model)))
    assert layer.output_shapes == [[1, 2, 17, 17]]
    assert layer.attrs == {
        "auto_pad": "NOTSET",
        "dilations": (1, 1),
        "group": 1,
        "kernel_shape": (3, 3),
        "output_padding": (0, 0),
        "pads": (0, 0, 0, 0),
        "strides": (2, 2),
    }
    # each of the 4*8*8 inputs scatters into 2 channels x 3x3 taps
    assert layer.flops == 2 * (4 * 8 * 8) * 2 * 3 * 3


@pytest.mark.parametrize(
    ("attrs", "pads"),
    [
        ({"output_shape": [16, 16]}, (1, 1, 0, 0)),
        ({"auto_pad": "SAME_UPPER"}, (0, 0, 1, 1)),
        ({"auto_pad": "SAME_LOWER"}, (1, 1, 0, 0)),
    ],
)
def test_conv_transpose_output_shape_and_auto_pad_resolved(build_model, process_proto, attrs, pads):
    model = convt_model(build_model, **attrs)
    layer = the_layer(process_proto(model))
    assert layer.output_shapes == [[1, 2, 16, 16]]
    assert layer.attrs["pads"] == pads and layer.attrs["auto_pad"] == "NOTSET"
    assert "output_shape" not in layer.attrs
    written = convt_model(build_model, pads=list(pads))
    assert the_layer(process_proto(written)).layer_key == layer.layer_key
    x = np.random.default_rng(3).standard_normal((1, 4, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(run_ort(model, {"x": x})[0], run_ort(written, {"x": x})[0], rtol=1e-5, atol=1e-5)


# ================================================================== Gemm and MatMul


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "attrs"),
    [
        ([4, 8], [8, 16], {}),
        ([8, 4], [8, 16], {"transA": 1}),
        ([4, 8], [16, 8], {"transB": 1}),
        ([8, 4], [16, 8], {"transA": 1, "transB": 1}),
    ],
)
def test_gemm_flops_with_transposes(build_model, process_proto, a_shape, b_shape, attrs):
    model = build_model(
        [helper.make_node("Gemm", ["a", "b", "c"], ["y"], **attrs)],
        [("a", F, a_shape)],
        [("y", F, None)],
        {"b": np.ones(b_shape, np.float32), "c": np.ones(16, np.float32)},
    )
    gemm = the_layer(process_proto(model))
    assert gemm.output_shapes == [[4, 16]]
    assert gemm.flops == 2 * 4 * 16 * 8 + 4 * 16
    assert gemm.attrs == {"alpha": 1.0, "beta": 1.0, "transA": attrs.get("transA", 0), "transB": attrs.get("transB", 0)}


def test_gemm_without_bias(build_model, process_proto):
    model = build_model(
        [helper.make_node("Gemm", ["a", "b"], ["y"], transB=1)], [("a", F, [3, 5]), ("b", F, [7, 5])], [("y", F, None)]
    )
    gemm = the_layer(process_proto(model))
    assert gemm.output_shapes == [[3, 7]]
    assert gemm.flops == 2 * 3 * 7 * 5
    assert [i.kind for i in gemm.inputs] == [InputKind.ACTIVATION, InputKind.ACTIVATION]


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "out"),
    [
        ([2, 3, 4, 5], [2, 3, 5, 6], [2, 3, 4, 6]),  # batched
        ([2, 1, 4, 5], [3, 5, 6], [2, 3, 4, 6]),  # broadcast batch dims
        ([4, 5], [5, 6], [4, 6]),
        ([4, 5], [5], [4]),  # vector right operand
        ([5], [2, 5, 6], [2, 6]),  # vector left operand
    ],
)
def test_matmul_shapes_and_flops(build_model, process_proto, a_shape, b_shape, out):
    model = build_model(
        [helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", F, a_shape), ("b", F, b_shape)], [("y", F, None)]
    )
    matmul = the_layer(process_proto(model))
    assert matmul.output_shapes == [out]
    assert matmul.flops == 2 * int(np.prod(out)) * a_shape[-1]


def test_matmul_with_constant_weight(build_model, process_proto):
    model = build_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [("x", F, ["B", 16, 32])],
        [("y", F, None)],
        {"w": np.ones((32, 64), np.float32)},
    )
    matmul = the_layer(process_proto(model, batch=4))
    assert matmul.output_shapes == [[4, 16, 64]]
    assert [i.kind for i in matmul.inputs] == [InputKind.ACTIVATION, InputKind.WEIGHT]
    assert matmul.flops == 2 * 4 * 16 * 64 * 32


# ================================================================== pooling and normalisation


def test_max_pool_defaults_filled(build_model, process_proto):
    model = build_model(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2])], [("x", F, [1, 4, 8, 8])], [("y", F, None)]
    )
    pool = the_layer(process_proto(model))
    assert pool.output_shapes == [[1, 4, 7, 7]]
    assert pool.attrs == {
        "auto_pad": "NOTSET",
        "ceil_mode": 0,
        "dilations": (1, 1),
        "kernel_shape": (2, 2),
        "pads": (0, 0, 0, 0),
        "storage_order": 0,
        "strides": (1, 1),
    }
    assert pool.flops == 4 * 7 * 7 * 2 * 2
    explicit = build_model(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 0, 0])],
        [("x", F, [1, 4, 8, 8])],
        [("y", F, None)],
    )
    assert the_layer(process_proto(explicit)).layer_key == pool.layer_key


def test_average_pool_same_upper(build_model, process_proto):
    model = build_model(
        [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")],
        [("x", F, [2, 4, 9, 9])],
        [("y", F, None)],
    )
    pool = the_layer(process_proto(model))
    assert pool.output_shapes == [[2, 4, 5, 5]]
    assert pool.attrs["pads"] == (1, 1, 1, 1) and pool.attrs["auto_pad"] == "NOTSET"
    assert pool.attrs["count_include_pad"] == 0 and pool.attrs["ceil_mode"] == 0
    assert pool.flops == 2 * 4 * 5 * 5 * 9


def test_global_average_pool(build_model, process_proto):
    model = build_model(
        [helper.make_node("GlobalAveragePool", ["x"], ["y"])], [("x", F, [2, 8, 4, 4])], [("y", F, None)]
    )
    pool = the_layer(process_proto(model))
    assert pool.output_shapes == [[2, 8, 1, 1]]
    assert pool.flops == 2 * 8 * 4 * 4
    assert pool.attrs == {}


def test_batch_normalization(build_model, process_proto):
    stats = {k: np.ones(4, np.float32) for k in ("scale", "bias", "mean", "var")}
    model = build_model(
        [helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], epsilon=1e-3)],
        [("x", F, [2, 4, 3, 3])],
        [("y", F, None)],
        stats,
    )
    bn = the_layer(process_proto(model))
    assert bn.output_shapes == [[2, 4, 3, 3]]
    assert bn.flops == 2 * 2 * 4 * 3 * 3
    assert bn.weight_indices == (1, 2, 3, 4)
    assert bn.attrs["epsilon"] == pytest.approx(1e-3)
    assert set(bn.attrs) == {"epsilon", "momentum"}  # training_mode=0 is inference, as in opset 9


def test_layer_normalization(build_model, process_proto):
    def layer_norm(**attrs):
        model = build_model(
            [helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], **attrs)],
            [("x", F, [2, 5, 8])],
            [("y", F, None)],
            {"scale": np.ones(8, np.float32), "bias": np.zeros(8, np.float32)},
        )
        return the_layer(process_proto(model))

    default, negative, positive = layer_norm(), layer_norm(axis=-1), layer_norm(axis=2)
    assert default.attrs["axis"] == negative.attrs["axis"] == positive.attrs["axis"] == 2
    assert default.layer_key == negative.layer_key == positive.layer_key
    assert default.flops == 5 * 2 * 5 * 8
    assert default.output_shapes == [[2, 5, 8]]
    assert layer_norm(axis=1).layer_key != default.layer_key


# ================================================================== Softmax across opsets


def softmax(build_model, process_proto, shape, opset, **attrs) -> Layer:
    model = build_model(
        [helper.make_node("Softmax", ["x"], ["y"], **attrs)], [("x", F, shape)], [("y", F, None)], opset=opset
    )
    return the_layer(process_proto(model))


def test_softmax_last_axis_2d_same_across_opsets(build_model, process_proto):
    old = softmax(build_model, process_proto, [4, 10], 11, axis=-1)
    old_default = softmax(build_model, process_proto, [4, 10], 11)  # default axis 1 is the last of 2-D
    new = softmax(build_model, process_proto, [4, 10], 13, axis=-1)
    new_default = softmax(build_model, process_proto, [4, 10], 13)
    assert old.layer_key == old_default.layer_key == new.layer_key == new_default.layer_key
    assert new.attrs == {"axis": 1}
    assert new.flops == 5 * 40


def test_softmax_axis_1_on_4d_differs_between_opsets(build_model, process_proto):
    """Opset 11 flattens at axis 1 (softmax over C*H*W); opset 13 normalises over C only."""
    old = softmax(build_model, process_proto, [2, 3, 4, 5], 11, axis=1)
    new = softmax(build_model, process_proto, [2, 3, 4, 5], 13, axis=1)
    assert old.layer_key != new.layer_key
    assert old.attrs == {"axis": 1, "coerce_2d": 1}
    assert new.attrs == {"axis": 1}
    # over the last axis both opsets agree
    assert (
        softmax(build_model, process_proto, [2, 3, 4, 5], 11, axis=3).layer_key
        == softmax(build_model, process_proto, [2, 3, 4, 5], 13, axis=-1).layer_key
    )


# ================================================================== element-wise


@pytest.mark.parametrize(
    ("op", "inputs", "out", "flops"),
    [
        ("Relu", [[2, 3, 4]], [2, 3, 4], 24),
        ("Add", [[2, 3, 4], [4]], [2, 3, 4], 24),  # broadcast: one op per output element
        ("Mul", [[2, 1, 4], [1, 3, 1]], [2, 3, 4], 24),
        ("Sigmoid", [[7]], [7], 7),
        ("Sum", [[2, 3], [2, 3], [2, 3]], [2, 3], 12),  # n inputs: n-1 adds per element
        ("Max", [[5], [5]], [5], 5),
    ],
)
def test_element_wise(build_model, process_proto, op, inputs, out, flops):
    names = [f"x{i}" for i in range(len(inputs))]
    model = build_model(
        [helper.make_node(op, names, ["y"])], [(n, F, s) for n, s in zip(names, inputs, strict=True)], [("y", F, None)]
    )
    layer = the_layer(process_proto(model))
    assert layer.output_shapes == [out]
    assert layer.input_shapes == inputs
    assert layer.flops == flops
    assert layer.bytes_moved == 4 * (sum(int(np.prod(s)) for s in inputs) + int(np.prod(out)))


def test_unregistered_op_is_a_layer_with_unknown_flops(build_model, process_proto):
    model = build_model(
        [helper.make_node("ReverseSequence", ["x", "lens"], ["y"])],
        [("x", F, [4, 2, 3]), ("lens", I64, [2])],
        [("y", F, None)],
    )
    layer = the_layer(process_proto(model))
    assert layer.flops is None  # unknown, never 0
    assert layer.attrs == {"batch_axis": 1, "time_axis": 0}


def test_a_flop_counter_that_fails_leaves_the_layer_with_unknown_flops(build_model, process_proto, monkeypatch):
    """A form of an op its counter does not expect costs the layer its FLOPs (None), never its benchmark."""
    from benanza.model import ops

    def broken(attrs, ctx):
        raise KeyError("an attribute the counter expected")

    monkeypatch.setitem(ops.OPS, ("", "Relu"), ops.OpInfo(None, broken))
    model = build_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2, 3])], [("y", F, None)])
    graph = process_proto(model).graph
    assert [(layer.op_type, layer.flops) for layer in graph.layers] == [("Relu", None)] and not graph.unsupported


def _contrib_flops(op_type: str, inputs, outputs, **attrs) -> int:
    """An ONNX Runtime contrib op's FLOPs from its tensors' shapes (``None``: an absent input)."""
    from benanza.model import ops
    from benanza.model.graph import TensorSpec

    spec = ops.lookup(op_type, "com.microsoft") or ops.lookup(op_type)
    ctx = ops.OpContext(
        tuple(None if s is None else TensorSpec("", tuple(s), "float32") for s in inputs),
        tuple(TensorSpec("", tuple(s), "float32") for s in outputs),
        1,
    )
    return spec.flops(attrs, ctx)


def test_contrib_ops_of_todays_exports_count_their_flops():
    # onnxruntime-genai's decoder step: a packed QKV projection, attention over a 128-token cache (2 of 8 KV heads)
    assert _contrib_flops("MatMulNBits", [(1, 1, 512), (768, 16, 16), (12288,)], [(1, 1, 768)], K=512, N=768) == (
        2 * 512 * 768
    )
    gqa = [(1, 1, 768), None, None, (1, 2, 128, 64), (1, 2, 128, 64)]
    assert _contrib_flops("GroupQueryAttention", gqa, [(1, 1, 512), (1, 2, 129, 64), (1, 2, 129, 64)]) == (
        4 * 512 * 129  # Q.K and the weighted sum over the 129 positions of the present cache
    )
    # ORT's transformer optimizer: Attention with its projection inside, at sequence 128 of BERT-base
    attention = _contrib_flops("Attention", [(1, 128, 768), (768, 2304), (2304,)], [(1, 128, 768)], num_heads=12)
    assert attention == 2 * 128 * 768 * 2304 + 4 * 128 * 768 * 128
    mha = _contrib_flops("MultiHeadAttention", [(1, 128, 768), (1, 64, 768), (1, 64, 768)], [(1, 128, 768)])
    assert mha == 4 * 128 * 768 * 64  # over the key's 64 positions
    # packed, as ORT's optimizer writes a diffusion UNet's: KV (batch, keys, heads, 2, dim), QKV (.., 3, dim)
    cross = _contrib_flops("MultiHeadAttention", [(2, 4096, 320), (2, 77, 8, 2, 40)], [(2, 4096, 320)], num_heads=8)
    assert cross == 4 * 2 * 4096 * 320 * 77  # over the 77 text tokens, not the 4096 queries
    packed = _contrib_flops("MultiHeadAttention", [(2, 256, 8, 3, 40)], [(2, 256, 320)], num_heads=8)
    assert packed == 4 * 2 * 256 * 320 * 256
    assert _contrib_flops("QGemm", [(1, 2048), None, None, (1000, 2048)], [(1, 1000)], transB=1) == 2 * 1000 * 2048
    assert _contrib_flops("FusedMatMul", [(8, 64, 32), (8, 64, 16)], [(8, 32, 16)], transA=1) == 2 * 8 * 32 * 16 * 64
    assert _contrib_flops("SkipSimplifiedLayerNormalization", [(1, 1, 512)] * 2 + [(512,)], [(1, 1, 512)]) == 5 * 512
    assert _contrib_flops("GatherBlockQuantized", [(32000, 256), (1, 1)], [(1, 1, 512)]) == 0  # reads a row


def test_dtype_names(build_model, process_proto):
    model = build_model(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)],
        [("x", I64, [3])],
        [("y", TensorProto.FLOAT16, None)],
    )
    cast = the_layer(process_proto(model))
    assert (cast.inputs[0].tensor.dtype, cast.outputs[0].dtype) == ("int64", "float16")
    assert cast.bytes_moved == 3 * 8 + 3 * 2


# ================================================================== shapes from Shape chains


def shape_chain_model(build_model):
    """``Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1]))``: flatten, keeping the batch."""
    return build_model(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
            helper.make_node("Unsqueeze", ["n", "axis0"], ["n1"]),
            helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
            helper.make_node("Reshape", ["x", "target"], ["flat"]),
            helper.make_node("Relu", ["flat"], ["y"]),
        ],
        [("x", F, ["N", 3, 4, 4])],
        [("y", F, ["N", 48])],
        {"zero": np.array(0, np.int64), "axis0": np.array([0], np.int64), "minus1": np.array([-1], np.int64)},
    )


@pytest.mark.parametrize("batch", [1, 8])
def test_shape_chain_from_symbolic_batch_resolves(build_model, process_proto, batch):
    processed = process_proto(shape_chain_model(build_model), batch=batch)
    graph = processed.graph
    assert graph.unsupported == ()
    assert [lay.op_type for lay in graph.layers] == ["Reshape", "Relu"]  # the chain is constant
    reshape, relu = graph.layers
    assert reshape.input_shapes == [[batch, 3, 4, 4], [2]]
    assert reshape.inputs[1].kind is InputKind.VALUE
    assert reshape.inputs[1].value in ((batch, -1), (batch, 48))
    assert reshape.output_shapes == relu.output_shapes == [[batch, 48]]
    assert graph.edges == ((0, 1),)
    assert processed.binding.shapes == {"x": (batch, 3, 4, 4)}


def test_shape_chain_keys_follow_the_batch(build_model, process_proto):
    model = shape_chain_model(build_model)
    at1, at1_again, at8 = (process_proto(model, batch=b).graph for b in (1, 1, 8))
    assert at1.layer_keys == at1_again.layer_keys
    assert not set(at1.layer_keys) & set(at8.layer_keys)


# ================================================================== attributes that became inputs


def squeeze_model(build_model, opset, axes, shape=(2, 1, 3, 1)):
    if opset < 13:
        node, inits = helper.make_node("Squeeze", ["x"], ["y"], axes=axes), {}
    else:
        node, inits = helper.make_node("Squeeze", ["x", "axes"], ["y"]), {"axes": np.array(axes, np.int64)}
    return build_model([node], [("x", F, list(shape))], [("y", F, None)], inits, opset=opset)


@pytest.mark.parametrize("axes", [[1, 3], [3, 1], [-1, 1], [-3, -1]])
def test_squeeze_axes_attribute_and_input_key_alike(build_model, process_proto, axes):
    old = the_layer(process_proto(squeeze_model(build_model, 11, axes)))
    new = the_layer(process_proto(squeeze_model(build_model, 13, axes)))
    assert old.attrs["axes"] == (1, 3)  # negative axes made positive, sorted
    assert new.inputs[1].kind is InputKind.VALUE and new.inputs[1].value == (1, 3)
    assert old.output_shapes == new.output_shapes == [[2, 3]]
    assert old.layer_key == new.layer_key
    reference = the_layer(process_proto(squeeze_model(build_model, 13, [1, 3])))
    assert new.layer_key == reference.layer_key


def test_squeeze_different_axes_differ(build_model, process_proto):
    one = the_layer(process_proto(squeeze_model(build_model, 13, [1])))
    three = the_layer(process_proto(squeeze_model(build_model, 13, [3])))
    assert one.output_shapes == [[2, 3, 1]] and three.output_shapes == [[2, 1, 3]]
    assert one.layer_key != three.layer_key


def test_unsqueeze_negative_axes_across_opsets(build_model, process_proto):
    old = build_model(
        [helper.make_node("Unsqueeze", ["x"], ["y"], axes=[-1])], [("x", F, [2, 3])], [("y", F, None)], opset=11
    )
    new = build_model(
        [helper.make_node("Unsqueeze", ["x", "axes"], ["y"])],
        [("x", F, [2, 3])],
        [("y", F, None)],
        {"axes": np.array([-1], np.int64)},
        opset=13,
    )
    old_layer, new_layer = the_layer(process_proto(old)), the_layer(process_proto(new))
    assert old_layer.attrs["axes"] == (2,)  # against the output's rank
    assert old_layer.output_shapes == new_layer.output_shapes == [[2, 3, 1]]
    assert old_layer.layer_key == new_layer.layer_key


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_reduce_mean_keys_alike_across_opsets(build_model, process_proto, opset):
    if opset < 18:
        node, inits = helper.make_node("ReduceMean", ["x"], ["y"], axes=[-1]), {}
    else:
        node, inits = helper.make_node("ReduceMean", ["x", "axes"], ["y"]), {"axes": np.array([-1], np.int64)}
    model = build_model([node], [("x", F, [2, 3, 4])], [("y", F, None)], inits, opset=opset)
    layer = the_layer(process_proto(model))
    reference = build_model(
        [helper.make_node("ReduceMean", ["x"], ["y"], axes=[2], keepdims=1)],
        [("x", F, [2, 3, 4])],
        [("y", F, None)],
        opset=13,
    )
    assert layer.output_shapes == [[2, 3, 1]]
    assert layer.flops == 24
    assert layer.layer_key == the_layer(process_proto(reference)).layer_key


def test_batch_normalization_keys_alike_across_opsets(build_model, process_proto):
    stats = {k: np.ones(4, np.float32) for k in ("scale", "bias", "mean", "var")}

    def bn(opset):
        model = build_model(
            [helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"])],
            [("x", F, [1, 4, 2, 2])],
            [("y", F, None)],
            stats,
            opset=opset,
        )
        return the_layer(process_proto(model)).layer_key

    assert bn(9) == bn(15)


@pytest.mark.parametrize("axis", [-1, 2])
def test_negative_axis_normalised(build_model, process_proto, axis):
    model = build_model(
        [helper.make_node("Concat", ["a", "b"], ["y"], axis=axis)],
        [("a", F, [2, 3, 4]), ("b", F, [2, 3, 5])],
        [("y", F, None)],
    )
    concat = the_layer(process_proto(model))
    assert concat.attrs == {"axis": 2}
    assert concat.output_shapes == [[2, 3, 9]]
    assert concat.flops == 0


def test_clip_bounds_as_inputs_join_the_attributes(build_model, process_proto):
    def clip(opset, lo, hi):
        if opset < 11:
            node, inits = helper.make_node("Clip", ["x"], ["y"], min=lo, max=hi), {}
        else:
            node, inits = (
                helper.make_node("Clip", ["x", "lo", "hi"], ["y"]),
                {"lo": np.float32(lo), "hi": np.float32(hi)},
            )
        model = build_model([node], [("x", F, [2, 3])], [("y", F, None)], inits, opset=opset)
        return the_layer(process_proto(model))

    old, new = clip(6, 0.0, 6.0), clip(13, 0.0, 6.0)
    assert new.inputs[1].kind is InputKind.VALUE and new.inputs[2].value == (6.0,)
    assert old.layer_key == new.layer_key
    assert clip(13, 0.0, 4.0).layer_key != new.layer_key


# ================================================================== unsupported nodes and control flow


def if_model(build_model):
    then_branch = helper.make_graph(
        [helper.make_node("Relu", ["a"], ["then_out"])],
        "then",
        [],
        [helper.make_tensor_value_info("then_out", F, [2, 4])],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Neg", ["a"], ["else_out"])],
        "else",
        [],
        [helper.make_tensor_value_info("else_out", F, [2, 4])],
    )
    return build_model(
        [
            *_condition_from_data("x"),
            helper.make_node("Tanh", ["x"], ["a"], name="before"),
            helper.make_node("If", ["cond"], ["b"], then_branch=then_branch, else_branch=else_branch, name="branch"),
            helper.make_node("Sigmoid", ["b"], ["y"], name="after"),
            helper.make_node("Exp", ["x"], ["z"], name="beside"),
        ],
        [("x", F, [2, 4])],
        [("y", F, [2, 4]), ("z", F, [2, 4])],
    )


def _condition_from_data(x: str) -> list[onnx.NodeProto]:
    """``cond = ReduceMax(x) > ReduceMin(x)``: a condition the data decides, so the If stays one layer (one
    that an input decides is folded to the branch it is fed: ``benanza.model.steering``)."""
    return [
        helper.make_node("ReduceMax", [x], ["peak"], keepdims=0, name="peak"),
        helper.make_node("ReduceMin", [x], ["floor"], keepdims=0, name="floor"),
        helper.make_node("Greater", ["peak", "floor"], ["cond"], name="positive"),
    ]


def test_if_is_one_layer_that_reads_what_its_branches_capture(build_model, process_proto):
    graph = process_proto(if_model(build_model)).graph
    assert graph.unsupported == ()
    index = {lay.name: lay.index for lay in graph.layers}
    assert set(index) == {"peak", "floor", "positive", "before", "branch", "after", "beside"}
    branch = graph.layers[index["branch"]]
    # the runtime condition, then 'before's output, which both branches read from the outer scope
    assert [(i.tensor.name, i.kind) for i in branch.inputs] == [("cond", "activation"), ("a", "activation")]
    assert branch.captured == 1 and [i.tensor.name for i in branch.node_inputs] == ["cond"]
    assert branch.output_shapes == [[2, 4]]  # both branches agree on the shape
    assert {name for name, _ in branch.subgraphs} == {"then_branch", "else_branch"}
    assert {(a, b) for a, b in graph.edges if index["branch"] in (a, b)} == {
        (index["positive"], index["branch"]),
        (index["before"], index["branch"]),
        (index["branch"], index["after"]),
    }


def loop_model(build_model):
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["v_in", "v_in"], ["v_out"])],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_in", F, [2, 4]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", F, [2, 4]),
        ],
    )
    return build_model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="before"),
            helper.make_node("Loop", ["trips", "go", "a"], ["b"], body=body, name="loop"),
            helper.make_node("Sigmoid", ["b"], ["y"], name="after"),
            helper.make_node("Tanh", ["x"], ["z"], name="beside"),
        ],
        [("x", F, [2, 4]), ("trips", I64, []), ("go", TensorProto.BOOL, [])],
        [("y", F, [2, 4]), ("z", F, [2, 4])],
    )


def test_loop_reported_and_downstream_shaped_by_running_it(build_model, process_proto):
    graph = process_proto(loop_model(build_model)).graph
    (loop,) = graph.unsupported
    assert (loop.node, loop.op_type) == ("loop", "Loop")
    assert "trip count M 'trips' is a runtime value" in loop.reason  # a benchmark could not repeat it
    # ONNX shape inference does not see through the loop-carried value; ONNX Runtime runs the
    # Loop with 1 and 2 trips, the shape does not change, so 'after' is keyed
    assert [lay.name for lay in graph.layers] == ["before", "after", "beside"]
    assert graph.layers[1].input_shapes == [[2, 4]]
    assert graph.shape_method == "onnx+onnxruntime"


def test_unknown_domain_reported(build_model, process_proto):
    model = build_model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="before"),
            helper.make_node("Foo", ["a"], ["b"], domain="com.example", name="foo"),
            helper.make_node("Sigmoid", ["b"], ["y"], name="after"),
            helper.make_node("Tanh", ["a"], ["z"], name="beside"),
        ],
        [("x", F, [2, 4])],
        [("y", F, [2, 4]), ("z", F, [2, 4])],
        extra_opsets={"com.example": 1},
    )
    graph = process_proto(model).graph
    by_node = {u.node: u for u in graph.unsupported}
    assert set(by_node) == {"foo", "after"}
    assert by_node["foo"].domain == "com.example"
    assert (
        "com.example::Foo" in by_node["foo"].reason
        and "no operator schema" in by_node["foo"].reason
        and "ONNX Runtime" in by_node["foo"].reason
    )
    assert by_node["after"].reason == (
        "unknown shape of input 'b': neither ONNX nor ONNX Runtime can shape com.example::Foo "
        "(ONNX Runtime has no kernel for it)"
    )
    assert [lay.name for lay in graph.layers] == ["before", "beside"]
    assert graph.edges == ((0, 1),)  # 'beside' reads 'before' directly


def test_domain_not_imported(build_model, process_proto):
    model = build_model(
        [helper.make_node("Foo", ["x"], ["y"], domain="com.example", name="foo")],
        [("x", F, [2])],
        [("y", F, [2])],
        check=False,
    )
    # invalid ONNX: inference refuses the whole model, with the reason on one line
    with pytest.raises(ModelError, match=r"^mem\.onnx: shape inference failed: .*com\.example"):
        process_proto(model)
    graph = extract(model, "raw", "raw.onnx")  # the extractor alone reports the node
    assert graph.layers == ()
    assert graph.unsupported[0].reason == "domain 'com.example' is not imported by the model"


# ================================================================== functions, constants, order


def test_local_function_inlined(build_model, process_proto):
    add_relu = helper.make_function(
        "local",
        "AddRelu",
        ["p", "q"],
        ["r"],
        [helper.make_node("Add", ["p", "q"], ["s"]), helper.make_node("Relu", ["s"], ["r"])],
        [helper.make_opsetid("", 17)],
    )
    model = build_model(
        [helper.make_node("AddRelu", ["x", "w"], ["a"], domain="local"), helper.make_node("Sigmoid", ["a"], ["y"])],
        [("x", F, [2, 4])],
        [("y", F, [2, 4])],
        {"w": np.ones((2, 4), np.float32)},
        extra_opsets={"local": 1},
        functions=[add_relu],
    )
    graph = process_proto(model).graph
    assert graph.unsupported == ()
    assert [lay.op_type for lay in graph.layers] == ["Add", "Relu", "Sigmoid"]
    assert all(lay.domain == "" and lay.output_shapes == [[2, 4]] for lay in graph.layers)
    assert graph.layers[0].inputs[1].kind is InputKind.WEIGHT
    assert graph.edges == ((0, 1), (1, 2))


def test_constant_nodes_are_not_layers(build_model, process_proto):
    model = build_model(
        [
            helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", F, [4], [1, 2, 3, 4])),
            helper.make_node("Mul", ["c", "c"], ["c2"]),  # constant: only reads constants
            helper.make_node("Add", ["x", "c2"], ["y"]),
        ],
        [("x", F, [3, 4])],
        [("y", F, None)],
    )
    graph = process_proto(model).graph
    assert [lay.op_type for lay in graph.layers] == ["Add"]
    assert graph.layers[0].inputs[1].kind is InputKind.WEIGHT


def test_unsorted_nodes_come_out_in_topological_order(build_model):
    nodes = [
        helper.make_node("Sigmoid", ["b"], ["y"], name="third"),
        helper.make_node("Relu", ["a"], ["b"], name="second"),
        helper.make_node("Neg", ["x"], ["a"], name="first"),
    ]
    model = build_model(nodes, [("x", F, [3])], [("y", F, [3])], check=False)
    prepared, _ = prepare(model, "unsorted.onnx")
    graph = extract(prepared, "unsorted", "unsorted.onnx")
    assert [lay.name for lay in graph.layers] == ["first", "second", "third"]
    assert graph.edges == ((0, 1), (1, 2))
    assert (graph.model, graph.path) == ("unsorted", "unsorted.onnx")


def test_unused_optional_output_is_dropped(build_model, process_proto):
    model = build_model(
        [helper.make_node("Dropout", ["x"], ["y", "mask"]), helper.make_node("Relu", ["y"], ["z"])],
        [("x", F, [2, 3])],
        [("z", F, None)],
        opset=11,
    )
    graph = process_proto(model).graph
    assert graph.unsupported == ()
    dropout = graph.layers[0]
    assert dropout.op_type == "Dropout"
    assert [o.name for o in dropout.outputs] in (["y"], ["y", "mask"])


def test_layer_to_dict(build_model, process_proto):
    layer = the_layer(process_proto(conv_model(build_model, [1, 3, 8, 8], [2, 3, 1, 1], bias=False)))
    d = layer.to_dict()
    assert d["op_type"] == "Conv" and d["layer_key"] == layer.layer_key
    assert d["input_shapes"] == [[1, 3, 8, 8], [2, 3, 1, 1]]
    assert d["output_shapes"] == [[1, 2, 8, 8]]
    assert d["weight_inputs"] == [1]
    assert d["attributes"]["pads"] == [0, 0, 0, 0]
    assert d["inputs"][1]["kind"] == "weight"


@pytest.mark.parametrize("target_from", ["initializer", "constant_tensor", "constant_ints"])
def test_rebatch_rewrites_a_hard_coded_reshape_target(build_model, process_proto, target_from):
    """Exporters write a fixed batch into Reshape targets as initializers or Constant nodes."""
    target = np.array([1, 48], np.int64)
    nodes = [helper.make_node("Reshape", ["x", "target"], ["flat"]), helper.make_node("Relu", ["flat"], ["y"])]
    inits = {"target": target} if target_from == "initializer" else {}
    if target_from == "constant_tensor":
        nodes.insert(0, helper.make_node("Constant", [], ["target"], value=helper.make_tensor("t", I64, [2], target)))
    if target_from == "constant_ints":
        nodes.insert(0, helper.make_node("Constant", [], ["target"], value_ints=[1, 48]))
    model = build_model(nodes, [("x", F, [1, 3, 4, 4])], [("y", F, [1, 48])], inits)
    before = model.SerializeToString()
    processed = process_proto(model, batch=8)
    assert model.SerializeToString() == before  # the caller's proto is not touched
    reshape, relu = processed.graph.layers
    assert reshape.inputs[1].value == (8, 48)
    assert reshape.output_shapes == relu.output_shapes == [[8, 48]]
    assert processed.binding.rebatch == {"x": (1, 8)}


def test_rebatch_leaves_flexible_targets_alone(build_model, process_proto):
    model = build_model(
        [helper.make_node("Reshape", ["x", "target"], ["y"])],
        [("x", F, [1, 3, 4, 4])],
        [("y", F, [1, 48])],
        {"target": np.array([-1, 48], np.int64)},
    )
    reshape = the_layer(process_proto(model, batch=4))
    assert reshape.inputs[1].value == (-1, 48)
    assert reshape.output_shapes == [[4, 48]]


def test_unsorted_if_capturing_a_later_tensor(build_model, process_proto):
    """An If reads 'a' only inside its branches; sorting must still put 'a's producer first."""
    branch = helper.make_graph(
        [helper.make_node("Relu", ["a"], ["out"])], "branch", [], [helper.make_tensor_value_info("out", F, [2, 4])]
    )
    model = build_model(
        [
            helper.make_node("If", ["cond"], ["b"], then_branch=branch, else_branch=branch, name="branch"),
            helper.make_node("Sigmoid", ["b"], ["y"], name="after"),
            helper.make_node("Tanh", ["x"], ["a"], name="before"),
            *_condition_from_data("x"),
        ],
        [("x", F, [2, 4])],
        [("y", F, [2, 4])],
        check=False,
    )
    graph = process_proto(model).graph
    assert graph.unsupported == ()
    names = [lay.name for lay in graph.layers]
    assert names.index("before") < names.index("branch") < names.index("after")
    after = graph.layers[names.index("after")]
    assert after.input_shapes == [[2, 4]]
    assert (names.index("before"), names.index("branch")) in graph.edges
    assert (names.index("branch"), names.index("after")) in graph.edges
