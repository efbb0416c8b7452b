"""DLBricks composition accuracy: composed vs end-to-end latency per zoo model, G = 1..5.

Benchmarks every model's layers, execution groups, sequences of at most G units and the
whole model into a SQLite database (incremental: a second run reuses what is stored),
then reports composed/e2e per model and G, the geometric mean of |composed/e2e - 1| per
G, and the best G. Goals (issue 3): within 3% at the best G, within 8% at G = 1.
Every ratio is taken from measurements of the same run and machine.

    python benchmarks/composition_accuracy.py [--db sqlite:///benchmarks/results/composition.db]
        [--granularity 1,2,3,4,5] [--threads N] [--min-time 0.05] [--max-time 1.0] [models...]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from datetime import UTC, datetime
from pathlib import Path

from benanza.analysis.lower_bound import KERNEL_STATISTIC
from benanza.bench.harness import HarnessSettings
from benanza.local import analyze, bench, open_local, plan_models
from benanza.model.zoo import zoo_paths

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--db", default=f"sqlite:///{RESULTS / 'composition.db'}")
    parser.add_argument("--granularity", default="1,2,3,4,5")
    parser.add_argument(
        "--threads", type=int, default=1, help="intra-op threads (the interleaved schedule needs 1; default 1)"
    )
    parser.add_argument("--min-time", type=float, default=0.05)
    parser.add_argument("--max-time", type=float, default=1.0)
    parser.add_argument(
        "--schedule",
        choices=["sequential", "interleaved"],
        default="interleaved",
        help="interleaved: each model's benchmarks sampled together in rounds (drift hits all alike)",
    )
    args = parser.parse_args()
    grans = [int(g) for g in args.granularity.split(",")]
    settings = HarnessSettings(min_time_s=args.min_time, max_time_s=args.max_time, schedule=args.schedule)
    ctx = open_local(args.db, "onnxruntime", {"threads": args.threads}, settings=settings)
    try:
        plans = plan_models(args.models or zoo_paths(), ctx.runtime, (1,), granularities=grans)
        started = time.perf_counter()
        summary = bench(ctx, plans, e2e=True)
        bench_s = time.perf_counter() - started
        rows = analyze(ctx, plans)
    finally:
        ctx.close()
    per_model = []
    errors: dict[int, list[float]] = {g: [] for g in grans}
    for r in rows:
        ratios = {g: (r.composed_ms[g] / r.e2e_ms if r.composed_ms.get(g) and r.e2e_ms else None) for g in grans}
        for g, v in ratios.items():
            if v is not None:
                errors[g].append(abs(v - 1))
        per_model.append(
            {
                "model": r.model,
                "e2e_ms": r.e2e_ms,
                "sequential_lb_ms": r.sequential_ms,
                "parallel_lb_ms": r.parallel_ms,
                "sequential_lb_over_e2e": r.sequential_ms / r.e2e_ms if r.sequential_ms and r.e2e_ms else None,
                "composed_ms": {str(g): r.composed_ms.get(g) for g in grans},
                "composed_over_e2e": {str(g): v for g, v in ratios.items()},
                "coverage": r.coverage,
            }
        )
    geo = {g: _geomean_error(v) for g, v in errors.items()}
    best = min((g for g in grans if geo[g] is not None), key=lambda g: geo[g], default=None)
    result = {
        "benchmark": "composition_accuracy",
        "system": ctx.system,
        "stack_id": ctx.stack_id,
        "variant": ctx.variant,
        "run": summary.to_dict(),
        "per_model": per_model,
        "geomean_abs_error": {str(g): v for g, v in geo.items()},
        "best_g": best,
        "goals": {"best_g": 0.03, "g1": 0.08},
        "statistic": "composed = sum of sequence call latency (20% trimmed mean); e2e = model call latency (same)",
        "lower_bound_statistic": f"sum of unit kernel time ({KERNEL_STATISTIC}, ORT profiler)",
        "bench_s": bench_s,
        "settings": settings.model_dump(),
        "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()},
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "composition_accuracy.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'model':24} {'e2e ms':>9} " + " ".join(f"{'G=' + str(g):>7}" for g in grans))
    for m in per_model:
        ratios = " ".join(f"{v:7.3f}" if v else f"{'-':>7}" for v in m["composed_over_e2e"].values())
        print(f"{m['model']:24} {m['e2e_ms'] or 0:9.2f} {ratios}")
    print(
        "geomean |composed/e2e - 1|: "
        + ", ".join(f"G={g}: {v:.1%}" if v is not None else f"G={g}: -" for g, v in geo.items())
    )
    print(
        f"best G = {best} ({geo[best]:.1%}); G=1: {geo.get(1) or 0:.1%}; goals 3% at best G, 8% at G=1" if best else ""
    )


def _geomean_error(values: list[float]) -> float | None:
    if not values:
        return None
    return math.exp(sum(math.log(max(v, 1e-6)) for v in values) / len(values))


if __name__ == "__main__":
    main()
