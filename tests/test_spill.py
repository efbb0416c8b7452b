"""Spill files: what the database does not take is kept locally and imported by the next run.

The failing databases here fail for real: a SQLite file locked by another connection, and an
nx-27017 MongoDB server that is stopped and started again on its data.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from test_store import STACK, SYSTEM, record_for

from benanza.errors import StoreError
from benanza.settings import load_settings
from benanza.store import BenchmarkRecord, open_store
from benanza.store.spill import (
    ResilientWriter,
    SpillFile,
    WriteResult,
    default_spill_dir,
    drain,
    read_spilled,
)
from benanza.store.sqlite import SqliteStore


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Another program holds the database's write lock (a real ``database is locked``)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SqliteStore]:
    with SqliteStore(tmp_path / "perf.db", busy_timeout_s=0.05) as store:
        yield store


def batch(start: int, count: int, **options: object) -> list[BenchmarkRecord]:
    return [record_for(i, **options) for i in range(start, start + count)]  # type: ignore[arg-type]


def _drain_worker(uri: str, spill_dir: str, barrier: object, counts: object) -> None:
    with open_store(uri) as store:
        barrier.wait()  # type: ignore[attr-defined]
        counts.put(drain(store, spill_dir))  # type: ignore[attr-defined]


# -- spill files -------------------------------------------------------------------------------------


def test_spill_file_holds_json_lines_of_whole_records(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "deep" / "actor-1.jsonl")
    assert spill.append(batch(0, 3)) == 3
    assert spill.append(iter(batch(3, 2, outcome="failed"))) == 2 and spill.append([]) == 0
    lines = spill.path.read_text().splitlines()
    assert [json.loads(line) for line in lines] == [r.to_doc() for r in batch(0, 3) + batch(3, 2, outcome="failed")]
    assert read_spilled(spill.path) == batch(0, 3) + batch(3, 2, outcome="failed")


def test_a_spilled_float_json_cannot_spell_is_written_as_null(sqlite_store: SqliteStore, tmp_path: Path) -> None:
    odd = dataclasses.replace(batch(0, 1)[0], settings={"share": math.inf, "noise": math.nan})
    spill = SpillFile(tmp_path / "actor-odd.jsonl")
    assert spill.append([odd]) == 1
    assert "Infinity" not in spill.path.read_text() and "NaN" not in spill.path.read_text()
    assert drain(sqlite_store, tmp_path) == 1
    [stored] = sqlite_store.records()
    assert stored.settings == {"share": None, "noise": None}


def test_a_torn_last_line_is_skipped_with_a_warning(
    sqlite_store: SqliteStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spill = SpillFile(tmp_path / "spill" / "actor.jsonl")
    spill.append(batch(0, 4))
    whole = json.dumps(record_for(4).to_doc())
    with spill.path.open("a") as f:
        f.write(whole[: len(whole) // 2])  # a crash in the middle of an append
    with caplog.at_level(logging.WARNING, logger="benanza.store.spill"):
        assert drain(sqlite_store, spill.path.parent) == 4
    assert "actor.jsonl" in caplog.text and "cut short" in caplog.text
    assert sqlite_store.records() == batch(0, 4) and list(spill.path.parent.iterdir()) == []


def test_an_append_after_a_crash_starts_on_a_line_of_its_own(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "actor.jsonl")
    spill.append(batch(0, 2))
    with spill.path.open("a") as f:
        f.write('{"schema_version": 1, "system": "sys-a", "stack_')  # torn
    spill.append(batch(2, 2))
    assert read_spilled(spill.path) == batch(0, 4)


def test_a_damaged_line_is_set_aside_not_imported(sqlite_store: SqliteStore, tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "spill" / "actor.jsonl")
    spill.append(batch(0, 2))
    with spill.path.open("a") as f:
        f.write("not json\n")
    spill.append(batch(2, 2))
    with pytest.raises(StoreError, match=r"actor\.jsonl\.damaged:3: damaged spill line") as info:
        drain(sqlite_store, spill.path.parent)
    assert "\n" not in str(info.value)
    assert sqlite_store.records() == []
    assert [p.name for p in spill.path.parent.iterdir()] == ["actor.jsonl.damaged"]
    assert drain(sqlite_store, spill.path.parent) == 0  # set aside: the next drain goes on without it


def test_drain_puts_a_file_back_when_the_store_fails(sqlite_store: SqliteStore, tmp_path: Path) -> None:
    folder = tmp_path / "spill"
    SpillFile(folder / "a.jsonl").append(batch(0, 3))
    SpillFile(folder / "b.jsonl").append(batch(3, 2))
    with locked(sqlite_store.path):
        with pytest.raises(StoreError, match="locked"):
            drain(sqlite_store, folder)
    assert sorted(p.name for p in folder.iterdir()) == ["a.jsonl", "b.jsonl"]
    assert read_spilled(folder / "a.jsonl") == batch(0, 3)
    assert drain(sqlite_store, folder) == 5
    assert sqlite_store.records() == batch(0, 5) and list(folder.iterdir()) == []
    assert drain(sqlite_store, folder) == 0 and drain(sqlite_store, tmp_path / "none") == 0


def test_a_file_left_by_a_dead_drainer_is_adopted(sqlite_store: SqliteStore, tmp_path: Path) -> None:
    from benanza.store.spill import _host

    folder = tmp_path / "spill"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    SpillFile(folder / f"a.jsonl.draining-{_host()}-{int(dead.stdout)}").append(batch(0, 2))
    SpillFile(folder / f"b.jsonl.draining-{_host()}-{os.getppid()}").append(batch(2, 2))  # a live drainer's
    assert drain(sqlite_store, folder) == 2
    assert sqlite_store.records() == batch(0, 2)
    assert [p.name for p in folder.iterdir()] == [f"b.jsonl.draining-{_host()}-{os.getppid()}"]


def test_two_drainer_processes_never_import_a_file_twice(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'perf.db'}"
    folder = tmp_path / "spill"
    for f in range(12):
        SpillFile(folder / f"actor-{f}.jsonl").append(batch(f * 10, 10))
    ctx = multiprocessing.get_context("spawn")
    barrier, counts = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_drain_worker, args=(uri, str(folder), barrier, counts)) for _ in range(2)]
    for p in procs:
        p.start()
    imported = [counts.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert [p.exitcode for p in procs] == [0, 0]
    assert all(n % 10 == 0 for n in imported)  # whole files
    assert sum(imported) == 120  # each record imported once, whoever drained it
    with open_store(uri) as store:
        assert store.records() == batch(0, 120)
    assert list(folder.iterdir()) == []


def test_appends_during_drains_lose_nothing(sqlite_store: SqliteStore, tmp_path: Path) -> None:
    folder = tmp_path / "spill"
    spill = SpillFile(folder / "actor.jsonl")
    done = threading.Event()
    imported: list[int] = []

    def drain_repeatedly() -> None:
        while not done.is_set():
            imported.append(drain(sqlite_store, folder))
        imported.append(drain(sqlite_store, folder))

    drainer = threading.Thread(target=drain_repeatedly)
    drainer.start()
    try:
        for start in range(0, 300, 3):
            spill.append(batch(start, 3))
    finally:
        done.set()
        drainer.join(timeout=60)
    assert sum(imported) == 300 and len([n for n in imported if n]) > 1  # drained while appends went on
    assert sqlite_store.records() == batch(0, 300)


# -- the resilient writer ----------------------------------------------------------------------------------


def test_writer_stores_when_it_can(sqlite_store: SqliteStore, tmp_path: Path) -> None:
    writer = ResilientWriter(sqlite_store, tmp_path / "spill", owner="actor/cpu 1", retries=2, backoff_s=0.01)
    assert writer.write(batch(0, 5)) == WriteResult(stored=5, spilled=0)
    assert writer.write([]) == WriteResult(0, 0)
    assert sqlite_store.records() == batch(0, 5) and not (tmp_path / "spill").exists()
    assert writer.spill.path.name == "actor_cpu_1.jsonl"


def test_writer_spills_while_the_database_is_locked_and_the_next_run_imports(
    sqlite_store: SqliteStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "spill"
    writer = ResilientWriter(sqlite_store, folder, owner="actor-1", retries=2, backoff_s=0.01)
    with locked(sqlite_store.path), caplog.at_level(logging.WARNING, logger="benanza.store.spill"):
        assert writer.write(batch(0, 4)) == WriteResult(stored=0, spilled=4)
        assert writer.write(batch(4, 2, value=5e-3)) == WriteResult(stored=0, spilled=2)
    assert caplog.text.count("store write failed") == 4 and "spilled 4 records" in caplog.text
    assert sqlite_store.records() == []
    assert writer.write(batch(6, 1)) == WriteResult(stored=1, spilled=0)
    assert writer.drain() == 6
    assert sqlite_store.records() == batch(0, 4) + batch(4, 2, value=5e-3) + batch(6, 1)


def test_writer_says_so_when_it_can_neither_store_nor_spill(sqlite_store: SqliteStore, tmp_path: Path) -> None:
    not_a_folder = tmp_path / "spill"
    not_a_folder.write_text("a file where the spill folder should be\n")
    writer = ResilientWriter(sqlite_store, not_a_folder, owner="actor-1", retries=0)
    with locked(sqlite_store.path), pytest.raises(StoreError) as info:
        writer.write(batch(0, 2))
    message = str(info.value)
    assert "cannot spill 2 records" in message and "the store failed too" in message and "locked" in message


def test_default_spill_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_store: SqliteStore) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BENANZA_SPILL_DIR", raising=False)
    assert default_spill_dir() == tmp_path / "benanza-spill" == load_settings().spill_path()
    monkeypatch.setenv("BENANZA_SPILL_DIR", str(tmp_path / "elsewhere"))
    assert load_settings().spill_path() == tmp_path / "elsewhere"
    monkeypatch.setenv("BENANZA_SPILL_DIR", "rel")
    assert load_settings().spill_path() == tmp_path / "rel"  # relative to the working directory
    writer = ResilientWriter(sqlite_store, load_settings().spill_path())
    assert writer.spill.path == tmp_path / "rel" / "benanza.jsonl"
    # without a folder, the default: this process's environment is read by the settings alone
    assert ResilientWriter(sqlite_store).spill.path == tmp_path / "benanza-spill" / "benanza.jsonl"


def test_nothing_is_lost_while_the_mongodb_server_is_down(tmp_path: Path, nx_27017_factory) -> None:
    pytest.importorskip("pymongo")
    from benanza.store.mongo import MongoStore

    data = tmp_path / "mongo-data"
    server, base = nx_27017_factory(data)
    uri = f"{base}/benanza_spill_{uuid.uuid4().hex[:8]}?serverSelectionTimeoutMS=300"
    folder = tmp_path / "spill"
    with MongoStore(uri, retries=1, backoff_s=0.01) as store:
        writer = ResilientWriter(store, folder, owner="actor-1", retries=1, backoff_s=0.01)
        assert writer.write(batch(0, 3)) == WriteResult(stored=3, spilled=0)
        server.terminate()
        server.wait(timeout=10)
        assert writer.write(batch(3, 4)) == WriteResult(stored=0, spilled=4)
        with pytest.raises(StoreError, match="no server reachable"):
            writer.drain()  # still down: the file stays
        assert read_spilled(writer.spill.path) == batch(3, 4)
        nx_27017_factory(data, port=int(base.rsplit(":", 1)[1]))  # back, on its data
        assert writer.write(batch(7, 1)) == WriteResult(stored=1, spilled=0)  # the same client reconnects
        assert writer.drain() == 4
        assert store.records() == batch(0, 8)
        assert store.present_spec_ids(SYSTEM, STACK) == {r.spec_id for r in batch(0, 8)}
    assert list(folder.iterdir()) == []
