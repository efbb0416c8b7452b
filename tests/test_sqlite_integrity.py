"""A damaged SQLite file is refused before anything is written; reading commands open the file read-only.

Every database here is made by the store itself (``bench run`` and ``upsert``) and damaged
or made unwritable for real: a table page in the middle of the file is overwritten, and an
unwritable copy is made with the permission bits, or, for root (whom permission bits do not
stop), with the immutable attribute (``chattr +i``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_checks import one_line_error
from test_store import SYSTEM as FILLER_SYSTEM
from test_store import record_for
from typer.testing import CliRunner

from benanza.cli import app
from benanza.errors import StoreError
from benanza.store import open_store
from benanza.store.sqlite import SqliteStore

SYSTEM = "integrity-system"
FAST_ENV = {
    "BENANZA_DB": None,
    "BENANZA_SYSTEM": SYSTEM,
    "BENANZA_HARNESS_WARMUP_RUNS": "1",
    "BENANZA_HARNESS_MIN_SAMPLES": "3",
    "BENANZA_HARNESS_KERNEL_RUNS": "3",
}
FAST_FLAGS = ["--min-time", "0.001", "--max-time", "0.05", "--threads", "1", "--system", SYSTEM]


def invoke(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args], env=FAST_ENV)


def fingerprint(path: Path) -> tuple[str, int]:
    """The file's bytes (as a digest) and modification time: what must not change."""
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


def damage_a_data_page(path: Path) -> int:
    """Overwrite a table page that holds stored records, in the middle of the file; its page number.

    The page is found by its content, not by SQLite's ``dbstat`` (not every build has it): a
    table leaf page (type byte 0x0D) holding a record document.
    """
    assert not Path(f"{path}-wal").exists()  # everything is in the main file
    data = bytearray(path.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    pages = len(data) // page_size
    leaves = [
        i
        for i in range(1, pages)  # page 1 (index 0) holds the header and the schema
        if data[i * page_size] == 0x0D and b'"measured_at"' in data[i * page_size : (i + 1) * page_size]
    ]
    assert len(leaves) >= 3, "the database is too small to damage a page in its middle"
    index = leaves[len(leaves) // 2]
    data[index * page_size : (index + 1) * page_size] = b"\xa5" * page_size
    path.write_bytes(bytes(data))
    return index + 1


def can_write(paths: list[Path]) -> bool:
    """Whether this process can add a file to one of the folders or open one of the files for writing."""
    for path in paths:
        try:
            if path.is_dir():
                (path / ".probe").touch()
                (path / ".probe").unlink()
            else:
                open(path, "r+b").close()  # no SQLite connection of this process has it open now
            return True
        except OSError:
            continue
    return False


@contextlib.contextmanager
def unwritable(*paths: Path) -> Iterator[None]:
    """Make these files and folders unwritable for this process, for real, for the ``with`` block.

    The permission bits first; where they do not bind (root), the immutable attribute
    (``chattr +i``). Skips the test where neither stops writes.
    """
    modes = {p: p.stat().st_mode for p in paths}
    undo = [lambda: [p.chmod(mode) for p, mode in modes.items()]]
    try:
        for p in paths:
            p.chmod(0o555 if p.is_dir() else 0o444)
        if can_write([*paths]):
            chattr = shutil.which("chattr")
            if chattr is None:
                pytest.skip("permission bits do not bind this process (root) and there is no chattr")
            done = subprocess.run([chattr, "+i", *map(str, paths)], capture_output=True, text=True)
            undo.insert(0, lambda: subprocess.run([chattr, "-i", *map(str, paths)], capture_output=True))
            if done.returncode != 0 or can_write([*paths]):
                pytest.skip(f"neither permission bits nor chattr +i stop writes here: {done.stderr.strip()}")
        yield
    finally:
        for step in undo:
            step()


def read_only_folder(folder: Path) -> contextlib.AbstractContextManager[None]:
    return unwritable(*folder.iterdir(), folder)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory, conv_chain) -> Path:
    path = tmp_path_factory.mktemp("models") / "chain.onnx"
    path.write_bytes(conv_chain("reshape").SerializeToString())
    return path


@pytest.fixture(scope="module")
def measured_db(tmp_path_factory, model_file) -> Path:
    """A database made by ``bench run`` on the model, plus enough other records to span many pages."""
    path = tmp_path_factory.mktemp("measured") / "perf.db"
    result = invoke("bench", "run", model_file, "--db", f"sqlite:///{path}", "--e2e", "--format", "json", *FAST_FLAGS)
    assert result.exit_code == 0, result.output
    with SqliteStore(path) as store:
        store.upsert(record_for(i) for i in range(400))
    return path


@pytest.fixture
def copy_of(measured_db: Path, tmp_path: Path) -> Path:
    """A private copy of the measured database (its folder holds nothing else)."""
    path = tmp_path / "copy" / "perf.db"
    path.parent.mkdir()
    shutil.copy(measured_db, path)
    return path


@pytest.fixture
def damaged(copy_of: Path) -> tuple[Path, int]:
    return copy_of, damage_a_data_page(copy_of)


# -- quick_check on opening ----------------------------------------------------------------------


def test_a_damaged_file_is_refused_when_opened_for_writing(damaged: tuple[Path, int]) -> None:
    path, page = damaged
    before = fingerprint(path)
    with pytest.raises(StoreError) as info:
        open_store(f"sqlite:///{path}")
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    assert "damaged" in message and f"Page {page}" in message  # SQLite's first complaint
    assert fingerprint(path) == before


@pytest.mark.parametrize("command", ["bench run", "run"])
def test_measuring_commands_refuse_a_damaged_file_and_leave_it_unchanged(
    command: str, damaged: tuple[Path, int], model_file: Path
) -> None:
    path, page = damaged
    before = fingerprint(path)
    line = one_line_error(invoke(*command.split(), model_file, "--db", f"sqlite:///{path}", *FAST_FLAGS))
    assert str(path) in line and "damaged" in line and f"Page {page}" in line
    assert fingerprint(path) == before


@pytest.mark.parametrize("command", ["db ls", "analyze systems {model}"])  # both read every stored record
def test_reading_a_damaged_page_is_one_line_and_writes_nothing(
    command: str, damaged: tuple[Path, int], model_file: Path
) -> None:
    """A read-only open skips the whole-file check; SQLite refuses the damaged page when a query reads it."""
    path, _ = damaged
    before = fingerprint(path)
    line = one_line_error(invoke(*command.format(model=model_file).split(), "--db", f"sqlite:///{path}"))
    assert str(path) in line and "damaged" in line
    assert fingerprint(path) == before


def damage_every_record_of(path: Path, system: str) -> int:
    """One byte inside each stored record of ``system`` (``"measured_at":`` loses its quote); how many.

    Every record, not the first match of a byte pattern in the file: which record a reading
    command reads first, where SQLite leaves freed copies of rewritten rows, and which records
    spill onto overflow pages all depend on the page layout. Written through SQLite, so the
    pages stay well-formed and only the records' JSON is damaged.
    """
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        done = db.execute(
            "UPDATE results SET doc = replace(doc, '\"measured_at\":', '}measured_at\":') WHERE system = ?",
            (system,),
        ).rowcount
    return done


def test_damage_inside_a_stored_record_is_one_line_too(copy_of: Path, model_file: Path) -> None:
    """One byte of a record's JSON: the page stays well-formed (quick_check passes), the record does not."""
    assert damage_every_record_of(copy_of, SYSTEM) > 0
    before = fingerprint(copy_of)
    command = ("analyze", "lower-bound", model_file, "--system", SYSTEM, "--db", f"sqlite:///{copy_of}")
    line = one_line_error(invoke(*command))
    assert str(copy_of) in line and "damaged" in line and "not valid JSON" in line
    assert fingerprint(copy_of) == before


# -- read-only opening ---------------------------------------------------------------------------


READING_COMMANDS = {
    "db ls": SYSTEM,
    "analyze systems {model}": SYSTEM,
    "analyze lower-bound {model} --system " + SYSTEM: "chain",
    "fleet status -m {model}": SYSTEM,
}


@pytest.mark.parametrize("command", sorted(READING_COMMANDS))
def test_reading_commands_work_on_an_unwritable_copy(command: str, copy_of: Path, model_file: Path) -> None:
    before = fingerprint(copy_of)
    with read_only_folder(copy_of.parent):
        result = invoke(*command.format(model=model_file).split(), "--db", f"sqlite:///{copy_of}", "--format", "json")
    assert result.exit_code == 0, result.output
    assert READING_COMMANDS[command] in result.stdout
    json.loads(result.stdout)
    assert fingerprint(copy_of) == before
    assert [p.name for p in copy_of.parent.iterdir()] == ["perf.db"]


def test_db_ls_reads_a_read_only_file_in_a_writable_folder(copy_of: Path) -> None:
    """Only the file is read-only: SQLite makes its -shm in the folder, and the file is left as it was."""
    before = fingerprint(copy_of)
    with unwritable(copy_of):
        result = invoke("db", "ls", "--db", f"sqlite:///{copy_of}", "--format", "json")
    assert result.exit_code == 0, result.output
    assert SYSTEM in [s["name"] for s in json.loads(result.stdout)["systems"]]
    assert fingerprint(copy_of) == before


def test_a_measuring_command_says_an_unwritable_copy_is_read_only(copy_of: Path, model_file: Path) -> None:
    before = fingerprint(copy_of)
    with read_only_folder(copy_of.parent):
        line = one_line_error(invoke("bench", "run", model_file, "--db", f"sqlite:///{copy_of}", *FAST_FLAGS))
    assert str(copy_of) in line and "read-only" in line
    assert fingerprint(copy_of) == before


@pytest.mark.parametrize("command", sorted(READING_COMMANDS))
def test_reading_commands_never_write_a_writable_file(command: str, copy_of: Path, model_file: Path) -> None:
    before = fingerprint(copy_of)
    result = invoke(*command.format(model=model_file).split(), "--db", f"sqlite:///{copy_of}", "--format", "json")
    assert result.exit_code == 0, result.output
    assert fingerprint(copy_of) == before


def test_a_read_only_store_refuses_writes(copy_of: Path) -> None:
    before = fingerprint(copy_of)
    with open_store(f"sqlite:///{copy_of}", read_only=True) as store:
        assert len(store.records(system=FILLER_SYSTEM)) == 400
        with pytest.raises(StoreError, match="read-only"):
            store.upsert([record_for(10_000)])
        with pytest.raises(StoreError, match="read-only"):
            store.register_system("another", {})
    assert fingerprint(copy_of) == before


def test_a_read_only_store_does_not_create(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    with pytest.raises(StoreError, match="no database"):
        open_store(f"sqlite:///{missing}", read_only=True)
    assert not missing.exists()
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(StoreError, match="no benanza database"):
        open_store(f"sqlite:///{empty}", read_only=True)
    assert empty.read_bytes() == b""


def _copy_with_unmerged_log(source: Path, target: Path, *, with_shm: bool) -> int:
    """Copy a database while a writer holds committed rows in its write-ahead log; how many records it holds."""
    live = target.parent.parent / "live.db"
    shutil.copy(source, live)
    writer = sqlite3.connect(live)
    try:
        writer.execute("PRAGMA wal_autocheckpoint = 0")  # the deletion stays in perf.db-wal
        writer.execute("DELETE FROM results WHERE system = ? AND rowid % 2 = 0", (FILLER_SYSTEM,))
        writer.commit()
        left = writer.execute("SELECT COUNT(*) FROM results WHERE system = ?", (FILLER_SYSTEM,)).fetchone()[0]
        shutil.copy(live, target)
        shutil.copy(f"{live}-wal", f"{target}-wal")
        if with_shm:
            shutil.copy(f"{live}-shm", f"{target}-shm")
    finally:
        writer.close()
    return left


def test_an_unwritable_copy_with_its_log_is_read_with_the_log(measured_db: Path, tmp_path: Path) -> None:
    path = tmp_path / "copy" / "perf.db"
    path.parent.mkdir()
    left = _copy_with_unmerged_log(measured_db, path, with_shm=True)
    assert left < 400
    with read_only_folder(path.parent), open_store(f"sqlite:///{path}", read_only=True) as store:
        assert len(store.records(system=FILLER_SYSTEM)) == left  # not the 400 of the main file alone


def test_an_unwritable_copy_whose_log_cannot_be_read_is_refused(measured_db: Path, tmp_path: Path) -> None:
    path = tmp_path / "copy" / "perf.db"
    path.parent.mkdir()
    _copy_with_unmerged_log(measured_db, path, with_shm=False)  # SQLite cannot rebuild -shm in a read-only folder
    before = fingerprint(path)
    with read_only_folder(path.parent):
        line = one_line_error(invoke("db", "ls", "--db", f"sqlite:///{path}"))
    assert str(path) in line and "-wal" in line
    assert fingerprint(path) == before


# -- MongoDB: a read-only open writes nothing either ------------------------------------------------


def test_a_read_only_mongodb_open_builds_no_index_and_creates_nothing(nx_mongodb_uri: str) -> None:
    import pymongo

    name = f"benanza_ro_{uuid.uuid4().hex}"
    uri = f"{nx_mongodb_uri}/{name}"
    client = pymongo.MongoClient(nx_mongodb_uri, serverSelectionTimeoutMS=5000)
    try:
        with pytest.raises(StoreError, match="no benanza database"):
            open_store(uri, read_only=True)
        assert client[name].list_collection_names() == []
        with open_store(uri) as store:
            store.upsert([record_for(1)])
        client[name]["results"].drop_index("present")  # as a read-only user finds an older database
        with open_store(uri, read_only=True) as store:
            assert store.records() == [record_for(1)]
        assert "present" not in {ix["name"] for ix in client[name]["results"].list_indexes()}
        result = invoke("db", "ls", "--db", uri, "--format", "json")
        assert result.exit_code == 0, result.output
        assert "present" not in {ix["name"] for ix in client[name]["results"].list_indexes()}
    finally:
        client.drop_database(name)
        client.close()
