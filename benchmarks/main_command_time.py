"""The README's main command's wall time now against an earlier version of benanza, side by side (issue 16).

Issue 16 asks that the main command (``benanza fleet run`` on the embedded defaults: the zoo,
in-process Ray, SQLite, this CPU) take no longer than it did when the issue was written,
"about 3 minutes for the zoo when quiet". Minutes measured on a shared VM on another day
say little: the same code ran 3 and 28 minutes on this 2-core VM on different days. This
script runs both versions in one run, in alternation, so that the host's speed falls on
them alike:

- ``baseline``: the code at ``--baseline`` (default ``b1ad612``, main when issue 16 was
  filed), exported with ``git archive`` into a temporary folder;
- ``current``: this checkout's working tree;
- ``no_remeasure`` (with ``--no-remeasure``): the same tree with its re-measures of disturbed
  measurements turned off (``BENANZA_HARNESS_DISTURBANCE_RETRIES=0``, no re-measure budget:
  every disturbed figure is marked instead), to tell what re-measuring costs on this host from
  what the method costs.

Each run is the command exactly as the README gives it (``python -m benanza fleet run``, no
options), in a fresh empty folder (a new ``benanza.db``), with ``PYTHONPATH`` naming the
version's tree so that the driver and Ray's workers import it, and ``BENANZA_*`` variables
unset. Before each run a plain ONNX Runtime loop over ResNet-50 (2 threads, no benanza)
gives the host's speed at that moment. Printed and saved per run: wall seconds, the host's
busy cores besides the run, the ``fleet run:`` summary line, whether a ``check:`` line
fired; then the median over rounds of current's wall over baseline's in the same round.
JSON to ``benchmarks/results/main_command_time.json`` (``--tag`` adds a suffix).

    python benchmarks/main_command_time.py [--baseline REV] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from benanza.bench.host_cpu import host_busy_s, host_cores
from benanza.model.zoo import zoo_paths

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results"
BASELINE = "b1ad612"  # main on 2026-11-24 19:40 UTC, before the first commit for issue 16
SUMMARY = re.compile(r"^fleet run: .*$", re.MULTILINE)
REFERENCE_MODEL = "light_resnet50"
REFERENCE_CALLS = 30


def host_speed() -> dict[str, float]:
    """A plain ONNX Runtime loop over ResNet-50 at 2 threads: median and best call, ms (the host's speed now)."""
    path = next(p for p in zoo_paths() if p.stem == REFERENCE_MODEL)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    spec = session.get_inputs()[0]
    shape = [d if isinstance(d, int) else 1 for d in spec.shape]
    feed = {spec.name: np.random.default_rng(0).random(shape, np.float32)}
    for _ in range(3):
        session.run(None, feed)
    times = []
    for _ in range(REFERENCE_CALLS):
        start = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - start)
    return {"median_ms": round(statistics.median(times) * 1e3, 1), "min_ms": round(min(times) * 1e3, 1)}


def export(rev: str, folder: Path) -> Path:
    """The tree of ``rev`` (``git archive``) under ``folder``."""
    tree = folder / f"benanza-{rev}"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=False)
    if archive.returncode != 0:
        raise SystemExit(f"main_command_time: git archive {rev}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


NO_REMEASURE = {
    "BENANZA_HARNESS_DISTURBANCE_RETRIES": "0",
    "BENANZA_HARNESS_REMEASURE_SHARE": "0",
    "BENANZA_HARNESS_REMEASURE_RESERVE_S": "0",
}


def one_run(tree: Path, folder: Path, extra_env: dict[str, str]) -> dict[str, Any]:
    """The README's main command with ``tree``'s benanza, in a fresh folder: wall time and what it printed."""
    work = folder / f"run-{time.monotonic_ns()}"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENANZA_")}
    env["PYTHONPATH"] = str(tree)
    env.update(extra_env)
    speed = host_speed()
    busy, start = host_busy_s(), time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "benanza", "fleet", "run"], cwd=work, capture_output=True, text=True, env=env
    )
    wall = time.perf_counter() - start
    busy_end = host_busy_s()
    (folder / f"{work.name}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
        raise SystemExit(f"main_command_time: the main command of {tree.name} exited {done.returncode}: {tail}")
    summary = SUMMARY.search(done.stdout)
    busy_cores = None if busy is None or busy_end is None else (busy_end - busy) / wall
    return {
        "wall_s": round(wall, 1),
        "host_busy_cores": None if busy_cores is None else round(busy_cores, 2),
        "reference": speed,
        "summary": summary.group(0).strip() if summary else None,
        "checks": [line.strip() for line in done.stdout.splitlines() if line.startswith("check:")],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=BASELINE, help="the git revision compared with this checkout")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, each running both versions once")
    parser.add_argument("--tag", default="", help="suffix of the JSON file's name")
    parser.add_argument("--no-remeasure", action="store_true", help="also this tree without re-measures")
    args = parser.parse_args(argv)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain"], capture_output=True, text=True)
    arms = ["baseline", "current", *(["no_remeasure"] if args.no_remeasure else [])]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in arms}
    with tempfile.TemporaryDirectory(prefix="main-command-time-") as tmp:
        trees = {"baseline": export(args.baseline, Path(tmp)), "current": ROOT, "no_remeasure": ROOT}
        envs = {"baseline": {}, "current": {}, "no_remeasure": NO_REMEASURE}
        for round_ in range(args.rounds):
            order = arms if round_ % 2 == 0 else arms[::-1]  # none always first
            for name in order:
                run = one_run(trees[name], Path(tmp), envs[name])
                runs[name].append(run)
                print(f"round {round_ + 1} {name:>12}: {run}", flush=True)

    def over_baseline(name: str) -> list[float]:
        return [round(c["wall_s"] / b["wall_s"], 3) for c, b in zip(runs[name], runs["baseline"], strict=True)]

    ratios = over_baseline("current")
    out = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cores": host_cores(),
        "baseline": args.baseline,
        "current": head.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else ""),
        "command": "python -m benanza fleet run (the README's main command), each in a fresh folder",
        "runs": runs,
        "current_over_baseline": ratios,
        "median_current_over_baseline": round(statistics.median(ratios), 3),
        **(
            {
                "no_remeasure_env": NO_REMEASURE,
                "no_remeasure_over_baseline": over_baseline("no_remeasure"),
                "median_no_remeasure_over_baseline": round(statistics.median(over_baseline("no_remeasure")), 3),
            }
            if args.no_remeasure
            else {}
        ),
        "script": "python benchmarks/main_command_time.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    for name in arms[1:]:
        ratio, each = out[f"median_{name}_over_baseline"], out[f"{name}_over_baseline"]
        print(f"{name} ({out['current']}) over baseline {args.baseline}: {ratio:.3f}x the wall time (rounds: {each})")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"main_command_time{'_' + args.tag if args.tag else ''}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"saved {path}")
    return out


if __name__ == "__main__":
    main()
