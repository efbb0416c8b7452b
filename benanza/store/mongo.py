"""The fleet's performance database: MongoDB through pymongo.

URIs are MongoDB connection strings; the path names the database (default ``benanza``)::

    mongodb://bench:SECRET@db.example:27017/benanza?authSource=admin&tls=true
    mongodb+srv://bench:SECRET@cluster0.example.net/benanza

Authentication (``user:password@``, ``authSource``, ``authMechanism``) and TLS (``tls``,
``tlsCAFile``, ``tlsCertificateKeyFile``, ...) are the driver's URI options; benanza adds
none of its own. ``serverSelectionTimeoutMS`` defaults to 5000 here (the driver's is 30000)
so that an unreachable server is reported within seconds; a URI option overrides it. The
store holds its URI as a ``StoreURI``: error messages show it masked (``store/uri.py``), and a
driver's reason that quotes part of the credentials (a parser reading half a password as a
port) is not shown.

Layout: collections ``results`` (one document per record: ``BenchmarkRecord.to_doc()`` with
``schema_version``), ``systems`` (``_id`` = name), ``stacks``, ``leases``, ``repeats`` (a
replaced ok record: its identity, ``measured_at`` and ``doc``, see ``Store.repeats``) and ``meta`` (one
document ``{_id: "benanza", db_schema_version, created_at}``). ``INDEXES`` lists the indexes,
created idempotently on every open (but a ``read_only`` one): a unique index on
``records.IDENTITY_FIELDS`` (the same identity as SQLite's) and one serving ``present_spec_ids``.

Writes: ``upsert`` checks and encodes every record first (a record that cannot be stored
fails the call before anything is written), then sends one unordered ``bulk_write`` of
``ReplaceOne(identity, doc, upsert=True)``. There is no transaction across documents (that
would need a replica set): each document is replaced atomically, and a call that fails
midway may have written some of its records; every operation is idempotent, so the retry
(here, and the caller's at-least-once retry) completes it. Transient errors (lost or
changing primary, network timeouts, server selection, duplicate-key races between
concurrent upserts) are retried with exponential backoff; what still fails, or fails for
another reason, is a one-line ``StoreError`` naming the URI.

Leases are documents unique by (system, stack_id, spec_id); a claim is, per id, an upsert
whose filter matches only the owner's own or an expired lease, so a lease held by another
makes the upsert collide with the unique index (``DuplicateKeyError``) and that id is not
taken. Ids whose results exist are excluded before the claim and checked again after it, so
a result written (and its lease released) meanwhile by another driver is not measured twice.
A heartbeat is one ``update_many`` on the owner's leases (indexed by owner).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote

import pymongo
from pymongo import ASCENDING, ReplaceOne, UpdateOne
from pymongo.errors import (
    AutoReconnect,
    BulkWriteError,
    DuplicateKeyError,
    OperationFailure,
    PyMongoError,
    ServerSelectionTimeoutError,
)
from pymongo.uri_parser import parse_uri

from benanza.bench.plans import PLAN_IDENTITY_FIELDS, PLAN_SCHEMA_VERSION, StoredPlan
from benanza.bench.records import IDENTITY_FIELDS, SCHEMA_VERSION, BenchmarkRecord, Outcome
from benanza.errors import StoreError, one_line
from benanza.model.names import NamedModel
from benanza.settings import DEFAULT_RETRY_WINDOW_S, Settings
from benanza.store.base import Clock, StoreBase, keep_repeats, register_store
from benanza.store.documents import document_json
from benanza.store.uri import StoreURI, mask_uri

__all__ = ["MongoStore", "database_of_uri", "mask_uri"]  # mask_uri: store/uri.py's, kept importable here

DB_SCHEMA_VERSION = 1  # the collection layout; bump (and migrate) when collections or indexes change
DEFAULT_DATABASE = "benanza"
SERVER_SELECTION_TIMEOUT_MS = 5_000
META_ID = "benanza"
COLLECTIONS = ("results", "systems", "stacks", "leases", "meta", "plans", "plan_docs", "repeats")
INDEXES: dict[str, list[tuple[str, list[str], bool]]] = {
    # collection: [(name, fields, unique)]
    "results": [
        ("identity", list(IDENTITY_FIELDS), True),
        ("present", ["system", "stack_id", "schema_version", "spec_id"], False),
    ],
    "stacks": [("stack", ["system", "stack_id"], True)],
    "repeats": [("repeat", [*IDENTITY_FIELDS, "measured_at"], True)],
    "leases": [("lease", ["system", "stack_id", "spec_id"], True), ("lease_owner", ["owner"], False)],
    # plans: one document per identity naming its content (``plan_id``), each content once in plan_docs
    "plans": [("plan", list(PLAN_IDENTITY_FIELDS), True)],
}
_IDS_PER_QUERY = 1_000  # spec ids or keys per ``$in``
_DUPLICATE_KEY = 11000
_INDEX_EXISTS_WITH_OTHER_NAME = 85  # IndexOptionsConflict: e.g. made by deploy/ under its own name
# Server error codes worth retrying (the driver maps most of them to AutoReconnect already).
_TRANSIENT_CODES = frozenset({6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436})
_SEPARATOR = "\x1f"  # joins summary group fields (see ``summary``)

T = TypeVar("T")


def database_of_uri(uri: str) -> str:
    """The database a MongoDB URI names (``DEFAULT_DATABASE`` when its path is empty)."""
    rest = uri.partition("://")[2].partition("?")[0]
    rest = rest.rpartition("@")[2]  # user info may not hold an unescaped '/', hosts may not hold '@'
    return unquote(rest.partition("/")[2]) or DEFAULT_DATABASE


def _uri_options(uri: str) -> set[str]:
    """The option names a URI sets, lower-cased (option names are case-insensitive)."""
    query = uri.partition("?")[2]
    return {name.lower() for name, _ in parse_qsl(query, keep_blank_values=True)}


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, (AutoReconnect, DuplicateKeyError)):  # AutoReconnect: network, primary, selection
        return True
    if isinstance(exc, BulkWriteError):  # unordered upserts racing another writer on one identity
        errors = exc.details.get("writeErrors") or []
        return bool(errors) and all(e.get("code") == _DUPLICATE_KEY for e in errors)
    if isinstance(exc, OperationFailure):
        labelled = exc.has_error_label("RetryableWriteError") or exc.has_error_label("TransientTransactionError")
        return labelled or exc.code in _TRANSIENT_CODES
    return False


def _reason(exc: BaseException) -> str:
    """A short one-line reason for a driver error (its server-selection text is pages long)."""
    text = str(exc)
    if isinstance(exc, ServerSelectionTimeoutError):
        text = text.split(", Timeout:")[0]
        text = re.sub(r"\s*\(configured timeouts:[^)]*\)", "", text)
        text = f"no server reachable ({text})" if text else "no server reachable"
    elif isinstance(exc, BulkWriteError):
        errors = exc.details.get("writeErrors") or [{}]
        text = f"{len(errors)} write error(s), first: {errors[0].get('errmsg', text)}"
    text = one_line(Exception(text)) if text.strip() else type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _chunks(items: list[str], size: int = _IDS_PER_QUERY) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@register_store("mongodb")
@register_store("mongodb+srv")
class MongoStore(StoreBase):
    """A performance database in a MongoDB database; see the module docstring."""

    transactional_upsert = False

    def __init__(
        self,
        uri: str | StoreURI,
        *,
        create: bool = True,
        read_only: bool = False,
        client: pymongo.MongoClient | None = None,
        retries: int = 5,
        backoff_s: float = 0.1,
        max_backoff_s: float = 2.0,
        retry_window_s: float | None = None,
        clock: Clock | None = None,
        kept_repeats: int | None = None,
        settings: Settings | None = None,
    ) -> None:
        """Connect, check (or create) the benanza database and its indexes.

        Args:
            uri: a ``mongodb://`` or ``mongodb+srv://`` connection string; its path names the
                database (default ``benanza``).
            create: create a missing benanza database; otherwise a database without the
                benanza meta document is a ``StoreError``.
            read_only: write nothing while opening (no index is built), so that a user with
                only the read role can read; implies ``create=False``. Writes are left to the
                server's permissions.
            client: a connected ``MongoClient`` to use instead of one made from ``uri`` (it is
                not closed by ``close``); ``uri`` still names the database.
            retries: how often a transient error is retried before it becomes a ``StoreError``.
            backoff_s: the first wait between retries; it doubles up to ``max_backoff_s``.
            max_backoff_s: the longest wait between two retries.
            retry_window_s: no retry starts later than this after the first attempt (an
                unreachable server costs ``serverSelectionTimeoutMS`` per attempt); default: the
                settings' ``$BENANZA_DB_RETRY_WINDOW_S``, else 20 s.
            clock: the times it writes (``StoreBase.clock``); default ``time.time``.
            kept_repeats: repeats kept per identity (default: the settings' ``$BENANZA_KEEP_REPEATS``, else 10).
            settings: the resolved ``BENANZA_*`` settings (``open_store`` passes them); None: the defaults.
        """
        if clock is not None:
            self.clock = clock
        self.kept_repeats = keep_repeats(kept_repeats, settings)
        self.uri = StoreURI.of(uri)
        uri = self.uri.reveal()  # to connect with; never shown
        self.read_only = read_only
        self.retries, self.backoff_s, self.max_backoff_s = retries, backoff_s, max_backoff_s
        if retry_window_s is None:
            retry_window_s = settings.db_retry_window_s if settings is not None else DEFAULT_RETRY_WINDOW_S
        self.retry_window_s = retry_window_s
        self._owns_client = client is None
        if client is None:
            options: dict[str, Any] = {"appname": "benanza"}
            if "serverselectiontimeoutms" not in _uri_options(uri):
                options["serverSelectionTimeoutMS"] = SERVER_SELECTION_TIMEOUT_MS
            try:
                if uri.lower().startswith("mongodb://"):  # (+srv would look up DNS here)
                    parse_uri(uri, warn=False)  # a bad option is an error, not a warning the client ignores
                client = pymongo.MongoClient(uri, **options)
            except (PyMongoError, ValueError, TypeError, OSError) as exc:  # the URI parser; OSError: a TLS file
                raise self._fail(f"not a usable MongoDB URI: {_reason(exc)}") from None
        self.client = client
        try:
            self.db = client[database_of_uri(uri)]
        except (PyMongoError, TypeError, ValueError) as exc:
            self.close()
            raise self._fail(f"bad database name: {_reason(exc)}") from None
        self._results, self._systems, self._stacks = self.db["results"], self.db["systems"], self.db["stacks"]
        self._leases, self._meta, self._repeats = self.db["leases"], self.db["meta"], self.db["repeats"]
        self._plans, self._plan_docs = self.db["plans"], self.db["plan_docs"]
        try:
            self._open(create and not read_only)
        except BaseException:
            self.close()
            raise

    # -- opening -------------------------------------------------------------------------

    def _fail(self, reason: object) -> StoreError:
        return StoreError(f"{self.shown_uri}: {self.uri.redact(str(reason))}")

    def _open(self, create: bool) -> None:
        try:  # the server-selection timeout is the wait: no retries on top of it
            self.client.admin.command("ping")
        except PyMongoError as exc:
            raise self._fail(f"cannot reach the database server: {_reason(exc)}") from None
        meta = self._call("read the meta document", lambda: self._meta.find_one({"_id": META_ID}))
        if meta is None:
            if not create:
                raise self._fail("no benanza database here")
            names = self._call("list collections", self.db.list_collection_names)
            foreign = sorted(set(names) - set(COLLECTIONS))
            if foreign:
                shown = ", ".join(foreign[:5])
                raise self._fail(f"a database of another program (collections: {shown}); it was left unchanged")
        elif int(meta.get("db_schema_version", 0)) > DB_SCHEMA_VERSION:
            raise self._fail(
                f"benanza database layout {meta['db_schema_version']} is newer than this benanza supports "
                f"({DB_SCHEMA_VERSION}); upgrade benanza (the database was left unchanged)"
            )
        if self.read_only:
            return
        self._create_indexes()
        if meta is None:
            self._call(
                "write the meta document",
                lambda: self._meta.update_one(
                    {"_id": META_ID},
                    {"$setOnInsert": {"db_schema_version": DB_SCHEMA_VERSION, "created_at": self.now_iso()}},
                    upsert=True,
                ),
            )

    def _create_indexes(self) -> None:
        for collection, indexes in INDEXES.items():
            for name, fields, unique in indexes:

                def create(c: str = collection, n: str = name, f: list[str] = fields, u: bool = unique) -> None:
                    try:
                        self.db[c].create_index([(field, ASCENDING) for field in f], name=n, unique=u)
                    except OperationFailure as exc:
                        if exc.code != _INDEX_EXISTS_WITH_OTHER_NAME:
                            raise

                self._call(f"create index {name!r} on {collection}", create)

    # -- calls with retries ----------------------------------------------------------------

    def _call(self, what: str, action: Callable[[], T]) -> T:
        """``action()``, retried with backoff while it fails transiently; a ``StoreError`` otherwise."""
        delay, deadline = self.backoff_s, time.monotonic() + self.retry_window_s
        for attempt in range(self.retries + 1):
            try:
                return action()
            except PyMongoError as exc:
                if not _is_transient(exc):
                    raise self._fail(f"cannot {what}: {_reason(exc)}") from None
                if attempt == self.retries or time.monotonic() + delay > deadline:
                    raise self._fail(f"cannot {what} after {attempt + 1} attempts: {_reason(exc)}") from None
            time.sleep(delay)
            delay = min(delay * 2, self.max_backoff_s)
        raise AssertionError("unreachable")

    # -- Store ----------------------------------------------------------------------------

    def upsert(self, records: Iterable[BenchmarkRecord]) -> int:
        latest: dict[tuple[Any, ...], dict[str, Any]] = {}  # the later of two same-identity records wins
        count = 0
        for record in records:
            if not isinstance(record, BenchmarkRecord):
                raise TypeError(f"expected a BenchmarkRecord, got {type(record).__name__}")
            # Through JSON: exactly what SQLite stores and a spill file holds, and a record
            # that cannot be encoded fails here, before anything is written.
            latest[record.identity()] = json.loads(document_json(record.to_doc()))
            count += 1
        if not latest:
            return 0
        if self.kept_repeats:
            self._archive(latest)
        ops = [ReplaceOne({f: doc[f] for f in IDENTITY_FIELDS}, doc, upsert=True) for doc in latest.values()]
        self._call(f"write {len(ops)} records", lambda: self._results.bulk_write(ops, ordered=False))
        return count

    def _archive(self, latest: dict[tuple[Any, ...], dict[str, Any]]) -> None:
        """Keep the stored ok records that ``latest`` replaces with a record of another time as repeats.

        Idempotent: a repeat is unique by identity and ``measured_at``, so a retried call adds
        nothing; a repeat written before a failed ``bulk_write`` is the record still stored,
        which the retry writes again as the same repeat.
        """
        by_stack: dict[tuple[str, str], list[str]] = {}
        for doc in latest.values():
            by_stack.setdefault((doc["system"], doc["stack_id"]), []).append(doc["spec_id"])
        archived: list[dict[str, Any]] = []
        for (system, stack_id), spec_ids in by_stack.items():
            for chunk in _chunks(sorted(set(spec_ids))):
                query = {
                    "system": system,
                    "stack_id": stack_id,
                    "schema_version": SCHEMA_VERSION,
                    "outcome": "ok",
                    "spec_id": {"$in": chunk},
                }
                stored = self._call("read replaced records", lambda q=query: list(self._results.find(q, {"_id": 0})))
                for old in stored:
                    new = latest.get(tuple(old[f] for f in IDENTITY_FIELDS))
                    if new is not None and new["measured_at"] != old["measured_at"]:
                        archived.append(old)
        if not archived:
            return
        ops = [
            UpdateOne(
                {**{f: old[f] for f in IDENTITY_FIELDS}, "measured_at": old["measured_at"]},
                {"$setOnInsert": {"schema_version": old["schema_version"], "doc": old}},
                upsert=True,
            )
            for old in archived
        ]
        self._call(f"keep {len(ops)} repeats", lambda: self._repeats.bulk_write(ops, ordered=False))
        for old in archived:
            identity = {f: old[f] for f in IDENTITY_FIELDS}

            def prune(i: dict[str, Any] = identity) -> None:
                docs = self._repeats.find(i, {"_id": 1}).sort("measured_at", -1).skip(self.kept_repeats)
                extra = [d["_id"] for d in docs]
                if extra:
                    self._repeats.delete_many({"_id": {"$in": extra}})

            self._call("drop old repeats", prune)

    def repeats(
        self,
        system: str,
        stack_id: str | None = None,
        *,
        runtime: str | None = None,
        keys: Iterable[str] | None = None,
        batch_size: int | None = None,
    ) -> list[BenchmarkRecord]:
        query: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "system": system}
        for name, value in (("stack_id", stack_id), ("runtime", runtime)):
            if value is not None:
                query[name] = str(value)
        if batch_size is not None:
            query["batch_size"] = int(batch_size)
        queries = [query] if keys is None else [{**query, "key": {"$in": c}} for c in _chunks(sorted(set(keys)))]
        docs: list[dict[str, Any]] = []
        for q in queries:
            docs += self._call("read repeats", lambda q=q: list(self._repeats.find(q, {"_id": 0, "doc": 1})))
        found = [BenchmarkRecord.from_doc(d["doc"]) for d in docs]
        return sorted(found, key=lambda r: (r.identity(), r.measured_at))

    def present_spec_ids(self, system: str, stack_id: str) -> set[str]:
        query = {"system": system, "stack_id": stack_id, "schema_version": SCHEMA_VERSION}

        def read() -> set[str]:
            cursor = self._results.find(query, {"spec_id": 1, "_id": 0}, batch_size=10_000)
            return {doc["spec_id"] for doc in cursor}

        return self._call("read measured spec ids", read)

    def variants(self, system: str, stack_id: str, runtime: str) -> dict[str, int]:
        match = {"system": system, "stack_id": stack_id, "schema_version": SCHEMA_VERSION, "runtime": runtime}
        pipeline = [{"$match": match}, {"$group": {"_id": "$variant", "count": {"$sum": 1}}}]
        groups = self._call("count stored variants", lambda: list(self._results.aggregate(pipeline)))
        return {g["_id"]: int(g["count"]) for g in groups}

    def _present_among(self, system: str, stack_id: str, spec_ids: list[str], but_failed: bool = False) -> set[str]:
        """The ids among ``spec_ids`` with a current-schema record (``but_failed``: other than a failure)."""
        found: set[str] = set()
        for chunk in _chunks(spec_ids):
            query: dict[str, Any] = {
                "system": system,
                "stack_id": stack_id,
                "schema_version": SCHEMA_VERSION,
                "spec_id": {"$in": chunk},
            }
            if but_failed:
                query["outcome"] = {"$ne": Outcome.FAILED.value}
            docs = self._call("read measured spec ids", lambda q=query: list(self._results.find(q, {"spec_id": 1})))
            found.update(doc["spec_id"] for doc in docs)
        return found

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
        projection = {"_id": 0} if payload else {"_id": 0, "samples": 0, "kernel_samples": 0, "spec": 0}
        query: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
        for field, value in (
            ("system", system),
            ("stack_id", stack_id),
            ("runtime", runtime),
            ("kind", kind),
            ("outcome", outcome),
        ):
            if value is not None:
                query[field] = str(value)
        if batch_size is not None:
            query["batch_size"] = int(batch_size)
        queries = [query] if keys is None else [{**query, "key": {"$in": c}} for c in _chunks(sorted(set(keys)))]
        docs: list[dict[str, Any]] = []
        for q in queries:
            docs += self._call("read records", lambda q=q: list(self._results.find(q, projection)))
        found = [BenchmarkRecord.from_doc(doc) for doc in docs]
        found = [r for r in found if r.schema_version == SCHEMA_VERSION]
        found.sort(key=BenchmarkRecord.identity)
        return found

    def put_plans(self, system: str, stack_id: str, plans: Iterable[StoredPlan]) -> int:
        given = list(plans)
        if not given:
            return 0
        docs = {p.plan_id: json.loads(document_json({**p.to_doc(), "system": "", "stack_id": ""})) for p in given}
        rows = {}
        for p in given:  # the later of two same-identity plans wins
            identity = dict(zip(PLAN_IDENTITY_FIELDS, (system, stack_id, *p.identity()[2:]), strict=True))
            rows[tuple(identity.values())] = {
                **identity,
                "model": p.model,
                "plan_id": p.plan_id,
                "schema_version": p.schema_version,
            }
        # contents first: a plan row never names a document that is not there
        content = [UpdateOne({"_id": i}, {"$setOnInsert": {"doc": d}}, upsert=True) for i, d in docs.items()]
        self._call(f"write {len(content)} plan documents", lambda: self._plan_docs.bulk_write(content, ordered=False))
        ops = [ReplaceOne({f: row[f] for f in PLAN_IDENTITY_FIELDS}, row, upsert=True) for row in rows.values()]
        self._call(f"write {len(ops)} plans", lambda: self._plans.bulk_write(ops, ordered=False))
        return len(given)

    def plans(
        self, *, system: str | None = None, stack_id: str | None = None, model: str | None = None
    ) -> list[StoredPlan]:
        query: dict[str, Any] = {"schema_version": PLAN_SCHEMA_VERSION}
        for field, value in (("system", system), ("stack_id", stack_id), ("model", model)):
            if value is not None:
                query[field] = value
        rows = self._call("read plans", lambda: list(self._plans.find(query, {"_id": 0})))
        rows.sort(key=lambda r: tuple(r[f] for f in PLAN_IDENTITY_FIELDS))
        decoded: dict[str, StoredPlan] = {}
        for chunk in _chunks(sorted({r["plan_id"] for r in rows})):
            docs = self._call("read plan documents", lambda c=chunk: list(self._plan_docs.find({"_id": {"$in": c}})))
            for d in docs:
                try:
                    decoded[d["_id"]] = StoredPlan.from_doc(d["doc"])
                except StoreError as exc:
                    raise self._fail(f"the stored plan {d['_id']!r} cannot be read: {exc}") from None
        return [
            decoded[r["plan_id"]].placed(r["system"], r["stack_id"])
            for r in rows
            if r["plan_id"] in decoded and decoded[r["plan_id"]].schema_version == PLAN_SCHEMA_VERSION
        ]

    def model_names(self) -> list[NamedModel]:
        query = {"schema_version": PLAN_SCHEMA_VERSION}
        fields = {"_id": 0, "model": 1, "model_key": 1, "plan_id": 1}
        rows = self._call("read plans", lambda: list(self._plans.find(query, fields)))
        paths: dict[str, str] = {}
        for chunk in _chunks(sorted({r["plan_id"] for r in rows})):
            # whole documents: a projection into ``doc`` is not served alike by every MongoDB-compatible server
            docs = self._call("read plan documents", lambda c=chunk: list(self._plan_docs.find({"_id": {"$in": c}})))
            paths.update({d["_id"]: str(d.get("doc", {}).get("path") or "") for d in docs})
        found = {NamedModel(r["model"], r["model_key"], paths.get(r["plan_id"], "")) for r in rows}
        return sorted(found, key=lambda m: (m.name, m.model_key, m.path))

    def register_system(self, name: str, fingerprint: dict[str, Any]) -> None:
        now = self.now_iso()
        self._call(
            f"register system {name!r}",
            lambda: self._systems.update_one(
                {"_id": name},
                {
                    "$set": {"name": name, "fingerprint": fingerprint, "last_seen": now},
                    "$setOnInsert": {"first_seen": now},
                },
                upsert=True,
            ),
        )

    def register_stack(self, system: str, stack_id: str, stack: dict[str, Any]) -> bool:
        now = self.now_iso()
        result = self._call(
            f"register stack {stack_id!r} of {system!r}",
            lambda: self._stacks.update_one(
                {"system": system, "stack_id": stack_id},
                {"$set": {"last_seen": now}, "$setOnInsert": {"stack": stack, "first_seen": now}},
                upsert=True,
            ),
        )
        return result.upserted_id is not None

    def systems(self) -> list[dict[str, Any]]:
        docs = self._call("read systems", lambda: list(self._systems.find({})))
        rows = [
            {
                "name": d["_id"],
                "fingerprint": d.get("fingerprint", {}),
                "first_seen": d["first_seen"],
                "last_seen": d["last_seen"],
            }
            for d in docs
        ]
        return sorted(rows, key=lambda r: r["name"])

    def stacks(self, system: str | None = None) -> list[dict[str, Any]]:
        query = {} if system is None else {"system": system}
        docs = self._call("read stacks", lambda: list(self._stacks.find(query, {"_id": 0})))
        names = ("system", "stack_id", "stack", "first_seen", "last_seen")
        rows = [{n: d[n] for n in names} for d in docs]
        return sorted(rows, key=lambda r: (r["system"], r["first_seen"], r["stack_id"]))

    def summary(self) -> list[dict[str, Any]]:
        names = ("system", "stack_id", "runtime", "kind", "outcome")
        # One joined string as the group key, not {system: "$system", ...}: nx-27017 (the
        # test server) returns a compound group key unevaluated; MongoDB takes both alike.
        joined: list[Any] = []
        for name in names:
            joined += [f"${name}", _SEPARATOR]
        pipeline = [
            {"$match": {"schema_version": SCHEMA_VERSION}},
            {"$project": {"_id": 0, "group": {"$concat": joined[:-1]}}},
            {"$group": {"_id": "$group", "count": {"$sum": 1}}},
        ]
        groups = self._call("summarise records", lambda: list(self._results.aggregate(pipeline)))
        rows = [{**dict(zip(names, g["_id"].split(_SEPARATOR), strict=True)), "count": int(g["count"])} for g in groups]
        return sorted(rows, key=lambda r: tuple(r[n] for n in names))

    # -- leases ---------------------------------------------------------------------------

    def claim(
        self, system: str, stack_id: str, spec_ids: Iterable[str], owner: str, ttl_s: float, retry_failed: bool = False
    ) -> set[str]:
        wanted = self._lease_ids(spec_ids, owner, ttl_s)
        if not wanted:
            return set()
        self._call(  # expired leases are anyone's: drop them so the collection stays small
            "drop expired leases",
            lambda: self._leases.delete_many(
                {"system": system, "stack_id": stack_id, "expires_at": {"$lte": self.clock()}}
            ),
        )
        present = self._present_among(system, stack_id, wanted, retry_failed)
        candidates = [i for i in wanted if i not in present]
        held: set[str] = set()
        for chunk in _chunks(candidates):
            held |= self._call("claim leases", lambda c=chunk: self._claim_chunk(system, stack_id, c, owner, ttl_s))
        # A driver that measured an id, wrote its result and released its lease between our
        # first look and our claim: the id is measured, give it back.
        measured_meanwhile = self._present_among(system, stack_id, sorted(held), retry_failed)
        if measured_meanwhile:
            self.release(system, stack_id, measured_meanwhile, owner)
        return held - measured_meanwhile

    def _claim_chunk(self, system: str, stack_id: str, spec_ids: list[str], owner: str, ttl_s: float) -> set[str]:
        now = self.clock()
        mine_or_expired = [{"owner": owner}, {"expires_at": {"$lte": now}}]
        update = {"$set": {"owner": owner, "heartbeat_at": now, "expires_at": now + ttl_s}}
        # ``$and`` rather than the identity fields beside ``$or``: the same filter for MongoDB, and
        # the form that nx-27017 (the tests' server) also matches by identity in an update
        ops = [
            UpdateOne(
                {"$and": [{"system": system, "stack_id": stack_id, "spec_id": i}, {"$or": mine_or_expired}]},
                update,
                upsert=True,
            )
            for i in spec_ids
        ]
        try:
            self._leases.bulk_write(ops, ordered=False)
        except BulkWriteError as exc:
            errors = exc.details.get("writeErrors") or []
            if any(e.get("code") != _DUPLICATE_KEY for e in errors) or exc.details.get("writeConcernErrors"):
                raise
            # a duplicate key: the id's lease exists, unexpired and held by another owner
            return set(spec_ids) - {spec_ids[e["index"]] for e in errors}
        return set(spec_ids)

    def release(self, system: str, stack_id: str, spec_ids: Iterable[str], owner: str) -> None:
        for chunk in _chunks(self._lease_ids(spec_ids, owner)):
            query = {"system": system, "stack_id": stack_id, "owner": owner, "spec_id": {"$in": chunk}}
            self._call("release leases", lambda q=query: self._leases.delete_many(q))

    def heartbeat(self, owner: str, ttl_s: float) -> int:
        self._check_heartbeat(owner, ttl_s)

        def beat() -> int:
            now = self.clock()
            update = {"$set": {"heartbeat_at": now, "expires_at": now + ttl_s}}
            return self._leases.update_many({"owner": owner}, update).matched_count

        return self._call("renew leases", beat)

    def leases(self, system: str | None = None) -> list[dict[str, Any]]:
        query: dict[str, Any] = {"expires_at": {"$gt": self.clock()}}
        if system is not None:
            query["system"] = system
        docs = self._call("read leases", lambda: list(self._leases.find(query, {"_id": 0})))
        names = ("system", "stack_id", "spec_id", "owner", "expires_at")
        rows = [{**{n: d[n] for n in names}, "heartbeat_at": d.get("heartbeat_at")} for d in docs]
        return sorted(rows, key=lambda r: (r["system"], r["stack_id"], r["spec_id"]))

    def close(self) -> None:
        if self._owns_client and getattr(self, "client", None) is not None:
            self.client.close()
