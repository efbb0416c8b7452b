"""What the main job's checks for a disturbed host cost in wall time, measured side by side (issue 16).

The main job (``benanza run``, the embedded defaults) samples a reference call in every
interleaved group and measures a group again when the host's speed moved while it was
measured (``disturbance_retries``). Both add time: this script runs the main job over the same
models in fresh databases, alternating three settings in each pair of rounds so that a slow
period of a shared host falls on all of them alike:

- ``default``: the main job as a user runs it;
- ``unbudgeted``: every disturbed measurement measured again, whatever it costs (``remeasure_share = 100``,
  the behaviour before the re-measure budget, ``benanza.bench.remeasure``);
- ``no_reference``: ``BENANZA_HARNESS_REFERENCE_CALL=false``;
- ``no_checks``: no reference call and no second measurement (``BENANZA_HARNESS_DISTURBANCE_RETRIES=0``).

It prints, per setting, each run's wall seconds and how many records were measured again or
flagged, and the median over rounds of each setting's time over ``default``'s in the same round.
The threads are fixed (``--threads``, 1 by default) so that every run measures the same variant.
JSON to ``benchmarks/results/main_job_cost.json`` (``--tag`` adds a suffix).

    python benchmarks/main_job_cost.py [--models light_squeezenet light_shufflenet ...] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benanza.bench.host_cpu import host_busy_s, host_cores
from benanza.model.zoo import zoo_paths
from benanza.settings import HarnessSettings
from benanza.store import open_store

RESULTS = Path(__file__).parent / "results"
SETTINGS: dict[str, dict[str, str]] = {
    "default": {},
    "unbudgeted": {"BENANZA_HARNESS_REMEASURE_SHARE": "100"},  # every disturbed measurement taken again
    "no_reference": {"BENANZA_HARNESS_REFERENCE_CALL": "false"},
    "no_checks": {"BENANZA_HARNESS_REFERENCE_CALL": "false", "BENANZA_HARNESS_DISTURBANCE_RETRIES": "0"},
}
DEFAULT_MODELS = ("light_squeezenet", "light_shufflenet", "light_inception_v1", "light_resnet50")


def one_run(models: list[Path], env_extra: dict[str, str], threads: str, folder: Path) -> dict[str, Any]:
    """One main job in a fresh database: wall seconds, the host's busy cores while it ran, what was flagged."""
    db = folder / f"run-{time.monotonic_ns()}.db"
    env = {**os.environ, **env_extra, "BENANZA_SYSTEM": "main-job-cost"}
    env.pop("BENANZA_DB", None)
    cmd = [sys.executable, "-m", "benanza", "run", *map(str, models), "--db", f"sqlite:///{db}"]
    cmd += ["--threads", threads, "--format", "json"]
    busy, start = host_busy_s(), time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    busy_end = host_busy_s()
    if done.returncode != 0:
        raise SystemExit(f"main_job_cost: the main job failed: {done.stderr.strip().splitlines()[-1:]}")
    with open_store(f"sqlite:///{db}", create=False) as store:
        records = store.records(system="main-job-cost", payload=False)
    stats = [r.stats for r in records if r.stats is not None]
    return {
        "wall_s": round(wall, 2),
        "host_busy_cores": None if busy is None or busy_end is None else round((busy_end - busy) / wall, 2),
        "records": len(records),
        "remeasured": sum(1 for s in stats if s.remeasured),
        "disturbed": sum(1 for s in stats if s.disturbed),
        # disturbed, and the re-measure budget did not allow measuring them again (benanza.bench.remeasure)
        "not_measured_again": sum(1 for s in stats if "not measured again" in (s.disturbed_reason or "")),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), help="zoo model names (light_...)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, each running every setting once")
    parser.add_argument("--threads", default="1", help="the main job's --threads (fixed: one variant)")
    parser.add_argument("--tag", default="", help="suffix of the JSON file's name")
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS), help="which to run")
    args = parser.parse_args(argv)
    if "default" not in args.settings:
        raise SystemExit("main_job_cost: --settings needs default, the one the others are compared with")
    chosen = {name: SETTINGS[name] for name in args.settings}
    by_name = {p.stem: p for p in zoo_paths()}
    unknown = [m for m in args.models if m not in by_name]
    if unknown:
        raise SystemExit(f"main_job_cost: not in the zoo: {', '.join(unknown)}; known: {', '.join(sorted(by_name))}")
    models = [by_name[m] for m in args.models]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in chosen}
    with tempfile.TemporaryDirectory(prefix="main-job-cost-") as tmp:
        for round_ in range(args.rounds):
            order = list(chosen) if round_ % 2 == 0 else list(reversed(chosen))  # neither always first
            for name in order:
                run = one_run(models, chosen[name], args.threads, Path(tmp))
                runs[name].append(run)
                print(f"round {round_ + 1} {name:>12}: {run}", flush=True)
    base = runs["default"]
    ratios = {
        name: round(statistics.median(r["wall_s"] / d["wall_s"] for r, d in zip(runs[name], base, strict=True)), 3)
        for name in chosen
        if name != "default"
    }
    out = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cores": host_cores(),
        "models": args.models,
        "threads": args.threads,
        "settings": chosen,
        "harness_defaults": HarnessSettings().model_dump(),  # what "default" ran with
        "runs": runs,
        "median_wall_over_default": ratios,
        "command": "python benchmarks/main_job_cost.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    for name, ratio in ratios.items():
        print(f"{name}: {ratio:.3f}x the default's wall time (median over {args.rounds} rounds)")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"main_job_cost{'_' + args.tag if args.tag else ''}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"saved {path}")
    return out


if __name__ == "__main__":
    main()
