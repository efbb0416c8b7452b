"""Attention layers on the GPU: ONNX's ``Attention`` and ONNX Runtime's ``MultiHeadAttention``,
``GroupQueryAttention`` and ``Attention`` (its QKV projection inside), two ways each.

- ``cudnn-graph``: cuDNN's fused scaled-dot-product attention, the frontend's ``sdpa`` node (a flash
  attention: Q.K^T, the mask and the softmax stay on chip, one kernel). Every engine configuration the
  heuristics list is a candidate, as for the other graphs. cuDNN runs it in float16 and bfloat16 only,
  for head dimensions a multiple of 8, without soft-capping; a layer outside that has no such candidate
  (the reason is kept with the layer's build errors).
- ``cupy``: the unfused attention a framework runs when it has no fused kernel, written against an array
  module (NumPy in the CPU tests, CuPy on the device): two batched GEMMs (cuBLAS, through CuPy's matmul;
  the query heads of a group in one product over their shared key head, no repeated copy of K and V)
  around the scale, mask and softmax as CuPy's element-wise and reduction kernels. Every layer has it,
  float32 included. A framework's unfused path fuses the masked softmax into one kernel: this candidate
  launches several, so it bounds that path from above; the layer's figure is its fastest candidate.

Both candidates first do the layer's own bookkeeping, as ONNX Runtime's fused kernels do it: ONNX
Runtime's Attention's projection (one GEMM into Q, K and V side by side, which cuDNN then reads in place
through strides), MultiHeadAttention's bias added to Q, K and V, GroupQueryAttention's rotary embedding
of Q and the new K, and the new keys and values appended to the KV cache in place. The cache holds the
attended length, as ONNX Runtime's shared past/present buffer does: copying the whole past into a
separate ``present`` output (what the ONNX op describes) is not counted. The masks are given to cuDNN as
the one additive bias a framework makes of them once (a boolean mask as 0 or -inf, a key padding mask or
lengths over every query).

What the parameters say is derived in ``benanza.runtimes.cuda.params`` (``AttentionParams``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from benanza.errors import UnsupportedLayer
from benanza.runtimes.cuda.candidate import Candidate
from benanza.runtimes.cuda.framework import InputSpec, LayerCall, rope

SDPA_DTYPES = ("float16", "bfloat16")


# ------------------------------------------------------------------------ operands


def operands(p: Any) -> list[tuple[str, InputSpec]]:
    """The arrays the layer reads, named, in the order of its ``LayerCall``'s inputs.

    ``q``, ``k``, ``v``: the query and the new keys and values, in the layer's layouts, or, for a layer
    with a ``projection``, ``x`` (batch, q_len, projection) and ``weights`` (projection, qkv_width), and
    ``qkv`` (batch, q_len, qkv_width), where the call writes the projection; a packed layer's ``qkv`` (or
    ``q`` and ``kv``) as its ``packing`` says; ``qkv_bias``; ``k_cache``,
    ``v_cache``: the cache (batch, kv_heads, kv_len, dim) whose first ``past`` rows hold the past (the call
    writes the rest); ``mask``; ``key_mask`` (batch, kv_len), int32 as ONNX Runtime reads it; ``cos``,
    ``sin``: the rotary caches.
    """
    b, dt = p.batch, p.dtype
    if p.projection:
        out = [
            ("x", InputSpec((b, p.q_len, p.projection), dt)),
            ("weights", InputSpec((p.projection, p.qkv_width), dt)),
            ("qkv", InputSpec((b, p.q_len, p.qkv_width), dt)),
        ]
    elif p.packing == "qkv_columns":
        out = [("qkv", InputSpec((b, p.q_len, p.qkv_width), dt))]
    elif p.packing == "qkv_heads":
        out = [("qkv", InputSpec((b, p.q_len, p.q_heads, 3, p.head_dim), dt))]
    elif p.packing == "kv_heads":
        out = [
            ("q", InputSpec(_layout(b, p.q_heads, p.q_len, p.head_dim, p.seq_major), dt)),
            ("kv", InputSpec((b, p.new_len, p.kv_heads, 2, p.head_dim), dt)),
        ]
    else:
        out = [
            ("q", InputSpec(_layout(b, p.q_heads, p.q_len, p.head_dim, p.seq_major), dt)),
            ("k", InputSpec(_layout(b, p.kv_heads, p.new_len, p.head_dim, p.kv_seq_major), dt)),
            ("v", InputSpec(_layout(b, p.kv_heads, p.new_len, p.v_head_dim, p.kv_seq_major), dt)),
        ]
    if p.qkv_bias:
        out.append(("qkv_bias", InputSpec((p.qkv_width,), dt)))
    if p.past:
        out.append(("k_cache", InputSpec((b, p.kv_heads, p.kv_len, p.head_dim), dt)))
        out.append(("v_cache", InputSpec((b, p.kv_heads, p.kv_len, p.v_head_dim), dt)))
    if p.mask:
        out.append(("mask", InputSpec(p.mask, p.mask_dtype or dt)))
    if p.key_mask:
        out.append(("key_mask", InputSpec((b, p.kv_len), "int32")))
    if p.key_lengths:  # every key valid: the whole work, as benanza feeds a model's masks
        out.append(("key_lengths", InputSpec((b,), "int32", value=p.kv_len)))
    if p.qk_norm:
        out.append(("q_norm", InputSpec((p.head_dim,), dt)))
        out.append(("k_norm", InputSpec((p.head_dim,), dt)))
    if p.rotary:
        out.append(("cos", InputSpec(p.rotary_cache, dt)))
        out.append(("sin", InputSpec(p.rotary_cache, dt)))
    return out


def output_spec(p: Any) -> InputSpec:
    return InputSpec(_layout(p.batch, p.q_heads, p.q_len, p.v_head_dim, p.seq_major), p.dtype)


def _layout(batch: int, heads: int, seq: int, dim: int, seq_major: bool) -> tuple[int, ...]:
    return (batch, seq, heads * dim) if seq_major else (batch, heads, seq, dim)


def _heads(x: Any, heads: int, seq_major: bool) -> Any:
    """(batch, heads, seq, dim) view of ``x`` in either layout."""
    if not seq_major:
        return x
    b, s, width = x.shape
    return x.reshape(b, s, heads, width // heads).transpose(0, 2, 1, 3)


# ------------------------------------------------------------------------ the layer's bookkeeping


def prepare(p: Any, xp: Any, a: dict[str, Any]) -> tuple[Any, Any, Any]:
    """Q, K and V as (batch, heads, seq, dim) arrays the attention reads: projected (into ``qkv``), the bias
    added, the rotary embedding applied, the new keys and values appended to the cache (then K and V)."""
    qh, kh, vh = heads_of(p, xp, a)
    if p.qkv_bias and not p.projection:
        bias = a["qkv_bias"]
        qd, kd = p.q_heads * p.head_dim, p.kv_heads * p.head_dim
        qh = qh + bias[:qd].reshape(1, p.q_heads, 1, p.head_dim)
        kh = kh + bias[qd : qd + kd].reshape(1, p.kv_heads, 1, p.head_dim)
        vh = vh + bias[qd + kd :].reshape(1, p.kv_heads, 1, p.v_head_dim)
    if p.qk_norm:
        qh, kh = rms_norm(xp, qh, a["q_norm"], p.qk_norm), rms_norm(xp, kh, a["k_norm"], p.qk_norm)
    if p.rotary:
        qh = rotate(xp, qh, a["cos"], a["sin"], p.past, p.interleaved)
        kh = rotate(xp, kh, a["cos"], a["sin"], p.past, p.interleaved)
    if p.past:
        a["k_cache"][:, :, p.past :] = kh
        a["v_cache"][:, :, p.past :] = vh
        kh, vh = a["k_cache"], a["v_cache"]
    return qh, kh, vh


def heads_of(p: Any, xp: Any, a: dict[str, Any]) -> tuple[Any, Any, Any]:
    """Q and the new K and V as (batch, heads, seq, dim) views of the layer's inputs (``operands``), whatever
    their layout or packing; the projection's written first."""
    if p.projection:
        xp.matmul(a["x"], a["weights"], out=a["qkv"])
        if p.qkv_bias:
            a["qkv"] += a["qkv_bias"]
    if p.packing in ("qkv_heads", "kv_heads"):  # (batch, seq, heads, parts, dim): a part is (batch, seq, heads, dim)
        packed = a["qkv" if p.packing == "qkv_heads" else "kv"]
        parts = [packed[:, :, :, i].transpose(0, 2, 1, 3) for i in range(packed.shape[3])]
        q = parts.pop(0) if p.packing == "qkv_heads" else _heads(a["q"], p.q_heads, p.seq_major)
        return q, parts[0], parts[1]
    if p.projection or p.packing == "qkv_columns":
        q, k, v = columns(p, a["qkv"])
    else:
        q, k, v = a["q"], a["k"], a["v"]
    return (
        _heads(q, p.q_heads, p.seq_major),
        _heads(k, p.kv_heads, p.kv_seq_major),
        _heads(v, p.kv_heads, p.kv_seq_major),
    )


def columns(p: Any, qkv: Any) -> tuple[Any, Any, Any]:
    """Q, K and V side by side in (batch, seq, qkv_width) ``qkv``: its column blocks, (batch, seq, heads * dim)
    views (ONNX Runtime's Attention's projection writes them so; GroupQueryAttention's packed QKV is so)."""
    qd, kd = p.q_heads * p.head_dim, p.kv_heads * p.head_dim
    return qkv[..., :qd], qkv[..., qd : qd + kd], qkv[..., qd + kd :]


def rms_norm(xp: Any, x: Any, weight: Any, epsilon: float) -> Any:
    """``x`` over its last axis divided by its root mean square (plus ``epsilon``), times ``weight``: in float32
    at least (a half-precision square overflows), returned in ``x``'s type. A new array."""
    wide = x.astype(np.float32) if x.dtype.itemsize < 4 else x
    scale = 1 / xp.sqrt((wide * wide).mean(axis=-1, keepdims=True) + wide.dtype.type(epsilon))
    return (wide * scale * weight.astype(wide.dtype)).astype(x.dtype)


def rotate(xp: Any, x: Any, cos: Any, sin: Any, start: int, interleaved: bool) -> Any:
    """Rotary position embedding of (batch, heads, seq, dim) ``x`` at positions ``start``... : the first
    ``2 * cos.shape[-1]`` values of each head rotated in pairs (neighbours when ``interleaved``, else
    the two halves), the rest as they are. A new array."""
    seq = x.shape[2]
    return rope(x, cos[start : start + seq], sin[start : start + seq], interleaved)  # (seq, half) each


def valid_keys(xp: Any, p: Any, a: dict[str, Any]) -> Any:
    """(batch, 1, 1, kv_len) booleans: the keys a padding mask leaves, from its (batch, keys) mask or its
    (batch,) lengths (the first ``length`` keys of each sequence)."""
    if p.key_mask:
        return a["key_mask"].reshape(p.batch, 1, 1, p.kv_len) != 0
    keys = xp.arange(p.kv_len, dtype=np.int32).reshape(1, 1, 1, p.kv_len)
    return keys < a["key_lengths"].reshape(p.batch, 1, 1, 1)


def allowed_keys(xp: Any, p: Any) -> Any:
    """(q_len, kv_len) booleans: where query i may attend key j under the causal mask and window."""
    i = xp.arange(p.q_len).reshape(-1, 1) + p.past
    j = xp.arange(p.kv_len).reshape(1, -1)
    allowed = xp.ones((p.q_len, p.kv_len), dtype=bool)
    if p.causal:
        allowed &= j <= i
    if p.window:
        allowed &= i - j < p.window
    return allowed


# ------------------------------------------------------------------------ the unfused call


def attention_call(p: Any) -> LayerCall:
    """The unfused attention of ``p`` as a ``LayerCall`` (its ``run`` on any array module).

    Raises:
        UnsupportedLayer: bfloat16 (CuPy has no bfloat16 arithmetic: cuDNN's candidate measures it).
    """
    if p.dtype == "bfloat16":
        raise UnsupportedLayer(f"{p.op} in bfloat16: CuPy has no bfloat16 arithmetic (cuDNN's SDPA runs it)")
    named = operands(p)
    names = [name for name, _ in named]
    maskable = bool(p.mask or p.key_mask or p.key_lengths or p.causal or p.window)  # a row may lose every key
    bands: dict[str, Any] = {}  # the causal/window pattern, made once per array module

    def run(ops: Any, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        xp = ops.xp
        a = dict(zip(names, inputs, strict=True))
        qh, kh, vh = prepare(p, xp, a)
        b, hq, sq, skv, g = p.batch, p.q_heads, p.q_len, p.kv_len, p.group
        qh = qh * qh.dtype.type(p.scale)  # Q scaled, not the scores: half-precision products stay in range
        # query heads h*g .. h*g+g-1 read key head h: one product per key head over its group's rows
        scores = xp.matmul(qh.reshape(b, p.kv_heads, g * sq, p.head_dim), kh.swapaxes(-1, -2))
        scores = scores.reshape(b, hq, sq, skv)
        if p.softcap:
            xp.tanh(scores * scores.dtype.type(1.0 / p.softcap), out=scores)
            scores *= scores.dtype.type(p.softcap)
        neg = scores.dtype.type(-np.inf)
        if p.mask:
            _apply_mask(xp, scores, a["mask"], neg)
        if p.key_mask or p.key_lengths:
            scores = xp.where(valid_keys(xp, p, a), scores, neg)
        if p.causal or p.window:
            band = bands.get(xp.__name__)
            if band is None:
                band = bands[xp.__name__] = allowed_keys(xp, p)
            scores = xp.where(band, scores, neg)
        top = scores.max(axis=-1, keepdims=True)
        if maskable:  # a row every key of which is masked weighs nothing (ONNX's rule), not NaN
            top = xp.where(xp.isneginf(top), top.dtype.type(0), top)
        weights = xp.exp(scores - top)
        total = weights.sum(axis=-1, keepdims=True)
        if maskable:
            total = xp.where(total == 0, total.dtype.type(1), total)
        weights /= total
        out = xp.matmul(weights.reshape(b, p.kv_heads, g * sq, skv), vh).reshape(b, hq, sq, p.v_head_dim)
        y = outputs[0]
        if p.seq_major:
            y.reshape(b, sq, hq, p.v_head_dim)[...] = out.transpose(0, 2, 1, 3)
        else:
            y[...] = out

    notes = [
        "unfused: Q scaled, two cuBLAS GEMMs (CuPy's matmul) around the mask and softmax as CuPy's element-wise"
        " and reduction kernels (a framework's unfused path fuses the softmax into one kernel)"
    ]
    notes.extend(_bookkeeping_notes(p))
    return LayerCall(
        op=p.op,
        kernel="unfused_attention",
        inputs=tuple(spec for _, spec in named),
        outputs=(output_spec(p),),
        run=run,
        notes=tuple(notes),
    )


def _apply_mask(xp: Any, scores: Any, mask: Any, neg: Any) -> None:
    """Add a float mask (or keep what a boolean one allows) over the first keys, mask the keys past its end."""
    width = mask.shape[-1]
    head = scores[..., :width]
    if mask.dtype == np.bool_:
        head[...] = xp.where(mask, head, neg)
    else:
        head += mask
    if width < scores.shape[-1]:
        scores[..., width:] = neg


def _bookkeeping_notes(p: Any) -> list[str]:
    notes = []
    if p.projection:
        notes.append("the QKV projection first: one cuBLAS GEMM (CuPy's matmul) into Q, K and V side by side")
    if p.past:
        notes.append(
            f"the {p.new_len} new keys and values appended in place to a cache of {p.kv_len} (a shared past/present"
            " buffer); a separate present copy of the past is not counted"
        )
    if p.qk_norm:
        notes.append("Q and the new K RMS-normalised per head as CuPy's element-wise and reduction kernels")
    if p.rotary:
        notes.append("rotary embedding of Q and the new K as CuPy's element-wise kernels, before the attention")
    if p.qkv_bias:
        notes.append("the bias added to Q, K and V as CuPy's element-wise kernels, before the attention")
    return notes


# ------------------------------------------------------------------------ cuDNN's fused attention


def sdpa_check(p: Any) -> None:
    """Raise ``UnsupportedLayer`` where cuDNN's SDPA cannot run the layer as it is."""
    if p.dtype not in SDPA_DTYPES:
        raise UnsupportedLayer(f"cuDNN's SDPA runs float16 and bfloat16, not {p.dtype} (the cupy source measures it)")
    if p.softcap:
        raise UnsupportedLayer("soft-capped logits: cuDNN's SDPA has no soft-capping (the cupy source measures it)")
    if p.head_dim % 8 or p.v_head_dim % 8:
        raise UnsupportedLayer(f"head dimensions {p.head_dim}/{p.v_head_dim}: cuDNN's SDPA takes multiples of 8")
    if p.dtype == "bfloat16" and (p.rotary or p.qkv_bias or p.projection or p.qk_norm):
        raise UnsupportedLayer(
            "work before a bfloat16 attention (projection, bias, Q/K norm, rotary): CuPy has no bfloat16"
        )


def band_in_bias(p: Any) -> bool:
    """Whether the causal band (and window) goes into the additive bias instead of cuDNN's diagonal mask:
    cuDNN's bottom-right alignment runs without a bias only, and no alignment of cuDNN's puts a cross-attention's
    queries after a past."""
    if not (p.causal or p.window) or not p.past:
        return False
    return bool(p.mask or p.key_mask or p.key_lengths) or p.past != p.kv_len - p.q_len


def sdpa_bias_dims(p: Any) -> tuple[int, ...] | None:
    """The additive bias cuDNN reads, (batch or 1, heads or 1, q_len, kv_len), or None for none."""
    if not (p.mask or p.key_mask or p.key_lengths or band_in_bias(p)):
        return None
    batch, heads = (p.mask[0], p.mask[1]) if p.mask else (1, 1)
    return (p.batch if p.key_mask or p.key_lengths else batch, heads, p.q_len, p.kv_len)


def additive_bias(xp: Any, p: Any, sources: dict[str, Any]) -> Any:
    """The float32 bias of ``sdpa_bias_dims``: the mask added (a boolean one as 0 or -inf, the keys past a short
    one's end -inf), the key mask's padding -inf, and the causal band where ``band_in_bias``. A framework
    makes this once from the layer's masks; so does the candidate, when it is built."""
    dims = sdpa_bias_dims(p)
    bias = xp.zeros(dims, dtype=np.float32)
    if p.mask:
        mask, width = sources["mask"], p.mask[3]
        if p.mask_dtype == "bool":
            bias[..., :width] = xp.where(mask, np.float32(0), np.float32(-np.inf))
        elif p.mask_dtype == "bfloat16":  # the device's bit patterns: the top half of a float32
            bias[..., :width] = xp.left_shift(mask.astype(xp.uint32), xp.uint32(16)).view(xp.float32)
        else:
            bias[..., :width] = mask.astype(np.float32)
        if width < p.kv_len:
            bias[..., width:] = -np.inf
    if p.key_mask or p.key_lengths:
        bias = xp.where(valid_keys(xp, p, sources), bias, np.float32(-np.inf))
    if band_in_bias(p):
        bias = xp.where(allowed_keys(xp, p), bias, np.float32(-np.inf))
    return bias


def _strides(dims: Sequence[int], seq_major: bool, row: int = 0, head: int = 0) -> tuple[int, ...]:
    """Strides of (batch, heads, seq, dim) ``dims`` stored (batch, seq, heads, dim), a sequence position's
    values ``row`` apart and a head's ``head`` apart (0: contiguous; inside a packed input: ``_packed_strides``),
    or as they are."""
    _, h, s, d = dims
    row, head = row or h * d, head or d
    return (s * row, head, row, 1) if seq_major else (h * s * d, s * d, d, 1)


def _packed_strides(p: Any) -> tuple[int, int]:
    """How far apart a packed input (or the projection's output) holds a sequence position's values and a
    head's (0: a head's dim, as in a column block)."""
    if p.packing == "qkv_heads":
        return 3 * p.q_heads * p.head_dim, 3 * p.head_dim
    if p.packing == "kv_heads":
        return 2 * p.kv_heads * p.head_dim, 2 * p.head_dim
    return p.qkv_width, 0


def _rewrites(p: Any) -> bool:
    """Whether the bookkeeping writes Q (and K and V without a cache) anew, into the graph's own arrays: a rotary
    embedding, or a bias added (a projection's is added into its output, read where it is)."""
    return bool(p.rotary or p.qk_norm or (p.qkv_bias and not p.projection))


def _in_place(p: Any) -> tuple[str, ...]:
    """The graph's operands it reads where a packed input (or the projection's output) holds them, through
    strides: Q unless it is an input of its own, K and V unless a cache holds them; none where the bookkeeping
    rewrites them."""
    if not (p.projection or p.packing) or _rewrites(p):
        return ()
    names = () if p.packing == "kv_heads" else ("q",)
    return names if p.past else (*names, "k", "v")


def sdpa_graph(cudnn: Any, p: Any, handle: Any = None) -> Any:
    """The inference SDPA graph of ``p``, not yet validated (host-only, as ``cudnn_graph.conv_graph``).

    Q and the output keep the layer's layout (strides over (batch, seq, heads, dim) for 3-D layers); K
    and V are the cache where there is one, else the new keys and values as the layer has them. The masks
    are one additive bias (``sdpa_bias_dims``); the causal band and window are cuDNN's diagonal band,
    aligned top-left without a past and bottom-right with one, unless ``band_in_bias``.
    """
    from benanza.runtimes.cuda.cudnn_graph import OperationGraph, _new_graph, _Operand

    sdpa_check(p)
    graph, io = _new_graph(cudnn, "benanza_sdpa", p.dtype, handle)
    dt = cudnn.data_type
    declared: list[Any] = []

    def declare(name: str, dims: tuple[int, ...], strides: tuple[int, ...]) -> Any:
        tensor = graph.tensor(name=name, dim=list(dims), stride=list(strides), data_type=getattr(dt, io))
        declared.append(_Operand(name, tensor, dims, strides, p.dtype, "random"))
        return tensor

    q_dims = (p.batch, p.q_heads, p.q_len, p.head_dim)
    k_dims = (p.batch, p.kv_heads, p.kv_len, p.head_dim)
    v_dims = (p.batch, p.kv_heads, p.kv_len, p.v_head_dim)
    kv_seq_major = p.kv_seq_major and not p.past
    in_place, packed = _in_place(p), _packed_strides(p)

    def strides(name: str, dims: tuple[int, ...], seq_major: bool) -> tuple[int, ...]:
        return _strides(dims, seq_major, *(packed if name in in_place else ()))

    kwargs: dict[str, Any] = {"is_inference": True, "attn_scale": float(p.scale)}
    q = declare("q", q_dims, strides("q", q_dims, p.seq_major))
    k = declare("k", k_dims, strides("k", k_dims, kv_seq_major))
    v = declare("v", v_dims, strides("v", v_dims, kv_seq_major))
    bias = sdpa_bias_dims(p)
    if bias is not None:
        kwargs["bias"] = declare("bias", bias, _strides(bias, False))
    if (p.causal or p.window) and not band_in_bias(p):
        kwargs["diagonal_alignment"] = getattr(cudnn.diagonal_alignment, "BOTTOM_RIGHT" if p.past else "TOP_LEFT")
        if p.causal:
            kwargs["diagonal_band_right_bound"] = 0
        if p.window:
            kwargs["diagonal_band_left_bound"] = int(p.window)  # keys visible, the query's own included
    o, _stats = graph.sdpa(name="sdpa", q=q, k=k, v=v, **kwargs)
    o_dims = (p.batch, p.q_heads, p.q_len, p.v_head_dim)
    o_strides = _strides(o_dims, p.seq_major)
    o.set_output(True).set_dim(list(o_dims)).set_stride(list(o_strides)).set_data_type(getattr(dt, io))
    declared.append(_Operand("o", o, o_dims, o_strides, p.dtype, "zeros"))
    return OperationGraph(graph, declared, f"{p.dtype} attention")


# ------------------------------------------------------------------------ on the device


def cupy_candidates(ctx: Any, p: Any) -> list[Candidate]:
    """The unfused attention's one candidate (source ``cupy``)."""
    from benanza.runtimes.cuda import framework

    return framework.call_plan(ctx, attention_call(p), p.op).candidates


@dataclass(eq=False)
class SdpaPlan:
    """A layer's cuDNN SDPA on the device: the graph's plans and arrays, the layer's inputs the bookkeeping
    reads, the graph's Q, K and V as (batch, heads, seq, dim) views, and the candidates."""

    plans: Any  # cudnn_graph.GraphPlans
    sources: dict[str, Any]
    logical: dict[str, Any]
    candidates: list[Candidate]


def sdpa_candidates(ctx: Any, p: Any, tensor_cores: bool) -> list[Candidate]:
    """One candidate per cuDNN SDPA engine configuration that builds (``sdpa_plan``)."""
    return sdpa_plan(ctx, p, tensor_cores).candidates


def sdpa_plan(ctx: Any, p: Any, tensor_cores: bool) -> SdpaPlan:
    """Build every SDPA plan of ``p`` and its arrays; each candidate's launch does the layer's bookkeeping
    (CuPy) into the graph's Q, K and V first, then enqueues the plan.

    Raises:
        UnsupportedLayer: cuDNN's SDPA cannot run the layer (``sdpa_check``), or no plan builds.
        GpuError: the frontend or CuPy is missing.
    """
    from benanza.runtimes.cuda import cudnn_graph, framework

    sdpa_check(p)
    cudnn = cudnn_graph._import_cudnn()
    cupy = framework._import_cupy()
    rng = np.random.default_rng(0)
    with cupy.cuda.Device(int(getattr(ctx, "ordinal", 0))), ctx.stream:
        sources = {
            name: ctx.array(spec.shape, spec.dtype)
            if spec.dtype == "bfloat16"
            else framework._device_array(ctx, cupy, spec, rng)
            for name, spec in operands(p)
            if name in _sdpa_reads(p)
        }
    handle = cudnn_graph._handle(ctx, cudnn)
    g = sdpa_graph(cudnn, p, handle)
    bound = _bound(p, sources, g.operands)
    modes = cudnn_graph.HEURISTIC_MODES
    plans = cudnn_graph._plan(ctx, cudnn, handle, g, "attention", tensor_cores, modes, bound=bound)
    named = dict(operands(p))
    with cupy.cuda.Device(int(getattr(ctx, "ordinal", 0))), ctx.stream:
        logical = {name: plans.logical(name) for name in ("q", "k", "v")}
        if "q" in named and "q" not in sources:  # nothing rewrites Q, an input of its own: the graph's is read
            sources["q"] = plans.arrays["q"].reshape(named["q"].shape)
        if "bias" in plans.arrays:
            plans.arrays["bias"][...] = _storage(cupy, additive_bias(cupy, p, sources), p.dtype)
    run = _sdpa_bookkeeping(p, cupy, sources, logical)
    notes = ("cuDNN's fused attention (SDPA, inference)", *_bookkeeping_notes(p))
    candidates = [
        replace(c, launch=c.launch if run is None else _then(ctx.stream, run, c.launch), notes=c.notes + notes)
        for c in plans.candidates
    ]
    return SdpaPlan(plans, sources, logical, candidates)


def _storage(xp: Any, values: Any, dtype: str) -> Any:
    """float32 ``values`` as the device stores ``dtype``: bfloat16 as its top 16 bits (0 and -inf exact)."""
    if dtype == "bfloat16":
        return xp.right_shift(values.view(xp.uint32), xp.uint32(16)).astype(xp.uint16)
    return values.astype(dtype)


def _sdpa_reads(p: Any) -> set[str]:
    """The layer's inputs the SDPA candidate allocates: what its bookkeeping reads (the cache is the graph's
    K and V, not a copy) and the masks its bias is made of."""
    reads = {"mask", "key_mask", "key_lengths", "x", "weights", "qkv", "kv", "qkv_bias"}
    if p.past:
        reads |= {"k", "v"}
    if _rewrites(p):
        reads |= {"q", "k", "v", "cos", "sin", "q_norm", "k_norm"}
    return reads


def _bound(p: Any, sources: dict[str, Any], operands: Sequence[Any]) -> dict[str, Any]:
    """The graph's operands read in place (``_in_place``) as views of the packed input or the projection's
    output that holds them (a column block, or one part of each head), in the storage order the graph declares
    for them (``operands``: its ``_Operand``s)."""
    from benanza.runtimes.cuda.cudnn_graph import order_of_strides

    names = _in_place(p)
    if not names:
        return {}
    if p.packing in ("qkv_heads", "kv_heads"):
        packed = sources["qkv" if p.packing == "qkv_heads" else "kv"]
        held = ("q", "k", "v") if p.packing == "qkv_heads" else ("k", "v")
        parts = {n: packed[:, :, :, i] for i, n in enumerate(held)}
    else:
        q, k, v = columns(p, sources["qkv"])
        b, s = p.batch, p.q_len
        parts = {
            "q": q.reshape(b, s, p.q_heads, p.head_dim),
            "k": k.reshape(b, s, p.kv_heads, p.head_dim),
            "v": v.reshape(b, s, p.kv_heads, p.v_head_dim),
        }
    declared = {op.name: order_of_strides(op.strides) for op in operands}
    # (batch, heads, seq, dim) as the graph's dims, then its storage order (one head: a tie the order breaks)
    return {name: parts[name].transpose(0, 2, 1, 3).transpose(declared[name]) for name in names}


def _sdpa_bookkeeping(p: Any, cupy: Any, sources: dict[str, Any], graph: dict[str, Any]) -> Any:
    """What runs before the plan at each launch (None: nothing): the bias, the rotary embedding and the
    cache append, writing the graph's Q, K and V from the layer's inputs."""
    if not (p.past or p.projection or _rewrites(p)):
        return None
    if p.past:  # the cache is the graph's K and V: its past rows stay, the call writes the new ones
        sources["k_cache"], sources["v_cache"] = graph["k"], graph["v"]
    rewrites = _rewrites(p)  # else Q (K, V) are read where they are

    def run() -> None:
        qh, kh, vh = prepare(p, cupy, sources)
        if rewrites:
            graph["q"][...] = qh
            if not p.past:
                graph["k"][...] = kh
                graph["v"][...] = vh

    return run


def _then(stream: Any, first: Any, launch: Any) -> Any:
    """One layer's call: the bookkeeping, then the plan's launch, both on the context's stream (the handle's)."""
    from benanza.runtimes.cuda.framework import _StreamLaunch

    def call() -> None:
        first()
        launch()

    return _StreamLaunch(stream, call)
