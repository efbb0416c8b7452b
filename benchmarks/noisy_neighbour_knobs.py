"""ONNX Runtime's threading knobs beside a noisy neighbour (issue 16): which of them keeps two threads honest.

At 2 intra-op threads on 2 cores, under the one-core on/off burner of ``noisy_neighbour.py``, the
zoo's layers sum to 1.14-1.30x their end to end, while with one thread they compose within 3%
(``noisy_neighbour_threads.py``). This script runs the same four models (DenseNet-121,
Inception v2, ResNet-50, SqueezeNet) at 2 threads, default settings otherwise, with one of
ONNX Runtime's threading settings changed, quiet or loaded:

- ``base``: benanza's session configuration (``NO_SPINNING``: no spinning, spinning stopped
  when a run returns);
- ``spin``: spinning allowed within a run (``session.intra_op.allow_spinning = 1``), still
  stopped when the run returns, so that the sessions not being timed do not spin;
- ``dynamic_block``: ``session.dynamic_block_base = 4`` (ParallelFor hands out shrinking blocks,
  which ONNX Runtime documents as reducing latency variance when a thread is delayed);
- ``global_pool``: one process-wide intra-op pool of 2 threads shared by every session
  (``set_global_thread_pool_sizes`` and ``use_per_session_threads = False``; the global pool spins
  by default), so a layer's call finds the pool's thread awake, as inside a model.

These are experiments on benanza's runtime, so the script changes its session options in
this process only (``NO_SPINNING``, and ``SessionOptions`` for the global pool); nothing else
uses them. One variant and case per process (the global pool is process-wide):

    python benchmarks/noisy_neighbour_knobs.py VARIANT quiet|loaded

appends to ``benchmarks/results/noisy_neighbour_knobs.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import noisy_neighbour

from benanza.model.zoo import zoo_paths
from benanza.runtimes import onnxruntime as ort_runtime

RESULTS = Path(__file__).parent / "results" / "noisy_neighbour_knobs.json"
MODELS = ("light_densenet121", "light_inception_v2", "light_resnet50", "light_squeezenet")
VARIANTS = ("base", "spin", "dynamic_block", "global_pool")


def apply(variant: str) -> None:
    """Change this process's ONNX Runtime session options for ``variant``."""
    if variant == "spin":
        ort_runtime.NO_SPINNING["session.intra_op.allow_spinning"] = "1"
    elif variant == "dynamic_block":
        ort_runtime.NO_SPINNING["session.dynamic_block_base"] = "4"
    elif variant == "global_pool":
        import onnxruntime
        from onnxruntime.capi import _pybind_state

        _pybind_state.set_global_thread_pool_sizes(2, 1)
        base = onnxruntime.SessionOptions

        class GlobalPoolOptions(base):  # type: ignore[misc, valid-type]
            def __init__(self) -> None:
                super().__init__()
                self.use_per_session_threads = False  # every session of the process: the global pool

        onnxruntime.SessionOptions = GlobalPoolOptions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variant", choices=VARIANTS)
    parser.add_argument("case", choices=("quiet", "loaded"))
    args = parser.parse_args()
    apply(args.variant)
    models = [p for p in zoo_paths() if p.stem in MODELS]
    burst = (0.3, 0.3) if args.case == "loaded" else None
    result = noisy_neighbour.run_case(args.case, models, burst, {"threads": 2})
    row = {
        "variant": args.variant,
        "case": args.case,
        "g1": result["g1"],
        "best_g_error": result["best_g_error"],
        "bench_s": result["bench_s"],
        "cpu_share_median": result["cpu_share_median"],
        "records_remeasured": result["records_remeasured"],
        "records_disturbed": result["records_disturbed"],
        "per_model": {
            m["model"]: {"e2e_ms": m["e2e_ms"], "composed_over_e2e_g1": m["composed_over_e2e"]["1"]}
            for m in result["per_model"]
        },
        "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()},
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    rows = json.loads(RESULTS.read_text())["runs"] if RESULTS.exists() else []
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"benchmark": "noisy_neighbour_knobs", "runs": [*rows, row]}, indent=1) + "\n")
    print(
        f"{args.variant} {args.case}: G=1 {row['g1']:.1%}, best G {row['best_g_error']:.1%}, "
        f"{row['bench_s']:.0f} s; composed/e2e "
        + ", ".join(f"{k} {v['composed_over_e2e_g1']:.3f}" for k, v in row["per_model"].items())
    )


if __name__ == "__main__":
    main()
