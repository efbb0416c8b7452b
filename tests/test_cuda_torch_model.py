"""The PyTorch end-to-end model's ONNX rewrites (pure: checked with ONNX Runtime on the CPU).

On an H200 (2026-11-26) onnx2torch refused three zoo models: Dropout-7 has no converter
(AlexNet, SqueezeNet, VGG-19) and Inception v1's AveragePool pads one end only.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from benanza.bench.build import IR_VERSION
from benanza.runtimes.cuda.torch_model import for_onnx2torch


def _model(nodes, opset: int, out_shape) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


X = np.random.default_rng(0).standard_normal((1, 2, 6, 6)).astype(np.float32)


@pytest.mark.parametrize("opset", [9, 13])
def test_dropout_becomes_identity(opset):
    nodes = [
        helper.make_node("Dropout", ["x"], ["d"], name="drop"),
        helper.make_node("Relu", ["d"], ["y"]),
    ]
    model = _model(nodes, opset, [1, 2, 6, 6])
    rewritten, rewrites = for_onnx2torch(model)
    assert rewrites == {"Dropout -> Identity": 1}
    assert [n.op_type for n in rewritten.graph.node] == ["Identity", "Relu"]
    onnx.checker.check_model(rewritten)
    np.testing.assert_array_equal(_run(rewritten, X), _run(model, X))
    assert [n.op_type for n in model.graph.node] == ["Dropout", "Relu"]  # the input is not changed


def test_a_dropout_whose_mask_is_read_is_kept():
    nodes = [
        helper.make_node("Dropout", ["x"], ["d", "mask"]),
        helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["d", "m"], ["y"]),
    ]
    model = _model(nodes, 13, [1, 2, 6, 6])
    rewritten, rewrites = for_onnx2torch(model)
    assert rewrites == {} and [n.op_type for n in rewritten.graph.node] == ["Dropout", "Cast", "Add"]


@pytest.mark.parametrize("opset", [9, 13])
def test_uneven_average_pool_pads_become_an_explicit_pad(opset):
    # as in Inception v1: pads at the end of each axis only
    pool = helper.make_node(
        "AveragePool", ["x"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1]
    )
    pool.attribute.append(helper.make_attribute("count_include_pad", 1))
    model = _model([pool], opset, [1, 2, 4, 4])
    rewritten, rewrites = for_onnx2torch(model)
    assert rewrites == {"AveragePool with uneven pads -> Pad + AveragePool": 1}
    assert [n.op_type for n in rewritten.graph.node] == ["Pad", "AveragePool"]
    attrs = {a.name for a in rewritten.graph.node[1].attribute}
    assert "pads" not in attrs and {"kernel_shape", "strides", "count_include_pad"} <= attrs
    onnx.checker.check_model(rewritten)
    # with the padded zeros counted, the rewrite computes the same pool
    np.testing.assert_allclose(_run(rewritten, X), _run(model, X), rtol=1e-6)


def test_even_pads_are_left_alone():
    pool = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    model = _model([pool], 13, [1, 2, 6, 6])
    rewritten, rewrites = for_onnx2torch(model)
    assert rewrites == {} and rewritten.graph.node[0] == model.graph.node[0]
