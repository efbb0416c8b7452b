"""What the lengths a model computes change in its attention layer's benchmark (``benanza.model.run_values``).

A Llama-style decoder as onnxruntime-genai's builder exports it for CPU int4 (``Gather``
embedding, ``SimplifiedLayerNormalization``, 4-bit ``MatMulNBits`` projections,
``GroupQueryAttention`` with rotary caches and a KV cache, ``SkipSimplifiedLayerNormalization``,
a SiLU-gated MLP), one decode step (one new token) after a cache of ``--past`` tokens. The
attention reads ``seqlens_k = ReduceSum(attention_mask) - 1``, computed by the model.

For each cache length its ``GroupQueryAttention`` layer is built as benanza builds it, two ways,
timed side by side in one interleaved group at the harness's defaults (bound calls):

- ``values``: with the length the model computes (``run_values``), as benanza does now;
- ``zeros``: the same network with that input fed synthetic zeros, as before (the layer attends
  over one token whatever the cache).

It also runs the model whole on its feeds: now (mask of ones) and as before (zeros), which fails.

    python benchmarks/computed_values.py [--past 15 255 1023] [--threads 1]

JSON in ``benchmarks/results/computed_values.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from benanza.bench.build import build_onnx
from benanza.bench.harness import measure_interleaved
from benanza.config import default_fleet_config
from benanza.model.network import network_of
from benanza.model.process import process_model
from benanza.model.request import BindingRequest
from benanza.runtimes.onnxruntime import bound_call, feeds_for, ort_message, session_options
from benanza.settings import load_settings

RESULTS = Path(__file__).parent / "results"
HIDDEN, HEADS, KV_HEADS, HEAD, FF, VOCAB, LAYERS, BLOCK = 256, 8, 2, 32, 512, 1000, 2, 32


def decoder(max_len: int) -> onnx.ModelProto:
    """The decoder, rotary caches for ``max_len`` positions; inputs input_ids, attention_mask, the KV cache."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []

    def init(name: str, array: np.ndarray) -> str:
        inits.append(nh.from_array(array, name))
        return name

    def nbits(name: str, x: str, k: int, n: int) -> str:
        blocks = k // BLOCK
        b = init(f"{name}.qweight", rng.integers(0, 255, (n, blocks, BLOCK // 2), dtype=np.uint8))
        s = init(f"{name}.scales", (rng.random(n * blocks, dtype=np.float32) * 0.01).astype(np.float32))
        attrs = {"K": k, "N": n, "bits": 4, "block_size": BLOCK, "accuracy_level": 4}
        nodes.append(h.make_node("MatMulNBits", [x, b, s], [f"{name}.out"], name=name, domain="com.microsoft", **attrs))
        return f"{name}.out"

    init("embed", rng.random((VOCAB, HIDDEN), dtype=np.float32))
    init("one", np.array(1, np.int64))
    init("axes", np.array([1], np.int64))
    angles = np.outer(np.arange(max_len, dtype=np.float32), 1.0 / 10000 ** (np.arange(0, HEAD, 2) / HEAD))
    init("cos_cache", np.cos(angles).astype(np.float32))
    init("sin_cache", np.sin(angles).astype(np.float32))
    nodes += [
        h.make_node("Gather", ["embed", "input_ids"], ["x0"], name="embed"),
        h.make_node("ReduceSum", ["attention_mask", "axes"], ["total"], keepdims=0, name="mask_sum"),
        h.make_node("Sub", ["total", "one"], ["last"], name="mask_sub"),
        h.make_node("Cast", ["last"], ["seqlens_k"], to=T.INT32, name="seqlens_k"),
        h.make_node("Shape", ["attention_mask"], ["mask_shape"], name="mask_shape"),
        h.make_node("Gather", ["mask_shape", "one"], ["width"], axis=0, name="mask_width"),
        h.make_node("Cast", ["width"], ["total_seq"], to=T.INT32, name="total_seq"),
    ]
    init("norm0", np.ones(HIDDEN, np.float32))
    nodes.append(h.make_node("SimplifiedLayerNormalization", ["x0", "norm0"], ["n0"], axis=-1, epsilon=1e-5, name="n0"))
    norm, skip, inputs, outputs = "n0", "x0", [], []
    cache = ["batch", KV_HEADS, "past", HEAD]
    for i in range(LAYERS):
        q, k, v = (nbits(f"l{i}.{p}", norm, HIDDEN, n) for p, n in (("q", HIDDEN), ("k", 64), ("v", 64)))
        past_k, past_v = f"past_key_values.{i}.key", f"past_key_values.{i}.value"
        inputs += [h.make_tensor_value_info(past_k, T.FLOAT, cache), h.make_tensor_value_info(past_v, T.FLOAT, cache)]
        present = [f"present.{i}.key", f"present.{i}.value"]
        outputs += [h.make_tensor_value_info(p, T.FLOAT, ["batch", KV_HEADS, "total", HEAD]) for p in present]
        nodes.append(
            h.make_node(
                "GroupQueryAttention",
                [q, k, v, past_k, past_v, "seqlens_k", "total_seq", "cos_cache", "sin_cache"],
                [f"l{i}.attn", *present],
                name=f"l{i}.gqa",
                domain="com.microsoft",
                num_heads=HEADS,
                kv_num_heads=KV_HEADS,
                do_rotary=1,
                scale=HEAD**-0.5,
            )
        )
        o = nbits(f"l{i}.o", f"l{i}.attn", HIDDEN, HIDDEN)
        init(f"l{i}.w1", np.ones(HIDDEN, np.float32))
        nodes.append(
            h.make_node(
                "SkipSimplifiedLayerNormalization",
                [o, skip, f"l{i}.w1"],
                [f"l{i}.n1", "", "", f"l{i}.r1"],
                name=f"l{i}.skip1",
                domain="com.microsoft",
                epsilon=1e-5,
            )
        )
        gate, up = nbits(f"l{i}.gate", f"l{i}.n1", HIDDEN, FF), nbits(f"l{i}.up", f"l{i}.n1", HIDDEN, FF)
        nodes += [
            h.make_node("Sigmoid", [gate], [f"l{i}.sig"], name=f"l{i}.sig"),
            h.make_node("Mul", [gate, f"l{i}.sig"], [f"l{i}.silu"], name=f"l{i}.silu"),
            h.make_node("Mul", [f"l{i}.silu", up], [f"l{i}.gu"], name=f"l{i}.gu"),
        ]
        down = nbits(f"l{i}.down", f"l{i}.gu", FF, HIDDEN)
        init(f"l{i}.w2", np.ones(HIDDEN, np.float32))
        nodes.append(
            h.make_node(
                "SkipSimplifiedLayerNormalization",
                [down, f"l{i}.r1", f"l{i}.w2"],
                [f"l{i}.n2", "", "", f"l{i}.r2"],
                name=f"l{i}.skip2",
                domain="com.microsoft",
                epsilon=1e-5,
            )
        )
        norm, skip = f"l{i}.n2", f"l{i}.r2"
    nodes.append(h.make_node("Identity", [nbits("lm_head", norm, HIDDEN, VOCAB)], ["logits"], name="logits"))
    text = [
        h.make_tensor_value_info(n, T.INT64, ["batch", d])
        for n, d in (("input_ids", "seq"), ("attention_mask", "total"))
    ]
    logits = h.make_tensor_value_info("logits", T.FLOAT, ["batch", "seq", VOCAB])
    graph = h.make_graph(nodes, "llama_int4", [*text, *inputs], [logits, *outputs], inits)
    return h.make_model(
        graph, opset_imports=[h.make_opsetid("", 21), h.make_opsetid("com.microsoft", 1)], ir_version=10
    )


def step_shapes(past: int) -> dict[str, tuple[int, ...]]:
    cache = (1, KV_HEADS, past, HEAD)
    shapes = {"input_ids": (1, 1), "attention_mask": (1, past + 1)}
    return shapes | {f"past_key_values.{i}.{kv}": cache for i in range(LAYERS) for kv in ("key", "value")}


def whole_model_runs(path: Path, bound: onnx.ModelProto, zeros: bool) -> str | None:
    """None if ONNX Runtime runs the model whole on the feeds benanza gives it (``bound``: the model with its
    shapes bound), else why not; ``zeros``: its integer inputs all zeros, as before."""
    feeds = feeds_for(bound)
    if zeros:
        feeds = {k: np.zeros_like(v) if v.dtype.kind in "iub" else v for k, v in feeds.items()}
    options = ort.SessionOptions()
    options.log_severity_level = 4  # the failure is reported below, once
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    try:
        session.run(None, feeds)
    except Exception as exc:  # the failure is the finding
        return ort_message(exc)
    return None


def run(pasts: list[int], threads: int) -> dict:
    settings = default_fleet_config().harness_settings(load_settings()).model_copy(update={"kernel_runs": 0})
    options = session_options("extended", threads)
    tmp = Path(tempfile.mkdtemp())
    path = tmp / "llama_int4.onnx"
    onnx.save(decoder(max(pasts) + 1), path)
    calls, names, keep, rows = [], [], [], []
    for past in pasts:
        processed = process_model(path, None, BindingRequest(step_shapes(past)))
        (index, *_) = [layer.index for layer in processed.graph.layers if layer.op_type == "GroupQueryAttention"]
        _, network = network_of(processed.graph, [index])
        zeros = dataclasses.replace(network, inputs=tuple(dataclasses.replace(t, value=None) for t in network.inputs))
        carried = {n: t.value for n, t in enumerate(network.inputs) if t.value is not None}
        rows.append(
            {
                "past": past,
                "carried_inputs": {str(k): list(v) for k, v in carried.items()},
                "whole_model_now": whole_model_runs(path, processed.proto, zeros=False) or "runs",
                "whole_model_before": whole_model_runs(path, processed.proto, zeros=True) or "runs",
            }
        )
        for how, net in (("values", network), ("zeros", zeros)):
            model = build_onnx(net, sink=True)
            session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            feeds = feeds_for(model)
            binding = bound_call(session, feeds)
            keep.append((session, binding, feeds))
            calls.append(lambda s=session, b=binding: s.run_with_iobinding(b))
            names.append((past, how))
    rounds = measure_interleaved(calls, settings, threads=threads, min_rounds=50)
    timed = {}
    for (past, how), timing in zip(names, rounds.timings, strict=True):
        if isinstance(timing, Exception):
            raise timing
        timed[(past, how)] = (timing.stats.trimmed_mean * 1e6, bool(timing.disturbed))
    for row in rows:
        (values_us, d1), (zeros_us, d2) = timed[(row["past"], "values")], timed[(row["past"], "zeros")]
        row |= {"values_us": values_us, "zeros_us": zeros_us, "ratio": values_us / zeros_us, "disturbed": d1 or d2}
    return {"threads": threads, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--past", nargs="*", type=int, default=[15, 255, 1023])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS / "computed_values.json")
    args = parser.parse_args()
    result = run(args.past, args.threads)
    print(f"GroupQueryAttention alone, one decode step, {args.threads} thread(s): call latency (us, 20% trimmed mean)")
    print(f"{'past':>6} {'values':>10} {'zeros':>10} {'ratio':>7}  whole model now / before")
    for r in result["rows"]:
        mark = " (disturbed)" if r["disturbed"] else ""
        print(
            f"{r['past']:>6} {r['values_us']:>10.1f} {r['zeros_us']:>10.1f} {r['ratio']:>7.2f}{mark}  "
            f"{r['whole_model_now']} / {r['whole_model_before']}"
        )
    document = {
        "benchmark": "computed_values",
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": platform.node(),
        "onnxruntime": ort.__version__,
        **result,
        "command": " ".join(
            ["python benchmarks/computed_values.py --past", *map(str, args.past), f"--threads {args.threads}"]
        ),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
