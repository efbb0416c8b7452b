"""The GPU runtime's CuPy layers against ONNX Runtime: each case is a one-node ONNX model, derived into
the runtime's parameters (``params.layer_params``) and call (``framework.layer_call``) as a model's
layer is, then run on NumPy (the reference its ``gpu`` test holds the device's kernel to) and
compared with what ONNX Runtime's CPU provider computes for the same node and data. Pure: no GPU."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from benanza.model.network import network_of
from benanza.runtimes.cuda.framework import empty_outputs, layer_call, numpy_ops
from benanza.runtimes.cuda.params import Unsupported, layer_params

F = TensorProto.FLOAT
_ELEM = {np.dtype("float32"): F, np.dtype("int64"): TensorProto.INT64, np.dtype("bool"): TensorProto.BOOL}


def against_onnx_runtime(build_model, process_proto, node, feeds, constants=None, opset=18, outputs=(F,), check=True):
    """Run ``node`` in ONNX Runtime and as the GPU runtime's call on NumPy; returns both results.

    ``feeds``: the graph inputs (name -> array), ``constants`` the initializers; the call's inputs are
    the node's first inputs, as many as it takes; ``outputs``: the node's outputs' element types."""
    constants = constants or {}
    inputs = [(n, _ELEM[a.dtype], list(a.shape)) for n, a in feeds.items()]
    outs = [(o, t, None) for o, t in zip(node.output, outputs, strict=False)]
    proto = build_model([node], inputs, outs, constants, opset=opset, check=check)
    expected = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    params = layer_params(network_of(process_proto(proto).graph, [0])[1])
    assert not isinstance(params, Unsupported), params.reason
    call = layer_call(params)
    arrays = {**feeds, **constants}
    given = [np.asarray(arrays[name]) for name in node.input[: len(call.inputs)]]
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
    x.flat[1] = x.flat[0]  # a tie: the lower index first
    consts = {"k": np.array([k], np.int64)}
    call, expected, got = against_onnx_runtime(
        build_model, process_proto, node, {"x": x}, consts, outputs=(F, TensorProto.INT64)
    )
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])
    assert (call.raw is None) == (k > 64) and [o.dtype for o in call.outputs] == ["float32", "int64"]


def test_gather_nd_with_constant_indices(build_model, process_proto):
    """A mask's positions computed at a fixed shape and folded into a constant: still the gather's input."""
    node = helper.make_node("GatherND", ["x", "idx"], ["y"])
    idx = np.array([[[0, 1]], [[1, 2]], [[0, 0]]], np.int64)
    _, expected, got = against_onnx_runtime(build_model, process_proto, node, {"x": rand(2, 3, 4)}, {"idx": idx})
    np.testing.assert_array_equal(got[0], expected[0])


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
