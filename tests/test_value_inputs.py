"""Constant inputs that are values: keyed by value and carried into the benchmark by value.

A Resize's scales, a quantized op's zero points, a Clip's bounds and a Pad's pads change what
the op does; if a benchmark synthesised them as random weights it would measure another op,
or fail (ONNX Runtime refuses a Resize whose scales are not positive). A quantized op's scales
change its results, not its work: they are carried by value too (a synthesised scale could be
zero), but only which of them are equal is keyed. Only large learned tensors are synthesised.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from benanza.bench.build import build_onnx
from benanza.model.graph import InputKind
from benanza.model.keys import SCALE_MAX_ELEMENTS, Slot, constant_kind
from benanza.model.network import network_of
from benanza.model.subgraphs import find_model_subgraphs
from benanza.runtimes.onnxruntime import feeds_for, session_options

F = TensorProto.FLOAT
U8 = TensorProto.UINT8


def only_layer(processed, op_type):
    (layer,) = [lay for lay in processed.graph.layers if lay.op_type == op_type]
    assert not processed.graph.unsupported, processed.graph.unsupported
    return layer


def benchmark_of(processed, layer):
    """The layer's benchmark model as a runtime gets it, run once in ONNX Runtime."""
    _, network = network_of(processed.graph, [layer.index])
    model = build_onnx(network)
    onnx.checker.check_model(model)
    session = ort.InferenceSession(
        model.SerializeToString(), session_options("extended", 1), providers=["CPUExecutionProvider"]
    )
    outputs = session.run(None, feeds_for(model))
    assert [list(o.shape) for o in outputs] == layer.output_shapes
    return model


def carried(model: onnx.ModelProto) -> list[np.ndarray]:
    """The constant inputs the benchmark model's node reads, by position."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    (node,) = model.graph.node
    return [inits.get(name) for name in node.input]


def resize_model(build_model, scales):
    return build_model(
        [helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")],
        [("x", F, [1, 3, 8, 8])],
        [("y", F, None)],
        {"scales": np.array(scales, np.float32)},
        opset=19,
    )


def test_resize_scales_are_carried_and_the_benchmark_runs(build_model, process_proto):
    """Before: scales were synthesised as a random weight and ONNX Runtime refused the benchmark
    ("Scale value should be greater than 0"), so a YOLO-style detector's Resize layers failed."""
    processed = process_proto(resize_model(build_model, [1, 1, 2, 2]))
    layer = only_layer(processed, "Resize")
    model = benchmark_of(processed, layer)
    assert carried(model)[2].tolist() == [1.0, 1.0, 2.0, 2.0]
    assert layer.inputs[2].kind is InputKind.VALUE and layer.inputs[2].value == (1.0, 1.0, 2.0, 2.0)


def test_resize_layers_differing_only_in_scales_have_different_keys(build_model, process_proto):
    a = only_layer(process_proto(resize_model(build_model, [1, 1, 2, 2])), "Resize")
    b = only_layer(process_proto(resize_model(build_model, [1, 1, 2.05, 2.05])), "Resize")
    assert a.output_shapes == b.output_shapes == [[1, 3, 16, 16]]
    assert a.layer_key != b.layer_key


def qlinear_conv_model(build_model, y_scale=0.2, w_scale=None, weight_seed=0, channels=8, w_zero=0):
    rng = np.random.default_rng(weight_seed)
    w_scale = np.full(channels, 0.01, np.float32) if w_scale is None else np.asarray(w_scale, np.float32)
    inits = {
        "x_s": np.array(0.02, np.float32),
        "x_z": np.array(128, np.uint8),
        "w": rng.integers(-127, 127, (channels, 16, 3, 3), dtype=np.int8),
        "w_s": w_scale,  # per output channel
        "w_z": np.full(channels, w_zero, np.int8),
        "y_s": np.array(y_scale, np.float32),
        "y_z": np.array(120, np.uint8),
    }
    return build_model(
        [
            helper.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["xq"]),
            helper.make_node("QLinearConv", ["xq", "x_s", "x_z", "w", "w_s", "w_z", "y_s", "y_z"], ["y"], pads=[1] * 4),
        ],
        [("x", F, [1, 16, 8, 8])],
        [("y", U8, None)],
        inits,
    )


def test_quantization_scales_and_zero_points_are_carried(build_model, process_proto):
    w_scale = np.linspace(0.01, 0.08, 8, dtype=np.float32)
    processed = process_proto(qlinear_conv_model(build_model, w_scale=w_scale))
    conv = only_layer(processed, "QLinearConv")
    kinds = [i.kind for i in conv.inputs]
    scale, value, weight = InputKind.SCALE, InputKind.VALUE, InputKind.WEIGHT
    assert kinds == [InputKind.ACTIVATION, scale, value, weight, scale, value, scale, value]
    values = carried(benchmark_of(processed, conv))
    assert values[1] == np.float32(0.02) and values[2] == 128
    assert values[4].tolist() == w_scale.tolist() and values[5].tolist() == [0] * 8
    assert values[6] == np.float32(0.2) and values[7] == 120
    assert values[3].shape == (8, 16, 3, 3)  # the weight is synthesised, of its shape and dtype
    quant = only_layer(processed, "QuantizeLinear")
    assert [i.kind for i in quant.inputs] == [InputKind.ACTIVATION, InputKind.SCALE, InputKind.VALUE]
    values = carried(benchmark_of(processed, quant))
    assert values[1] == np.float32(0.02) and values[2] == 128


def test_quantized_layers_differing_only_in_their_scales_are_one_benchmark(build_model, process_proto):
    """Scales are multiplied by whatever they are: the work is the same (``benchmarks/scale_values.py``)."""

    def conv(**kw):
        return only_layer(process_proto(qlinear_conv_model(build_model, **kw)), "QLinearConv")

    assert conv(y_scale=0.2).layer_key == conv(y_scale=0.3).layer_key
    assert conv(w_scale=[0.01] * 8).layer_key == conv(w_scale=np.linspace(0.01, 0.08, 8)).layer_key
    assert conv(weight_seed=0).layer_key == conv(weight_seed=1).layer_key  # a large weight's values are not in the key
    # which scales are equal is in the key: 0.02 is the input's scale too
    assert conv(y_scale=0.02).layer_key != conv(y_scale=0.3).layer_key
    # zero points are values (ONNX Runtime takes another kernel for symmetric weights)
    assert conv().layer_key != conv(w_zero=1).layer_key
    # more than 64 channels: a per-channel scale is still a scale (its values decide what ORT fuses),
    # its zero points a weight (zeros, as synthesised)
    wide = conv(channels=80)
    assert wide.inputs[4].kind is InputKind.SCALE and wide.inputs[5].kind is InputKind.WEIGHT
    assert wide.layer_key == conv(channels=80, w_scale=np.linspace(0.01, 0.08, 80)).layer_key
    # a block-wise scale beyond SCALE_MAX_ELEMENTS (an int4 weight's) is a weight
    assert constant_kind(SCALE_MAX_ELEMENTS, "float32", Slot.SCALE) is InputKind.SCALE
    assert constant_kind(SCALE_MAX_ELEMENTS + 1, "float32", Slot.SCALE) is InputKind.WEIGHT


def qdq_conv_model(build_model, channels=96):
    """A QDQ convolution as ``quantize_static`` writes one: per-channel int8 weights, an int32 bias whose
    scale is the input's times the weight's (ONNX Runtime fuses it into one ``QLinearConv`` only so)."""
    rng = np.random.default_rng(0)
    x_s, w_s = np.float32(0.02), rng.uniform(0.001, 0.01, channels).astype(np.float32)
    inits = {
        "x_s": np.array(x_s),
        "x_z": np.array(128, np.uint8),
        "w": rng.integers(-127, 127, (channels, 16, 3, 3), dtype=np.int8),
        "w_s": w_s,
        "w_z": np.zeros(channels, np.int8),
        "b": rng.integers(-1000, 1000, channels, dtype=np.int32),
        "b_s": (x_s * w_s).astype(np.float32),
        "b_z": np.zeros(channels, np.int32),
        "y_s": np.array(0.05, np.float32),
        "y_z": np.array(128, np.uint8),
    }
    return build_model(
        [
            helper.make_node("DequantizeLinear", ["x", "x_s", "x_z"], ["xf"]),
            helper.make_node("DequantizeLinear", ["w", "w_s", "w_z"], ["wf"], axis=0),
            helper.make_node("DequantizeLinear", ["b", "b_s", "b_z"], ["bf"], axis=0),
            helper.make_node("Conv", ["xf", "wf", "bf"], ["c"], pads=[1] * 4),
            helper.make_node("QuantizeLinear", ["c", "y_s", "y_z"], ["y"]),
        ],
        [("x", U8, [1, 16, 8, 8])],
        [("y", U8, None)],
        inits,
        opset=13,
    )


def test_a_per_channel_qdq_convolution_is_benchmarked_fused_as_onnx_runtime_runs_it(build_model, process_proto):
    """96 channels: its weight's and bias's scales carried by value, so the unit ONNX Runtime is given
    fuses into one QLinearConv, as in the model (drawn at random, they left an int8 ResNet-50's units
    unfused, DequantizeLinear and a float Conv each call, 2.8x its end to end)."""
    from benanza.bench.build import build_held
    from benanza.runtimes.onnxruntime import OnnxRuntimeCPU, optimized_model

    processed = process_proto(qdq_conv_model(build_model))
    groups = OnnxRuntimeCPU(threads=1).execution_groups(processed.graph, processed.proto)
    (unit,) = [g for g in groups if len(g) > 1]
    _, network = network_of(processed.graph, unit)
    assert sorted(n.op_type for n in network.nodes) == ["Conv", *["DequantizeLinear"] * 3, "QuantizeLinear"]
    fused = [n.op_type for n in optimized_model(build_held(network, sink=True), "extended").graph.node]
    assert "QLinearConv" in fused and "DequantizeLinear" not in fused, fused


def test_a_model_quantized_with_other_scales_is_another_model(build_model, process_proto):
    """Its layers share benchmarks, but its end-to-end results are its own (the identity keeps the scales)."""
    a = process_proto(qlinear_conv_model(build_model, y_scale=0.2))
    b = process_proto(qlinear_conv_model(build_model, y_scale=0.3))
    assert [x.layer_key for x in a.graph.layers] == [x.layer_key for x in b.graph.layers]
    assert a.graph.graph_key != b.graph.graph_key
    same = process_proto(qlinear_conv_model(build_model, y_scale=0.2, weight_seed=1))
    assert same.graph.graph_key == a.graph.graph_key


def qdq_pool_model(build_model, q_scale):
    """DequantizeLinear -> MaxPool -> QuantizeLinear: ONNX Runtime drops the pair when its scales agree."""
    return build_model(
        [
            helper.make_node("DequantizeLinear", ["x", "s_in", "z"], ["xf"]),
            helper.make_node("MaxPool", ["xf"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("QuantizeLinear", ["p", "s_out", "z"], ["y"]),
        ],
        [("x", U8, [1, 8, 16, 16])],
        [("y", U8, None)],
        {"s_in": np.array(0.05, np.float32), "s_out": np.array(q_scale, np.float32), "z": np.array(128, np.uint8)},
    )


def test_a_fused_unit_keys_which_of_its_scales_are_equal(build_model, process_proto):
    def unit(q_scale):
        processed = process_proto(qdq_pool_model(build_model, q_scale))
        return network_of(processed.graph, range(len(processed.graph.layers)))

    equal_key, equal = unit(0.05)
    other_key, _ = unit(0.07)
    assert equal_key != other_key  # one ONNX Runtime runs as a MaxPool on uint8, the other in float
    assert equal_key == unit(0.05)[0]
    assert unit(0.09)[0] == other_key  # unequal scales: the values themselves do not matter
    # so does a DLBricks sequence of the three
    sequence_keys = {
        q: find_model_subgraphs(process_proto(qdq_pool_model(build_model, q)).graph, 3)[0].sequence_key
        for q in (0.05, 0.07, 0.09)
    }
    assert sequence_keys[0.05] != sequence_keys[0.07] == sequence_keys[0.09]
    # the benchmark carries the scales it was keyed from
    model = build_onnx(equal)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    scales = sorted(float(v) for v in inits.values() if v.dtype == np.float32)
    assert scales == [pytest.approx(0.05)] * 2


def clip_model(build_model, lo, hi):
    return build_model(
        [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
        [("x", F, [2, 16])],
        [("y", F, None)],
        {"lo": np.array(lo, np.float32), "hi": np.array(hi, np.float32)},
    )


def test_clip_bounds_are_carried(build_model, process_proto):
    processed = process_proto(clip_model(build_model, 0.0, 6.0))
    layer = only_layer(processed, "Clip")
    values = carried(benchmark_of(processed, layer))
    assert (values[1], values[2]) == (0.0, 6.0)
    other = only_layer(process_proto(clip_model(build_model, 0.0, 8.0)), "Clip")
    assert layer.layer_key != other.layer_key


def pad_model(build_model, pads, mode="constant"):
    return build_model(
        [helper.make_node("Pad", ["x", "pads", "value"], ["y"], mode=mode)],
        [("x", F, [1, 3, 8, 8])],
        [("y", F, None)],
        {"pads": np.array(pads, np.int64), "value": np.array(0.5, np.float32)},
    )


def test_pad_pads_and_constant_are_carried(build_model, process_proto):
    processed = process_proto(pad_model(build_model, [0, 0, 1, 2, 0, 0, 2, 1]))
    layer = only_layer(processed, "Pad")
    values = carried(benchmark_of(processed, layer))
    assert values[1].tolist() == [0, 0, 1, 2, 0, 0, 2, 1] and values[2] == np.float32(0.5)
    same_shape = only_layer(process_proto(pad_model(build_model, [0, 0, 2, 1, 0, 0, 1, 2])), "Pad")
    assert same_shape.output_shapes == layer.output_shapes and same_shape.layer_key != layer.layer_key


def conv_model(build_model, seed, channels=64):
    rng = np.random.default_rng(seed)
    return build_model(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1] * 4)],
        [("x", F, [1, 16, 8, 8])],
        [("y", F, None)],
        {
            "w": rng.standard_normal((channels, 16, 3, 3)).astype(np.float32),
            "b": rng.standard_normal(channels).astype(np.float32),
        },
    )


@pytest.mark.parametrize("channels", [4, 64])
def test_learned_weights_and_biases_are_not_values(build_model, process_proto, channels):
    """A Conv's weight and bias are learned (Differentiable in the schema): synthesised whatever their size."""
    a = only_layer(process_proto(conv_model(build_model, 0, channels)), "Conv")
    b = only_layer(process_proto(conv_model(build_model, 1, channels)), "Conv")
    assert [i.kind for i in a.inputs] == [InputKind.ACTIVATION, InputKind.WEIGHT, InputKind.WEIGHT]
    assert a.layer_key == b.layer_key


def test_a_scalar_is_a_value_even_in_a_learned_slot(build_model, process_proto):
    """``Pow(x, 2)`` and ``Pow(x, 0.5)`` are different kernels: a single number is always a value."""

    def pow_key(exponent):
        processed = process_proto(
            build_model(
                [helper.make_node("Pow", ["x", "e"], ["y"])],
                [("x", F, [4, 4])],
                [("y", F, None)],
                {"e": np.array(exponent, np.float32)},
            )
        )
        layer = only_layer(processed, "Pow")
        assert layer.inputs[1].kind is InputKind.VALUE
        assert carried(benchmark_of(processed, layer))[1] == np.float32(exponent)
        return layer.layer_key

    assert pow_key(2.0) != pow_key(0.5)
