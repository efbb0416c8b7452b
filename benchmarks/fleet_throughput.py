"""Fleet throughput: results per second end to end, and the planning time of a large plan.

Goals (issue 4): at least 2,000 results/s into SQLite on this 2-core machine; planning
1,000,000 (spec template x system) combinations in under 5 s.

1. End to end: a local Ray cluster simulating three systems (one node each), the null
   runtime with a one-sample harness (so the figure is the fleet's own cost: planning the
   store, leases, shipping specs to actors, building records, bulk upserts, releases), the
   zoo at several batch sizes and DLBricks granularities. Two rates per store: over the
   dispatch phase (first lease to last stored result) and over the whole run (including
   corpus planning and actor start). Then the same fleet against MongoDB over the wire:
   ``--mongodb URI`` for a real server; otherwise an nx-27017 server is started, which is a
   SQLite-backed wire-protocol emulator (about 130 upserts/s): its figure measures the
   client path and is not a MongoDB figure.
2. Planning: ``fleet.plan.plan_fleet`` over synthetic templates (200,000 x 5 systems, half
   of them already stored), the step a driver repeats on every run.

    python benchmarks/fleet_throughput.py [--batches 1,2,4,8] [--granularity 1,2,3,4,5]
        [--chunk 512] [--mongodb URI] [--mongo-batches 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
SYSTEMS = ("sys-a", "sys-b", "sys-c")
ONE_SAMPLE = {
    "warmup_runs": 0,
    "min_samples": 1,
    "max_samples": 1,
    "min_time_s": 0.0,
    "min_sample_time_s": 0.0,
    "max_time_s": 1.0,
    "kernel_runs": 0,
}


def timed_fleet(db: str, batches: list[int], grans: list[int], chunk: int) -> dict[str, Any]:
    """One fleet run on the connected cluster; rates from the driver's own clock."""
    from benanza.config import FleetConfig, SystemConfig
    from benanza.fleet.driver import FleetDriver

    cfg = FleetConfig(
        systems=[SystemConfig(name=s, runtimes=["null"]) for s in SYSTEMS],
        db=db,
        batch_sizes=batches,
        granularities=grans,
        harness=ONE_SAMPLE,
        chunk_size=chunk,
    )
    started = time.perf_counter()
    driver = FleetDriver(cfg, inflight_per_actor=3)
    summary = driver.run().to_dict()
    total = time.perf_counter() - started
    results = summary["measured"] + summary["failed"] + summary["skipped"]
    dispatch_s = summary["dispatch_s"]
    return {
        "results": results,
        "failed": summary["failed"],
        "spilled": summary["spilled"],
        "dispatch_s": round(dispatch_s, 3),
        "results_per_s_dispatch": round(results / dispatch_s, 1) if dispatch_s > 0 else None,
        "wall_s": round(total, 3),
        "results_per_s_wall": round(results / total, 1),
    }


def planning(templates: int = 200_000, systems: int = 5) -> dict[str, Any]:
    from benanza.bench.spec import BenchmarkSpec, SpecKind
    from benanza.fleet.plan import CorpusWork, Target, plan_fleet, spec_ids

    work = CorpusWork(
        "onnxruntime",
        tuple(
            BenchmarkSpec(SpecKind.LAYER, f"{i:016x}", 1 + i % 4, "float32", "onnxruntime") for i in range(templates)
        ),
    )
    targets = [Target(f"sys-{k}", "onnxruntime", "stack", {"ep": "cpu", "threads": k + 1}) for k in range(systems)]
    present = {(t.system, t.stack_id): set(spec_ids(work, t.variant_id)[::2]) for t in targets}
    started = time.perf_counter()
    plans = plan_fleet({"onnxruntime": work}, targets, present)
    elapsed = time.perf_counter() - started
    todo = sum(len(p.todo) for p in plans)
    return {"combinations": templates * systems, "todo": todo, "planning_s": round(elapsed, 3)}


def start_nx_27017(folder: Path) -> tuple[subprocess.Popen, str]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from conftest import start_nx_27017 as start

    return start(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,2,4,8")
    parser.add_argument("--granularity", default="1,2,3,4,5")
    parser.add_argument("--chunk", type=int, default=512)
    parser.add_argument("--mongodb", default=None, help="a real MongoDB URI (default: an nx-27017 emulator)")
    parser.add_argument("--mongo-batches", default="1")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    grans = [int(g) for g in args.granularity.split(",")]

    plan = planning()
    print(f"planning {plan['combinations']:,} combinations: {plan['planning_s']:.2f} s ({plan['todo']:,} to do)")

    from benanza.config import RayConfig, SystemConfig
    from benanza.fleet.systems import connect

    out: dict[str, Any] = {}
    proc = None
    simulated = [SystemConfig(name=s) for s in SYSTEMS]
    with connect(RayConfig(local_cluster=True), simulated), tempfile.TemporaryDirectory(prefix="benanza-fb-") as tmp:
        try:
            out["sqlite"] = timed_fleet(f"sqlite:///{tmp}/fleet.db", batches, grans, args.chunk)
            s = out["sqlite"]
            print(
                f"sqlite: {s['results']:,} results, {s['results_per_s_dispatch']:,} results/s over dispatch "
                f"({s['dispatch_s']} s), {s['results_per_s_wall']:,}/s over the whole run ({s['wall_s']} s)"
            )
            if args.mongodb:
                uri, server = args.mongodb, "mongodb"
            else:
                proc, base = start_nx_27017(Path(tmp) / "nx")
                uri, server = f"{base}/fleetbench", "nx-27017 emulator (not a MongoDB figure)"
            mongo_batches = [int(b) for b in args.mongo_batches.split(",")]
            out["mongodb"] = {"server": server, **timed_fleet(uri, mongo_batches, [], args.chunk)}
            m = out["mongodb"]
            print(
                f"mongodb [{server}]: {m['results']:,} results, {m['results_per_s_dispatch']:,} results/s over "
                f"dispatch ({m['dispatch_s']} s), {m['results_per_s_wall']:,}/s whole run ({m['wall_s']} s)"
            )
        finally:
            if proc is not None:
                proc.kill()

    payload = {
        "benchmark": "fleet_throughput",
        "goals": {"sqlite_results_per_s": 2000, "planning_1m_s": 5.0},
        "planning": plan,
        "end_to_end": out,
        "settings": {"batches": batches, "granularities": grans, "chunk": args.chunk, "harness": ONE_SAMPLE},
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "fleet_throughput.json").write_text(json.dumps(payload, indent=2) + "\n")
    print(f"saved {RESULTS / 'fleet_throughput.json'}")


if __name__ == "__main__":
    main()
