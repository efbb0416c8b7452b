"""What the integrity check costs: opening a large SQLite store for writing (checked) and read-only (not).

Fills a database with ``--records`` records through the store's own ``upsert`` (default
200,000, about 225 MiB), then times, median of ``--repeat``:

1. opening for writing, which runs ``PRAGMA quick_check`` (every page read once);
2. opening read-only, which skips it;
3. ``quick_check`` alone on a plain read-only connection;

each with the file in the page cache (warm) and, on Linux, evicted from it first (cold:
``posix_fadvise(DONTNEED)`` on the file alone, so other processes keep their cache).

    python benchmarks/sqlite_open_check.py [--records 200000] [--repeat 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from benanza.bench.spec import BenchmarkSpec, SpecKind, canonical_variant
from benanza.model.network import Network, NetworkTensor
from benanza.store import Outcome, make_record
from benanza.store.sqlite import SqliteStore

RESULTS = Path(__file__).parent / "results"


def record(i: int):
    """A layer record of the size the tests store (about 1.1 KiB of JSON)."""
    spec = BenchmarkSpec(
        kind=SpecKind.LAYER,
        key=f"key{i:07d}",
        batch_size=1,
        dtype="float32",
        runtime="onnxruntime",
        variant=canonical_variant({"threads": 1, "opt": "all"}),
        label=f"Conv #{i}",
        network=Network((NetworkTensor((1, 3, 8, 8), "float32"),), (), (), 1),
    )
    return make_record(
        spec,
        system="sys-a",
        stack_id="stack0000000001",
        outcome=Outcome.OK,
        samples=[1e-3, 1.5e-3, 1e-3 / 3],
        stats={"median": 1e-3, "n": 3},
        kernel_samples=[5e-4],
        settings={"writer": "main", "intra_op_num_threads": 1},
        measured_at="2026-11-22T10:00:00.000000+00:00",
        host="bench-host",
        duration_s=0.25,
    )


def fill(path: Path, records: int) -> None:
    with SqliteStore(path) as store:
        for start in range(0, records, 10_000):
            store.upsert(record(i) for i in range(start, min(start + 10_000, records)))


def evict(path: Path) -> bool:
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY)  # no connection of this process is open on it here
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return True


def median_s(action: Callable[[], None], path: Path, repeat: int, cold: bool) -> float | None:
    runs = []
    for _ in range(repeat):
        if cold and not evict(path):
            return None
        start = time.perf_counter()
        action()
        runs.append(time.perf_counter() - start)
    return round(statistics.median(runs), 4)


def quick_check(path: Path) -> None:
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA quick_check(1)").fetchall() == [("ok",)]
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="folder for the database (kept and reused); default: a temporary one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"check_{args.records}.db"
        if not path.exists():
            fill(path, args.records)
        actions = {
            "open_for_writing": lambda: SqliteStore(path).close(),
            "open_read_only": lambda: SqliteStore(path, read_only=True).close(),
            "quick_check": lambda: quick_check(path),
        }
        timings = {
            f"{name}_{'cold' if cold else 'warm'}_s": median_s(action, path, args.repeat, cold)
            for cold in (False, True)
            for name, action in actions.items()
        }
        result = {
            "benchmark": "sqlite_open_check",
            "records": args.records,
            "file_mib": round(path.stat().st_size / 2**20, 1),
            **timings,
            "sqlite": sqlite3.sqlite_version,
            "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load": os.getloadavg()},
            "argv": sys.argv[1:],
            "time": datetime.now(UTC).isoformat(timespec="seconds"),
        }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "sqlite_open_check.json").write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"{args.records:,} records ({result['file_mib']} MiB): open for writing (quick_check) "
        f"{timings['open_for_writing_warm_s']} s warm, {timings['open_for_writing_cold_s']} s cold; "
        f"read-only {timings['open_read_only_warm_s']} s warm; quick_check alone {timings['quick_check_warm_s']} s warm"
    )


if __name__ == "__main__":
    main()
