"""The cuDNN 9 legacy API through ctypes: every algorithm of a layer, called as frameworks call it.

ONNX Runtime built against cuDNN 8 and PyTorch's v7 path run convolutions through these
calls: ``cudnnGetConvolutionForwardAlgorithm_v7`` gives the heuristic order (a framework
takes the first entry that runs), ``cudnnFindConvolutionForwardAlgorithmEx`` times every
algorithm once (ONNX Runtime's default search), ``cudnnConvolutionForward`` runs one. (Built
against cuDNN 9, ONNX Runtime's Conv moved to the graph API: ``cudnn_graph``.) This module
builds one ``Candidate`` per algorithm (and per math type the heuristic names), plus the
single-algorithm layers cuDNN also serves: fused conv+bias+activation, ConvTranspose as
backward-data, pooling, LRN, softmax, activation and inference batch normalisation.

Three parts, the first two pure and importable without any GPU library:

- enum tables (values from cuDNN 9.6.0's ``cudnn_graph.h``, ``cudnn_ops.h`` and
  ``cudnn_cnn.h``, the headers of NVIDIA's CUDA 12.6 / cuDNN 9.6 distribution as mirrored in
  the public repository zspace/system.cuda-12.6, ``include/``);
- descriptor arguments computed from a layer's parameters (``params``): shapes promoted to
  the >= 4 dimensions cuDNN wants, packed strides, convolution arrays, compute and math
  types, and the reasons the legacy API cannot run a layer;
- the library part: ``libcudnn.so.9`` loaded once, every function given its C signature
  before use and every ``cudnnStatus_t`` checked (``LibraryCallError``), and descriptors
  that free themselves. Building a layer's descriptors (``conv_descriptors``,
  ``pooling_descriptors``, ...) needs the library but no GPU, and checks cuDNN's own shape
  rules against the layer's: the tests run it on every zoo layer wherever cuDNN is installed;
- the GPU part: a handle on the benchmark's stream, and the candidate builders.

A candidate's ``launch`` enqueues one call on the handle's stream and returns; it holds
every descriptor, buffer and scaling factor its arguments point into. Building probes each
candidate once (an algorithm cuDNN rejects for this geometry is left out, a layer no
algorithm runs is ``UnsupportedLayer``) and synchronises; a launch never does.
"""

from __future__ import annotations

import logging
import math
import os
import site
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benanza.errors import GpuError, LibraryCallError, UnsupportedLayer
from benanza.runtimes.cuda.candidate import Candidate
from benanza.runtimes.cuda.params import (
    ActivationParams,
    BatchNormParams,
    ConvParams,
    LrnParams,
    PoolParams,
    Shape,
    SoftmaxParams,
)

if TYPE_CHECKING:
    from benanza.runtimes.cuda.device import DeviceContext

log = logging.getLogger(__name__)

SOURCE = "cudnn-legacy"
SONAME = "libcudnn.so.9"
INSTALL_HINT = "pip install 'benanza[gpu]' (cuDNN 9 is the nvidia-cudnn-cu13 wheel)"

# ------------------------------------------------------------------ enums (cuDNN 9.6.0 headers)

# cudnn_graph.h: cudnnDataType_t (INT8x4, UINT8x4 and INT8x32 are deprecated there).
DATA_TYPE = {
    "FLOAT": 0,
    "DOUBLE": 1,
    "HALF": 2,
    "INT8": 3,
    "INT32": 4,
    "INT8x4": 5,
    "UINT8": 6,
    "UINT8x4": 7,
    "INT8x32": 8,
    "BFLOAT16": 9,
    "INT64": 10,
    "BOOLEAN": 11,
    "FP8_E4M3": 12,
    "FP8_E5M2": 13,
    "FAST_FLOAT_FOR_FP8": 14,
}
# cudnn_graph.h: cudnnMathType_t.
MATH_TYPE = {"DEFAULT_MATH": 0, "TENSOR_OP_MATH": 1, "TENSOR_OP_MATH_ALLOW_CONVERSION": 2, "FMA_MATH": 3}
# cudnn_graph.h: cudnnTensorFormat_t, cudnnConvolutionMode_t, cudnnNanPropagation_t.
TENSOR_FORMAT = {"NCHW": 0, "NHWC": 1, "NCHW_VECT_C": 2}
CONVOLUTION_MODE = {"CONVOLUTION": 0, "CROSS_CORRELATION": 1}
NAN_PROPAGATION = {"NOT_PROPAGATE_NAN": 0, "PROPAGATE_NAN": 1}
# cudnn_graph.h: cudnnActivationMode_t.
ACTIVATION_MODE = {
    "SIGMOID": 0,
    "RELU": 1,
    "TANH": 2,
    "CLIPPED_RELU": 3,
    "ELU": 4,
    "IDENTITY": 5,
    "SWISH": 6,
}
# cudnn_ops.h: cudnnConvolutionFwdAlgo_t and cudnnConvolutionBwdDataAlgo_t (without the _COUNT entry).
FWD_ALGO = {
    "IMPLICIT_GEMM": 0,
    "IMPLICIT_PRECOMP_GEMM": 1,
    "GEMM": 2,
    "DIRECT": 3,
    "FFT": 4,
    "FFT_TILING": 5,
    "WINOGRAD": 6,
    "WINOGRAD_NONFUSED": 7,
}
FWD_ALGO_COUNT = 8  # CUDNN_CONVOLUTION_FWD_ALGO_COUNT
BWD_DATA_ALGO = {"ALGO_0": 0, "ALGO_1": 1, "FFT": 2, "FFT_TILING": 3, "WINOGRAD": 4, "WINOGRAD_NONFUSED": 5}
BWD_DATA_ALGO_COUNT = 6  # CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT
# cudnn_ops.h: cudnnPoolingMode_t, cudnnSoftmaxAlgorithm_t, cudnnSoftmaxMode_t, cudnnBatchNormMode_t, cudnnLRNMode_t.
POOLING_MODE = {
    "MAX": 0,
    "AVERAGE_COUNT_INCLUDE_PADDING": 1,
    "AVERAGE_COUNT_EXCLUDE_PADDING": 2,
    "MAX_DETERMINISTIC": 3,
}
SOFTMAX_ALGORITHM = {"FAST": 0, "ACCURATE": 1, "LOG": 2}
SOFTMAX_MODE = {"INSTANCE": 0, "CHANNEL": 1}
BATCHNORM_MODE = {"PER_ACTIVATION": 0, "SPATIAL": 1, "SPATIAL_PERSISTENT": 2}
LRN_MODE = {"CROSS_CHANNEL_DIM1": 0}
# cudnn_ops.h: CUDNN_LRN_MIN_N, CUDNN_LRN_MAX_N, CUDNN_LRN_MIN_K, CUDNN_LRN_MIN_BETA, CUDNN_BN_MIN_EPSILON.
# (CUDNN_BN_MIN_EPSILON is 0.0 in cuDNN 8 and 9; the 1e-5 of older releases no longer applies.)
LRN_MIN_N, LRN_MAX_N, LRN_MIN_K, LRN_MIN_BETA = 1, 16, 1e-5, 0.01
BN_MIN_EPSILON = 0.0
DIM_MAX = 8  # cudnn_graph.h: CUDNN_DIM_MAX

# cudnn_graph.h: cudnnStatus_t (the deprecated aliases share these values, except INVALID_VALUE).
STATUS_NAMES = {
    0: "CUDNN_STATUS_SUCCESS",
    1001: "CUDNN_STATUS_NOT_INITIALIZED",
    1002: "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH",
    1003: "CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH",
    1004: "CUDNN_STATUS_DEPRECATED",
    1005: "CUDNN_STATUS_LICENSE_ERROR",
    1006: "CUDNN_STATUS_RUNTIME_IN_PROGRESS",
    1007: "CUDNN_STATUS_RUNTIME_FP_OVERFLOW",
    1008: "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED",
    2000: "CUDNN_STATUS_BAD_PARAM",
    2001: "CUDNN_STATUS_INVALID_VALUE",
    2002: "CUDNN_STATUS_BAD_PARAM_NULL_POINTER",
    2003: "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER",
    2004: "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED",
    2005: "CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND",
    2006: "CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT",
    2007: "CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH",
    2008: "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH",
    2009: "CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES",
    2010: "CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE",
    2011: "CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH",
    2012: "CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE",
    3000: "CUDNN_STATUS_NOT_SUPPORTED",
    3001: "CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN",
    3002: "CUDNN_STATUS_NOT_SUPPORTED_SHAPE",
    3003: "CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE",
    3004: "CUDNN_STATUS_NOT_SUPPORTED_LAYOUT",
    3005: "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER",
    3006: "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART",
    3007: "CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH",
    3008: "CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING",
    3009: "CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE",
    3010: "CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT",
    3011: "CUDNN_STATUS_NOT_SUPPORTED_PADDING",
    3012: "CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM",
    3013: "CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API",
    3014: "CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE",  # since cuDNN 9.18
    4000: "CUDNN_STATUS_INTERNAL_ERROR",
    4001: "CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED",
    4002: "CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE",
    4003: "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED",
    4004: "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED",
    4005: "CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM",
    4006: "CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED",
    5000: "CUDNN_STATUS_EXECUTION_FAILED",
    5001: "CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER",
    5002: "CUDNN_STATUS_EXECUTION_FAILED_CUBLAS",
    5003: "CUDNN_STATUS_EXECUTION_FAILED_CUDART",
    5004: "CUDNN_STATUS_EXECUTION_FAILED_CURAND",
}


def _by_value(table: Mapping[str, int]) -> dict[int, str]:
    return {value: name for name, value in table.items()}


DATA_TYPE_NAMES = _by_value(DATA_TYPE)
MATH_TYPE_NAMES = _by_value(MATH_TYPE)
TENSOR_FORMAT_NAMES = _by_value(TENSOR_FORMAT)
CONVOLUTION_MODE_NAMES = _by_value(CONVOLUTION_MODE)
ACTIVATION_MODE_NAMES = _by_value(ACTIVATION_MODE)
FWD_ALGO_NAMES = _by_value(FWD_ALGO)
BWD_DATA_ALGO_NAMES = _by_value(BWD_DATA_ALGO)
POOLING_MODE_NAMES = _by_value(POOLING_MODE)
SOFTMAX_ALGORITHM_NAMES = _by_value(SOFTMAX_ALGORITHM)
SOFTMAX_MODE_NAMES = _by_value(SOFTMAX_MODE)
BATCHNORM_MODE_NAMES = _by_value(BATCHNORM_MODE)

# benanza's names (params) -> cuDNN's.
_DATA_TYPES = {"float32": "FLOAT", "float16": "HALF", "bfloat16": "BFLOAT16", "float64": "DOUBLE"}
_POOL_MODES = {
    "max": "MAX",
    "avg_include_pad": "AVERAGE_COUNT_INCLUDE_PADDING",
    "avg_exclude_pad": "AVERAGE_COUNT_EXCLUDE_PADDING",
}
_ACTIVATIONS = {
    "relu": "RELU",
    "sigmoid": "SIGMOID",
    "tanh": "TANH",
    "clipped_relu": "CLIPPED_RELU",
    "elu": "ELU",
    "identity": "IDENTITY",
    "swish": "SWISH",
}
_INT_MAX = 2**31 - 1  # descriptor dimensions and strides are C ints
Tensors = Mapping[str, Any] | None  # device arrays by role (x, w, y, ...) a caller supplies to check results

# ------------------------------------------------------------------ pure: types, shapes, checks


def data_type(dtype: str) -> int:
    """The ``cudnnDataType_t`` of a benanza dtype; ``UnsupportedLayer`` for one cuDNN has no float type for."""
    name = _DATA_TYPES.get(dtype)
    if name is None:
        raise UnsupportedLayer(f"{dtype} data: the cuDNN legacy runtime runs {', '.join(_DATA_TYPES)}")
    return DATA_TYPE[name]


def compute_type(dtype: str) -> int:
    """The convolution descriptor's compute type: FLOAT for float, half and bfloat16 data, DOUBLE for double.

    Half and bfloat16 accumulate in float as PyTorch (``ConvolutionDescriptor::set``) and ONNX
    Runtime (``CudnnConvolutionDescriptor::Set``, copied from PyTorch) set it: cuDNN's
    "pseudo-half" configuration (HALF compute) loses precision and is not what frameworks run.
    Tensor cores are chosen by the math type, not here.
    """
    return DATA_TYPE["DOUBLE"] if dtype == "float64" else DATA_TYPE["FLOAT"]


def math_type(dtype: str, tensor_cores: bool) -> int:
    """The ``cudnnMathType_t`` for a data type with tensor cores allowed or not.

    As PyTorch and ONNX Runtime set it: float data with tensor cores (TF32) allowed keeps
    DEFAULT_MATH, which permits TF32 on Ampere and later (cuDNN's own TF32 switch, the
    environment variable NVIDIA_TF32_OVERRIDE, is left as the process has it); half and
    bfloat16 ask for TENSOR_OP_MATH. Without tensor cores every type asks for FMA_MATH, the
    kernels built on FMA instructions only.
    """
    if not tensor_cores:
        return MATH_TYPE["FMA_MATH"]
    return MATH_TYPE["TENSOR_OP_MATH"] if dtype in ("float16", "bfloat16") else MATH_TYPE["DEFAULT_MATH"]


def tensor_core_use(
    math: int, dtype: str, capability: tuple[int, int] | None, tf32_override: str | None = None
) -> bool | None:
    """Whether a convolution run with math type ``math`` uses tensor cores, or None where cuDNN does not say.

    TENSOR_OP math on a GPU with tensor cores (compute capability >= 7.0) counts as tensor
    cores, FMA math never does. DEFAULT_MATH lets cuDNN choose: float (TF32) and double
    (FP64 MMA) data may use tensor cores from compute capability 8.0 on unless
    NVIDIA_TF32_OVERRIDE=0 turns TF32 off, and before 8.0 it uses none; which algorithm
    actually does is not reported, hence None.
    """
    if math == MATH_TYPE["FMA_MATH"]:
        return False
    if capability is None:
        return None
    if math in (MATH_TYPE["TENSOR_OP_MATH"], MATH_TYPE["TENSOR_OP_MATH_ALLOW_CONVERSION"]):
        return capability >= (7, 0)
    if capability < (8, 0):
        return False
    if dtype == "float32" and tf32_override == "0":
        return False
    return None


def scaling_type(dtype: str) -> str:
    """The C type of alpha/beta: ``double`` for double data, ``float`` for float, half and bfloat16 (cuDNN's rule)."""
    return "double" if dtype == "float64" else "float"


def packed_strides(shape: Sequence[int]) -> Shape:
    """Row-major (NCHW...) strides of a packed tensor: (2, 3, 4, 5) -> (60, 20, 5, 1)."""
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * max(int(shape[i + 1]), 1)
    return tuple(strides)


def cudnn_shape(shape: Sequence[int], rank: int = 4) -> Shape:
    """``shape`` padded with trailing 1s to at least ``rank`` dimensions.

    cuDNN's tensor, filter and convolution descriptors want 4 or 5 dimensions; frameworks
    run a 1-D layer as 2-D with a unit trailing dimension (ONNX Runtime's default), which
    keeps the memory layout.
    """
    return tuple(int(d) for d in shape) + (1,) * max(rank - len(shape), 0)


def four_d(shape: Sequence[int]) -> Shape:
    """An element-wise view of ``shape`` in 4 dimensions: padded with 1s, or leading dimensions merged."""
    if len(shape) <= 4:
        return cudnn_shape(shape)
    return (math.prod(shape[:-3]), *(int(d) for d in shape[-3:]))


def conv_output_spatial(
    spatial: Sequence[int],
    kernel: Sequence[int],
    pads_begin: Sequence[int],
    pads_end: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> Shape:
    """The spatial output of a convolution (floor rounding, as cuDNN and ONNX compute it)."""
    return tuple(
        (i + pb + pe - d * (k - 1) - 1) // s + 1
        for i, k, pb, pe, s, d in zip(spatial, kernel, pads_begin, pads_end, strides, dilations, strict=True)
    )


@dataclass(frozen=True, slots=True)
class ConvDescriptorArgs:
    """What cuDNN's descriptors of one convolution are set from, 1-D promoted to 2-D.

    For a ConvTranspose (backward-data) ``x`` is cuDNN's dy and ``y`` its dx: the forward
    convolution of ``y`` by ``w`` has the shape of ``x``.
    """

    x: Shape
    w: Shape
    y: Shape
    pads: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    groups: int
    bias: Shape  # 1 x K x 1 x 1 (x 1): the fused call's per-channel bias


def conv_descriptor_args(p: ConvParams) -> ConvDescriptorArgs:
    """Descriptor arguments of a convolution; a 1-D one becomes (N, C, L, 1) with a unit kernel column."""
    extra = 1 if len(p.w) == 3 else 0
    rank = len(p.w) + extra
    y = cudnn_shape(p.y, rank)
    return ConvDescriptorArgs(
        x=cudnn_shape(p.x, rank),
        w=cudnn_shape(p.w, rank),
        y=y,
        pads=tuple(p.pads_begin) + (0,) * extra,
        strides=tuple(p.strides) + (1,) * extra,
        dilations=tuple(p.dilations) + (1,) * extra,
        groups=p.groups,
        bias=(1, y[1]) + (1,) * (rank - 2),
    )


def params_check(p: ConvParams) -> str | None:
    """Why the cuDNN legacy API cannot run this convolution as asked, or None when it can."""
    n = len(p.w) - 2
    if n < 1 or n > 3:
        return f"{n} spatial dimensions: the cuDNN legacy convolution runs 1 to 3"
    if not (len(p.x) == len(p.y) == len(p.w)) or not (
        len(p.pads_begin) == len(p.pads_end) == len(p.strides) == len(p.dilations) == n
    ):
        return f"inconsistent ranks: x {p.x}, w {p.w}, y {p.y}, {n} spatial dimensions"
    if p.dtype not in _DATA_TYPES:
        return f"{p.dtype} data: the cuDNN legacy runtime runs {', '.join(_DATA_TYPES)}"
    if not p.symmetric:
        return f"asymmetric pads {list(p.pads_begin)} / {list(p.pads_end)}: the legacy API pads both sides alike"
    if min((*p.strides, *p.dilations, p.groups)) < 1 or min(p.pads_begin) < 0:
        return "non-positive strides, dilations or groups, or negative pads"
    kernel = p.w[2:]
    if p.transpose:  # backward-data: the forward convolution of y has x's shape
        if p.activation is not None:
            return "ConvTranspose with a fused activation: the legacy API has no fused backward-data call"
        channels_ok = p.x[1] == p.w[0] and p.y[1] == p.w[1] * p.groups and p.w[0] % p.groups == 0
        source, target, side = p.y, p.x, "input"
    else:
        channels_ok = p.x[1] == p.w[1] * p.groups and p.y[1] == p.w[0] and p.w[0] % p.groups == 0
        source, target, side = p.x, p.y, "output"
    computed = conv_output_spatial(source[2:], kernel, p.pads_begin, p.pads_end, p.strides, p.dilations)
    expected = tuple(target[2:])
    if not channels_ok:
        return f"channels of x {p.x}, w {p.w}, y {p.y} do not match {p.groups} group(s)"
    if computed != expected:
        return f"the convolution's {side} spatial shape is {list(computed)}, the layer's {list(expected)}"
    if p.activation is not None and p.activation not in _ACTIVATIONS:
        return f"fused activation {p.activation}: cuDNN's fused call has none"
    return _int32_reason((p.x, p.w, p.y))


@dataclass(frozen=True, slots=True)
class PoolDescriptorArgs:
    x: Shape
    y: Shape
    window: tuple[int, ...]
    pads: tuple[int, ...]
    strides: tuple[int, ...]


def pooling_descriptor_args(p: PoolParams) -> PoolDescriptorArgs:
    """Pooling descriptor arguments; 1-D pooling becomes 2-D with a unit window column."""
    extra = 1 if len(p.window) == 1 else 0
    rank = len(p.window) + 2 + extra
    return PoolDescriptorArgs(
        x=cudnn_shape(p.x, rank),
        y=cudnn_shape(p.y, rank),
        window=tuple(p.window) + (1,) * extra,
        pads=tuple(p.pads) + (0,) * extra,
        strides=tuple(p.strides) + (1,) * extra,
    )


def pooling_check(p: PoolParams) -> str | None:
    """Why cuDNN's pooling cannot run this layer, or None."""
    n = len(p.window)
    if n < 1 or n > 3 or len(p.x) != n + 2 or len(p.y) != n + 2 or len(p.pads) != n or len(p.strides) != n:
        return f"pooling over {n} spatial dimensions of x {p.x}: cuDNN pools 1 to 3"
    if p.mode not in _POOL_MODES:
        return f"pooling mode {p.mode}: cuDNN has {', '.join(_POOL_MODES)}"
    if p.dtype not in _DATA_TYPES:
        return f"{p.dtype} data: the cuDNN legacy runtime runs {', '.join(_DATA_TYPES)}"
    return _int32_reason((p.x, p.y))


def lrn_check(p: LrnParams) -> str | None:
    """Why cudnnLRNCrossChannelForward cannot run this LRN (cuDNN's lrnN, lrnK and lrnBeta bounds), or None."""
    if not LRN_MIN_N <= p.size <= LRN_MAX_N:
        return f"LRN size {p.size}: cuDNN's window is {LRN_MIN_N} to {LRN_MAX_N} channels"
    if p.k < LRN_MIN_K:
        return f"LRN bias {p.k}: cuDNN needs lrnK >= {LRN_MIN_K}"
    if p.beta < LRN_MIN_BETA:
        return f"LRN beta {p.beta}: cuDNN needs lrnBeta >= {LRN_MIN_BETA}"
    if len(p.x) < 2 or len(p.x) > 5:
        return f"LRN on a {len(p.x)}-d tensor: cuDNN normalises 4-d and 5-d NCHW tensors"
    if p.dtype not in _DATA_TYPES:
        return f"{p.dtype} data: the cuDNN legacy runtime runs {', '.join(_DATA_TYPES)}"
    return _int32_reason((p.x,))


def batchnorm_check(p: BatchNormParams) -> str | None:
    """Why cuDNN's inference batch normalisation cannot run this layer (epsilon below CUDNN_BN_MIN_EPSILON), or None."""
    if len(p.x) < 2:
        return f"BatchNormalization of a {len(p.x)}-d tensor: cuDNN needs N x C x ..."
    if p.epsilon < BN_MIN_EPSILON:
        return f"BatchNormalization epsilon {p.epsilon}: cuDNN needs epsilon >= CUDNN_BN_MIN_EPSILON ({BN_MIN_EPSILON})"
    if p.dtype not in _DATA_TYPES:
        return f"{p.dtype} data: the cuDNN legacy runtime runs {', '.join(_DATA_TYPES)}"
    return _int32_reason((p.x,))


def batchnorm_shape(x: Sequence[int]) -> Shape:
    """x as cuDNN's batch normalisation takes it: 4-d or 5-d as given, else N x C x (rest) x 1."""
    if len(x) in (4, 5):
        return tuple(x)
    return (int(x[0]), int(x[1]), math.prod(x[2:]), 1)


def activation_check(p: ActivationParams) -> str | None:
    """Why cudnnActivationForward cannot run this activation, or None (IDENTITY is for the fused call only)."""
    if p.kind not in _ACTIVATIONS:
        return f"activation {p.kind}: cuDNN has {', '.join(k for k in _ACTIVATIONS if k != 'identity')}"
    if p.kind == "identity":
        return "identity activation: cudnnActivationForward rejects IDENTITY (it is for the fused convolution only)"
    if p.dtype not in _DATA_TYPES:
        return f"{p.dtype} data: the cuDNN legacy runtime runs {', '.join(_DATA_TYPES)}"
    return _int32_reason((four_d(p.x),))


def activation_coef(kind: str, coef: float) -> float:
    """cudnnSetActivationDescriptor's coef: clipped ReLU's ceiling, ELU's alpha, else the largest double.

    The other modes are documented to ignore it; frameworks pass DBL_MAX all the same
    (PyTorch's ``ActivationDescriptor::set`` for its fused conv+ReLU), so that no kernel could
    read it as a ReLU ceiling.
    """
    return float(coef) if kind in ("clipped_relu", "elu") else sys.float_info.max


def softmax_check(p: SoftmaxParams) -> str | None:
    if p.dtype not in _DATA_TYPES:
        return f"{p.dtype} data: the cuDNN legacy runtime runs {', '.join(_DATA_TYPES)}"
    return _int32_reason((p.x,))


def _int32_reason(shapes: Iterable[Sequence[int]]) -> str | None:
    for shape in shapes:
        if math.prod(shape) > _INT_MAX:
            return f"a tensor of {math.prod(shape)} elements: the legacy API's int strides overflow past 2^31-1"
        if len(shape) > DIM_MAX:
            return f"a {len(shape)}-d tensor: cuDNN descriptors hold at most {DIM_MAX} dimensions"
    return None


def algorithm_order(
    heuristic: Sequence[tuple[int, int]], count: int, requested_math: int
) -> list[tuple[int, int, int | None]]:
    """Every algorithm to try, as (algo, math type, heuristic rank): the heuristic's order first.

    ``heuristic`` lists the (algo, math type) pairs the heuristic answered with SUCCESS, best
    first; rank is the position in it (a pair listed twice keeps its first rank). The
    algorithms it did not name follow with the requested math type and no rank: a
    framework that benchmarks tries them too.
    """
    order: list[tuple[int, int, int | None]] = []
    seen: set[tuple[int, int]] = set()
    for rank, (algo, mtype) in enumerate(heuristic):
        if (algo, mtype) not in seen and 0 <= algo < count:
            seen.add((algo, mtype))
            order.append((algo, mtype, rank))
    named = {algo for algo, _ in seen}
    order += [(algo, requested_math, None) for algo in range(count) if algo not in named]
    return order


def candidate_name(algo_name: str, math: int, prefix: str = "") -> str:
    """A candidate's stable name: the algorithm enum name, ``/tensor_op`` when the math type is a tensor-op one."""
    suffix = {
        MATH_TYPE["TENSOR_OP_MATH"]: "/tensor_op",
        MATH_TYPE["TENSOR_OP_MATH_ALLOW_CONVERSION"]: "/tensor_op_conv",
    }
    return f"{prefix}{algo_name}{suffix.get(math, '')}"


def find_ranks(
    found: Sequence[tuple[int, int]],
    candidates: Sequence[tuple[str, int]],
    algo_names: Mapping[int, str],
    prefix: str = "",
) -> dict[str, int]:
    """Candidate name -> position in a Find*Ex answer ((algo, math type) pairs, fastest first).

    An entry is matched to the candidate of the same algorithm and math type, else to a
    not yet matched candidate of the same algorithm (Find may report another math type than
    the heuristic did); entries matching no candidate keep their position but name nothing.
    """
    by_name = dict(candidates)
    ranks: dict[str, int] = {}
    for position, (algo, mtype) in enumerate(found):
        name = candidate_name(algo_names.get(algo, str(algo)), mtype, prefix)
        if name not in by_name or name in ranks:
            name = next((n for n, a in candidates if a == algo and n not in ranks), "")
        if name:
            ranks[name] = position
    return ranks


def decode_version(version: int) -> str:
    """cudnnGetVersion's number as text: 90100 -> "9.1.0"; cuDNN 8's 8907 -> "8.9.7".

    cuDNN 9 encodes MAJOR*10000 + MINOR*100 + PATCH (``cudnn_version.h``); cuDNN 8 and
    earlier used MAJOR*1000 + MINOR*100 + PATCH.
    """
    if version >= 90000:
        return f"{version // 10000}.{version % 10000 // 100}.{version % 100}"
    return f"{version // 1000}.{version % 1000 // 100}.{version % 100}"


def status_name(code: int) -> str:
    """A cudnnStatus_t's name; an unknown code is named by its category (the thousands, per cudnn_graph.h)."""
    if code in STATUS_NAMES:
        return STATUS_NAMES[code]
    category = STATUS_NAMES.get(code // 1000 * 1000) if code >= 1000 else None
    return f"{category}({code})" if category else f"CUDNN_STATUS_{code}"


def unsupported_status(name: str) -> bool:
    """Whether a status says cuDNN cannot run the request (NOT_SUPPORTED*, BAD_PARAM*) rather than that it failed."""
    return name.startswith(("CUDNN_STATUS_NOT_SUPPORTED", "CUDNN_STATUS_BAD_PARAM", "CUDNN_STATUS_INVALID_VALUE"))


def parse_compute_capability(text: str) -> tuple[int, int]:
    """CuPy's compute capability string as (major, minor): "90" -> (9, 0), "120" -> (12, 0)."""
    return int(text[:-1]), int(text[-1])


def wheel_library_paths(dirs: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """``libcudnn.so.9`` files of the NVIDIA wheels under these site-packages folders, in order, each once.

    ``nvidia-cudnn-cu13`` and ``-cu12`` put it in ``nvidia/cudnn/lib``; the CUDA 13 toolkit
    wheels use ``nvidia/cu13/lib``.
    """
    found: list[Path] = []
    for base in dirs:
        for sub in ("nvidia/cudnn/lib", "nvidia/cu13/lib", "nvidia/cudnn_jit/lib"):
            path = Path(base) / sub / SONAME
            if path.is_file() and path not in found:
                found.append(path)
    return found


def loaded_library_path(maps: str) -> str | None:
    """The file of a ``libcudnn.so.9`` already mapped into a process, from the text of /proc/self/maps."""
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)  # address perms offset dev inode [path]
        if len(fields) == 6 and Path(fields[5]).name.startswith(SONAME):
            return fields[5]
    return None


# ------------------------------------------------------------------ the library


_LOCK = threading.Lock()
_LOADED: dict[str, Any] = {}  # "lib": the CDLL, "path": where it came from
_FUNCTIONS: dict[str, Any] = {}


def _site_dirs() -> list[str]:
    dirs = [*site.getsitepackages(), site.getusersitepackages(), *sys.path]
    return [d for d in dict.fromkeys(dirs) if d and os.path.isdir(d)]


def _library_candidates() -> list[str]:
    """Where to look for libcudnn.so.9, best first: already loaded, cuda-pathfinder, the wheels, the loader path."""
    import ctypes.util

    candidates: list[str] = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            loaded = loaded_library_path(maps.read())
        if loaded:  # torch or the cuDNN frontend got there first: share its copy
            candidates.append(loaded)
    except OSError:
        pass
    try:  # NVIDIA's own finder (a dependency of cuda-bindings): wheels, conda, CUDA_PATH, and cuDNN's cublasLt
        from cuda.pathfinder import load_nvidia_dynamic_lib

        found = load_nvidia_dynamic_lib("cudnn").abs_path
        if found:
            candidates.append(found)
    except Exception as exc:  # not installed, or it did not find cuDNN: the other places remain
        log.debug("cuda.pathfinder found no cuDNN: %s", exc)
    candidates += [str(p) for p in wheel_library_paths(_site_dirs())]
    system = ctypes.util.find_library("cudnn")
    if system and SONAME in system:
        candidates.append(system)
    candidates.append(SONAME)
    return list(dict.fromkeys(candidates))


def _preload_cublaslt() -> None:
    """Load the wheels' cuBLASLt globally: cuDNN's engine sub-libraries link it, and a wheel's rpath may miss it."""
    import ctypes

    for base in _site_dirs():
        for sub in ("nvidia/cu13/lib", "nvidia/cublas/lib"):
            for name in ("libcublasLt.so.13", "libcublasLt.so.12"):
                path = Path(base) / sub / name
                if path.is_file():
                    try:
                        ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
                        return
                    except OSError:
                        continue


def _library() -> Any:
    """The loaded libcudnn.so.9 (loaded once per process); ``GpuError`` with the install command when absent."""
    lib = _LOADED.get("lib")
    if lib is not None:
        return lib
    import ctypes

    with _LOCK:
        if "lib" in _LOADED:
            return _LOADED["lib"]
        _preload_cublaslt()
        tried: list[str] = []
        for candidate in _library_candidates():
            try:
                lib = ctypes.CDLL(candidate, mode=ctypes.RTLD_GLOBAL)
                get_version = lib.cudnnGetVersion
            except (OSError, AttributeError) as exc:
                tried.append(f"{candidate}: {exc}".splitlines()[0])
                continue
            get_version.restype, get_version.argtypes = ctypes.c_size_t, []
            version = int(get_version())
            if not 90000 <= version < 100000:
                tried.append(f"{candidate} is cuDNN {decode_version(version)}")
                continue
            _LOADED.update(lib=lib, path=candidate)
            return lib
        where = "; ".join(tried[-2:]) or "nowhere to look"
        raise GpuError(f"cuDNN 9 ({SONAME}) is not available ({where}); install it: {INSTALL_HINT}")


@cache
def _signatures() -> dict[str, tuple[Any, tuple[Any, ...]]]:
    """The C signature (restype, argtypes) of every cuDNN function used here, from the cuDNN 9 headers.

    Enums are C ``int``; handles, descriptors, device pointers and host scalars ``void *``.
    """
    import ctypes

    i, v, d, size = ctypes.c_int, ctypes.c_void_p, ctypes.c_double, ctypes.c_size_t
    pi, pv, ps = ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)
    perf = ctypes.POINTER(_perf_struct())
    return {
        "cudnnGetVersion": (size, ()),
        "cudnnGetErrorString": (ctypes.c_char_p, (i,)),
        "cudnnGetLastErrorString": (None, (ctypes.POINTER(ctypes.c_char), size)),
        "cudnnCreate": (i, (pv,)),
        "cudnnDestroy": (i, (v,)),
        "cudnnSetStream": (i, (v, v)),
        "cudnnCreateTensorDescriptor": (i, (pv,)),
        "cudnnSetTensorNdDescriptor": (i, (v, i, i, pi, pi)),
        "cudnnDestroyTensorDescriptor": (i, (v,)),
        "cudnnCreateFilterDescriptor": (i, (pv,)),
        "cudnnSetFilterNdDescriptor": (i, (v, i, i, i, pi)),
        "cudnnDestroyFilterDescriptor": (i, (v,)),
        "cudnnCreateConvolutionDescriptor": (i, (pv,)),
        "cudnnSetConvolutionNdDescriptor": (i, (v, i, pi, pi, pi, i, i)),
        "cudnnSetConvolutionGroupCount": (i, (v, i)),
        "cudnnSetConvolutionMathType": (i, (v, i)),
        "cudnnDestroyConvolutionDescriptor": (i, (v,)),
        "cudnnGetConvolutionNdForwardOutputDim": (i, (v, v, v, i, pi)),
        "cudnnGetConvolutionForwardAlgorithmMaxCount": (i, (v, pi)),
        "cudnnGetConvolutionForwardAlgorithm_v7": (i, (v, v, v, v, v, i, pi, perf)),
        "cudnnFindConvolutionForwardAlgorithmEx": (i, (v, v, v, v, v, v, v, v, i, pi, perf, v, size)),
        "cudnnGetConvolutionForwardWorkspaceSize": (i, (v, v, v, v, v, i, ps)),
        "cudnnConvolutionForward": (i, (v, v, v, v, v, v, v, i, v, size, v, v, v)),
        "cudnnConvolutionBiasActivationForward": (
            i,
            (v, v, v, v, v, v, v, i, v, size, v, v, v, v, v, v, v, v),
        ),
        "cudnnGetConvolutionBackwardDataAlgorithmMaxCount": (i, (v, pi)),
        "cudnnGetConvolutionBackwardDataAlgorithm_v7": (i, (v, v, v, v, v, i, pi, perf)),
        "cudnnFindConvolutionBackwardDataAlgorithmEx": (i, (v, v, v, v, v, v, v, v, i, pi, perf, v, size)),
        "cudnnGetConvolutionBackwardDataWorkspaceSize": (i, (v, v, v, v, v, i, ps)),
        "cudnnConvolutionBackwardData": (i, (v, v, v, v, v, v, v, i, v, size, v, v, v)),
        "cudnnCreateActivationDescriptor": (i, (pv,)),
        "cudnnSetActivationDescriptor": (i, (v, i, i, d)),
        "cudnnSetActivationDescriptorSwishBeta": (i, (v, d)),
        "cudnnDestroyActivationDescriptor": (i, (v,)),
        "cudnnActivationForward": (i, (v, v, v, v, v, v, v, v)),
        "cudnnCreatePoolingDescriptor": (i, (pv,)),
        "cudnnSetPoolingNdDescriptor": (i, (v, i, i, i, pi, pi, pi)),
        "cudnnGetPoolingNdForwardOutputDim": (i, (v, v, i, pi)),
        "cudnnDestroyPoolingDescriptor": (i, (v,)),
        "cudnnPoolingForward": (i, (v, v, v, v, v, v, v, v)),
        "cudnnCreateLRNDescriptor": (i, (pv,)),
        "cudnnSetLRNDescriptor": (i, (v, ctypes.c_uint, d, d, d)),
        "cudnnDestroyLRNDescriptor": (i, (v,)),
        "cudnnLRNCrossChannelForward": (i, (v, v, i, v, v, v, v, v, v)),
        "cudnnSoftmaxForward": (i, (v, i, i, v, v, v, v, v, v)),
        "cudnnDeriveBNTensorDescriptor": (i, (v, v, i)),
        "cudnnBatchNormalizationForwardInference": (i, (v, i, v, v, v, v, v, v, v, v, v, v, v, d)),
    }


@cache
def _perf_struct() -> Any:
    """cudnnConvolutionFwdAlgoPerf_t, which has the layout of cudnnConvolutionBwdDataAlgoPerf_t (cudnn_cnn.h)."""
    import ctypes

    class AlgoPerf(ctypes.Structure):
        _fields_ = [
            ("algo", ctypes.c_int),
            ("status", ctypes.c_int),
            ("time", ctypes.c_float),
            ("memory", ctypes.c_size_t),
            ("determinism", ctypes.c_int),
            ("mathType", ctypes.c_int),
            ("reserved", ctypes.c_int * 3),
        ]

    return AlgoPerf


def _fn(name: str, restype: Any, argtypes: Sequence[Any]) -> Any:
    """Library function ``name`` with its C signature set (ctypes would pass Python ints as C ints otherwise)."""
    fn = _FUNCTIONS.get(name)
    if fn is None:
        try:
            fn = getattr(_library(), name)
        except AttributeError:
            raise GpuError(f"{name} is missing from {cudnn_library_path()}: not the cuDNN 9 legacy API") from None
        fn.restype, fn.argtypes = restype, list(argtypes)
        _FUNCTIONS[name] = fn
    return fn


def _function(name: str) -> Any:
    return _fn(name, *_signatures()[name])


def _error(call: str, status: int) -> LibraryCallError:
    """The error of a failed call: its status name, cudnnGetErrorString's text and cuDNN's last error message."""
    import ctypes

    text = (_function("cudnnGetErrorString")(status) or b"").decode(errors="replace")
    buffer = ctypes.create_string_buffer(512)
    try:
        _function("cudnnGetLastErrorString")(buffer, len(buffer))
        last = buffer.value.decode(errors="replace")
    except GpuError:  # a cuDNN 9 without the call: the status text is all there is
        last = ""
    detail = "; ".join(part for part in (text, " ".join(last.split())[:300]) if part)
    return LibraryCallError(call, status_name(status), detail)


def _check(call: str, *args: Any) -> None:
    status = _function(call)(*args)
    if status:
        raise _error(call, status)


def _status(call: str, *args: Any) -> int:
    """A call whose failure is an answer (this algorithm does not fit), not an error."""
    return int(_function(call)(*args))


def cudnn_version() -> str:
    """The loaded cuDNN's version, e.g. "9.10.2"."""
    return decode_version(int(_function("cudnnGetVersion")()))


def cudnn_library_path() -> str:
    """The file the loaded cuDNN came from (as mapped into this process where Linux says so)."""
    _library()
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            mapped = loaded_library_path(maps.read())
    except OSError:
        mapped = None
    return mapped or str(_LOADED["path"])


# ------------------------------------------------------------------ handle and descriptors


class CudnnHandle:
    """A cuDNN handle bound to the benchmark's private stream: every call made with it is enqueued there.

    Attributes:
        ptr: the ``cudnnHandle_t`` (``ctypes.c_void_p``).
        compute_capability: the device's (major, minor), for telling which math types use tensor cores.
    """

    def __init__(self, ctx: DeviceContext) -> None:
        import ctypes

        import cupy

        device = cupy.cuda.Device(ctx.ordinal)
        self.compute_capability = parse_compute_capability(device.compute_capability)
        self.ptr = ctypes.c_void_p()
        with device:  # a handle belongs to the device current at its creation
            _check("cudnnCreate", ctypes.byref(self.ptr))
        _check("cudnnSetStream", self.ptr, ctypes.c_void_p(ctx.stream_ptr))

    def close(self) -> None:
        if getattr(self, "ptr", None) is not None and self.ptr.value:
            _check("cudnnDestroy", self.ptr)
            self.ptr.value = None

    def __enter__(self) -> CudnnHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown or a dead context: nothing left to free
            pass


class _Descriptor:
    """A cuDNN descriptor that destroys itself when closed or collected."""

    _kind = ""  # Tensor, Filter, Convolution, Activation, Pooling, LRN

    def __init__(self) -> None:
        import ctypes

        self.ptr = ctypes.c_void_p()
        _check(f"cudnnCreate{self._kind}Descriptor", ctypes.byref(self.ptr))

    def close(self) -> None:
        if getattr(self, "ptr", None) is not None and self.ptr.value:
            _check(f"cudnnDestroy{self._kind}Descriptor", self.ptr)
            self.ptr.value = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the process frees it
            pass


def _ints(values: Sequence[int]) -> Any:
    import ctypes

    return (ctypes.c_int * len(values))(*(int(x) for x in values))


class TensorDescriptor(_Descriptor):
    """A packed NCHW tensor descriptor of ``shape`` (>= 4 dimensions), or an empty one to derive into."""

    _kind = "Tensor"

    def __init__(self, shape: Sequence[int] | None = None, dtype: int = DATA_TYPE["FLOAT"]) -> None:
        super().__init__()
        if shape is not None:
            _check(
                "cudnnSetTensorNdDescriptor", self.ptr, dtype, len(shape), _ints(shape), _ints(packed_strides(shape))
            )


class FilterDescriptor(_Descriptor):
    """A filter descriptor of ``shape`` (K x C/groups x kernel...) in NCHW order."""

    _kind = "Filter"

    def __init__(self, shape: Sequence[int], dtype: int) -> None:
        super().__init__()
        _check("cudnnSetFilterNdDescriptor", self.ptr, dtype, TENSOR_FORMAT["NCHW"], len(shape), _ints(shape))


class ConvolutionDescriptor(_Descriptor):
    """A cross-correlation (ONNX's Conv) descriptor with its group count and math type."""

    _kind = "Convolution"

    def __init__(self, args: ConvDescriptorArgs, compute: int, math: int) -> None:
        super().__init__()
        n = len(args.pads)
        _check(
            "cudnnSetConvolutionNdDescriptor",
            self.ptr,
            n,
            _ints(args.pads),
            _ints(args.strides),
            _ints(args.dilations),
            CONVOLUTION_MODE["CROSS_CORRELATION"],
            compute,
        )
        _check("cudnnSetConvolutionGroupCount", self.ptr, args.groups)
        _check("cudnnSetConvolutionMathType", self.ptr, math)
        self.math = math


class ActivationDescriptor(_Descriptor):
    """An activation: ``coef`` as ``activation_coef`` gives it, ``swish_beta`` swish's beta."""

    _kind = "Activation"

    def __init__(self, mode: int, coef: float = 0.0, swish_beta: float | None = None) -> None:
        super().__init__()
        _check("cudnnSetActivationDescriptor", self.ptr, mode, NAN_PROPAGATION["PROPAGATE_NAN"], float(coef))
        if swish_beta is not None:
            _check("cudnnSetActivationDescriptorSwishBeta", self.ptr, float(swish_beta))


class PoolingDescriptor(_Descriptor):
    _kind = "Pooling"

    def __init__(self, mode: int, window: Sequence[int], pads: Sequence[int], strides: Sequence[int]) -> None:
        super().__init__()
        _check(
            "cudnnSetPoolingNdDescriptor",
            self.ptr,
            mode,
            NAN_PROPAGATION["PROPAGATE_NAN"],
            len(window),
            _ints(window),
            _ints(pads),
            _ints(strides),
        )


class LrnDescriptor(_Descriptor):
    """LRN parameters; cuDNN divides ``alpha`` by the window itself, as ONNX's formula does."""

    _kind = "LRN"

    def __init__(self, size: int, alpha: float, beta: float, k: float) -> None:
        super().__init__()
        _check("cudnnSetLRNDescriptor", self.ptr, int(size), float(alpha), float(beta), float(k))


# ------------------------------------------------------------------ launching


class _Call:
    """One cuDNN call with every argument bound: what a candidate's ``launch`` runs.

    ``owners`` are the descriptors, device buffers and host scalars the arguments point
    into; holding them here keeps them alive exactly as long as the candidate. Calling
    enqueues the work on the handle's stream and returns without synchronising.
    """

    __slots__ = ("_args", "_fn", "_name", "_owners")

    def __init__(self, name: str, args: Sequence[Any], owners: Sequence[Any]) -> None:
        self._name, self._fn, self._args, self._owners = name, _function(name), tuple(args), tuple(owners)

    def __call__(self) -> None:
        status = self._fn(*self._args)
        if status:
            raise _error(self._name, status)


def _probe(call: _Call) -> LibraryCallError | None:
    """Run a candidate once at build time: the error cuDNN answers with, or None when it runs."""
    try:
        call()
    except LibraryCallError as exc:
        return exc
    return None


def _scalars(dtype: str) -> tuple[Any, Any]:
    """Host alpha = 1 and beta = 0 in the type cuDNN reads them as (float, or double for double data)."""
    import ctypes

    kind = ctypes.c_double if scaling_type(dtype) == "double" else ctypes.c_float
    return kind(1.0), kind(0.0)


def _byref(value: Any) -> Any:
    import ctypes

    return ctypes.byref(value)


def _device_ptr(array: Any) -> int:
    return int(array.data.ptr)


def _buffers(ctx: DeviceContext, given: Tensors, wanted: Mapping[str, tuple[Shape, str, str]]) -> dict[str, Any]:
    """Device arrays by role: the caller's where given (to check results), else new ones (shape, dtype, fill)."""
    given = given or {}
    unknown = set(given) - set(wanted)
    if unknown:
        raise ValueError(f"unknown tensors {sorted(unknown)}; this call takes {sorted(wanted)}")
    return {role: given[role] if role in given else ctx.array(*spec) for role, spec in wanted.items()}


def _single_candidates(ctx: DeviceContext, calls: Sequence[tuple[str, _Call]], what: str) -> list[Candidate]:
    """Candidates of a layer with one (or two) cuDNN calls: each probed, the first that runs is the default."""
    built: list[Candidate] = []
    refused: list[str] = []
    for name, call in calls:
        error = _probe(call)
        if error is not None:
            if not unsupported_status(str(error.status)):
                raise error
            refused.append(f"{name}: {error.status}")
            continue
        built.append(Candidate(SOURCE, name, call, default=not built))
    ctx.synchronize()
    if not built:
        raise UnsupportedLayer(f"cuDNN cannot run this {what} ({'; '.join(refused)})")
    return built


def _free_device_bytes() -> int:
    import cupy

    free, _total = cupy.cuda.runtime.memGetInfo()
    return int(free)


# ------------------------------------------------------------------ convolutions


@dataclass(slots=True, kw_only=True)
class ConvDescriptors:
    """The descriptors of one convolution, checked against cuDNN's own shape rule: host-only, no GPU needed.

    For a ConvTranspose (backward-data) ``x_desc`` describes cuDNN's dy and ``y_desc`` its dx.
    """

    p: ConvParams
    args: ConvDescriptorArgs
    requested_math: int
    x_desc: TensorDescriptor
    y_desc: TensorDescriptor
    w_desc: FilterDescriptor
    convs: dict[int, ConvolutionDescriptor]
    bias_desc: TensorDescriptor | None = None  # the fused call's
    activation: ActivationDescriptor | None = None  # the fused call's

    def conv(self, math: int) -> ConvolutionDescriptor:
        """The convolution descriptor with math type ``math`` (the type selects kernels, so one each)."""
        if math not in self.convs:
            self.convs[math] = ConvolutionDescriptor(self.args, compute_type(self.p.dtype), math)
        return self.convs[math]


def conv_descriptors(p: ConvParams, tensor_cores: bool, fused: bool = False) -> ConvDescriptors:
    """The tensor, filter and convolution descriptors of ``p`` (and the fused call's bias and activation).

    cuDNN's shape rule (``cudnnGetConvolutionNdForwardOutputDim``) must give the layer's
    output (forward: x -> y; backward-data: the forward convolution of dx = y gives dy = x).

    Raises:
        UnsupportedLayer: ``params_check``'s reason, or cuDNN computes another output shape.
        LibraryCallError: cuDNN rejects a descriptor.
    """
    reason = params_check(p)
    if reason:
        raise UnsupportedLayer(reason)
    args = conv_descriptor_args(p)
    dt = data_type(p.dtype)
    d = ConvDescriptors(
        p=p,
        args=args,
        requested_math=math_type(p.dtype, tensor_cores),
        x_desc=TensorDescriptor(args.x, dt),
        y_desc=TensorDescriptor(args.y, dt),
        w_desc=FilterDescriptor(args.w, dt),
        convs={},
    )
    source, target = (d.y_desc, args.x) if p.transpose else (d.x_desc, args.y)
    dims = _ints([0] * len(target))
    conv = d.conv(d.requested_math)
    _check("cudnnGetConvolutionNdForwardOutputDim", conv.ptr, source.ptr, d.w_desc.ptr, len(target), dims)
    if tuple(dims) != target:
        raise UnsupportedLayer(f"cuDNN computes the convolution as {tuple(dims)}, the layer has {target}")
    if fused:
        d.bias_desc = TensorDescriptor(args.bias, dt)
        mode = ACTIVATION_MODE[_ACTIVATIONS[p.activation or "identity"]]
        d.activation = ActivationDescriptor(mode, activation_coef(p.activation or "identity", p.activation_coef))
    return d


@dataclass(slots=True, kw_only=True)
class _ConvSetup(ConvDescriptors):
    """The descriptors, handle and buffers one convolution's candidates share."""

    handle: CudnnHandle
    buffers: dict[str, Any]
    one: Any
    zero: Any

    def ptr(self, role: str) -> int:
        return _device_ptr(self.buffers[role])

    def owners(self, conv: ConvolutionDescriptor) -> tuple[Any, ...]:
        extra = tuple(d for d in (self.bias_desc, self.activation) if d is not None)
        return (self.handle, conv, self.x_desc, self.y_desc, self.w_desc, self.buffers, self.one, self.zero, *extra)


def _conv_setup(
    ctx: DeviceContext, handle: CudnnHandle, p: ConvParams, tensor_cores: bool, fused: bool, tensors: Tensors
) -> _ConvSetup:
    d = conv_descriptors(p, tensor_cores, fused)
    wanted = {"x": (p.x, p.dtype, "random"), "w": (p.w, p.dtype, "random"), "y": (p.y, p.dtype, "zeros")}
    if fused:
        wanted["bias"] = ((p.y[1],), p.dtype, "random")
    one, zero = _scalars(p.dtype)
    shared = {f.name: getattr(d, f.name) for f in fields(ConvDescriptors)}
    return _ConvSetup(**shared, handle=handle, buffers=_buffers(ctx, tensors, wanted), one=one, zero=zero)


@dataclass(frozen=True, slots=True)
class _ConvKind:
    """What differs between forward, fused and backward-data convolution candidates."""

    label: str
    prefix: str  # of candidate names
    algo_names: Mapping[int, str]
    count: int
    max_count_call: str
    heuristic_call: str
    workspace_call: str
    find_call: str | None
    descriptors: Callable[[_ConvSetup, ConvolutionDescriptor], tuple[Any, ...]]  # descriptor args of the queries
    run: Callable[[_ConvSetup, ConvolutionDescriptor, int, int, int], _Call]  # (setup, conv, algo, ws ptr, ws bytes)
    find_args: Callable[[_ConvSetup, ConvolutionDescriptor], tuple[Any, ...]] | None = None


def _fwd_descs(s: _ConvSetup, conv: ConvolutionDescriptor) -> tuple[Any, ...]:
    return (s.x_desc.ptr, s.w_desc.ptr, conv.ptr, s.y_desc.ptr)


def _bwd_descs(s: _ConvSetup, conv: ConvolutionDescriptor) -> tuple[Any, ...]:
    return (s.w_desc.ptr, s.x_desc.ptr, conv.ptr, s.y_desc.ptr)


def _fwd_run(s: _ConvSetup, conv: ConvolutionDescriptor, algo: int, ws: int, ws_bytes: int) -> _Call:
    args = (s.handle.ptr, _byref(s.one), s.x_desc.ptr, s.ptr("x"), s.w_desc.ptr, s.ptr("w"), conv.ptr, algo, ws)
    return _Call("cudnnConvolutionForward", (*args, ws_bytes, _byref(s.zero), s.y_desc.ptr, s.ptr("y")), s.owners(conv))


def _fused_run(s: _ConvSetup, conv: ConvolutionDescriptor, algo: int, ws: int, ws_bytes: int) -> _Call:
    """y = act(1 * conv(x) + 0 * z + bias) with z = y: cuDNN reads z even at alpha2 = 0, so it must be a real tensor."""
    assert s.bias_desc is not None and s.activation is not None
    args = (s.handle.ptr, _byref(s.one), s.x_desc.ptr, s.ptr("x"), s.w_desc.ptr, s.ptr("w"), conv.ptr, algo, ws)
    tail = (s.bias_desc.ptr, s.ptr("bias"), s.activation.ptr, s.y_desc.ptr, s.ptr("y"))
    return _Call(
        "cudnnConvolutionBiasActivationForward",
        (*args, ws_bytes, _byref(s.zero), s.y_desc.ptr, s.ptr("y"), *tail),
        s.owners(conv),
    )


def _bwd_run(s: _ConvSetup, conv: ConvolutionDescriptor, algo: int, ws: int, ws_bytes: int) -> _Call:
    args = (s.handle.ptr, _byref(s.one), s.w_desc.ptr, s.ptr("w"), s.x_desc.ptr, s.ptr("x"), conv.ptr, algo, ws)
    return _Call(
        "cudnnConvolutionBackwardData", (*args, ws_bytes, _byref(s.zero), s.y_desc.ptr, s.ptr("y")), s.owners(conv)
    )


def _fwd_find_args(s: _ConvSetup, conv: ConvolutionDescriptor) -> tuple[Any, ...]:
    return (s.x_desc.ptr, s.ptr("x"), s.w_desc.ptr, s.ptr("w"), conv.ptr, s.y_desc.ptr, s.ptr("y"))


def _bwd_find_args(s: _ConvSetup, conv: ConvolutionDescriptor) -> tuple[Any, ...]:
    return (s.w_desc.ptr, s.ptr("w"), s.x_desc.ptr, s.ptr("x"), conv.ptr, s.y_desc.ptr, s.ptr("y"))


_FORWARD = _ConvKind(
    label="forward convolution",
    prefix="",
    algo_names=FWD_ALGO_NAMES,
    count=FWD_ALGO_COUNT,
    max_count_call="cudnnGetConvolutionForwardAlgorithmMaxCount",
    heuristic_call="cudnnGetConvolutionForwardAlgorithm_v7",
    workspace_call="cudnnGetConvolutionForwardWorkspaceSize",
    find_call="cudnnFindConvolutionForwardAlgorithmEx",
    descriptors=_fwd_descs,
    run=_fwd_run,
    find_args=_fwd_find_args,
)
_FUSED = _ConvKind(
    label="fused convolution+bias+activation",
    prefix="fused:",
    algo_names=FWD_ALGO_NAMES,
    count=FWD_ALGO_COUNT,
    max_count_call="cudnnGetConvolutionForwardAlgorithmMaxCount",
    heuristic_call="cudnnGetConvolutionForwardAlgorithm_v7",
    workspace_call="cudnnGetConvolutionForwardWorkspaceSize",
    find_call=None,
    descriptors=_fwd_descs,
    run=_fused_run,
)
_BACKWARD_DATA = _ConvKind(
    label="backward-data convolution",
    prefix="bwd_data:",
    algo_names=BWD_DATA_ALGO_NAMES,
    count=BWD_DATA_ALGO_COUNT,
    max_count_call="cudnnGetConvolutionBackwardDataAlgorithmMaxCount",
    heuristic_call="cudnnGetConvolutionBackwardDataAlgorithm_v7",
    workspace_call="cudnnGetConvolutionBackwardDataWorkspaceSize",
    find_call="cudnnFindConvolutionBackwardDataAlgorithmEx",
    descriptors=_bwd_descs,
    run=_bwd_run,
    find_args=_bwd_find_args,
)


def _perf_entries(
    kind: _ConvKind, s: _ConvSetup, call: str, args: tuple[Any, ...], tail: tuple[Any, ...] = ()
) -> list[tuple[int, int]]:
    """Run a heuristic or Find call; its SUCCESS entries as (algo, mathType), best first."""
    import ctypes

    max_count = ctypes.c_int(0)
    _check(kind.max_count_call, s.handle.ptr, ctypes.byref(max_count))
    requested = max(max_count.value, kind.count)
    results = (_perf_struct() * requested)()
    returned = ctypes.c_int(0)
    _check(call, s.handle.ptr, *args, requested, ctypes.byref(returned), results, *tail)
    return [(r.algo, r.mathType) for r in results[: returned.value] if r.status == 0]


def _conv_family(
    ctx: DeviceContext, handle: CudnnHandle, p: ConvParams, tensor_cores: bool, kind: _ConvKind, tensors: Tensors
) -> list[Candidate]:
    """Every algorithm of one convolution call that runs this geometry, heuristic order first.

    The heuristic (``*_v7``) ranks the (algorithm, math type) pairs a framework would try,
    and the first that runs is the default; every other algorithm is tried with the
    requested math type. An algorithm whose workspace query fails does not support this
    geometry; one needing more than 90% of free memory is left out (ONNX Runtime's bound
    for its search workspace); one cuDNN refuses when probed is left out too.
    """
    import ctypes

    setup = _conv_setup(ctx, handle, p, tensor_cores, kind is _FUSED, tensors)
    base = setup.conv(setup.requested_math)
    try:
        heuristic = _perf_entries(kind, setup, kind.heuristic_call, kind.descriptors(setup, base))
    except LibraryCallError as exc:
        if unsupported_status(str(exc.status)):
            raise UnsupportedLayer(f"cuDNN's {kind.label} heuristic rejects this layer: {exc.status}") from exc
        raise
    cap = int(0.9 * _free_device_bytes())
    sized: list[tuple[int, int, int | None, int]] = []
    skipped: list[str] = []
    for algo, mtype, rank in algorithm_order(heuristic, kind.count, setup.requested_math):
        name = candidate_name(kind.algo_names[algo], mtype, kind.prefix)
        size = ctypes.c_size_t(0)
        descriptors = kind.descriptors(setup, setup.conv(mtype))
        status = _status(kind.workspace_call, handle.ptr, *descriptors, algo, _byref(size))
        if status:
            skipped.append(f"{name}: {status_name(status)}")
        elif size.value > cap:
            skipped.append(f"{name}: needs {size.value} bytes of workspace, {cap} can be had")
        else:
            sized.append((algo, mtype, rank, int(size.value)))
    ws_bytes = max((entry[3] for entry in sized), default=0)
    ws = ctx.workspace(ws_bytes) if ws_bytes else 0
    runs: list[tuple[str, int, int | None, int, int, _Call]] = []
    for algo, mtype, rank, size in sized:
        name = candidate_name(kind.algo_names[algo], mtype, kind.prefix)
        call = kind.run(setup, setup.conv(mtype), algo, ws, size)
        error = _probe(call)
        if error is None:
            runs.append((name, algo, rank, mtype, size, call))
        else:
            skipped.append(f"{name}: {error.status}")
    ctx.synchronize()
    for reason in skipped:
        log.debug("%s: %s left out: %s", SOURCE, kind.label, reason)
    if not runs:
        more = f" (+{len(skipped) - 1} more)" if len(skipped) > 1 else ""
        first = skipped[0] if skipped else "none tried"
        raise UnsupportedLayer(f"no cuDNN {kind.label} algorithm runs this layer: {first}{more}")
    find_rank = _find_ranks(kind, setup, base, ws, ws_bytes, runs)
    ranked = [rank for _, _, rank, _, _, _ in runs if rank is not None]
    default_rank = min(ranked) if ranked else None
    override = os.environ.get("NVIDIA_TF32_OVERRIDE")
    candidates = []
    for name, _algo, rank, mtype, size, call in runs:
        notes = [f"math={MATH_TYPE_NAMES.get(mtype, mtype)}"]
        if name in find_rank:
            notes += ["find_ex_pick"] if find_rank[name] == 0 else []
            notes.append(f"find_ex_rank={find_rank[name]}")
        candidates.append(
            Candidate(
                source=SOURCE,
                name=name,
                launch=call,
                workspace_bytes=size,
                tensor_cores=tensor_core_use(mtype, p.dtype, handle.compute_capability, override),
                heuristic_rank=rank,
                default=rank is not None and rank == default_rank,
                notes=tuple(notes),
            )
        )
    return candidates


def _find_ranks(
    kind: _ConvKind,
    s: _ConvSetup,
    conv: ConvolutionDescriptor,
    ws: int,
    ws_bytes: int,
    runs: Sequence[tuple[str, int, int | None, int, int, _Call]],
) -> dict[str, int]:
    """Candidate name -> position in cuDNN's Find*Ex timing (0 is ONNX Runtime's pick), or {} without a Find call.

    Find*Ex runs every algorithm once, allocates and synchronises: it is called here, once,
    with the requested math type and the largest workspace of the candidates (ONNX
    Runtime's ``cudnn_conv_use_max_workspace``), never in a launch. An entry whose math type
    no candidate has is matched to its algorithm's candidate.
    """
    if kind.find_call is None or kind.find_args is None:
        return {}
    try:
        found = _perf_entries(kind, s, kind.find_call, kind.find_args(s, conv), (ws, ws_bytes))
    except LibraryCallError as exc:
        log.warning("%s: %s failed; no find_ex pick recorded: %s", SOURCE, kind.find_call, exc)
        return {}
    return find_ranks(found, [(name, algo) for name, algo, *_ in runs], kind.algo_names, kind.prefix)


def conv_candidates(
    ctx: DeviceContext, handle: CudnnHandle, p: ConvParams, tensor_cores: bool, *, tensors: Tensors = None
) -> list[Candidate]:
    """Every cuDNN algorithm of a Conv (cudnnConvolutionForward) or ConvTranspose (cudnnConvolutionBackwardData).

    The bias of a Conv, if any, is not applied here (``conv_bias_activation_candidates``
    measures the fused call). Candidates are named by the algorithm enum (``IMPLICIT_GEMM``,
    ``bwd_data:ALGO_1``, ``/tensor_op`` when the math type is a tensor-op one), ranked by the
    ``*_v7`` heuristic with ``default`` on its first entry that runs (algorithms it does not
    name have no rank; with no ranked candidate none is the default and
    ``candidate.mark_default`` chooses), and the algorithm ``Find*Ex`` picks (ONNX Runtime's
    default search with cuDNN 8) carries the note ``find_ex_pick``; every candidate notes
    its math type and Find rank.

    Args:
        ctx: the device, its stream and buffers.
        handle: a ``CudnnHandle`` on ``ctx``'s stream.
        p: the convolution; ``p.transpose`` selects backward-data.
        tensor_cores: allow tensor cores (TF32 for float data) or restrict to FMA kernels.
        tensors: device arrays to use for ``x``, ``w``, ``y`` instead of new ones (to check results).

    Raises:
        UnsupportedLayer: the legacy API cannot run this geometry, or no algorithm does.
    """
    return _conv_family(ctx, handle, p, tensor_cores, _BACKWARD_DATA if p.transpose else _FORWARD, tensors)


def conv_bias_activation_candidates(
    ctx: DeviceContext, handle: CudnnHandle, p: ConvParams, tensor_cores: bool, *, tensors: Tensors = None
) -> list[Candidate]:
    """Every algorithm of ``cudnnConvolutionBiasActivationForward``: y = act(conv(x) + bias), names ``fused:...``.

    alpha1 = 1 and alpha2 = 0 with z = y; the bias is a 1 x K x 1 x 1 tensor of the data
    type; a missing activation is IDENTITY, which cuDNN documents for
    IMPLICIT_PRECOMP_GEMM only. Sigmoid, tanh, clipped ReLU and ELU are accepted by the API
    for some algorithms: each algorithm is probed and those cuDNN refuses are left out. The
    heuristic ranking is the forward convolution's (the fused call has none of its own).

    Args:
        tensors: device arrays for ``x``, ``w``, ``y``, ``bias`` (shape (K,)) instead of new ones.
    """
    if p.transpose:
        raise UnsupportedLayer("ConvTranspose has no fused bias+activation call in the legacy API")
    return _conv_family(ctx, handle, p, tensor_cores, _FUSED, tensors)


# ------------------------------------------------------------------ single-algorithm layers


def pooling_descriptors(p: PoolParams) -> tuple[PoolingDescriptor, TensorDescriptor, TensorDescriptor]:
    """(pooling, x, y) descriptors, cuDNN's pooled shape checked against the layer's (host-only).

    Raises:
        UnsupportedLayer: ``pooling_check``'s reason, or cuDNN pools to another shape.
    """
    reason = pooling_check(p)
    if reason:
        raise UnsupportedLayer(reason)
    args = pooling_descriptor_args(p)
    dt = data_type(p.dtype)
    pool = PoolingDescriptor(POOLING_MODE[_POOL_MODES[p.mode]], args.window, args.pads, args.strides)
    x_desc, y_desc = TensorDescriptor(args.x, dt), TensorDescriptor(args.y, dt)
    dims = _ints([0] * len(args.y))
    _check("cudnnGetPoolingNdForwardOutputDim", pool.ptr, x_desc.ptr, len(args.y), dims)
    if tuple(dims) != args.y:
        raise UnsupportedLayer(f"cuDNN pools x {args.x} to {tuple(dims)}, the layer has {args.y}")
    return pool, x_desc, y_desc


def lrn_descriptors(p: LrnParams) -> tuple[LrnDescriptor, TensorDescriptor, TensorDescriptor]:
    """(LRN, x, y) descriptors of a cross-channel LRN (host-only)."""
    reason = lrn_check(p)
    if reason:
        raise UnsupportedLayer(reason)
    shape, dt = cudnn_shape(p.x), data_type(p.dtype)
    return LrnDescriptor(p.size, p.alpha, p.beta, p.k), TensorDescriptor(shape, dt), TensorDescriptor(shape, dt)


def softmax_descriptor(p: SoftmaxParams) -> TensorDescriptor:
    """The (outer, axis, inner, 1) tensor descriptor softmax runs on in CHANNEL mode (host-only)."""
    reason = softmax_check(p)
    if reason:
        raise UnsupportedLayer(reason)
    return TensorDescriptor(p.x, data_type(p.dtype))


def activation_descriptors(p: ActivationParams) -> tuple[ActivationDescriptor, TensorDescriptor]:
    """(activation, 4-d tensor) descriptors (host-only); swish's beta is ``p.coef``, 1 when 0."""
    reason = activation_check(p)
    if reason:
        raise UnsupportedLayer(reason)
    mode = ACTIVATION_MODE[_ACTIVATIONS[p.kind]]
    swish_beta = (p.coef or 1.0) if p.kind == "swish" else None
    activation = ActivationDescriptor(mode, activation_coef(p.kind, p.coef), swish_beta)
    return activation, TensorDescriptor(four_d(p.x), data_type(p.dtype))


def batchnorm_descriptors(p: BatchNormParams) -> tuple[TensorDescriptor, TensorDescriptor, TensorDescriptor]:
    """(x, y, derived 1 x C x 1 x 1 parameter) descriptors of SPATIAL inference batch normalisation (host-only)."""
    reason = batchnorm_check(p)
    if reason:
        raise UnsupportedLayer(reason)
    shape, dt = batchnorm_shape(p.x), data_type(p.dtype)
    x_desc, y_desc, bn_desc = TensorDescriptor(shape, dt), TensorDescriptor(shape, dt), TensorDescriptor()
    _check("cudnnDeriveBNTensorDescriptor", bn_desc.ptr, x_desc.ptr, BATCHNORM_MODE["SPATIAL"])
    return x_desc, y_desc, bn_desc


def pooling_candidates(
    ctx: DeviceContext, handle: CudnnHandle, p: PoolParams, *, tensors: Tensors = None
) -> list[Candidate]:
    """``cudnnPoolingForward`` of a max or average pool (NaN propagated); 1-D pools run as 2-D."""
    pool, x_desc, y_desc = pooling_descriptors(p)
    mode = _POOL_MODES[p.mode]
    buffers = _buffers(ctx, tensors, {"x": (p.x, p.dtype, "random"), "y": (p.y, p.dtype, "zeros")})
    one, zero = _scalars(p.dtype)
    xp, yp = _device_ptr(buffers["x"]), _device_ptr(buffers["y"])
    call = _Call(
        "cudnnPoolingForward",
        (handle.ptr, pool.ptr, _byref(one), x_desc.ptr, xp, _byref(zero), y_desc.ptr, yp),
        (handle, pool, x_desc, y_desc, buffers, one, zero),
    )
    return _single_candidates(ctx, [(mode, call)], "pooling")


def lrn_candidates(
    ctx: DeviceContext, handle: CudnnHandle, p: LrnParams, *, tensors: Tensors = None
) -> list[Candidate]:
    """``cudnnLRNCrossChannelForward`` (CROSS_CHANNEL_DIM1) with ONNX's size, alpha, beta and bias."""
    lrn, x_desc, y_desc = lrn_descriptors(p)
    buffers = _buffers(ctx, tensors, {"x": (p.x, p.dtype, "random"), "y": (p.x, p.dtype, "zeros")})
    one, zero = _scalars(p.dtype)
    xp, yp = _device_ptr(buffers["x"]), _device_ptr(buffers["y"])
    mode = LRN_MODE["CROSS_CHANNEL_DIM1"]
    call = _Call(
        "cudnnLRNCrossChannelForward",
        (handle.ptr, lrn.ptr, mode, _byref(one), x_desc.ptr, xp, _byref(zero), y_desc.ptr, yp),
        (handle, lrn, x_desc, y_desc, buffers, one, zero),
    )
    return _single_candidates(ctx, [("CROSS_CHANNEL_DIM1", call)], "LRN")


def softmax_candidates(
    ctx: DeviceContext, handle: CudnnHandle, p: SoftmaxParams, *, tensors: Tensors = None
) -> list[Candidate]:
    """``cudnnSoftmaxForward`` in CHANNEL mode on the (outer, dim, inner, 1) view.

    Softmax runs ACCURATE (max-subtracted, what frameworks use; the default) and FAST;
    LogSoftmax runs LOG.
    """
    desc = softmax_descriptor(p)
    buffers = _buffers(ctx, tensors, {"x": (p.x, p.dtype, "random"), "y": (p.x, p.dtype, "zeros")})
    one, zero = _scalars(p.dtype)
    xp, yp = _device_ptr(buffers["x"]), _device_ptr(buffers["y"])
    algorithms = ("LOG",) if p.log else ("ACCURATE", "FAST")
    channel = SOFTMAX_MODE["CHANNEL"]
    calls = [
        (
            f"{algo}/CHANNEL",
            _Call(
                "cudnnSoftmaxForward",
                (handle.ptr, SOFTMAX_ALGORITHM[algo], channel, _byref(one), desc.ptr, xp, _byref(zero), desc.ptr, yp),
                (handle, desc, buffers, one, zero),
            ),
        )
        for algo in algorithms
    ]
    return _single_candidates(ctx, calls, "softmax")


def activation_candidates(
    ctx: DeviceContext, handle: CudnnHandle, p: ActivationParams, *, tensors: Tensors = None
) -> list[Candidate]:
    """``cudnnActivationForward``: ``p.coef`` is clipped ReLU's ceiling or ELU's alpha (swish's beta, 1 when 0)."""
    activation, desc = activation_descriptors(p)
    mode = _ACTIVATIONS[p.kind]
    buffers = _buffers(ctx, tensors, {"x": (p.x, p.dtype, "random"), "y": (p.x, p.dtype, "zeros")})
    one, zero = _scalars(p.dtype)
    xp, yp = _device_ptr(buffers["x"]), _device_ptr(buffers["y"])
    call = _Call(
        "cudnnActivationForward",
        (handle.ptr, activation.ptr, _byref(one), desc.ptr, xp, _byref(zero), desc.ptr, yp),
        (handle, activation, desc, buffers, one, zero),
    )
    return _single_candidates(ctx, [(mode, call)], "activation")


def batchnorm_candidates(
    ctx: DeviceContext, handle: CudnnHandle, p: BatchNormParams, *, tensors: Tensors = None
) -> list[Candidate]:
    """``cudnnBatchNormalizationForwardInference`` in SPATIAL mode (one scale/bias/mean/variance per channel).

    The parameter tensor is 1 x C x 1 x 1 as ``cudnnDeriveBNTensorDescriptor`` derives it:
    float for float, half and bfloat16 data, double for double. Variances are ones (any
    non-negative value runs the same kernel).

    Args:
        tensors: device arrays for ``x``, ``y``, ``scale``, ``bias``, ``mean``, ``var`` instead of new ones.
    """
    x_desc, y_desc, bn_desc = batchnorm_descriptors(p)
    spatial = BATCHNORM_MODE["SPATIAL"]
    param = ((p.x[1],), "float64" if p.dtype == "float64" else "float32")
    wanted = {"x": (p.x, p.dtype, "random"), "y": (p.x, p.dtype, "zeros")}
    wanted |= {"scale": (*param, "random"), "bias": (*param, "random"), "mean": (*param, "random")}
    wanted["var"] = (*param, "ones")
    buffers = _buffers(ctx, tensors, wanted)
    one, zero = _scalars(p.dtype)
    ptr = {role: _device_ptr(array) for role, array in buffers.items()}
    call = _Call(
        "cudnnBatchNormalizationForwardInference",
        (
            handle.ptr,
            spatial,
            _byref(one),
            _byref(zero),
            x_desc.ptr,
            ptr["x"],
            y_desc.ptr,
            ptr["y"],
            bn_desc.ptr,
            ptr["scale"],
            ptr["bias"],
            ptr["mean"],
            ptr["var"],
            float(p.epsilon),
        ),
        (handle, x_desc, y_desc, bn_desc, buffers, one, zero),
    )
    return _single_candidates(ctx, [("SPATIAL", call)], "batch normalisation")
