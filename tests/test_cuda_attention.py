"""The GPU runtime's attention layers (``benanza.runtimes.cuda.attention``) against ONNX Runtime.

Each case is one ONNX ``Attention`` (opset 23), ``com.microsoft::MultiHeadAttention`` or
``com.microsoft::GroupQueryAttention`` node: derived into ``AttentionParams`` as a model's layer is, run as
the unfused call on NumPy (the reference the ``gpu`` tests hold the device to, and what the ``cupy``
candidate runs on CuPy), and compared with ONNX Runtime's CPU kernels on the same data, the KV cache
included. cuDNN's SDPA graph of each is built and validated by the frontend on the host. Pure: no GPU."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from benanza.errors import GpuError, UnsupportedLayer
from benanza.model.network import network_of
from benanza.runtimes.cuda import attention, cudnn_graph
from benanza.runtimes.cuda.framework import empty_outputs, numpy_ops
from benanza.runtimes.cuda.params import AttentionParams, Unsupported, layer_params

F, I32, I64, B = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL
_ELEM = {np.dtype("float32"): F, np.dtype("int32"): I32, np.dtype("int64"): I64, np.dtype("bool"): B}


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def derive(build_model, process_proto, node, feeds, constants=None, ms=False, opset=23, outputs=1, reference=False):
    """The node's parameters, and ONNX Runtime's outputs for ``feeds`` (``reference``: ONNX's reference
    implementation's)."""
    constants = constants or {}
    inputs = [(n, _ELEM[a.dtype], list(a.shape)) for n, a in feeds.items()]
    outs = [(o, F, None) for o in list(node.output)[:outputs]]
    extra = {"com.microsoft": 1} if ms else None
    proto = build_model([node], inputs, outs, constants, opset=opset, check=not ms, extra_opsets=extra)
    if reference:
        expected = ReferenceEvaluator(proto).run(None, feeds)
    else:
        expected = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    params = layer_params(network_of(process_proto(proto).graph, [0])[1])
    return params, expected


def run_call(p: AttentionParams, arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Run the unfused call on NumPy; ``arrays`` by operand name (a cache holds its past in its first rows)."""
    call = attention.attention_call(p)
    named = attention.operands(p)
    given = []
    for name, spec in named:
        a = np.asarray(arrays[name])
        if name in ("k_cache", "v_cache"):
            full = np.zeros(spec.shape, a.dtype)
            full[:, :, : a.shape[2]] = a
            a = full
        given.append(a.reshape(spec.shape))
    out = empty_outputs(call.outputs)
    call.run(numpy_ops(), given, out)
    return out[0], dict(zip([n for n, _ in named], given, strict=True))


def sdpa_validates(p: AttentionParams) -> None:
    """cuDNN's frontend builds and validates the layer's SDPA graph on the host (a half-precision copy)."""
    try:
        frontend = cudnn_graph._import_cudnn()
    except GpuError as exc:
        pytest.skip(str(exc))
    half = AttentionParams(**{**{f: getattr(p, f) for f in p.__dataclass_fields__}, "dtype": "float16"})
    g = attention.sdpa_graph(frontend, half)
    g.graph.validate()
    o = g.operands[-1]
    assert o.name == "o" and tuple(o.tensor.get_dim()) == (p.batch, p.q_heads, p.q_len, p.v_head_dim)


# ------------------------------------------------------------------------ ONNX's Attention (opset 23)


@pytest.mark.parametrize("causal", [0, 1])
def test_onnx_attention_3d_grouped_query(build_model, process_proto, causal):
    """torch.onnx's form at opset 23: (batch, seq, heads * dim), 4 query heads over 2 key heads."""
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], q_num_heads=4, kv_num_heads=2, is_causal=causal)
    feeds = {"q": rand(2, 5, 32), "k": rand(2, 5, 16, seed=1), "v": rand(2, 5, 16, seed=2)}
    p, expected = derive(build_model, process_proto, node, feeds)
    assert isinstance(p, AttentionParams), getattr(p, "reason", p)
    assert (p.q_heads, p.kv_heads, p.head_dim, p.group, p.seq_major, p.causal) == (4, 2, 8, 2, True, bool(causal))
    y, _ = run_call(p, feeds)
    np.testing.assert_allclose(y, expected[0], rtol=1e-5, atol=1e-5)
    assert p.flops == 2 * 2 * 4 * 5 * 5 * (8 + 8)
    sdpa_validates(p)


@pytest.mark.parametrize("mask_kind", ["float", "bool", "short"])
def test_onnx_attention_4d_with_a_mask_and_a_past(build_model, process_proto, mask_kind):
    """4-D inputs, a KV cache of 3 past rows and 2 new ones, causal (bottom-right: the queries are the last
    positions) and a mask: added (float), kept where True (bool), or shorter than the keys (the rest masked)."""
    node = helper.make_node(
        "Attention", ["q", "k", "v", "mask", "pk", "pv"], ["y", "present_k", "present_v"], is_causal=1, scale=0.3
    )
    width = 4 if mask_kind == "short" else 5
    mask = rand(2, 1, 2, width, seed=3) if mask_kind != "bool" else rand(2, 1, 2, width, seed=3) > -0.5
    mask[..., 0] = True if mask_kind == "bool" else mask[..., 0]  # no row masked whole
    feeds = {
        "q": rand(2, 3, 2, 8),
        "k": rand(2, 3, 2, 8, seed=1),
        "v": rand(2, 3, 2, 16, seed=2),
        "mask": mask.astype(np.float32) if mask_kind != "bool" else mask,
        "pk": rand(2, 3, 3, 8, seed=4),
        "pv": rand(2, 3, 3, 16, seed=5),
    }
    # ONNX Runtime takes a mask as long as the keys only: ONNX's reference implementation checks a shorter one
    p, expected = derive(build_model, process_proto, node, feeds, outputs=3, reference=mask_kind == "short")
    assert isinstance(p, AttentionParams), getattr(p, "reason", p)
    assert (p.past, p.kv_len, p.new_len, p.v_head_dim, p.seq_major) == (3, 5, 2, 16, False)
    assert p.scale == pytest.approx(0.3)
    assert p.mask == (2, 1, 2, width) and p.mask_dtype == ("bool" if mask_kind == "bool" else "float32")
    y, arrays = run_call(p, {**feeds, "k_cache": feeds["pk"], "v_cache": feeds["pv"]})
    np.testing.assert_allclose(y, expected[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(arrays["k_cache"], expected[1])  # appended in place: the present key
    np.testing.assert_array_equal(arrays["v_cache"], expected[2])
    sdpa_validates(p)


def test_onnx_attention_soft_capped(build_model, process_proto):
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], q_num_heads=2, kv_num_heads=2, softcap=2.0)
    feeds = {"q": rand(1, 4, 16) * 4, "k": rand(1, 6, 16, seed=1) * 4, "v": rand(1, 6, 16, seed=2)}
    p, expected = derive(build_model, process_proto, node, feeds)
    assert p.softcap == 2.0
    y, _ = run_call(p, feeds)
    np.testing.assert_allclose(y, expected[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(UnsupportedLayer, match="no soft-capping"):
        attention.sdpa_check(AttentionParams(**{**_fields(p), "dtype": "float16"}))


def _fields(p: Any) -> dict[str, Any]:
    return {f: getattr(p, f) for f in p.__dataclass_fields__}


# ------------------------------------------------------------------------ ONNX Runtime's MultiHeadAttention


@pytest.mark.parametrize("lengths", [False, True], ids=["mask", "lengths"])
def test_multi_head_attention_with_bias_padding_and_attention_bias(build_model, process_proto, lengths):
    node = helper.make_node(
        "MultiHeadAttention",
        ["q", "k", "v", "bias", "kpm", "ab"],
        ["y"],
        domain="com.microsoft",
        num_heads=2,
    )
    kpm = np.ones((2, 6), np.int32)
    kpm[1, 4:] = 0  # the second sequence's last two keys are padding
    if lengths:
        kpm = kpm.sum(axis=1).astype(np.int32)  # the (batch,) form: 6 and 4 valid keys
    feeds = {
        "q": rand(2, 4, 16),
        "k": rand(2, 6, 16, seed=1),
        "v": rand(2, 6, 16, seed=2),
        "kpm": kpm,
        "ab": rand(1, 2, 4, 6, seed=3),
    }
    p, expected = derive(build_model, process_proto, node, feeds, {"bias": rand(48, seed=4)}, ms=True)
    assert isinstance(p, AttentionParams), getattr(p, "reason", p)
    assert (
        p.qkv_bias
        and p.mask == (1, 2, 4, 6)
        and p.kv_seq_major
        and (p.key_mask, p.key_lengths)
        == (
            not lengths,
            lengths,
        )
    )
    padding = "key_lengths" if lengths else "key_mask"
    y, _ = run_call(p, {**feeds, "qkv_bias": rand(48, seed=4), padding: kpm, "mask": feeds["ab"]})
    np.testing.assert_allclose(y, expected[0], rtol=1e-5, atol=1e-5)
    sdpa_validates(p)


def test_multi_head_attention_unidirectional_with_a_past(build_model, process_proto):
    node = helper.make_node(
        "MultiHeadAttention",
        ["q", "k", "v", "", "", "", "pk", "pv"],
        ["y", "present_k", "present_v"],
        domain="com.microsoft",
        num_heads=2,
        unidirectional=1,
    )
    feeds = {
        "q": rand(1, 3, 16),
        "k": rand(1, 3, 16, seed=1),
        "v": rand(1, 3, 16, seed=2),
        "pk": rand(1, 2, 4, 8, seed=3),
        "pv": rand(1, 2, 4, 8, seed=4),
    }
    p, expected = derive(build_model, process_proto, node, feeds, ms=True, outputs=3)
    assert isinstance(p, AttentionParams), getattr(p, "reason", p)
    assert (p.past, p.kv_len, p.causal) == (4, 7, True)
    y, arrays = run_call(p, {**feeds, "k_cache": feeds["pk"], "v_cache": feeds["pv"]})
    np.testing.assert_allclose(y, expected[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(arrays["k_cache"], expected[1])
    sdpa_validates(p)


def test_multi_head_attention_cross_attention_reads_4d_keys_as_they_are(build_model, process_proto):
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"], domain="com.microsoft", num_heads=2)
    feeds = {"q": rand(1, 3, 16), "k": rand(1, 2, 7, 8, seed=1), "v": rand(1, 2, 7, 8, seed=2)}
    p, expected = derive(build_model, process_proto, node, feeds, ms=True)
    assert isinstance(p, AttentionParams), getattr(p, "reason", p)
    assert not p.kv_seq_major and p.seq_major and p.kv_len == 7
    y, _ = run_call(p, feeds)
    np.testing.assert_allclose(y, expected[0], rtol=1e-5, atol=1e-5)
    sdpa_validates(p)


@pytest.mark.parametrize("packed", ["qkv", "kv"])
def test_multi_head_attention_packed_attends_as_its_unpacked_form(build_model, process_proto, packed):
    """ONNX Runtime's optimizer packs a diffusion UNet's self-attention's Q, K and V into one (batch, seq,
    heads, 3, dim) input and its cross-attention's K and V into a (batch, keys, heads, 2, dim) one (for its
    CUDA provider: the CPU's refuses them). The packed layer computes what ONNX Runtime computes for the same
    Q, K and V unpacked, key padding included, and the bias where ONNX Runtime takes one (packed QKV)."""
    b, s, n, d, keys = 2, 4, 2, 8, 4 if packed == "qkv" else 6
    x = rand(b, keys, n, 3 if packed == "qkv" else 2, d, seed=5)
    q = x[:, :, :, 0].reshape(b, s, n * d) if packed == "qkv" else rand(b, s, n * d)
    k, v = (x[:, :, :, i - (3 - x.shape[3])].reshape(b, keys, n * d) for i in (1, 2))
    kpm = np.ones((b, keys), np.int32)
    kpm[1, -1] = 0
    bias = rand(3 * n * d, seed=4) if packed == "qkv" else np.zeros(3 * n * d, np.float32)
    inputs = ["x"] if packed == "qkv" else ["q", "x"]
    biased = "bias" if packed == "qkv" else ""
    node = _ms("MultiHeadAttention", [*inputs, *[""] * (3 - len(inputs)), biased, "kpm"], ["y"], num_heads=n)
    feeds = {"q": q, "x": x, "kpm": kpm} if packed == "kv" else {"x": x, "kpm": kpm}
    proto = build_model(
        [node],
        [(name, _ELEM[a.dtype], list(a.shape)) for name, a in feeds.items()],
        [("y", F, None)],
        {"bias": bias} if biased else {},
        check=False,
        extra_opsets={"com.microsoft": 1},
    )
    p = layer_params(network_of(process_proto(proto).graph, [0])[1])
    assert isinstance(p, AttentionParams), getattr(p, "reason", p)
    assert (p.packing, p.kv_len, p.head_dim, p.qkv_bias, p.key_mask) == (f"{packed}_heads", keys, d, bool(biased), True)
    unpacked = _ms("MultiHeadAttention", ["q", "k", "v", "bias", "kpm"], ["y"], num_heads=n)
    _, expected = derive(
        build_model, process_proto, unpacked, {"q": q, "k": k, "v": v, "kpm": kpm}, {"bias": bias}, ms=True
    )
    arrays = {"qkv": x, "qkv_bias": bias} if packed == "qkv" else {"q": q, "kv": x}
    y, _ = run_call(p, {**arrays, "key_mask": kpm})
    np.testing.assert_allclose(y, expected[0], rtol=1e-5, atol=1e-5)
    sdpa_validates(p)


# ------------------------------------------------------------------------ ONNX Runtime's Attention (projection inside)


@pytest.mark.parametrize(
    "sizes, lengths", [(None, False), ([32, 32, 64], False), (None, True)], ids=["equal", "wider-values", "lengths"]
)
def test_contrib_attention_projects_then_attends(build_model, process_proto, sizes, lengths):
    """What ONNX Runtime's transformer optimizer makes of a BERT's attention: one GEMM into Q, K and V (plus
    the bias), a raw (batch, keys) mask or the (batch,) lengths it counts from one, an additive attention bias."""
    width = 96 if sizes is None else sum(sizes)
    attrs = {"num_heads": 4} if sizes is None else {"num_heads": 4, "qkv_hidden_sizes": sizes}
    node = _ms("Attention", ["x", "w", "bias", "mask", "", "ab"], ["y"], **attrs)
    mask = np.ones((2, 5), np.int32)
    mask[1, 3:] = 0
    if lengths:
        mask = mask.sum(axis=1).astype(np.int32)  # right padding: 5 and 3 valid keys
    feeds = {"x": rand(2, 5, 24), "mask": mask, "ab": rand(1, 4, 5, 5, seed=3)}
    constants = {"w": rand(24, width, seed=1), "bias": rand(width, seed=2)}
    p, expected = derive(build_model, process_proto, node, feeds, constants, ms=True)
    assert isinstance(p, AttentionParams), getattr(p, "reason", p)
    assert (p.projection, p.qkv_width, p.head_dim, p.v_head_dim) == (24, width, 8, width // 4 - 16)
    assert (p.key_mask, p.key_lengths) == (not lengths, lengths)
    arrays = {
        "x": feeds["x"],
        "weights": constants["w"],
        "qkv_bias": constants["bias"],
        "key_lengths" if lengths else "key_mask": mask,
        "mask": feeds["ab"],
        "qkv": np.zeros((2, 5, width), np.float32),
    }
    y, _ = run_call(p, arrays)
    np.testing.assert_allclose(y, expected[0], rtol=1e-4, atol=1e-4)  # a projection of 24 first: float32 rounding
    assert p.flops == 2 * 2 * 4 * 5 * 5 * (8 + p.v_head_dim) + 2 * 2 * 5 * 24 * width
    sdpa_validates(p)


@pytest.mark.parametrize("mask", ["none", "raw", "lengths"])
def test_contrib_attention_gpt2_step_appends_to_its_past(build_model, process_proto, mask):
    """GPT-2 as the optimizer fuses it: unidirectional, a past (2, batch, heads, past, dim) and its present,
    with no mask, a raw (batch, past + new) one, or the valid lengths over past and new keys."""
    node = _ms(
        "Attention",
        ["x", "w", "bias", "" if mask == "none" else "m", "past"],
        ["y", "present"],
        num_heads=2,
        unidirectional=1,
    )
    raw = np.ones((2, 7), np.int32)
    raw[1, 5:] = 0
    feeds = {"x": rand(2, 3, 16), "past": rand(2, 2, 2, 4, 8, seed=4)}
    if mask != "none":
        feeds["m"] = raw if mask == "raw" else raw.sum(axis=1).astype(np.int32)
    constants = {"w": rand(16, 48, seed=1), "bias": rand(48, seed=2)}
    p, expected = derive(build_model, process_proto, node, feeds, constants, ms=True, outputs=2)
    assert isinstance(p, AttentionParams), getattr(p, "reason", p)
    assert (p.past, p.kv_len, p.causal, p.key_mask, p.key_lengths) == (4, 7, True, mask == "raw", mask == "lengths")
    arrays = {
        "key_mask": feeds.get("m"),
        "key_lengths": feeds.get("m"),
        "x": feeds["x"],
        "weights": constants["w"],
        "qkv_bias": constants["bias"],
        "k_cache": feeds["past"][0],
        "v_cache": feeds["past"][1],
        "qkv": np.zeros((2, 3, 48), np.float32),
    }
    y, after = run_call(p, arrays)
    np.testing.assert_allclose(y, expected[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.stack([after["k_cache"], after["v_cache"]]), expected[1], rtol=1e-5, atol=1e-6)
    sdpa_validates(p)


# ------------------------------------------------------------------------ ONNX Runtime's GroupQueryAttention


def _rotary_caches(positions: int, half: int) -> tuple[np.ndarray, np.ndarray]:
    angles = np.arange(positions)[:, None] * (1.0 / 10000 ** (np.arange(half) / half))[None]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


@pytest.mark.parametrize(
    "batch, seq, past, rotary, interleaved, window, softcap",
    [
        (2, 1, 7, 1, 0, -1, 0.0),  # a decoder's step: one query over the cache
        (2, 5, 0, 1, 1, -1, 0.0),  # a prompt, rotary on neighbouring pairs
        (2, 6, 0, 0, 0, 3, 0.0),  # a sliding window: 3 keys, the query's own among them
        (1, 2, 4, 0, 0, -1, 1.5),  # soft-capped (Gemma 2), two tokens after a past (ORT: batch 1 only)
    ],
    ids=["decode", "prompt-interleaved", "window", "softcap"],
)
def test_group_query_attention(build_model, process_proto, batch, seq, past, rotary, interleaved, window, softcap):
    """ONNX Runtime's CPU kernel takes head sizes that are multiples of 16; a layer without a past leaves it out."""
    total = past + seq
    cos, sin = _rotary_caches(16, 8)
    cache = ["pk", "pv"] if past else ["", ""]
    node = helper.make_node(
        "GroupQueryAttention",
        ["q", "k", "v", *cache, "seqlens_k", "total"] + (["cos", "sin"] if rotary else []),
        ["y", "present_k", "present_v"],
        domain="com.microsoft",
        num_heads=4,
        kv_num_heads=2,
        do_rotary=rotary,
        rotary_interleaved=interleaved,
        local_window_size=window,
        softcap=softcap,
    )
    feeds = {"q": rand(batch, seq, 64), "k": rand(batch, seq, 32, seed=1), "v": rand(batch, seq, 32, seed=2)}
    if past:
        feeds.update(pk=rand(batch, 2, past, 16, seed=3), pv=rand(batch, 2, past, 16, seed=4))
    constants = {"seqlens_k": np.full(batch, total - 1, np.int32), "total": np.array(total, np.int32)}
    if rotary:
        constants.update(cos=cos, sin=sin)
    p, expected = derive(build_model, process_proto, node, feeds, constants, ms=True, outputs=3)
    assert isinstance(p, AttentionParams), getattr(p, "reason", p)
    assert (p.past, p.kv_len, p.group, p.causal, p.rotary) == (past, total, 2, True, bool(rotary))
    assert p.window == max(window, 0)
    arrays = {**feeds, "k_cache": feeds.get("pk"), "v_cache": feeds.get("pv"), "cos": cos, "sin": sin}
    y, after = run_call(p, arrays)
    np.testing.assert_allclose(y, expected[0], rtol=1e-5, atol=1e-5)
    if past:
        np.testing.assert_allclose(after["k_cache"], expected[1], rtol=1e-6, atol=1e-6)  # rotated, appended
    if not softcap:
        sdpa_validates(p)


@pytest.mark.parametrize(
    "seq, past, rotary",
    [(1, 7, 1), (6, 0, 1), (6, 0, 0)],
    ids=["decode-rotary", "prompt-rotary", "prompt"],
)
def test_group_query_attention_packed_qkv(build_model, process_proto, seq, past, rotary):
    """onnxruntime-genai's default: Q, K and V side by side in one (batch, seq, (heads + 2 kv_heads) * dim)
    input, the key and value inputs left out; the rotary embedding inside (``do_rotary``) or not."""
    total, cos, sin = past + seq, *_rotary_caches(16, 8)
    cache = ["pk", "pv"] if past else ["", ""]
    node = _ms(
        "GroupQueryAttention",
        ["qkv", "", "", *cache, "seqlens_k", "total"] + (["cos", "sin"] if rotary else []),
        ["y", "present_k", "present_v"],
        num_heads=4,
        kv_num_heads=2,
        do_rotary=rotary,
    )
    feeds = {"qkv": rand(2, seq, (4 + 2 * 2) * 16)}
    if past:
        feeds.update(pk=rand(2, 2, past, 16, seed=3), pv=rand(2, 2, past, 16, seed=4))
    constants = {"seqlens_k": np.full(2, total - 1, np.int32), "total": np.array(total, np.int32)}
    if rotary:
        constants.update(cos=cos, sin=sin)
    p, expected = derive(build_model, process_proto, node, feeds, constants, ms=True, outputs=3)
    assert isinstance(p, AttentionParams), getattr(p, "reason", p)
    assert (p.packing, p.head_dim, p.past, p.kv_len, p.rotary) == ("qkv_columns", 16, past, total, bool(rotary))
    assert [name for name, _ in attention.operands(p)][:1] == ["qkv"]
    arrays = {**feeds, "k_cache": feeds.get("pk"), "v_cache": feeds.get("pv"), "cos": cos, "sin": sin}
    y, after = run_call(p, arrays)
    np.testing.assert_allclose(y, expected[0], rtol=1e-5, atol=1e-5)
    if past:
        np.testing.assert_allclose(after["k_cache"], expected[1], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(after["v_cache"], expected[2], rtol=1e-6, atol=1e-6)
    sdpa_validates(p)


def _rms(x: np.ndarray, weight: np.ndarray, heads: int, eps: float) -> np.ndarray:
    """(batch, seq, heads * dim) ``x`` RMS-normalised over each head's dim, times ``weight``."""
    h = x.reshape(*x.shape[:2], heads, -1)
    return (h / np.sqrt((h * h).mean(axis=-1, keepdims=True) + eps) * weight).reshape(x.shape)


def test_group_query_attention_fused_qk_norm(build_model, process_proto):
    """onnxruntime-genai's Qwen3 for CUDA: Q and K RMS-normalised per head inside GroupQueryAttention (inputs 14
    and 15, ``qk_norm_epsilon``), then rotated. ONNX Runtime's CPU kernel refuses the weights: the reference is
    its GroupQueryAttention fed Q and K normalised beforehand."""
    past, eps = 5, 1e-5
    cos, sin = _rotary_caches(16, 8)
    qw, kw = rand(16, seed=7), rand(16, seed=8)
    node = _ms(
        "GroupQueryAttention",
        ["q", "k", "v", "pk", "pv", "seqlens_k", "total", "cos", "sin", *[""] * 5, "qw", "kw"],
        ["y", "present_k", "present_v"],
        num_heads=4,
        kv_num_heads=2,
        do_rotary=1,
        qk_norm_epsilon=eps,
    )
    feeds = {
        "q": rand(2, 1, 64),
        "k": rand(2, 1, 32, seed=1),
        "v": rand(2, 1, 32, seed=2),
        "pk": rand(2, 2, past, 16, seed=3),
        "pv": rand(2, 2, past, 16, seed=4),
    }
    constants = {
        "seqlens_k": np.full(2, past, np.int32),
        "total": np.array(past + 1, np.int32),
        "cos": cos,
        "sin": sin,
        "qw": qw,
        "kw": kw,
    }
    proto = build_model(
        [node],
        [(n, F, list(a.shape)) for n, a in feeds.items()],
        [("y", F, None), ("present_k", F, None), ("present_v", F, None)],
        constants,
        check=False,
        extra_opsets={"com.microsoft": 1},
    )
    p = layer_params(network_of(process_proto(proto).graph, [0])[1])
    assert isinstance(p, AttentionParams), getattr(p, "reason", p)
    assert p.qk_norm == pytest.approx(eps) and p.rotary and p.past == past
    plain = _ms(
        "GroupQueryAttention",
        ["q", "k", "v", "pk", "pv", "seqlens_k", "total", "cos", "sin"],
        ["y", "present_k", "present_v"],
        num_heads=4,
        kv_num_heads=2,
        do_rotary=1,
    )
    normed = {**feeds, "q": _rms(feeds["q"], qw, 4, eps), "k": _rms(feeds["k"], kw, 2, eps)}
    without = {n: a for n, a in constants.items() if n not in ("qw", "kw")}
    _, expected = derive(build_model, process_proto, plain, normed, without, ms=True, outputs=3)
    arrays = {**feeds, "k_cache": feeds["pk"], "v_cache": feeds["pv"], "cos": cos, "sin": sin, "q_norm": qw}
    y, after = run_call(p, {**arrays, "k_norm": kw})
    np.testing.assert_allclose(y, expected[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(after["k_cache"], expected[1], rtol=1e-5, atol=1e-5)  # normalised, rotated, appended
    sdpa_validates(p)


def test_group_query_attention_reads_the_total_length_the_model_computes(build_model, process_proto):
    """The attended length is ``total_sequence_length``'s value, not the past buffer's extent (a shared
    buffer of the maximum length is larger than what a step attends)."""
    node = helper.make_node(
        "GroupQueryAttention",
        ["q", "k", "v", "pk", "pv", "seqlens_k", "total"],
        ["y", "present_k", "present_v"],
        domain="com.microsoft",
        num_heads=2,
        kv_num_heads=2,
    )
    feeds = {
        "q": rand(1, 1, 32),
        "k": rand(1, 1, 32),
        "v": rand(1, 1, 32),
        "pk": rand(1, 2, 9, 16),
        "pv": rand(1, 2, 9, 16),
    }
    constants = {"seqlens_k": np.array([5], np.int32), "total": np.array(6, np.int32)}
    p, _ = derive(build_model, process_proto, node, feeds, constants, ms=True, outputs=3)
    assert isinstance(p, AttentionParams), getattr(p, "reason", p)
    assert (p.kv_len, p.past) == (6, 5)


def test_what_is_not_mapped_says_why(build_model, process_proto):
    packed = helper.make_node(
        "PackedAttention", ["x", "w", "b", "ti", "cs"], ["y"], domain="com.microsoft", num_heads=2
    )
    proto = build_model(
        [packed],
        [("x", F, [4, 16]), ("ti", I32, [1, 4]), ("cs", I32, [2])],
        [("y", F, None)],
        {"w": rand(16, 48), "b": rand(48)},
        check=False,
        extra_opsets={"com.microsoft": 1},
    )
    p = layer_params(network_of(process_proto(proto).graph, [0])[1])
    assert isinstance(p, Unsupported) and "packed, unpadded tokens" in p.reason


# ------------------------------------------------------------------------ the SDPA graph and the candidates' terms


def test_sdpa_graph_describes_layouts_masks_and_alignment():
    try:
        frontend = cudnn_graph._import_cudnn()
    except GpuError as exc:
        pytest.skip(str(exc))
    p = AttentionParams(
        "GroupQueryAttention", 2, 8, 2, 1, 33, 64, 64, "bfloat16", 0.125, past=32, causal=True, window=16
    )
    g = attention.sdpa_graph(frontend, p)
    by_name = {op.name: op for op in g.operands}
    assert list(by_name) == ["q", "k", "v", "o"]
    assert by_name["q"].strides == (8 * 64, 64, 8 * 64, 1)  # (batch, seq, heads, dim) storage
    assert by_name["k"].dims == (2, 2, 33, 64) and by_name["k"].strides == (2 * 33 * 64, 33 * 64, 64, 1)  # the cache
    (node,) = g.graph._nodes
    assert node.params["diagonal_band_left_bound"] == 16 and node.params["diagonal_band_right_bound"] == 0
    assert node.params["diagonal_alignment"].name == "BOTTOM_RIGHT"
    g.graph.validate()
    masked = AttentionParams("MultiHeadAttention", 2, 4, 4, 8, 8, 32, 32, "float16", 0.2, key_mask=True)
    g = attention.sdpa_graph(frontend, masked)
    assert [op.name for op in g.operands] == ["q", "k", "v", "bias", "o"] and g.operands[3].dims == (2, 1, 8, 8)
    g.graph.validate()


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"dtype": "float32"}, "float16 and bfloat16"),
        ({"head_dim": 12, "v_head_dim": 12}, "multiples of 8"),
        ({"softcap": 30.0}, "soft-capping"),
        ({"dtype": "bfloat16", "rotary": True, "rotary_cache": (8, 32)}, "CuPy has no bfloat16"),
        ({"dtype": "bfloat16", "qk_norm": 1e-6}, "CuPy has no bfloat16"),
    ],
)
def test_sdpa_refuses_what_cudnn_does_not_run(change, reason):
    base = AttentionParams("Attention", 1, 4, 4, 8, 8, 64, 64, "float16", 0.125)
    with pytest.raises(UnsupportedLayer, match=reason):
        attention.sdpa_check(AttentionParams(**{**_fields(base), **change}))


def test_the_unfused_call_says_what_it_runs_and_refuses_bfloat16():
    p = AttentionParams(
        "GroupQueryAttention",
        1,
        4,
        2,
        1,
        9,
        8,
        8,
        "float32",
        0.3,
        past=8,
        causal=True,
        rotary=True,
        rotary_cache=(16, 4),
    )
    call = attention.attention_call(p)
    assert call.kernel == "unfused_attention" and [s.shape for s in call.inputs][:3] == [
        (1, 1, 32),
        (1, 1, 16),
        (1, 1, 16),
    ]
    assert any("appended in place" in n for n in call.notes) and any("rotary" in n for n in call.notes)
    with pytest.raises(UnsupportedLayer, match="bfloat16"):
        attention.attention_call(AttentionParams(**{**_fields(p), "dtype": "bfloat16"}))
    assert math.isclose(p.flops, 2 * 4 * 9 * 16)


# ------------------------------------------------------------------------ on the device (``pytest -m gpu``)


def case(op: str, dims: tuple[int, ...], dtype: str, scale: float, **kw: Any) -> AttentionParams:
    """``dims``: batch, q_heads, kv_heads, q_len, kv_len, head_dim, v_head_dim."""
    return AttentionParams(op, *dims, dtype, scale, **kw)


def case_id(p: AttentionParams) -> str:
    kinds = [
        k
        for k, on in (
            ("proj", p.projection),
            ("past", p.past),
            ("qknorm", p.qk_norm),
            ("rope", p.rotary),
            ("mask", p.mask),
        )
        if on
    ]
    return "-".join([p.op, p.dtype, f"q{p.q_len}k{p.kv_len}", *kinds, *([p.packing] if p.packing else [])])


DEVICE_CASES = [
    case("Attention", (2, 8, 2, 64, 64, 64, 64), "float16", 0.125, causal=True),  # a prompt, GQA
    case("Attention", (1, 4, 4, 32, 48, 32, 32), "float16", 0.2, seq_major=False, kv_seq_major=False),
    case("GroupQueryAttention", (2, 8, 2, 1, 65, 64, 64), "float16", 0.125, past=64, causal=True),  # a step
    case(
        "GroupQueryAttention",
        (1, 8, 2, 16, 48, 64, 64),
        "float16",
        0.125,
        past=32,
        causal=True,
        window=24,
        rotary=True,
        rotary_cache=(64, 32),
    ),
    case(
        "MultiHeadAttention",
        (2, 4, 4, 32, 32, 64, 64),
        "float16",
        0.125,
        qkv_bias=True,
        key_mask=True,
        mask=(1, 4, 32, 32),
        mask_dtype="float16",
    ),
    case(
        "MultiHeadAttention",
        (2, 4, 4, 8, 12, 32, 32),
        "float16",
        0.125,
        past=4,
        qkv_bias=True,
        key_mask=True,
        mask=(1, 4, 8, 12),
        mask_dtype="float16",
    ),
    # a boolean mask and a causal band after a past: the band goes into the bias
    case(
        "Attention",
        (1, 4, 4, 16, 40, 32, 32),
        "float16",
        0.2,
        past=24,
        causal=True,
        mask=(1, 1, 16, 40),
        mask_dtype="bool",
    ),
    # ONNX Runtime's Attention: Q, K and V read in place from the projection's output, or a step over a past
    case("Attention", (2, 4, 4, 32, 32, 64, 64), "float16", 0.125, projection=128, qkv_bias=True, key_mask=True),
    case("Attention", (2, 4, 4, 32, 32, 64, 64), "float16", 0.125, projection=256, qkv_bias=True, key_lengths=True),
    case("Attention", (2, 4, 4, 24, 24, 32, 64), "float16", 0.125, projection=128, qkv_bias=True),  # wider V
    case("MultiHeadAttention", (4, 8, 8, 1, 40, 64, 64), "float16", 0.125, kv_seq_major=False),  # a step, 4-D keys
    case("Attention", (1, 4, 4, 1, 33, 64, 64), "float16", 0.125, projection=256, qkv_bias=True, past=32, causal=True),
    # packed: onnxruntime-genai's decode step (rotary inside) and prompt (read in place), a diffusion UNet's
    # self- and cross-attention (ONNX Runtime's optimizer's packed QKV and KV), a bias rewriting packed Q
    case(
        "GroupQueryAttention",
        (1, 8, 2, 1, 65, 64, 64),
        "float16",
        0.125,
        past=64,
        causal=True,
        rotary=True,
        rotary_cache=(128, 32),
        packing="qkv_columns",
    ),
    case("GroupQueryAttention", (2, 8, 2, 64, 64, 64, 64), "float16", 0.125, causal=True, packing="qkv_columns"),
    case(  # onnxruntime-genai's Qwen3 for CUDA: Q/K normalised inside, a decode step
        "GroupQueryAttention",
        (2, 16, 8, 1, 97, 128, 128),
        "float16",
        0.088,
        past=96,
        causal=True,
        rotary=True,
        rotary_cache=(128, 64),
        qk_norm=1e-6,
    ),
    case("MultiHeadAttention", (2, 8, 8, 64, 64, 64, 64), "float16", 0.125, packing="qkv_heads"),
    case("MultiHeadAttention", (2, 8, 8, 64, 77, 64, 64), "float16", 0.125, packing="kv_heads"),
    case("MultiHeadAttention", (1, 4, 4, 16, 16, 32, 32), "float16", 0.2, packing="qkv_heads", qkv_bias=True),
    case("MultiHeadAttention", (2, 1, 1, 16, 16, 64, 64), "float16", 0.125, packing="qkv_heads"),  # one head
    case("MultiHeadAttention", (2, 1, 1, 16, 24, 64, 64), "float16", 0.125, packing="kv_heads"),
    case("Attention", (2, 8, 2, 64, 64, 64, 64), "bfloat16", 0.125, causal=True),
    case("GroupQueryAttention", (1, 8, 2, 32, 32, 64, 64), "bfloat16", 0.125, causal=True, packing="qkv_columns"),
    case(
        "Attention",
        (1, 4, 4, 16, 40, 32, 32),
        "bfloat16",
        0.2,
        past=24,
        causal=True,
        mask=(1, 1, 16, 36),
        mask_dtype="bfloat16",
    ),  # a float mask's bfloat16 bits, shorter than the keys
    case("Attention", (2, 4, 4, 16, 16, 32, 32), "float32", 0.2, causal=True, softcap=5.0),  # cupy only
]


@pytest.fixture(scope="module")
def ctx():
    from benanza.runtimes.cuda.device import DeviceContext

    context = DeviceContext(0)
    yield context
    context.close()


def _host(array: Any, dtype: str) -> np.ndarray:
    import cupy

    host = cupy.asnumpy(array)
    if dtype == "bfloat16":  # bit patterns: the top 16 bits of a float32
        return (host.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return host.astype(np.float64) if host.dtype.kind == "f" else host


def _reference(p: AttentionParams, q, k, v, bias) -> np.ndarray:
    """Attention over (batch, heads, seq, dim) float64 arrays, K and V repeated for each query head: an
    independent check of the grouped products both calls make."""
    k, v = np.repeat(k, p.group, axis=1), np.repeat(v, p.group, axis=1)
    scores = q @ k.swapaxes(-1, -2) * p.scale
    if p.softcap:
        scores = np.tanh(scores / p.softcap) * p.softcap
    if bias is not None:
        scores = scores + bias
    if (p.causal or p.window) and not attention.band_in_bias(p):
        scores = np.where(attention.allowed_keys(np, p), scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (weights / weights.sum(axis=-1, keepdims=True)) @ v


def _as_trained(p: AttentionParams, arrays: dict[str, Any]) -> None:
    """Projection weights of a trained model's size (1 / sqrt(width)): uniform in [-1, 1), a projection of 256
    makes scores of about 30, whose half-precision rounding alone moves the softmax past the tolerance."""
    if p.projection:
        arrays["weights"] *= arrays["weights"].dtype.type(1 / math.sqrt(p.projection))


@pytest.mark.gpu
@pytest.mark.parametrize("p", [c for c in DEVICE_CASES if c.dtype != "bfloat16"], ids=case_id)
def test_unfused_candidate_matches_numpy(ctx, p):
    from benanza.runtimes.cuda.framework import call_plan

    plan = call_plan(ctx, attention.attention_call(p), p.op)
    _as_trained(p, dict(zip([n for n, _ in attention.operands(p)], plan.inputs, strict=True)))
    host_inputs = [_host(x, p.dtype) for x in plan.inputs]  # before the launch: the call appends to the cache
    (candidate,) = plan.candidates
    candidate.launch()
    ctx.synchronize()
    expected = [np.zeros(o.shape, np.float64) for o in plan.call.outputs]
    plan.call.run(numpy_ops(), host_inputs, expected)
    tol = 1e-2 if p.dtype == "float16" else 1e-4
    np.testing.assert_allclose(_host(plan.outputs[0], p.dtype), expected[0], rtol=tol, atol=tol)


@pytest.mark.gpu
@pytest.mark.parametrize("p", [c for c in DEVICE_CASES if c.dtype != "float32"], ids=case_id)
def test_sdpa_candidates_match_the_reference(ctx, p):
    plan = attention.sdpa_plan(ctx, p, tensor_cores=True)
    _as_trained(p, plan.sources)
    assert plan.candidates and plan.candidates[0].default
    for candidate in plan.candidates[:4]:
        plan.plans.arrays["o"][...] = 0
        candidate.launch()
        ctx.synchronize()
        q, k, v = (_host(plan.logical[n], p.dtype) for n in ("q", "k", "v"))  # after the bookkeeping
        bias = _host(plan.plans.arrays["bias"], p.dtype) if "bias" in plan.plans.arrays else None
        o = _host(plan.plans.logical("o"), p.dtype)
        tol = 2e-2 if p.dtype == "bfloat16" else 5e-3
        np.testing.assert_allclose(o, _reference(p, q, k, v, bias), rtol=tol, atol=tol, err_msg=candidate.name)


@pytest.mark.parametrize("p", DEVICE_CASES, ids=case_id)
def test_each_device_case_runs_on_numpy_and_its_sdpa_graph_validates(p):
    """What the ``gpu`` cases above will run is coherent here: the unfused call on NumPy (float16 read as
    float32), and cuDNN's frontend validating the SDPA graph of each half-precision case."""
    from benanza.runtimes.cuda.framework import host_arrays

    host = AttentionParams(**{**_fields(p), "dtype": "float32"})
    call = attention.attention_call(host)
    out = empty_outputs(call.outputs)
    call.run(numpy_ops(), host_arrays(call.inputs), out)
    assert np.isfinite(out[0]).all()
    if p.dtype != "float32":
        sdpa_validates(p)


# ------------------------------------------------------------------------ what is refused, and why


def _ms(op: str, inputs: list[str], outputs: list[str], **attrs: Any) -> Any:
    return helper.make_node(op, inputs, outputs, domain="com.microsoft", **attrs)


_GQA_IN = ["q", "k", "v", "pk", "pv", "seqlens_k", "total"]
_GQA_FEEDS = {"q": (1, 1, 32), "k": (1, 1, 32), "v": (1, 1, 32), "pk": (1, 2, 3, 16), "pv": (1, 2, 3, 16)}


@pytest.mark.parametrize(
    "node, shapes, reason",
    [
        (
            helper.make_node("Attention", ["q", "k", "v"], ["y"], q_num_heads=2, kv_num_heads=2, left_window_size=0),
            {"q": (1, 4, 16), "k": (1, 4, 16), "v": (1, 4, 16)},
            "sliding window",
        ),
        (
            helper.make_node("Attention", ["q", "k", "v"], ["y", "", "", "qk"], q_num_heads=2, kv_num_heads=2),
            {"q": (1, 4, 16), "k": (1, 4, 16), "v": (1, 4, 16)},
            "qk_matmul_output",
        ),
        (
            helper.make_node("Attention", ["q", "k", "v", "", "pk", "pv"], ["y", "present_k", "present_v"]),
            {"q": (1, 2, 4, 8), "k": (1, 2, 4, 8), "v": (1, 2, 4, 8), "pk": (1, 3, 2, 8), "pv": (1, 3, 2, 8)},
            "past of shape",
        ),
        (
            _ms("Attention", ["x", "w", "", "m"], ["y"], num_heads=2),
            {"x": (2, 4, 16), "w": (16, 48), "m": (4,)},
            "mask_index (4,)",  # the (2 * batch,) form: ends and starts
        ),
        (_ms("Attention", ["x", "w"], ["y"], num_heads=2, do_rotary=1), {"x": (1, 4, 16), "w": (16, 48)}, "rotary"),
        (
            _ms("Attention", ["x", "w"], ["y"], num_heads=2, qkv_hidden_sizes=[16, 8, 24]),
            {"x": (1, 4, 16), "w": (16, 48)},
            "QKV widths",
        ),
        (
            _ms("MultiHeadAttention", ["q", "k", "v"], ["y"], num_heads=2, unidirectional=1),
            {"q": (1, 3, 16), "k": (1, 5, 16), "v": (1, 5, 16)},
            "alignment unknown",
        ),
        (
            _ms("MultiHeadAttention", ["q", "k", "v", "bias"], ["y"], num_heads=2),
            {"q": (1, 3, 16), "k": (1, 2, 5, 8), "v": (1, 2, 5, 8), "bias": (48,)},
            "4-D keys",
        ),
        (
            _ms("MultiHeadAttention", ["q", "k", "v", "", "kpm"], ["y"], num_heads=2),
            {"q": (1, 3, 16), "k": (1, 5, 16), "v": (1, 5, 16), "kpm": (1, 3, 5)},
            "key_padding_mask",
        ),
        (
            _ms("MultiHeadAttention", ["q", "k", "v"], ["y"], num_heads=2),
            {"q": (1, 3, 16), "k": (1, 5, 24), "v": (1, 5, 16)},
            "keys (1, 5, 24)",
        ),
        (
            _ms("MultiHeadAttention", ["qkv"], ["y"], num_heads=4),
            {"qkv": (1, 3, 2, 3, 8)},
            "packed QKV (1, 3, 2, 3, 8) in 4 heads",
        ),
        (
            _ms("MultiHeadAttention", ["q", "kv", "", "bias"], ["y"], num_heads=2),
            {"q": (1, 3, 16), "kv": (1, 5, 2, 2, 8), "bias": (48,)},
            "packed KV and a bias",
        ),
        (
            _ms("MultiHeadAttention", ["q", "kv", "", "", "", "", "pk", "pv"], ["y"], num_heads=2),
            {"q": (1, 1, 16), "kv": (1, 1, 2, 2, 8), "pk": (1, 2, 3, 8), "pv": (1, 2, 3, 8)},
            "packed inputs and a past",
        ),
        (
            _ms("MultiHeadAttention", ["q", "k"], ["y"], num_heads=2),
            {"q": (1, 3, 16), "k": (1, 5, 16)},
            "key (1, 5, 16) and value None",
        ),
        (
            _ms(
                "GroupQueryAttention",
                _GQA_IN,
                ["y", "present_k", "present_v"],
                num_heads=2,
                kv_num_heads=2,
                sliding_window_cache=1,
                local_window_size=2,
            ),
            _GQA_FEEDS,
            "ring cache",
        ),
        (
            _ms("GroupQueryAttention", _GQA_IN, ["y"], num_heads=2, kv_num_heads=2, smooth_softmax=1),
            _GQA_FEEDS,
            "smooth softmax",
        ),
        (
            _ms("GroupQueryAttention", _GQA_IN, ["y"], num_heads=2, kv_num_heads=2, local_window_size=0),
            _GQA_FEEDS,
            "no key to attend",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_what_a_derivation_cannot_represent_is_refused_with_its_reason(
    build_model, process_proto, node, shapes, reason
):
    inputs = [(n, I32 if n in ("kpm", "m") else F, list(s)) for n, s in shapes.items() if n not in ("bias", "w")]
    constants = {
        "seqlens_k": np.array([3], np.int32),
        "total": np.array(4, np.int32),
        "bias": rand(48),
        "w": rand(*shapes.get("w", (1,))),
    }
    constants = {n: a for n, a in constants.items() if n in node.input}
    outputs = [(o, F, None) for o in node.output if o]
    proto = build_model(
        node and [node], inputs, outputs, constants, opset=23, check=False, extra_opsets={"com.microsoft": 1}
    )
    p = layer_params(network_of(process_proto(proto).graph, [0])[1])
    assert isinstance(p, Unsupported) and reason in p.reason, p


def test_a_row_with_every_key_masked_weighs_nothing(build_model, process_proto):
    """ONNX's rule (its reference implementation): a query that may attend no key gets zeros, not NaN."""
    node = helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"])
    mask = np.ones((1, 1, 3, 4), bool)
    mask[0, 0, 1] = False
    feeds = {"q": rand(1, 2, 3, 8), "k": rand(1, 2, 4, 8, seed=1), "v": rand(1, 2, 4, 8, seed=2), "mask": mask}
    p, expected = derive(build_model, process_proto, node, feeds, reference=True)
    y, _ = run_call(p, feeds)
    assert not np.isnan(y).any() and not y[:, :, 1].any()
    np.testing.assert_allclose(y, expected[0], rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------ the SDPA candidate's arrays, on NumPy


@pytest.fixture
def numpy_device(monkeypatch):
    """``sdpa_plan`` with NumPy in CuPy's place and the plans' GPU half (a handle, building and launching
    plans) left out: the graph is the frontend's, validated; its arrays are ``_plan``'s (``operand_arrays``)."""
    import contextlib
    import types

    from benanza.runtimes.cuda import framework
    from benanza.runtimes.cuda.candidate import Candidate

    try:
        cudnn_graph._import_cudnn()
    except GpuError as exc:
        pytest.skip(str(exc))
    fake = types.SimpleNamespace(**{k: getattr(np, k) for k in dir(np) if not k.startswith("__")})
    fake.__name__ = "numpy"
    fake.cuda = types.SimpleNamespace(Device=lambda ordinal: contextlib.nullcontext())

    class Context:
        ordinal = 0
        stream = contextlib.nullcontext()

        def array(self, shape, dtype, fill="random"):
            values = np.zeros(shape, np.float32) if fill == "zeros" else rand(*shape, seed=len(shape)) / 4
            if dtype == "bfloat16":
                return (values.view(np.uint32) >> 16).astype(np.uint16)
            return values.astype(dtype)

    def plan(ctx, cudnn, handle, g, layout, tensor_cores, modes, bound=None):
        g.graph.validate()
        orders, arrays = cudnn_graph.operand_arrays(ctx, g.operands, bound)  # _plan's own, bound views checked
        plans = cudnn_graph.GraphPlans(g.graph, layout, arrays, orders)
        plans.candidates = [Candidate(source="cudnn-graph", name="plan", launch=lambda: None, default=True)]
        return plans

    monkeypatch.setattr(framework, "_import_cupy", lambda: fake)
    monkeypatch.setattr(cudnn_graph, "_handle", lambda ctx, cudnn: None)
    monkeypatch.setattr(cudnn_graph, "_plan", plan)
    return Context()


def _float(a: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


@pytest.mark.parametrize("p", [c for c in DEVICE_CASES if c.dtype != "float32"], ids=case_id)
def test_the_sdpa_candidate_attends_what_the_unfused_call_does(numpy_device, p):
    """After a launch's bookkeeping, the graph's Q, K, V and bias give what the unfused call computes from
    the same inputs: the two candidates of a layer do the same work."""
    plan = attention.sdpa_plan(numpy_device, p, tensor_cores=True)
    held = plan.sources.get("qkv", plan.sources.get("kv"))
    for name in attention._in_place(p):  # read where the packed input (the projection's output) holds it
        assert np.shares_memory(plan.plans.arrays[name], held), name
    names = [name for name, _ in attention.operands(p)]
    specs = dict(attention.operands(p))
    # what nothing rewrites is the graph's own array (K and V without a past: in the layer's layout)
    graph = {n: plan.plans.arrays[n].reshape(specs[n].shape) for n in ("k", "v") if not p.past and n in specs}
    arrays = {**graph, **plan.sources, "k_cache": plan.logical["k"], "v_cache": plan.logical["v"]}
    before = {
        n: _float(np.array(a), p.dtype) if a.dtype.kind in "fu" and n != "key_mask" else np.array(a)
        for n, a in arrays.items()
    }
    (candidate,) = plan.candidates
    candidate.launch()
    q, k, v = (_float(np.asarray(plan.logical[n]), p.dtype) for n in ("q", "k", "v"))
    bias = _float(plan.plans.arrays["bias"], p.dtype) if "bias" in plan.plans.arrays else None
    got = _reference(p, q, k, v, bias)
    wide = AttentionParams(
        **{**_fields(p), "dtype": "float64", "mask_dtype": "bool" if p.mask_dtype == "bool" else "float64"}
    )
    call = attention.attention_call(wide)
    out = empty_outputs(call.outputs)
    call.run(numpy_ops(), [before[n] for n in names], out)
    want = out[0].reshape(p.batch, p.q_len, p.q_heads, p.v_head_dim).transpose(0, 2, 1, 3) if p.seq_major else out[0]
    tol = 2e-2 if p.dtype == "bfloat16" else 2e-3
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_a_bound_operand_must_be_what_the_graph_declares():
    """cuDNN reads a bound operand as the graph declares it: a copy of Q (packed, not strided by the QKV
    width), another type, or a name the graph lacks is refused before any plan reads the wrong memory."""
    try:
        frontend = cudnn_graph._import_cudnn()
    except GpuError as exc:
        pytest.skip(str(exc))
    p = case("Attention", (2, 4, 4, 6, 6, 16, 16), "float16", 0.25, projection=32)
    g = attention.sdpa_graph(frontend, p)

    class Context:
        def array(self, shape, dtype, fill="random"):
            return np.zeros(shape, dtype)

    qkv = np.zeros((2, 6, p.qkv_width), np.float16)
    bound = attention._bound(p, {"qkv": qkv}, g.operands)
    orders, arrays = cudnn_graph.operand_arrays(Context(), g.operands, bound)
    assert np.shares_memory(arrays["k"], qkv) and orders["q"] == (0, 2, 1, 3)
    with pytest.raises(GpuError, match="operand q bound to a float16 array"):
        cudnn_graph.operand_arrays(Context(), g.operands, {**bound, "q": bound["q"].copy()})
    with pytest.raises(GpuError, match="operand v bound to a float32"):
        cudnn_graph.operand_arrays(Context(), g.operands, {**bound, "v": bound["v"].astype(np.float32)})
    with pytest.raises(GpuError, match="no such operand"):
        cudnn_graph.operand_arrays(Context(), g.operands, {**bound, "qkv": qkv})
