"""QDQ int8 graphs run as ONNX Runtime fuses them.

``quantize_static`` in QDQ format stores a weight as int8 with a ``DequantizeLinear`` in
front of the float op. Every input of that DequantizeLinear is a constant, yet ONNX Runtime
never folds it: its QDQ fusions take ``DequantizeLinear -> Conv -> QuantizeLinear`` with
the weight's DequantizeLinear into one ``QLinearConv``. benanza keeps it as a layer of the
Conv's unit, so the unit's benchmark is the int8 kernel ONNX Runtime runs, not a float Conv
with a synthesised float weight.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from benanza.bench.build import build_onnx
from benanza.model.graph import InputKind
from benanza.model.network import network_of
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU


def qdq_conv(build_model) -> onnx.ModelProto:
    """``x -> Q -> DQ -> Conv(DQ(int8 w), DQ(int32 b)) -> Q -> DQ -> y``, as ``quantize_static`` writes it."""
    rng = np.random.default_rng(0)
    inits = {
        "s": np.array(0.02, np.float32),
        "z": np.array(128, np.uint8),
        "w": rng.integers(-127, 127, (16, 8, 3, 3), dtype=np.int8),
        "w_s": np.array(0.01, np.float32),
        "w_z": np.array(0, np.int8),
        "b": np.arange(16, dtype=np.int32),
        "b_s": np.array(0.0002, np.float32),
        "b_z": np.array(0, np.int32),
        "y_s": np.array(0.05, np.float32),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="quant_x"),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dequant_x"),
        helper.make_node("DequantizeLinear", ["w", "w_s", "w_z"], ["wd"], name="dequant_w"),
        helper.make_node("DequantizeLinear", ["b", "b_s", "b_z"], ["bd"], name="dequant_b"),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], name="conv", pads=[1] * 4),
        helper.make_node("QuantizeLinear", ["c", "y_s", "z"], ["cq"], name="quant_y"),
        helper.make_node("DequantizeLinear", ["cq", "y_s", "z"], ["y"], name="dequant_y"),
    ]
    return build_model(nodes, [("x", TensorProto.FLOAT, [1, 8, 10, 10])], [("y", TensorProto.FLOAT, None)], inits)


def optimized_ops(model: onnx.ModelProto) -> list[str]:
    """The node op types ONNX Runtime runs for a model at benanza's default level (``extended``)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    with tempfile.TemporaryDirectory() as folder:
        options.optimized_model_filepath = os.path.join(folder, "optimized.onnx")
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return [n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node]


@pytest.fixture(scope="module")
def qdq(build_model, process_proto):
    return process_proto(qdq_conv(build_model))


def test_a_weight_dequantize_is_a_layer_not_a_folded_float_weight(qdq):
    layers = {layer.name: layer for layer in qdq.graph.layers}
    assert list(layers) == ["quant_x", "dequant_x", "dequant_w", "dequant_b", "conv", "quant_y", "dequant_y"]
    w = layers["dequant_w"].inputs
    assert w[0].kind is InputKind.WEIGHT and w[0].tensor.dtype == "int8" and w[0].tensor.shape == (16, 8, 3, 3)
    assert [i.kind for i in w[1:]] == [InputKind.SCALE, InputKind.VALUE]  # its scale, its zero point
    conv = layers["conv"]
    assert [i.kind for i in conv.inputs] == [InputKind.ACTIVATION] * 3  # computed by the DequantizeLinears


def test_the_conv_unit_is_benchmarked_as_the_qlinearconv_onnxruntime_runs(qdq):
    assert "QLinearConv" in optimized_ops(qdq.proto)
    units = OnnxRuntimeCPU(threads=1).execution_groups(qdq.graph, qdq.proto)
    names = [[qdq.graph.layers[i].name for i in unit] for unit in units]
    conv_unit = next(unit for unit in units if any(qdq.graph.layers[i].name == "conv" for i in unit))
    assert sorted(qdq.graph.layers[i].name for i in conv_unit) == [
        "conv",
        "dequant_b",
        "dequant_w",
        "dequant_x",
        "quant_y",
    ], names
    _, network = network_of(qdq.graph, conv_unit)
    assert optimized_ops(build_onnx(network)) == ["QLinearConv"]


def shared_dequantize(build_model) -> onnx.ModelProto:
    """Two QDQ Convs reading one DequantizeLinear of the input and one of a shared bias, then a QDQ Add."""
    rng = np.random.default_rng(1)
    inits = {
        "s": np.array(0.02, np.float32),
        "z": np.array(128, np.uint8),
        "w1": rng.integers(-127, 127, (8, 8, 3, 3), dtype=np.int8),
        "w2": rng.integers(-127, 127, (8, 8, 1, 1), dtype=np.int8),
        "w_s": np.array(0.01, np.float32),
        "w_z": np.array(0, np.int8),
        "b": np.arange(8, dtype=np.int32),
        "b_s": np.array(0.0002, np.float32),
        "b_z": np.array(0, np.int32),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="quant_x"),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dequant_x"),
        helper.make_node("DequantizeLinear", ["w1", "w_s", "w_z"], ["w1d"], name="dequant_w1"),
        helper.make_node("DequantizeLinear", ["w2", "w_s", "w_z"], ["w2d"], name="dequant_w2"),
        helper.make_node("DequantizeLinear", ["b", "b_s", "b_z"], ["bd"], name="dequant_b"),
        helper.make_node("Conv", ["xd", "w1d", "bd"], ["c1"], name="conv1", pads=[1] * 4),
        helper.make_node("Conv", ["xd", "w2d", "bd"], ["c2"], name="conv2"),
        helper.make_node("QuantizeLinear", ["c1", "s", "z"], ["c1q"], name="quant_c1"),
        helper.make_node("QuantizeLinear", ["c2", "s", "z"], ["c2q"], name="quant_c2"),
        helper.make_node("DequantizeLinear", ["c1q", "s", "z"], ["c1d"], name="dequant_c1"),
        helper.make_node("DequantizeLinear", ["c2q", "s", "z"], ["c2d"], name="dequant_c2"),
        helper.make_node("Add", ["c1d", "c2d"], ["a"], name="add"),
        helper.make_node("QuantizeLinear", ["a", "s", "z"], ["aq"], name="quant_a"),
        helper.make_node("DequantizeLinear", ["aq", "s", "z"], ["y"], name="dequant_y"),
    ]
    return build_model(nodes, [("x", TensorProto.FLOAT, [1, 8, 10, 10])], [("y", TensorProto.FLOAT, None)], inits)


@pytest.mark.parametrize("batch", [None, 4])
def test_a_dequantize_that_is_a_graph_output_and_read_keeps_its_shape_in_its_copy(build_model, process_proto, batch):
    """``quantize_static`` of a ViT whose last LayerNorm is an output and read by the pooler's Gather: the
    reader's copy of the DequantizeLinear has the output's shape (a graph output's is not a value info)."""
    inits = {"s": np.array(0.02, np.float32), "z": np.array(128, np.uint8), "i": np.array(0, np.int64)}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="quant_x"),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["h"], name="dequant_h"),
        helper.make_node("Gather", ["h", "i"], ["first"], name="select", axis=1),
    ]
    model = build_model(
        nodes,
        [("x", TensorProto.FLOAT, [1, 5, 8])],
        [("h", TensorProto.FLOAT, [1, 5, 8]), ("first", TensorProto.FLOAT, None)],
        inits,
    )
    processed = process_proto(model, batch)
    assert processed.graph.unsupported == ()
    [copy] = [layer for layer in processed.graph.layers if layer.name == "dequant_h/dq1"]
    assert copy.outputs[0].shape == (batch or 1, 5, 8)


def test_a_shared_dequantize_is_copied_per_reader_so_every_unit_fuses(build_model, process_proto):
    processed = process_proto(shared_dequantize(build_model))
    graph = processed.graph
    names = [layer.name for layer in graph.layers]
    # as ONNX Runtime's EnsureUniqueDQForNodeUnit: each Conv reads its own copy of x's and b's
    assert sorted(n for n in names if n.startswith(("dequant_x", "dequant_b"))) == [
        "dequant_b",
        "dequant_b/dq1",
        "dequant_x",
        "dequant_x/dq1",
    ]
    units = OnnxRuntimeCPU(threads=1).execution_groups(graph, processed.proto)
    assert sorted(i for unit in units for i in unit) == list(range(len(graph.layers)))
    ran = sorted(op for unit in units for op in optimized_ops(build_onnx(network_of(graph, unit)[1])))
    # the input's QuantizeLinear and the output's DequantizeLinear run alone, as in the whole model
    assert ran == ["DequantizeLinear", "QLinearAdd", "QLinearConv", "QLinearConv", "QuantizeLinear"]
    assert sorted(optimized_ops(processed.proto)) == ran
