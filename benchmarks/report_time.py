"""How long `benanza report` takes on a large performance database (target < 30 s for 100,000 records).

Builds a SQLite database through the store's own ``upsert``: every benchmark the zoo needs
at batch 1 (layers, execution groups, DLBricks sequences G = 1, 3, whole models; the specs
``benanza run`` measures) on ``--systems`` systems, each with as many software stacks as it
takes to store ``--records`` records, with the zoo's plans stored for every stack (as
``benanza run`` stores them). Samples are synthetic (20 call and 10 kernel
samples per record, lognormal around a per-benchmark latency; statistics derived by
``bench.stats.describe``) since only the report's time is measured here. Then times the
command a user runs, in a fresh process:

    benanza report --db sqlite:///DB --out DIR

    python benchmarks/report_time.py [--records 100000] [--systems 9] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from benanza.bench.generate import specs_for_plan, unique_specs
from benanza.bench.plans import stored_plans
from benanza.bench.records import MeasurementStats
from benanza.bench.spec import variant_id
from benanza.bench.stats import describe
from benanza.fingerprint import stack_id, system_fingerprint
from benanza.local import plan_models
from benanza.model.zoo import zoo_paths
from benanza.runtimes.base import get_runtime
from benanza.store import Outcome, make_record
from benanza.store.sqlite import SqliteStore

RESULTS = Path(__file__).parent / "results"
TARGET_S = 30.0


def zoo_specs():
    """The zoo's specs at batch 1 (G = 1, 3) and its plans as ``benanza run`` stores them."""
    runtime = get_runtime("onnxruntime", threads=1, opt_level="extended")
    plans = plan_models(zoo_paths(), runtime, (1,), granularities=(1, 3))
    specs = unique_specs(s for p in plans for s in specs_for_plan(p, runtime.name, runtime.variant(), e2e=True))
    return specs, stored_plans(plans, runtime.name, variant_id(runtime.variant()))


def fill(path: Path, records: int, systems: int) -> dict[str, int]:
    specs, plans = zoo_specs()
    pairs = -(-records // len(specs))  # (system, stack) pairs needed
    stacks = -(-pairs // systems)
    rng = random.Random(0)
    base = {s.spec_id: rng.lognormvariate(-7.0, 1.2) for s in specs}  # about 1 ms, spread over decades
    fingerprint = system_fingerprint()
    written = 0
    with SqliteStore(path) as store:
        for n in range(systems):
            system = f"system-{n:02d}"
            store.register_system(
                system, fingerprint.with_config({"kind": "cpu", "price_per_hour": 0.5 + n / 10}).to_doc()
            )
            speed = 0.6 + 0.1 * n
            for k in range(stacks):
                if written >= records:
                    break
                stack = {"runtime": "onnxruntime", "onnxruntime": f"1.{20 + k}.0", "python": {"version": "3.11.9"}}
                sid = stack_id(stack)
                store.register_stack(system, sid, stack)
                store.put_plans(system, sid, plans)
                batch = []
                for spec in specs[: records - written]:
                    mean = base[spec.spec_id] * speed * (1 - 0.02 * k)
                    calls = [rng.lognormvariate(0, 0.05) * mean for _ in range(20)]
                    kernels = [0.8 * rng.lognormvariate(0, 0.05) * mean for _ in range(10)]
                    batch.append(
                        make_record(
                            spec,
                            system=system,
                            stack_id=sid,
                            outcome=Outcome.OK,
                            samples=calls,
                            stats=MeasurementStats.of(describe(calls)),
                            kernel_samples=kernels,
                            kernel_stats=describe(kernels),
                            settings={"intra_op_num_threads": 1},
                            host="bench-host",
                        )
                    )
                written += store.upsert(batch)
    return {
        "records": written,
        "specs_per_stack": len(specs),
        "plans_per_stack": len(plans),
        "systems": systems,
        "stacks_per_system": stacks,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--systems", type=int, default=9)
    parser.add_argument("--keep", type=Path, help="folder for the database (kept and reused); default: a temporary one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"report_{args.records}.db"
        layout_file = path.with_suffix(".json")
        if not path.exists():
            layout_file.write_text(json.dumps(fill(path, args.records, args.systems)))
        layout = json.loads(layout_file.read_text())
        out = Path(scratch) / "site"
        command = [sys.executable, "-m", "benanza", "report", "--db", f"sqlite:///{path}", "--out", str(out)]
        env = {**os.environ, "BENANZA_DB": "", "BENANZA_DB_FILE": ""}
        env = {k: v for k, v in env.items() if v}
        load = [round(x, 2) for x in os.getloadavg()]
        start = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            sys.exit(f"report failed: {done.stderr.strip()}")
        pages = len(list(out.rglob("*.html")))
        figures = len(list(out.rglob("*.svg")))
    result = {
        "benchmark": "report_time",
        "command": "python benchmarks/report_time.py " + " ".join(sys.argv[1:]),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "load_average_before": load,  # 1, 5, 15 min: above the CPU count, the figure was measured under load
        "database": layout,
        "report_s": round(seconds, 2),
        "target_s": TARGET_S,
        "pages": pages,
        "figures": figures,
        "meets_target": seconds < TARGET_S,
    }
    print(
        f"benanza report on {layout['records']:,} records ({layout['systems']} systems x "
        f"{layout['stacks_per_system']} stacks): {seconds:.1f} s for {pages} pages and {figures} figures "
        f"(target < {TARGET_S:.0f} s)"
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "report_time.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
