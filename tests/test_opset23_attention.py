"""A pre-norm attention block at ONNX opset 23, as torch's dynamo exporter writes one: ONNX's own
``RMSNormalization``, ``RotaryEmbedding`` (position ids as an input) and ``Attention`` (causal).

Each is a layer with ONNX's schema, measured alone, in its sequences and in the model whole, with
real ONNX Runtime; the position ids are fed zeros (an index slot: in range), the model whole runs.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
from cli_checks import FAST_ENV, fast_flags
from onnx import TensorProto, helper
from typer.testing import CliRunner

from benanza.cli import app
from benanza.model.run_values import input_fills
from benanza.store import open_store

F, I64 = TensorProto.FLOAT, TensorProto.INT64
SYSTEM = "opset23-test-system"
HIDDEN, HEADS = 64, 4


def attention_block(build_model) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    half = HIDDEN // HEADS // 2
    angles = np.outer(np.arange(64), 1.0 / 10000 ** (np.arange(half) / half))
    weights = {w: rng.random((HIDDEN, HIDDEN), dtype=np.float32) for w in ("wq", "wk", "wv", "wo")}
    return build_model(
        [
            helper.make_node("RMSNormalization", ["x", "g"], ["n"], axis=-1, epsilon=1e-5),
            *(helper.make_node("MatMul", ["n", f"w{p}"], [p]) for p in "qkv"),
            helper.make_node("RotaryEmbedding", ["q", "cos", "sin", "pos"], ["qr"], num_heads=HEADS),
            helper.make_node("RotaryEmbedding", ["k", "cos", "sin", "pos"], ["kr"], num_heads=HEADS),
            helper.make_node("Attention", ["qr", "kr", "v"], ["a"], q_num_heads=HEADS, kv_num_heads=HEADS, is_causal=1),
            helper.make_node("MatMul", ["a", "wo"], ["o"]),
            helper.make_node("Add", ["o", "x"], ["y"]),
        ],
        [("x", F, ["batch", "seq", HIDDEN]), ("pos", I64, ["batch", "seq"])],
        [("y", F, ["batch", "seq", HIDDEN])],
        {
            "g": np.ones(HIDDEN, np.float32),
            "cos": np.cos(angles).astype(np.float32),
            "sin": np.sin(angles).astype(np.float32),
            **weights,
        },
        opset=23,
    )


def test_an_opset_23_attention_block_is_measured_whole_and_layer_by_layer(build_model, tmp_path) -> None:
    model = attention_block(build_model)
    assert input_fills(model) == {"pos": 0}  # RotaryEmbedding's position_ids: an index slot
    path = tmp_path / "block.onnx"
    onnx.save(model, path)
    uri = f"sqlite:///{tmp_path / 'block.db'}"
    shapes = ("--shape", "x=1x16x64", "--shape", "pos=1x16")
    run = CliRunner().invoke(
        app, ["run", str(path), *shapes, "--db", uri, "-f", "json", *fast_flags(SYSTEM)], env=FAST_ENV
    )
    assert run.exit_code == 0, run.output
    (row,) = json.loads(run.stdout)
    assert row["coverage"] == 1.0 and row["missing"] == [] and row["e2e_ms"] > 0
    with open_store(uri, create=False) as store:
        records = store.records(system=SYSTEM)
    assert all(r.outcome == "ok" for r in records), [(r.label, r.reason) for r in records if r.outcome != "ok"]
    ops = {r.label.split("[")[0].split(" ")[0] for r in records if r.kind == "layer"}
    assert {"RMSNormalization", "RotaryEmbedding", "Attention"} <= ops, ops


def test_onnx_s_own_attention_and_rotary_embedding_have_their_flops(build_model, process_proto) -> None:
    """Registered under com.microsoft only, ONNX's opset-23 Attention (torch's export of scaled_dot_product_attention
    at opset 23) had no FLOPs: a model's roofline and its layer table showed "-" for its attention."""
    processed = process_proto(attention_block(build_model), None, {"x": (2, 16, HIDDEN), "pos": (2, 16)})
    layers = {layer.op_type: layer for layer in processed.graph.layers}
    # Q.K^T and the weighted sum: 2 x 2 x B x H x S x S x d, d = HIDDEN / HEADS (the output is B x S x HIDDEN)
    assert layers["Attention"].flops == 4 * (2 * 16 * HIDDEN) * 16
    assert layers["RotaryEmbedding"].flops == 3 * 2 * 16 * HIDDEN
