"""The fixed cost of one layer benchmark: everything but the timed samples.

Each unique layer of the given models is benchmarked through ``run_spec`` (ONNX Runtime,
one thread) with the sampling cut to its least (one warm-up call, one sample) and the kernel
times as configured (``kernel_runs``, default 20). What remains is the cost every benchmark
pays whatever the stopping rule wants: building the layer's ONNX model with synthetic
weights, serialising it, ONNX Runtime sessions (the timed one and the profiling one), the
profiled runs, the profile's file, the record. Reported per benchmark, median and total,
with the share of the profiled runs (their own session run time).

    python benchmarks/fixed_cost.py [--models resnet18 bert] [--repeat 3] [--tag TAG]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

from benanza.bench.execute import run_spec
from benanza.bench.generate import plan_model, specs_for_plan
from benanza.bench.harness import HarnessSettings
from benanza.bench.spec import SpecKind
from benanza.model.process import process_model
from benanza.model.request import BindingRequest
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"
RESULTS = Path(__file__).parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["resnet18", "bert"], help="corpus.json names")
    parser.add_argument("--repeat", type=int, default=3, help="passes over the layers; the median pass is reported")
    parser.add_argument("--kernel-runs", type=int, default=HarnessSettings().kernel_runs)
    parser.add_argument("--tag", default="", help="suffix of the result file, e.g. 'before'")
    args = parser.parse_args()
    manifest = {e["name"]: e for e in json.loads((CORPUS / "corpus.json").read_text())}
    runtime = OnnxRuntimeCPU(threads=1)
    settings = HarnessSettings(
        warmup_runs=1, min_samples=1, min_time_s=0.0, max_time_s=1e-6, kernel_runs=args.kernel_runs
    )
    specs = {}
    for name in args.models:
        entry = manifest[name]
        request = BindingRequest.parse(entry["shape_args"])
        plan = plan_model(process_model(CORPUS / entry["file"], 1, request), runtime, batch=1, request=request)
        for spec in specs_for_plan(plan, runtime.name, runtime.variant(), e2e=False):
            if spec.kind is SpecKind.LAYER:
                specs.setdefault(spec.spec_id, spec)
    passes = []
    for _ in range(args.repeat):
        walls, calls = [], []
        for spec in specs.values():
            started = time.perf_counter()
            record = run_spec(spec, runtime, settings, system="fixed-cost", stack_id="-")
            walls.append(time.perf_counter() - started)
            calls.append(record.stats.median if record.stats is not None else 0.0)
            if record.outcome != "ok":
                raise SystemExit(f"{spec.label}: {record.outcome}: {record.reason}")
        passes.append({"total_s": sum(walls), "median_ms": 1e3 * statistics.median(walls), "calls_s": sum(calls)})
    passes.sort(key=lambda p: p["total_s"])
    mid = passes[len(passes) // 2]
    result = {
        "benchmark": "fixed_cost",
        "models": args.models,
        "unique_layers": len(specs),
        "kernel_runs": args.kernel_runs,
        "per_benchmark_median_ms": mid["median_ms"],
        "total_s": mid["total_s"],
        "passes_total_s": [p["total_s"] for p in passes],
        "harness": settings.model_dump(),
        "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()},
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"fixed_cost{'_' + args.tag if args.tag else ''}.json").write_text(json.dumps(result, indent=1) + "\n")
    spread = ", ".join(f"{p['total_s']:.2f}" for p in passes)
    print(
        f"{len(specs)} unique layers of {', '.join(args.models)}: fixed cost per benchmark {mid['median_ms']:.1f} ms "
        f"median, {mid['total_s']:.2f} s in all (passes: {spread} s)"
    )


if __name__ == "__main__":
    main()
