"""The fleet on a real local Ray cluster: three simulated systems, real stores, real faults.

One cluster (``ray.cluster_utils.Cluster``: a head without CPUs and one node per system,
each with the label ``system=NAME`` and the resource ``system:NAME``) serves the module.
Benchmarks use the null runtime (and ONNX Runtime once) with a fast harness, so the tests
check the plumbing (placement, incremental runs, leases, faults), not timings.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest
from cli_checks import layer_outcome, plant_failure

ray = pytest.importorskip("ray")

from benanza.config import FleetConfig, SystemConfig  # noqa: E402
from benanza.fleet.driver import FleetDriver, SystemResult, _SystemRun, run_fleet  # noqa: E402
from benanza.fleet.plan import CorpusWork, Target, chunks, plan_target  # noqa: E402
from benanza.store.base import open_store  # noqa: E402

SYSTEMS = ("sys-a", "sys-b", "sys-c")
FAST = {
    "warmup_runs": 1,
    "min_samples": 3,
    "max_samples": 50,
    "min_time_s": 0.001,
    "max_time_s": 0.05,
    "kernel_runs": 0,
}
SLOW = {**FAST, "min_samples": 10, "min_time_s": 0.04, "max_time_s": 0.2}  # about 40 ms a benchmark
# Settings a driver started by a test must not inherit from the test process (or another test's cluster).
RAY_SETTINGS = (
    "RAY_ADDRESS",
    "RAY_AUTH_MODE",
    "RAY_AUTH_TOKEN",
    "RAY_AUTH_TOKEN_PATH",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER",
)
REPO = Path(__file__).resolve().parents[1]


def cli_env(*, ray_settings: bool = False, **extra: str) -> dict[str, str]:
    """The environment of a ``python -m benanza`` subprocess: this checkout's package, and ``extra``.

    Without ``ray_settings`` the test process's Ray settings (its cluster's token) are left out.
    """
    env = {k: v for k, v in os.environ.items() if ray_settings or k not in RAY_SETTINGS}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return {**env, **extra}


def embedded_fleet_run(tmp_path: Path, conv_chain, **harness: str) -> tuple[list[str], dict[str, str]]:
    """The command and environment of a default ``benanza fleet run`` (no config: in-process Ray,
    this machine as ``laptop``, SQLite in ``tmp_path``) over a conv chain saved there, JSON out.

    ``harness``: BENANZA_HARNESS_* settings beside the shortest minimum time, as NAME="value".
    """
    import onnx

    model = tmp_path / "chain.onnx"
    onnx.save(conv_chain(), model)
    env = cli_env(
        BENANZA_SYSTEM="laptop",
        BENANZA_HARNESS_MIN_TIME_S="0.001",
        **{f"BENANZA_HARNESS_{k.upper()}": v for k, v in harness.items()},
    )
    env.pop("BENANZA_DB", None)
    return [sys.executable, "-m", "benanza", "fleet", "run", "--models", str(model), "-q", "--format", "json"], env


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster with one node per system (``fleet.systems.connect``); the test process is connected."""
    from benanza.config import RayConfig
    from benanza.fleet.systems import connect

    with connect(RayConfig(local_cluster=True), [SystemConfig(name=s) for s in SYSTEMS]) as session:
        yield session


def nodes_of() -> dict[str, str]:
    """node id -> system, from the labels Ray reports."""
    return {n["NodeID"]: (n.get("Labels") or {}).get("system") for n in ray.nodes() if n["Alive"]}


def listening_sockets(roots) -> set[tuple[int, str, str, int]]:
    """``(pid, name, ip, port)`` of each TCP listener and bound UDP socket of ``roots`` and their descendants."""
    psutil = pytest.importorskip("psutil")
    procs = {}
    for root in roots:
        try:
            procs[root.pid] = root
            procs.update((p.pid, p) for p in root.children(recursive=True))
        except psutil.Error:  # gone meanwhile
            continue
    found = set()
    for proc in procs.values():
        try:
            name = " ".join(proc.cmdline())[:160] or proc.name()
            conns = proc.net_connections(kind="inet")
        except psutil.Error:
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN or (c.type == 2 and not c.raddr):  # SOCK_DGRAM without a peer
                found.add((proc.pid, name, c.laddr.ip, c.laddr.port))
    return found


def off_loopback(ip: str) -> bool:
    """Whether a socket bound to ``ip`` can be reached from another machine (any, unspecified or routable)."""
    address = ipaddress.ip_address(ip.split("%")[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return not address.is_loopback


def fleet_config(models: list[Path], db: str, *, systems=SYSTEMS, harness=FAST, cpus=1.0, **extra) -> FleetConfig:
    return FleetConfig(
        systems=[SystemConfig(name=s, runtimes=["null"], num_cpus=cpus) for s in systems],
        models=models,
        db=db,
        harness=harness,
        chunk_size=extra.pop("chunk_size", 8),
        # the lease and fault tests count on chunks of chunk_size; model chunks are tested on their own
        chunk_by_model=extra.pop("chunk_by_model", False),
        **extra,
    )


@pytest.fixture(scope="module")
def two_models(zoo_path) -> list[Path]:
    return [zoo_path("squeezenet"), zoo_path("shufflenet")]


# -- the pure plan -------------------------------------------------------------------------------


def test_plan_keeps_what_the_stack_lacks_and_specs_carry_the_system_variant(two_models) -> None:
    from benanza.bench.generate import specs_for_plan, unique_specs
    from benanza.local import plan_models
    from benanza.runtimes.null import NullRuntime

    plans = plan_models(two_models, NullRuntime(), (1,), granularities=(2,))
    work = CorpusWork("null", tuple(unique_specs(s for p in plans for s in specs_for_plan(p, "null", {}, e2e=True))))
    target = Target("sys-a", "null", "stack1", {"threads": 3})
    full = plan_target(work, target, set())
    assert full.todo == list(range(len(work.templates))) and full.reused == 0
    ids = [full.spec_id(i) for i in full.todo]
    assert ids == [full.spec(i).spec_id for i in full.todo]  # the fast id is the spec's own
    assert all(full.spec(i).variant_id == "threads=3" for i in full.todo[:5])
    present = set(ids[::3])
    part = plan_target(work, target, present)
    assert part.reused == len(present) and len(part.todo) == len(ids) - len(present)
    assert not present & {part.spec_id(i) for i in part.todo}
    assert chunks(list(range(10)), 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_interleaved_chunks_are_whole_models_with_their_end_to_end(tmp_path: Path, two_models) -> None:
    """With the interleaved schedule an actor call takes one model's benchmarks (no Ray needed)."""
    from benanza.bench.spec import SpecKind
    from benanza.fleet.driver import plan_corpus

    db = f"sqlite:///{tmp_path / 'm.db'}"
    cfg = fleet_config(two_models, db, systems=("sys-a",), chunk_size=4, chunk_by_model=True, granularities=[1, 3])
    (work,) = plan_corpus(cfg).works.values()
    assert len(work.models) == len(work.templates) and work.models == tuple(sorted(work.models))
    assert set(work.models) == {1, 2}  # every template belongs to the first model that needs it
    driver = FleetDriver(cfg)
    run = _SystemRun(plan_target(work, Target("sys-a", "null", "s1", {}), set()), SystemResult("sys-a"))
    first = driver._model_chunk(run)
    second = driver._model_chunk(run)
    assert driver._model_chunk(run) == [] and not run.queue
    assert len(first) > 4 and first + second == list(range(len(work.templates)))
    for chunk in (first, second):
        kinds = [work.templates[i].kind for i in chunk]
        # the whole beside its parts, first: a model too large for one call keeps it with its units
        assert kinds[0] is SpecKind.MODEL and kinds.count(SpecKind.MODEL) == 1
    # the sequential schedule, or chunk_by_model off: chunk_size as before
    seq = FleetDriver(
        fleet_config(two_models, db, systems=("sys-a",), chunk_by_model=True, harness={"schedule": "sequential"})
    )
    run = _SystemRun(plan_target(work, Target("sys-a", "null", "s1", {}), set()), SystemResult("sys-a"))
    assert seq._model_chunk(run) == []
    off = FleetDriver(fleet_config(two_models, db, systems=("sys-a",)))
    assert off._model_chunk(run) == []


def test_a_worker_that_keeps_dying_is_stored_as_failed(tmp_path: Path, two_models) -> None:
    """The driver's retry rule (no Ray needed): alone, up to max_attempts, then a failed record."""
    from benanza.bench.generate import specs_for_plan, unique_specs
    from benanza.fleet.driver import _Chunk
    from benanza.local import plan_models
    from benanza.runtimes.null import NullRuntime

    plans = plan_models(two_models[:1], NullRuntime(), (1,))
    work = CorpusWork("null", tuple(unique_specs(specs_for_plan(plans[0], "null", {}, e2e=False))))
    db = f"sqlite:///{tmp_path / 'f.db'}"
    cfg = fleet_config(two_models[:1], db, systems=("sys-a",), max_attempts=3)
    driver = FleetDriver(cfg)
    run = _SystemRun(plan_target(work, Target("sys-a", "null", "s1", {}), set()), SystemResult("sys-a"))
    with open_store(db) as store:
        chunk = _Chunk(run.plan, [0, 1, 2], [run.plan.spec_id(i) for i in (0, 1, 2)])
        driver._worker_failed(store, run, chunk, "ActorDiedError: boom")
        assert list(run.singles) == [0, 1, 2] and run.result.failed == 0  # split, retried alone
        run.singles.clear()
        single = _Chunk(run.plan, [1], [run.plan.spec_id(1)])
        driver._worker_failed(store, run, single, "ActorDiedError: boom")  # attempt 2
        assert list(run.singles) == [1]
        driver._worker_failed(store, run, single, "ActorDiedError: boom")  # attempt 3 = max
        assert run.result.failed == 1
        (record,) = store.records(system="sys-a", outcome="failed")
        assert record.spec_id == run.plan.spec_id(1)
        assert "died or failed 3 times" in record.reason and "boom" in record.reason


# -- on the cluster ------------------------------------------------------------------------------


def test_every_record_is_measured_on_its_systems_node_and_a_second_run_measures_nothing(
    cluster, tmp_path: Path, two_models
) -> None:
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    cfg = fleet_config(two_models, db)
    first = run_fleet(cfg).to_dict()
    assert first["failed"] == 0 and first["reused"] == 0 and first["measured"] > 0
    per_system = {s: first["systems"][s] for s in SYSTEMS}
    assert len({s["total"] for s in per_system.values()}) == 1  # same corpus everywhere
    assert all(s["measured"] == s["total"] and s["error"] is None for s in per_system.values())
    owner = nodes_of()
    with open_store(db) as store:
        records = store.records()
        assert len(records) == first["measured"]
        for r in records:
            assert owner[r.settings["placement"]["node_id"]] == r.system
        assert {s["name"] for s in store.systems()} == set(SYSTEMS)
    second = run_fleet(cfg).to_dict()
    assert second["measured"] == 0 and second["failed"] == 0
    assert second["reused"] == first["measured"]


def test_without_batch_sizes_each_model_runs_at_its_own_and_the_bounds_are_the_runs(
    cluster, tmp_path: Path, build_model
) -> None:
    """A file fixed at batch 2 whose export baked its batch into a Reshape target (frames of a video folded into
    the batch: 2x4 -> 8): the fleet's default batch 1 rewrote its input (a Reshape that fails); left out of the
    config, each model is planned at its own batch. The run's bounds are each model's at the batch it planned it
    at: not every one stored of it, nor another model's (an earlier run measured both at 2, and the one fixed
    at 1 is at 1 in this run)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    from benanza.fleet.bounds import run_lower_bounds

    path = tmp_path / "frames.onnx"
    onnx.save(
        build_model(
            [
                helper.make_node("Relu", ["x"], ["r"]),
                helper.make_node("Reshape", ["r", "folded"], ["y"]),
            ],
            [("x", TensorProto.FLOAT, [2, 4, 6])],
            [("y", TensorProto.FLOAT, None)],
            initializers={"folded": np.array([8, 6], np.int64)},
        ),
        path,
    )
    one = tmp_path / "one.onnx"
    onnx.save(
        build_model(
            [helper.make_node("Relu", ["x"], ["y"])],
            [("x", TensorProto.FLOAT, [1, 6])],
            [("y", TensorProto.FLOAT, None)],
        ),
        one,
    )
    db = f"sqlite:///{tmp_path / 'own.db'}"
    earlier = fleet_config([path, one], db, systems=("sys-a",), batch_sizes=[2])
    assert run_fleet(earlier).to_dict()["measured"] > 0
    cfg = fleet_config([path, one], db, systems=("sys-a",))
    summary = run_fleet(cfg)
    assert summary.to_dict()["failed"] == 0 and summary.model_errors == []
    assert summary.planned == tuple(sorted([(str(path), 2), (str(one), 1)]))
    with open_store(db) as store:
        rows = run_lower_bounds(store, cfg, summary)
    # the null runtime has no kernel times (no coverage): the real runtime's is ``benanza run``'s test
    found = sorted((r.model, r.batch_size, r.e2e_ms is not None) for r in rows)
    assert found == [("frames", 2, True), ("one", 1, True)]


@pytest.mark.slow
def test_a_local_cluster_listens_on_loopback_only_and_refuses_a_driver_without_its_token(
    cluster, tmp_path: Path, two_models
) -> None:
    """The simulated cluster (head, one node per system, their workers) during a run: loopback only, token required."""
    import psutil

    cfg = fleet_config(two_models[:1], f"sqlite:///{tmp_path / 'l.db'}", systems=("sys-a",), harness=SLOW)
    runner = threading.Thread(target=run_fleet, args=(cfg,))
    runner.start()
    seen: set[tuple[int, str, str, int]] = set()
    while runner.is_alive():
        seen |= listening_sockets([psutil.Process()])
        time.sleep(0.1)
    runner.join()
    names = " ".join(name for _, name, _, _ in seen)
    # the head and at least one worker process were sampled while they listened; a worker's title is
    # ``ray::SystemWorker...`` while it runs the actor, ``ray::IDLE`` before (a fresh clone's fast run
    # was sampled only then, once in two sessions)
    assert names.count("gcs_server") >= 1 and "ray::" in names, seen
    exposed = sorted((name, ip, port) for _, name, ip, port in seen if off_loopback(ip))
    assert not exposed, f"Ray listens off loopback: {exposed}"
    # a driver without the cluster's token is turned away, in one line that says what to do
    env = cli_env(RAY_NUM_REDIS_GET_RETRIES="2", HOME=str(tmp_path))  # no ~/.ray/auth_token either
    config = tmp_path / "fleet.toml"
    harness = "\n".join(f"{k} = {json.dumps(v)}" for k, v in FAST.items())
    config.write_text(
        f'models = ["{two_models[0]}"]\ndb = "sqlite:///{tmp_path / "l2.db"}"\n[harness]\n{harness}\n'
        '[[systems]]\nname = "sys-a"\nruntimes = ["null"]\n'
    )
    cmd = [sys.executable, "-m", "benanza", "fleet", "run", str(config), "--address", cluster.address, "-q"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]  # Ray logs its retries too
    assert len(errors) == 1 and done.stderr.strip().endswith(errors[0]), done.stderr[-3000:]
    assert cluster.address in errors[0] and "no token was found" in errors[0] and "RAY_AUTH_TOKEN_PATH" in errors[0]


def scrape_benanza_metrics() -> dict[tuple[str, str], float]:
    """``(metric, system) -> value`` summed over every node's Prometheus endpoint (Ray's metrics agents)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    values: dict[tuple[str, str], float] = {}
    for node in ray.nodes():
        if not node["Alive"]:
            continue
        url = f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.startswith("ray_benanza_") and "system" in sample.labels:
                    key = (sample.name, sample.labels["system"])
                    values[key] = values.get(key, 0.0) + sample.value
    return values


@pytest.mark.slow
def test_the_ray_metrics_endpoint_shows_each_systems_benchmark_counters(cluster, tmp_path: Path, two_models) -> None:
    """Ray's dashboard monitoring: what a Prometheus scraping the nodes sees of a real run, per system."""
    done = ("ray_benanza_benchmarks_done_total", "sys-c")
    before = scrape_benanza_metrics().get(done, 0.0)  # the module's cluster may have run sys-c already
    cfg = fleet_config(two_models[:1], f"sqlite:///{tmp_path / 'metrics.db'}", systems=("sys-c",))
    measured = run_fleet(cfg).to_dict()["systems"]["sys-c"]["measured"]
    assert measured > 0
    seen: dict[tuple[str, str], float] = {}
    deadline = time.monotonic() + 60  # Ray exports every few seconds
    while time.monotonic() < deadline:
        seen = scrape_benanza_metrics()
        # the workers' counter and the driver's gauge are exported by different processes, each every few
        # seconds: a scrape can show the final count beside a gauge from before the last chunk came back
        if seen.get(done, 0.0) - before == measured and seen.get(("ray_benanza_benchmarks_queued", "sys-c")) == 0:
            break
        time.sleep(1)
    assert seen.get(done, 0.0) - before == measured, seen
    assert seen.get(("ray_benanza_benchmarks_queued", "sys-c")) == 0, seen  # the driver's gauge: nothing left


def test_a_system_notes_the_re_measures_its_budgets_declined(cluster, tmp_path: Path, two_models) -> None:
    """Every measurement disturbed (a CPU share no process reaches) and no budget for re-measures: the system's
    notes say how many were not measured again, and its stored records are marked with why."""
    db = f"sqlite:///{tmp_path / 'budget.db'}"
    harness = {**FAST, "min_cpu_share": 4.0, "remeasure_share": 0.0, "remeasure_reserve_s": 0.0}
    out = run_fleet(fleet_config(two_models[:1], db, systems=("sys-a",), harness=harness)).to_dict()
    system = out["systems"]["sys-a"]
    assert system["measured"] > 0 and system["failed"] == 0
    (note,) = [n for n in system["notes"] if "were not measured again" in n]
    assert re.match(r"[1-9]\d* disturbed measurement\(s\) were not measured again, 0 were: re-measures spent 0 s", note)
    with open_store(db, create=False) as store:
        records = store.records(system="sys-a")
    assert len(records) == system["measured"] == system["disturbed"] == out["disturbed"]
    assert all(r.stats.disturbed and "not measured again" in r.stats.disturbed_reason for r in records)


@pytest.mark.timeout(120)  # a hang guard: an actor whose system has no node would stay pending forever
def test_a_system_without_a_node_is_reported_at_once(cluster, tmp_path: Path, two_models) -> None:
    cfg = fleet_config(two_models[:1], f"sqlite:///{tmp_path / 'g.db'}", systems=("sys-a", "ghost"))
    out = run_fleet(cfg).to_dict()
    assert "no alive Ray node carries" in out["systems"]["ghost"]["error"]
    assert out["systems"]["ghost"]["measured"] == 0
    assert out["systems"]["sys-a"]["measured"] == out["systems"]["sys-a"]["total"] > 0


def test_an_actor_killed_mid_run_loses_and_duplicates_nothing(cluster, tmp_path: Path, two_models) -> None:
    """Not a record, and not what the killed process's re-measure budget declined: with every measurement
    disturbed and no budget, one at a time, each record's measurement was declined once, by whichever
    worker process measured it, and the system's note counts them all."""
    db = f"sqlite:///{tmp_path / 'k.db'}"
    no_budget = {"min_cpu_share": 4.0, "remeasure_share": 0.0, "remeasure_reserve_s": 0.0}
    harness = {**SLOW, "schedule": "sequential", **no_budget}
    cfg = fleet_config(two_models[:1], db, systems=("sys-b",), harness=harness, chunk_size=4)
    killed: list[int] = []

    def kill_when_started() -> None:
        deadline = time.monotonic() + 60
        with open_store(db) as store:
            while time.monotonic() < deadline:
                records = store.records(system="sys-b") if Path(db[10:]).exists() else []
                if len(records) >= 4:
                    pid = records[0].settings["placement"]["pid"]
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    return
                time.sleep(0.05)

    killer = threading.Thread(target=kill_when_started)
    killer.start()
    out = run_fleet(cfg).to_dict()
    killer.join()
    assert killed, "the worker was never killed"
    s = out["systems"]["sys-b"]
    assert s["failed"] == 0 and s["measured"] == s["total"]  # every spec once: retried, not lost, not doubled
    with open_store(db) as store:
        records = store.records(system="sys-b")
    assert len(records) == s["total"] == len({r.spec_id for r in records})
    pids = Counter(r.settings["placement"]["pid"] for r in records)
    # a fresh worker process finished the work. The killed one's records may all be gone: killed after
    # writing a chunk but before returning it, that chunk is measured again and its records replaced
    assert set(pids) - {killed[0]}, pids
    assert all(r.stats.disturbed and "not measured again" in r.stats.disturbed_reason for r in records)
    assert s["disturbed"] == s["total"]  # each spec's latest record counts once, whichever process measured it
    (note,) = [n for n in s["notes"] if "were not measured again" in n]
    assert note.startswith(f"{s['total']} disturbed measurement(s) were not measured again, 0 were"), (note, pids)


def test_two_drivers_on_the_same_plan_measure_each_spec_once(cluster, tmp_path: Path, two_models) -> None:
    db = f"sqlite:///{tmp_path / 'two.db'}"
    open_store(db).close()
    cfg = fleet_config(two_models[:1], db, systems=("sys-a", "sys-c"), harness=SLOW, chunk_size=2, cpus=0.5)
    outs: list[dict] = []
    threads = [threading.Thread(target=lambda: outs.append(FleetDriver(cfg).run().to_dict())) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(outs) == 2
    for system in ("sys-a", "sys-c"):
        total = outs[0]["systems"][system]["total"]
        measured = [o["systems"][system]["measured"] for o in outs]
        assert sum(measured) == total, measured  # no spec measured by both drivers
        assert all(o["systems"][system]["failed"] == 0 for o in outs)
    with open_store(db) as store:
        assert not store.leases()  # every lease released


def wait_for_no_workers(timeout_s: float = 60) -> None:
    """Until no process of this machine is a ``SystemWorker`` actor (Ray titles them ``ray::SystemWorker...``)."""
    import psutil

    def workers() -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            if any(part.startswith("ray::SystemWorker") for part in proc.info["cmdline"] or ()):
                found.append(proc)
        return found

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not workers():
            return
        time.sleep(0.2)
    pytest.fail(f"SystemWorker actors still alive after {timeout_s:.0f} s")


@pytest.mark.slow
def test_a_killed_driver_restarted_finishes_only_the_rest_without_waiting_out_old_leases(
    cluster, tmp_path: Path, two_models
) -> None:
    """SIGKILL a driver mid-run: its leases lapse a few heartbeats later, and the rerun does only the rest.

    Under the default interleaved schedule a chunk is one model's benchmarks (``chunk_by_model``),
    and the actor holds the next chunk's leases while it measures one: with two models, the driver
    is killed once the first model's results are stored, while the second's are leased.
    """
    db = f"sqlite:///{tmp_path / 'd.db'}"
    config = tmp_path / "fleet.toml"
    config.write_text(  # the default lease_s: what a user gets
        "\n".join(
            [
                f"models = {json.dumps([str(m) for m in two_models])}",
                f'db = "{db}"',
                "chunk_size = 4",
                "[harness]",
                *(f"{k} = {json.dumps(v)}" for k, v in SLOW.items()),
                "[[systems]]",
                'name = "sys-a"',
                'runtimes = ["null"]',
            ]
        )
    )
    cmd = [sys.executable, "-m", "benanza", "fleet", "run", str(config), "--address", cluster.address, "-q"]
    cmd += ["--format", "json"]
    # the cluster's token in a file, as the README tells users joining a cluster to do
    token = tmp_path / "ray-token"
    token.touch(mode=0o600)
    # the one this process's cluster was given, or the user's own where Ray found one (``new_cluster_auth``)
    token.write_text(os.environ.get("RAY_AUTH_TOKEN") or (Path.home() / ".ray" / "auth_token").read_text())
    env = cli_env(RAY_AUTH_TOKEN_PATH=str(token))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, env=env)
    deadline = time.monotonic() + 90
    stored = 0
    while time.monotonic() < deadline and proc.poll() is None:
        if (tmp_path / "d.db").exists():
            with open_store(db) as store:
                stored = len(store.records(system="sys-a"))
            if stored >= 8:
                break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = time.time()
    # Ray stops a dead driver's actors a moment later; one may store its chunk meanwhile, so
    # what was stored is read once none is left
    wait_for_no_workers()
    with open_store(db) as store:
        before = {r.spec_id for r in store.records(system="sys-a")}
        orphans = store.leases()
    # the dead driver left live-looking leases behind, stamped with its id and last heartbeat
    assert orphans and len({x["owner"] for x in orphans}) == 1 and orphans[0]["owner"].startswith("driver-")
    assert all(x["heartbeat_at"] <= killed_at < x["expires_at"] for x in orphans)
    lease_s = FleetConfig.model_fields["lease_s"].default
    assert all(x["expires_at"] - x["heartbeat_at"] == pytest.approx(lease_s) for x in orphans)
    try:
        rerun = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=180)
    except subprocess.TimeoutExpired:
        pytest.fail("the rerun waited out the killed driver's leases")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    out = json.loads(rerun.stdout)["systems"]["sys-a"]
    assert 0 < len(before) < out["total"]
    assert out["reused"] == len(before)
    assert out["measured"] == out["total"] - len(before)  # the orphaned specs too, taken over
    with open_store(db) as store:
        assert len(store.records(system="sys-a")) == out["total"]
        assert not store.leases()
    # the orphans were taken over once their lease_s had run out, not before: measured after they expired
    taken = {x["spec_id"] for x in orphans} - before  # (a lease of a stored result was released by no one)
    expired = max(x["expires_at"] for x in orphans if x["spec_id"] in taken)
    with open_store(db) as store:
        measured = [datetime.fromisoformat(r.measured_at).timestamp() for r in store.records(system="sys-a")
                    if r.spec_id in taken]  # fmt: skip
    assert taken and len(measured) == len(taken) and min(measured) >= expired


def test_results_reach_mongodb_over_the_wire_and_survive_an_outage(
    cluster, tmp_path: Path, two_models, nx_27017_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store outage mid-run: workers spill, the next run imports the spill and measures nothing."""
    monkeypatch.setenv("BENANZA_DB_RETRY_WINDOW_S", "0.5")
    data = tmp_path / "mongo"
    proc, base = nx_27017_factory(data)
    port = int(base.rsplit(":", 1)[1])
    db = f"{base}/fleet?serverSelectionTimeoutMS=300"
    spill = tmp_path / "spill"
    cfg = fleet_config([two_models[0]], db, systems=("sys-c",), harness=SLOW, chunk_size=4)
    stopped = threading.Event()

    def stop_when_started() -> None:
        import pymongo

        client = pymongo.MongoClient(base, serverSelectionTimeoutMS=2000)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if client.fleet.results.count_documents({}) >= 4:
                proc.kill()
                proc.wait()
                stopped.set()
                return
            time.sleep(0.05)

    stopper = threading.Thread(target=stop_when_started)
    stopper.start()
    first = FleetDriver(cfg, spill_dir=str(spill)).run().to_dict()["systems"]["sys-c"]
    stopper.join()
    assert stopped.is_set()
    assert first["spilled"] > 0 and first["failed"] == 0
    assert first["measured"] == first["total"]
    nx_27017_factory(data, port)  # the database is back, on its data
    second = FleetDriver(cfg, spill_dir=str(spill)).run().to_dict()["systems"]["sys-c"]
    assert second["drained"] == first["spilled"]
    assert second["measured"] == 0 and second["reused"] == second["total"]
    with open_store(db) as store:
        assert len(store.records(system="sys-c")) == second["total"]


def test_workers_follow_the_drivers_settings_not_their_environment(
    cluster, tmp_path: Path, two_models, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver hands its resolved settings to every worker: a result spilled earlier to the driver's
    BENANZA_SPILL_DIR is drained by a worker whose own environment names no spill folder."""
    from test_store import record_for

    from benanza.settings import load_settings
    from benanza.store.spill import SpillFile

    monkeypatch.delenv("BENANZA_SPILL_DIR", raising=False)
    spill = tmp_path / "driver-spill"
    earlier = record_for(1, system="sys-a")
    assert SpillFile(spill / "an-earlier-worker.jsonl").append([earlier]) == 1
    db = f"sqlite:///{tmp_path / 'settings.db'}"
    settings = load_settings({"BENANZA_SPILL_DIR": str(spill), "BENANZA_KEEP_REPEATS": "0"})
    cfg = fleet_config([two_models[0]], db, systems=("sys-a",))
    out = FleetDriver(cfg, settings=settings).run().to_dict()["systems"]["sys-a"]
    assert out["error"] is None and out["drained"] == 1
    assert not list(spill.glob("*.jsonl"))  # imported, then removed
    with open_store(db) as store:
        assert earlier.spec_id in {r.spec_id for r in store.records(system="sys-a")}


def test_the_fleet_names_models_of_one_stem_apart_from_each_other_and_from_the_stored_ones(
    cluster, tmp_path: Path, conv_chain
) -> None:
    """Files written as ``<model>/model.onnx`` (onnxruntime-genai, Optimum) are stored as models of their
    own; a later run's model of that stem is named apart from the stored ones, which keep their names."""
    files = {}
    for tail in ("reshape", "maxpool"):
        (tmp_path / tail).mkdir()
        files[tail] = tmp_path / tail / "model.onnx"
        files[tail].write_bytes(conv_chain(tail).SerializeToString())
    db = f"sqlite:///{tmp_path / 'names.db'}"
    out = FleetDriver(fleet_config([files["reshape"], files["maxpool"]], db, systems=("sys-a",))).run()
    assert out.to_dict()["systems"]["sys-a"]["error"] is None
    with open_store(db) as store:
        assert sorted(m.name for m in store.model_names()) == ["maxpool/model", "reshape/model"]
        labels = {r.label for r in store.records(kind="model", payload=False)}
        assert {"reshape/model", "maxpool/model"} <= labels
    (tmp_path / "wide").mkdir()
    wide = tmp_path / "wide" / "model.onnx"
    wide.write_bytes(conv_chain("reshape", channels=8).SerializeToString())
    out = FleetDriver(fleet_config([files["reshape"], wide], db, systems=("sys-a",))).run()
    assert out.to_dict()["systems"]["sys-a"]["error"] is None
    with open_store(db) as store:
        assert sorted(m.name for m in store.model_names()) == ["maxpool/model", "reshape/model", "wide/model"]


def test_embedded_default_fleet_run_and_status_from_the_command_line(tmp_path: Path, conv_chain) -> None:
    """`benanza fleet run` with no config: in-process Ray, this machine, ONNX Runtime, SQLite."""
    cmd, env = embedded_fleet_run(tmp_path, conv_chain, max_time_s="0.05", kernel_runs="2")
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert set(out) >= {"systems", "measured", "reused", "failed"}
    laptop = out["systems"]["laptop"]
    assert laptop["measured"] == laptop["total"] == out["measured"] > 0 and laptop["stack_id"]
    # threads = "auto": the worker ran at the cores other processes left free, and says so
    (note,) = laptop["notes"]
    threads = int(note.split()[1])
    assert note.startswith("threads ") and "(auto:" in note and 1 <= threads <= (os.cpu_count() or 1)
    assert laptop["variant"] == f"ep=cpu,opt=extended,threads={threads}"
    assert f"note: laptop: {note}" in done.stderr
    assert (tmp_path / "benanza.db").exists()  # the default store, in the working directory
    # the main job ends with the model's lower bounds on this system, from what the run stored
    (bound,) = out["lower_bounds"]
    assert (bound["model"], bound["system"], bound["stack_id"]) == ("chain", "laptop", laptop["stack_id"])
    # composed from what was stored; at "auto" threads on an idle 2-core machine each of this chain's tiny
    # nodes can span no more than the profiler's own floor (2.5 us at 2 threads), so the bound may be 0
    assert bound["coverage"] == 1.0 and bound["sequential_ms"] is not None and bound["e2e_ms"] > 0
    assert set(bound["composed_ms"]) == {"1", "3"} and all(v > 0 for v in bound["composed_ms"].values())
    # every figure with its interval; the model's parts and whole sampled together (one actor call)
    intervals = bound["intervals"]
    for name in ("sequential_ms", "parallel_ms", "e2e_ms"):
        assert intervals[name]["low"] <= bound[name] <= intervals[name]["high"]
    assert set(intervals["composed_ms"]) == {"1", "3"}
    with open_store(f"sqlite:///{tmp_path / 'benanza.db'}", create=False) as store:
        records = store.records(system="laptop")
    assert {r.settings["harness"]["schedule"] for r in records} == {"interleaved"}
    assert len({r.settings["placement"]["pid"] for r in records}) == 1
    assert all(r.stats.disturbed is not None and r.stats.trimmed_mean_low is not None for r in records)
    status = subprocess.run(
        [*cmd[:4], "status", "--models", str(tmp_path / "chain.onnx"), "--format", "json"],  # benanza fleet status
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert status.returncode == 0, status.stderr[-3000:]
    (row,) = json.loads(status.stdout)
    assert row["name"] == "laptop" and row["lacks"] == 0 and row["total"] == laptop["total"]
    assert row["current_stack"] == laptop["stack_id"] and not row["changed"]


@pytest.mark.slow
def test_fleet_run_measures_stored_failures_again_only_when_asked(tmp_path: Path, conv_chain) -> None:
    """A failure stored by an earlier version (its cause fixed since) is reused until ``--retry-failed``.

    The threads are fixed: the embedded default, ``auto``, counts the cores other processes leave
    free as each run starts, and a count that changes between runs is another variant, which
    reuses nothing (a CI run measured all 9 again when the previous run's Ray was still exiting).
    """
    cmd, env = embedded_fleet_run(tmp_path, conv_chain, max_time_s="0.02", kernel_runs="2")
    config = tmp_path / "laptop.toml"
    config.write_text('[[systems]]\nname = "laptop"\nthreads = 1\n')
    cmd = [*cmd[:5], str(config), *cmd[5:]]  # benanza fleet run CONFIG --models ...

    def run(*extra: str) -> dict:
        done = subprocess.run([*cmd, *extra], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout)["systems"]["laptop"]

    first = run()
    db = tmp_path / "benanza.db"
    key = plant_failure(db)
    again = run()
    assert (again["measured"], again["reused"]) == (0, first["total"]) and layer_outcome(db, key) == "failed"
    retried = run("--retry-failed")
    assert (retried["measured"], retried["reused"]) == (1, first["total"] - 1) and layer_outcome(db, key) == "ok"


@pytest.mark.slow
def test_a_default_embedded_fleet_run_listens_on_loopback_only_and_needs_a_token(tmp_path: Path, conv_chain) -> None:
    """Every socket any Ray process of a default `fleet run` listens on, sampled while it runs, is on 127.0.0.1."""
    import psutil

    cmd, env = embedded_fleet_run(tmp_path, conv_chain, max_time_s="0.05")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, env=env)
    driver = psutil.Process(proc.pid)
    seen: set[tuple[int, str, str, int]] = set()
    auth_modes: dict[str, str | None] = {}
    log_dirs: set[str] = set()
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        seen |= listening_sockets([driver])
        for child in driver.children(recursive=True):
            try:
                if child.name() in ("gcs_server", "raylet"):
                    auth_modes[child.name()] = child.environ().get("RAY_AUTH_MODE")
                    log_dirs.update(a.split("=", 1)[1] for a in child.cmdline() if a.startswith("--log_dir="))
            except psutil.Error:
                continue
        time.sleep(0.1)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()[-3000:]
    assert json.loads(out)["measured"] > 0
    names = " ".join(name for _, name, _, _ in seen)
    assert "gcs_server" in names and "raylet" in names and "DashboardAgent" in names, seen  # the sampling saw Ray
    exposed = sorted((name, ip, port) for _, name, ip, port in seen if off_loopback(ip))
    assert not exposed, f"Ray listens off loopback: {exposed}"
    assert auth_modes == {"gcs_server": "token", "raylet": "token"}
    # its files: in <tmp>/benanza-ray-<uid>/ray/session_*/logs, under a folder only this user can enter
    (log_dir,) = log_dirs
    private = Path(log_dir).parents[2]
    assert private.name == f"benanza-ray-{os.getuid()}", log_dir
    assert private.stat().st_mode & 0o777 == 0o700 and private.stat().st_uid == os.getuid()


def test_bad_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[[systems]]\nname = 'x'\nthreads = 0\n")
    done = subprocess.run(
        [sys.executable, "-m", "benanza", "fleet", "run", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env(),
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "bad.toml" in lines[0] and "threads" in lines[0]


def test_a_model_that_cannot_be_processed_is_reported_and_the_corpus_goes_on(tmp_path: Path, two_models) -> None:
    from benanza.fleet.driver import plan_corpus

    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not a model")
    cfg = fleet_config([bad, two_models[0]], f"sqlite:///{tmp_path / 'c.db'}", systems=("sys-a",))
    corpus = plan_corpus(cfg)
    assert corpus.models == 1
    ((error),) = corpus.model_errors
    assert error["model"] == str(bad) and "broken.onnx" in error["error"]
    (work,) = corpus.by_runtime().values()
    assert work.runtime == "null" and len(work.templates) > 0


def test_a_worker_measures_its_chunk_interleaved_when_the_harness_says_so(tmp_path: Path) -> None:
    from benanza.bench.spec import BenchmarkSpec, SpecKind
    from benanza.fleet.worker import SystemWorker

    db = f"sqlite:///{tmp_path / 'w.db'}"
    harness = {**FAST, "schedule": "interleaved"}
    worker = SystemWorker(SystemConfig(name="sys-i", runtimes=["null"]).model_dump(mode="json"), db, harness)
    variant = tuple(worker.targets["null"]["variant"].items())
    specs = [
        BenchmarkSpec(SpecKind.LAYER, f"key{i:013d}", 1, "float32", "null", variant=variant).to_dict() for i in range(5)
    ]
    out = worker.run(specs)
    assert set(out["outcomes"].values()) == {"ok"} and out["stored"] == 5
    with open_store(db) as store:
        records = store.records(system="sys-i")
    assert len(records) == 5
    assert {r.settings["harness"]["schedule"] for r in records} == {"interleaved"}
    assert len({r.stats.n for r in records}) == 1  # one sample of each per round


def test_a_worker_at_auto_threads_keeps_the_count_its_systems_stored_results_use(tmp_path: Path) -> None:
    """A system whose results were stored at 1 thread, opened again with ``threads = "auto"``: it runs at 1
    (fewer than the free cores), so the driver's plan reuses them; its note says why."""
    from test_store import record_for

    from benanza.bench.host_cpu import free_cores_once, kept_note
    from benanza.fleet.worker import SystemWorker

    db = f"sqlite:///{tmp_path / 'kept.db'}"

    def worker(threads: int | str) -> SystemWorker:
        return SystemWorker(SystemConfig(name="sys-k", threads=threads).model_dump(mode="json"), db, FAST)

    first = worker(1)
    (entry,) = first.targets.values()
    assert entry["variant"]["threads"] == 1 and entry["new_stack"]
    with open_store(db) as store:
        store.upsert([record_for(1, system="sys-k", stack_id=entry["stack_id"], variant=entry["variant"])])
    first.close()
    again = worker("auto")
    (kept,) = again.identity()["targets"].values()
    chosen = free_cores_once()
    assert kept["variant"] == entry["variant"] and kept["stack_id"] == entry["stack_id"] and not kept["new_stack"]
    assert kept["notes"] == [kept_note(1, chosen) if chosen.threads > 1 else chosen.note()]
    again.close()


def test_one_runtime_in_two_variants_on_a_system_stores_both_and_status_sees_both(
    cluster, tmp_path: Path, conv_chain
) -> None:
    """Runtime entries with options ("onnxruntime:threads=1"): each is a variant of the same stack."""
    import onnx

    from benanza.fleet.driver import plan_corpus
    from benanza.fleet.status import fleet_status

    model = tmp_path / "chain.onnx"
    onnx.save(conv_chain(), model)
    db = f"sqlite:///{tmp_path / 'v.db'}"
    entries = ["onnxruntime:threads=1", "onnxruntime:threads=2"]
    cfg = FleetConfig(
        systems=[SystemConfig(name="sys-a", runtimes=entries)], models=[model], db=db, harness=FAST, chunk_size=4
    )
    first = run_fleet(cfg).to_dict()["systems"]["sys-a"]
    assert first["error"] is None and first["measured"] == first["total"] > 0
    with open_store(db) as store:
        records = store.records(system="sys-a")
        by_variant = Counter(r.variant for r in records)
        (stack,) = {r.stack_id for r in records}
        plans = store.plans(system="sys-a")
    # each variant's plan is stored with it, for analysis that reads the database only
    assert sorted(p.variant for p in plans) == sorted(by_variant) and {p.stack_id for p in plans} == {stack}
    assert all(p.keys <= {r.key for r in records if r.variant == p.variant} for p in plans)
    assert len(by_variant) == 2 and len(set(by_variant.values())) == 1  # each variant measured everything
    assert sorted("threads=1" in v for v in by_variant) == [False, True]
    assert sum(by_variant.values()) == first["total"]
    again = run_fleet(cfg).to_dict()["systems"]["sys-a"]
    assert again["measured"] == 0 and again["reused"] == first["total"]
    with open_store(db) as store:
        (row,) = [s.to_dict() for s in fleet_status(store, cfg, plan_corpus(cfg))]
    assert row["lacks"] == 0 and row["total"] == first["total"] and row["current_stack"] == stack
    assert sorted(row["stacks"][0]["variant"].split(";")) == sorted(by_variant)


def test_a_runtime_entry_with_an_option_the_runtime_does_not_take_is_refused_in_the_config() -> None:
    with pytest.raises(ValueError, match="runtime 'onnxruntime' takes no option thread; it takes threads"):
        SystemConfig(name="sys-a", runtimes=["onnxruntime:thread=1"])
    with pytest.raises(ValueError, match="listed twice"):
        SystemConfig(name="sys-a", runtimes=["onnxruntime:threads=1", "onnxruntime: threads=1"])
    with pytest.raises(ValueError, match="'threads' is not option=value"):
        SystemConfig(name="sys-a", runtimes=["onnxruntime:threads"])


# -- Ray's private temp folder -------------------------------------------------------------------


@pytest.fixture
def tmp_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh stand-in for /tmp: where ``private_tmpdir`` makes ``benanza-ray-<uid>``."""
    import tempfile

    base = tmp_path / "tmp"
    base.mkdir()
    base.chmod(0o1777)  # shared, as /tmp is
    monkeypatch.setattr(tempfile, "tempdir", str(base))
    monkeypatch.delenv("RAY_TMPDIR", raising=False)
    return base


def test_ray_temp_folder_is_created_private(tmp_base: Path) -> None:
    from benanza.fleet.systems import private_tmpdir

    path = Path(private_tmpdir())
    assert path == tmp_base / f"benanza-ray-{os.getuid()}"
    st = path.lstat()
    assert st.st_mode & 0o777 == 0o700 and st.st_uid == os.getuid()
    assert private_tmpdir() == str(path)  # an existing private one is reused


def test_a_planted_symlink_as_ray_temp_folder_is_refused(tmp_base: Path, tmp_path: Path) -> None:
    from benanza.errors import UsageError
    from benanza.fleet.systems import private_tmpdir

    target = tmp_path / "attacker"
    target.mkdir(mode=0o777)
    planted = tmp_base / f"benanza-ray-{os.getuid()}"
    planted.symlink_to(target)
    with pytest.raises(UsageError, match="symbolic link") as caught:
        private_tmpdir()
    assert str(planted) in str(caught.value) and "\n" not in str(caught.value)
    assert planted.is_symlink() and not any(target.iterdir())  # nothing followed, nothing written


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_ray_temp_folder_of_another_user_is_refused(tmp_base: Path) -> None:
    from benanza.errors import UsageError
    from benanza.fleet.systems import private_tmpdir

    planted = tmp_base / f"benanza-ray-{os.getuid()}"
    planted.mkdir(mode=0o700)
    os.chown(planted, 12345, 12345)
    with pytest.raises(UsageError, match="belongs to uid 12345") as caught:
        private_tmpdir()
    assert str(planted) in str(caught.value)
    assert planted.stat().st_uid == 12345


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_readable_ray_temp_folder_of_ours_is_closed_unless_another_user_put_something_in_it(tmp_base: Path) -> None:
    from benanza.errors import UsageError
    from benanza.fleet.systems import private_tmpdir

    ours = tmp_base / f"benanza-ray-{os.getuid()}"
    ours.mkdir()
    ours.chmod(0o755)  # what older versions made
    (ours / "ray").mkdir()
    (ours / "ray").chmod(0o777)  # Ray's own
    intruder = ours / "ray" / "ray_current_cluster"
    intruder.write_text("10.0.0.66:6379")
    os.chown(intruder, 12345, 12345)
    with pytest.raises(UsageError, match="belongs to another user"):
        private_tmpdir()
    assert ours.stat().st_mode & 0o777 == 0o755  # refused, not changed
    intruder.unlink()
    assert private_tmpdir() == str(ours)
    assert ours.stat().st_mode & 0o777 == 0o700  # repaired


def test_a_ray_temp_folder_others_can_write_to_is_refused_and_fleet_run_says_so(tmp_base: Path, zoo_path) -> None:
    planted = tmp_base / f"benanza-ray-{os.getuid()}"
    planted.mkdir()
    planted.chmod(0o777)
    env = cli_env(TMPDIR=str(tmp_base))
    env.pop("RAY_TMPDIR", None)
    db = f"sqlite:///{tmp_base.parent / 'x.db'}"
    cmd = [sys.executable, "-m", "benanza", "fleet", "run", "--models", str(zoo_path("squeezenet")), "--db", db, "-q"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert (
        done.stderr.strip()
        == f"error: {planted}: refused as Ray's temp folder: others can write to it (mode 777); remove it"
    )
    assert planted.stat().st_mode & 0o777 == 0o777 and not any(planted.iterdir())


# -- exit status: non-zero when nothing asked for was measured -----------------------------------


def fleet_cli(*args: object, env: dict[str, str] | None = None):
    """``benanza fleet ARGS`` through typer's CliRunner (stdout and stderr apart)."""
    from typer.testing import CliRunner

    from benanza.cli import app

    return CliRunner().invoke(app, ["fleet", *map(str, args)], env={"BENANZA_SYSTEM": "laptop", **(env or {})})


def test_fleet_run_of_only_invalid_models_exits_2_with_a_line_per_model(tmp_path: Path) -> None:
    bad = [tmp_path / "broken.onnx", tmp_path / "empty.onnx"]
    bad[0].write_bytes(b"not a model")
    bad[1].write_bytes(b"")
    db = f"sqlite:///{tmp_path / 'x.db'}"
    done = fleet_cli("run", "--models", bad[0], "--models", bad[1], "--db", db, "-q", "--format", "json")
    assert done.exit_code == 2, done.output
    errors = done.stderr.strip().splitlines()
    assert len(errors) == 2 and all(line.startswith("error: ") for line in errors), errors
    assert [str(p) in line for p, line in zip(bad, errors, strict=True)] == [True, True]
    out = json.loads(done.stdout)
    assert out["ok"] is False and out["measured"] == out["reused"] == 0
    assert [p.removeprefix("error: ") for p in errors] == out["problems"]


def test_fleet_run_with_a_shape_of_no_input_exits_2_and_says_which(tmp_path: Path, zoo_path) -> None:
    db = f"sqlite:///{tmp_path / 'x.db'}"
    done = fleet_cli("run", "--models", zoo_path("squeezenet"), "--shape", "nope=1x3x224x224", "--db", db, "-q")
    assert done.exit_code == 2, done.output
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and "light_squeezenet.onnx" in line and "unknown input(s) nope" in line


def fleet_toml(tmp_path: Path, systems: tuple[str, ...], db: str) -> Path:
    config = tmp_path / "fleet.toml"
    harness = "\n".join(f"{k} = {json.dumps(v)}" for k, v in FAST.items())
    entries = "".join(f'[[systems]]\nname = "{s}"\nruntimes = ["null"]\n' for s in systems)
    config.write_text(f'db = "{db}"\n[harness]\n{harness}\n{entries}')
    return config


def test_fleet_run_where_no_system_has_a_node_exits_2_with_a_line_per_system(cluster, tmp_path: Path, two_models):
    config = fleet_toml(tmp_path, ("ghost", "phantom"), f"sqlite:///{tmp_path / 'g.db'}")
    done = fleet_cli("run", config, "--models", two_models[0], "-q", "--format", "json")
    assert done.exit_code == 2, done.output
    errors = done.stderr.strip().splitlines()
    assert errors == [
        "error: system ghost: no alive Ray node carries the label system=ghost and resource system:ghost",
        "error: system phantom: no alive Ray node carries the label system=phantom and resource system:phantom",
    ]
    assert json.loads(done.stdout)["problems"] == [e.removeprefix("error: ") for e in errors]


def test_fleet_run_that_measures_something_exits_0_and_reports_what_failed(cluster, tmp_path: Path, two_models):
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    config = fleet_toml(tmp_path, ("sys-a", "ghost"), f"sqlite:///{tmp_path / 'p.db'}")
    done = fleet_cli("run", config, "--models", two_models[0], "--models", broken, "-q", "--format", "json")
    assert done.exit_code == 0, done.output
    out = json.loads(done.stdout)
    assert out["ok"] is True and out["systems"]["sys-a"]["measured"] > 0
    warnings = done.stderr.strip().splitlines()
    assert len(warnings) == 2 and all(line.startswith("warning: ") for line in warnings), warnings
    assert str(broken) in warnings[0] and warnings[1].startswith("warning: system ghost: no alive Ray node")
    assert out["problems"] == [w.removeprefix("warning: ") for w in warnings]
    again = fleet_cli("run", config, "--models", two_models[0], "-q", "--format", "json")  # all reused: a success
    assert again.exit_code == 0 and json.loads(again.stdout)["reused"] > 0
