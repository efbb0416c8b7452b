"""Fleet recovery: the rerun after a killed driver against an undisturbed run.

Goal (issue 13): a fleet rerun after a driver killed with SIGKILL finishes within twice the
time of an undisturbed run. When leases lasted a fixed 600 s, the rerun waited for the dead
driver's leases (591 s against 72 s); leases now carry their driver's heartbeat and lapse
``lease_s`` (15 s) after the last one.

Each run is the real command, ``python -m benanza fleet run`` with no config (in-process Ray,
this machine, ONNX Runtime), on a fresh SQLite database, timed from start to exit:

1. undisturbed: one run;
2. disturbed: a run whose driver is killed (SIGKILL) once ``--kill-at`` of the undisturbed
   run's results are stored, then the same command again (the rerun), which reuses what is
   stored and takes over what the dead driver held.

The figure is rerun / undisturbed (the issue's); (killed part + rerun) / undisturbed is shown
too.

    python benchmarks/fleet_recovery.py [--models PATH]... [--batch 1] [--kill-at 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
GOAL_RATIO = 2.0
DEFAULT_MODELS = ("squeezenet", "shufflenet")  # from the zoo in the onnx wheel


def lease_s() -> float:
    sys.path.insert(0, str(REPO))
    from benanza.config import FleetConfig

    return FleetConfig.model_fields["lease_s"].default


def zoo(name: str) -> Path:
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"


def command(models: list[Path], batch: str, db: Path) -> list[str]:
    cmd = [sys.executable, "-m", "benanza", "fleet", "run", "--db", f"sqlite:///{db}", "-q", "--format", "json"]
    for model in models:
        cmd += ["--models", str(model)]
    return [*cmd, "--batch", batch]


def environment() -> dict[str, str]:
    """This checkout's package; no Ray or store settings of the caller's shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") and k != "BENANZA_DB"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("BENANZA_SYSTEM", "recovery-bench")
    return env


def stored(db: Path) -> int:
    """Results in the database so far (0 before the driver created it)."""
    if not db.exists():
        return 0
    try:
        conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=5)
        try:
            return conn.execute("SELECT count(*) FROM results").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.OperationalError:  # not created yet
        return 0


def timed_run(cmd: list[str], cwd: Path) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=environment(), timeout=3600)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"fleet run failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed, json.loads(done.stdout)


def killed_run(cmd: list[str], cwd: Path, db: Path, kill_after: int) -> tuple[float, int]:
    """Start the run, SIGKILL its driver once ``kill_after`` results are stored; (seconds, results then)."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd, env=environment())
    while proc.poll() is None and stored(db) < kill_after:
        time.sleep(0.1)
    if proc.poll() is not None:
        raise SystemExit(f"the driver finished before {kill_after} results were stored: lower --kill-at")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    elapsed = time.perf_counter() - started
    time.sleep(1.0)  # Ray's reaper stops the dead driver's cluster
    return elapsed, stored(db)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", action="append", type=Path, help="ONNX files (default: squeezenet, shufflenet)")
    parser.add_argument("--batch", default="1")
    parser.add_argument("--kill-at", type=float, default=0.5, help="fraction of the results stored at the kill")
    args = parser.parse_args()
    models = args.models or [zoo(name) for name in DEFAULT_MODELS]
    with tempfile.TemporaryDirectory(prefix="benanza-recovery-") as tmp:
        work = Path(tmp)
        undisturbed_s, summary = timed_run(command(models, args.batch, work / "undisturbed.db"), work)
        total = summary["measured"] + summary["failed"] + summary["skipped"]
        print(f"undisturbed: {total} results in {undisturbed_s:.1f} s")
        db = work / "disturbed.db"
        cmd = command(models, args.batch, db)
        killed_s, at_kill = killed_run(cmd, work, db, max(1, int(total * args.kill_at)))
        print(f"killed (SIGKILL) after {killed_s:.1f} s with {at_kill} results stored")
        rerun_s, rerun = timed_run(cmd, work)
        done = rerun["measured"] + rerun["failed"] + rerun["skipped"]
        print(f"rerun: {done} measured, {rerun['reused']} reused in {rerun_s:.1f} s")
    ratio = rerun_s / undisturbed_s
    overall = (killed_s + rerun_s) / undisturbed_s
    print(
        f"rerun / undisturbed = {ratio:.2f} (goal <= {GOAL_RATIO}); (killed part + rerun) / undisturbed = {overall:.2f}"
    )
    payload = {
        "benchmark": "fleet_recovery",
        "goal": {"rerun_over_undisturbed": GOAL_RATIO},
        "command": " ".join(["python benchmarks/fleet_recovery.py", *sys.argv[1:]]),
        "models": [m.name for m in models],
        "batch": args.batch,
        "results": total,
        "undisturbed_s": round(undisturbed_s, 2),
        "killed_after_s": round(killed_s, 2),
        "stored_at_kill": at_kill,
        "rerun_s": round(rerun_s, 2),
        "rerun_measured": done,
        "rerun_reused": rerun["reused"],
        "rerun_over_undisturbed": round(ratio, 3),
        "killed_plus_rerun_over_undisturbed": round(overall, 3),
        "lease_s": lease_s(),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "fleet_recovery.json").write_text(json.dumps(payload, indent=2) + "\n")
    print(f"saved {RESULTS / 'fleet_recovery.json'}")


if __name__ == "__main__":
    main()
