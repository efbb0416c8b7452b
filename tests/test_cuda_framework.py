"""Element-wise and data-movement layers as CuPy kernels: the calls checked on NumPy, then on the device.

Every ``LayerCall`` is written against an array module, so the CPU tests run it with NumPy
on hand-made inputs and compare with values worked out by hand. The ``gpu`` tests build the
CuPy candidate (fused ``ElementwiseKernel`` where there is one), launch it on the context's
stream and compare its output with the NumPy run of the same inputs.
"""

from __future__ import annotations

import math
import shutil
import subprocess

import numpy as np
import pytest

from benanza.errors import UnsupportedLayer
from benanza.runtimes.cuda.framework import (
    ELEMENTWISE,
    MOVEMENT,
    NORMALIZATION,
    QUANTIZED_GEMM,
    REDUCTION,
    empty_outputs,
    framework_candidates,
    host_arrays,
    layer_call,
    numpy_ops,
)
from benanza.runtimes.cuda.params import (
    BlockQuantizedGemmParams,
    DataMovementParams,
    ElementwiseParams,
    NormalizationParams,
    ReductionParams,
)

OPS = numpy_ops()


def run(p, *inputs):
    """Run ``p``'s call with NumPy on the given inputs; the outputs (one array, or a list for Split)."""
    call = layer_call(p)
    arrays = [np.asarray(x, dtype=spec.dtype) for x, spec in zip(inputs, call.inputs, strict=True)]
    outputs = empty_outputs(call.outputs)
    call.run(OPS, arrays, outputs)
    return outputs[0] if len(outputs) == 1 else outputs


def ew(op, shapes, y, dtype="float32", **attrs):
    return ElementwiseParams(op, tuple(shapes), y, dtype, tuple(sorted(attrs.items())))


def mv(op, shapes, y, dtype="float32", view=False, **attrs):
    return DataMovementParams(op, tuple(shapes), y, dtype, tuple(sorted(attrs.items())), view=view)


# ------------------------------------------------------------------------ element-wise, by hand


def test_binary_ops_broadcast_into_the_output():
    a = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    b = [10.0, 20.0, 30.0]
    assert run(ew("Add", [(2, 3), (3,)], (2, 3)), a, b).tolist() == [[11, 22, 33], [14, 25, 36]]
    assert run(ew("Sub", [(2, 3), (3,)], (2, 3)), a, b).tolist() == [[-9, -18, -27], [-6, -15, -24]]
    assert run(ew("Mul", [(2, 3), (3,)], (2, 3)), a, b).tolist() == [[10, 40, 90], [40, 100, 180]]
    np.testing.assert_allclose(run(ew("Div", [(2, 3), (3,)], (2, 3)), a, b), [[0.1, 0.1, 0.1], [0.4, 0.25, 0.2]])
    assert run(ew("Pow", [(3,), (3,)], (3,)), [2.0, 3.0, 4.0], [3.0, 2.0, 0.5]).tolist() == [8, 9, 2]


def test_a_constant_operand_missing_from_the_params_is_a_scalar():
    call = layer_call(ew("Mul", [(3,)], (3,)))
    assert call.notes == ("constant operand as the scalar 0.5",)
    assert run(ew("Mul", [(3,)], (3,)), [2.0, -4.0, 1.0]).tolist() == [1.0, -2.0, 0.5]
    assert run(ew("Pow", [(2,)], (2,)), [3.0, -2.0]).tolist() == [9.0, 4.0]


def test_variadic_ops_fold_every_input():
    a, b, c = [[1.0, 5.0, 3.0], [7.0, 2.0, 9.0]], [4.0, 4.0, 4.0], [[0.0], [8.0]]
    shapes = [(2, 3), (3,), (2, 1)]
    assert run(ew("Max", shapes, (2, 3)), a, b, c).tolist() == [[4, 5, 4], [8, 8, 9]]
    assert run(ew("Min", shapes, (2, 3)), a, b, c).tolist() == [[0, 0, 0], [4, 2, 4]]
    assert run(ew("Sum", shapes, (2, 3)), a, b, c).tolist() == [[5, 9, 7], [19, 14, 21]]
    np.testing.assert_allclose(run(ew("Mean", shapes, (2, 3)), a, b, c), [[5 / 3, 3, 7 / 3], [19 / 3, 14 / 3, 7]])
    assert run(ew("Sum", [(2,)], (2,)), [1.0, 2.0]).tolist() == [1.0, 2.0]  # one input: a copy


def test_unary_math():
    np.testing.assert_allclose(run(ew("Abs", [(3,)], (3,)), [-1.5, 0.0, 2.0]), [1.5, 0.0, 2.0])
    np.testing.assert_allclose(run(ew("Neg", [(2,)], (2,)), [-1.5, 2.0]), [1.5, -2.0])
    np.testing.assert_allclose(run(ew("Exp", [(2,)], (2,)), [0.0, 1.0]), [1.0, math.e], rtol=1e-6)
    np.testing.assert_allclose(run(ew("Log", [(2,)], (2,)), [1.0, math.e]), [0.0, 1.0], atol=1e-6)
    np.testing.assert_allclose(run(ew("Sqrt", [(2,)], (2,)), [4.0, 9.0]), [2.0, 3.0])
    np.testing.assert_allclose(run(ew("Reciprocal", [(2,)], (2,)), [4.0, -0.5]), [0.25, -2.0])
    np.testing.assert_allclose(
        run(ew("Erf", [(3,)], (3,), "float64"), [0.0, 1.0, -1.0]), [0, 0.8427007929, -0.8427007929]
    )
    np.testing.assert_allclose(
        run(ew("Softplus", [(2,)], (2,), "float64"), [0.0, 1.0]), [math.log(2), math.log1p(math.e)]
    )


def test_activations_worked_out_by_hand():
    x = [-2.0, 0.0, 3.0]
    np.testing.assert_allclose(run(ew("LeakyRelu", [(3,)], (3,), alpha=0.1), x), [-0.2, 0.0, 3.0], rtol=1e-6)
    np.testing.assert_allclose(run(ew("LeakyRelu", [(3,)], (3,), alpha=2.0), x), [-4.0, 0.0, 3.0])
    np.testing.assert_allclose(run(ew("LeakyRelu", [(3,)], (3,)), x), [-0.02, 0.0, 3.0], rtol=1e-6)  # ONNX default 0.01
    prelu = run(ew("PRelu", [(2, 3), (3,)], (2, 3)), [[-1.0, -1.0, 2.0], [1.0, -4.0, -2.0]], [0.5, 0.25, 0.1])
    np.testing.assert_allclose(prelu, [[-0.5, -0.25, 2.0], [1.0, -1.0, -0.2]], rtol=1e-6)
    hard_sigmoid = run(ew("HardSigmoid", [(4,)], (4,)), [-5.0, 0.0, 1.0, 5.0])
    np.testing.assert_allclose(hard_sigmoid, [0.0, 0.5, 0.7, 1.0], rtol=1e-6)
    hard_swish = run(ew("HardSwish", [(5,)], (5,), "float64"), [-4.0, -1.0, 0.0, 1.0, 4.0])
    np.testing.assert_allclose(hard_swish, [0.0, -1 / 3, 0.0, 2 / 3, 4.0], atol=1e-12)
    gelu = run(ew("Gelu", [(3,)], (3,), "float64"), [1.0, -1.0, 0.0])
    np.testing.assert_allclose(gelu, [0.8413447461, -0.1586552539, 0.0], atol=1e-9)
    gelu_tanh = run(ew("Gelu", [(2,)], (2,), "float64", approximate="tanh"), [1.0, 0.0])
    np.testing.assert_allclose(gelu_tanh, [0.8411919906, 0.0], atol=1e-9)


def test_where_comparisons_and_logic():
    where = run(
        ew("Where", [(2, 1), (3,), (2, 3)], (2, 3), "float32"), [[True], [False]], [1.0, 2.0, 3.0], np.zeros((2, 3))
    )
    assert where.tolist() == [[1, 2, 3], [0, 0, 0]]
    a, b = [1.0, 2.0, 3.0], [2.0, 2.0, 2.0]
    assert run(ew("Equal", [(3,), (3,)], (3,)), a, b).tolist() == [False, True, False]
    assert run(ew("Less", [(3,), (3,)], (3,)), a, b).tolist() == [True, False, False]
    assert run(ew("Greater", [(3,), (3,)], (3,)), a, b).tolist() == [False, False, True]
    assert layer_call(ew("Less", [(3,), (3,)], (3,))).outputs[0].dtype == "bool"
    t, f = [True, True, False, False], [True, False, True, False]
    assert run(ew("And", [(4,), (4,)], (4,), "bool"), t, f).tolist() == [True, False, False, False]
    assert run(ew("Or", [(4,), (4,)], (4,), "bool"), t, f).tolist() == [True, True, True, False]
    assert run(ew("Not", [(2,)], (2,), "bool"), [True, False]).tolist() == [False, True]


def test_where_runs_in_the_data_type_the_params_carry():
    """``params`` gives Where its output's type: boolean data stays boolean (a mask chosen by a mask)."""
    call = layer_call(ew("Where", [(2,), (2,), (2,)], (2,), "bool"))
    assert [s.dtype for s in call.inputs] == ["bool", "bool", "bool"] and call.outputs[0].dtype == "bool"
    assert [s.dtype for s in layer_call(ew("Where", [(2,), (2,), ()], (2,), "float16")).inputs][1:] == ["float16"] * 2


def test_cast_and_clip():
    cast = run(ew("Cast", [(3,)], (3,), to=6), [1.7, -1.2, 3.0])
    assert cast.dtype == np.int32 and cast.tolist() == [1, -1, 3]
    assert run(ew("Cast", [(2,)], (2,), "int64", to=10), [3, -2]).dtype == np.float16
    x = [-2.0, 0.5, 3.0]
    assert run(ew("Clip", [(3,)], (3,), min=0.0, max=1.0), x).tolist() == [0.0, 0.5, 1.0]
    assert run(ew("Clip", [(3,)], (3,), min=0.0, max=None), x).tolist() == [0.0, 0.5, 3.0]
    assert run(ew("Clip", [(3,)], (3,), min=None, max=1.0), x).tolist() == [-2.0, 0.5, 1.0]
    assert run(ew("Clip", [(3,)], (3,), min=None, max=None), x).tolist() == x


def test_composite_ops_carry_one_fused_kernel_each():
    leaky = layer_call(ew("LeakyRelu", [(3,)], (3,), alpha=0.2)).fused
    assert leaky.scalars == (0.2,) and leaky.in_params == "T x, float64 alpha" and leaky.out_params == "T y"
    assert "typedef float A;" in leaky.preamble
    assert "erff(" in layer_call(ew("Gelu", [(3,)], (3,), "float32")).fused.operation
    assert "erf(" in layer_call(ew("Gelu", [(3,)], (3,), "float64")).fused.operation
    assert "typedef double A;" in layer_call(ew("Gelu", [(3,)], (3,), "float64")).fused.preamble
    assert "tanhf(" in layer_call(ew("Gelu", [(3,)], (3,), approximate="tanh")).fused.operation
    assert layer_call(ew("Add", [(3,), (3,)], (3,))).fused is None  # one ufunc is one kernel already


# ------------------------------------------------------------------------ data movement, by hand


def test_concat_and_transpose():
    out = run(mv("Concat", [(2, 1), (2, 2)], (2, 3), axis=-1), [[1.0], [2.0]], [[3.0, 4.0], [5.0, 6.0]])
    assert out.tolist() == [[1, 3, 4], [2, 5, 6]]
    x = np.arange(6.0).reshape(1, 2, 3)
    out = run(mv("Transpose", [(1, 2, 3)], (3, 1, 2), perm=(2, 0, 1)), x)
    assert out.flags.c_contiguous and out.tolist() == x.transpose(2, 0, 1).tolist()
    assert run(mv("Transpose", [(2, 3)], (3, 2)), [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).tolist() == [
        [1, 4],
        [2, 5],
        [3, 6],
    ]
    with pytest.raises(UnsupportedLayer, match="constant input"):
        layer_call(mv("Concat", [(2, 1)], (2, 3), axis=1))


def test_slice_from_attributes_and_from_shapes():
    x = np.arange(12.0).reshape(3, 4)
    assert run(mv("Slice", [(3, 4)], (2, 2), starts=(1, 1), ends=(3, 3)), x).tolist() == [[5, 6], [9, 10]]
    assert run(mv("Slice", [(3, 4)], (3, 2), starts=(-2,), ends=(9999,), axes=(1,)), x).tolist() == x[:, 2:].tolist()
    call = layer_call(mv("Slice", [(3, 4)], (2, 4)))
    assert call.notes and run(mv("Slice", [(3, 4)], (2, 4)), x).tolist() == x[:2].tolist()
    with pytest.raises(UnsupportedLayer):
        layer_call(mv("Slice", [(3, 4)], (3, 2), starts=(0,), ends=(1,), axes=(1,)))


def test_pad_modes():
    x = [[1.0, 2.0], [3.0, 4.0]]
    constant = run(mv("Pad", [(2, 2)], (3, 4), mode="constant", pads=(1, 0, 0, 2), value=9.0), x)
    assert constant.tolist() == [[9, 9, 9, 9], [1, 2, 9, 9], [3, 4, 9, 9]]
    assert run(mv("Pad", [(2, 2)], (2, 4), mode="edge", pads=(0, 1, 0, 1)), x).tolist() == [[1, 1, 2, 2], [3, 3, 4, 4]]
    assert run(mv("Pad", [(2, 2)], (2, 3), mode="reflect", pads=(0, 0, 0, 1)), x).tolist() == [[1, 2, 1], [3, 4, 3]]
    inferred = run(mv("Pad", [(2, 2)], (3, 3)), x)  # pads as inputs: padding at the end
    assert inferred.tolist() == [[1, 2, 0], [3, 4, 0], [0, 0, 0]]
    with pytest.raises(UnsupportedLayer, match="cropping"):
        layer_call(mv("Pad", [(2, 2)], (1, 2)))


def test_gather_takes_along_the_axis():
    data = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    out = run(mv("Gather", [(3, 2), (2, 2)], (2, 2, 2)), data, [[0, 2], [1, 1]])
    assert out.tolist() == [[[1, 2], [5, 6]], [[3, 4], [3, 4]]]
    assert run(mv("Gather", [(3, 2), (1,)], (3, 1), axis=1), data, [1]).tolist() == [[2], [4], [6]]
    call = layer_call(mv("Gather", [(3, 2)], (2,)))  # scalar index held as a value: rank 0
    assert call.inputs[1].shape == () and call.inputs[1].index_bound == 3


def test_expand_tile_and_nearest_resize():
    assert run(mv("Expand", [(2, 1)], (2, 2, 3)), [[1.0], [2.0]]).tolist() == [[[1, 1, 1], [2, 2, 2]]] * 2
    assert run(mv("Tile", [(1, 2)], (2, 4)), [[1.0, 2.0]]).tolist() == [[1, 2, 1, 2], [1, 2, 1, 2]]
    up = mv("Resize", [(1, 1, 2, 2)], (1, 1, 4, 4), coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    x = [[[[1.0, 2.0], [3.0, 4.0]]]]
    expected = [[[[1, 1, 2, 2], [1, 1, 2, 2], [3, 3, 4, 4], [3, 3, 4, 4]]]]
    assert run(up, x).tolist() == expected
    assert run(mv("Upsample", [(1, 1, 2, 2)], (1, 1, 4, 4)), x).tolist() == expected
    assert run(mv("Resize", [(1, 1, 2, 2)], (1, 1, 4, 4)), x).tolist() == expected  # half_pixel + round_prefer_floor
    down = mv("Resize", [(1, 1, 4, 4)], (1, 1, 2, 2), coordinate_transformation_mode="asymmetric")
    assert run(down, np.arange(16.0).reshape(1, 1, 4, 4)).tolist() == [[[[0, 2], [8, 10]]]]
    with pytest.raises(UnsupportedLayer, match="nearest-neighbour and linear"):
        layer_call(mv("Resize", [(1, 1, 2, 2)], (1, 1, 4, 4), mode="cubic"))
    with pytest.raises(UnsupportedLayer, match="integer scale"):
        layer_call(mv("Resize", [(1, 1, 2, 2)], (1, 1, 3, 3)))


def test_split_into_equal_parts():
    outs = run(mv("Split", [(2, 6)], (2, 2), axis=1), np.arange(12.0).reshape(2, 6))
    assert [o.tolist() for o in outs] == [[[0, 1], [6, 7]], [[2, 3], [8, 9]], [[4, 5], [10, 11]]]
    outs = run(mv("Split", [(5,)], (2,), split=(2, 3)), np.arange(5.0))
    assert [o.tolist() for o in outs] == [[0, 1], [2, 3, 4]]


# ------------------------------------------------------------------------ what is not run


def test_views_launch_nothing():
    for op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"):
        p = mv(op, [(2, 3)], (6,), view=True)
        assert layer_call(p) is None
        assert framework_candidates(None, p) == []  # no device, no CuPy needed: nothing runs


def test_unknown_ops_and_bfloat16_are_unsupported_by_name():
    with pytest.raises(UnsupportedLayer, match="NonZero has no CuPy data-movement kernel"):
        layer_call(mv("NonZero", [(3,)], (1, 3)))
    with pytest.raises(UnsupportedLayer, match="BitShift has no CuPy element-wise kernel"):
        layer_call(ew("BitShift", [(3,), (3,)], (3,), "uint8"))
    with pytest.raises(UnsupportedLayer, match="bfloat16"):
        layer_call(ew("Add", [(3,), (3,)], (3,), "bfloat16"))
    with pytest.raises(UnsupportedLayer, match="approximate"):
        layer_call(ew("Gelu", [(3,)], (3,), approximate="fast"))


def test_every_params_op_type_has_a_call_or_is_a_view():
    from benanza.runtimes.cuda import params

    assert set(params._ELEMENTWISE) <= set(ELEMENTWISE)
    assert set(params._MOVES) <= set(MOVEMENT)
    assert set(params._REDUCTIONS) <= set(REDUCTION)
    assert {"LayerNormalization", "RMSNormalization"} <= set(NORMALIZATION)
    assert {"InstanceNormalization", "GroupNormalization", "SimplifiedLayerNormalization"} <= set(NORMALIZATION)
    assert {"QuantizeLinear", "DequantizeLinear"} <= set(ELEMENTWISE)
    # ONNX Runtime's: each derivation's op has a builder of its kind
    assert {"SkipLayerNormalization", "SkipSimplifiedLayerNormalization"} <= set(NORMALIZATION)
    assert {"Gelu", "FastGelu", "BiasGelu", "QuickGelu", "BiasAdd"} <= set(ELEMENTWISE)
    assert "MatMulNBits" in QUANTIZED_GEMM
    assert set(params.CONTRIB_PARAMS) == {
        *("SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "Gelu", "FastGelu", "BiasGelu"),
        *("QuickGelu", "BiasAdd", "FusedMatMul", "MatMulNBits"),
        *("Attention", "MultiHeadAttention", "GroupQueryAttention"),  # AttentionParams: attention.py
        "RotaryEmbedding",
    }


def test_erf_without_scipy_falls_back_to_math_erf(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "scipy.special", None)  # import fails as if SciPy were absent
    out = np.zeros(3)
    numpy_ops().erf(np.array([0.0, 1.0, -2.0]), out)
    np.testing.assert_allclose(out, [0.0, math.erf(1.0), math.erf(-2.0)])


def test_host_arrays_follow_their_specs():
    call = layer_call(mv("Gather", [(5, 2), (7,)], (7, 2)))
    data, indices = host_arrays(call.inputs)
    assert data.dtype == np.float32 and data.min() >= -1 and data.max() < 1
    assert indices.dtype == np.int64 and indices.min() >= 0 and indices.max() < 5


# ------------------------------------------------------------------------ reductions, normalisation, Q/DQ, by hand


def red(op, x, axes, keepdims, y, dtype="float32"):
    return ReductionParams(op, x, axes, keepdims, y, dtype)


def norm(op, x, axis, bias=True, dtype="float32", epsilon=1e-5):
    return NormalizationParams(op, x, axis, epsilon, bias, dtype)


def test_reductions_over_their_axes():
    x = np.arange(24.0).reshape(2, 3, 4)
    assert run(red("ReduceSum", (2, 3, 4), (1,), True, (2, 1, 4)), x).tolist() == x.sum(1, keepdims=True).tolist()
    assert run(red("ReduceMean", (2, 3, 4), (0, 2), False, (3,)), x).tolist() == [7.5, 11.5, 15.5]
    assert run(red("ReduceMax", (2, 3, 4), (0, 1, 2), False, ()), x).tolist() == 23.0
    assert run(red("ReduceMin", (2, 3, 4), (2,), False, (2, 3)), x)[1].tolist() == [12, 16, 20]
    assert run(red("ReduceProd", (2, 2), (1,), True, (2, 1)), [[2.0, 3.0], [4.0, 5.0]]).tolist() == [[6], [20]]
    assert layer_call(red("ReduceMean", (2, 3), (1,), True, (2, 1))).kernel == "mean"


def test_layer_normalization_makes_each_row_zero_mean_unit_variance_then_scales_and_shifts():
    x = np.random.default_rng(0).normal(3.0, 2.0, size=(2, 3, 16)).astype(np.float32)
    y = run(norm("LayerNormalization", (2, 3, 16), 2), x, np.ones(16), np.zeros(16))
    np.testing.assert_allclose(y.mean(axis=2), 0.0, atol=1e-5)
    np.testing.assert_allclose(y.var(axis=2), 1.0, rtol=1e-3)  # epsilon 1e-5 against a variance of 4
    scale, shift = np.linspace(0.5, 2.0, 16), np.linspace(-1.0, 1.0, 16)
    scaled = run(norm("LayerNormalization", (2, 3, 16), 2), x, scale, shift)
    np.testing.assert_allclose(scaled, y * scale + shift, rtol=1e-5, atol=1e-5)
    whole = run(norm("LayerNormalization", (2, 3, 16), 1, bias=False), x, np.ones(48))  # rows from axis 1
    np.testing.assert_allclose(whole.reshape(2, -1).mean(axis=1), 0.0, atol=1e-5)


def test_rms_normalization_divides_by_the_root_mean_square_without_centering():
    x = np.array([[3.0, 4.0], [1.0, -1.0]], np.float32)
    y = run(norm("RMSNormalization", (2, 2), 1, bias=False, epsilon=0.0), x, [1.0, 2.0])
    # rms of (3, 4): sqrt(12.5); of (1, -1): 1
    np.testing.assert_allclose(y, [[3 / 12.5**0.5, 8 / 12.5**0.5], [1.0, -2.0]], rtol=1e-6)


def test_the_row_kernel_is_one_block_a_row_of_whole_warps():
    call = layer_call(norm("LayerNormalization", (4, 7, 768), 2, dtype="float16"))
    assert call.raw.name == "benanza_layer_norm_float16_bias" and call.kernel == call.raw.name
    assert call.raw.grid == (28,) and call.raw.block == (192,)  # 768 values, about 4 a thread
    assert call.raw.scalars == (("int64", 768), ("float32", 1e-5))  # float16 computes in float
    assert [i.shape for i in call.inputs] == [(4, 7, 768), (768,), (768,)]
    assert layer_call(norm("LayerNormalization", (1, 10), 1)).raw.block == (32,)
    assert layer_call(norm("LayerNormalization", (1, 16384), 1)).raw.block == (1024,)
    rms = layer_call(norm("RMSNormalization", (3, 100), 1, bias=False, dtype="float64")).raw
    assert rms.name == "benanza_rms_norm_float64" and rms.scalars[1] == ("float64", 1e-5)
    assert "bias" not in rms.source and "const A centre = (A)0;" in rms.source  # not centred
    assert "sqrt(var + mean * mean + eps)" in rms.source  # the mean square, from the same statistics
    layer = layer_call(norm("LayerNormalization", (3, 100), 1)).raw.source
    assert "const A centre = mean;" in layer and "m2 += d * (v - mean);" in layer  # Welford's pass
    with pytest.raises(UnsupportedLayer, match="bfloat16"):
        layer_call(norm("LayerNormalization", (2, 8), 1, dtype="bfloat16"))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed (the CUDA toolkit)")
def test_the_row_kernel_sources_compile(tmp_path):
    """Each CUDA source as NVRTC gets it, compiled for a Hopper GPU (no GPU needed): one nvcc run,
    each source in a namespace of its own."""
    kinds = [("LayerNormalization", True), ("LayerNormalization", False), ("RMSNormalization", False)]
    sources = [
        layer_call(norm(op, (8, 768), 1, bias=bias, dtype=dtype)).raw.source
        for dtype in ("float32", "float16", "float64")
        for op, bias in kinds
    ]
    unit = tmp_path / "rows.cu"
    unit.write_text("\n".join(f"namespace k{i} {{\n{source}}}\n" for i, source in enumerate(sources)))
    command = ["nvcc", "-arch=sm_90", "-c", "-o", str(tmp_path / "rows.o"), str(unit)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert len(set(sources)) == 9


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed (the CUDA toolkit)")
def test_the_channel_normalization_and_topk_sources_compile(tmp_path):
    """Instance and group normalisation (a row's scale read once; a channel's in the loop) and TopK's
    selection, largest and smallest, in each type: one nvcc run."""
    sources = []
    for dtype in ("float32", "float16", "float64"):
        for p in (
            NormalizationParams("InstanceNormalization", (2, 6, 9), 2, 1e-5, True, dtype),
            NormalizationParams("GroupNormalization", (2, 12, 9), 1, 1e-5, True, dtype, groups=3),
            NormalizationParams("GroupNormalization", (2, 12, 9), 1, 1e-5, True, dtype, groups=3, per_channel=True),
        ):
            sources.append(layer_call(p).raw.source)
        for largest in (0, 1):
            sources.append(layer_call(mv("TopK", [(4, 100)], (4, 8), dtype, axis=-1, largest=largest)).raw.source)
        for op, beta in (("SkipLayerNormalization", True), ("SkipSimplifiedLayerNormalization", False)):
            skip = NormalizationParams(op, (2, 5, 64), 2, 1e-5, beta, dtype, skip=(5, 64), pre_bias=True, sum_out=True)
            sources.append(layer_call(skip).raw.source)
        for bits, zp, bias in ((4, False, False), (4, True, True), (8, True, False)):
            blob = 32 * bits // 8
            gemv = BlockQuantizedGemmParams(
                "MatMulNBits",
                (1, 64),
                (16, 2, blob),
                (16, 2),
                (16 * 2 * bits // 8,) if zp else (),
                bias,
                16,
                64,
                bits,
                32,
                dtype,
            )
            sources.append(layer_call(gemv).raw.source)
    sources = list(dict.fromkeys(sources))  # instance and group-18 normalisation share their kernel
    assert len(sources) == 27
    unit = tmp_path / "rows.cu"
    unit.write_text("\n".join(f"namespace k{i} {{\n{source}}}\n" for i, source in enumerate(sources)))
    command = ["nvcc", "-arch=sm_90", "-c", "-o", str(tmp_path / "rows.o"), str(unit)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_channel_normalization_reads_its_scale_by_row_or_by_channel():
    instance = layer_call(NormalizationParams("InstanceNormalization", (2, 6, 9), 2, 1e-5, True, "float32"))
    assert [i.shape for i in instance.inputs] == [(2, 6, 9), (6,), (6,)] and instance.raw.grid == (12,)
    assert "const A s = load(scale[c]);" in instance.raw.source  # once a row
    group = NormalizationParams(
        "GroupNormalization", (2, 12, 4, 4), 1, 1e-5, True, "float16", groups=3, per_channel=True
    )
    assert (group.rows, group.cols, group.affine, group.affine_size) == (6, 64, (3, 4, 16), 12)
    call = layer_call(group)
    assert call.raw.grid == (6,) and call.raw.scalars[2:] == (("int64", 3), ("int64", 4), ("int64", 16))
    x = np.random.default_rng(0).standard_normal((2, 12, 4, 4))
    scale, bias = np.arange(12.0) + 1, np.zeros(12)
    out = empty_outputs(call.outputs)
    call.run(numpy_ops(), [x, scale, bias], out)
    g = x.reshape(2, 3, 64)
    want = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(2, 12, 4, 4)
    np.testing.assert_allclose(out[0], (want * scale[None, :, None, None]).astype(np.float16), rtol=2e-3, atol=2e-3)


def test_topk_kernel_shape_and_its_sort_beyond_64():
    call = layer_call(mv("TopK", [(2, 7, 3)], (2, 2, 3), axis=1, largest=0))
    assert call.raw.name == "benanza_top_k_smallest_float32" and call.raw.grid == (6,) and call.raw.block == (32,)
    assert call.raw.scalars == (("int64", 7), ("int64", 3), ("int64", 2))  # n, inner, k
    wide = layer_call(mv("TopK", [(2, 300)], (2, 65), axis=1))
    assert wide.raw is None and wide.kernel == "argsort-take" and "argsort" in wide.notes[0]
    with pytest.raises(UnsupportedLayer, match="does not give"):
        layer_call(mv("TopK", [(2, 7)], (3, 2), axis=1))


_C_TYPES = {
    "float32": "float",
    "float64": "double",
    "int64": "long long",
    "int8": "signed char",
    "uint8": "unsigned char",
}


def elementwise_as_cuda(fused, name: str, types: dict[str, str]) -> str:
    """A ``FusedKernel`` as the CUDA that ``cupy.ElementwiseKernel`` makes of it, near enough for nvcc
    to check its operation: one thread an element ``i``, each array parameter read at ``i`` (a ``raw``
    one indexed by the operation), scalars by value; ``types``: each type placeholder's NumPy type."""
    params, body = [], []
    for text in (*fused.in_params.split(","), *fused.out_params.split(",")):
        words = text.split()
        raw, (kind, var) = words[0] == "raw", words[-2:]
        c_type = _C_TYPES[types.get(kind, kind)]
        if raw:
            params.append(f"const {c_type}* {var}")
        elif kind in types and text in fused.out_params.split(","):
            params.append(f"{c_type}* {var}_out")
            body.append(f"{c_type} {var};")
        elif kind in types:
            params.append(f"const {c_type}* {var}_in")
            body.append(f"const {c_type} {var} = {var}_in[i];")
        else:
            params.append(f"{c_type} {var}")
    outputs = [t.split()[-1] for t in fused.out_params.split(",")]
    typedefs = "".join(f"typedef {_C_TYPES[v]} {k};\n" for k, v in types.items())
    store = "".join(f"{o}_out[i] = {o};" for o in outputs)
    return (
        f"namespace {name} {{\n{typedefs}{fused.preamble}\n"
        f'extern "C" __global__ void {name}({", ".join(params)}, long long n) {{\n'
        f"for (long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {{\n"
        f"{' '.join(body)}\n{fused.operation}\n{store}\n}}\n}}\n}}\n"
    )


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed (the CUDA toolkit)")
def test_the_new_fused_kernels_operations_compile(tmp_path):
    """Q/DQ, linear resizing and the one-kernel activations as CuPy would compile them (float32 and
    float64; CuPy's float16 class is CuPy's own): one nvcc run, each kernel in a namespace of its own."""
    cases = []
    for dtype in ("float32", "float64"):
        cases.append((q("QuantizeLinear", [(6,), (), ()], (6,), "int8", dtype), {"T": dtype, "Z": "int8"}))
        cases.append((q("DequantizeLinear", [(6,), (), ()], (6,), "uint8", dtype), {"T": dtype, "Z": "uint8"}))
        for transform in ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"):
            resize = mv(
                "Resize", [(1, 2, 4, 4)], (1, 2, 8, 8), dtype, mode="linear", coordinate_transformation_mode=transform
            )
            cases.append((resize, {"T": dtype}))
        for op in ("Mish", "Selu", "Celu", "ThresholdedRelu", "Shrink", "Softsign", "QuickGelu"):
            cases.append((ew(op, [(6,)], (6,), dtype), {"T": dtype}))
        for op in ("FastGelu", "BiasGelu"):
            cases.append((ew(op, [(2, 6), (6,)], (2, 6), dtype), {"T": dtype}))
        for mode, padding, align in (("linear", "zeros", 0), ("nearest", "border", 1)):
            sample = mv(
                "GridSample",
                [(1, 2, 4, 4), (1, 3, 3, 2)],
                (1, 2, 3, 3),
                dtype,
                mode=mode,
                padding_mode=padding,
                align_corners=align,
            )
            cases.append((sample, {"T": dtype}))
    unit = tmp_path / "fused.cu"
    unit.write_text("".join(elementwise_as_cuda(layer_call(p).fused, f"k{i}", t) for i, (p, t) in enumerate(cases)))
    command = ["nvcc", "-arch=sm_90", "-c", "-o", str(tmp_path / "fused.o"), str(unit)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def q(op, shapes, y, quantized, dtype="float32"):
    return ElementwiseParams(op, tuple(shapes), y, dtype, (("quantized", quantized),))


def test_quantize_rounds_half_to_even_and_saturates():
    x = [0.25, 0.35, -0.05, 100.0, -100.0, 0.15]
    got = run(q("QuantizeLinear", [(6,), (), ()], (6,), "int8"), x, 0.1, 1)
    # 2.5 -> 2 (+1), 3.5 -> 4 (+1), -0.5 -> -0 (+1), saturated, saturated, 1.5 -> 2 (+1)
    assert got.dtype == np.int8 and got.tolist() == [3, 5, 1, 127, -128, 3]
    u8 = run(
        q("QuantizeLinear", [(2, 2), (2, 1), (2, 1)], (2, 2), "uint8"),
        [[1.0, -1.0], [1.0, 9.0]],
        [[1.0], [0.5]],
        [[0], [10]],
    )
    assert u8.tolist() == [[1, 0], [12, 28]]
    fused = layer_call(q("QuantizeLinear", [(6,), (), ()], (6,), "int8")).fused
    assert fused.in_params == "T x, T s, Z z" and fused.out_params == "Z y" and "rintf(" in fused.operation
    assert "(A)(-128)" in fused.operation and "(A)(127)" in fused.operation


def test_dequantize_per_axis():
    got = run(
        q("DequantizeLinear", [(2, 3), (2, 1), (2, 1)], (2, 3), "int8"),
        [[1, 2, 3], [-1, 0, 1]],
        [[0.5], [2.0]],
        [[1], [0]],
    )
    assert got.dtype == np.float32 and got.tolist() == [[0.0, 0.5, 1.0], [-2.0, 0.0, 2.0]]
    call = layer_call(q("DequantizeLinear", [(4,), (), ()], (4,), "uint8", "float16"))
    assert [i.dtype for i in call.inputs] == ["uint8", "float16", "uint8"] and call.outputs[0].dtype == "float16"


def test_isnan_and_isinf():
    x = [0.0, float("nan"), float("inf"), -float("inf")]
    assert run(ew("IsNaN", [(4,)], (4,)), x).tolist() == [False, True, False, False]
    assert run(ew("IsInf", [(4,)], (4,)), x).tolist() == [False, False, True, True]
    with pytest.raises(UnsupportedLayer, match="one sign"):
        layer_call(ew("IsInf", [(4,)], (4,), detect_negative=0))


@pytest.mark.parametrize("transform", ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"])
@pytest.mark.parametrize(
    ("x", "y"), [((1, 2, 5, 7), (1, 2, 10, 21)), ((2, 1, 8, 6), (2, 1, 3, 4)), ((1, 3, 4, 1), (1, 3, 9, 1))]
)
def test_linear_resize_samples_as_onnx_runtime_does(transform, x, y):
    """ONNX Runtime's Resize (mode linear, sizes given) on the same input: the oracle."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    node = helper.make_node(
        "Resize", ["x", "", "", "sizes"], ["y"], mode="linear", coordinate_transformation_mode=transform
    )
    sizes = helper.make_tensor("sizes", TensorProto.INT64, [4], list(y))
    graph = helper.make_graph(
        [node],
        "r",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y))],
        initializer=[sizes],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    data = np.random.default_rng(1).random(x, dtype=np.float32)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": data}
    )[0]
    got = run(mv("Resize", [x], y, mode="linear", coordinate_transformation_mode=transform), data)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_linear_resize_by_hand_and_what_it_leaves_out():
    x = [[[[0.0, 1.0], [2.0, 3.0]]]]
    corners = run(
        mv("Resize", [(1, 1, 2, 2)], (1, 1, 4, 4), mode="linear", coordinate_transformation_mode="align_corners"), x
    )
    np.testing.assert_allclose(corners[0, 0, 0], [0, 1 / 3, 2 / 3, 1], rtol=1e-6)
    np.testing.assert_allclose(corners[0, 0, 3], [2, 7 / 3, 8 / 3, 3], rtol=1e-6)
    half = run(mv("Resize", [(1, 1, 2, 2)], (1, 1, 4, 4), mode="linear"), x)  # half_pixel: the default
    np.testing.assert_allclose(half[0, 0, 0], [0, 0.25, 0.75, 1], rtol=1e-6)
    call = layer_call(mv("Upsample", [(1, 1, 2, 2)], (1, 1, 4, 4), mode="linear"))
    assert call.fused.name == "benanza_resize_linear_asymmetric" and call.fused.scalars == (2, 2, 4, 4, 2.0, 2.0)
    with pytest.raises(UnsupportedLayer, match="last two axes"):
        layer_call(mv("Resize", [(1, 2, 4, 4)], (1, 4, 8, 8), mode="linear"))
    with pytest.raises(UnsupportedLayer, match="antialias"):
        layer_call(mv("Resize", [(1, 2, 8, 8)], (1, 2, 4, 4), mode="linear", antialias=1))
    with pytest.raises(UnsupportedLayer, match="tf_crop_and_resize"):
        layer_call(
            mv(
                "Resize",
                [(1, 2, 8, 8)],
                (1, 2, 4, 4),
                mode="linear",
                coordinate_transformation_mode="tf_crop_and_resize",
            )
        )
    with pytest.raises(UnsupportedLayer, match="'cubic'"):
        layer_call(mv("Resize", [(1, 2, 8, 8)], (1, 2, 4, 4), mode="cubic"))


def test_cumsum_and_integer_arithmetic():
    assert run(
        ew("CumSum", [(2, 3)], (2, 3), "int32", axis=1, exclusive=0, reverse=0), [[1, 2, 3], [0, 1, 0]]
    ).tolist() == [
        [1, 3, 6],
        [0, 1, 1],
    ]
    with pytest.raises(UnsupportedLayer, match="exclusive or reversed"):
        layer_call(ew("CumSum", [(3,)], (3,), axis=0, exclusive=1, reverse=0))
    assert run(ew("Add", [(3,)], (3,), "int64"), [1, 2, 3]).tolist() == [2, 3, 4]  # a constant operand: 1
    assert run(ew("Mul", [(3,), (3,)], (3,), "int32"), [1, 2, 3], [2, 2, 2]).tolist() == [2, 4, 6]


def test_gather_elements_and_gather_nd():
    data = [[1.0, 2.0], [3.0, 4.0]]
    assert run(mv("GatherElements", [(2, 2), (2, 2)], (2, 2), axis=1), data, [[0, 0], [1, 0]]).tolist() == [
        [1, 1],
        [4, 3],
    ]
    # indices shorter than the data on another axis: the data's leading part there (ONNX Runtime's answer)
    shorter = mv("GatherElements", [(4, 6), (2, 3)], (2, 3), axis=1)
    assert run(shorter, np.arange(24.0).reshape(4, 6), [[0, 5, 1], [2, 2, 3]]).tolist() == [[0, 5, 1], [8, 8, 9]]
    with pytest.raises(UnsupportedLayer, match="does not give"):
        layer_call(mv("GatherElements", [(4, 6), (5, 3)], (5, 3), axis=1))
    assert run(mv("GatherND", [(2, 2), (2, 2)], (2,)), data, [[0, 0], [1, 1]]).tolist() == [1, 4]
    assert run(mv("GatherND", [(2, 2), (1, 1)], (1, 2)), data, [[1]]).tolist() == [[3, 4]]
    call = layer_call(mv("GatherND", [(1, 128), (1, 1, 1, 128, 2)], (1, 1, 1, 128), "bool"))
    assert [i.index_bound for i in call.inputs] == [None, 1]  # every index tuple in range of each axis
    with pytest.raises(UnsupportedLayer, match="batch_dims"):
        layer_call(mv("GatherND", [(2, 2), (2, 1)], (2,), batch_dims=1))
    with pytest.raises(UnsupportedLayer, match="the indices' is needed"):
        layer_call(mv("GatherND", [(2, 2)], (2,)))


# ------------------------------------------------------------------------ on the device

GPU_CASES = [
    ew("Add", [(2, 3, 8), (8,)], (2, 3, 8)),
    ew("Mul", [(4, 5)], (4, 5), "float16"),
    ew("Max", [(3, 4), (4,), (3, 1)], (3, 4)),
    ew("Erf", [(64,)], (64,)),
    ew("Softplus", [(64,)], (64,)),
    ew("LeakyRelu", [(2, 33)], (2, 33), alpha=0.1),
    ew("LeakyRelu", [(2, 33)], (2, 33), "float16", alpha=0.1),
    ew("PRelu", [(2, 4, 3), (4, 1)], (2, 4, 3)),
    ew("HardSigmoid", [(50,)], (50,)),
    ew("HardSwish", [(50,)], (50,), "float64"),
    ew("Gelu", [(100,)], (100,)),
    ew("Gelu", [(100,)], (100,), "float16", approximate="tanh"),
    ew("Where", [(4, 1), (4, 5), (5,)], (4, 5), "float32"),
    ew("Less", [(6,), (6,)], (6,)),
    ew("Cast", [(6,)], (6,), to=10),
    ew("Clip", [(9,)], (9,), min=-0.5, max=0.5),
    ew(  # a decoder's RoPE: 3-D, position ids
        "RotaryEmbedding",
        [(2, 16, 256), (2, 16), (128, 16), (128, 16)],
        (2, 16, 256),
        "float16",
        inputs=("x", "pos", "cos", "sin"),
        heads=8,
        positions="ids",
        interleaved=False,
    ),
    ew(  # 4-D, interleaved pairs, one offset (ONNX Runtime's op)
        "RotaryEmbedding",
        [(1, 8, 4, 64), (1,), (64, 32), (64, 32)],
        (1, 8, 4, 64),
        inputs=("x", "pos", "cos", "sin"),
        heads=8,
        positions="offset",
        interleaved=True,
    ),
    mv("Concat", [(2, 3), (2, 5)], (2, 8), axis=1),
    mv("Transpose", [(2, 3, 4)], (4, 2, 3), perm=(2, 0, 1)),
    mv("Slice", [(6, 6)], (3, 6)),
    mv("Pad", [(3, 3)], (5, 5), mode="constant", pads=(1, 1, 1, 1), value=0.0),
    mv("Gather", [(10, 4), (3,)], (3, 4)),
    mv("Expand", [(3, 1)], (2, 3, 5)),
    mv("Tile", [(2, 3)], (4, 6)),
    mv("Resize", [(1, 2, 3, 3)], (1, 2, 6, 6), coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
    mv("Split", [(4, 6)], (4, 3), axis=1),
    red("ReduceMean", (2, 8, 33), (2,), True, (2, 8, 1)),
    red("ReduceSum", (4, 5, 6), (0, 2), False, (5,), "float16"),
    red("ReduceMax", (3, 7), (0,), False, (7,)),
    norm("LayerNormalization", (2, 5, 768), 2),
    norm("LayerNormalization", (2, 5, 768), 2, dtype="float16"),
    norm("LayerNormalization", (3, 100), 1, bias=False, dtype="float64"),
    norm("LayerNormalization", (1, 4, 5000), 1),  # more values a row than threads in a block
    norm("RMSNormalization", (6, 4096), 1, bias=False),
    norm("RMSNormalization", (6, 4096), 1, bias=False, dtype="float16"),
    q("QuantizeLinear", [(2, 4, 3), (), ()], (2, 4, 3), "int8"),
    q("QuantizeLinear", [(2, 4, 3), (1, 4, 1), (1, 4, 1)], (2, 4, 3), "uint8"),
    q("DequantizeLinear", [(8, 4), (8, 1), (8, 1)], (8, 4), "int8"),
    q("DequantizeLinear", [(8, 4), (), ()], (8, 4), "uint8", "float16"),
    ew("IsNaN", [(64,)], (64,)),
    mv("Resize", [(1, 3, 17, 23)], (1, 3, 34, 46), mode="linear"),
    mv(
        "Resize",
        [(2, 4, 16, 16)],
        (2, 4, 64, 64),
        "float16",
        mode="linear",
        coordinate_transformation_mode="align_corners",
    ),
    mv("Resize", [(1, 2, 9, 9)], (1, 2, 4, 5), mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
    ew("CumSum", [(4, 128)], (4, 128), axis=1, exclusive=0, reverse=0),
    ew("CumSum", [(1, 128)], (1, 128), "int64", axis=1, exclusive=0, reverse=0),
    ew("Add", [(1, 128), (1, 128)], (1, 128), "int64"),
    mv("GatherElements", [(1, 512), (1, 128)], (1, 128), "int64", axis=1),
    mv("GatherND", [(1, 128), (1, 1, 1, 128, 2)], (1, 1, 1, 128), "bool"),
    mv("GatherND", [(4, 6, 8), (5, 2)], (5, 8)),
    NormalizationParams("InstanceNormalization", (2, 32, 64, 64), 2, 1e-5, True, "float32"),
    NormalizationParams("GroupNormalization", (1, 64, 32, 32), 1, 1e-5, True, "float16", groups=32),
    NormalizationParams("GroupNormalization", (2, 64, 16, 16), 1, 1e-6, True, "float32", groups=8, per_channel=True),
    mv("TopK", [(128, 8)], (128, 2), axis=-1, largest=1),
    mv("TopK", [(128, 8)], (128, 2), "float16", axis=-1, largest=1),
    mv("TopK", [(2, 50, 3)], (2, 4, 3), axis=1, largest=0),
    mv("TopK", [(3, 5000)], (3, 8), axis=1, largest=1),  # more values a row than threads in a block
    mv("TopK", [(4, 1000)], (4, 100), axis=1, largest=1),  # the sort
    ew("Mish", [(2, 300)], (2, 300)),
    ew("Mish", [(2, 300)], (2, 300), "float16"),
    ew("Selu", [(64,)], (64,), alpha=1.5, gamma=1.1),
    ew("Softsign", [(64,)], (64,), "float64"),
    ew("Sin", [(64,)], (64,)),
    ew("Round", [(64,)], (64,)),
    ew("Mod", [(8, 4), (4,)], (8, 4), "int64", fmod=0),
    NormalizationParams(
        "SkipLayerNormalization", (2, 64, 768), 2, 1e-12, True, "float16", skip=(64, 768), pre_bias=True, sum_out=True
    ),
    NormalizationParams("SkipSimplifiedLayerNormalization", (8, 4096), 1, 1e-6, False, "float32", skip=(8, 4096)),
    ew("FastGelu", [(4, 3072), (3072,)], (4, 3072), "float16"),
    ew("BiasGelu", [(4, 3072), (3072,)], (4, 3072)),
    ew("QuickGelu", [(64,)], (64,), alpha=1.702),
    ew("BiasAdd", [(2, 8, 320), (320,), (2, 8, 320)], (2, 8, 320)),
    BlockQuantizedGemmParams(
        "MatMulNBits", (1, 1, 4096), (4096, 128, 16), (4096, 128), (), False, 4096, 4096, 4, 32, "float16"
    ),
    BlockQuantizedGemmParams(
        "MatMulNBits", (4, 3000), (1000, 94, 16), (1000 * 94,), (1000 * 47,), True, 1000, 3000, 4, 32, "float32"
    ),
    BlockQuantizedGemmParams("MatMulNBits", (2, 256), (64, 4, 64), (64, 4), (256,), False, 64, 256, 8, 64, "float32"),
    red("ReduceL2", (8, 512), (1,), False, (8,)),
    red("ReduceLogSumExp", (4, 6, 33), (2,), True, (4, 6, 1), "float16"),
    ReductionParams("ArgMax", (4, 19, 64, 64), (1,), False, (4, 64, 64), "float32"),  # a segmentation head
    ReductionParams("ArgMin", (3, 50), (1,), True, (3, 1), "float32", select_last_index=True),
    mv("DepthToSpace", [(1, 48, 32, 32)], (1, 12, 64, 64), blocksize=2, mode="CRD"),
    mv("SpaceToDepth", [(1, 3, 64, 64)], (1, 12, 32, 32), blocksize=2),
    mv("Trilu", [(2, 64, 64)], (2, 64, 64), upper=0, k=0),
    mv("GridSample", [(2, 32, 40, 40), (2, 300, 4, 2)], (2, 32, 300, 4), mode="bilinear", padding_mode="zeros"),
    mv("ScatterND", [(256, 1, 8, 64), (1, 1), (1, 1, 8, 64)], (256, 1, 8, 64), "float16"),  # a static KV cache step
    mv("ScatterElements", [(4, 300), (4, 1), (4, 1)], (4, 300), axis=1),  # one write a row: no race
    mv(
        "GridSample",
        [(1, 8, 20, 20), (1, 16, 16, 2)],
        (1, 8, 16, 16),
        "float16",
        mode="nearest",
        padding_mode="border",
        align_corners=1,
    ),
    BlockQuantizedGemmParams(
        "MatMulNBits", (1, 64, 512), (512, 16, 16), (512, 16), (), False, 512, 512, 4, 32, "float16"
    ),
]


@pytest.fixture(scope="module")
def ctx():
    from benanza.runtimes.cuda.device import DeviceContext

    context = DeviceContext(0)
    yield context
    context.close()


@pytest.mark.gpu
@pytest.mark.parametrize("p", GPU_CASES, ids=lambda p: f"{p.op}-{p.dtype}")
def test_cupy_candidate_matches_numpy(ctx, p):
    import cupy

    from benanza.runtimes.cuda.framework import framework_plan

    plan = framework_plan(ctx, p)
    (candidate,) = plan.candidates
    assert candidate.source == "cupy" and candidate.default
    candidate.launch()
    ctx.synchronize()
    host_inputs = [cupy.asnumpy(x) for x in plan.inputs]
    expected = empty_outputs(plan.call.outputs)
    if p.dtype == "float16":  # the reference in float64: the fused kernels accumulate in float, NumPy in half
        host_inputs = [x.astype(np.float64) if x.dtype == np.float16 else x for x in host_inputs]
        expected = [np.zeros(o.shape, np.float64) if o.dtype == np.float16 else o for o in expected]
    plan.call.run(OPS, host_inputs, expected)
    tol = 4e-3 if p.dtype == "float16" else 1e-5
    for got, want in zip(plan.outputs, expected, strict=True):
        got = cupy.asnumpy(got)
        assert got.shape == want.shape
        if want.dtype == np.bool_ or want.dtype.kind in "iu":
            assert np.array_equal(got, want)
        else:
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
