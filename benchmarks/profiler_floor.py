"""What ONNX Runtime's profiler adds to every node's span, and what it did to the sequential bound.

A unit's kernel time is the sum of its nodes' spans in ORT's profiler. Each span holds the
profiler's own work besides the kernel's (reading the clock, recording the event, with more
than one intra-op thread the pool's per-thread statistics). This script measures, per thread
count:

- the floor: the span the profiler gives a node that does nothing (``node_floor_s``: the mean
  span of a chain of ``Relu`` nodes of one float), against what such a node costs a run
  unprofiled (a chain of 9 against a chain of 1, timed in shuffled rounds, per extra node);
- for each model: its units' kernel times summed, from the same profiled runs with and
  without the floor taken out of each node's span (each run's kernel time then scaled by the
  unit's unprofiled call over its profiled run, as the harness does:
  ``execute.without_profiler_overhead``), over the model's unprofiled end-to-end call, each at
  the statistic the lower bounds use (10th percentile of kernel times, trimmed mean of calls).
  Units are measured one after another here, not in the main job's interleaved rounds: the
  figures compare the two ways of taking kernel time, not the main job's bounds.

    python benchmarks/profiler_floor.py [--models shufflenet squeezenet inception_v2 my.onnx] [--threads 1 2]

JSON in ``benchmarks/results/profiler_floor.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benanza.analysis.lower_bound import CALL_STATISTIC, KERNEL_STATISTIC
from benanza.bench.build import build_onnx, disabled_optimizers
from benanza.bench.execute import without_profiler_overhead
from benanza.bench.stats import describe
from benanza.config import MAIN_JOB_GRANULARITIES
from benanza.local import plan_models
from benanza.model.load import with_synthetic_weights
from benanza.model.network import network_of
from benanza.model.process import process_model
from benanza.model.zoo import zoo_paths
from benanza.runtimes.onnxruntime import (
    OnnxRuntimeCPU,
    _CpuModel,
    _profile_dir,
    feeds_for,
    node_floor_s,
    noop_chain,
    profile_kernel_times,
)

RESULTS = Path(__file__).parent / "results"
CALLS = 40  # unprofiled calls per benchmark (median)
PROFILED = 12  # profiled runs kept per benchmark, after 2 warm-up runs and one unkept run before each


def unprofiled_node_cost(threads: int, rounds: int = 200) -> float:
    """Seconds a no-op node adds to an unprofiled run: a chain of 9 against a chain of 1."""
    import numpy as np

    sessions = {n: _CpuModel(noop_chain(n).SerializeToString(), {}, "extended", threads).session() for n in (1, 9)}
    feeds = {"x": np.ones(1, np.float32)}
    times: dict[int, list[float]] = {1: [], 9: []}
    order = [1, 9]
    for _ in range(rounds):
        random.shuffle(order)
        for n in order:
            sessions[n].run(None, feeds)
            start = time.perf_counter()
            sessions[n].run(None, feeds)
            times[n].append(time.perf_counter() - start)
    return (statistics.median(times[9]) - statistics.median(times[1])) / 8


def kernel_both_ways(model: bytes, feeds: dict, disabled: tuple[str, ...], threads: int, floor: float) -> dict:
    """One benchmark's call and kernel time, with and without the floor, at the lower bound's statistics."""
    cpu = _CpuModel(model, feeds, "extended", threads, disabled)
    timed = cpu.session()
    for _ in range(3):
        timed.run(None, feeds)
    calls = []
    for _ in range(CALLS):
        timed.run(None, feeds)
        start = time.perf_counter()
        timed.run(None, feeds)
        calls.append(time.perf_counter() - start)
    call = describe(calls).statistic(CALL_STATISTIC)
    session = cpu.session(profile_prefix=str(_profile_dir() / "floor"))
    for _ in range(2 + 2 * PROFILED):
        session.run(None, feeds)
    profile = Path(session.end_profiling())
    events = json.loads(profile.read_text())
    profile.unlink()
    kept = slice(3, None, 2)
    out = {"call_s": call}
    for name, f in (("raw", 0.0), ("floor", floor)):
        profiled = profile_kernel_times(events, f)
        kernel, _ = without_profiler_overhead(profiled.kernel[kept], profiled.run_times[kept], call)
        out[name] = describe(kernel).statistic(KERNEL_STATISTIC)
    return out


def model_sums(path: Path, threads: int, floor: float) -> dict[str, Any]:
    runtime = OnnxRuntimeCPU(threads=threads)
    (plan,) = plan_models([path], runtime, (1,), granularities=MAIN_JOB_GRANULARITIES)
    units = []
    for members in plan.units:
        built = build_onnx(network_of(plan.graph, sorted(members))[1], sink=True)
        units.append(
            kernel_both_ways(built.SerializeToString(), feeds_for(built), disabled_optimizers(built), threads, floor)
        )
    whole = with_synthetic_weights(process_model(path, 1).proto)
    e2e = kernel_both_ways(whole.SerializeToString(), feeds_for(whole), (), threads, floor)["call_s"]
    raw, floored = sum(u["raw"] for u in units), sum(u["floor"] for u in units)
    return {
        "model": path.stem,
        "threads": threads,
        "units": len(units),
        "e2e_ms": e2e * 1e3,
        "sequential_raw_over_e2e": raw / e2e,
        "sequential_floor_over_e2e": floored / e2e,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["shufflenet", "squeezenet", "inception_v2"])
    parser.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    parser.add_argument("--out", default=str(RESULTS / "profiler_floor.json"))
    args = parser.parse_args()
    paths = [Path(m) for m in args.models if Path(m).is_file()]  # a model file, or a zoo model by name
    paths += [p for p in zoo_paths() if any(m in p.stem for m in args.models)]
    floors, models = [], []
    for threads in args.threads:
        floor = node_floor_s("extended", threads)
        cost = unprofiled_node_cost(threads)
        floors.append({"threads": threads, "node_floor_us": floor * 1e6, "unprofiled_node_us": cost * 1e6})
        print(
            f"threads {threads}: a no-op node spans {floor * 1e6:.2f} us profiled, adds {cost * 1e6:.2f} us unprofiled"
        )
        for path in paths:
            row = model_sums(path, threads, floor)
            models.append(row)
            print(
                f"  {row['model']:22s} e2e {row['e2e_ms']:7.2f} ms  units' kernel sum / e2e:"
                f" {row['sequential_raw_over_e2e']:.3f} as spanned, {row['sequential_floor_over_e2e']:.3f} floor out"
            )
    doc = {
        "benchmark": "profiler_floor",
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()},
        "floors": floors,
        "models": models,
    }
    Path(args.out).write_text(json.dumps(doc, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
