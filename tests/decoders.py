"""A decoder step as onnxruntime-genai's builder writes one, built in memory for the tests that need it.

Embedding, Q/K/V projections and ``com.microsoft::GroupQueryAttention`` over a KV cache, its lengths
computed from the attention mask; symbolic dimensions ``batch``, ``seq`` (the new tokens), ``past``
(the cache) and ``total`` (the mask).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from benanza.model.request import BindingRequest

F, I64, I32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32
MS = "com.microsoft"
HEADS, KV_HEADS, HEAD = 4, 2, 16
HIDDEN = HEADS * HEAD


def decoder(build_model) -> onnx.ModelProto:
    """Embedding, Q/K/V projections and ``GroupQueryAttention`` with a KV cache, its lengths from the mask
    (``seqlens_k = ReduceSum(mask) - 1``, ``total_sequence_length = mask.shape[1]``), as the builder writes them."""
    rng = np.random.default_rng(0)
    kv = KV_HEADS * HEAD
    nodes = [
        helper.make_node("Gather", ["embed", "input_ids"], ["x"], name="embed"),
        helper.make_node("ReduceSum", ["attention_mask", "axes"], ["total"], keepdims=0, name="mask_sum"),
        helper.make_node("Sub", ["total", "one"], ["last"], name="mask_sub"),
        helper.make_node("Cast", ["last"], ["seqlens_k"], to=I32, name="seqlens"),
        helper.make_node("Shape", ["attention_mask"], ["mask_shape"], name="mask_shape"),
        helper.make_node("Gather", ["mask_shape", "one"], ["width"], axis=0, name="mask_width"),
        helper.make_node("Cast", ["width"], ["total_seq"], to=I32, name="total_seq"),
        helper.make_node("MatMul", ["x", "wq"], ["q"], name="q"),
        helper.make_node("MatMul", ["x", "wk"], ["k"], name="k"),
        helper.make_node("MatMul", ["x", "wv"], ["v"], name="v"),
        helper.make_node(
            "GroupQueryAttention",
            ["q", "k", "v", "past_key", "past_value", "seqlens_k", "total_seq"],
            ["y", "present_key", "present_value"],
            name="gqa",
            domain=MS,
            num_heads=HEADS,
            kv_num_heads=KV_HEADS,
        ),
    ]
    cache = ["batch", KV_HEADS, "past", HEAD]
    return build_model(
        nodes,
        [
            ("input_ids", I64, ["batch", "seq"]),
            ("attention_mask", I64, ["batch", "total"]),
            ("past_key", F, cache),
            ("past_value", F, cache),
        ],
        [("y", F, ["batch", "seq", HIDDEN]), ("present_key", F, None), ("present_value", F, None)],
        {
            "embed": rng.random((100, HIDDEN), dtype=np.float32),
            "wq": rng.random((HIDDEN, HIDDEN), dtype=np.float32),
            "wk": rng.random((HIDDEN, kv), dtype=np.float32),
            "wv": rng.random((HIDDEN, kv), dtype=np.float32),
            "axes": np.array([1], np.int64),
            "one": np.array(1, np.int64),
        },
        extra_opsets={MS: 1},
        check=False,
    )


def shapes(past: int, new: int = 1) -> BindingRequest:
    """The decoder's step of ``new`` tokens after ``past``, every input's shape given."""
    return BindingRequest(
        {
            "input_ids": (1, new),
            "attention_mask": (1, past + new),
            "past_key": (1, KV_HEADS, past, HEAD),
            "past_value": (1, KV_HEADS, past, HEAD),
        }
    )
