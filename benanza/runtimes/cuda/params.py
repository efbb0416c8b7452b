"""What a layer asks of the GPU libraries: call parameters derived from its network node.

Pure and importable without any GPU library. A node of a ``Network`` (op type, attributes
normalised by the model processor, input and output shapes) becomes one frozen parameter
value per library call, or ``Unsupported`` with the reason, which the runtime stores as a
skipped outcome. One derivation per op type, registered in ``PARAMS``; ``fused_conv`` reads
the conv+bias+activation pattern of an execution group.

Layouts are NCHW (ONNX's); every shape is the full tensor shape. ``dtype`` is the data
type of the benchmark (the spec's, or the precision the runtime variant asks for).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from benanza.model.dtypes import itemsize
from benanza.model.network import InputRef, Network, NetworkNode, NetworkTensor, RefKind

Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Unsupported:
    """A layer the GPU runtime cannot run as asked; ``reason`` is stored with the skip."""

    reason: str


@dataclass(frozen=True, slots=True)
class ConvParams:
    """Convolution forward (or ConvTranspose as cuDNN's backward-data), optionally fused."""

    x: Shape  # N, C, *spatial
    w: Shape  # K, C/groups, *kernel (ConvTranspose: C, K/groups, *kernel)
    y: Shape
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    groups: int
    dtype: str
    # a per-channel bias (the Conv's own, or a folded BatchNormalization); the runtime adds it
    # in the fused kernel of a group only: a Conv layer alone is measured as the convolution
    bias: bool = False
    activation: str | None = None  # fused activation: relu, sigmoid, tanh, clipped_relu, elu, identity
    activation_coef: float = 0.0  # clipped_relu's ceiling, elu's alpha
    transpose: bool = False

    @property
    def symmetric(self) -> bool:
        return self.pads_begin == self.pads_end

    @property
    def fused(self) -> bool:
        return self.bias or self.activation is not None

    @property
    def flops(self) -> int:
        """Multiply-adds as 2 FLOPs: 2 * output (input for transpose) elements * C/groups * kernel."""
        kernel = math.prod(self.w[2:])
        per_out = self.w[1] * kernel
        return 2 * math.prod(self.x if self.transpose else self.y) * per_out


@dataclass(frozen=True, slots=True)
class GemmParams:
    """``batch`` products of (m x k) and (k x n) matrices, row-major as ONNX stores them."""

    batch: int
    m: int
    n: int
    k: int
    trans_a: bool
    trans_b: bool
    dtype: str
    alpha: float = 1.0
    beta: float = 0.0  # Gemm's C (broadcast bias) when non-zero
    bias: bool = False
    a_batched: bool = True  # False: one A shared by every product (a weight in MatMul)
    b_batched: bool = True

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.n * self.k


@dataclass(frozen=True, slots=True)
class PoolParams:
    mode: str  # max, avg_include_pad, avg_exclude_pad
    x: Shape
    y: Shape
    window: tuple[int, ...]
    pads: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str


@dataclass(frozen=True, slots=True)
class LrnParams:
    x: Shape
    size: int
    alpha: float
    beta: float
    k: float
    dtype: str


@dataclass(frozen=True, slots=True)
class SoftmaxParams:
    """Softmax over ``dim`` of an (outer, dim, inner) view: cuDNN's channel mode on (outer, dim, inner, 1)."""

    outer: int
    dim: int
    inner: int
    log: bool
    dtype: str

    @property
    def x(self) -> Shape:
        return (self.outer, self.dim, self.inner, 1)


@dataclass(frozen=True, slots=True)
class BatchNormParams:
    """Inference batch normalisation, one scale/shift/mean/variance per channel (spatial mode)."""

    x: Shape
    epsilon: float
    dtype: str


@dataclass(frozen=True, slots=True)
class ActivationParams:
    kind: str  # relu, sigmoid, tanh, clipped_relu, elu, swish, identity
    x: Shape
    dtype: str
    coef: float = 0.0


@dataclass(frozen=True, slots=True)
class ElementwiseParams:
    """An element-wise op with broadcasting, run as the kernel frameworks use (CuPy's)."""

    op: str  # the ONNX op type
    inputs: tuple[Shape, ...]
    y: Shape
    dtype: str
    attributes: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class DataMovementParams:
    """Concat, Transpose, Slice, Pad, Gather, ... as CuPy kernels; views need no kernel at all."""

    op: str
    inputs: tuple[Shape, ...]
    y: Shape
    dtype: str
    attributes: tuple[tuple[str, Any], ...] = ()
    view: bool = False  # Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout: metadata only

    @property
    def bytes_moved(self) -> int:
        if self.view:
            return 0
        return (sum(math.prod(s) for s in self.inputs) + math.prod(self.y)) * itemsize(self.dtype)


@dataclass(frozen=True, slots=True)
class ReductionParams:
    """ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd of ``x`` over ``axes``, run as the one
    reduction kernel frameworks launch for it (CuPy's)."""

    op: str
    x: Shape
    axes: tuple[int, ...]  # non-negative, ascending; every axis of ``x`` when the layer reduces all
    keepdims: bool
    y: Shape
    dtype: str
    select_last_index: bool = False  # ArgMax/ArgMin: the last of equal values, not the first


@dataclass(frozen=True, slots=True)
class NormalizationParams:
    """A row normalisation: ``x`` seen as ``rows`` rows of ``cols`` values, each row normalised and
    scaled (and shifted, with ``bias``) by one kernel.

    LayerNormalization and RMSNormalization: the axes from ``axis`` on are a row, scale and bias one
    value a column. InstanceNormalization (``axis`` 2): a row is one sample's channel, scale and bias
    one value a channel. GroupNormalization (``groups``): a row is one sample's group of channels;
    scale and bias one value a group (opset 18) or a channel (``per_channel``, opset 21). ONNX
    Runtime's SkipLayerNormalization and SkipSimplifiedLayerNormalization: a row is ``x + skip``
    (``skip`` repeated over ``x``'s rows where it has fewer) plus a column's ``pre_bias``, and
    ``sum_out`` writes that sum too."""

    op: str
    x: Shape
    axis: int  # non-negative
    epsilon: float
    bias: bool
    dtype: str
    groups: int = 0  # GroupNormalization's
    per_channel: bool = False  # GroupNormalization-21: scale and bias per channel, not per group
    skip: Shape = ()  # SkipLayerNormalization's second input; () for none
    pre_bias: bool = False
    sum_out: bool = False

    @property
    def rms(self) -> bool:
        """Divided by the root mean square, not centred first."""
        return self.op in RMS_NORMALIZATIONS

    @property
    def skip_rows(self) -> int:
        return math.prod(self.skip) // self.cols if self.skip else 0

    @property
    def rows(self) -> int:
        if self.groups:
            return self.x[0] * self.groups
        return math.prod(self.x[: self.axis])

    @property
    def cols(self) -> int:
        if self.groups:
            return math.prod(self.x[1:]) // self.groups
        return math.prod(self.x[self.axis :])

    @property
    def affine(self) -> tuple[int, int, int]:
        """``(P, Q, R)``: value ``i`` of row ``r`` takes scale and bias ``(r % P) * Q + i // R``."""
        if self.op == "InstanceNormalization":
            return self.x[1], 1, self.cols
        if self.groups and self.per_channel:
            channels = self.x[1] // self.groups
            return self.groups, channels, self.cols // channels
        if self.groups:
            return self.groups, 1, self.cols
        return 1, 0, 1

    @property
    def affine_size(self) -> int:
        """How many values scale (and bias) hold."""
        p, q, r = self.affine
        return (p - 1) * q + (self.cols - 1) // r + 1


@dataclass(frozen=True, slots=True)
class BlockQuantizedGemmParams:
    """ONNX Runtime's MatMulNBits: ``a`` (``m`` rows of ``k``) times a weight of ``n`` columns stored as
    ``bits``-bit integers (``b``: ``n`` x blocks x bytes), ``block_size`` of them sharing a scale and
    a zero point (``zero_points``: packed uint8; () for none: the middle value), plus a ``bias``."""

    op: str
    a: Shape
    b: Shape
    scales: Shape
    zero_points: Shape
    bias: bool
    n: int
    k: int
    bits: int
    block_size: int
    dtype: str

    @property
    def m(self) -> int:
        return math.prod(self.a[:-1])

    @property
    def k_blocks(self) -> int:
        return self.b[1]

    @property
    def blob(self) -> int:
        """Bytes a block of a column takes."""
        return self.b[2]


# how an attention layer's Q, K and V come packed into one input ("": three inputs)
PACKINGS = {
    "": "Q, K and V: three inputs",
    "qkv_columns": "Q, K and V side by side in one (batch, seq, qkv_width) input (GroupQueryAttention's packed QKV)",
    "qkv_heads": "Q, K and V in one (batch, seq, heads, 3, dim) input (MultiHeadAttention's packed QKV)",
    "kv_heads": "K and V in one (batch, keys, heads, 2, dim) input, Q its own (MultiHeadAttention's packed KV)",
}


@dataclass(frozen=True, slots=True)
class AttentionParams:
    """Scaled dot-product attention, ``softmax(scale * Q K^T [soft-capped] + mask) V`` for each batch and query
    head; the query heads share the key/value heads in groups of ``q_heads / kv_heads`` (grouped-query
    attention: query head h reads key/value head ``h // group``).

    ``seq_major``: Q and the output are (batch, seq, heads * dim), as 3-D inputs are; else (batch, heads, seq,
    dim); ``kv_seq_major`` the same of the new K and V. A KV cache (``past`` > 0) is (batch, kv_heads, kv_len,
    dim): the new keys and values (``new_len`` = ``kv_len - past`` rows) are appended at row ``past`` and the
    query attends over all ``kv_len``. ``causal``: query i attends key j only where ``j <= past + i`` (the
    queries are the last positions; ONNX's Attention and ONNX Runtime's kernels align it so), and within
    ``window`` keys of that position where ``window`` > 0. ``mask``: an additive float mask (or a boolean one,
    True where a key is attended) of shape ``mask`` broadcast over (batch, q_heads, q_len, keys), its last axis
    possibly shorter than ``kv_len`` (the keys beyond it are masked). ``key_mask``: ONNX Runtime's
    ``key_padding_mask`` (batch, kv_len), non-zero where a key is attended. ``qkv_bias``: MultiHeadAttention's
    bias, added to Q, K and V first. ``rotary``: GroupQueryAttention's ``do_rotary``, RoPE applied to Q and the
    new K at their positions (``interleaved`` pairs or halves) with cos/sin caches of ``rotary_cache``
    (positions x rotary_dim / 2). ``projection``: ONNX Runtime's Attention, whose input (batch, q_len,
    projection) is multiplied by the QKV weights (plus ``qkv_bias``) first: Q, K and V side by side.
    ``packing``: Q, K and V (or K and V) in one input (``PACKINGS``), each read through strides. ``qk_norm``:
    GroupQueryAttention's fused Q/K normalisation (Qwen3's): each head's query and new key RMS-normalised over
    its dim and scaled by a weight of that dim, before the rotary embedding; its epsilon (0: none).
    """

    op: str
    batch: int
    q_heads: int
    kv_heads: int
    q_len: int
    kv_len: int
    head_dim: int
    v_head_dim: int
    dtype: str
    scale: float
    seq_major: bool = True
    kv_seq_major: bool = True  # the new K and V (a cross-attention's cached 4-D keys: False)
    past: int = 0
    causal: bool = False
    window: int = 0
    softcap: float = 0.0
    mask: Shape = ()
    mask_dtype: str = ""  # the mask's element type: the layer's float type, or bool
    key_mask: bool = False
    key_lengths: bool = False  # ONNX Runtime's 1-D mask (batch,): the valid keys of each sequence, the rest padding
    qkv_bias: bool = False
    rotary: bool = False
    interleaved: bool = False
    rotary_cache: Shape = ()
    projection: int = 0  # ONNX Runtime's Attention: the input's width, projected to Q, K and V by one GEMM first
    packing: str = ""  # one of PACKINGS
    qk_norm: float = 0.0  # > 0: Q and K RMS-normalised over each head's dim with this epsilon (weights (dim,) each)

    @property
    def qkv_width(self) -> int:
        """Columns of Q, K and V side by side: the projection's output."""
        return (self.q_heads + self.kv_heads) * self.head_dim + self.kv_heads * self.v_head_dim

    @property
    def new_len(self) -> int:
        return self.kv_len - self.past

    @property
    def group(self) -> int:
        return self.q_heads // self.kv_heads

    @property
    def flops(self) -> int:
        """Q.K^T and the weighted sum of V: 2 x batch x q_heads x q_len x kv_len x (head_dim + v_head_dim); and
        the QKV projection's GEMM where the layer has one."""
        attend = 2 * self.batch * self.q_heads * self.q_len * self.kv_len * (self.head_dim + self.v_head_dim)
        return attend + 2 * self.batch * self.new_len * self.projection * self.qkv_width


RMS_NORMALIZATIONS = frozenset({"RMSNormalization", "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization"})

# what CuPy runs (``framework``), not cuDNN or cuBLAS
FrameworkParams = (
    ElementwiseParams | DataMovementParams | ReductionParams | NormalizationParams | BlockQuantizedGemmParams
)

LayerParams = (
    ConvParams
    | GemmParams
    | PoolParams
    | LrnParams
    | SoftmaxParams
    | BatchNormParams
    | ActivationParams
    | ElementwiseParams
    | DataMovementParams
    | ReductionParams
    | NormalizationParams
    | BlockQuantizedGemmParams
    | AttentionParams
)

ParamsFn = Callable[[NetworkNode, str], "LayerParams | Unsupported"]
PARAMS: dict[str, ParamsFn] = {}  # ONNX's ops
# ONNX Runtime's contrib ops its transformer optimizer writes (``com.microsoft``): what an ORT-optimised
# graph runs, each as its own fused kernel
MS_DOMAIN = "com.microsoft"
CONTRIB_PARAMS: dict[str, ParamsFn] = {}

FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")

# Why an op known to be left out has no call: formats no GPU framework runs, and the library calls
# benanza does not wrap yet (said in a skipped layer's reason instead of "no mapping").
_CPU_DYNAMIC = (
    "dynamic int8 (quantize_dynamic) is a CPU format: ONNX Runtime's CUDA provider has no"
    " DynamicQuantizeLinear and multiplies only int8 by int8, PyTorch quantizes dynamically on the CPU only"
)
_CPU_QOPERATOR = (
    "the QOperator int8 format (QLinear* ops with zero points) runs on ONNX Runtime's CPU kernels;"
    " on a GPU, int8 runs as QDQ (Q/DQ around float layers, which this runtime maps)"
)
_QOPERATOR_OPS = (
    *("QLinearConv", "QLinearMatMul", "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearSoftmax"),
    *("QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearConcat", "QLinearLeakyRelu", "QGemm"),
)
_NOT_MAPPED = {
    **dict.fromkeys(("DynamicQuantizeLinear", "MatMulInteger", "ConvInteger"), _CPU_DYNAMIC),
    **dict.fromkeys(_QOPERATOR_OPS, _CPU_QOPERATOR),
    **dict.fromkeys(("LSTM", "GRU", "RNN"), "cuDNN's RNN API (cudnnRNNForward) is not wrapped in benanza yet"),
    **dict.fromkeys(
        ("PackedAttention", "PackedMultiHeadAttention", "DecoderMaskedMultiHeadAttention"),
        "ONNX Runtime's attention over packed, unpadded tokens (or beam search's) is not reproduced in benanza"
        " yet (Attention, MultiHeadAttention, GroupQueryAttention and ONNX's Attention are)",
    ),
}


def register_params(*op_types: str, domain: str = "") -> Callable[[ParamsFn], ParamsFn]:
    """Register the derivation of ``op_types``' parameters: ONNX's (``domain`` "") or ONNX Runtime's
    contrib ops (``MS_DOMAIN``)."""
    table = {"": PARAMS, MS_DOMAIN: CONTRIB_PARAMS}[domain]

    def decorate(fn: ParamsFn) -> ParamsFn:
        for op in op_types:
            table[op] = fn
        return fn

    return decorate


def layer_params(network: Network, pos: int = 0, dtype: str | None = None) -> LayerParams | Unsupported:
    """The library call of node ``pos`` of ``network``, at ``dtype`` (default: the node's own).

    Args:
        network: a ``Network`` (``benanza.model.network``).
        pos: the node's position in ``network.nodes``.
        dtype: the floating-point type to run it in (a precision variant); integer data keeps its type.
    """
    node = resolved_node(network, pos)
    op = node.op_type
    if node.domain == MS_DOMAIN:
        derive = CONTRIB_PARAMS.get(op)
        if derive is None:
            why = _NOT_MAPPED.get(op) or "an ONNX Runtime contrib op with no GPU mapping in benanza"
            known = ", ".join(sorted(CONTRIB_PARAMS))
            return Unsupported(f"{MS_DOMAIN}::{op}: {why} (contrib ops mapped: {known})")
    elif node.domain not in ("", "ai.onnx"):
        return Unsupported(f"{node.domain}::{op} is not an ONNX-domain op; no cuDNN/cuBLAS mapping")
    else:
        derive = PARAMS.get(op)
        if derive is None:
            why = _NOT_MAPPED.get(op)
            if why:
                return Unsupported(f"{op}: {why}")
            return Unsupported(f"{op} has no GPU kernel mapping in benanza ({len(PARAMS)} op types have one)")
    own = node.outputs[0].dtype if op in _OUTPUT_TYPED else _dtype_of(node)
    if own not in FLOAT_DTYPES and op not in _ANY_DTYPE:
        return Unsupported(f"{op} on {own} data: the GPU runtime measures floating-point layers")
    run_dtype = dtype if (dtype and own in FLOAT_DTYPES) else own
    return derive(node, run_dtype)


def network_params(network: Network, dtype: str | None = None) -> list[LayerParams | Unsupported]:
    """One parameter value per node, in order (a multi-node network runs node after node)."""
    return [layer_params(network, pos, dtype) for pos in range(len(network.nodes))]


def resolved_node(network: Network, pos: int) -> NetworkNode:
    """Node ``pos`` with every input reference carrying its ``shape`` and ``dtype``.

    A network records shapes on weights and values; an input reference points into
    ``network.inputs`` and a node reference at another node's output.
    """
    node = network.nodes[pos]
    refs = []
    for ref in node.inputs:
        t = network.tensor_of(ref) if ref.is_activation else None
        # a network input the model computes (a length: ``benanza.model.run_values``) brings its value
        value = t.value if t is not None and t.value is not None else ref.value
        refs.append(replace(ref, shape=t.shape, dtype=t.dtype, value=value) if t is not None else ref)
    return replace(node, inputs=tuple(refs))


# ------------------------------------------------------------------------ helpers


def _dtype_of(node: NetworkNode) -> str:
    for ref in node.inputs:
        if ref.is_activation and ref.dtype:
            return ref.dtype
    return node.outputs[0].dtype


def _shape(ref: InputRef | NetworkTensor | None) -> Shape:
    return tuple(int(d) for d in (ref.shape if ref is not None and ref.shape is not None else ()))


def _inputs(node: NetworkNode) -> list[InputRef]:
    return list(node.inputs)


def _in_shape(node: NetworkNode, i: int) -> Shape | None:
    """Shape of input ``i``: recorded for weights and values; activations carry theirs too."""
    refs = _inputs(node)
    if i >= len(refs) or refs[i].kind is RefKind.ABSENT:
        return None
    return _shape(refs[i]) if refs[i].shape is not None else None


def _given(node: NetworkNode, i: int) -> InputRef | None:
    """Input ``i`` where the node has it (an optional input left out, or past the end: None)."""
    refs = _inputs(node)
    return refs[i] if i < len(refs) and refs[i].kind is not RefKind.ABSENT else None


def _attrs(node: NetworkNode) -> dict[str, Any]:
    return node.attrs


def _output_slots(node: NetworkNode) -> tuple[int, ...]:
    """The positions of the outputs the node writes (an output left out before another is skipped)."""
    return node.output_slots or tuple(range(len(node.outputs)))


def _out(node: NetworkNode, i: int = 0) -> Shape:
    return _shape(node.outputs[i])


def _activation_shapes(node: NetworkNode) -> list[Shape]:
    """Shapes of the data inputs (activations), leaving out weights and small constant values."""
    return [_shape(r) for r in _inputs(node) if r.is_activation or r.kind is RefKind.WEIGHT]


# ------------------------------------------------------------------------ derivations


@register_params("Conv", "ConvTranspose")
def _conv(node: NetworkNode, dtype: str) -> ConvParams | Unsupported:
    a = _attrs(node)
    w = _in_shape(node, 1)
    y = _out(node)
    x = _in_shape(node, 0)
    if w is None or x is None:
        return Unsupported(f"{node.op_type} without a known weight or input shape")
    n = len(w) - 2
    if n < 1 or n > 3:
        return Unsupported(f"{node.op_type} with {n} spatial dimensions (cuDNN runs 1 to 3)")
    pads = tuple(a.get("pads") or (0,) * (2 * n))
    transpose = node.op_type == "ConvTranspose"
    if transpose and any(a.get("output_padding") or ()):
        return Unsupported("ConvTranspose with output_padding: the output is not cuDNN's backward-data shape")
    return ConvParams(
        x=x,
        w=w,
        y=y,
        pads_begin=pads[:n],
        pads_end=pads[n:],
        strides=tuple(a.get("strides") or (1,) * n),
        dilations=tuple(a.get("dilations") or (1,) * n),
        groups=int(a.get("group", 1)),
        dtype=dtype,
        bias=_in_shape(node, 2) is not None,
        transpose=transpose,
    )


@register_params("Gemm")
def _gemm(node: NetworkNode, dtype: str) -> GemmParams | Unsupported:
    a = _attrs(node)
    sa, sb = _in_shape(node, 0), _in_shape(node, 1)
    if sa is None or sb is None or len(sa) != 2 or len(sb) != 2:
        return Unsupported("Gemm without two 2-D operands")
    ta, tb = bool(a.get("transA", 0)), bool(a.get("transB", 0))
    m, k = (sa[1], sa[0]) if ta else sa
    n = sb[0] if tb else sb[1]
    has_c = _in_shape(node, 2) is not None
    beta = float(a.get("beta", 1.0)) if has_c else 0.0
    return GemmParams(
        batch=1,
        m=m,
        n=n,
        k=k,
        trans_a=ta,
        trans_b=tb,
        dtype=dtype,
        alpha=float(a.get("alpha", 1.0)),
        beta=beta,
        bias=has_c and beta != 0.0,
        a_batched=False,
        b_batched=False,
    )


@register_params("MatMul")
def _matmul(node: NetworkNode, dtype: str) -> GemmParams | Unsupported:
    sa, sb = _in_shape(node, 0), _in_shape(node, 1)
    if sa is None or sb is None or not sa or not sb:
        return Unsupported("MatMul without known operand shapes")
    return _matmul_of(sa, sb, dtype)


def _matmul_of(sa: Shape, sb: Shape, dtype: str, fold_rows: bool = True) -> GemmParams | Unsupported:
    """The GEMM of a MatMul of operands shaped ``sa`` and ``sb`` (NumPy's matmul broadcasting).

    ``fold_rows``: a batch of A over one B is one GEMM of A's rows stacked, where A is stored as its
    rows (not where it is read transposed: a strided batch then)."""
    a2 = sa if len(sa) >= 2 else (1, *sa)
    b2 = sb if len(sb) >= 2 else (*sb, 1)
    m, k = a2[-2], a2[-1]
    n = b2[-1]
    batch_a, batch_b = math.prod(a2[:-2]), math.prod(b2[:-2])
    try:
        batch = math.prod(np.broadcast_shapes(tuple(a2[:-2]), tuple(b2[:-2])))
    except ValueError:
        return Unsupported(f"MatMul of {sa} x {sb}: their batch axes do not broadcast")
    if batch_a not in (1, batch) or batch_b not in (1, batch):
        # batch axes broadcast against each other (heads shared by one operand's samples): the batch of
        # products both operands expand to, each operand copied out to it as a framework expands it
        # before its batched GEMM (the copies are not this layer's)
        return GemmParams(batch, m, n, k, False, False, dtype)
    if batch_b == 1 and batch_a > 1 and fold_rows:  # a shared weight: one (batch*m x k) x (k x n) product
        return GemmParams(1, batch_a * m, n, k, False, False, dtype, a_batched=False, b_batched=False)
    return GemmParams(
        batch=max(batch_a, batch_b),
        m=m,
        n=n,
        k=k,
        trans_a=False,
        trans_b=False,
        dtype=dtype,
        a_batched=batch_a > 1,
        b_batched=batch_b > 1,
    )


@register_params("Einsum")
def _einsum(node: NetworkNode, dtype: str) -> GemmParams | DataMovementParams | ReductionParams | Unsupported:
    """The einsums a framework runs as one library call: two operands contracted as a (batched) GEMM, each
    index a batch (both operands and the output), a row (the first and the output), a column (the second and
    the output) or summed (both operands only), laid out so that one strided batched GEMM reads and writes them
    in place (``bhqd,bhkd->bhqk``: the second transposed); one operand permuted (a Transpose) or summed over
    trailing indices in order (a ReduceSum). Other forms (an ellipsis, a repeated index, operands a framework
    permutes into a copy first, three operands) are refused with their equation."""
    equation = _text(_attrs(node).get("equation", "")).replace(" ", "")
    lhs, arrow, out = equation.partition("->")
    terms = lhs.split(",")
    shapes = [_in_shape(node, i) for i in range(len(terms))]
    refused = Unsupported(f"Einsum {equation!r}: not one GEMM, transpose or trailing sum (not mapped yet)")
    if not arrow or "." in equation or any(len(set(t)) != len(t) for t in (*terms, out)):
        return refused
    sizes: dict[str, int] = {}
    for term, shape in zip(terms, shapes, strict=True):
        if shape is None or len(shape) != len(term):
            return Unsupported(f"Einsum {equation!r} of operand shapes {shapes}")
        for index, size in zip(term, shape, strict=True):
            if sizes.setdefault(index, size) != size:
                return Unsupported(f"Einsum {equation!r} of operand shapes {shapes}: index {index} broadcast")
    y = _out(node)
    if len(terms) == 1:
        (term,) = terms
        if sorted(term) == sorted(out):
            perm = tuple(term.index(index) for index in out)
            return DataMovementParams("Transpose", (shapes[0],), y, dtype, (("perm", perm),))
        if set(out) <= set(term) and term.startswith(out):
            axes = tuple(range(len(out), len(term)))
            return ReductionParams("ReduceSum", shapes[0], axes, False, y, dtype)
        return refused
    if len(terms) != 2 or not set(out) <= set(terms[0]) | set(terms[1]):
        return refused
    a, b = terms
    batch = "".join(i for i in out if i in a and i in b)
    rows = "".join(i for i in out if i in a and i not in b)
    cols = "".join(i for i in out if i in b and i not in a)
    summed = "".join(i for i in a if i in b and i not in out)
    if out != batch + rows + cols or len(a) + len(b) != 2 * len(batch) + len(rows) + len(cols) + 2 * len(summed):
        return refused  # the output not (batch, rows, columns), or an index summed over one operand alone
    trans_a = bool(rows and summed) and a == batch + summed + rows  # (k, m) stored: read transposed
    trans_b = bool(cols and summed) and b == batch + cols + summed
    if (a != batch + rows + summed and not trans_a) or (b != batch + summed + cols and not trans_b):
        return refused

    def size(indices: str) -> int:
        return math.prod(sizes[i] for i in indices)

    return GemmParams(size(batch), size(rows), size(cols), size(summed), trans_a, trans_b, dtype)


@register_params("MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool")
def _pool(node: NetworkNode, dtype: str) -> PoolParams | Unsupported:
    a = _attrs(node)
    op = node.op_type
    x = _in_shape(node, 0)
    if x is None or len(x) < 3:
        return Unsupported(f"{op} without a known N x C x spatial input")
    n = len(x) - 2
    if op.startswith("Global"):
        window, pads, strides = tuple(x[2:]), (0,) * n, (1,) * n
    else:
        if any(d != 1 for d in a.get("dilations") or ()):
            return Unsupported(f"{op} with dilations: cuDNN pooling has none")
        if op == "MaxPool" and len(node.outputs) > 1:
            return Unsupported("MaxPool with an Indices output: cuDNN pooling returns values only")
        window = tuple(a["kernel_shape"])
        pads_all = tuple(a.get("pads") or (0,) * (2 * n))
        strides = tuple(a.get("strides") or (1,) * n)
        ceil = bool(a.get("ceil_mode"))
        if ceil and (rounded := _ceil_pooled(x[2:], window, strides, pads_all)) != tuple(_out(node)[2:]):
            return Unsupported(
                f"{op} with ceil_mode of {x[2:]}: ONNX's shape inference gives {_out(node)[2:]}, ONNX Runtime"
                f" {rounded} (its last window starts inside the input)"
            )
        fitted = _symmetric_window(x[2:], window, strides, pads_all, _out(node)[2:], ceil=ceil)
        if fitted is None:
            mode = " and ceil_mode" if ceil else ""
            return Unsupported(f"{op} with pads {list(pads_all)}{mode}: no symmetric padding gives its output")
        window, pads = fitted
    if "Max" in op:
        mode = "max"
    else:
        mode = "avg_include_pad" if a.get("count_include_pad") else "avg_exclude_pad"
    return PoolParams(mode, x, _out(node), window, pads, strides, dtype)


def _ceil_pooled(size: Shape, window: tuple[int, ...], strides: tuple[int, ...], pads: tuple[int, ...]) -> Shape:
    """A pool's output size with ``ceil_mode``, as ONNX Runtime (and PyTorch) compute it: rounded up, less one
    where the last window would start past the input and its leading pad."""
    n, out = len(window), []
    for i in range(n):
        span = size[i] + pads[i] + pads[n + i] - window[i]
        count = -(-span // strides[i]) + 1
        if (count - 1) * strides[i] >= size[i] + pads[i]:
            count -= 1
        out.append(count)
    return tuple(out)


def _symmetric_window(
    size: Shape,
    window: tuple[int, ...],
    strides: tuple[int, ...],
    pads: tuple[int, ...],
    out: Shape,
    ceil: bool = False,
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """A window and per-dimension symmetric pads for cuDNN pooling with ONNX's output size.

    cuDNN pools with one pad per dimension on both sides. Asymmetric ONNX pads (an extra
    row at the end, as TensorFlow's SAME exports do) are run with the larger or the smaller
    pad on both sides, whichever yields the model's output size: the same windows' work,
    shifted by one position, which is what the kernel's cost depends on. A window that
    covers a whole padded dimension with one output (Inception's 7x7 average over 6x6 plus
    one padded row) becomes a window of the dimension itself, unpadded: the elements read
    are the same. ``ceil``: ONNX's ``ceil_mode``, whose last window may start past what
    cuDNN's rounding down reaches: where that adds an output, a pad of up to ``stride - 1``
    more on both sides gives it (the same count of windows, shifted); where it adds none, the
    pads are the model's own.
    """
    n = len(window)
    new_window, chosen = list(window), []
    for i in range(n):
        begin, end = pads[i], pads[n + i]
        wider = range(max(begin, end) + 1, min(max(begin, end) + strides[i], window[i])) if ceil else ()
        for p in dict.fromkeys((begin, max(begin, end), min(begin, end), *wider)):
            if (size[i] + 2 * p - window[i]) // strides[i] + 1 == out[i]:
                chosen.append(p)
                break
        else:
            if out[i] == 1 and window[i] >= size[i]:
                new_window[i] = size[i]
                chosen.append(0)
            else:
                return None
    return tuple(new_window), tuple(chosen)


@register_params("LRN")
def _lrn(node: NetworkNode, dtype: str) -> LrnParams | Unsupported:
    a = _attrs(node)
    x = _in_shape(node, 0)
    if x is None:
        return Unsupported("LRN without a known input shape")
    return LrnParams(
        x, int(a["size"]), float(a.get("alpha", 1e-4)), float(a.get("beta", 0.75)), float(a.get("bias", 1.0)), dtype
    )


@register_params("Softmax", "LogSoftmax")
def _softmax(node: NetworkNode, dtype: str) -> SoftmaxParams | Unsupported:
    a = _attrs(node)
    x = _in_shape(node, 0)
    if x is None or not x:
        return Unsupported(f"{node.op_type} without a known input shape")
    axis = int(a.get("axis", len(x) - 1))
    outer = math.prod(x[:axis])
    if a.get("coerce_2d"):  # opset < 13: flattened at axis, softmax over the whole trailing block
        dim, inner = math.prod(x[axis:]), 1
    else:
        dim, inner = x[axis], math.prod(x[axis + 1 :])
    return SoftmaxParams(outer, dim, inner, node.op_type == "LogSoftmax", dtype)


@register_params("BatchNormalization")
def _batch_norm(node: NetworkNode, dtype: str) -> BatchNormParams | Unsupported:
    a = _attrs(node)
    x = _in_shape(node, 0)
    if x is None or len(x) < 2:
        return Unsupported("BatchNormalization without a known N x C input")
    if a.get("training_mode"):
        return Unsupported("BatchNormalization in training mode (the runtime measures inference)")
    return BatchNormParams(x, float(a.get("epsilon", 1e-5)), dtype)


_REDUCTIONS = (
    *("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"),
    *("ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"),
)


@register_params(*_REDUCTIONS)
def _reduction(node: NetworkNode, dtype: str) -> ReductionParams | Unsupported:
    """Axes from the attribute (ReduceSum before opset 13, the others before 18) or the constant
    ``axes`` input; where the model computes them, from the input and output shapes."""
    op, a = node.op_type, _attrs(node)
    x, y = _in_shape(node, 0), _out(node)
    if x is None:
        return Unsupported(f"{op} without a known input shape")
    keepdims = bool(a.get("keepdims", 1))
    refs = _inputs(node)
    given: list[int] | None = None
    if a.get("axes") is not None:
        given = [int(v) for v in a["axes"]]
    elif len(refs) > 1 and refs[1].kind is RefKind.VALUE:
        given = [int(v) for v in refs[1].value or ()]
    elif len(refs) > 1 and refs[1].kind is not RefKind.ABSENT:
        found = _reduced_axes(x, y, keepdims)
        if found is None:
            return Unsupported(f"{op} of {x} to {y} over axes the model computes: which ones is ambiguous")
        if not found:
            return Unsupported(f"{op} of {x} to {y} over axes the model computes: of length 1 only, a copy")
        given = list(found)
    if not given:  # no axes: every axis, or none with noop_with_empty_axes
        if a.get("noop_with_empty_axes"):
            return Unsupported(f"{op} with noop_with_empty_axes and no axes: no reduction to run")
        given = list(range(len(x)))
    if any(not -len(x) <= v < max(len(x), 1) for v in given):
        return Unsupported(f"{op} axes {given} out of range for rank {len(x)}")
    axes = tuple(sorted({v % len(x) for v in given})) if x else ()
    if keepdims:
        expected = tuple(1 if d in axes else e for d, e in enumerate(x))
    else:
        expected = tuple(e for d, e in enumerate(x) if d not in axes)
    if expected != tuple(y):
        return Unsupported(f"{op} of {x} over {list(axes)} gives {expected}, not the model's {y}")
    return ReductionParams(op, x, axes, keepdims, y, dtype)


@register_params("ArgMax", "ArgMin")
def _arg_reduction(node: NetworkNode, dtype: str) -> ReductionParams | Unsupported:
    """The index of the largest (smallest) value along ``axis``: one reduction kernel."""
    op, a = node.op_type, _attrs(node)
    x, y = _in_shape(node, 0), _out(node)
    if not x:
        return Unsupported(f"{op} without a known input shape")
    axis = int(a.get("axis", 0))
    if not -len(x) <= axis < len(x):
        return Unsupported(f"{op} axis {axis} out of range for rank {len(x)}")
    axis %= len(x)
    keepdims = bool(a.get("keepdims", 1))
    expected = tuple(1 if d == axis else e for d, e in enumerate(x)) if keepdims else x[:axis] + x[axis + 1 :]
    if expected != tuple(y):
        return Unsupported(f"{op} of {x} along {axis} gives {expected}, not the model's {y}")
    return ReductionParams(op, x, (axis,), keepdims, y, dtype, bool(a.get("select_last_index", 0)))


def _reduced_axes(x: Shape, y: Shape, keepdims: bool) -> tuple[int, ...] | None:
    """The axes a reduction of ``x`` to ``y`` took, where the shapes say it (None where they do not).

    Kept dimensions: every axis that became 1 (an axis of 1, reduced or not, costs nothing). Dropped
    ones: the axes whose removal leaves ``y``, where every way to remove them drops the same axes
    larger than 1; else None (``(4, 4)`` to ``(4,)``: the rows or the columns)."""
    if keepdims:
        if len(x) != len(y) or any(o not in (1, i) for i, o in zip(x, y, strict=True)):
            return None
        return tuple(d for d, (i, o) in enumerate(zip(x, y, strict=True)) if o == 1 and i != 1)
    drop = len(x) - len(y)
    if drop < 0:
        return None
    fits = [
        axes
        for axes in itertools.combinations(range(len(x)), drop)
        if tuple(e for d, e in enumerate(x) if d not in axes) == tuple(y)
    ]
    if len({tuple(d for d in axes if x[d] != 1) for axes in fits}) != 1:
        return None
    return fits[0]


# ONNX Runtime registers SimplifiedLayerNormalization (an RMS normalisation) in ONNX's domain
@register_params("LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization")
def _normalization(node: NetworkNode, dtype: str) -> NormalizationParams | Unsupported:
    op, a = node.op_type, _attrs(node)
    x = _in_shape(node, 0)
    if not x:
        return Unsupported(f"{op} without a known input shape")
    axis = int(a.get("axis", -1))
    if not -len(x) <= axis < len(x):
        return Unsupported(f"{op} axis {axis} out of range for rank {len(x)}")
    bias = op == "LayerNormalization" and _given(node, 2) is not None
    return NormalizationParams(op, x, axis % len(x), float(a.get("epsilon", 1e-5)), bias, dtype)


@register_params("SkipLayerNormalization", "SkipSimplifiedLayerNormalization", domain=MS_DOMAIN)
def _skip_normalization(node: NetworkNode, dtype: str) -> NormalizationParams | Unsupported:
    """``x + skip (+ bias)`` normalised over its last axis: inputs ``input, skip, gamma[, beta][, bias]``
    (the simplified, RMS kind has no beta); outputs ``output[, mean, inv_std_var][, input_skip_bias_sum]``."""
    op, a = node.op_type, _attrs(node)
    x, skip = _in_shape(node, 0), _in_shape(node, 1)
    if not x or not skip:
        return Unsupported(f"{op} without known input and skip shapes")
    simplified = op == "SkipSimplifiedLayerNormalization"
    slots = _output_slots(node)
    if 1 in slots or 2 in slots:
        return Unsupported(f"{op} with its mean or inverse standard deviation outputs (training)")
    return NormalizationParams(
        op,
        x,
        len(x) - 1,
        float(a.get("epsilon", 1e-12)),
        not simplified and _given(node, 3) is not None,
        dtype,
        skip=skip,
        pre_bias=_given(node, 3 if simplified else 4) is not None,
        sum_out=3 in slots,
    )


@register_params("InstanceNormalization", "GroupNormalization")
def _channel_normalization(node: NetworkNode, dtype: str) -> NormalizationParams | Unsupported:
    """Each sample's channels (InstanceNormalization) or groups of channels (GroupNormalization)
    normalised over themselves and their spatial extent, then scaled and shifted."""
    op, a = node.op_type, _attrs(node)
    x = _in_shape(node, 0)
    if not x or len(x) < 2:
        return Unsupported(f"{op} without a known N x C x ... input shape")
    eps = float(a.get("epsilon", 1e-5))
    if op == "InstanceNormalization":
        return NormalizationParams(op, x, 2, eps, True, dtype)
    groups = int(a.get("num_groups", 0) or 0)
    if groups < 1 or x[1] % groups:
        return Unsupported(f"{op} of {x[1]} channels in {groups} groups")
    scale = _in_shape(node, 1)
    per_channel = node.opset >= 21 or (scale is not None and math.prod(scale) == x[1] != groups)
    return NormalizationParams(op, x, 1, eps, True, dtype, groups=groups, per_channel=per_channel)


# ------------------------------------------------------------------------ attention


def _past_length(node: NetworkNode, i: int, batch: int, heads: int, dim: int) -> int | Unsupported:
    """The rows of the past cache at input ``i`` (batch, heads, past, dim); 0 without one."""
    if _given(node, i) is None:
        return 0
    past = _in_shape(node, i)
    if not past or len(past) != 4 or past[0] != batch or past[1] != heads or past[3] != dim:
        return Unsupported(f"{node.op_type}'s past of shape {past}: ({batch}, {heads}, past, {dim}) expected")
    return past[2]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _scale(a: dict[str, Any], head_dim: int) -> float:
    scale = a.get("scale")
    return float(scale) if scale else 1.0 / math.sqrt(head_dim)


def _mask_of(node: NetworkNode, i: int, dims: tuple[int, int, int, int], dtype: str) -> tuple[Shape, str] | Unsupported:
    """Input ``i`` as a mask over (batch, heads, q_len, keys): its shape right-aligned to 4-D, and its element type
    (``dtype`` for a float mask, which the attention adds; bool for a boolean one, True where a key is attended)."""
    ref = _given(node, i)
    if ref is None:
        return (), ""
    shape = _shape(ref)
    if len(shape) > 4:
        return Unsupported(f"{node.op_type}'s mask of shape {shape}: at most 4 axes broadcast over the scores")
    full = (1,) * (4 - len(shape)) + shape
    if any(m not in (1, d) for m, d in zip(full[:3], dims[:3], strict=True)) or full[3] > dims[3]:
        return Unsupported(f"{node.op_type}'s mask of shape {shape} does not broadcast over the scores {dims}")
    if ref.dtype == "bool":
        return full, "bool"
    if ref.dtype not in FLOAT_DTYPES:
        return Unsupported(f"{node.op_type}'s mask of {ref.dtype} values: an additive float or a boolean mask expected")
    return full, dtype


def _masks(
    node: NetworkNode, dims: tuple[int, int, int, int], dtype: str, bias: int, padding: tuple[int, str]
) -> dict[str, Any] | Unsupported:
    """The mask fields of ``AttentionParams`` for ONNX Runtime's ops: input ``bias`` as a mask over (batch,
    heads, q_len, keys) (``_mask_of``), and input ``padding`` (its slot and name) as a key padding mask, the
    (batch, keys) raw mask or the (batch,) lengths of right-padded sequences."""
    batch, kv_len = dims[0], dims[3]
    mask = _mask_of(node, bias, dims, dtype)
    if isinstance(mask, Unsupported):
        return mask
    slot, name = padding
    ref = _given(node, slot)
    shape = _shape(ref) if ref is not None else None
    if shape is not None and shape not in ((batch, kv_len), (batch,)):
        return Unsupported(f"{node.op_type}'s {name} {shape}: the (batch, keys) mask or (batch,) lengths are mapped")
    padded = {"key_mask": shape == (batch, kv_len), "key_lengths": shape == (batch,)}
    return {"mask": mask[0], "mask_dtype": mask[1], **padded}


@register_params("Attention")
def _onnx_attention(node: NetworkNode, dtype: str) -> AttentionParams | Unsupported:
    """ONNX's Attention (opset 23; torch.onnx writes it for ``scaled_dot_product_attention``): inputs ``Q, K,
    V[, attn_mask][, past_key, past_value]``, 3-D (batch, seq, heads * dim, the heads in ``q_num_heads`` and
    ``kv_num_heads``) or 4-D (batch, heads, seq, dim); the past (batch, kv_heads, past, dim)."""
    a = _attrs(node)
    q, k, v = (_in_shape(node, i) for i in range(3))
    if not q or not k or not v or not len(q) == len(k) == len(v) or len(q) not in (3, 4):
        return Unsupported(f"Attention of Q {q}, K {k}, V {v}: 3-D or 4-D inputs of one rank expected")
    if len(q) == 3:
        hq, hkv = int(a.get("q_num_heads", 0) or 0), int(a.get("kv_num_heads", 0) or 0)
        if hq < 1 or hkv < 1 or q[2] % hq or k[2] % hkv or v[2] % hkv:
            return Unsupported(f"Attention of 3-D Q {q}, K {k}, V {v} in {hq} and {hkv} heads")
        b, sq, d, new, dv = q[0], q[1], q[2] // hq, k[1], v[2] // hkv
        key_dim = k[2] // hkv
    else:
        b, hq, sq, d = q
        hkv, new, dv, key_dim = k[1], k[2], v[3], k[3]
    if hq % hkv or k[0] != b or v[0] != b or key_dim != d or (len(q) == 4 and (v[1] != hkv or v[2] != new)):
        return Unsupported(f"Attention of {hq} query heads over {hkv} key heads, batches {q[0]}/{k[0]}/{v[0]}")
    if 3 in _output_slots(node):
        return Unsupported("Attention with its qk_matmul_output output: the scores are not written by either call")
    if _given(node, 6) is not None:
        return Unsupported("Attention with nonpad_kv_seqlen (an external cache's lengths): not mapped yet")
    if any(int(a.get(side, -1)) >= 0 for side in ("left_window_size", "right_window_size")):
        return Unsupported("Attention with a sliding window (left/right_window_size): not mapped yet")
    past = _past_length(node, 4, b, hkv, d)
    if isinstance(past, Unsupported):
        return past
    mask = _mask_of(node, 3, (b, hq, sq, past + new), dtype)
    if isinstance(mask, Unsupported):
        return mask
    return AttentionParams(
        "Attention",
        b,
        hq,
        hkv,
        sq,
        past + new,
        d,
        dv,
        dtype,
        _scale(a, d),
        seq_major=len(q) == 3,
        kv_seq_major=len(q) == 3,
        past=past,
        causal=bool(int(a.get("is_causal", 0) or 0)),
        softcap=float(a.get("softcap", 0.0) or 0.0),
        mask=mask[0],
        mask_dtype=mask[1],
    )


@register_params("MultiHeadAttention", domain=MS_DOMAIN)
def _multi_head_attention(node: NetworkNode, dtype: str) -> AttentionParams | Unsupported:
    """ONNX Runtime's MultiHeadAttention: inputs ``query, key, value[, bias][, key_padding_mask][,
    attention_bias][, past_key, past_value]``; a 3-D query (batch, seq, heads * dim), 3-D keys and values
    or 4-D (batch, heads, keys, dim) ones (a cross-attention's, read as they are); or packed, as ONNX Runtime's
    optimizer writes them for its CUDA provider, a (batch, seq, heads, 3, dim) query without key and value, or
    a (batch, keys, heads, 2, dim) key without value; ``unidirectional``: causal."""
    a = _attrs(node)
    heads = int(a.get("num_heads", 0) or 0)
    q, k, v = (_in_shape(node, i) for i in range(3))
    packing = "qkv_heads" if q and len(q) == 5 and k is None else "kv_heads" if k and len(k) == 5 else ""
    if packing and v is None:  # (batch, seq, heads, 3, dim) QKV or (batch, keys, heads, 2, dim) KV: as 3-D ones
        packed, parts = (q, 3) if packing == "qkv_heads" else (k, 2)
        if packed[2:4] != (heads, parts):
            what = "QKV" if parts == 3 else "KV"
            return Unsupported(f"MultiHeadAttention of packed {what} {packed} in {heads} heads")
        k = v = (packed[0], packed[1], heads * packed[4])
        q = k if parts == 3 else q
    if heads < 1 or not q or len(q) != 3 or q[2] % heads:
        return Unsupported(f"MultiHeadAttention of query {q} in {heads} heads: a (batch, seq, heads * dim) query")
    if k is None or v is None or len(k) != len(v) or len(k) not in (3, 4):
        return Unsupported(f"MultiHeadAttention of key {k} and value {v}: both 3-D or 4-D, or packed, expected")
    if _given(node, 8) is not None or _given(node, 9) is not None:
        return Unsupported("MultiHeadAttention with past_sequence_length or cache_indirection (beam search)")
    if 3 in _output_slots(node):
        return Unsupported("MultiHeadAttention with its qk output: the scores are not written by either call")
    b, sq, d = q[0], q[1], q[2] // heads
    kv_seq_major = len(k) == 3
    if kv_seq_major:
        if k[2] != heads * d or v[2] % heads or k[1] != v[1]:
            return Unsupported(f"MultiHeadAttention keys {k} and values {v} for query {q} in {heads} heads")
        new, dv = k[1], v[2] // heads
    else:
        if k[1] != heads or v[1] != heads or k[3] != d or k[2] != v[2]:
            return Unsupported(f"MultiHeadAttention keys {k} and values {v} for query {q} in {heads} heads")
        new, dv = k[2], v[3]
    past = _past_length(node, 6, b, heads, d)
    if isinstance(past, Unsupported):
        return past
    if not kv_seq_major and (past or _given(node, 3) is not None):
        return Unsupported("MultiHeadAttention with 4-D keys and a past or a bias: not mapped yet")
    if packing and past:
        return Unsupported("MultiHeadAttention with packed inputs and a past: not mapped yet")
    if packing == "kv_heads" and _given(node, 3) is not None:
        return Unsupported("MultiHeadAttention with packed KV and a bias: ONNX Runtime refuses it")
    unidirectional = bool(int(a.get("unidirectional", 0) or 0))
    if unidirectional and not past and new != sq:
        return Unsupported(f"MultiHeadAttention, unidirectional, of {sq} queries over {new} keys: alignment unknown")
    kv_len = past + new
    masks = _masks(node, (b, heads, sq, kv_len), dtype, bias=5, padding=(4, "key_padding_mask"))
    if isinstance(masks, Unsupported):
        return masks
    return AttentionParams(
        "MultiHeadAttention",
        b,
        heads,
        heads,
        sq,
        kv_len,
        d,
        dv,
        dtype,
        _scale(a, d),
        kv_seq_major=kv_seq_major,
        past=past,
        causal=unidirectional,
        qkv_bias=_given(node, 3) is not None,
        **masks,
        packing=packing,
    )


@register_params("Attention", domain=MS_DOMAIN)
def _contrib_attention(node: NetworkNode, dtype: str) -> AttentionParams | Unsupported:
    """ONNX Runtime's Attention (its transformer optimizer's BERT and GPT-2): inputs ``input, weights[, bias][,
    mask_index][, past][, attention_bias]``; ``input`` (batch, seq, width) times ``weights`` (width, Q + K + V
    columns, ``qkv_hidden_sizes``) plus ``bias`` is Q, K and V, side by side; ``past`` (2, batch, heads, past,
    dim); ``mask_index`` as the (batch, keys) raw mask or the (batch,) lengths of right-padded sequences (other
    forms refused); ``unidirectional``: causal. A masked key weighs nothing (ONNX Runtime adds its
    ``mask_filter_value``, -10000, which differs only for a sequence with no valid key)."""
    a = _attrs(node)
    heads = int(a.get("num_heads", 0) or 0)
    x, w = _in_shape(node, 0), _in_shape(node, 1)
    if heads < 1 or not x or len(x) != 3 or not w or len(w) != 2 or w[0] != x[2]:
        return Unsupported(f"Attention of input {x} by weights {w} in {heads} heads")
    sizes = [int(v) for v in a.get("qkv_hidden_sizes") or ()] or [w[1] // 3] * 3
    if len(sizes) != 3 or sum(sizes) != w[1] or sizes[0] != sizes[1] or sizes[0] % heads or sizes[2] % heads:
        return Unsupported(f"Attention's QKV widths {sizes} for weights {w} in {heads} heads")
    if int(a.get("do_rotary", 0) or 0) or int(a.get("past_present_share_buffer", 0) or 0) or _given(node, 6):
        return Unsupported("Attention with rotary embedding or a shared past/present buffer: not mapped yet")
    b, sq, d, dv = x[0], x[1], sizes[0] // heads, sizes[2] // heads
    past = 0
    if _given(node, 4) is not None:
        shape = _in_shape(node, 4)
        if not shape or len(shape) != 5 or shape[:3] != (2, b, heads) or shape[4] != d or d != dv:
            return Unsupported(f"Attention's past of shape {shape}: (2, {b}, {heads}, past, {d}) expected")
        past = shape[3]
    masks = _masks(node, (b, heads, sq, past + sq), dtype, bias=5, padding=(3, "mask_index"))
    if isinstance(masks, Unsupported):
        return masks
    return AttentionParams(
        "Attention",
        b,
        heads,
        heads,
        sq,
        past + sq,
        d,
        dv,
        dtype,
        _scale(a, d),
        past=past,
        causal=bool(int(a.get("unidirectional", 0) or 0)),
        qkv_bias=_given(node, 2) is not None,
        **masks,
        projection=x[2],
    )


@register_params("GroupQueryAttention", domain=MS_DOMAIN)
def _group_query_attention(node: NetworkNode, dtype: str) -> AttentionParams | Unsupported:
    """ONNX Runtime's GroupQueryAttention (onnxruntime-genai's decoders): inputs ``query, key, value, past_key,
    past_value, seqlens_k, total_sequence_length[, cos_cache, sin_cache][, position_ids][, attention_bias]``;
    causal, the queries the last ``seq`` positions of ``total_sequence_length`` (its run value where the
    model computes it, else the present cache's length); ``do_rotary``, ``local_window_size``, ``softcap``. The
    key and value left out: Q, K and V packed side by side in ``query``; inputs 14 and 15, ``q_norm_weight`` and
    ``k_norm_weight`` (``qk_norm_epsilon``): Q and K RMS-normalised per head first."""
    a = _attrs(node)
    hq, hkv = int(a.get("num_heads", 0) or 0), int(a.get("kv_num_heads", 0) or 0)
    q, k, v = (_in_shape(node, i) for i in range(3))
    packed = _given(node, 1) is None and _given(node, 2) is None  # genai's default: one (batch, seq, (hq + 2 hkv) dim)
    heads = hq + 2 * hkv if packed else hq
    if hq < 1 or hkv < 1 or hq % hkv or not q or len(q) != 3 or q[2] % heads:
        return Unsupported(f"GroupQueryAttention of {'packed QKV' if packed else 'query'} {q} in {hq} heads over {hkv}")
    b, sq, d = q[0], q[1], q[2] // heads
    if packed:
        k = v = (b, sq, hkv * d)
    elif k is None or v is None or len(k) != 3 or len(v) != 3 or k[2] != hkv * d or v[2] % hkv or k[1] != sq:
        return Unsupported(f"GroupQueryAttention keys {k} and values {v} for query {q}")
    if int(a.get("smooth_softmax", -1)) == 1 or _given(node, 11) is not None:
        return Unsupported("GroupQueryAttention with a smooth softmax or head sinks: not mapped yet")
    quantized = [_text(a.get(t, "NONE")) for t in ("k_quant_type", "v_quant_type")]
    if any(q != "NONE" for q in quantized) or _given(node, 12) is not None:
        return Unsupported(f"GroupQueryAttention over a quantized KV cache ({'/'.join(quantized)}): not mapped yet")
    if _given(node, 16) is not None:
        return Unsupported("GroupQueryAttention with its input 16 (past the Q/K normalisation weights): not mapped yet")
    qk_norm = _given(node, 14) is not None or _given(node, 15) is not None  # genai's Qwen3 for CUDA: per-head RMS
    norms = [_in_shape(node, i) for i in (14, 15)]
    if qk_norm and norms != [(d,), (d,)]:
        return Unsupported(f"GroupQueryAttention's Q/K normalisation weights {norms[0]} and {norms[1]}: ({d},) each")
    if 3 in _output_slots(node):
        return Unsupported("GroupQueryAttention with its output_qk output: the scores are not written by either call")
    total = _given(node, 6)
    present = _out(node, 1) if len(node.outputs) > 1 else ()
    past_shape = _in_shape(node, 3)
    if total is not None and total.value:
        kv_len = int(total.value[0])
    elif len(present) == 4:
        kv_len = present[2]
    else:
        kv_len = (past_shape[2] if past_shape and len(past_shape) == 4 else 0) + sq
    if kv_len < sq:
        return Unsupported(f"GroupQueryAttention of {sq} queries over {kv_len} keys")
    if int(a.get("sliding_window_cache", 0) or 0):
        return Unsupported("GroupQueryAttention with a sliding-window ring cache: not mapped yet")
    window = int(a.get("local_window_size", -1))
    if window == 0:
        return Unsupported("GroupQueryAttention with local_window_size 0: no key to attend")
    rotary = bool(int(a.get("do_rotary", 0) or 0))
    cos = _in_shape(node, 7)
    if rotary and (not cos or len(cos) != 2 or 2 * cos[1] > d or cos[0] < kv_len):
        return Unsupported(f"GroupQueryAttention's rotary caches {cos} for head dim {d} at {kv_len} positions")
    mask = _mask_of(node, 10, (b, hq, sq, kv_len), dtype)
    if isinstance(mask, Unsupported):
        return mask
    return AttentionParams(
        "GroupQueryAttention",
        b,
        hq,
        hkv,
        sq,
        kv_len,
        d,
        v[2] // hkv,
        dtype,
        _scale(a, d),
        past=kv_len - sq,
        causal=bool(int(a.get("causal", 1))),
        window=max(window, 0),  # local_window_size keys, the query's own included (ORT masks older ones)
        softcap=float(a.get("softcap", 0.0) or 0.0),
        mask=mask[0],
        mask_dtype=mask[1],
        rotary=rotary,
        interleaved=bool(int(a.get("rotary_interleaved", 0) or 0)),
        rotary_cache=cos if rotary else (),
        packing="qkv_columns" if packed else "",
        qk_norm=float(a.get("qk_norm_epsilon", 1e-6)) if qk_norm else 0.0,
    )


_ACTIVATIONS = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Elu": "elu", "Clip": "clipped_relu"}


@register_params(*_ACTIVATIONS)
def _activation(node: NetworkNode, dtype: str) -> ActivationParams | ElementwiseParams | Unsupported:
    op = node.op_type
    x = _in_shape(node, 0)
    if x is None:
        return Unsupported(f"{op} without a known input shape")
    a = _attrs(node)
    if op == "Elu":
        return ActivationParams("elu", x, dtype, float(a.get("alpha", 1.0)))
    if op == "Clip":
        low, high = _clip_bounds(node)
        if low == 0.0 and high is not None:  # Relu6 and friends: cuDNN's clipped ReLU
            return ActivationParams("clipped_relu", x, dtype, high)
        return ElementwiseParams("Clip", (x,), _out(node), dtype, (("min", low), ("max", high)))
    return ActivationParams(_ACTIVATIONS[op], x, dtype)


def _clip_bounds(node: NetworkNode) -> tuple[float | None, float | None]:
    a = _attrs(node)
    if "min" in a or "max" in a:  # opset < 11
        return a.get("min"), a.get("max")
    bounds: list[float | None] = []
    for ref in _inputs(node)[1:3]:
        value = ref.value if ref.kind is RefKind.VALUE else None
        bounds.append(float(value[0]) if value else None)
    bounds += [None] * (2 - len(bounds))
    return bounds[0], bounds[1]


_ELEMENTWISE = (
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Max",
    "Min",
    "Sum",
    "Mean",
    "Abs",
    "Neg",
    "Exp",
    "Log",
    "Sqrt",
    "Reciprocal",
    "Erf",
    "LeakyRelu",
    "PRelu",
    "HardSigmoid",
    "HardSwish",
    "Softplus",
    "Gelu",
    "Where",
    "Equal",
    "Less",
    "Greater",
    "Not",
    "And",
    "Or",
    "Cast",
    "IsNaN",
    "IsInf",
    *("Ceil", "Floor", "Round", "Sign", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan"),
    *("Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Xor", "LessOrEqual", "GreaterOrEqual", "Mod"),
    *("Mish", "Selu", "Celu", "ThresholdedRelu", "Shrink", "Softsign"),
)

_ANY_DTYPE = frozenset(
    {"Cast", "Where", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor"}
    | {"Gather", "Reshape", "Flatten", "Squeeze"}
    | {"Unsqueeze", "Identity", "Concat", "Transpose", "Slice", "Expand", "Shape"}
    # integer arithmetic a model does on the GPU too (position ids: a mask's running count, plus an offset)
    | {"Add", "Sub", "Mul", "Neg", "Abs", "Max", "Min", "Sum", "CumSum", "GatherElements", "GatherND", "Mod", "Sign"}
    | {"ArgMax", "ArgMin", "DepthToSpace", "SpaceToDepth", "Trilu"}
    # copies of indices (a detector's query indices tiled over a batch, split or padded)
    | {"Tile", "Split", "Pad", "ScatterND", "ScatterElements"}
    # a mask's length (onnxruntime-genai's seqlens_k = ReduceSum(attention_mask) - 1)
    | {"ReduceSum", "ReduceMax", "ReduceMin"}
)


@register_params(*_ELEMENTWISE)
def _elementwise(node: NetworkNode, dtype: str) -> ElementwiseParams | Unsupported:
    # Where keeps every operand in its place (which one is the condition): a constant one too, as the
    # small array it is (an attention mask's fill value: a scalar)
    where = node.op_type == "Where"
    shapes = tuple(_shape(r) for r in _inputs(node)) if where else tuple(_activation_shapes(node))
    if not shapes:
        return Unsupported(f"{node.op_type} without known input shapes")
    return ElementwiseParams(node.op_type, shapes, _out(node), dtype, tuple(sorted(_attrs(node).items())))


register_params("Gelu", "FastGelu", "BiasGelu", "QuickGelu", "BiasAdd", domain=MS_DOMAIN)(_elementwise)


@register_params("RotaryEmbedding")
@register_params("RotaryEmbedding", domain=MS_DOMAIN)
def _rotary_embedding(node: NetworkNode, dtype: str) -> ElementwiseParams | Unsupported:
    """ONNX's RotaryEmbedding (opset 23: ``X, cos_cache, sin_cache[, position_ids]``) and ONNX Runtime's
    (``input, position_ids, cos_cache, sin_cache``; position ids (batch, seq) or a (1,) offset). ``x`` is
    (batch, seq, heads * dim), its heads in ``num_heads`` (ONNX Runtime: else the caches' width), or (batch,
    heads, seq, dim); the caches (positions, rotary dim / 2), or (batch, seq, rotary dim / 2) without ids."""
    a = _attrs(node)
    ms = node.domain == MS_DOMAIN
    names = ("x", "pos", "cos", "sin") if ms else ("x", "cos", "sin", "pos")
    present = [(n, i) for i, n in enumerate(names) if _given(node, i) is not None]
    shape = {n: _in_shape(node, i) for n, i in present}
    x, cos = shape.get("x"), shape.get("cos")
    if not x or len(x) not in (3, 4) or not cos or shape.get("sin") != cos or ("pos" in shape and not shape["pos"]):
        return Unsupported(f"RotaryEmbedding of {x} with caches {cos} and {shape.get('sin')}")
    if ms and (int(a.get("is_packed_batching", 0) or 0) or float(a.get("scale", 1.0) or 1.0) != 1.0):
        return Unsupported("RotaryEmbedding with packed batching or a scale: not mapped yet")
    given_heads, given_rotary = int(a.get("num_heads", 0) or 0), int(a.get("rotary_embedding_dim", 0) or 0)
    if ms and given_rotary and not given_heads:
        return Unsupported("ONNX Runtime's RotaryEmbedding with rotary_embedding_dim but no num_heads (it refuses it)")
    half = cos[-1]
    heads = x[1] if len(x) == 4 else given_heads or (x[2] // (2 * half) if ms else 0)
    dim = x[3] if len(x) == 4 else (x[2] // heads if heads else 0)
    rotary = given_rotary or dim
    seq = x[1] if len(x) == 3 else x[2]
    pos = shape.get("pos")
    # ONNX Runtime's (1,) or scalar position_ids is the first token's position; (batch, seq) ones are ids
    positions = "none" if pos is None else ("offset" if ms and len(pos) <= 1 and math.prod(pos) == 1 else "ids")
    if not heads or (len(x) == 3 and heads * dim != x[2]) or 2 * half != rotary or rotary > dim:
        return Unsupported(f"RotaryEmbedding of {x} in {heads} heads with caches {cos}, rotary dim {rotary}")
    if positions == "none" and (len(cos) != 3 or cos[:2] != (x[0], seq)):
        return Unsupported(f"RotaryEmbedding of {x} without position ids: caches {cos}, not (batch, seq, half)")
    if positions == "offset" and seq > cos[0]:
        return Unsupported(f"RotaryEmbedding of {seq} positions from an offset over a cache of {cos[0]}")
    attributes = {"inputs": tuple(n for n, _ in present), "heads": heads, "positions": positions}
    attributes["interleaved"] = bool(int(a.get("interleaved", 0) or 0))
    return ElementwiseParams(
        "RotaryEmbedding", tuple(shape[n] for n, _ in present), _out(node), dtype, tuple(sorted(attributes.items()))
    )


@register_params("FusedMatMul", domain=MS_DOMAIN)
def _fused_matmul(node: NetworkNode, dtype: str) -> GemmParams | Unsupported:
    """ONNX Runtime's ``alpha * op(A) @ op(B)`` (``transA``/``transB`` of the last two axes): a MatMul
    with a transpose and a scale folded into its GEMM."""
    a = _attrs(node)
    if int(a.get("transBatchA", 0) or 0) or int(a.get("transBatchB", 0) or 0):
        return Unsupported("FusedMatMul with batch transposes: not one GEMM's layout")
    ta, tb = bool(int(a.get("transA", 0) or 0)), bool(int(a.get("transB", 0) or 0))
    sa, sb = _in_shape(node, 0), _in_shape(node, 1)
    if sa is None or sb is None or len(sa) < 2 or len(sb) < 2:
        return Unsupported("FusedMatMul without two operands of at least 2 axes")
    plain = _matmul_of(
        (*sa[:-2], sa[-1], sa[-2]) if ta else sa, (*sb[:-2], sb[-1], sb[-2]) if tb else sb, dtype, fold_rows=not ta
    )
    if isinstance(plain, Unsupported):
        return plain
    return replace(plain, trans_a=ta, trans_b=tb, alpha=float(a.get("alpha", 1.0)))


@register_params("MatMulNBits", domain=MS_DOMAIN)
def _matmul_nbits(node: NetworkNode, dtype: str) -> BlockQuantizedGemmParams | Unsupported:
    """Inputs ``A, B, scales[, zero_points][, g_idx][, bias]``; ``K``, ``N``, ``bits``, ``block_size``."""
    a = _attrs(node)
    k, n, bits, block = (int(a.get(key, 0) or 0) for key in ("K", "N", "bits", "block_size"))
    bits = bits or 4
    x, b, scales = _in_shape(node, 0), _in_shape(node, 1), _in_shape(node, 2)
    if bits not in (4, 8):
        return Unsupported(f"MatMulNBits of {bits}-bit weights: the kernel reads 4 and 8")
    if not x or x[-1] != k or b is None or scales is None or len(b) != 3 or b[0] != n:
        return Unsupported(f"MatMulNBits of {x} by {b} does not multiply K={k} by N={n}")
    if block < 1 or b[1] != -(-k // block) or b[2] * 8 != block * bits or b[2] % 4 or math.prod(scales) != n * b[1]:
        return Unsupported(f"MatMulNBits blocks of {block} in {b[1:]} with {scales} scales for K={k}")
    zero_points = _given(node, 3)
    if zero_points is not None and zero_points.dtype != "uint8":
        return Unsupported(f"MatMulNBits zero points as {zero_points.dtype} (the kernel reads packed uint8)")
    packed = n * ((b[1] * bits + 7) // 8)
    if zero_points is not None and math.prod(_shape(zero_points)) != packed:
        return Unsupported(f"MatMulNBits zero points of {_shape(zero_points)}: {packed} packed bytes expected")
    if _given(node, 4) is not None:
        return Unsupported("MatMulNBits with g_idx (act-order): the kernel reads blocks in order")
    return BlockQuantizedGemmParams(
        "MatMulNBits",
        x,
        b,
        scales,
        _shape(zero_points) if zero_points is not None else (),
        _given(node, 5) is not None,
        n,
        k,
        bits,
        block,
        dtype,
    )


@register_params("Trilu")
def _trilu(node: NetworkNode, dtype: str) -> DataMovementParams | Unsupported:
    """A triangle of the last two axes; its diagonal ``k`` from the constant input, as an attribute."""
    x, k = _in_shape(node, 0), _given(node, 1)
    if x is None:
        return Unsupported("Trilu without a known input shape")
    if k is not None and (k.kind is not RefKind.VALUE or not k.value):
        return Unsupported("Trilu with a diagonal the model computes")
    attrs = {**_attrs(node), "k": int(k.value[0]) if k is not None and k.value else 0}
    return DataMovementParams("Trilu", (x,), _out(node), dtype, tuple(sorted(attrs.items())))


@register_params("CumSum")
def _cumsum(node: NetworkNode, dtype: str) -> ElementwiseParams | Unsupported:
    """A running sum along the constant ``axis`` input; ``exclusive`` and ``reverse`` as attributes."""
    refs, a = _inputs(node), _attrs(node)
    x = _in_shape(node, 0)
    if x is None or len(refs) < 2 or refs[1].kind is not RefKind.VALUE or not refs[1].value:
        return Unsupported("CumSum without a known input shape and a constant axis")
    axis = int(refs[1].value[0])
    if not -len(x) <= axis < max(len(x), 1):
        return Unsupported(f"CumSum axis {axis} out of range for rank {len(x)}")
    flags = (("exclusive", int(a.get("exclusive", 0))), ("reverse", int(a.get("reverse", 0))))
    return ElementwiseParams("CumSum", (x,), _out(node), dtype, (("axis", axis % max(len(x), 1)), *flags))


# quantized integer types a Q/DQ kernel converts to and from: their ranges (QuantizeLinear saturates)
QUANTIZED_RANGES = {
    "int8": (-128, 127),
    "uint8": (0, 255),
    "int16": (-32768, 32767),
    "uint16": (0, 65535),
    "int32": (-(2**31), 2**31 - 1),  # DequantizeLinear only (a bias): ONNX quantizes to none
}
# ops whose data type is their output's: a quantized input, a condition first
# typed by their output: what a dequantisation makes, and the data a gather reads or a scatter writes (a constant
# table or cache the indices pick from is not an activation: the indices are, int64)
_OUTPUT_TYPED = frozenset(
    {"DequantizeLinear", "Where", "Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements"}
)


@register_params("QuantizeLinear", "DequantizeLinear")
def _quantization(node: NetworkNode, dtype: str) -> ElementwiseParams | Unsupported:
    """One element-wise kernel: ``saturate(round(x / scale) + zero_point)``, or ``(x - zero_point) * scale``.

    ``inputs``: the data, then the scale and the zero point, both shaped to broadcast against the data
    (a scalar per tensor; per axis, the axis's length there and 1 elsewhere). The attribute
    ``quantized`` names the integer type."""
    op, a = node.op_type, _attrs(node)
    refs = _inputs(node)
    x, scale = _in_shape(node, 0), _in_shape(node, 1)
    if x is None or scale is None:
        return Unsupported(f"{op} without a known input or scale shape")
    if int(a.get("block_size", 0) or 0):
        return Unsupported(f"{op} with blocks of {a['block_size']} (blocked quantization): no kernel in benanza")
    if op == "QuantizeLinear":
        quantized = node.outputs[0].dtype
    else:
        quantized = refs[0].dtype or ""
    if quantized not in QUANTIZED_RANGES:
        known = ", ".join(QUANTIZED_RANGES)
        return Unsupported(f"{op} of {quantized or 'unknown'} data: the GPU runtime's Q/DQ kernels take {known}")
    if len(scale) > 1:
        return Unsupported(f"{op} with a {list(scale)} scale: per-tensor and per-axis scales only")
    if scale and scale[0] != 1:  # per axis
        axis = int(a.get("axis", 1))
        if not -len(x) <= axis < len(x) or x[axis] != scale[0]:
            return Unsupported(f"{op} scale of {scale[0]} along axis {axis} of {x}")
        broadcast = tuple(e if d == axis % len(x) else 1 for d, e in enumerate(x))
    else:
        broadcast = ()
    return ElementwiseParams(op, (x, broadcast, broadcast), _out(node), dtype, (("quantized", quantized),))


_VIEWS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout")
_MOVES = (
    "Concat",
    "Transpose",
    "Slice",
    "Pad",
    "Gather",
    "GatherElements",
    "GatherND",
    "Expand",
    "Tile",
    "Split",
    "Resize",
    "Upsample",
    "GridSample",
    "ScatterND",
    "ScatterElements",
    "TopK",  # the values and their indices: the parameters carry the values' shape
    "DepthToSpace",
    "SpaceToDepth",
)


_INDEXED = frozenset({"GatherElements", "GatherND", "ScatterND", "ScatterElements"})


@register_params(*_VIEWS, *_MOVES)
def _data_movement(node: NetworkNode, dtype: str) -> DataMovementParams | Unsupported:
    op = node.op_type
    # the gathers' index operand is where they read, a constant one too (a mask's computed positions
    # folded at a fixed shape); the others' small constants are parameters (pads, axes, sizes)
    shapes = tuple(_shape(r) for r in _inputs(node)[:3]) if op in _INDEXED else tuple(_activation_shapes(node))
    a = _attrs(node)
    if op == "Resize" and node.opset < 11:  # Resize-10 samples as Upsample does: no attributes say how
        a = {**a, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    if op == "Split":  # the parts' sizes as the outputs have them: an input of opset 13's, num_outputs' uneven last
        x, parts = _in_shape(node, 0), [_out(node, i) for i in range(len(node.outputs))]
        axis = int(a.get("axis", 0))
        if x and -len(x) <= axis < len(x) and all(len(y) == len(x) for y in parts):
            a = {**a, "split": tuple(y[axis] for y in parts)}
    attrs = tuple(sorted(a.items()))
    if op == "Dropout" and (len(node.outputs) > 1 or _attrs(node).get("training_mode")):
        return Unsupported("Dropout with a mask output or in training mode")
    return DataMovementParams(op, shapes, _out(node), dtype, attrs, view=op in _VIEWS)


# ------------------------------------------------------------------------ fusion


_FUSABLE_ACTIVATIONS = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Elu": "elu"}


def fused_conv(network: Network, dtype: str | None = None) -> ConvParams | Unsupported:
    """The fused call of a Conv [+ BatchNormalization] [+ Add(bias)] [+ activation] chain.

    The pattern Benanza measures with ``cudnnConvolutionBiasActivationForward`` and cuDNN's
    graph API: inference frameworks fold a BatchNormalization into the convolution's weights
    and bias, so it costs nothing at run time; a per-channel Add is the bias; the activation
    is applied in the same kernel. Anything else in the chain, or a chain that branches, is
    not this pattern.
    """
    nodes = network.nodes
    if not nodes or nodes[0].op_type != "Conv":
        return Unsupported("not a convolution chain")
    conv = layer_params(network, 0, dtype)
    if isinstance(conv, Unsupported):
        return conv
    assert isinstance(conv, ConvParams)
    bias, activation, coef = conv.bias, None, 0.0
    for pos in range(1, len(nodes)):
        node = resolved_node(network, pos)
        refs = [r for r in node.inputs if r.is_activation]
        if len(refs) != 1 or refs[0].kind is not RefKind.NODE or refs[0].node != pos - 1:
            return Unsupported(f"{node.op_type} does not read only the previous node: not a fusable chain")
        op = node.op_type
        if activation is not None:
            return Unsupported(f"{op} after the activation: not a conv+bias+activation chain")
        if op == "BatchNormalization":
            bias = True
        elif op == "Add" and _per_channel(node, conv.y):
            bias = True
        elif op in _FUSABLE_ACTIVATIONS:
            activation = _FUSABLE_ACTIVATIONS[op]
            coef = float(_attrs(node).get("alpha", 1.0)) if op == "Elu" else 0.0
        elif op == "Clip" and _clip_bounds(node)[0] == 0.0 and _clip_bounds(node)[1] is not None:
            activation, coef = "clipped_relu", float(_clip_bounds(node)[1] or 0.0)
        else:
            return Unsupported(f"{op} in a convolution chain: cuDNN fuses bias and activation only")
    return replace(conv, bias=bias, activation=activation, activation_coef=coef)


def _per_channel(node: NetworkNode, y: Shape) -> bool:
    """An Add of a constant shaped like a per-channel bias of ``y`` (C, C x 1 x 1, 1 x C x 1 x 1)."""
    consts = [r for r in node.inputs if r.is_constant]
    if len(consts) != 1:
        return False
    shape = list(_shape(consts[0]))
    while shape and shape[0] == 1 and len(shape) > len(y) - 1:
        shape.pop(0)
    return len(y) > 1 and math.prod(shape) == y[1] and (not shape or shape[0] == y[1])
