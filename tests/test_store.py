"""The performance database: records, the Store contract (every backend), SQLite specifics, `db ls`.

``StoreContract`` holds the backend-neutral tests. A backend reuses them by subclassing it
with a ``store_uri`` fixture (``tests/test_store_mongo.py`` does so for MongoDB), e.g.::

    from test_store import StoreContract

    class TestMongoStore(StoreContract):
        many_keys = 150  # sizes are class attributes: a slow test server lowers them

        @pytest.fixture
        def store_uri(self, nx_mongodb_uri):
            yield f"{nx_mongodb_uri}/benanza_test_{uuid.uuid4().hex}"  # and drop it afterwards

The URI must name a fresh, empty database that other processes can open too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import multiprocessing
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from benanza.bench.plans import PLAN_SCHEMA_VERSION, PlanLayer, StoredPlan
from benanza.bench.spec import BenchmarkSpec, SpecKind, canonical_variant, runtime_defaults_key
from benanza.cli.db import app as db_app
from benanza.errors import RegistryError, StoreError, UsageError
from benanza.model.names import NamedModel
from benanza.model.network import Network, NetworkTensor
from benanza.store import (
    SCHEMA_VERSION,
    BenchmarkRecord,
    Outcome,
    Store,
    StoreURI,
    make_record,
    open_store,
    store_schemes,
)
from benanza.store.sqlite import DB_SCHEMA_VERSION, SqliteStore, path_of_uri

SYSTEM = "sys-a"
STACK = "stack0000000001"

# -- record builders (module level: spawned worker processes import them) ------------------


def spec_for(
    i: int,
    *,
    runtime: str = "onnxruntime",
    kind: SpecKind = SpecKind.LAYER,
    batch: int = 1,
    threads: int = 1,
    variant: dict[str, object] | None = None,
) -> BenchmarkSpec:
    return BenchmarkSpec(
        kind=kind,
        key=f"key{i:07d}",
        batch_size=batch,
        dtype="float32",
        runtime=runtime,
        variant=canonical_variant(variant if variant is not None else {"threads": threads, "opt": "all"}),
        label=f"Conv #{i}",
        network=Network((NetworkTensor((batch, 3, 8, 8), "float32"),), (), (), 1),
    )


def record_for(
    i: int,
    *,
    system: str = SYSTEM,
    stack_id: str = STACK,
    outcome: Outcome = Outcome.OK,
    value: float = 1e-3,
    writer: str = "main",
    **spec_options: object,
) -> BenchmarkRecord:
    ok = outcome is Outcome.OK
    return make_record(
        spec_for(i, **spec_options),  # type: ignore[arg-type]
        system=system,
        stack_id=stack_id,
        outcome=outcome,
        reason=None if ok else f"{outcome} because #{i}",
        samples=[value, value * 1.5, value / 3] if ok else [],
        stats={"median": value, "n": 3} if ok else None,
        kernel_samples=[value / 2] if ok else [],
        settings={"writer": writer, "intra_op_num_threads": 1},
        measured_at="2026-11-22T10:00:00.000000+00:00",  # fixed, so equal calls give equal records
        host="bench-host",
        duration_s=0.25,
    )


def _write_worker(uri: str, worker: int, own: int, shared: int, batch: int, barrier: object) -> None:
    """One writer process: its own records plus identities every writer also writes."""
    records = [record_for((worker + 1) * 100_000 + i, writer=f"w{worker}") for i in range(own)]
    records += [record_for(i, value=float(worker + 1), writer=f"w{worker}") for i in range(shared)]
    with open_store(uri) as store:
        barrier.wait()  # type: ignore[attr-defined]
        for start in range(0, len(records), batch):
            assert store.upsert(records[start : start + batch]) == len(records[start : start + batch])


def _claim_worker(uri: str, worker: int, ids: list[str], barrier: object, results: object) -> None:
    """One driver process: claims every id in chunks, starting at its own offset; reports what it got."""
    with open_store(uri) as store:
        held = _claim_in_chunks(store, worker, ids, barrier)
    results.put((worker, sorted(held)))  # type: ignore[attr-defined]


def _claim_in_chunks(store: Store, worker: int, ids: list[str], barrier: object, workers: int = 4) -> set[str]:
    start = worker * len(ids) // workers  # each driver walks the same ids from another place
    order = ids[start:] + ids[:start]
    barrier.wait()  # type: ignore[attr-defined]
    held: set[str] = set()
    for i in range(0, len(order), 10):
        held |= store.claim(SYSTEM, STACK, order[i : i + 10], f"driver-{worker}", ttl_s=600)
    return held


def plan_for(model: str = "tiny", *, variant: str = "opt=all,threads=1", grans: tuple[int, ...] = (1,)) -> StoredPlan:
    """A three-layer chain (Conv -> Relu -> Add) planned as two units, as a pipeline would store it."""
    shape = (1, 3, 8, 8)
    layers = tuple(
        PlanLayer(f"{op.lower()}{i}", op, "", f"{model}-L{i}", ((shape, "float32"),), ((shape, "float32"),), 100 * i)
        for i, op in enumerate(("Conv", "Relu", "Add"))
    )
    return StoredPlan(
        model=model,
        path=f"/models/{model}.onnx",
        model_key=f"{model}-model",
        batch_size=1,
        dtype="float32",
        shapes={"x": shape},
        runtime="onnxruntime",
        variant=variant,
        layers=layers,
        edges=((0, 1), (1, 2)),
        unsupported=(),
        units=((0, 1), (2,)),
        unit_keys=(f"{model}-U0", f"{model}-L2"),
        sequences={g: ((0, 1, 2),) for g in grans},
        sequence_keys={g: (f"{model}-S{g}",) for g in grans},
        notes=("a note",),
    )


# -- records ---------------------------------------------------------------------------------


def test_record_round_trip_through_json() -> None:
    rec = record_for(7, kind=SpecKind.GROUP, batch=8)
    doc = json.loads(json.dumps(rec.to_doc()))
    back = BenchmarkRecord.from_doc(doc)
    assert back == rec
    assert back.identity() == (SYSTEM, STACK, "onnxruntime", "group", "key0000007", 8, "float32", "opt=all,threads=1")
    assert doc["schema_version"] == SCHEMA_VERSION
    assert doc["samples"] == [1e-3, 1.5e-3, 1e-3 / 3] and isinstance(doc["batch_size"], int)
    assert doc["spec"]["spec_id"] == rec.spec_id == spec_for(7, kind=SpecKind.GROUP, batch=8).spec_id
    assert doc["outcome"] == "ok" and doc["variant"] == "opt=all,threads=1"


def test_record_values_are_normalised_and_hashable() -> None:
    rec = dataclasses.replace(record_for(1), samples=[1, 2], kind="model", outcome="ok")  # type: ignore[arg-type]
    assert rec.samples == (1.0, 2.0) and all(isinstance(s, float) for s in rec.samples)
    assert rec.outcome is Outcome.OK and rec.kind == "model"
    assert hash(rec) == hash(dataclasses.replace(rec))


def test_record_outcomes_need_a_reason_and_kinds_are_checked() -> None:
    with pytest.raises(ValueError, match="reason"):
        dataclasses.replace(record_for(1), outcome=Outcome.SKIPPED, reason=None)
    with pytest.raises(ValueError):
        dataclasses.replace(record_for(1), outcome="lost")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        dataclasses.replace(record_for(1), kind="graph")
    skipped = record_for(2, outcome=Outcome.SKIPPED)
    assert skipped.reason == "skipped because #2" and skipped.samples == () and skipped.stats is None


def test_from_doc_names_a_missing_field() -> None:
    doc = record_for(1).to_doc()
    del doc["stack_id"]
    with pytest.raises(StoreError, match="stack_id"):
        BenchmarkRecord.from_doc(doc)


# -- the contract every store keeps ----------------------------------------------------------


class StoreContract:
    """Backend-neutral tests; a subclass provides a ``store_uri`` fixture naming a fresh database.

    The sizes below are class attributes so that a backend whose test server is slow can lower them.
    """

    many_keys = 1_200  # records for test_records_by_many_keys
    writers, own, shared = 4, 300, 50  # concurrent writers, records each writes alone, records all write
    lease_ids = 400  # ids that concurrent drivers claim

    @pytest.fixture
    def clock(self) -> ManualClock:
        return ManualClock()

    @pytest.fixture
    def store(self, store_uri: str, clock: ManualClock) -> Iterator[Store]:
        with open_store(store_uri, clock=clock) as store:
            yield store

    def test_is_a_store(self, store: Store) -> None:
        assert isinstance(store, Store) and isinstance(store.transactional_upsert, bool)

    def test_upsert_is_idempotent_and_the_last_write_wins(self, store: Store) -> None:
        first = [record_for(i) for i in range(20)]
        assert store.upsert(first) == 20
        assert store.upsert(first) == 20
        assert store.records() == sorted(first, key=BenchmarkRecord.identity)
        updated = [record_for(i, value=2e-3, writer="retry") for i in range(10)]
        updated += [record_for(i, outcome=Outcome.FAILED) for i in range(10, 12)]
        assert store.upsert(iter(updated)) == 12
        stored = {r.identity(): r for r in store.records()}
        assert len(stored) == 20
        for rec in updated:
            assert stored[rec.identity()] == rec
        assert stored[record_for(15).identity()] == record_for(15)
        assert store.upsert([]) == 0

    def test_a_batch_is_all_or_nothing(self, store: Store) -> None:
        bad = dataclasses.replace(record_for(99), settings={"not json": object()})
        with pytest.raises((TypeError, StoreError)):
            store.upsert([record_for(1), record_for(2), bad])
        assert store.records() == []

    def test_a_float_json_cannot_spell_is_stored_as_null_and_the_store_stays_readable(self, store: Store) -> None:
        odd = dataclasses.replace(record_for(3), settings={"share": math.inf, "nested": [math.nan, 1.5, -math.inf]})
        assert store.upsert([record_for(1), odd]) == 2
        stored = {r.spec_id: r for r in store.records()}
        assert stored[odd.spec_id].settings == {"share": None, "nested": [None, 1.5, None]}
        assert stored[record_for(1).spec_id] == record_for(1)

    def test_same_identity_twice_in_one_batch_keeps_the_later(self, store: Store) -> None:
        store.upsert([record_for(1, value=1.0), record_for(1, value=2.0)])
        [only] = store.records()
        assert only.samples[0] == 2.0

    def test_present_spec_ids(self, store: Store) -> None:
        mine = [record_for(i) for i in range(5)] + [record_for(5, outcome=Outcome.SKIPPED)]
        mine += [record_for(6, outcome=Outcome.FAILED), record_for(7, runtime="null", batch=4)]
        store.upsert(mine)
        store.upsert([record_for(100, stack_id="other-stack"), record_for(101, system="sys-b")])
        assert store.present_spec_ids(SYSTEM, STACK) == {r.spec_id for r in mine}
        assert store.present_spec_ids(SYSTEM, "other-stack") == {record_for(100).spec_id}
        assert store.present_spec_ids("sys-b", STACK) == {record_for(101).spec_id}
        assert store.present_spec_ids("nowhere", STACK) == set()

    def test_records_filters(self, store: Store) -> None:
        recs = [
            record_for(1),
            record_for(2, batch=8),
            record_for(3, runtime="null"),
            record_for(4, kind=SpecKind.MODEL),
            record_for(5, outcome=Outcome.SKIPPED),
            record_for(1, stack_id="stack-2"),
            record_for(1, system="sys-b"),
        ]
        store.upsert(reversed(recs))

        def keys(**filters: object) -> list[tuple]:
            return [r.identity() for r in store.records(**filters)]  # type: ignore[arg-type]

        assert keys() == sorted(r.identity() for r in recs)
        assert len(keys(system=SYSTEM)) == 6 and keys(system="sys-b") == [recs[6].identity()]
        assert keys(stack_id="stack-2") == [recs[5].identity()]
        assert keys(runtime="null") == [recs[2].identity()]
        assert keys(kind="model") == [recs[3].identity()]
        assert keys(kind=SpecKind.MODEL) == [recs[3].identity()]
        assert keys(batch_size=8) == [recs[1].identity()]
        assert keys(outcome="skipped") == [recs[4].identity()]
        assert keys(
            outcome=Outcome.OK, system=SYSTEM, stack_id=STACK, runtime="onnxruntime", kind="layer", batch_size=1
        ) == [recs[0].identity()]
        assert len(keys(keys=["key0000001"])) == 3
        assert keys(keys=["key0000001"], system=SYSTEM, stack_id=STACK) == [recs[0].identity()]
        assert keys(keys=[]) == [] and keys(keys=["nope"]) == []

    def test_records_by_many_keys(self, store: Store) -> None:
        store.upsert(record_for(i) for i in range(self.many_keys))
        wanted = [f"key{i:07d}" for i in range(0, self.many_keys, 2)] + ["missing"]
        found = store.records(keys=iter(wanted))
        assert [r.key for r in found] == sorted(wanted[:-1])

    def test_other_schema_versions_are_ignored(self, store: Store) -> None:
        store.upsert([record_for(1), record_for(2)])
        store.upsert([dataclasses.replace(record_for(2), schema_version=SCHEMA_VERSION - 1)])
        store.upsert([dataclasses.replace(record_for(3), schema_version=SCHEMA_VERSION + 1)])
        assert store.records() == [record_for(1)]
        assert store.present_spec_ids(SYSTEM, STACK) == {record_for(1).spec_id}
        assert sum(row["count"] for row in store.summary()) == 1
        store.upsert([record_for(2)])  # a current record replaces the outdated one
        assert len(store.records()) == 2

    def test_variants_count_the_current_records_of_each_variant(self, store: Store) -> None:
        store.upsert([record_for(1), record_for(2), record_for(3, threads=2), record_for(4, runtime="cudnn")])
        store.upsert([record_for(5, system="sys-b"), record_for(6, stack_id="stack0000000002")])
        store.upsert([dataclasses.replace(record_for(7, threads=3), schema_version=SCHEMA_VERSION - 1)])
        assert store.variants(SYSTEM, STACK, "onnxruntime") == {"opt=all,threads=1": 2, "opt=all,threads=2": 1}
        assert store.variants(SYSTEM, STACK, "cudnn") == {"opt=all,threads=1": 1}
        assert store.variants("sys-c", STACK, "onnxruntime") == {}

    def test_records_without_payload_keep_the_statistics(self, store: Store) -> None:
        store.upsert([record_for(i) for i in range(3)])
        slim = store.records(payload=False)
        assert [r.identity() for r in slim] == [r.identity() for r in store.records()]
        assert all(r.samples == () and r.kernel_samples == () and r.spec == {} for r in slim)
        assert [r.stats for r in slim] == [r.stats for r in store.records()]
        assert store.records(keys=["key0000001"], payload=False)[0] == dataclasses.replace(
            record_for(1), samples=(), kernel_samples=(), spec={}
        )

    def test_plans_round_trip_and_replace_by_identity(self, store: Store) -> None:
        assert store.plans() == []
        assert store.put_plans(SYSTEM, STACK, []) == 0
        tiny, other = plan_for("tiny"), plan_for("other", variant="opt=basic,threads=1")
        assert store.put_plans(SYSTEM, STACK, [tiny, other]) == 2
        assert store.put_plans("sys-b", STACK, [tiny]) == 1
        found = store.plans()
        # in identity order: system, stack, runtime, variant ("opt=all" before "opt=basic"), ...
        assert [(p.system, p.model) for p in found] == [(SYSTEM, "tiny"), (SYSTEM, "other"), ("sys-b", "tiny")]
        assert found[0] == tiny.placed(SYSTEM, STACK) and found[0].to_doc() == tiny.placed(SYSTEM, STACK).to_doc()
        assert found[0].graph.layers[2].input_shapes == [[1, 3, 8, 8]] and found[0].graph.predecessors(2) == (1,)
        assert [p.model for p in store.plans(system="sys-b")] == ["tiny"]
        assert [p.system for p in store.plans(model="tiny")] == [SYSTEM, "sys-b"]
        assert store.plans(stack_id="another") == [] and store.plans(model="absent") == []
        # the same identity again replaces it; other granularities are another plan
        renoted = dataclasses.replace(tiny, notes=("another note",))
        store.put_plans(SYSTEM, STACK, [renoted, plan_for("tiny", grans=(1, 3))])
        mine = store.plans(system=SYSTEM, model="tiny")
        assert [p.granularities for p in mine] == [(1,), (1, 3)] and mine[0].notes == ("another note",)
        assert store.plans(system="sys-b")[0].notes == ("a note",)  # shared content was not changed under it

    def test_model_names_are_the_stored_models_with_their_keys_and_files(self, store: Store) -> None:
        assert store.model_names() == []
        tiny, other = plan_for("tiny"), plan_for("other", variant="opt=basic,threads=1")
        store.put_plans(SYSTEM, STACK, [tiny, other, plan_for("tiny", grans=(1, 3))])
        store.put_plans("sys-b", STACK, [tiny])
        old = dataclasses.replace(plan_for("old"), schema_version=PLAN_SCHEMA_VERSION + 1)
        store.put_plans(SYSTEM, STACK, [old])
        # one per (name, key, file), whatever systems, stacks and plans hold it; another schema's not
        assert store.model_names() == [
            NamedModel("other", "other-model", "/models/other.onnx"),
            NamedModel("tiny", "tiny-model", "/models/tiny.onnx"),
        ]

    def test_plans_of_another_schema_version_are_ignored(self, store: Store) -> None:
        store.put_plans(SYSTEM, STACK, [dataclasses.replace(plan_for("old"), schema_version=PLAN_SCHEMA_VERSION + 1)])
        store.put_plans(SYSTEM, STACK, [plan_for("new")])
        assert [p.model for p in store.plans()] == ["new"]

    def test_register_system(self, store: Store) -> None:
        store.register_system("sys-b", {"cpu_model": "B", "logical_cores": 4})
        store.register_system("sys-a", {"cpu_model": "A", "logical_cores": 2})
        store.register_system("sys-a", {"cpu_model": "A", "logical_cores": 8})
        systems = store.systems()
        assert [s["name"] for s in systems] == ["sys-a", "sys-b"]
        assert systems[0]["fingerprint"] == {"cpu_model": "A", "logical_cores": 8}
        assert systems[0]["first_seen"] <= systems[0]["last_seen"]

    def test_register_stack_is_new_once_per_system(self, store: Store, clock: ManualClock) -> None:
        stack = {"python": {"version": "3.11.7"}, "onnxruntime": "1.32.0"}
        assert store.register_stack(SYSTEM, "s1", stack) is True
        [before] = store.stacks()
        clock.advance(0.002)
        assert store.register_stack(SYSTEM, "s1", stack) is False
        assert store.register_stack("sys-b", "s1", stack) is True
        assert store.register_stack(SYSTEM, "s2", {**stack, "onnxruntime": "1.33.0"}) is True
        after = next(s for s in store.stacks() if (s["system"], s["stack_id"]) == (SYSTEM, "s1"))
        assert after["stack"] == stack
        assert after["first_seen"] == before["first_seen"] and after["last_seen"] > before["last_seen"]
        assert [s["stack_id"] for s in store.stacks(SYSTEM)] == ["s1", "s2"]
        assert [s["system"] for s in store.stacks("sys-b")] == ["sys-b"]
        assert len(store.stacks()) == 3 and store.stacks("nowhere") == []

    def test_summary_counts(self, store: Store) -> None:
        store.upsert([record_for(i) for i in range(3)] + [record_for(3, outcome=Outcome.FAILED)])
        store.upsert([record_for(i, runtime="null") for i in range(2)] + [record_for(9, stack_id="s2")])
        rows = {
            (r["system"], r["stack_id"], r["runtime"], r["kind"], r["outcome"]): r["count"] for r in store.summary()
        }
        assert rows == {
            (SYSTEM, STACK, "onnxruntime", "layer", "ok"): 3,
            (SYSTEM, STACK, "onnxruntime", "layer", "failed"): 1,
            (SYSTEM, STACK, "null", "layer", "ok"): 2,
            (SYSTEM, "s2", "onnxruntime", "layer", "ok"): 1,
        }

    def test_concurrent_processes_lose_nothing(self, store: Store, store_uri: str) -> None:
        writers, own, shared = self.writers, self.own, self.shared
        ctx = multiprocessing.get_context("spawn")
        barrier = ctx.Barrier(writers)
        procs = [
            ctx.Process(target=_write_worker, args=(store_uri, w, own, shared, 25, barrier)) for w in range(writers)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=120)
        assert [p.exitcode for p in procs] == [0] * writers
        self._check_concurrent_writes(store, writers, own, shared)

    def test_concurrent_threads_lose_nothing(self, store: Store) -> None:
        writers, own, shared = self.writers, self.own, self.shared
        barrier = threading.Barrier(writers)
        errors: list[BaseException] = []

        def write(worker: int) -> None:
            try:
                records = [record_for((worker + 1) * 100_000 + i, writer=f"w{worker}") for i in range(own)]
                records += [record_for(i, value=float(worker + 1), writer=f"w{worker}") for i in range(shared)]
                barrier.wait()
                for start in range(0, len(records), 25):
                    store.upsert(records[start : start + 25])
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert errors == []
        self._check_concurrent_writes(store, writers, own, shared)

    @staticmethod
    def _check_concurrent_writes(store: Store, writers: int, own: int, shared: int) -> None:
        records = store.records(system=SYSTEM, stack_id=STACK)
        assert len(records) == writers * own + shared
        assert sum(row["count"] for row in store.summary()) == writers * own + shared
        by_writer: dict[str, int] = {}
        for rec in records:
            by_writer[rec.settings["writer"]] = by_writer.get(rec.settings["writer"], 0) + 1
            if rec.key < f"key{shared:07d}":  # a shared identity: one whole write, never a mix of two
                worker = int(rec.settings["writer"][1:])
                assert rec.samples[0] == float(worker + 1) and (rec.stats.median, rec.stats.n) == (float(worker + 1), 3)
        assert sum(by_writer.values()) == writers * own + shared
        assert all(by_writer[f"w{w}"] >= own for w in range(writers))
        expected = {record_for((w + 1) * 100_000 + i).spec_id for w in range(writers) for i in range(own)}
        expected |= {record_for(i).spec_id for i in range(shared)}
        assert store.present_spec_ids(SYSTEM, STACK) == expected

    # -- leases ----------------------------------------------------------------------------

    def test_claim_leases_what_is_unmeasured_and_unleased(self, store: Store) -> None:
        ids = [record_for(i).spec_id for i in range(10)]
        store.upsert([record_for(i) for i in range(3)] + [record_for(3, outcome=Outcome.FAILED)])  # any outcome
        store.upsert([record_for(4, stack_id="other-stack"), record_for(5, system="sys-b")])  # not this stack
        assert store.claim(SYSTEM, STACK, iter([*ids, ids[5]]), "driver-a", ttl_s=60) == set(ids[4:])
        assert store.claim(SYSTEM, STACK, ids, "driver-b", ttl_s=60) == set()
        extra = [record_for(i).spec_id for i in range(10, 13)]
        assert store.claim(SYSTEM, STACK, ids[8:] + extra, "driver-b", ttl_s=60) == set(extra)
        leases = store.leases()
        assert [(x["spec_id"], x["owner"]) for x in leases] == sorted(
            [(i, "driver-a") for i in ids[4:]] + [(i, "driver-b") for i in extra]
        )
        assert all(x["system"] == SYSTEM and x["stack_id"] == STACK for x in leases)
        assert all(time.time() + 50 < x["expires_at"] <= time.time() + 60 for x in leases)

        # re-claiming one's own lease extends it; a measured id is not leased again
        store.upsert([record_for(9)])
        assert store.claim(SYSTEM, STACK, ids[4:6] + ids[9:], "driver-a", ttl_s=600) == set(ids[4:6])
        expiry = {x["spec_id"]: x["expires_at"] for x in store.leases()}
        assert expiry[ids[4]] > time.time() + 500 and expiry[ids[6]] < time.time() + 60

        # release drops only the owner's own leases and ignores ids it does not hold
        store.release(SYSTEM, STACK, ids[4:6], "driver-b")
        store.release(SYSTEM, STACK, [*ids[4:6], "never-leased"], "driver-a")
        assert {x["spec_id"] for x in store.leases()} == set(ids[6:]) | set(extra)
        assert store.claim(SYSTEM, STACK, ids[4:7], "driver-b", ttl_s=60) == set(ids[4:6])

        assert store.claim("sys-b", STACK, ids[:2], "driver-c", ttl_s=60) == set(ids[:2])
        assert [(x["system"], x["spec_id"]) for x in store.leases("sys-b")] == [("sys-b", i) for i in sorted(ids[:2])]
        assert len(store.leases(SYSTEM)) == len(store.leases()) - 2 and store.leases("nowhere") == []
        assert store.claim(SYSTEM, STACK, [], "driver-a", ttl_s=60) == set()

    def test_claim_with_retry_failed_leases_a_stored_failure_but_never_a_result(self, store: Store) -> None:
        """``fleet run --retry-failed``: a failure stored by an earlier version is measured again."""
        ids = [record_for(i).spec_id for i in range(4)]
        store.upsert([record_for(0), record_for(1, outcome=Outcome.FAILED), record_for(2, outcome=Outcome.SKIPPED)])
        assert store.claim(SYSTEM, STACK, ids, "driver-a", ttl_s=60, retry_failed=True) == {ids[1], ids[3]}
        store.release(SYSTEM, STACK, ids, "driver-a")
        assert store.claim(SYSTEM, STACK, ids, "driver-a", ttl_s=60) == {ids[3]}

    def test_claim_arguments_are_checked(self, store: Store) -> None:
        for bad in (
            lambda: store.claim(SYSTEM, STACK, ["a"], "driver", ttl_s=0),
            lambda: store.claim(SYSTEM, STACK, ["a"], "", ttl_s=10),
            lambda: store.claim(SYSTEM, STACK, "abc", "driver", ttl_s=10),
            lambda: store.release(SYSTEM, STACK, "abc", "driver"),
        ):
            with pytest.raises(UsageError):
                bad()
        assert store.leases() == []

    def test_an_expired_lease_can_be_taken_over(self, store: Store, clock: ManualClock) -> None:
        ids = [record_for(i).spec_id for i in range(4)]
        assert store.claim(SYSTEM, STACK, ids, "crashed", ttl_s=0.5) == set(ids)
        clock.advance(0.49)
        assert store.claim(SYSTEM, STACK, ids, "other", ttl_s=60) == set()
        clock.advance(0.02)
        assert store.leases() == []  # expired leases are not listed
        assert store.claim(SYSTEM, STACK, ids[:3], "other", ttl_s=60) == set(ids[:3])
        assert store.claim(SYSTEM, STACK, ids, "crashed", ttl_s=60) == {ids[3]}  # back again: only what is left
        assert {x["spec_id"]: x["owner"] for x in store.leases()} == {
            **dict.fromkeys(ids[:3], "other"),
            ids[3]: "crashed",
        }

    def test_a_lease_lives_while_its_owner_heartbeats_and_is_taken_over_soon_after_it_stops(
        self, store: Store, clock: ManualClock
    ) -> None:
        ids = [record_for(i).spec_id for i in range(4)]
        before = clock()
        assert store.claim(SYSTEM, STACK, ids, "driver-a", ttl_s=1.0) == set(ids)
        assert store.claim("sys-b", STACK, ids[:1], "driver-a", ttl_s=1.0) == set(ids[:1])
        assert store.claim(SYSTEM, STACK, ["other"], "driver-b", ttl_s=60) == {"other"}
        leases = store.leases(SYSTEM)
        assert {x["spec_id"]: x["owner"] for x in leases} == {**dict.fromkeys(ids, "driver-a"), "other": "driver-b"}
        mine = [x for x in leases if x["owner"] == "driver-a"]
        assert all(x["heartbeat_at"] == before for x in mine)
        assert all(x["expires_at"] == pytest.approx(x["heartbeat_at"] + 1.0) for x in mine)
        # its heartbeats keep every lease of the owner (on any system) for longer than one ttl
        for _ in range(8):
            clock.advance(0.3)
            assert store.heartbeat("driver-a", ttl_s=1.0) == 5
            assert store.claim(SYSTEM, STACK, ids, "driver-b", ttl_s=60) == set()
        beat = {x["spec_id"]: x["heartbeat_at"] for x in store.leases(SYSTEM) if x["owner"] == "driver-a"}
        assert all(t == pytest.approx(before + 2.4) for t in beat.values())
        other = next(x for x in store.leases(SYSTEM) if x["owner"] == "driver-b")
        assert other["expires_at"] == pytest.approx(before + 60)  # another owner's heartbeat does not touch it
        # the owner stops: just before one ttl its leases hold, just after they are anyone's
        clock.advance(0.99)
        assert store.claim(SYSTEM, STACK, ids, "driver-b", ttl_s=60) == set()
        clock.advance(0.02)
        assert store.claim(SYSTEM, STACK, ids, "driver-b", ttl_s=60) == set(ids)
        assert store.heartbeat("driver-a", ttl_s=1.0) <= 1  # what was taken over stays taken
        assert {x["spec_id"]: x["owner"] for x in store.leases(SYSTEM)} == dict.fromkeys([*ids, "other"], "driver-b")
        assert store.heartbeat("nobody", ttl_s=1.0) == 0

    def test_heartbeat_arguments_are_checked(self, store: Store) -> None:
        for bad in (lambda: store.heartbeat("", ttl_s=10), lambda: store.heartbeat("driver", ttl_s=0)):
            with pytest.raises(UsageError):
                bad()

    def test_concurrent_thread_claims_never_share_an_id(self, store: Store) -> None:
        ids = [record_for(i).spec_id for i in range(self.lease_ids)]
        barrier = threading.Barrier(4)
        held: dict[int, set[str]] = {}
        errors: list[BaseException] = []

        def drive(worker: int) -> None:
            try:
                held[worker] = _claim_in_chunks(store, worker, ids, barrier)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=drive, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert errors == []
        self._check_claims(store, ids, held)

    def test_concurrent_process_claims_never_share_an_id(self, store: Store, store_uri: str) -> None:
        ids = [record_for(i).spec_id for i in range(self.lease_ids)]
        ctx = multiprocessing.get_context("spawn")
        barrier, queue = ctx.Barrier(4), ctx.Queue()
        procs = [ctx.Process(target=_claim_worker, args=(store_uri, w, ids, barrier, queue)) for w in range(4)]
        for p in procs:
            p.start()
        held = {}
        for _ in procs:
            worker, got = queue.get(timeout=120)
            held[worker] = set(got)
        for p in procs:
            p.join(timeout=30)
        assert [p.exitcode for p in procs] == [0] * 4
        self._check_claims(store, ids, held)

    def test_a_replaced_ok_record_becomes_a_repeat_and_repeats_are_bounded(
        self, store_uri: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("BENANZA_KEEP_REPEATS", "3")

        def run(i: int, hour: int, value: float, **options: object) -> BenchmarkRecord:
            rec = record_for(i, value=value, **options)  # type: ignore[arg-type]
            return dataclasses.replace(rec, measured_at=f"2026-11-22T{hour:02d}:00:00.000000+00:00")

        with open_store(store_uri) as store:
            store.upsert([run(1, 1, 1.0), run(2, 1, 1.0)])
            assert store.repeats(SYSTEM) == []
            store.upsert([run(1, 1, 1.0)])  # the same record again (a retry, a drained spill): no repeat
            assert store.repeats(SYSTEM) == []
            for hour in range(2, 8):  # six more runs of key 1; key 2 once more
                store.upsert([run(1, hour, float(hour))])
            store.upsert([run(2, 2, 2.0), run(3, 2, 2.0)])
            store.upsert([run(2, 3, 3.0, stack_id="other-stack")])
            [current] = store.records(keys=["key0000001"])
            assert current.samples[0] == 7.0  # records() still holds one record per identity, the latest
            kept = store.repeats(SYSTEM, STACK, keys=["key0000001"])
            assert [r.samples[0] for r in kept] == [4.0, 5.0, 6.0]  # the newest 3 earlier runs, oldest first
            assert all(r.identity() == current.identity() for r in kept)
            assert [(r.key, r.samples[0]) for r in store.repeats(SYSTEM, STACK, keys=["key0000002"])] == [
                ("key0000002", 1.0)
            ]
            assert store.repeats(SYSTEM, "other-stack") == []  # a new identity on another stack is no repeat
            assert len(store.repeats(SYSTEM)) == 4 and store.repeats("sys-b") == []
            assert store.repeats(SYSTEM, runtime="null") == [] and store.repeats(SYSTEM, batch_size=8) == []
            store.upsert([dataclasses.replace(run(3, 3, 0.0), outcome=Outcome.FAILED, reason="x", samples=())])
            store.upsert([run(3, 4, 4.0)])  # a failure replaced: only ok records are kept as repeats
            assert [r.samples[0] for r in store.repeats(SYSTEM, keys=["key0000003"])] == [2.0]

    def test_keep_repeats_zero_keeps_none_and_bad_values_are_refused(
        self, store_uri: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("BENANZA_KEEP_REPEATS", "0")
        with open_store(store_uri) as store:
            store.upsert([record_for(1)])
            store.upsert([dataclasses.replace(record_for(1), measured_at="2026-11-23T00:00:00.000000+00:00")])
            assert store.repeats(SYSTEM) == []
        monkeypatch.setenv("BENANZA_KEEP_REPEATS", "-1")
        with pytest.raises(UsageError, match="BENANZA_KEEP_REPEATS"):
            open_store(store_uri)

    @staticmethod
    def _check_claims(store: Store, ids: list[str], held: dict[int, set[str]]) -> None:
        assert sorted(held) == [0, 1, 2, 3]
        assert sum(len(got) for got in held.values()) == len(ids)  # no id went to two drivers ...
        assert set().union(*held.values()) == set(ids)  # ... and every id went to one
        owners = {x["spec_id"]: x["owner"] for x in store.leases()}
        assert owners == {i: f"driver-{w}" for w, got in held.items() for i in got}


class TestSqliteStore(StoreContract):
    @pytest.fixture
    def store_uri(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'perf.db'}"


# -- SQLite specifics ----------------------------------------------------------------------------


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_sqlite_uri_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert path_of_uri("sqlite:///rel/x.db") == Path("rel/x.db")
    assert path_of_uri("sqlite:////abs/x.db") == Path("/abs/x.db")
    for bad in ("sqlite://", "sqlite:///", "sqlite:///:memory:", "sqlite:///x.db?mode=ro", "sqlite://host/x.db"):
        with pytest.raises(UsageError):
            path_of_uri(bad)
    monkeypatch.chdir(tmp_path)
    with open_store("sqlite:///deep/er/rel.db") as store:  # parent folders are created
        assert isinstance(store, SqliteStore) and store.path == tmp_path / "deep" / "er" / "rel.db"
    assert (tmp_path / "deep" / "er" / "rel.db").is_file()


def test_default_uri_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BENANZA_DB", raising=False)
    monkeypatch.delenv("BENANZA_DB_FILE", raising=False)
    with open_store() as store:
        assert store.uri == StoreURI("sqlite:///benanza.db") and store.shown_uri == "sqlite:///benanza.db"
    assert (tmp_path / "benanza.db").is_file()
    monkeypatch.setenv("BENANZA_DB", f"sqlite:///{tmp_path / 'env.db'}")
    with open_store(None) as store:
        store.upsert([record_for(1)])
    assert (tmp_path / "env.db").is_file()


def test_unknown_scheme_lists_the_known_ones() -> None:
    with pytest.raises(RegistryError, match="sqlite") as info:
        open_store("postgres://localhost/benanza")
    assert "postgres" in str(info.value) and "sqlite" in store_schemes()
    with pytest.raises(UsageError):
        open_store("just-a-name.db")


def test_text_file_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("these are my notes, not a database\n" * 20)
    before = _digest(path)
    with pytest.raises(StoreError) as info:
        open_store(f"sqlite:///{path}")
    message = str(info.value)
    assert str(path) in message and "not a SQLite database" in message and "\n" not in message
    assert _digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]  # no -wal/-shm either


def test_other_programs_sqlite_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO customers (name) VALUES ('ada')")
    conn.close()
    before = _digest(path)
    with pytest.raises(StoreError, match=r"another program.*customers"):
        SqliteStore(path)
    assert _digest(path) == before


def test_newer_layout_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "perf.db"
    with SqliteStore(path) as store:
        store.upsert([record_for(1)])
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(DB_SCHEMA_VERSION + 1),))
    conn.commit()
    conn.close()  # the last connection checkpoints the WAL into the file
    before = _digest(path)
    with pytest.raises(StoreError, match="newer") as info:
        open_store(f"sqlite:///{path}")
    assert str(path) in str(info.value)
    assert _digest(path) == before


def test_missing_database_without_create(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "none.db"
    with pytest.raises(StoreError, match="no database"):
        open_store(f"sqlite:///{path}", create=False)
    assert not path.parent.exists()


def test_empty_file_becomes_a_database(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    with SqliteStore(path) as store:
        store.upsert([record_for(1)])
    with SqliteStore(path, create=False) as store:
        assert store.records() == [record_for(1)]


def test_raw_row_of_an_old_schema_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "perf.db"
    with SqliteStore(path) as store:
        store.upsert([record_for(1)])
    old = {**record_for(2).to_doc(), "schema_version": 0}
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO results (system, stack_id, runtime, kind, key, batch_size, dtype, variant, spec_id, outcome,"
        " schema_version, measured_at, doc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)",
        (*record_for(2).identity(), old["spec_id"], "ok", old["measured_at"], json.dumps(old)),
    )
    conn.commit()
    conn.close()
    with SqliteStore(path) as store:
        assert store.records() == [record_for(1)]
        assert store.present_spec_ids(SYSTEM, STACK) == {record_for(1).spec_id}
        assert [row["count"] for row in store.summary()] == [1]


def test_plan_document_round_trip_and_missing_field() -> None:
    plan = plan_for("tiny", grans=(1, 3)).placed(SYSTEM, STACK)
    doc = json.loads(json.dumps(plan.to_doc()))
    assert StoredPlan.from_doc(doc) == plan and doc["schema_version"] == PLAN_SCHEMA_VERSION
    at_defaults = runtime_defaults_key("tiny-model")  # the model end to end at its runtime's defaults
    assert plan.keys == {"tiny-L0", "tiny-L1", "tiny-L2", "tiny-U0", "tiny-S1", "tiny-S3", "tiny-model", at_defaults}
    assert plan.plan_id == plan.placed("elsewhere", "x").plan_id  # content only
    del doc["unit_keys"]
    with pytest.raises(StoreError, match="unit_keys"):
        StoredPlan.from_doc(doc)


def test_a_database_without_plan_tables_reads_no_plans(tmp_path: Path) -> None:
    path = tmp_path / "perf.db"
    with SqliteStore(path) as store:
        store.upsert([record_for(1)])
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE plans")  # as a database made before plans were stored
    conn.execute("DROP TABLE plan_docs")
    conn.commit()
    conn.close()
    with SqliteStore(path, read_only=True) as store:
        assert store.plans() == [] and store.records() == [record_for(1)]
    with SqliteStore(path) as store:  # opened for writing, the tables are added
        store.put_plans(SYSTEM, STACK, [plan_for()])
        assert len(store.plans()) == 1


def test_closed_store_says_so(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "perf.db")
    store.upsert([record_for(1)])
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.records()


class ManualClock:
    """A store's clock that moves only when a test advances it: lease expiries without sleeping."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def sql_statements(store: SqliteStore) -> list[str]:
    """Every SQL statement ``store`` runs from now on, in this thread (SQLite's trace callback)."""
    statements: list[str] = []
    store._conn().set_trace_callback(statements.append)
    return statements


def test_one_upsert_call_commits_once_not_per_record(tmp_path: Path) -> None:
    """What keeps a batched upsert fast (about 165,000 records/s here): one transaction, not one per record."""
    records = [record_for(i) for i in range(10_000)]
    with SqliteStore(tmp_path / "rate.db") as store:
        statements = sql_statements(store)
        assert store.upsert(records) == 10_000
        commits = [s for s in statements if s.strip().upper().startswith(("COMMIT", "END"))]
        assert len(commits) == 1, statements[:20]
        assert len(store.present_spec_ids(SYSTEM, STACK)) == 10_000


def test_claiming_ten_thousand_ids_is_one_transaction_of_set_statements(tmp_path: Path) -> None:
    ids = [record_for(i).spec_id for i in range(10_000)]
    with SqliteStore(tmp_path / "leases.db") as store:
        store.upsert(record_for(i) for i in range(0, 10_000, 2))  # every other id is measured already
        statements = sql_statements(store)
        held = store.claim(SYSTEM, STACK, ids, "driver-a", ttl_s=60)
        assert held == set(ids[1::2])
        # no statement per id: the ids go in as one set (a temporary table), whatever their number
        assert len(statements) < 50, len(statements)
        assert store.claim(SYSTEM, STACK, ids, "driver-b", ttl_s=60) == set()
        assert len(store.leases()) == 5_000


def test_leases_table_is_added_to_an_older_database(tmp_path: Path) -> None:
    path = tmp_path / "perf.db"
    with SqliteStore(path) as store:
        store.upsert([record_for(1)])
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE leases")  # as written by benanza before leases existed
    conn.commit()
    conn.close()
    with SqliteStore(path) as store:
        assert store.records() == [record_for(1)]
        assert store.claim(SYSTEM, STACK, [record_for(1).spec_id, "new"], "driver", ttl_s=60) == {"new"}


def test_leases_of_an_older_database_get_their_heartbeat(tmp_path: Path) -> None:
    path = tmp_path / "perf.db"
    SqliteStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE leases")
    conn.execute(  # the table as benanza wrote it before leases had heartbeats, with a lease in it
        "CREATE TABLE leases (system TEXT NOT NULL, stack_id TEXT NOT NULL, spec_id TEXT NOT NULL, "
        "owner TEXT NOT NULL, expires_at REAL NOT NULL, PRIMARY KEY (system, stack_id, spec_id))"
    )
    conn.execute("INSERT INTO leases VALUES (?, ?, 'old', 'driver-old', ?)", (SYSTEM, STACK, time.time() + 600))
    conn.commit()
    conn.close()
    with SqliteStore(path) as store:
        (old,) = store.leases()
        assert old["owner"] == "driver-old" and old["heartbeat_at"] is None  # an old driver's lease keeps its expiry
        assert store.claim(SYSTEM, STACK, ["old", "new"], "driver", ttl_s=60) == {"new"}
        assert store.heartbeat("driver-old", ttl_s=5) == 1
        assert {x["spec_id"]: x["expires_at"] < time.time() + 6 for x in store.leases()} == {"new": False, "old": True}


# -- benanza db ls -------------------------------------------------------------------------------


@pytest.fixture
def filled_db(tmp_path: Path) -> str:
    uri = f"sqlite:///{tmp_path / 'perf.db'}"
    with open_store(uri) as store:
        store.register_system(SYSTEM, {"cpu_model": "AMD EPYC", "logical_cores": 2, "memory_bytes": 2**34})
        store.register_stack(
            SYSTEM,
            STACK,
            {"python": {"version": "3.11.7"}, "numpy": {"version": "2.4.6", "blas": {"name": "openblas"}}},
        )
        store.upsert([record_for(i) for i in range(3)] + [record_for(3, outcome=Outcome.SKIPPED)])
    return uri


def test_db_ls_json(filled_db: str) -> None:
    result = CliRunner().invoke(db_app, ["ls", "--db", filled_db, "--format", "json"])
    assert result.exit_code == 0, result.output
    listing = json.loads(result.stdout)
    assert listing["db"] == filled_db
    assert [s["name"] for s in listing["systems"]] == [SYSTEM]
    assert [s["stack_id"] for s in listing["stacks"]] == [STACK]
    counts = {r["outcome"]: r["count"] for r in listing["summary"]}
    assert counts == {"ok": 3, "skipped": 1}


def test_db_ls_table(filled_db: str) -> None:
    result = CliRunner().invoke(db_app, ["ls", "--db", filled_db])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "1 systems" in out and "AMD EPYC" in out and "16" in out  # 2**34 bytes = 16 GiB
    assert STACK in out and "numpy 2.4.6 (openblas ?)" in out
    assert "4 results" in out and "onnxruntime" in out


def test_db_ls_errors_are_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    result = CliRunner().invoke(db_app, ["ls", "--db", f"sqlite:///{missing}"])
    assert result.exit_code == 2 and result.stderr.startswith("error: ") and str(missing) in result.stderr
    assert not missing.exists()
    text = tmp_path / "text.db"
    text.write_text("hello\n")
    result = CliRunner().invoke(db_app, ["ls", "--db", f"sqlite:///{text}"])
    assert result.exit_code == 2 and "not a SQLite database" in result.stderr and "Traceback" not in result.output
    result = CliRunner().invoke(db_app, ["ls", "--db", "nosuch://x"])
    assert result.exit_code == 2 and "known: " in result.stderr
