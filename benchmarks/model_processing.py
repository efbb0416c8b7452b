"""Time to process the whole zoo: load, bind, fold, infer, key, dedup, Jaccard.

Target (issue 2): under 3 s for the nine zoo models on a 2-core machine.

    python benchmarks/model_processing.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

from benanza.model.corpus import summarize
from benanza.model.load import load_model
from benanza.model.process import process_model
from benanza.model.zoo import zoo_paths

RESULTS = Path(__file__).parent / "results"


def run_once() -> dict[str, float]:
    paths = zoo_paths()
    t0 = time.perf_counter()
    protos = [load_model(p) for p in paths]
    t1 = time.perf_counter()
    graphs = [process_model(p, proto=m).graph for p, m in zip(paths, protos, strict=True)]
    t2 = time.perf_counter()
    summary = summarize(graphs)
    t3 = time.perf_counter()
    assert summary.unique_layers > 0
    return {"load_s": t1 - t0, "process_s": t2 - t1, "dedup_jaccard_s": t3 - t2, "total_s": t3 - t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    run_once()  # warm imports and caches; not counted
    runs = [run_once() for _ in range(args.repeat)]
    totals = [r["total_s"] for r in runs]
    result = {
        "benchmark": "model_processing",
        "models": len(zoo_paths()),
        "repeat": args.repeat,
        "total_s_median": statistics.median(totals),
        "total_s_min": min(totals),
        "total_s_max": max(totals),
        "stages_median": {k: statistics.median(r[k] for r in runs) for k in runs[0]},
        "target_s": 3.0,
        "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()},
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "model_processing.json").write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"zoo ({result['models']} models) processed in {result['total_s_median']:.2f} s median "
        f"(min {result['total_s_min']:.2f}, max {result['total_s_max']:.2f}, {args.repeat} runs); target < 3 s"
    )


if __name__ == "__main__":
    main()
