"""noisy_neighbour's composition at a fixed intra-op thread count, on four zoo models (issue 16).

Same as ``noisy_neighbour.py`` (the main job's defaults, fresh SQLite database, the same burner)
but every ONNX Runtime session gets ``threads`` intra-op threads, to tell how much of the
composition's error under a busy neighbour comes from multi-threaded sessions. Prints G = 1's
geometric-mean |composed/e2e - 1| and each model's composed/e2e and end-to-end latency, and saves
the case to ``benchmarks/results/noisy_neighbour_threads<THREADS>_<case>.json``.

    python benchmarks/noisy_neighbour_threads.py THREADS quiet|loaded
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import noisy_neighbour as nn

from benanza.model.zoo import zoo_paths

MODELS = ("light_resnet50", "light_inception_v2", "light_squeezenet", "light_densenet121")


def main() -> None:
    threads, case = int(sys.argv[1]), sys.argv[2]
    models = [p for p in zoo_paths() if p.stem in MODELS]
    r = nn.run_case(case, models, (0.3, 0.3) if case == "loaded" else None, {"threads": threads})
    ratios = {m["model"]: round(m["composed_over_e2e"]["1"], 3) for m in r["per_model"]}
    e2e = {m["model"]: round(m["e2e_ms"], 2) for m in r["per_model"]}
    print(f"threads={threads} {case}: G=1 {r['g1']:.1%} composed/e2e {ratios} e2e ms {e2e}", flush=True)
    out = nn.RESULTS / f"noisy_neighbour_threads{threads}_{case}.json"
    out.write_text(json.dumps({"benchmark": "noisy_neighbour_threads", "threads": threads, **r}, indent=1, default=str))


if __name__ == "__main__":
    main()
