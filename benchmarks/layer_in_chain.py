"""What one call of a layer costs beyond its share of a model: alone against in a chain of its copies.

DLBricks' composition sums layers (or sequences) called alone, less benanza's fixed cost of
one call (a ``Relu`` of one float, ``call_overhead_ms``) for every call beyond the first. That
holds if a call's fixed cost is the same for every layer. This script measures it per layer:
each network is ``k`` copies of one layer, one after the other (each reading the one before,
its own weights), for ``k`` in ``--chain`` (1, 2, 4, 8), every output read by a one-element
``Slice`` as benanza's sinks are, all sampled in one interleaved group at the harness's defaults
(benanza's session options: no spinning, sequential, ``extended``). Per layer, a least-squares
line through (k, call latency) gives

    slope      what one more copy costs inside one call (the layer as part of a model),
    intercept  what a call costs besides its copies (the layer's own fixed cost of a call),

and the script prints both beside the ``Relu`` of one float's call, the fixed cost the
composition subtracts. ``excess = intercept - relu`` is what each separately measured call of
that layer adds to a composition beyond the subtraction: a composition of n such calls is
high by about (n - 1) x excess. Run at each of ``--threads``.

Each session is timed two ways side by side in the same group: ``numpy``, ``session.run`` with
numpy arrays, as benanza's CPU calls were made before 084ede0, and ``bound``, ``run_with_iobinding`` on
tensors bound once (``OrtValue``), as a layer inside a model reads what ONNX Runtime already
holds. An elementwise op that ONNX Runtime runs in place inside the chain (``Relu``) cannot do
so alone on a fed input: its excess is that write to a fresh buffer, not a fixed cost.

    python benchmarks/layer_in_chain.py [--threads 1 2] [--chain 1 2 4 8] [--out PATH]

JSON in ``benchmarks/results/layer_in_chain.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from benanza.bench.harness import measure_interleaved
from benanza.bench.stats import trimmed_mean_interval
from benanza.config import default_fleet_config
from benanza.runtimes.onnxruntime import bound_call, session_options
from benanza.settings import load_settings

RESULTS = Path(__file__).parent / "results"
FEEDS = ("numpy", "bound")  # session.run with numpy arrays (benanza before 084ede0); run_with_iobinding (now)
ROUNDS = 100  # at least: a ms-long layer's intercept known to tens of us, not hundreds


@dataclass(frozen=True)
class Layer:
    """One layer that chains into itself: its input's shape kept by its output."""

    name: str
    op: str  # Conv, MatMul, Add, Relu
    shape: tuple[int, ...]  # the input (and output) shape
    kernel: int = 0  # Conv: the square kernel's side; MatMul: the weight's columns = rows

    def network(self, copies: int) -> bytes:
        rng = np.random.default_rng(0)
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(self.shape))
        nodes, inits, prev = [], [], "x"
        for i in range(copies):
            out = f"y{i}"
            if self.op == "Conv":
                c = self.shape[1]
                w = (rng.standard_normal((c, c, self.kernel, self.kernel)) * 0.05).astype(np.float32)
                inits.append(onnx.numpy_helper.from_array(w, f"w{i}"))
                nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [out], pads=[self.kernel // 2] * 4))
            elif self.op == "MatMul":
                n = self.shape[-1]
                w = (rng.standard_normal((n, n)) * 0.05).astype(np.float32)
                inits.append(onnx.numpy_helper.from_array(w, f"w{i}"))
                nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [out]))
            elif self.op == "Add":
                b = rng.standard_normal(self.shape).astype(np.float32)
                inits.append(onnx.numpy_helper.from_array(b, f"w{i}"))
                nodes.append(helper.make_node("Add", [prev, f"w{i}"], [out]))
            else:
                nodes.append(helper.make_node(self.op, [prev], [out]))
            prev = out
        # the sink: one element of the last output, as benanza reads a benchmarked network's outputs
        zeros = [0] * len(self.shape)
        inits += [
            onnx.numpy_helper.from_array(np.array(zeros, np.int64), "starts"),
            onnx.numpy_helper.from_array(np.array([1] * len(self.shape), np.int64), "ends"),
        ]
        nodes.append(helper.make_node("Slice", [prev, "starts", "ends"], ["sink"]))
        sink = helper.make_tensor_value_info("sink", TensorProto.FLOAT, None)
        graph = helper.make_graph(nodes, self.name, [x], [sink], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        return model.SerializeToString()


LAYERS = (
    Layer("relu_one_float", "Relu", (1,)),
    Layer("conv3x3_c64_28", "Conv", (1, 64, 28, 28), 3),
    Layer("conv3x3_c32_56", "Conv", (1, 32, 56, 56), 3),
    Layer("conv1x1_c256_14", "Conv", (1, 256, 14, 14), 1),
    Layer("matmul_128x768", "MatMul", (1, 128, 768), 768),
    Layer("add_64_28", "Add", (1, 64, 28, 28)),
    Layer("relu_64_28", "Relu", (1, 64, 28, 28)),
    Layer("relu_256_56", "Relu", (1, 256, 56, 56)),
)


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares slope and intercept of latency over chain length."""
    k = np.array([p[0] for p in points], float)
    t = np.array([p[1] for p in points], float)
    slope, intercept = np.polyfit(k, t, 1)
    return float(slope), float(intercept)


def run(threads: int, chain: list[int]) -> dict:
    settings = default_fleet_config().harness_settings(load_settings()).model_copy(update={"kernel_runs": 0})
    options = session_options("extended", threads)
    calls, names, keep = [], [], []
    for layer in LAYERS:
        feed = {"x": np.random.default_rng(1).standard_normal(layer.shape).astype(np.float32)}
        for k in chain if layer.name != "relu_one_float" else [1]:
            session = ort.InferenceSession(layer.network(k), options, providers=["CPUExecutionProvider"])
            binding = bound_call(session, feed)  # as benanza's timed calls are made
            keep.append((session, binding))
            # the same session two ways, side by side in one group
            calls.append(lambda s=session, f=feed: s.run(None, f))
            names.append(("numpy", layer.name, k))
            calls.append(lambda s=session, b=binding: s.run_with_iobinding(b))
            names.append(("bound", layer.name, k))
    parts = [f"{feed} {name}" for feed, name, _ in names]
    rounds = measure_interleaved(calls, settings, parts=parts, threads=threads, min_rounds=ROUNDS)
    found: dict[tuple[str, str], dict] = {}
    for (feed, name, k), timing in zip(names, rounds.timings, strict=True):
        if isinstance(timing, Exception):
            raise timing
        interval = trimmed_mean_interval(timing.samples)
        entry = found.setdefault(
            (feed, name), {"layer": name, "feed": feed, "calls_us": {}, "half_width_us": {}, "disturbed": 0}
        )
        entry["calls_us"][k] = timing.stats.trimmed_mean * 1e6
        entry["half_width_us"][k] = (interval.high - interval.low) / 2 * 1e6
        entry["disturbed"] += bool(timing.disturbed)
    relu = {feed: found.pop((feed, "relu_one_float"))["calls_us"][1] for feed in FEEDS}
    rows = []
    for (feed, _), entry in found.items():
        slope, intercept = fit(sorted(entry["calls_us"].items()))
        rows.append({**entry, "slope_us": slope, "intercept_us": intercept, "excess_us": intercept - relu[feed]})
    return {"threads": threads, "relu_one_float_us": relu, "layers": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    parser.add_argument("--chain", nargs="*", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--out", type=Path, default=RESULTS / "layer_in_chain.json")
    args = parser.parse_args()
    results = []
    for threads in args.threads:
        result = run(threads, args.chain)
        results.append(result)
        relu = result["relu_one_float_us"]
        print(
            f"threads {threads}: a Relu of one float {relu['numpy']:.1f} us a call fed numpy, {relu['bound']:.1f} bound"
        )
        for row in result["layers"]:
            alone = row["calls_us"][min(row["calls_us"])]
            print(
                f"  {row['feed']:5s} {row['layer']:16s} alone {alone:8.1f} us  "
                f"per copy in a chain {row['slope_us']:8.1f} us  "
                f"fixed cost of a call {row['intercept_us']:7.1f} us  excess over the Relu {row['excess_us']:+7.1f} us"
                f"  ({row['disturbed']} disturbed)",
                flush=True,
            )
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "benchmark": "layer_in_chain",
                "machine": {"node": platform.node(), "processor": platform.processor() or platform.machine()},
                "time": datetime.now(UTC).isoformat(timespec="seconds"),
                "chain": args.chain,
                "results": results,
            },
            indent=1,
        )
    )
    print(f"JSON: {args.out}")


if __name__ == "__main__":
    main()
