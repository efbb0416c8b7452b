"""Analysis across systems: `analyze lower-bound --system`, the comparison, and `analyze systems`.

One real SQLite store holds the records of three systems. ``sys-a`` is measured for real
(ONNX Runtime, one thread, a millisecond harness) on two small models; ``sys-b`` and
``sys-c`` hold copies of those records with set latencies, so every figure below can be
computed by hand:

- ``sys-b`` ran two stacks: ``b-old`` (ONNX Runtime "1.0.0", kernel 2 ms, call 4 ms per
  benchmark) and the later ``b-new`` ("1.1.0", kernel 0.5 ms, call 1 ms, models end to end
  4 ms); USD 3.60 per hour in its stored fleet config.
- ``sys-c`` (variant ``threads=2``, one decoy layer at ``threads=1``): kernel 0.2 ms, call
  0.4 ms, no end-to-end results, and no result for the MaxPool layer of ``pool``; no stored
  price.

Each copy system also holds ``sys-a``'s stored plans, placed on its own stacks and variant,
as its own ``benanza run`` would have stored them: analysis reads nothing else.

``chain`` runs as 3 units (fused Conv+BN+Relu, Conv, Reshape); ``pool`` likewise with a
MaxPool tail.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from benanza.analysis.compare import (
    Comparison,
    SystemLatency,
    compare_systems,
    cost_per_1000,
    stack_changes,
    system_prices,
)
from benanza.analysis.lower_bound import LowerBound
from benanza.analysis.stored import PlanSelection, analyze_stored, system_reports
from benanza.bench.records import MeasurementStats
from benanza.bench.stats import describe
from benanza.cli import app
from benanza.fingerprint import stack_id, system_fingerprint
from benanza.local import bench, open_local, plan_models
from benanza.store import open_store

THREADS_1 = "ep=cpu,opt=extended,threads=1"
THREADS_2 = "ep=cpu,opt=extended,threads=2"
STACK_B_OLD = {"runtime": "onnxruntime", "onnxruntime": "1.0.0", "onnx": "1.17.0", "python": {"version": "3.11.9"}}
STACK_B_NEW = {**STACK_B_OLD, "onnxruntime": "1.1.0"}
STACK_C = {"runtime": "onnxruntime", "onnxruntime": "1.1.0", "onnx": "1.17.0", "python": {"version": "3.11.9"}}
B_OLD, B_NEW, C1 = stack_id(STACK_B_OLD), stack_id(STACK_B_NEW), stack_id(STACK_C)
ENV = {"BENANZA_DB": None, "BENANZA_SYSTEM": "sys-a"}


def _timed(record, call_s: float, kernel_s: float, **changes):
    """A copy of ``record`` whose call and kernel samples are constants."""
    calls, kernels = (call_s,) * 5, (kernel_s,) * 3
    return dataclasses.replace(
        record,
        samples=calls,
        stats=MeasurementStats.of(describe(calls)),
        kernel_samples=kernels,
        kernel_stats=describe(kernels),
        **changes,
    )


@pytest.fixture(scope="module")
def models(tmp_path_factory, conv_chain) -> list[Path]:
    folder = tmp_path_factory.mktemp("models")
    paths = [folder / "chain.onnx", folder / "pool.onnx"]
    for path, tail in zip(paths, ("reshape", "maxpool"), strict=True):
        path.write_bytes(conv_chain(tail).SerializeToString())
    return paths


@pytest.fixture(scope="module")
def fleet_db(tmp_path_factory, models, fast_harness):
    """(uri, sys-a's stack id, the MaxPool layer key) for the three-system store described above."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('db') / 'fleet.db'}"
    ctx = open_local(uri, "onnxruntime", {"threads": 1}, system="sys-a", settings=fast_harness)
    try:
        plans = plan_models(models, ctx.runtime, (1,), granularities=(1, 2))
        summary = bench(ctx, plans, e2e=True)
        assert summary.measured > 0 and summary.failed == 0
        real = ctx.store.records(system="sys-a")
        pool = next(p for p in plans if p.model == "pool")
        maxpool_key = next(layer.layer_key for layer in pool.graph.layers if layer.op_type == "MaxPool")

        fingerprint = system_fingerprint()
        store = ctx.store
        store.register_system("sys-b", fingerprint.with_config({"kind": "cpu", "price_per_hour": 3.6}).to_doc())
        store.register_stack("sys-b", B_OLD, STACK_B_OLD)
        store.register_stack("sys-b", B_NEW, STACK_B_NEW)  # registered later: the latest
        store.register_system("sys-c", fingerprint.with_config({"kind": "cpu", "threads": 2}).to_doc())
        store.register_stack("sys-c", C1, STACK_C)

        copies = []
        overhead = {p.call_overhead_key for p in plans}
        for r in real:
            copies.append(_timed(r, 0.004, 0.002, system="sys-b", stack_id=B_OLD))
            e2e = r.kind == "model"
            call = 0.004 if e2e else 0.00001 if r.key in overhead else 0.001  # a call's overhead: 0.01 ms
            copies.append(_timed(r, call, 0.0005, system="sys-b", stack_id=B_NEW))
            if not e2e and r.key != maxpool_key:
                copies.append(_timed(r, 0.0004, 0.0002, system="sys-c", stack_id=C1, variant=THREADS_2))
        decoy = next(r for r in real if r.kind == "layer")
        copies.append(_timed(decoy, 0.1, 0.1, system="sys-c", stack_id=C1))  # threads=1: the minority
        store.upsert(copies)
        measured = store.plans(system="sys-a")
        assert {p.model for p in measured} == {"chain", "pool"}
        store.put_plans("sys-b", B_OLD, measured)
        store.put_plans("sys-b", B_NEW, measured)
        store.put_plans("sys-c", C1, [dataclasses.replace(p, variant=THREADS_2) for p in measured])
    finally:
        ctx.close()
    return uri, ctx.stack_id, maxpool_key


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env=ENV)


def json_of(result):
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def rows_of(fleet_db, models, *flags):
    uri, _, _ = fleet_db
    return json_of(invoke("analyze", "lower-bound", *models, "--db", uri, "-g", "1,2", "--format", "json", *flags))


def by(rows, *fields):
    return {tuple(r[f] for f in fields): r for r in rows}


# -- analyze lower-bound --system ------------------------------------------------------------


def test_one_row_per_model_system_and_latest_stack(fleet_db, models):
    _, stack_a, _ = fleet_db
    rows = rows_of(fleet_db, models, "--system", "all")
    assert sorted((r["model"], r["system"], r["stack_id"]) for r in rows) == sorted(
        (m, s, sid) for m in ("chain", "pool") for s, sid in (("sys-a", stack_a), ("sys-b", B_NEW), ("sys-c", C1))
    )
    assert {r["batch_size"] for r in rows} == {1}
    rows = by(rows, "model", "system")
    # the real system: complete, and its lower bound at most its end-to-end time's order
    real = rows[("chain", "sys-a")]
    assert real["coverage"] == 1.0 and real["variant"] == THREADS_1
    assert real["sequential_ms"] > 0 and real["e2e_ms"] > 0
    # the copies: 3 units at 0.5 ms kernel time, 4 ms end to end; sequences of call latencies
    b = rows[("chain", "sys-b")]
    assert b["sequential_ms"] == pytest.approx(1.5) and b["parallel_ms"] == pytest.approx(1.5)
    assert b["e2e_ms"] == pytest.approx(4.0) and b["variant"] == THREADS_1
    assert b["composed_ms"]["1"] == pytest.approx(3.0 - 2 * 0.01)  # 3 units of 1 ms, the overhead counted once
    # the stored plan's variant, not the decoy's: its 100 ms is not used
    c = rows[("chain", "sys-c")]
    assert c["variant"] == THREADS_2 and c["sequential_ms"] == pytest.approx(0.6)


def test_missing_data_is_null_not_zero(fleet_db, models):
    _, _, maxpool_key = fleet_db
    rows = by(rows_of(fleet_db, models, "--system", "sys-c"), "model")
    pool, chain = rows[("pool",)], rows[("chain",)]
    assert pool["sequential_ms"] is None and pool["parallel_ms"] is None
    assert pool["e2e_ms"] is None and chain["e2e_ms"] is None  # sys-c measured no model end to end
    assert [m["layer_key"] for m in pool["missing"]] == [maxpool_key]
    assert pool["coverage"] == pytest.approx(4 / 5)
    assert pool["partial_sequential_ms"] == pytest.approx(0.4)  # the two units it has


def test_comma_separated_and_repeated_names(fleet_db, models):
    once = rows_of(fleet_db, models, "--system", "sys-b,sys-c")
    repeated = rows_of(fleet_db, models, "--system", "sys-b", "--system", "sys-c")
    assert once == repeated
    assert {r["system"] for r in once} == {"sys-b", "sys-c"}


def test_stack_all_and_one_stack(fleet_db, models):
    rows = rows_of(fleet_db, models[:1], "--system", "sys-b", "--stack", "all")
    assert [r["stack_id"] for r in rows] == [B_OLD, B_NEW]  # oldest first
    assert [r["sequential_ms"] for r in rows] == [pytest.approx(6.0), pytest.approx(1.5)]
    (old,) = rows_of(fleet_db, models[:1], "--system", "all", "--stack", B_OLD)  # only sys-b ran it
    assert (old["system"], old["stack_id"], old["e2e_ms"]) == ("sys-b", B_OLD, pytest.approx(4.0))


def test_unknown_system_or_stack_is_a_one_line_error(fleet_db, models):
    uri, _, _ = fleet_db
    for flags, words in (
        (["--system", "sys-b,nope"], ["unknown system 'nope'", "known: sys-a, sys-b, sys-c", uri]),
        (["--system", "sys-c", "--stack", "0123"], ["'0123'", C1]),
        (["--stack", "0123"], ["'0123'", "no system of sys-a"]),  # without --system: this machine ($BENANZA_SYSTEM)
    ):
        result = invoke("analyze", "lower-bound", *models, "--db", uri, "--format", "json", *flags)
        assert result.exit_code == 2, result.output
        assert result.stdout == "" and "Traceback" not in result.output
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("error: ")
        for word in words:
            assert word in line, (word, line)


def test_a_missing_database_is_not_created(tmp_path, models):
    path = tmp_path / "none.db"
    result = invoke("analyze", "lower-bound", *models, "--db", f"sqlite:///{path}", "--system", "all")
    assert result.exit_code == 2 and not path.exists()


# -- the comparison --------------------------------------------------------------------------


def test_compare_fastest_and_cost(fleet_db, models):
    comparisons = rows_of(fleet_db, models, "--system", "sys-b,sys-c", "--compare")
    assert [(c["model"], c["batch_size"]) for c in comparisons] == [("chain", 1), ("pool", 1)]
    chain, pool = comparisons
    # chain: only sys-b has e2e, both have a lower bound -> ranked by lower bound: sys-c 0.6 < 1.5
    assert (chain["fastest"], chain["fastest_by"], chain["fastest_ms"]) == (
        "sys-c",
        "sequential_ms",
        pytest.approx(0.6),
    )
    assert chain["fastest_stack_id"] == C1
    # pool: sys-c lacks a layer, so only sys-b has either figure; e2e wins the tie
    assert (pool["fastest"], pool["fastest_by"], pool["fastest_ms"]) == ("sys-b", "e2e_ms", pytest.approx(4.0))
    b = {s["system"]: s for s in chain["systems"]}["sys-b"]
    # USD 3.60/h for 4 ms: 3.6 / 3600 * 0.004 * 1000 = 0.004
    assert (b["price_per_hour"], b["cost_basis"], b["cost_per_1000"]) == (3.6, "e2e_ms", pytest.approx(0.004))
    for c in comparisons:
        s = {e["system"]: e for e in c["systems"]}["sys-c"]
        assert s["price_per_hour"] is None and s["cost_per_1000"] is None and s["cost_basis"] is None


def test_json_rows_stay_a_list_of_rows(fleet_db, models):
    rows = rows_of(fleet_db, models, "--system", "all")
    assert isinstance(rows, list) and all("sequential_ms" in r and "fastest" not in r for r in rows)


def test_table_shows_the_comparison_for_several_systems(fleet_db, models):
    uri, _, _ = fleet_db
    result = invoke("analyze", "lower-bound", *models, "--db", uri, "-g", "1", "--system", "sys-b,sys-c")
    assert result.exit_code == 0, result.output
    assert "across systems" in result.stdout and "fastest (lower bound)" in result.stdout
    assert "fastest (e2e)" in result.stdout and "0.004" in result.stdout
    single = invoke("analyze", "lower-bound", *models, "--db", uri, "-g", "1", "--system", "sys-b")
    assert single.exit_code == 0, single.output
    assert "across systems" not in single.stdout and B_NEW in single.stdout


def test_config_prices_replace_stored_ones(fleet_db, models, tmp_path):
    pytest.importorskip("benanza.config", reason="the fleet config module is not written yet")
    config = tmp_path / "fleet.toml"
    config.write_text('[[systems]]\nname = "sys-c"\nkind = "cpu"\nprice_per_hour = 1.2\n')
    comparisons = rows_of(fleet_db, models[:1], "--system", "sys-b,sys-c", "--compare", "--config", config)
    systems = {s["system"]: s for s in comparisons[0]["systems"]}
    # USD 1.20/h for the 0.6 ms lower bound: 1.2 / 3600 * 0.0006 * 1000 = 0.0002
    assert systems["sys-c"]["cost_per_1000"] == pytest.approx(0.0002)
    assert systems["sys-c"]["cost_basis"] == "sequential_ms"
    assert systems["sys-b"]["cost_per_1000"] == pytest.approx(0.004)  # stored price kept


def _row(system: str, sequential: float | None, e2e: float | None) -> LowerBound:
    return LowerBound(
        model="m",
        system=system,
        stack_id="s",
        runtime="onnxruntime",
        variant=None,
        batch_size=1,
        sequential_ms=sequential,
        sequential_unfused_ms=None,
        parallel_ms=None,
        partial_sequential_ms=0.0,
        e2e_ms=e2e,
        e2e_kernel_ms=None,
        composed_ms={},
        coverage=1.0,
        missing=(),
    )


def test_fastest_basis_and_cost_rules():
    assert cost_per_1000(36.0, 100.0) == pytest.approx(1.0)  # 36 USD/h = 0.01 USD/s, 0.1 s per inference
    assert cost_per_1000(None, 1.0) is None and cost_per_1000(1.0, None) is None
    (c,) = compare_systems([_row("x", 2.0, 9.0), _row("y", 1.0, None), _row("z", 3.0, 8.0)], {"y": 7.2})
    assert (c.fastest.system, c.fastest_by) == ("y", "sequential_ms")  # 3 lower bounds vs 2 e2e figures
    (c,) = compare_systems([_row("x", 2.0, 9.0), _row("z", None, 8.0)], {})
    assert (c.fastest.system, c.fastest_by) == ("z", "e2e_ms")
    y = SystemLatency("y", "s", None, 1.0, None, None, 1.0, 7.2)
    assert (y.cost_basis, y.cost_per_1000) == ("sequential_ms", pytest.approx(0.002))
    empty = Comparison("m", 1, (SystemLatency("x", "s", None, None, None, None, 0.0, 7.2),))
    assert empty.fastest is None and empty.to_dict()["fastest_by"] is None
    assert empty.to_dict()["systems"][0]["cost_per_1000"] is None


def test_prices_from_fingerprints_and_overrides():
    systems = [
        {"name": "a", "fingerprint": {"config": {"price_per_hour": 2}}},
        {"name": "b", "fingerprint": {"cpu_model": "x"}},
        {"name": "c", "fingerprint": {"config": {"price_per_hour": "cheap"}}},
    ]
    assert system_prices(systems) == {"a": 2.0, "b": None, "c": None}
    assert system_prices(systems, {"b": 1.5, "a": None}) == {"a": 2.0, "b": 1.5, "c": None}


# -- analyze systems -------------------------------------------------------------------------


def test_analyze_systems_json(fleet_db, models):
    uri, stack_a, _ = fleet_db
    reports = json_of(invoke("analyze", "systems", *models, "--db", uri, "--top", "3", "--format", "json"))
    assert [r["system"] for r in reports] == ["sys-a", "sys-b", "sys-c"]
    a, b, c = reports
    assert b["hardware"]["price_per_hour"] == 3.6 and b["hardware"]["kind"] == "cpu"
    assert b["hardware"]["cpu_model"] and b["hardware"]["logical_cores"] >= 1
    assert c["hardware"]["threads"] == 2 and c["hardware"]["price_per_hour"] is None
    # stacks over time, and what changed
    assert [s["stack_id"] for s in b["stacks"]] == [B_OLD, B_NEW] and b["latest_stack_id"] == B_NEW
    old, new = b["stacks"]
    assert old["previous"] is None and old["changes"] == []
    assert new["previous"] == B_OLD
    assert new["changes"] == [{"field": "onnxruntime", "before": "1.0.0", "after": "1.1.0"}]
    assert new["key_versions"]["onnxruntime"] == "1.1.0" and new["key_versions"]["python.version"] == "3.11.9"
    assert old["records"] == new["records"] > 0
    # counts by kind and outcome: the latest stack, and all stacks
    assert set(b["counts"]) == {"layer", "group", "sequence", "model"}
    # two models, each end to end at the variant's level and at ONNX Runtime's default
    assert b["counts"]["model"] == {"ok": 4}
    assert b["counts_all_stacks"]["model"] == {"ok": 8}
    assert "model" not in c["counts"]
    # slowest layers: sys-a's real ones in descending order, sys-b's at 1 ms, sys-c's decoy first
    assert len(a["slowest_layers"]) == 3
    assert [s["ms"] for s in a["slowest_layers"]] == sorted((s["ms"] for s in a["slowest_layers"]), reverse=True)
    assert all(s["ms"] == pytest.approx(1.0) and s["kernel_ms"] == pytest.approx(0.5) for s in b["slowest_layers"])
    assert c["slowest_layers"][0]["ms"] == pytest.approx(100.0) and c["slowest_layers"][0]["variant"] == THREADS_1
    assert {"key", "label", "ms"} <= set(b["slowest_layers"][0])
    # coverage of the two-model corpus at each model's own batch (1): 6 unique layers (all but the tails are shared)
    assert a["coverage"] == {"batch_size": None, "models": 2, "unique_layers": 6, "covered": 6, "share": 1.0}
    assert (c["coverage"]["covered"], c["coverage"]["share"]) == (5, pytest.approx(5 / 6))
    assert a["latest_stack_id"] == stack_a


def test_analyze_systems_table_and_selection(fleet_db, models):
    uri, _, _ = fleet_db
    result = invoke("analyze", "systems", *models, "--db", uri, "--system", "sys-b", "--top", "2")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "system sys-b" in out and "sys-c" not in out
    assert "onnxruntime: 1.0.0 -> 1.1.0" in out and "slowest layers (top 2" in out
    bad = invoke("analyze", "systems", *models, "--db", uri, "--system", "nope")
    assert bad.exit_code == 2 and "unknown system 'nope'" in bad.stderr


def test_library_calls_match_the_cli(fleet_db, models):
    uri, _, _ = fleet_db
    with open_store(uri, create=False) as store:
        one = PlanSelection.of(models=models[:1], granularities=(1,))
        rows = analyze_stored(store, ["sys-b"], stack="all", selection=one)
        (report,) = system_reports(store, ["sys-b"], top=1, selection=PlanSelection.of(models=models))
    assert [r.stack_id for r in rows] == [B_OLD, B_NEW]
    assert [c.field for c in report.stacks[1].changes] == ["onnxruntime"]
    assert stack_changes(STACK_B_OLD, {**STACK_B_OLD, "cuda": "12.4"})[0].to_dict() == {
        "field": "cuda",
        "before": None,
        "after": "12.4",
    }
