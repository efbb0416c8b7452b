"""Do a quantized layer's scale values change its latency? Layers that differ only in them, side by side.

benanza keys a quantized op's scales (``x_scale``, ``y_scale``, ``B_scale``...) by shape and
dtype and which of them are equal, not by value (``benanza.model.keys``): two layers that differ
only in their scales are one benchmark. This script checks that premise on the corpus's int8
models (QDQ, QOperator, dynamic). It finds every key that stands for layers (single nodes) or
units (the groups ONNX Runtime fuses, as ``bench`` plans them) carrying different scales, and
for a sample of them (up to ``--per-op`` per op or unit signature) times three ONNX Runtime
sessions in the same rounds, in a random order each round:

- ``A``: the first member, as benanza benchmarks the key (with its scales);
- ``A'``: the same member in a second session: how far one benchmark is from itself;
- ``B``: another member, with its own scales.

Each is the median over ``--rounds`` rounds of the mean of k back-to-back calls (k so that a
round takes about 2 ms). Reported: per pair ``B/A`` and ``A'/A``; over all pairs the mean and
the largest ``|B/A - 1|`` against the same for ``|A'/A - 1|``. If scales changed the work,
``B/A`` would stray beyond ``A'/A``.

    python benchmarks/scale_values.py [--per-op 6] [--rounds 60] [--threads 1]

Writes ``benchmarks/results/scale_values.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).parent))

from benchmarking_time import corpus_entries  # the corpus manifest, read one way

from benanza.bench.build import build_onnx
from benanza.bench.generate import plan_model
from benanza.model.graph import ModelGraph
from benanza.model.network import network_of
from benanza.model.process import process_model
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU, feeds_for, session_options

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
ROUND_S = 0.002
Member = tuple[str, str, tuple[Any, ...], tuple[int, ...]]  # key, signature, scale values, layers
Member = tuple[str, str, tuple[Any, ...], tuple[int, ...]]  # key, signature, scale values, layers


def members(graph: ModelGraph, units: Sequence[Sequence[int]]) -> list[Member]:
    """(key, signature, scale values, layers) of each single layer and each fused unit with scales."""
    out = []
    for unit in [(layer.index,) for layer in graph.layers] + [tuple(u) for u in units if len(u) > 1]:
        scales = tuple(s for i in unit for s in graph.layers[i].scale_values)
        if not scales:
            continue
        key, _ = network_of(graph, unit)
        signature = "+".join(graph.layers[i].op_type for i in unit)
        out.append((key, signature, scales, unit))
    return out


def session(graph: ModelGraph, unit: tuple[int, ...], threads: int) -> tuple[Any, dict[str, Any]]:
    _, network = network_of(graph, unit)
    model = build_onnx(network)
    sess = ort.InferenceSession(
        model.SerializeToString(), session_options("extended", threads), providers=["CPUExecutionProvider"]
    )
    return sess, feeds_for(model)


def per_call_s(sess: Any, feeds: dict[str, Any], k: int) -> float:
    start = time.perf_counter()
    for _ in range(k):
        sess.run(None, feeds)
    return (time.perf_counter() - start) / k


def compare(a: tuple[Any, dict], a2: tuple[Any, dict], b: tuple[Any, dict], rounds: int, rng: random.Random) -> dict:
    for sess, feeds in (a, a2, b):
        for _ in range(10):
            sess.run(None, feeds)
    k = max(1, int(ROUND_S / max(per_call_s(*a, 20), 1e-7)))
    times: dict[str, list[float]] = {"a": [], "a2": [], "b": []}
    for _ in range(rounds):
        order = [("a", a), ("a2", a2), ("b", b)]
        rng.shuffle(order)
        for name, (sess, feeds) in order:
            times[name].append(per_call_s(sess, feeds, k))
    med = {name: statistics.median(ts) for name, ts in times.items()}
    return {"a_us": 1e6 * med["a"], "same": med["a2"] / med["a"], "other": med["b"] / med["a"], "calls_per_round": k}


def summary(ratios: Sequence[float]) -> dict[str, float]:
    dev = [abs(r - 1) for r in ratios]
    return {
        "mean_abs_dev": statistics.mean(dev),
        "geomean_abs_dev": math.exp(statistics.mean(math.log(max(d, 1e-6)) for d in dev)),
        "max_abs_dev": max(dev),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-op", type=int, default=6, help="pairs per op (or unit) signature")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    runtime = OnnxRuntimeCPU(threads=args.threads)
    manifest = [e for e in corpus_entries() if e.variant.startswith("int8")]
    # key -> {scale values -> (model, graph, unit)}: the first member is the one benanza measures
    by_key: dict[str, dict[tuple[Any, ...], tuple[str, ModelGraph, tuple[int, ...]]]] = {}
    signature: dict[str, str] = {}
    for entry in manifest:
        processed = process_model(entry.path, 1, entry.request)
        plan = plan_model(processed, runtime)
        for key, sig, scales, unit in members(processed.graph, plan.units):
            by_key.setdefault(key, {}).setdefault(scales, (entry.name, processed.graph, unit))
            signature[key] = sig
    shared = {k: v for k, v in by_key.items() if len(v) > 1}
    by_sig: dict[str, list[str]] = {}
    for key in sorted(shared):
        by_sig.setdefault(signature[key], []).append(key)
    picked = [k for sig in sorted(by_sig) for k in rng.sample(by_sig[sig], min(args.per_op, len(by_sig[sig])))]
    print(
        f"{len(by_key)} keys with scales in {len(manifest)} int8 models; {len(shared)} stand for members with"
        f" different scales; timing {len(picked)} pairs"
    )
    pairs = []
    for key in picked:
        (model_a, graph_a, unit_a), (model_b, graph_b, unit_b) = list(shared[key].values())[:2]
        a, a2 = session(graph_a, unit_a, args.threads), session(graph_a, unit_a, args.threads)
        figures = compare(a, a2, session(graph_b, unit_b, args.threads), args.rounds, rng)
        sig = signature[key]
        pairs.append({"key": key, "unit": sig, "a": model_a, "b": model_b, "members": len(shared[key]), **figures})
        same, other = figures["same"], figures["other"]
        print(f"{sig[:48]:48s} {figures['a_us']:9.1f} us  A'/A {same:.3f}  B/A {other:.3f}", flush=True)
    result = {
        "benchmark": "scale_values",
        "models": [e.name for e in manifest],
        "keys_with_scales": len(by_key),
        "keys_standing_for_different_scales": len(shared),
        "members_sharing": sum(len(v) for v in shared.values()),
        "pairs": len(pairs),
        "other_scales_B_over_A": summary([p["other"] for p in pairs]),
        "same_layer_again_A2_over_A": summary([p["same"] for p in pairs]),
        "rounds": args.rounds,
        "threads": args.threads,
        "per_pair": pairs,
        "machine": {"cpu": platform.machine(), "python": platform.python_version(), "onnxruntime": ort.__version__},
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    other, same = result["other_scales_B_over_A"], result["same_layer_again_A2_over_A"]
    print(
        f"other scales |B/A-1|: mean {100 * other['mean_abs_dev']:.2f}%, max {100 * other['max_abs_dev']:.2f}%;"
        f" same layer again |A'/A-1|: mean {100 * same['mean_abs_dev']:.2f}%, max {100 * same['max_abs_dev']:.2f}%"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "scale_values.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
