"""Does a reference call follow a model's speed? The choice behind ``benanza.bench.reference`` (issue 16).

For ``--seconds`` per model, alternates a model's end to end (ONNX Runtime, the main job's
threads unless ``--threads``) with each candidate reference call, each timed as the median of
a few back-to-back batches, and reports each candidate's Pearson correlation with the model
over the pairs, and the spread (largest over smallest) of each series. A reference that
follows the host's slow periods as the model feels them correlates with it; one that moves on
its own (a host effect the model does not feel) does not, and would flag groups for nothing.

Candidates: the reference benanza samples (a 3x3 convolution of 64 channels at 28x28), a
``Relu`` of one float (the call path alone), a 32-channel 14x14 convolution and a 128x128
``MatMul``. JSON to ``benchmarks/results/reference_tracking.json``.

    nice python benchmarks/reference_tracking.py [--models NAME ...] [--seconds 60]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from benanza.bench.reference import conv3x3_network, reference_spec
from benanza.bench.spec import BenchmarkSpec, SpecKind
from benanza.model.network import InputRef, Network, NetworkNode, NetworkOutput, NetworkTensor
from benanza.model.zoo import zoo_paths
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU

RESULTS = Path(__file__).parent / "results"


def _one_node(op: str, inputs: tuple[InputRef, ...], shape: tuple[int, ...]) -> Network:
    out = NetworkTensor(shape, "float32")
    first = NetworkTensor(shape, "float32")
    node = NetworkNode(op, "", 13, (), inputs, (out,), layer_key=f"candidate:{op}{shape}")
    return Network((first,), (node,), (NetworkOutput(0, 0),), 1)


def candidates(runtime: OnnxRuntimeCPU) -> dict[str, BenchmarkSpec]:
    variant = tuple(sorted(runtime.variant().items()))
    nets = {
        "relu_1_float": _one_node("Relu", (InputRef.of_input(0),), (1,)),
        "conv_32x14x14": conv3x3_network(32, 14, "candidate:conv_32x14x14"),
        "matmul_128": _one_node("MatMul", (InputRef.of_input(0), InputRef.weight((128, 128), "float32")), (128, 128)),
    }
    specs = {"benanza_reference": reference_spec(runtime.name, variant)}
    for name, net in nets.items():
        specs[name] = BenchmarkSpec(SpecKind.LAYER, name, 1, "float32", runtime.name, variant, name, net)
    return specs


def _timed(call: Callable[[], object], per_batch: int, batches: int = 3) -> float:
    times = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(per_batch):
            call()
        times.append((time.perf_counter() - start) / per_batch)
    return statistics.median(times)


def track(model: Path, runtime: OnnxRuntimeCPU, seconds: float) -> dict:
    specs = candidates(runtime)
    model_spec = BenchmarkSpec(
        SpecKind.MODEL, model.stem, 1, "float32", runtime.name, (), model.stem, model={"path": str(model)}
    )
    prepared = {name: runtime.prepare(spec) for name, spec in specs.items()}
    whole = runtime.prepare(model_spec)
    try:
        per_call = {name: max(1, int(2e-3 / max(_timed(p.call, 5, 1), 1e-7))) for name, p in prepared.items()}
        series: dict[str, list[float]] = {name: [] for name in [*prepared, "model"]}
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for name, p in prepared.items():
                series[name].append(_timed(p.call, per_call[name]))
            series["model"].append(_timed(whole.call, 1))
    finally:
        for p in [*prepared.values(), whole]:
            p.close()
    m = np.array(series["model"])
    out = {"model": model.stem, "pairs": len(m), "model_spread": float(m.max() / m.min()), "candidates": {}}
    for name in prepared:
        s = np.array(series[name])
        out["candidates"][name] = {
            "median_us": float(np.median(s) * 1e6),
            "spread": float(s.max() / s.min()),
            "correlation_with_model": float(np.corrcoef(s, m)[0, 1]),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["squeezenet", "resnet50"], help="zoo model names")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads (default: every core)")
    parser.add_argument("--out", type=Path, default=RESULTS / "reference_tracking.json")
    args = parser.parse_args()
    runtime = OnnxRuntimeCPU(threads=args.threads)
    paths = {p.stem.removeprefix("light_"): p for p in zoo_paths()}
    results = []
    for name in args.models:
        result = track(paths[name], runtime, args.seconds)
        results.append(result)
        print(f"{result['model']}: {result['pairs']} pairs, model spread {result['model_spread']:.2f}x")
        for cand, figs in result["candidates"].items():
            print(
                f"  {cand:18} median {figs['median_us']:8.1f} us  spread {figs['spread']:.2f}x  "
                f"correlation {figs['correlation_with_model']:+.2f}"
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "benchmark": "reference_tracking",
        "threads": runtime.threads,
        "seconds_per_model": args.seconds,
        "models": results,
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
