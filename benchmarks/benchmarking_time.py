"""Benchmarking time: unique layers vs every model whole, and the cost of one more model.

Every benchmark runs the same fixed number of timed calls (``--runs``), so the comparison
is about *what* is run, not about adaptive stopping:

1. whole models: prepare and run each zoo model ``runs`` times;
2. unique layers: prepare and run each unique layer (over the corpus) ``runs`` times;
3. one more model: with the other models' layers stored, how many new layers the last
   model adds and how long they take.

    python benchmarks/benchmarking_time.py [--runs 20] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from datetime import UTC, datetime
from pathlib import Path

from benanza.bench.generate import specs_for_plan, unique_specs
from benanza.bench.spec import SpecKind
from benanza.local import plan_models
from benanza.model.zoo import zoo_paths
from benanza.runtimes.base import get_runtime

RESULTS = Path(__file__).parent / "results"


def timed_runs(runtime, specs, runs: int) -> float:
    """Wall seconds to prepare each spec and call it ``runs`` times (plus one warm-up)."""
    start = time.perf_counter()
    for spec in specs:
        prepared = runtime.prepare(spec)
        try:
            for _ in range(runs + 1):
                prepared.call()
        finally:
            prepared.close()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    runtime = get_runtime("onnxruntime", threads=args.threads)
    paths = zoo_paths()
    plans = plan_models(paths, runtime, (1,), None, ())
    variant = runtime.variant()
    per_plan = [specs_for_plan(p, runtime.name, variant, e2e=True) for p in plans]
    models = [s for specs in per_plan for s in specs if s.kind is SpecKind.MODEL]
    layers_of = [[s for s in specs if s.kind is SpecKind.LAYER] for specs in per_plan]
    unique_layers = unique_specs(s for specs in layers_of for s in specs)
    total_layers = sum(len(p.graph.layers) for p in plans)

    t_models = timed_runs(runtime, models, args.runs)
    t_layers = timed_runs(runtime, unique_layers, args.runs)
    # one more model: the last zoo model added after the others are stored
    stored = {s.spec_id for specs in layers_of[:-1] for s in specs}
    new_layers = [s for s in unique_specs(layers_of[-1]) if s.spec_id not in stored]
    t_new = timed_runs(runtime, new_layers, args.runs)
    t_last_whole = timed_runs(runtime, [models[-1]], args.runs)

    result = {
        "benchmark": "benchmarking_time",
        "runs_per_benchmark": args.runs,
        "models": len(models),
        "layers_total": total_layers,
        "layers_unique": len(unique_layers),
        "whole_models_s": t_models,
        "unique_layers_s": t_layers,
        "speedup_unique_vs_whole": t_models / t_layers if t_layers else None,
        "one_more_model": {
            "model": plans[-1].model,
            "new_unique_layers": len(new_layers),
            "of_its_unique_layers": len(unique_specs(layers_of[-1])),
            "new_layers_s": t_new,
            "whole_model_s": t_last_whole,
        },
        "variant": variant,
        "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()},
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "benchmarking_time.json").write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"{len(models)} models whole: {t_models:.1f} s; {len(unique_layers)} unique of {total_layers} layers: "
        f"{t_layers:.1f} s (whole/unique = {result['speedup_unique_vs_whole']:.2f}x), {args.runs} runs each"
    )
    o = result["one_more_model"]
    print(
        f"adding {o['model']} after the others: {o['new_unique_layers']} new of {o['of_its_unique_layers']} unique "
        f"layers, {t_new:.2f} s (the model whole: {t_last_whole:.2f} s)"
    )


if __name__ == "__main__":
    main()
