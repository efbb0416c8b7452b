"""What joining two units costs: each pair of consecutive units as one network against the two alone.

DLBricks' composition sums units (or sequences) measured alone. A model's ShuffleNet units
summed to about 0.89 of its end to end at two threads on a 2-core VM, at one thread to about
0.93 (``noisy_neighbour.py``): the model pays something its units alone do not. This script
isolates it. For each model it plans the DLBricks sequences of two units (G = 2: consecutive
units, each pair once) and times, in one interleaved group at the harness's defaults (the
schedule the main job uses), every pair's network, every unit alone and the call-overhead
network, at each thread count. For each pair:

    join = (pair call - overhead) - sum over its units of (unit call - overhead)

the extra time of running the two units one after the other in one session, over running them
apart. Printed per thread count: the sum of the joins over the model's latency, the median
join, and the largest joins with their ops. JSON in ``benchmarks/results/unit_joins.json``.

    python benchmarks/unit_joins.py [--models shufflenet squeezenet] [--threads 1 2]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benanza.bench.generate import plan_model, specs_for_plan
from benanza.bench.harness import measure_interleaved
from benanza.config import default_fleet_config
from benanza.model.process import process_model
from benanza.model.zoo import zoo_paths
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU
from benanza.settings import load_settings

RESULTS = Path(__file__).parent / "results"
ROUNDS = 40  # the fewest rounds: every call sampled over a few seconds, not the first few hundred ms


def joins(path: Path, threads: int) -> dict[str, Any]:
    """One model's pairs at ``threads``: each pair's join (us) and the model's e2e (ms)."""
    runtime = OnnxRuntimeCPU(threads=threads)
    settings = default_fleet_config().harness_settings(load_settings()).model_copy(update={"kernel_runs": 0})
    plan = plan_model(process_model(path), runtime, (2,))
    specs = {s.key: s for s in specs_for_plan(plan, runtime.name, runtime.variant(), e2e=True)}
    unit_of = {frozenset(m): k for m, k in zip(plan.units, plan.unit_keys, strict=True)}
    pairs = []
    for members, key in zip(plan.sequences[2], plan.sequence_keys[2], strict=True):
        parts = [k for m, k in unit_of.items() if m <= set(members)]
        if len(parts) == 2:
            pairs.append((key, parts, "+".join(plan.graph.layers[i].op_type for i in members)))
    role = {plan.model_key: "model", plan.call_overhead_key: "overhead"}
    for key, parts, _ in pairs:
        role.setdefault(key, "pairs")
        role.update({k: "units" for k in parts if k not in role})
    keys = list(role)
    prepared = [runtime.prepare(specs[k]) for k in keys]
    try:  # each sum (the pairs, the units) known to the harness's target, over at least ROUNDS rounds
        rounds = measure_interleaved(
            [p.call for p in prepared], settings, parts=[role[k] for k in keys], threads=threads, min_rounds=ROUNDS
        )
    finally:
        for p in prepared:
            p.close()
    call = {k: t.stats.trimmed_mean * 1e6 for k, t in zip(keys, rounds.timings, strict=True)}
    overhead = call[plan.call_overhead_key]
    rows = []
    for key, parts, ops in pairs:
        alone = sum(call[k] - overhead for k in parts)
        rows.append(
            {"ops": ops, "pair_us": call[key] - overhead, "alone_us": alone, "join_us": call[key] - overhead - alone}
        )
    e2e_us = call[plan.model_key]
    total = sum(r["join_us"] for r in rows)
    return {
        "model": path.stem,
        "threads": threads,
        "e2e_ms": e2e_us / 1e3,
        "overhead_us": overhead,
        "pairs": len(rows),
        "sum_join_over_e2e": total / e2e_us,
        "median_join_us": statistics.median(r["join_us"] for r in rows) if rows else None,
        "disturbed": sum(bool(t.disturbed) for t in rounds.timings),
        "rows": sorted(rows, key=lambda r: -abs(r["join_us"])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["shufflenet", "squeezenet", "inception_v2"])
    parser.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    parser.add_argument("--out", type=Path, default=RESULTS / "unit_joins.json")
    args = parser.parse_args()
    paths = [p for p in zoo_paths() if any(m in p.stem for m in args.models)]
    found = []
    for path in paths:
        for threads in args.threads:
            result = joins(path, threads)
            found.append(result)
            top = ", ".join(f"{r['ops']} {r['join_us']:+.1f}" for r in result["rows"][:3])
            print(
                f"{result['model']:20s} threads {threads}: joins sum to {result['sum_join_over_e2e']:+.1%} of e2e "
                f"({result['e2e_ms']:.2f} ms, {result['pairs']} pairs, median {result['median_join_us']:+.1f} us, "
                f"{result['disturbed']} disturbed); largest: {top}",
                flush=True,
            )
    RESULTS.mkdir(exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "benchmark": "unit_joins",
                "machine": {"node": platform.node(), "processor": platform.processor() or platform.machine()},
                "time": datetime.now(UTC).isoformat(timespec="seconds"),
                "models": found,
            },
            indent=1,
        )
    )
    print(f"JSON: {args.out}")


if __name__ == "__main__":
    main()
