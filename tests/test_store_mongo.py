"""The MongoDB store: the store contract over the wire, MongoDB specifics, and scripted faults.

The contract runs against an nx-27017 server started for the session (``nx_mongodb_uri``)
and, when ``BENANZA_TEST_MONGODB_URI`` names one, against a real MongoDB. Faults a real
server cannot be made to produce on demand (a primary stepping down, a dropped connection,
a duplicate-key race) are scripted with mockupdb.
"""

from __future__ import annotations

import itertools
import socket
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from test_store import STACK, SYSTEM, StoreContract, record_for

from benanza.bench.records import IDENTITY_FIELDS, SCHEMA_VERSION
from benanza.errors import StoreError
from benanza.store import open_store, store_schemes

pymongo = pytest.importorskip("pymongo")
from benanza.store.mongo import DB_SCHEMA_VERSION, MongoStore, database_of_uri, mask_uri  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def with_database(base: str, name: str) -> str:
    """``base`` (a server URI, with or without a database and options) naming database ``name``."""
    scheme, _, rest = base.partition("://")
    rest, _, query = rest.partition("?")
    hosts = rest.partition("/")[0]
    return f"{scheme}://{hosts}/{name}" + (f"?{query}" if query else "")


@pytest.fixture
def fresh_database(request: pytest.FixtureRequest) -> Iterator[Any]:
    """``fresh_database(base_uri)`` -> the URI of a new database on that server, dropped afterwards."""
    made: list[str] = []

    def make(base: str) -> str:
        uri = with_database(base, f"benanza_test_{uuid.uuid4().hex[:12]}")
        made.append(uri)
        return uri

    yield make
    for uri in made:
        with pymongo.MongoClient(uri, serverSelectionTimeoutMS=5_000) as client:
            client.drop_database(database_of_uri(uri))


class TestMongoStore(StoreContract):
    """The contract on nx-27017: functional only, so with fewer records (it is slow)."""

    many_keys = 150
    writers, own, shared = 3, 40, 10
    lease_ids = 60

    @pytest.fixture
    def store_uri(self, nx_mongodb_uri: str, fresh_database: Any) -> str:
        return fresh_database(nx_mongodb_uri)


class TestRealMongoStore(StoreContract):
    """The contract, at full size, on the MongoDB that ``BENANZA_TEST_MONGODB_URI`` names."""

    @pytest.fixture
    def store_uri(self, real_mongodb_uri: str, fresh_database: Any) -> str:
        return fresh_database(real_mongodb_uri)


# -- MongoDB specifics (on nx-27017) ---------------------------------------------------------------


@pytest.fixture
def mongo_uri(nx_mongodb_uri: str, fresh_database: Any) -> str:
    return fresh_database(nx_mongodb_uri)


def test_uri_helpers() -> None:
    assert mask_uri("mongodb://bench:s3cr%40t@db:27017/perf?tls=true") == "mongodb://bench:***@db:27017/perf?tls=true"
    assert mask_uri("mongodb+srv://u:p@cluster0.example.net/") == "mongodb+srv://u:***@cluster0.example.net/"
    assert mask_uri("mongodb://db:27017/perf") == "mongodb://db:27017/perf"
    assert database_of_uri("mongodb://u:p@a:1,b:2/perf?replicaSet=rs") == "perf"
    assert database_of_uri("mongodb://a:1/?tls=true") == database_of_uri("mongodb://a") == "benanza"
    assert with_database("mongodb://u:p@a:1/old?authSource=admin", "new") == "mongodb://u:p@a:1/new?authSource=admin"
    assert "mongodb" in store_schemes() and "mongodb+srv" in store_schemes()


def test_documents_and_indexes(mongo_uri: str) -> None:
    with open_store(mongo_uri) as store:
        assert isinstance(store, MongoStore) and store.transactional_upsert is False
        store.upsert([record_for(1), record_for(2)])
        store.register_system(SYSTEM, {"cpu_model": "A"})
    with open_store(mongo_uri, create=False):  # opening again: indexes exist already, nothing fails
        pass
    with pymongo.MongoClient(mongo_uri) as client:
        db = client[database_of_uri(mongo_uri)]
        docs = list(db.results.find({}, {"_id": 0}))
        assert sorted(d["key"] for d in docs) == ["key0000001", "key0000002"]
        assert all(d["schema_version"] == SCHEMA_VERSION and d == record_for(int(d["key"][3:])).to_doc() for d in docs)
        # nx-27017 renames indexes, so they are compared by their keys
        indexes = {tuple(ix["key"]): bool(ix.get("unique")) for ix in db.results.list_indexes()}
        assert indexes[IDENTITY_FIELDS] is True
        assert indexes[("system", "stack_id", "schema_version", "spec_id")] is False
        lease_indexes = {tuple(ix["key"]): bool(ix.get("unique")) for ix in db.leases.list_indexes()}
        assert lease_indexes[("system", "stack_id", "spec_id")] is True
        assert lease_indexes[("owner",)] is False  # serves heartbeats
        meta = db.meta.find_one({"_id": "benanza"})
        assert meta["db_schema_version"] == DB_SCHEMA_VERSION and meta["created_at"]


def test_unique_identity_is_enforced_by_the_database(mongo_uri: str) -> None:
    with open_store(mongo_uri) as store:
        store.upsert([record_for(1)])
    with pymongo.MongoClient(mongo_uri) as client:
        with pytest.raises(pymongo.errors.DuplicateKeyError):
            client[database_of_uri(mongo_uri)].results.insert_one(record_for(1, value=5.0).to_doc())


def test_missing_database_without_create(mongo_uri: str) -> None:
    with pytest.raises(StoreError, match="no benanza database") as info:
        open_store(mongo_uri, create=False)
    assert mongo_uri in str(info.value)
    with pymongo.MongoClient(mongo_uri) as client:
        assert client[database_of_uri(mongo_uri)].list_collection_names() == []


def test_another_programs_database_is_refused_and_left_unchanged(mongo_uri: str) -> None:
    with pymongo.MongoClient(mongo_uri) as client:
        db = client[database_of_uri(mongo_uri)]
        db.customers.insert_one({"name": "ada"})
        with pytest.raises(StoreError, match=r"another program \(collections: customers\)"):
            open_store(mongo_uri)
        assert db.list_collection_names() == ["customers"]


def test_newer_layout_is_refused(mongo_uri: str) -> None:
    with open_store(mongo_uri) as store:
        store.upsert([record_for(1)])
    with pymongo.MongoClient(mongo_uri) as client:
        client[database_of_uri(mongo_uri)].meta.update_one(
            {"_id": "benanza"}, {"$set": {"db_schema_version": DB_SCHEMA_VERSION + 1}}
        )
    with pytest.raises(StoreError, match="newer than this benanza supports"):
        open_store(mongo_uri)


def test_server_selection_timeout_is_short_unless_the_uri_sets_it(mongo_uri: str) -> None:
    with MongoStore(mongo_uri) as store:
        assert store.client.options.server_selection_timeout == 5.0
    with MongoStore(f"{mongo_uri}?serverSelectionTimeoutMS=1500&appName=mine") as store:
        assert store.client.options.server_selection_timeout == 1.5


def test_an_injected_client_is_used_and_left_open(mongo_uri: str) -> None:
    with pymongo.MongoClient(mongo_uri) as client:
        with MongoStore(mongo_uri, client=client) as store:
            store.upsert([record_for(1)])
        assert client[database_of_uri(mongo_uri)].results.count_documents({}) == 1  # still open


@pytest.mark.timeout(30)  # a hang guard: the URI's 500 ms server selection timeout is honoured, not pymongo's 30 s
def test_unreachable_server_is_one_quick_line_with_the_password_masked() -> None:
    uri = f"mongodb://bench:s3cret@127.0.0.1:{free_port()}/benanza?serverSelectionTimeoutMS=500"
    with pytest.raises(StoreError) as info:
        open_store(uri)
    message = str(info.value)
    assert message.startswith("mongodb://bench:***@127.0.0.1:") and "s3cret" not in message
    assert "cannot reach the database server" in message and "\n" not in message and len(message) < 400


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("mongodb://127.0.0.1:notaport/benanza", "not a usable MongoDB URI"),
        ("mongodb://127.0.0.1/bad.name", "bad database name"),
        ("mongodb://127.0.0.1/benanza?tls=maybe", "not a usable MongoDB URI: The value of tls must be"),
        ("mongodb://127.0.0.1/benanza?serverSelectionTimeout=5", "not a usable MongoDB URI: Unknown option"),
    ],
)
@pytest.mark.timeout(20)  # a hang guard: a bad URI is refused before any server is tried
def test_bad_uri_is_one_line(uri: str, reason: str) -> None:
    with pytest.raises(StoreError, match=reason) as info:
        open_store(uri)
    message = str(info.value)
    assert "\n" not in message and message.startswith(mask_uri(uri))


# -- faults scripted with mockupdb -----------------------------------------------------------------


@pytest.fixture
def mock_server() -> Iterator[Any]:
    """A mockupdb server that answers what opening a store asks; tests script the writes."""
    mockupdb = pytest.importorskip("mockupdb")
    server = mockupdb.MockupDB(auto_ismaster={"maxWireVersion": 21, "minWireVersion": 0, "isWritablePrimary": True})
    server.run()
    meta = {"_id": "benanza", "db_schema_version": DB_SCHEMA_VERSION, "created_at": "2026-11-22T10:00:00+00:00"}

    def opening(request: Any) -> bool | None:
        if request.command_name in ("ping", "createIndexes"):
            return request.ok()
        if request.command_name == "find" and request.doc.get("find") == "meta":
            return request.ok(cursor={"id": 0, "ns": "benanza.meta", "firstBatch": [meta]})
        if request.command_name == "find" and request.doc.get("find") == "results":
            # upsert first reads the ok records it replaces (kept as repeats): none are stored here
            return request.ok(cursor={"id": 0, "ns": "benanza.results", "firstBatch": []})
        return None  # left for the test

    server.autoresponds(opening)
    yield server
    server.stop()


def _updates(request: Any) -> list[dict[str, Any]]:
    assert request.command_name == "update" and request.doc["update"] == "results"
    return list(request.doc["updates"])


def test_transient_errors_are_retried_until_the_write_succeeds(mock_server: Any) -> None:
    records = [record_for(1), record_for(2)]
    with MongoStore(f"{mock_server.uri}/benanza", retries=3, backoff_s=0.01) as store, ThreadPoolExecutor(1) as pool:
        pending = pool.submit(store.upsert, records)
        seen = []
        request = mock_server.receives(timeout=10)
        seen.append(_updates(request))
        request.replies({"ok": 0, "errmsg": "not primary", "code": 10107})  # the primary stepped down
        request = mock_server.receives(timeout=10)
        seen.append(_updates(request))
        request.hangup()  # the connection drops
        request = mock_server.receives(timeout=10)
        seen.append(_updates(request))
        request.replies(
            {"ok": 1, "n": 1, "nModified": 0, "writeErrors": [{"index": 0, "code": 11000, "errmsg": "E11000 dup key"}]}
        )
        request = mock_server.receives(timeout=10)
        seen.append(_updates(request))
        request.replies({"ok": 1, "n": 2, "nModified": 0, "upserted": [{"index": 0, "_id": 1}, {"index": 1, "_id": 2}]})
        assert pending.result(timeout=10) == 2
    # every attempt sent the same idempotent replace-by-identity of both records
    assert all(attempt == seen[0] for attempt in seen) and len(seen[0]) == 2
    for update, record in zip(seen[0], records, strict=True):
        assert update["upsert"] is True and update["u"] == record.to_doc()
        assert update["q"] == dict(zip(IDENTITY_FIELDS, record.identity(), strict=True))


def _updates_answered_not_primary(attempts: list[float]) -> Any:
    """A mockupdb responder: every update fails as a step-down would; the times are kept in ``attempts``."""

    def not_primary(request: Any) -> bool | None:
        if request.command_name != "update":
            return None
        attempts.append(time.monotonic())
        return request.replies({"ok": 0, "errmsg": "not primary", "code": 10107})

    return not_primary


def test_a_persistent_outage_is_one_store_error_naming_the_uri(mock_server: Any) -> None:
    attempts: list[float] = []
    mock_server.autoresponds(_updates_answered_not_primary(attempts))
    uri = f"{mock_server.uri}/benanza"
    with MongoStore(uri, retries=3, backoff_s=0.05) as store:
        with pytest.raises(StoreError) as info:
            store.upsert([record_for(1)])
    message = str(info.value)
    assert message.startswith(f"{uri}: cannot write 1 records after 4 attempts: ") and "not primary" in message
    assert "\n" not in message and len(attempts) == 4
    waits = [b - a for a, b in itertools.pairwise(attempts)]
    assert waits[0] >= 0.05 and waits[2] >= 0.2  # backoff doubles: 0.05, 0.1, 0.2 s


def test_a_permanent_error_is_not_retried(mock_server: Any) -> None:
    attempts = []

    def unauthorized(request: Any) -> bool | None:
        if request.command_name != "update":
            return None
        attempts.append(request)
        return request.replies({"ok": 0, "errmsg": "not authorized on benanza to execute command", "code": 13})

    mock_server.autoresponds(unauthorized)
    with MongoStore(f"{mock_server.uri}/benanza", retries=3, backoff_s=0.01) as store:
        with pytest.raises(StoreError, match="cannot write 1 records: not authorized"):
            store.upsert([record_for(1)])
    assert len(attempts) == 1


def test_a_lease_held_elsewhere_is_a_lost_claim_not_an_error(mock_server: Any) -> None:
    """A duplicate key on a lease upsert means another owner holds it: that id is not claimed."""
    ids = [record_for(i).spec_id for i in range(3)]

    def leases(request: Any) -> bool | None:
        if request.command_name == "find" and request.doc.get("find") == "results":
            return request.ok(cursor={"id": 0, "ns": "benanza.results", "firstBatch": []})
        if request.command_name == "delete":
            return request.ok(n=0)
        if request.command_name == "update" and request.doc["update"] == "leases":
            return request.ok(
                n=2, nModified=0, writeErrors=[{"index": 1, "code": 11000, "errmsg": "E11000 duplicate key"}]
            )
        return None

    mock_server.autoresponds(leases)
    with MongoStore(f"{mock_server.uri}/benanza", retries=3, backoff_s=0.01) as store:
        assert store.claim(SYSTEM, STACK, ids, "driver-a", ttl_s=60) == {ids[0], ids[2]}


def test_retries_stop_at_the_retry_window(mock_server: Any) -> None:
    attempts: list[float] = []
    mock_server.autoresponds(_updates_answered_not_primary(attempts))
    with MongoStore(f"{mock_server.uri}/benanza", retries=50, backoff_s=0.05, retry_window_s=0.3) as store:
        start = time.monotonic()
        with pytest.raises(StoreError, match="not primary"):
            store.upsert([record_for(1)])
        ended = time.monotonic()
    assert 1 <= len(attempts) <= 4  # the 0.3 s window, not the 50 retries, ended it
    # a retry starts wherever the window leaves room for its wait (0.05 s): an attempt alone took the window's rest
    # (a busy runner's first attempt, connection included, can), never less
    assert len(attempts) >= 2 or ended - start >= 0.3 - 0.05
