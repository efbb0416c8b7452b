"""The embedded performance database: one SQLite file (stdlib ``sqlite3``, WAL).

Threads and processes may write the same file at once: each thread (in each process) has
its own connection, every write is one ``BEGIN IMMEDIATE`` transaction, and a writer that
finds the database locked waits (``busy_timeout``) and retries. Rows keep the identity
columns, ``spec_id``, ``outcome``, ``schema_version`` and ``measured_at`` as columns for
queries, and the whole record as a JSON document.

A file that is not a SQLite database, a SQLite database of another program, or a benanza
database with a newer layout is refused with a ``StoreError`` before anything is written
to it; so is a damaged one when it is opened for writing (``PRAGMA quick_check`` finds a
fault: writing into a damaged b-tree can spread the damage).

A store opened ``read_only`` (the commands that only read) opens the file with SQLite's
``mode=ro``, so it works on a file or folder this process cannot write and never changes
the file. It skips the whole-file check, which would cost more than most reads: SQLite
checks every page a query reads, and a damaged one is a ``StoreError`` ("damaged: ...").
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import orjson

from benanza.bench.plans import PLAN_IDENTITY_FIELDS, PLAN_SCHEMA_VERSION, StoredPlan
from benanza.bench.records import IDENTITY_FIELDS, SCHEMA_VERSION, BenchmarkRecord
from benanza.errors import StoreError, UsageError
from benanza.model.names import NamedModel
from benanza.settings import Settings
from benanza.store.base import Clock, StoreBase, keep_repeats, register_store
from benanza.store.documents import document_json
from benanza.store.uri import StoreURI

DB_SCHEMA_VERSION = 1  # the table layout; bump (and migrate) when tables or columns change
# (a new table that older versions ignore, such as ``leases`` or ``repeats``, is created on open without a bump)
APPLICATION_ID = 0x626E7A61  # "bnza" in the SQLite header: marks a benanza database
BUSY_TIMEOUT_S = 30.0
_SQLITE_CORRUPT, _SQLITE_CANTOPEN = 11, 14  # primary result codes (the low byte of extended ones)
# SQLITE_READONLY_CANTINIT, _DIRECTORY: a WAL database read-only with no -shm SQLite can make or use
_NO_WAL_INDEX = (1288, 1544)
_KEYS_PER_QUERY = 500  # stays far below SQLite's limit on bound parameters

_IDENTITY = ", ".join(IDENTITY_FIELDS)
# a record identity's columns, in IDENTITY_FIELDS' order (results and repeats both key on them)
_IDENTITY_COLUMNS = ",\n    ".join(
    f"{f} {'INTEGER' if f == 'batch_size' else 'TEXT'} NOT NULL" for f in IDENTITY_FIELDS
)
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS results (
    {_IDENTITY_COLUMNS},
    spec_id TEXT NOT NULL,
    outcome TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    measured_at TEXT NOT NULL,
    doc TEXT NOT NULL,
    UNIQUE ({_IDENTITY})
);
CREATE INDEX IF NOT EXISTS results_system_stack ON results (system, stack_id, schema_version, spec_id);
CREATE TABLE IF NOT EXISTS systems (
    name TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    first_seen TEXT NOT NULL,
    last_seen TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS stacks (
    system TEXT NOT NULL,
    stack_id TEXT NOT NULL,
    stack TEXT NOT NULL,
    first_seen TEXT NOT NULL,
    last_seen TEXT NOT NULL,
    PRIMARY KEY (system, stack_id)
);
CREATE TABLE IF NOT EXISTS repeats (
    {_IDENTITY_COLUMNS},
    measured_at TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    doc TEXT NOT NULL,
    UNIQUE ({_IDENTITY}, measured_at)
);
CREATE TABLE IF NOT EXISTS leases (
    system TEXT NOT NULL,
    stack_id TEXT NOT NULL,
    spec_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    expires_at REAL NOT NULL,
    heartbeat_at REAL,
    PRIMARY KEY (system, stack_id, spec_id)
);
"""
# Plans (``bench/plans.py``): one row per identity naming its content, each content stored once
# (the systems and stacks that measured the same plan share its document).
_PLAN_IDENTITY = ", ".join(PLAN_IDENTITY_FIELDS)
_PLANS_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS plans (
    system TEXT NOT NULL,
    stack_id TEXT NOT NULL,
    runtime TEXT NOT NULL,
    variant TEXT NOT NULL,
    model_key TEXT NOT NULL,
    batch_size INTEGER NOT NULL,
    granularities TEXT NOT NULL,
    model TEXT NOT NULL,
    plan_id TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    UNIQUE ({_PLAN_IDENTITY})
);
CREATE TABLE IF NOT EXISTS plan_docs (
    plan_id TEXT PRIMARY KEY,
    doc TEXT NOT NULL
);
"""
_PUT_PLAN = f"""
INSERT INTO plans ({_PLAN_IDENTITY}, model, plan_id, schema_version)
VALUES ({", ".join("?" * (len(PLAN_IDENTITY_FIELDS) + 3))})
ON CONFLICT ({_PLAN_IDENTITY}) DO UPDATE SET
    model = excluded.model, plan_id = excluded.plan_id, schema_version = excluded.schema_version
"""
_PUT_PLAN_DOC = "INSERT INTO plan_docs (plan_id, doc) VALUES (?, ?) ON CONFLICT (plan_id) DO NOTHING"
# A record without its raw samples (``records(payload=False)``), cut out by SQLite before decoding
_NO_PAYLOAD = "json_remove(doc, '$.samples', '$.kernel_samples', '$.spec')"
# Added to a ``leases`` table made before leases had heartbeats (older versions ignore it).
_LEASE_HEARTBEAT = "ALTER TABLE leases ADD COLUMN heartbeat_at REAL"
_LEASE_OWNER_INDEX = "CREATE INDEX IF NOT EXISTS leases_owner ON leases (owner)"
# Leases, each statement one pass over the ids (a JSON array): expired leases go first, so a
# conflict left is an unexpired lease, which only its owner may renew. RETURNING lists the
# rows inserted or renewed, i.e. exactly the ids now held.
_DROP_EXPIRED = "DELETE FROM leases WHERE system = ? AND stack_id = ? AND expires_at <= ?"
_CLAIM = """
INSERT INTO leases (system, stack_id, spec_id, owner, heartbeat_at, expires_at)
SELECT ?1, ?2, wanted.value, ?3, ?7, ?4 FROM json_each(?5) AS wanted
WHERE NOT EXISTS (
    SELECT 1 FROM results
    WHERE system = ?1 AND stack_id = ?2 AND schema_version = ?6 AND spec_id = wanted.value
        AND NOT (?8 AND outcome = 'failed')
)
ON CONFLICT (system, stack_id, spec_id) DO UPDATE SET
    heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at
    WHERE leases.owner = excluded.owner
RETURNING spec_id
"""
_HEARTBEAT = "UPDATE leases SET heartbeat_at = ?, expires_at = ? WHERE owner = ?"
_RELEASE = """
DELETE FROM leases
WHERE system = ? AND stack_id = ? AND owner = ? AND spec_id IN (SELECT value FROM json_each(?))
"""
_UPSERT = f"""
INSERT INTO results ({_IDENTITY}, spec_id, outcome, schema_version, measured_at, doc)
VALUES ({", ".join("?" * (len(IDENTITY_FIELDS) + 5))})
ON CONFLICT ({_IDENTITY}) DO UPDATE SET
    spec_id = excluded.spec_id,
    outcome = excluded.outcome,
    schema_version = excluded.schema_version,
    measured_at = excluded.measured_at,
    doc = excluded.doc
"""

_IDENTITY_MATCH = " AND ".join(f"{f} = ?" for f in IDENTITY_FIELDS)
# The stored ok record of an identity becomes a repeat when a record measured at another time replaces it.
_ARCHIVE = f"""
INSERT OR IGNORE INTO repeats ({_IDENTITY}, measured_at, schema_version, doc)
SELECT {_IDENTITY}, measured_at, schema_version, doc FROM results
WHERE {_IDENTITY_MATCH} AND outcome = 'ok' AND measured_at != ?
"""
_PRUNE = f"""
DELETE FROM repeats WHERE {_IDENTITY_MATCH} AND measured_at NOT IN (
    SELECT measured_at FROM repeats WHERE {_IDENTITY_MATCH} ORDER BY measured_at DESC LIMIT ?
)
"""

T = TypeVar("T")


def path_of_uri(uri: str | StoreURI) -> Path:
    """The file of a ``sqlite:///rel/path.db`` or ``sqlite:////abs/path.db`` URI (``~`` expanded)."""
    uri = StoreURI.of(uri)
    shown = uri.masked
    scheme, sep, rest = uri.reveal().partition("://")
    if scheme.lower() != "sqlite" or not sep:
        raise UsageError(f"not a SQLite URI: {shown!r} (expected sqlite:///rel/path.db or sqlite:////abs/path.db)")
    if not rest.startswith("/") or rest == "/":
        raise UsageError(f"{shown!r} names no file (expected sqlite:///rel/path.db or sqlite:////abs/path.db)")
    path = rest[1:]
    if "?" in path or path == ":memory:":
        raise UsageError(f"{shown!r}: query options and in-memory databases are not supported; name a file")
    return Path(path).expanduser()


@register_store("sqlite")
class SqliteStore(StoreBase):
    """A performance database in one SQLite file; see the module docstring."""

    transactional_upsert = True

    def __init__(
        self,
        uri: str | StoreURI | os.PathLike[str],
        *,
        create: bool = True,
        read_only: bool = False,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
        clock: Clock | None = None,
        kept_repeats: int | None = None,
        settings: Settings | None = None,
    ) -> None:
        """Open (or create) the database; see the module docstring for what is refused.

        Args:
            uri: a ``sqlite:///...`` URI or a plain file path.
            create: create a missing database (and its parent folders); otherwise a missing
                file is a ``StoreError``.
            read_only: open the file read-only (``create`` is then ignored: a missing file is
                a ``StoreError``); every write is refused with a ``StoreError``.
            busy_timeout_s: how long a writer waits for another writer's lock.
            clock: the times it writes (``StoreBase.clock``); default ``time.time``.
            kept_repeats: repeats kept per identity (default: the settings' ``$BENANZA_KEEP_REPEATS``, else 10).
            settings: the resolved ``BENANZA_*`` settings (``open_store`` passes them); None: the defaults.
        """
        self.kept_repeats = keep_repeats(kept_repeats, settings)
        if isinstance(uri, StoreURI) or (isinstance(uri, str) and "://" in uri):
            self.uri = StoreURI.of(uri)
            self.path = path_of_uri(self.uri).absolute()
        else:
            self.path = Path(uri).expanduser().absolute()
            self.uri = StoreURI(f"sqlite:///{self.path}")
        self.busy_timeout_s = busy_timeout_s
        if clock is not None:
            self.clock = clock
        self.read_only = read_only
        self._read_only_uri = f"{self.path.as_uri()}?mode=ro"  # immutable=1 added where SQLite needs it
        self._local = threading.local()
        self._connections: list[tuple[int, sqlite3.Connection]] = []
        self._lock = threading.Lock()
        self._closed = False
        self._open(create and not read_only)

    # -- opening -------------------------------------------------------------------------

    def _fail(self, reason: object) -> StoreError:
        return StoreError(f"{self.path}: {reason}")

    def _open(self, create: bool) -> None:
        if self.path.is_dir():
            raise self._fail("is a folder, not a database file")
        if self.path.exists():
            self._check_existing()
        elif not create:
            raise self._fail("no database here")
        else:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise self._fail(f"cannot create its folder: {exc.strerror or exc}") from None
        if not self.read_only:
            self._initialise()

    def _check_existing(self) -> None:
        """Refuse, without writing anything, a file that is not a current benanza database (or a damaged one).

        The file is only ever read through SQLite: opening and closing it with other APIs
        would drop the POSIX locks that this process's open connections hold on it (a
        documented way to corrupt a SQLite database).

        Opened for writing, ``PRAGMA quick_check`` reads every page once per store (not per
        connection): SQLite notices a damaged page only when a statement reads it, so writes
        would otherwise go into a damaged file. For 200,000 records (225 MiB) it costs 0.3 s
        with the file in the page cache and 4 s from disk (``benchmarks/sqlite_open_check.py``).
        """
        if not os.access(self.path, os.R_OK):
            raise self._fail("cannot be read: permission denied")
        if not self.read_only and not (os.access(self.path, os.W_OK) and os.access(self.path.parent, os.W_OK)):
            raise self._fail(  # SQLite's own words would be "unable to open database file"
                "cannot be written here: the file or its folder is read-only "
                "(commands that only read, such as db ls, can still use it)"
            )
        try:
            try:
                app_id, tables, version, problem = self._inspect(self._read_only_uri, check=not self.read_only)
            except sqlite3.OperationalError as exc:
                if not self._needs_immutable(exc):
                    raise
                self._read_only_uri += "&immutable=1"
                app_id, tables, version, problem = self._inspect(self._read_only_uri, check=not self.read_only)
        except sqlite3.DatabaseError as exc:
            if "not a database" in str(exc) or "encrypted" in str(exc):
                raise self._fail("not a SQLite database (the file was left unchanged)") from None
            if _is_corrupt(exc):
                raise self._fail(f"damaged: {exc} (the file was left unchanged)") from None
            raise self._fail(f"cannot be read as a SQLite database: {exc} (the file was left unchanged)") from None
        except (sqlite3.Error, ValueError) as exc:
            raise self._fail(f"cannot be read as a SQLite database: {exc} (the file was left unchanged)") from None
        if app_id != APPLICATION_ID and (app_id != 0 or tables):
            shown = ", ".join(sorted(tables)[:5]) or "none"
            raise self._fail(f"a SQLite database of another program (tables: {shown}); the file was left unchanged")
        if version is not None and version > DB_SCHEMA_VERSION:
            raise self._fail(
                f"benanza database layout {version} is newer than this benanza supports ({DB_SCHEMA_VERSION}); "
                "upgrade benanza (the file was left unchanged)"
            )
        if problem is not None:
            raise self._fail(
                f"damaged: SQLite's quick_check says {problem!r}; the file was left unchanged "
                "(restore it from a backup, or recover what is readable with the sqlite3 shell's .recover)"
            )
        if self.read_only and version is None:
            raise self._fail("no benanza database here (the file was left unchanged)")

    def _inspect(self, uri: str, *, check: bool) -> tuple[int, list[str], int | None, str | None]:
        """Application id, tables, benanza layout version and (with ``check``) quick_check's first complaint."""
        conn = sqlite3.connect(uri, uri=True, timeout=self.busy_timeout_s)
        try:
            conn.isolation_level = None
            # one read transaction: another process creating the database meanwhile must not
            # be seen half-way (its tables already committed but not yet the header read before)
            conn.execute("BEGIN")
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            version = problem = None
            if app_id == APPLICATION_ID and "meta" in tables:
                row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                version = int(row[0]) if row else None
            if check and app_id == APPLICATION_ID:
                # (1): stop at the first fault, the one reported; it bounds the errors, not the pages read
                found = [r[0] for r in conn.execute("PRAGMA quick_check(1)")]
                if found != ["ok"]:
                    lines = [line for text in found for line in str(text).splitlines()]
                    problem = next((line for line in lines if not line.startswith("***")), "; ".join(lines))
        finally:
            conn.close()
        return app_id, tables, version, problem

    def _needs_immutable(self, exc: sqlite3.OperationalError) -> bool:
        """Whether a read-only open failed only because SQLite cannot make the WAL index in a read-only folder.

        A WAL database is read through its shared-memory file (``-shm``), which SQLite creates
        beside the database. In a folder this process cannot write, with no ``-shm`` there (or
        one it cannot write), ``mode=ro`` fails; ``immutable=1`` reads the main file without
        it. That is right only when the main file holds everything: a write-ahead log
        (``-wal``) with content would be ignored, so that is refused. Immutable reading takes no locks either: a writer
        that could write the folder elsewhere and starts meanwhile would not be seen, which a
        read-only folder (a read-only mount, a copy) does not have.
        """
        no_wal_index = _result_code(exc) == _SQLITE_CANTOPEN or getattr(exc, "sqlite_errorcode", None) in _NO_WAL_INDEX
        if not no_wal_index or os.access(self.path.parent, os.W_OK):
            return False
        wal = self.path.with_name(f"{self.path.name}-wal")
        if wal.exists() and wal.stat().st_size > 0:
            raise self._fail(
                f"its write-ahead log {wal.name} cannot be read in this read-only folder without a usable "
                f"{self.path.name}-shm; open it once where it can be written (that merges the log into the file)"
            )
        return True

    def _initialise(self) -> None:
        conn = self._conn()
        self._retry(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())

        def create(c: sqlite3.Connection) -> None:
            row = c.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone()
            if row is not None:  # someone else created it meanwhile: check again under the lock
                found = c.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                if found and int(found[0]) > DB_SCHEMA_VERSION:
                    raise self._fail(f"benanza database layout {found[0]} is newer than this benanza supports")
            # not executescript: it would COMMIT the transaction that makes creation race-free
            for statement in (_SCHEMA + _PLANS_SCHEMA).split(";"):
                if statement.strip():
                    c.execute(statement)
            if "heartbeat_at" not in {r[1] for r in c.execute("PRAGMA table_info(leases)")}:
                c.execute(_LEASE_HEARTBEAT)
            c.execute(_LEASE_OWNER_INDEX)
            c.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)", (str(DB_SCHEMA_VERSION),))
            c.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('created_at', ?)", (self.now_iso(),))
            c.execute(f"PRAGMA application_id = {APPLICATION_ID}")

        self._write(create)

    # -- connections and transactions ------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise self._fail("the store is closed")
        pid = os.getpid()
        conn = getattr(self._local, "conn", None)
        if conn is None or self._local.pid != pid:  # a forked child must not reuse its parent's connection
            # read-only: SQLite's mode=ro, which cannot write the file even where this process could
            target, uri = (self._read_only_uri, True) if self.read_only else (self.path, False)
            try:
                conn = sqlite3.connect(
                    target, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False, uri=uri
                )
                conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
                if not self.read_only:
                    conn.execute("PRAGMA synchronous = NORMAL")  # WAL: durable across crashes of this process
            except sqlite3.Error as exc:
                raise self._fail(f"cannot be opened: {exc}") from None
            self._local.conn, self._local.pid = conn, pid
            with self._lock:
                self._connections.append((pid, conn))
        return conn

    def _retry(self, action: Callable[[], T]) -> T:
        """Run ``action``, retrying while another connection holds the lock."""
        deadline = time.monotonic() + 2 * self.busy_timeout_s
        delay = 0.005
        while True:
            try:
                return action()
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or time.monotonic() > deadline:
                    raise self._fail(exc) from None
            except sqlite3.Error as exc:
                raise self._fail(f"damaged: {exc}" if _is_corrupt(exc) else exc) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    def _write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work`` inside one ``BEGIN IMMEDIATE`` transaction, retried whole when locked."""
        if self.read_only:
            raise self._fail("opened read-only: this store does not write")
        conn = self._conn()

        def attempt() -> T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = work(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return result

        return self._retry(attempt)

    def _read(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        conn = self._conn()
        return self._retry(lambda: conn.execute(sql, tuple(params)).fetchall())

    # -- Store ----------------------------------------------------------------------------

    def upsert(self, records: Iterable[BenchmarkRecord]) -> int:
        rows = [_row(r) for r in records]  # encode outside the lock
        if not rows:
            return 0
        keep = self.kept_repeats

        def write(c: sqlite3.Connection) -> None:
            if keep:
                for row in rows:
                    identity, measured_at = row[: len(IDENTITY_FIELDS)], row[len(IDENTITY_FIELDS) + 3]
                    if c.execute(_ARCHIVE, (*identity, measured_at)).rowcount:
                        c.execute(_PRUNE, (*identity, *identity, keep))
            c.executemany(_UPSERT, rows)

        self._write(write)
        return len(rows)

    def repeats(
        self,
        system: str,
        stack_id: str | None = None,
        *,
        runtime: str | None = None,
        keys: Iterable[str] | None = None,
        batch_size: int | None = None,
    ) -> list[BenchmarkRecord]:
        if not self._has_table("repeats"):  # a read-only database written before repeats existed
            return []
        where, params = ["schema_version = ?", "system = ?"], [SCHEMA_VERSION, system]
        for column, value in (("stack_id", stack_id), ("runtime", runtime), ("batch_size", batch_size)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        base = f"SELECT rowid, doc FROM repeats WHERE {' AND '.join(where)}"
        if keys is None:
            rows = self._read(base, params)
        else:
            wanted = sorted(set(keys))
            rows = []
            for i in range(0, len(wanted), _KEYS_PER_QUERY):
                chunk = wanted[i : i + _KEYS_PER_QUERY]
                rows += self._read(f"{base} AND key IN ({', '.join('?' * len(chunk))})", [*params, *chunk])
        found = [self._record_of(rowid, doc) for rowid, doc in rows]
        return sorted(found, key=lambda r: (r.identity(), r.measured_at))

    def _has_table(self, name: str) -> bool:
        return bool(self._read("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)))

    def present_spec_ids(self, system: str, stack_id: str) -> set[str]:
        rows = self._read(
            "SELECT spec_id FROM results WHERE system = ? AND stack_id = ? AND schema_version = ?",
            (system, stack_id, SCHEMA_VERSION),
        )
        return {r[0] for r in rows}

    def variants(self, system: str, stack_id: str, runtime: str) -> dict[str, int]:
        rows = self._read(
            "SELECT variant, COUNT(*) FROM results WHERE system = ? AND stack_id = ? AND schema_version = ? "
            "AND runtime = ? GROUP BY variant",
            (system, stack_id, SCHEMA_VERSION, runtime),
        )
        return {r[0]: int(r[1]) for r in rows}

    def records(
        self,
        *,
        system: str | None = None,
        stack_id: str | None = None,
        runtime: str | None = None,
        kind: str | None = None,
        keys: Iterable[str] | None = None,
        batch_size: int | None = None,
        outcome: str | None = None,
        payload: bool = True,
    ) -> list[BenchmarkRecord]:
        where, params = ["schema_version = ?"], [SCHEMA_VERSION]
        for column, value in (
            ("system", system),
            ("stack_id", stack_id),
            ("runtime", runtime),
            ("kind", kind),
            ("batch_size", batch_size),
            ("outcome", outcome),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(str(value) if column != "batch_size" else int(value))
        doc = "doc" if payload else _NO_PAYLOAD
        base = f"SELECT rowid, {doc} FROM results WHERE {' AND '.join(where)}"
        try:
            if keys is None:
                rows = self._read(f"{base} ORDER BY {_IDENTITY}", params)
            else:
                wanted = sorted(set(keys))
                rows = []
                for i in range(0, len(wanted), _KEYS_PER_QUERY):
                    chunk = wanted[i : i + _KEYS_PER_QUERY]
                    rows += self._read(f"{base} AND key IN ({', '.join('?' * len(chunk))})", [*params, *chunk])
        except StoreError as exc:
            if payload or "malformed JSON" not in str(exc):
                raise
            # SQLite's json_remove read a damaged document: the same message as decoding it here
            raise self._fail("damaged: a stored record is not valid JSON (SQLite: malformed JSON)") from None
        found = [self._record_of(rowid, doc) for rowid, doc in rows]
        found = [r for r in found if r.schema_version == SCHEMA_VERSION]
        if keys is not None:
            found.sort(key=BenchmarkRecord.identity)
        return found

    def put_plans(self, system: str, stack_id: str, plans: Iterable[StoredPlan]) -> int:
        given = list(plans)
        if not given:
            return 0
        docs = {p.plan_id: _json({**p.to_doc(), "system": "", "stack_id": ""}) for p in given}
        rows = [(system, stack_id, *p.identity()[2:], p.model, p.plan_id, p.schema_version) for p in given]

        def put(c: sqlite3.Connection) -> None:
            c.executemany(_PUT_PLAN_DOC, list(docs.items()))
            c.executemany(_PUT_PLAN, rows)

        self._write(put)
        return len(given)

    def plans(
        self, *, system: str | None = None, stack_id: str | None = None, model: str | None = None
    ) -> list[StoredPlan]:
        where, params = ["p.schema_version = ?"], [PLAN_SCHEMA_VERSION]
        for column, value in (("system", system), ("stack_id", stack_id), ("model", model)):
            if value is not None:
                where.append(f"p.{column} = ?")
                params.append(value)
        sql = (
            f"SELECT p.system, p.stack_id, p.plan_id, d.doc FROM plans p JOIN plan_docs d ON d.plan_id = p.plan_id "
            f"WHERE {' AND '.join(where)} ORDER BY {', '.join(f'p.{f}' for f in PLAN_IDENTITY_FIELDS)}"
        )
        try:
            rows = self._read(sql, params)
        except StoreError as exc:
            if "no such table" in str(exc):  # a database made before plans were stored
                return []
            raise
        decoded: dict[str, StoredPlan] = {}  # one decoding per content, shared by its systems and stacks
        found = []
        for system_name, sid, plan_id, doc in rows:
            if plan_id not in decoded:
                decoded[plan_id] = self._plan_of(plan_id, doc)
            plan = decoded[plan_id]
            if plan.schema_version == PLAN_SCHEMA_VERSION:
                found.append(plan.placed(system_name, sid))
        return found

    def model_names(self) -> list[NamedModel]:
        sql = (
            "SELECT DISTINCT p.model, p.model_key, json_extract(d.doc, '$.path') FROM plans p "
            "JOIN plan_docs d ON d.plan_id = p.plan_id WHERE p.schema_version = ? ORDER BY 1, 2, 3"
        )
        try:
            rows = self._read(sql, [PLAN_SCHEMA_VERSION])
        except StoreError as exc:
            if "no such table" in str(exc):  # a database made before plans were stored
                return []
            raise
        return [NamedModel(name, key, path or "") for name, key, path in rows]

    def _plan_of(self, plan_id: str, doc: str) -> StoredPlan:
        try:
            return StoredPlan.from_doc(self._json_of(doc, f"plan {plan_id!r}"))
        except StoreError as exc:
            raise self._fail(f"the stored plan {plan_id!r} cannot be read: {exc}") from None

    def register_system(self, name: str, fingerprint: dict[str, Any]) -> None:
        now, doc = self.now_iso(), _json(fingerprint)
        self._write(
            lambda c: c.execute(
                "INSERT INTO systems (name, fingerprint, first_seen, last_seen) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET fingerprint = excluded.fingerprint, last_seen = excluded.last_seen",
                (name, doc, now, now),
            )
        )

    def register_stack(self, system: str, stack_id: str, stack: dict[str, Any]) -> bool:
        now, doc = self.now_iso(), _json(stack)

        def register(c: sqlite3.Connection) -> bool:
            inserted = c.execute(
                "INSERT INTO stacks (system, stack_id, stack, first_seen, last_seen) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (system, stack_id) DO NOTHING",
                (system, stack_id, doc, now, now),
            ).rowcount
            if not inserted:
                c.execute("UPDATE stacks SET last_seen = ? WHERE system = ? AND stack_id = ?", (now, system, stack_id))
            return bool(inserted)

        return self._write(register)

    def systems(self) -> list[dict[str, Any]]:
        rows = self._read("SELECT name, fingerprint, first_seen, last_seen FROM systems ORDER BY name")
        return [
            {"name": n, "fingerprint": self._json_of(f, f"system {n!r}"), "first_seen": a, "last_seen": b}
            for n, f, a, b in rows
        ]

    def stacks(self, system: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT system, stack_id, stack, first_seen, last_seen FROM stacks"
        params: tuple[Any, ...] = ()
        if system is not None:
            sql, params = f"{sql} WHERE system = ?", (system,)
        rows = self._read(f"{sql} ORDER BY system, first_seen, stack_id", params)
        return [
            {"system": s, "stack_id": i, "stack": self._json_of(d, f"stack {i!r}"), "first_seen": a, "last_seen": b}
            for s, i, d, a, b in rows
        ]

    def summary(self) -> list[dict[str, Any]]:
        rows = self._read(
            "SELECT system, stack_id, runtime, kind, outcome, COUNT(*) FROM results WHERE schema_version = ? "
            "GROUP BY system, stack_id, runtime, kind, outcome ORDER BY system, stack_id, runtime, kind, outcome",
            (SCHEMA_VERSION,),
        )
        names = ("system", "stack_id", "runtime", "kind", "outcome", "count")
        return [dict(zip(names, r, strict=True)) for r in rows]

    def _json_of(self, text: str, what: str) -> Any:
        """A stored JSON document; damaged bytes in a row (quick_check checks pages, not JSON) are a ``StoreError``."""
        try:
            return orjson.loads(text)
        except (TypeError, ValueError) as exc:  # orjson.JSONDecodeError is a ValueError
            raise self._fail(f"damaged: the stored {what} is not valid JSON ({exc})") from None

    def _record_of(self, rowid: int, doc: str) -> BenchmarkRecord:
        fields = self._json_of(doc, f"record of row {rowid}")
        try:
            return BenchmarkRecord.from_doc(fields)
        except StoreError as exc:
            raise self._fail(f"the stored record of row {rowid} cannot be read: {exc}") from None

    def claim(
        self, system: str, stack_id: str, spec_ids: Iterable[str], owner: str, ttl_s: float, retry_failed: bool = False
    ) -> set[str]:
        wanted = self._lease_ids(spec_ids, owner, ttl_s)
        if not wanted:
            return set()
        ids = _json(wanted)

        def claim(c: sqlite3.Connection) -> set[str]:
            now = self.clock()  # inside the write lock: no other claim runs between reading and using it
            c.execute(_DROP_EXPIRED, (system, stack_id, now))
            params = (system, stack_id, owner, now + ttl_s, ids, SCHEMA_VERSION, now, retry_failed)
            rows = c.execute(_CLAIM, params).fetchall()
            return {r[0] for r in rows}

        return self._write(claim)

    def heartbeat(self, owner: str, ttl_s: float) -> int:
        self._check_heartbeat(owner, ttl_s)

        def beat(c: sqlite3.Connection) -> int:
            now = self.clock()
            return c.execute(_HEARTBEAT, (now, now + ttl_s, owner)).rowcount

        return self._write(beat)

    def release(self, system: str, stack_id: str, spec_ids: Iterable[str], owner: str) -> None:
        ids = self._lease_ids(spec_ids, owner)
        if ids:
            self._write(lambda c: c.execute(_RELEASE, (system, stack_id, owner, _json(ids))))

    def leases(self, system: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT system, stack_id, spec_id, owner, heartbeat_at, expires_at FROM leases WHERE expires_at > ?"
        params: list[Any] = [self.clock()]
        if system is not None:
            sql += " AND system = ?"
            params.append(system)
        rows = self._read(f"{sql} ORDER BY system, stack_id, spec_id", params)
        names = ("system", "stack_id", "spec_id", "owner", "heartbeat_at", "expires_at")
        return [dict(zip(names, r, strict=True)) for r in rows]

    def close(self) -> None:
        """Close every connection this process opened (from any thread)."""
        pid = os.getpid()
        with self._lock:
            mine = [c for p, c in self._connections if p == pid]
            self._connections = []
            self._closed = True
        for conn in mine:
            conn.close()


def _result_code(exc: sqlite3.Error) -> int:
    """SQLite's primary result code of an error (0 where the error carries none)."""
    return (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF


def _is_corrupt(exc: sqlite3.Error) -> bool:
    return _result_code(exc) == _SQLITE_CORRUPT


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    message = str(exc).lower()
    return "locked" in message or "busy" in message


def _json(value: Any) -> str:
    return document_json(value, sort_keys=True)


def _row(record: BenchmarkRecord) -> tuple[Any, ...]:
    if not isinstance(record, BenchmarkRecord):
        raise TypeError(f"expected a BenchmarkRecord, got {type(record).__name__}")
    return (
        *record.identity(),
        record.spec_id,
        str(record.outcome),
        record.schema_version,
        record.measured_at,
        document_json(record.to_doc()),
    )
