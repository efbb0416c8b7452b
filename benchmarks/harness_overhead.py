"""The harness's own overhead: what the null runtime's do-nothing call measures.

Goal: under 2 us per call. Two figures:

- batched (default settings): the per-call time the harness reports for a call that does
  nothing, i.e. the floor under every measurement (loop plus one Python call);
- un-batched (``min_sample_time_s=0``, one call per sample): what one sample shows when
  it times a single call (two clock reads, the loop, the call), and the wall time each
  sample costs including the harness's bookkeeping.

    python benchmarks/harness_overhead.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benanza.bench.harness import HarnessSettings, Timing, measure
from benanza.bench.spec import BenchmarkSpec, SpecKind
from benanza.model.network import Network
from benanza.runtimes.null import NullRuntime

RESULTS = Path(__file__).parent / "results"
GOAL_NS = 2000.0
SPEC = BenchmarkSpec(kind=SpecKind.LAYER, key="harness-overhead", batch_size=1, dtype="float32", runtime="null")


def null_call_overhead(settings: HarnessSettings, repeat: int) -> dict[str, Any]:
    """Median per-call ns of the null runtime's call over ``repeat`` measurements."""
    prepared = NullRuntime().prepare(SPEC)
    try:
        timings = [measure(prepared.call, settings) for _ in range(repeat)]
    finally:
        prepared.close()
    return _summary(timings)


def onnxruntime_call_overhead(repeat: int) -> dict[str, Any]:
    """ONNX Runtime's per-call overhead: ``session.run`` of one Identity on one float.

    The kernel does (almost) nothing, so the call latency is the session's own cost per
    call as a framework user pays it; the profiler's kernel time is shown beside it.
    """
    from benanza.runtimes.base import get_runtime

    network = Network.from_doc(
        {
            "inputs": [{"shape": [1], "dtype": "float32"}],
            "nodes": [
                {
                    "op_type": "Identity",
                    "domain": "",
                    "opset": 13,
                    "attributes": {},
                    "inputs": [{"kind": "input", "input": 0}],
                    "outputs": [{"shape": [1], "dtype": "float32"}],
                    "layer_key": "identity",
                }
            ],
            "outputs": [{"node": 0, "output": 0}],
            "layers": 1,
        }
    )
    runtime = get_runtime("onnxruntime", threads=1)
    spec = BenchmarkSpec(SpecKind.LAYER, "identity", 1, "float32", "onnxruntime", network=network)
    prepared = runtime.prepare(spec)
    try:
        timings = [measure(prepared.call, HarnessSettings()) for _ in range(repeat)]
        kernel = prepared.kernel_times(50) or []
    finally:
        prepared.close()
    return {
        **_summary(timings),
        "kernel_median_ns": statistics.median(kernel) * 1e9 if kernel else None,
        "variant": runtime.variant(),
    }


def _summary(timings: list[Timing]) -> dict[str, Any]:
    medians_ns = [t.stats.median * 1e9 for t in timings]
    return {
        "median_ns": statistics.median(medians_ns),
        "min_ns": min(t.stats.min * 1e9 for t in timings),
        "run_medians_ns": medians_ns,
        "iterations": [t.iterations for t in timings],
        "samples": [t.stats.n for t in timings],
        "stopped_by": [t.stopped_by for t in timings],
        "rel_noise": [t.stats.rel_noise for t in timings],
        # wall time per sample, bookkeeping and warm-up included
        "wall_per_sample_ns": statistics.median(t.total_s * 1e9 / t.stats.n for t in timings),
    }


def machine_info() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "clock": str(time.get_clock_info("perf_counter")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    defaults = HarnessSettings()
    unbatched = HarnessSettings(min_sample_time_s=0)
    batched_result = null_call_overhead(defaults, args.repeat)
    unbatched_result = null_call_overhead(unbatched, args.repeat)
    result = {
        "benchmark": "harness_overhead",
        "repeat": args.repeat,
        "goal_ns": GOAL_NS,
        "null_batched": {**batched_result, "settings": defaults.model_dump()},
        "null_unbatched": {**unbatched_result, "settings": unbatched.model_dump()},
        "onnxruntime": (ort := onnxruntime_call_overhead(args.repeat)),
        "machine": machine_info(),
        "argv": sys.argv[1:],
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "harness_overhead.json").write_text(json.dumps(result, indent=2) + "\n")
    verdict = "met" if batched_result["median_ns"] < GOAL_NS else "MISSED"
    print(
        f"null runtime harness overhead: {batched_result['median_ns']:.1f} ns/call median "
        f"(batched x{batched_result['iterations'][0]}, {args.repeat} runs); un-batched sample "
        f"{unbatched_result['median_ns']:.0f} ns timed, {unbatched_result['wall_per_sample_ns']:.0f} ns wall; "
        f"goal < {GOAL_NS:.0f} ns {verdict}"
    )
    print(
        f"onnxruntime per-call overhead (Identity on 1 float, 1 thread): {ort['median_ns'] / 1e3:.2f} us/call median; "
        f"profiler kernel time {ort['kernel_median_ns'] or 0:.0f} ns"
    )


if __name__ == "__main__":
    main()
