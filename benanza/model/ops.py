"""Per-op knowledge: attribute normalisation, value inputs, FLOPs.

One ``OpInfo`` per op type, registered in ``OPS``. Conventions, stated once:

- FLOPs count arithmetic operations with a multiply-add as 2; quantized ops count their
  integer operations the same way; a transcendental function counts as 1.
- Data movement (Reshape, Transpose, Concat, Gather, ...) has 0 FLOPs; its cost is bytes.
- An op with no entry still becomes a layer (when its schema and shapes are known): its
  FLOPs are ``None`` ("unknown"), never 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from benanza.model.graph import TensorSpec


@dataclass(frozen=True, slots=True)
class OpContext:
    """What an op handler sees: the layer's tensors (absent inputs are ``None``)."""

    inputs: tuple[TensorSpec | None, ...]
    outputs: tuple[TensorSpec, ...]
    opset: int

    def inp(self, i: int) -> TensorSpec | None:
        return self.inputs[i] if i < len(self.inputs) else None


Normaliser = Callable[[dict[str, Any], OpContext], dict[str, Any]]
FlopCounter = Callable[[dict[str, Any], OpContext], int]


@dataclass(frozen=True, slots=True)
class OpInfo:
    """What benanza knows about one op type.

    Attributes:
        normalise: fills defaults the schema leaves implicit (strides, pads, kernel shape),
            resolves ``auto_pad`` and negative axes. Runs after the schema's own defaults.
        flops: arithmetic operations of one call, from attributes and shapes.
        value_inputs: inputs whose constant values are semantics, not weights (a Reshape's
            target shape, a Pad's pads), by index, with the name they take in the key; ONNX
            moved many attributes to inputs across opsets and this keeps their keys aligned.
    """

    normalise: Normaliser | None = None
    flops: FlopCounter | None = None
    value_inputs: Mapping[int, str] = field(default_factory=dict)


OPS: dict[tuple[str, str], OpInfo] = {}


def register(op_types: Iterable[str], info: OpInfo, domain: str = "") -> None:
    """Register ``info`` for each op type in ``domain``."""
    for op in op_types:
        OPS[(domain, op)] = info


def lookup(op_type: str, domain: str = "") -> OpInfo | None:
    """The op's info, or None when benanza has no specific knowledge of it."""
    return OPS.get((_canonical_domain(domain), op_type))


def _canonical_domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


# ---------------------------------------------------------------- normalisers


def _spatial(ctx: OpContext) -> int:
    x = ctx.inp(0)
    return max(len(x.shape) - 2, 0) if x is not None else 0


def _same_pads(in_size: int, k: int, stride: int, dilation: int, upper: bool) -> tuple[int, int]:
    out = math.ceil(in_size / stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - in_size, 0)
    small, big = total // 2, total - total // 2
    return (small, big) if upper else (big, small)


def _window_defaults(attrs: dict[str, Any], ctx: OpContext, kernel: tuple[int, ...]) -> dict[str, Any]:
    """Strides, dilations, pads and auto_pad made explicit for Conv-like and pooling ops."""
    n = len(kernel)
    attrs["kernel_shape"] = tuple(kernel)
    attrs["strides"] = tuple(attrs.get("strides") or (1,) * n)
    attrs["dilations"] = tuple(attrs.get("dilations") or (1,) * n)
    pads = tuple(attrs.get("pads") or (0,) * (2 * n))
    auto_pad = attrs.get("auto_pad", "NOTSET")
    x = ctx.inp(0)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER") and x is not None:
        begins, ends = [], []
        for i in range(n):
            b, e = _same_pads(
                x.shape[2 + i], kernel[i], attrs["strides"][i], attrs["dilations"][i], auto_pad == "SAME_UPPER"
            )
            begins.append(b)
            ends.append(e)
        pads = tuple(begins + ends)
    elif auto_pad == "VALID":
        pads = (0,) * (2 * n)
    attrs["pads"] = pads
    attrs["auto_pad"] = "NOTSET"
    return attrs


def _conv(attrs: dict[str, Any], ctx: OpContext) -> dict[str, Any]:
    w = ctx.inp(1)
    kernel = tuple(attrs.get("kernel_shape") or (w.shape[2:] if w is not None else ()))
    return _window_defaults(attrs, ctx, kernel)


def _conv_transpose(attrs: dict[str, Any], ctx: OpContext) -> dict[str, Any]:
    w, x, y = ctx.inp(1), ctx.inp(0), ctx.outputs[0]
    kernel = tuple(attrs.get("kernel_shape") or (w.shape[2:] if w is not None else ()))
    n = len(kernel)
    attrs["kernel_shape"] = kernel
    attrs["strides"] = tuple(attrs.get("strides") or (1,) * n)
    attrs["dilations"] = tuple(attrs.get("dilations") or (1,) * n)
    attrs["output_padding"] = tuple(attrs.get("output_padding") or (0,) * n)
    if attrs.get("output_shape") or attrs.get("auto_pad", "NOTSET") != "NOTSET":
        # Resolve to explicit pads from the inferred output shape (ONNX ConvTranspose spec).
        begins, ends = [], []
        for i in range(n):
            total = (
                attrs["strides"][i] * (x.shape[2 + i] - 1)
                + attrs["output_padding"][i]
                + (kernel[i] - 1) * attrs["dilations"][i]
                + 1
                - y.shape[2 + i]
            )
            total = max(total, 0)
            # only SAME_UPPER puts the odd pixel at the end; SAME_LOWER and an explicit
            # output_shape put it at the start (the spec, onnx.reference and onnxruntime agree)
            upper = attrs.get("auto_pad") == "SAME_UPPER"
            b = total // 2 if upper else total - total // 2
            begins.append(b)
            ends.append(total - b)
        attrs["pads"] = tuple(begins + ends)
    else:
        attrs["pads"] = tuple(attrs.get("pads") or (0,) * (2 * n))
    attrs.pop("output_shape", None)
    attrs["auto_pad"] = "NOTSET"
    return attrs


def _pool(attrs: dict[str, Any], ctx: OpContext) -> dict[str, Any]:
    return _window_defaults(attrs, ctx, tuple(attrs["kernel_shape"]))


def _rank(t: TensorSpec | None) -> int:
    return len(t.shape) if t is not None else 0


def _axis(attrs: dict[str, Any], ctx: OpContext) -> dict[str, Any]:
    """Negative ``axis`` made positive against the first input's rank."""
    if isinstance(attrs.get("axis"), int) and attrs["axis"] < 0:
        attrs["axis"] += _rank(ctx.inp(0))
    return attrs


def _axes_of(rank_of: Callable[[OpContext], int]) -> Normaliser:
    def normalise(attrs: dict[str, Any], ctx: OpContext) -> dict[str, Any]:
        if attrs.get("axes") is not None:
            r = rank_of(ctx)
            attrs["axes"] = tuple(sorted(a + r if a < 0 else a for a in attrs["axes"]))
        return _axis(attrs, ctx)

    return normalise


def _reduce(attrs: dict[str, Any], ctx: OpContext) -> dict[str, Any]:
    """Reduce ops, with ``noop_with_empty_axes=0`` dropped so opsets 13 and 18 key alike.

    0 is the attribute's default and how every Reduce behaved before it came with axes as
    an input; keeping it would split one layer into two keys by opset.
    """
    if attrs.get("noop_with_empty_axes") == 0:
        del attrs["noop_with_empty_axes"]
    return _axes_of(lambda c: _rank(c.inp(0)))(attrs, ctx)


def _batch_norm(attrs: dict[str, Any], ctx: OpContext) -> dict[str, Any]:
    """BatchNormalization, keyed the same at opsets 7, 9 and 15.

    ``spatial=1`` (opsets 7-8) and ``training_mode=0`` (opset 14+) are defaults that mean
    what opset 9 does without them, so they are dropped.
    """
    if attrs.get("training_mode") == 0:
        del attrs["training_mode"]
    if attrs.get("spatial") == 1:
        del attrs["spatial"]
    return attrs


def _softmax(attrs: dict[str, Any], ctx: OpContext) -> dict[str, Any]:
    """Softmax-family semantics changed in opset 13 (2-D coercion to one axis)."""
    attrs = _axis(attrs, ctx)
    if ctx.opset < 13 and attrs.get("axis") != _rank(ctx.inp(0)) - 1:
        attrs["coerce_2d"] = 1  # flatten at axis, then softmax over the trailing block
    return attrs


# ---------------------------------------------------------------- FLOP counters


def _numel(t: TensorSpec | None) -> int:
    return t.numel if t is not None else 0


def _out_numel(ctx: OpContext) -> int:
    return sum(o.numel for o in ctx.outputs)


def _conv_flops(attrs: dict[str, Any], ctx: OpContext) -> int:
    w, y = ctx.inp(1), ctx.outputs[0]
    per_output = math.prod(w.shape[1:])  # (C_in / group) * prod(kernel)
    flops = 2 * y.numel * per_output
    if ctx.inp(2) is not None:
        flops += y.numel
    return flops


def _conv_transpose_flops(attrs: dict[str, Any], ctx: OpContext) -> int:
    x, w = ctx.inp(0), ctx.inp(1)
    # every input element scatters into (C_out / group) * prod(kernel) outputs
    flops = 2 * x.numel * math.prod(w.shape[1:])
    if ctx.inp(2) is not None:
        flops += ctx.outputs[0].numel
    return flops


def _gemm_flops(attrs: dict[str, Any], ctx: OpContext) -> int:
    a, y = ctx.inp(0), ctx.outputs[0]
    k = a.shape[0] if attrs.get("transA") else a.shape[1]
    flops = 2 * y.numel * k
    if ctx.inp(2) is not None:
        flops += y.numel
    return flops


def _matmul_flops(attrs: dict[str, Any], ctx: OpContext) -> int:
    a = ctx.inp(0)
    return 2 * ctx.outputs[0].numel * a.shape[-1]


def _qlinear_conv_flops(attrs: dict[str, Any], ctx: OpContext) -> int:
    w, y = ctx.inp(3), ctx.outputs[0]
    return 2 * y.numel * math.prod(w.shape[1:])


def _qlinear_matmul_flops(attrs: dict[str, Any], ctx: OpContext) -> int:
    return 2 * ctx.outputs[0].numel * ctx.inp(0).shape[-1]


def _pool_flops(attrs: dict[str, Any], ctx: OpContext) -> int:
    return ctx.outputs[0].numel * math.prod(attrs["kernel_shape"])


def _per_input_element(k: int) -> FlopCounter:
    return lambda attrs, ctx: k * _numel(ctx.inp(0))


def _per_output_element(k: int) -> FlopCounter:
    return lambda attrs, ctx: k * _out_numel(ctx)


def _variadic_flops(attrs: dict[str, Any], ctx: OpContext) -> int:
    present = sum(1 for i in ctx.inputs if i is not None)
    return max(present - 1, 1) * _out_numel(ctx)


def _lrn_flops(attrs: dict[str, Any], ctx: OpContext) -> int:
    # square-and-sum over the window, then scale, power and divide per element
    return _numel(ctx.inp(0)) * (2 * int(attrs["size"]) + 3)


def _zero(attrs: dict[str, Any], ctx: OpContext) -> int:
    return 0


# ---------------------------------------------------------------- the table

register(["Conv"], OpInfo(_conv, _conv_flops))
register(["ConvTranspose"], OpInfo(_conv_transpose, _conv_transpose_flops))
register(["ConvInteger"], OpInfo(_conv, _conv_flops))
register(
    ["QLinearConv"],
    OpInfo(
        lambda a, c: _window_defaults(a, c, tuple(a.get("kernel_shape") or c.inp(3).shape[2:])), _qlinear_conv_flops
    ),
)
register(["Gemm"], OpInfo(None, _gemm_flops))
register(["MatMul", "MatMulInteger"], OpInfo(None, _matmul_flops))
register(["QLinearMatMul"], OpInfo(None, _qlinear_matmul_flops))
register(["MaxPool", "AveragePool", "LpPool"], OpInfo(_pool, _pool_flops))
register(["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"], OpInfo(None, _per_input_element(1)))
register(["BatchNormalization"], OpInfo(_batch_norm, _per_input_element(2)))
register(["InstanceNormalization", "GroupNormalization"], OpInfo(None, _per_input_element(5)))
register(["LayerNormalization"], OpInfo(_axis, _per_input_element(5)))
register(["RMSNormalization"], OpInfo(_axis, _per_input_element(4)))
register(["LRN"], OpInfo(None, _lrn_flops))
register(["Softmax", "LogSoftmax", "Hardmax"], OpInfo(_softmax, _per_input_element(5)))
register(
    [
        "Relu",
        "LeakyRelu",
        "PRelu",
        "Sigmoid",
        "HardSigmoid",
        "Tanh",
        "Elu",
        "Selu",
        "Celu",
        "Softplus",
        "Softsign",
        "HardSwish",
        "Mish",
        "Gelu",
        "Erf",
        "Exp",
        "Log",
        "Sqrt",
        "Reciprocal",
        "Neg",
        "Abs",
        "Sign",
        "Floor",
        "Ceil",
        "Round",
        "Sin",
        "Cos",
        "Tan",
        "Pow",
        "Not",
        "IsNaN",
        "IsInf",
        "ThresholdedRelu",
        "Shrink",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Mod",
        "And",
        "Or",
        "Xor",
        "Equal",
        "Less",
        "Greater",
        "LessOrEqual",
        "GreaterOrEqual",
        "Where",
        "BitShift",
        "QuantizeLinear",
        "DequantizeLinear",
        "DynamicQuantizeLinear",
    ],
    OpInfo(None, _per_output_element(1)),
)
register(["Clip"], OpInfo(None, _per_output_element(1), {1: "min", 2: "max"}))
register(["Sum", "Max", "Min", "Mean"], OpInfo(None, _variadic_flops))
register(
    [
        "ReduceSum",
        "ReduceMean",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceSumSquare",
    ],
    OpInfo(_reduce, _per_input_element(1), {1: "axes"}),
)
register(["ArgMax", "ArgMin", "CumSum"], OpInfo(_axis, _per_input_element(1)))
register(["TopK"], OpInfo(_axis, _per_input_element(1), {1: "k"}))
register(["Squeeze"], OpInfo(_axes_of(lambda c: _rank(c.inp(0))), _zero, {1: "axes"}))
register(["Unsqueeze"], OpInfo(_axes_of(lambda c: len(c.outputs[0].shape)), _zero, {1: "axes"}))
register(["Split"], OpInfo(_axis, _zero, {1: "split"}))
register(["Pad"], OpInfo(None, _zero, {1: "pads", 2: "constant_value", 3: "axes"}))
register(["Reshape"], OpInfo(None, _zero, {1: "shape"}))
register(["Expand"], OpInfo(None, _zero, {1: "shape"}))
register(["Tile"], OpInfo(None, _zero, {1: "repeats"}))
register(["Slice"], OpInfo(None, _zero, {1: "starts", 2: "ends", 3: "axes", 4: "steps"}))
register(["Resize", "Upsample"], OpInfo(None, _per_output_element(4)))
register(
    [
        "Concat",
        "Gather",
        "GatherElements",
        "GatherND",
        "Flatten",
        "Transpose",
        "Identity",
        "Dropout",
        "Cast",
        "CastLike",
        "Shape",
        "Size",
        "DepthToSpace",
        "SpaceToDepth",
        "ScatterElements",
        "ScatterND",
        "NonZero",
        "OneHot",
        "Trilu",
        "EyeLike",
    ],
    OpInfo(_axis, _zero),
)


# ---------------------------------------------------------------- ONNX Runtime's contrib ops (com.microsoft)
# What quantized and fused exports of today are made of: onnxruntime-genai's int4 decoders
# (MatMulNBits, GroupQueryAttention, SkipSimplifiedLayerNormalization, RotaryEmbedding), ORT's
# transformer optimizer (Attention, SkipLayerNormalization, BiasGelu, FastGelu), QOperator int8
# (QGemm, QLinearAdd...). Counted from shapes and attributes as the standard ops above; the
# attention ops from their output and the length they attend over (a present KV cache's, else the
# key's), which a decoder's run-time lengths may shorten. No normaliser: their keys stay as stored.

MS = "com.microsoft"


def _k_times_outputs(k: Callable[[dict[str, Any], OpContext], int]) -> FlopCounter:
    """2 x output elements x the reduced dimension (a matrix product of any form)."""
    return lambda attrs, ctx: 2 * ctx.outputs[0].numel * int(k(attrs, ctx))


def _attended_length(ctx: OpContext, present: int | None, key: int | None, axis: int) -> int:
    """The length an attention op attends over: its present KV cache's (output ``present``, at ``axis``),
    else its key input's sequence (``key``: rank 3 ``[B, L, D]``, 4 ``[B, H, L, d]`` or 5, packed K and V
    ``[B, L, H, 2, d]``), else the query's (packed Q, K and V attend over their own tokens)."""
    cache = ctx.outputs[present] if present is not None and present < len(ctx.outputs) else None
    if cache is not None and len(cache.shape) > axis:
        return cache.shape[axis]
    k = ctx.inp(key) if key is not None else None
    if k is not None and len(k.shape) in (3, 4, 5):
        return k.shape[2] if len(k.shape) == 4 else k.shape[1]
    return ctx.outputs[0].shape[-2] if len(ctx.outputs[0].shape) >= 2 else 1


def _attention_flops(weights: int, past: int) -> FlopCounter:
    """Attention with its QKV projection inside (``Attention``, ``QAttention``): the projection, then Q.K and
    the weighted sum over the attended length (a ``past`` cache ``[2, B, H, P, d]`` adds P)."""

    def count(attrs: dict[str, Any], ctx: OpContext) -> int:
        x, w, out = ctx.inp(0), ctx.inp(weights), ctx.outputs[0]
        projection = 2 * x.numel * w.shape[-1] if x is not None and w is not None else 0
        cache = ctx.inp(past)
        length = out.shape[-2] + (cache.shape[3] if cache is not None and len(cache.shape) == 5 else 0)
        return projection + 4 * out.numel * length

    return count


def _separate_attention_flops(present: int, key: int) -> FlopCounter:
    """Attention over projected inputs (``GroupQueryAttention``, ``MultiHeadAttention``): Q.K and the
    weighted sum, 2 x 2 x output elements x attended length."""
    return lambda attrs, ctx: 4 * ctx.outputs[0].numel * _attended_length(ctx, present, key, 2)


register(["MatMulNBits", "MatMulBnb4"], OpInfo(None, _k_times_outputs(lambda a, c: a["K"])), MS)
register(
    ["FusedMatMul"],
    OpInfo(None, _k_times_outputs(lambda a, c: c.inp(0).shape[-2] if a.get("transA") else c.inp(0).shape[-1])),
    MS,
)
register(
    ["MatMulIntegerToFloat", "DynamicQuantizeMatMul"],
    OpInfo(None, _k_times_outputs(lambda a, c: c.inp(0).shape[-1])),
    MS,
)
register(["QGemm", "FusedGemm"], OpInfo(None, _gemm_flops), MS)
register(["Attention"], OpInfo(None, _attention_flops(weights=1, past=4)), MS)
register(["QAttention"], OpInfo(None, _attention_flops(weights=1, past=8)), MS)
register(["GroupQueryAttention", "SparseAttention"], OpInfo(None, _separate_attention_flops(present=1, key=1)), MS)
register(
    ["MultiHeadAttention", "DecoderMaskedMultiHeadAttention"],
    OpInfo(None, _separate_attention_flops(present=1, key=1)),
    MS,
)
# ONNX's own (opset 23), what torch.onnx emits for scaled_dot_product_attention at opset 23: Q [B, H, S, d] or
# [B, S, H*d], its present key (output 1) or key input giving the length attended over; RoPE per element
register(["Attention"], OpInfo(None, _separate_attention_flops(present=1, key=1)))
register(["RotaryEmbedding"], OpInfo(None, _per_output_element(3)))
register(["SkipLayerNormalization"], OpInfo(None, _per_input_element(6)), MS)
register(["SkipSimplifiedLayerNormalization"], OpInfo(None, _per_input_element(5)), MS)
register(["SimplifiedLayerNormalization"], OpInfo(None, _per_input_element(4)))  # ORT's RMS norm, default domain
register(["EmbedLayerNormalization"], OpInfo(None, _per_output_element(7)), MS)
register(["Gelu"], OpInfo(None, _per_output_element(5)), MS)
register(["BiasGelu"], OpInfo(None, _per_output_element(6)), MS)
register(["FastGelu"], OpInfo(None, _per_output_element(8)), MS)
register(["QuickGelu"], OpInfo(None, _per_output_element(3)), MS)
register(["BiasAdd"], OpInfo(None, _per_output_element(2)), MS)
register(["RotaryEmbedding"], OpInfo(None, _per_output_element(3)), MS)
register(["BiasSoftmax"], OpInfo(None, _per_output_element(6)), MS)
register(
    ["QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearWhere"],
    OpInfo(None, _per_output_element(1)),
    MS,
)
register(["QLinearGlobalAveragePool"], OpInfo(None, _per_input_element(1)), MS)
register(["QLinearSoftmax"], OpInfo(None, _per_input_element(5)), MS)
register(["GatherBlockQuantized", "QLinearConcat"], OpInfo(None, _zero), MS)  # data movement: its cost is bytes
