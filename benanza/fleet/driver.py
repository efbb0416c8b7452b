"""The fleet driver: plan the corpus for every system, lease the work, run it on pinned actors.

``run_fleet`` does, in order:

1. plan the corpus once per runtime (``CorpusWork``: unique layers, execution groups,
   DLBricks sequences and whole models, per batch size) with the local runtime's view of
   execution groups; a model that cannot be processed is reported and the rest goes on;
2. connect to Ray (``fleet.systems.connect``), find each system's nodes, report systems with
   none, and start one actor per device pinned to them (``SystemWorker``);
3. ask the store what each system's current stack already holds, and plan only the rest;
4. hand out work in chunks: each chunk is first *claimed* in the store (a lease with this
   driver's id and heartbeat), so two drivers on the same plan never measure the same spec;
   what another driver holds is retried once its lease ends or its result is stored. While
   it dispatches, a background thread renews all of the driver's leases every
   ``lease_s / 3`` (``LeaseHeartbeat``), however long a chunk runs;
5. actors write their own results (idempotent bulk upserts, spilled locally when the store
   is unreachable); the driver shows progress per system and exports Ray metrics.

Faults: an actor process that dies is restarted by Ray and its call retried once; a chunk
that still fails is split and each spec retried alone, up to ``max_attempts`` times, then
stored as failed with the error. A driver that dies stops heartbeating, so its leases are
anyone's ``lease_s`` seconds later (three missed heartbeats); the next run plans only what is
missing and takes the dead driver's leases over once they lapse.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benanza.bench.execute import interleave_max_specs, reusable_spec_ids
from benanza.bench.generate import ModelPlan, plan_model_file, plan_report, specs_for_plan, with_distinct_names
from benanza.bench.harness import HarnessSettings
from benanza.bench.plans import StoredPlan
from benanza.bench.records import Outcome, make_record
from benanza.bench.remeasure import remeasure_note
from benanza.bench.spec import BenchmarkSpec
from benanza.config import FleetConfig, SystemConfig, runtime_entry
from benanza.errors import BenanzaError, StoreError, UsageError, one_line
from benanza.fleet.plan import CorpusWork, SystemPlan, Target, plan_target
from benanza.fleet.systems import actor_options, connect, devices_of, missing_node_reason, system_nodes
from benanza.fleet.worker import SystemWorker
from benanza.model.names import NamedModel
from benanza.runtimes.base import get_runtime
from benanza.settings import Settings, load_settings
from benanza.store.base import Store, default_uri, open_store

log = logging.getLogger(__name__)

ProgressHook = Callable[[str, str, int], None]  # (system, event, count): event in total/ok/failed/skipped/reused


@dataclass
class SystemResult:
    """What one system did in this run."""

    name: str
    stack_id: str | None = None
    new_stack: bool | None = None
    measured: int = 0
    reused: int = 0
    failed: int = 0
    skipped: int = 0
    spilled: int = 0
    drained: int = 0
    total: int = 0
    nodes: list[str] = field(default_factory=list)
    actors: int = 0
    unleased: int = 0  # run without a lease because the store could not grant one
    error: str | None = None
    variant: str | None = None  # the variant its figures are measured at (its first runtime entry's)
    notes: list[str] = field(default_factory=list)  # what its runtimes decided when they were built
    _marks: dict[str, bool] = field(default_factory=dict, repr=False)  # spec id -> its latest record is disturbed

    def mark(self, marks: dict[str, bool]) -> None:
        """The disturbed marks of records a worker returned: the latest record of a spec counts (a group
        measured again replaces its first records)."""
        self._marks.update(marks)

    @property
    def disturbed(self) -> int:
        """Of the records this run measured, those marked disturbed."""
        return sum(self._marks.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "stack_id": self.stack_id,
            "new_stack": self.new_stack,
            "measured": self.measured,
            "disturbed": self.disturbed,
            "reused": self.reused,
            "failed": self.failed,
            "skipped": self.skipped,
            "spilled": self.spilled,
            "drained": self.drained,
            "total": self.total,
            "nodes": self.nodes,
            "actors": self.actors,
            "unleased": self.unleased,
            "error": self.error,
            "variant": self.variant,
            "notes": self.notes,
        }


@dataclass
class FleetSummary:
    systems: dict[str, SystemResult]
    models: int
    model_errors: list[dict[str, str]]
    duration_s: float = 0.0
    dispatch_s: float = 0.0  # from the first lease to the last result
    plan_report: dict[str, list[dict[str, str]]] = field(default_factory=dict)  # ``generate.plan_report``
    planned: tuple[tuple[str, int], ...] = ()  # ``CorpusPlan.planned``

    def count(self, what: str) -> int:
        return sum(getattr(s, what) for s in self.systems.values())

    @property
    def ok(self) -> bool:
        """Whether anything asked for was measured or found measured already (the run's exit status)."""
        return self.count("measured") + self.count("reused") > 0

    def problems(self) -> list[str]:
        """One line per model and per system that could not be benchmarked, with the reason.

        When nothing was measured or reused, the list is never empty: it says why.
        """
        lines = [
            e["error"] if e["error"].startswith(e["model"]) else f"{e['model']}: {e['error']}"
            for e in self.model_errors
        ]
        lines += [f"system {name}: {s.error}" for name, s in self.systems.items() if s.error]
        if not self.ok and not lines:
            failed = self.count("failed")
            if failed:
                lines.append(f"all {failed} benchmarks failed (stored with their reasons; benanza db ls lists them)")
            else:
                lines.append(f"nothing to benchmark in {self.models} model{'s' if self.models != 1 else ''}")
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {
            "systems": {name: s.to_dict() for name, s in self.systems.items()},
            "measured": self.count("measured"),
            "disturbed": self.count("disturbed"),
            "reused": self.count("reused"),
            "failed": self.count("failed"),
            "skipped": self.count("skipped"),
            "spilled": self.count("spilled"),
            "models": self.models,
            "model_errors": self.model_errors,
            "not_benchmarked": self.plan_report.get("not_benchmarked", []),
            "planning_warnings": self.plan_report.get("planning_warnings", []),
            "planning_notes": self.plan_report.get("planning_notes", []),
            "ok": self.ok,
            "problems": self.problems(),
            "duration_s": round(self.duration_s, 3),
            "dispatch_s": round(self.dispatch_s, 3),
        }


# -- planning ----------------------------------------------------------------------------------


def _planning_key(system: SystemConfig, entry: str) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """A runtime entry's name and the options that change how the corpus is planned (threads do not)."""
    options = system.runtime_options(entry)
    options.pop("threads", None)
    return runtime_entry(entry)[0], tuple(sorted(options.items()))


@dataclass
class CorpusPlan:
    """The corpus planned for every runtime the fleet's systems use."""

    works: dict[tuple, CorpusWork]  # by planning key (``_planning_key``)
    models: int  # models planned
    model_errors: list[dict[str, str]]  # models that could not be processed, with the reason
    runtime_errors: dict[tuple, str]  # planning keys whose runtime is not available here
    plan_report: dict[str, list[dict[str, str]]] = field(default_factory=dict)  # nodes not benchmarked, notes
    # (model file, batch size) of each plan: each model's own batch where none was asked
    planned: tuple[tuple[str, int], ...] = ()

    def by_runtime(self) -> dict[str, CorpusWork]:
        """Work by runtime name (one planning key per runtime name in the usual configs)."""
        return {key[0]: work for key, work in self.works.items()}

    def work_of(self, system: SystemConfig, entry: str) -> CorpusWork | None:
        """The work of one of ``system``'s runtime entries; None where its runtime is unavailable here."""
        return self.works.get(_planning_key(system, entry))


def plan_corpus(config: FleetConfig, known: Callable[[], Iterable[NamedModel]] = tuple) -> CorpusPlan:
    """Process each model once per batch size and plan it for every runtime the systems use.

    ``known``: reads the models the store has named (``Store.model_names``), once, when a
    model was planned: the corpus's models are named apart from them (``benanza.model.names``).
    """
    runtimes: dict[tuple, Any] = {}
    runtime_errors: dict[tuple, str] = {}
    for key in sorted({_planning_key(s, rt) for s in config.systems for rt in s.runtimes}, key=repr):
        try:
            runtimes[key] = get_runtime(key[0], **dict(key[1]))
        except (BenanzaError, ImportError) as exc:
            runtime_errors[key] = one_line(exc)
    specs: dict[tuple, list[BenchmarkSpec]] = {key: [] for key in runtimes}
    owners: dict[tuple, list[int]] = {key: [] for key in runtimes}  # per spec, the model it came from
    stored: dict[tuple, list[StoredPlan]] = {key: [] for key in runtimes}
    request = config.binding_request()
    paths = config.model_paths()
    model_errors: list[dict[str, str]] = []
    planned: list[list[list[ModelPlan]]] = []  # per model file, per runtime, per batch size
    for path in paths:
        try:
            planned.append(
                plan_model_file(
                    path,
                    list(runtimes.values()),
                    config.batches(),
                    request,
                    config.granularities,
                    fits_here=False,
                )
            )
        except BenanzaError as exc:  # reported; the rest of the corpus goes on
            model_errors.append({"model": str(path), "error": one_line(exc)})
    if planned:  # every runtime's plans of a file are named alike: the names come from the first's
        firsts = [plan for per_runtime in planned for plan in per_runtime[0]]
        names = iter(p.model for p in with_distinct_names(firsts, known()))
        planned = [_renamed(per_runtime, [next(names) for _ in per_runtime[0]]) for per_runtime in planned]
    plans: list[ModelPlan] = []
    for per_runtime in planned:
        for key, model_plans in zip(runtimes, per_runtime, strict=True):
            runtime = runtimes[key]
            name, defaults, exported = runtime.name, runtime.runtime_defaults() is not None, runtime.runs_exported()
            found = [
                s
                for plan in model_plans
                for s in specs_for_plan(plan, name, {}, e2e=config.e2e, defaults=defaults, exported=exported)
            ]
            specs[key].extend(found)
            owners[key].extend([len(plans) + 1] * len(found))
            stored[key].extend(StoredPlan.of(plan, name, "", exported=exported) for plan in model_plans)
        plans.extend(plan for model_plans in per_runtime for plan in model_plans)
    works = {key: _work(runtimes[key].name, found, owners[key], stored[key]) for key, found in specs.items()}
    pairs = tuple(sorted({(p.path, p.batch_size) for p in plans}))
    return CorpusPlan(works, len(paths) - len(model_errors), model_errors, runtime_errors, plan_report(plans), pairs)


def _renamed(per_runtime: list[list[ModelPlan]], names: Sequence[str]) -> list[list[ModelPlan]]:
    """A file's plans (per runtime, per batch size) with their models named ``names`` (per batch size)."""
    return [[p.named(n) for p, n in zip(plans, names, strict=True)] for plans in per_runtime]


def _work(
    runtime: str, specs: Sequence[BenchmarkSpec], owners: Sequence[int], plans: Sequence[StoredPlan]
) -> CorpusWork:
    """Unique templates in order, each with the first model that needs it, and the plans they come from."""
    first: dict[str, tuple[BenchmarkSpec, int]] = {}
    for spec, owner in zip(specs, owners, strict=True):
        first.setdefault(spec.spec_id, (spec, owner))
    return CorpusWork(runtime, tuple(s for s, _ in first.values()), tuple(plans), tuple(o for _, o in first.values()))


# -- running -----------------------------------------------------------------------------------


class LeaseHeartbeat:
    """Renews every lease of ``owner`` from a background thread, every ``ttl_s / 3``, while in use.

    A heartbeat the store cannot take is logged and tried again at the next beat; the leases
    stay valid until ``ttl_s`` after the last one that succeeded.
    """

    def __init__(self, store: Store, owner: str, ttl_s: float) -> None:
        self.store, self.owner, self.ttl_s = store, owner, ttl_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-heartbeat-{owner}", daemon=True)

    def __enter__(self) -> LeaseHeartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                self.store.heartbeat(self.owner, self.ttl_s)
            except BenanzaError as exc:
                log.warning("cannot renew this driver's leases: %s", one_line(exc))


@dataclass
class _Actor:
    system: str
    handle: Any
    inflight: int = 0
    # its worker processes' re-measure budgets, as each last returned them: process -> runtime -> budget.
    # Ray restarts a killed actor as a new process with new budgets; the old one's declines still count.
    remeasures: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)


@dataclass
class _Chunk:
    plan: SystemPlan
    indices: list[int]
    ids: list[str]
    attempt: int = 1


class _SystemRun:
    """The queue, leases and counts of one (system, runtime) target."""

    def __init__(self, plan: SystemPlan, result: SystemResult) -> None:
        self.plan = plan
        self.result = result
        self.queue: deque[int] = deque(plan.todo)
        self.waiting: set[int] = set()  # leased by another driver
        self.attempts: dict[int, int] = {}
        self.singles: deque[int] = deque()  # specs retried alone after a worker death
        self.open = len(plan.todo)

    @property
    def target(self) -> Target:
        return self.plan.target


class FleetDriver:
    """One run of the fleet (see the module docstring)."""

    def __init__(
        self,
        config: FleetConfig,
        *,
        progress: ProgressHook | None = None,
        owner: str | None = None,
        actor_start_timeout_s: float = 120.0,
        spill_dir: str | None = None,
        inflight_per_actor: int = 2,
        settings: Settings | None = None,
        retry_failed: bool = False,
    ) -> None:
        self.config = config
        self.retry_failed = retry_failed  # stored failures are measured again, not reused
        # the BENANZA_* variables, read once here (None) and handed to every worker, wherever it runs
        self.settings = settings if settings is not None else load_settings()
        # one URI for the driver and every worker: a BENANZA_DB_FILE is read here, where it exists
        self.db = config.db or default_uri(self.settings)
        self.progress = progress or (lambda system, event, n: None)
        self.owner = owner or f"driver-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.actor_start_timeout_s = actor_start_timeout_s
        self.spill_dir = spill_dir
        self.inflight_per_actor = inflight_per_actor
        self.results: dict[str, SystemResult] = {s.name: SystemResult(s.name) for s in config.systems}
        self._harness: HarnessSettings | None = None
        self._queued_gauge: Any = None

    def run(self) -> FleetSummary:
        started = time.perf_counter()
        opened: list[Store] = []

        def known() -> list[NamedModel]:  # called once a model is planned: none, no store is opened
            opened.append(open_store(self.db, settings=self.settings))
            return opened[0].model_names()

        try:
            corpus = plan_corpus(self.config, known=known)
        except BaseException:
            for store in opened:
                store.close()
            raise
        if corpus.models == 0:  # nothing to run: neither the store nor Ray is needed to say so
            return FleetSummary(self.results, 0, corpus.model_errors, time.perf_counter() - started)
        store = opened[0]
        try:
            with connect(self.config.ray, self.config.systems):
                self._setup_metrics()
                runs, actors = self._start(store, corpus.works, corpus.runtime_errors)
                dispatch_started = time.perf_counter()
                if runs:
                    with LeaseHeartbeat(store, self.owner, self.config.lease_s):
                        self._dispatch(store, runs, actors)
                dispatch_s = time.perf_counter() - dispatch_started
                self._note_remeasures(actors)
                for actor in actors:
                    self._kill(actor.handle)
        finally:
            store.close()
        elapsed = time.perf_counter() - started
        return FleetSummary(
            self.results,
            corpus.models,
            corpus.model_errors,
            elapsed,
            dispatch_s,
            corpus.plan_report,
            corpus.planned,
        )

    # -- start ---------------------------------------------------------------------------------

    def _start(
        self, store: Store, works: dict[tuple, CorpusWork], runtime_errors: dict[tuple, str]
    ) -> tuple[list[_SystemRun], list[_Actor]]:
        import ray

        nodes = system_nodes(self.config.systems)
        remote = ray.remote(SystemWorker)
        harness = self.config.harness_settings(self.settings).model_dump()
        pending: dict[Any, tuple[SystemConfig, Any]] = {}
        for system in self.config.systems:
            result = self.results[system.name]
            result.nodes = [n["node_id"] for n in nodes[system.name]]
            if not result.nodes:
                result.error = missing_node_reason(system)
                continue
            for _ in range(devices_of(system, nodes[system.name])):
                handle = remote.options(**actor_options(system)).remote(
                    system.model_dump(mode="json"), self.db, harness, self.spill_dir, settings=self.settings
                )
                pending[handle.identity.remote()] = (system, handle)
        ready, not_ready = [], []
        if pending:
            ready, not_ready = ray.wait(list(pending), num_returns=len(pending), timeout=self.actor_start_timeout_s)
        actors: list[_Actor] = []
        identities: dict[str, dict[str, Any]] = {}
        for ref in not_ready:
            system, handle = pending[ref]
            self.results[system.name].error = (
                f"its worker did not start within {self.actor_start_timeout_s:.0f} s "
                f"(do its nodes have {system.num_cpus} free CPU{'s' if system.kind == 'cpu' else ' and a GPU'}?)"
            )
            self._kill(handle)
        for ref in ready:
            system, handle = pending[ref]
            try:
                identity = ray.get(ref)
            except Exception as exc:  # the worker could not start on its node
                self.results[system.name].error = f"its worker failed to start: {one_line(exc)}"
                continue
            actors.append(_Actor(system.name, handle))
            identities.setdefault(system.name, identity)
            self.results[system.name].drained += identity.get("drained", 0)
        runs = []
        for system in self.config.systems:
            identity = identities.get(system.name)
            if identity is None:
                continue
            result = self.results[system.name]
            result.actors = sum(a.system == system.name for a in actors)
            errors = dict(identity.get("errors", {}))
            for runtime in system.runtimes:
                key = _planning_key(system, runtime)
                target_info = identity["targets"].get(runtime)
                problem = errors.get(runtime) or runtime_errors.get(key)
                if target_info is None or key not in works:
                    result.error = f"runtime {runtime}: {problem or 'not available'}"
                    continue
                name = runtime_entry(runtime)[0]
                target = Target(system.name, name, target_info["stack_id"], target_info["variant"])
                result.stack_id = result.stack_id or target.stack_id
                result.variant = result.variant or target.variant_id
                result.notes += [n for n in target_info.get("notes", ()) if n not in result.notes]
                result.new_stack = bool(result.new_stack) or bool(target_info.get("new_stack"))
                try:
                    present = reusable_spec_ids(store, system.name, target.stack_id, self.retry_failed)
                    # what the system measures, as analysis will read it (no model file needed there)
                    store.put_plans(system.name, target.stack_id, works[key].placed_plans(target))
                except StoreError as exc:
                    raise StoreError(f"cannot plan {system.name}: {one_line(exc)}") from None
                plan = plan_target(works[key], target, present)
                result.reused += plan.reused
                result.total += plan.total
                self.progress(system.name, "total", plan.total)
                self.progress(system.name, "reused", plan.reused)
                runs.append(_SystemRun(plan, result))
            if "store" in errors:
                result.error = (
                    result.error or f"its worker cannot reach the store (results are spilled): {errors['store']}"
                )
        return runs, actors

    # -- dispatch ------------------------------------------------------------------------------

    def _claim(self, store: Store, run: _SystemRun, indices: list[int]) -> tuple[list[int], list[str]]:
        """Lease ``indices``; returns those leased to this driver (and their ids)."""
        ids = {run.plan.spec_id(i): i for i in indices}
        try:
            granted = store.claim(
                run.target.system, run.target.stack_id, ids, self.owner, self.config.lease_s, self.retry_failed
            )
        except StoreError as exc:  # leases guard against duplicate work; they are not a condition of it
            log.warning("leases unavailable, running without one: %s", one_line(exc))
            run.result.unleased += len(ids)
            granted = set(ids)
        mine = [(sid, i) for sid, i in ids.items() if sid in granted]
        run.waiting.update(i for sid, i in ids.items() if sid not in granted)
        return [i for _, i in mine], [sid for sid, _ in mine]

    def _next_chunk(self, store: Store, run: _SystemRun) -> _Chunk | None:
        size = self.config.chunk_size
        while run.singles:
            i = run.singles.popleft()
            mine, ids = self._claim(store, run, [i])
            if mine:
                return _Chunk(run.plan, mine, ids, attempt=run.attempts.get(i, 1))
        while run.queue:
            take = self._model_chunk(run) or [run.queue.popleft() for _ in range(min(size, len(run.queue)))]
            mine, ids = self._claim(store, run, take)
            if mine:
                return _Chunk(run.plan, mine, ids)
        return None

    def _model_chunk(self, run: _SystemRun) -> list[int]:
        """The queued benchmarks of the model at the head of the queue (``chunk_by_model``), or []."""
        owners = run.plan.work.models
        if self._harness is None:
            self._harness = self.config.harness_settings(self.settings)
        settings = self._harness
        if not (run.queue and self.config.chunk_by_model and owners and settings.schedule == "interleaved"):
            return []
        cap = max(self.config.chunk_size, interleave_max_specs(settings))
        model = owners[run.queue[0]]
        take = []
        while run.queue and owners[run.queue[0]] == model and len(take) < cap:
            take.append(run.queue.popleft())
        return take

    def _recheck_waiting(self, store: Store, run: _SystemRun) -> None:
        """Specs another driver held: count those it stored, queue the rest again."""
        if not run.waiting:
            return
        try:
            present = store.present_spec_ids(run.target.system, run.target.stack_id)
        except StoreError:  # the store is down: run them (without leases) rather than wait for it
            present = set()
        for i in sorted(run.waiting):
            if run.plan.spec_id(i) in present:
                run.result.reused += 1
                run.open -= 1
                self.progress(run.target.system, "reused", 1)
            else:
                run.queue.append(i)
        run.waiting.clear()

    def _dispatch(self, store: Store, runs: list[_SystemRun], actors: list[_Actor]) -> None:
        import ray

        by_system: dict[str, list[_SystemRun]] = {}
        for run in runs:
            by_system.setdefault(run.target.system, []).append(run)
        inflight: dict[Any, tuple[_Actor, _SystemRun, _Chunk]] = {}
        last_recheck = time.monotonic()
        while True:
            for actor in actors:
                for run in by_system.get(actor.system, []):
                    while actor.inflight < self.inflight_per_actor:
                        chunk = self._next_chunk(store, run)
                        if chunk is None:
                            break
                        specs = [run.plan.spec(i).to_dict() for i in chunk.indices]
                        ref = actor.handle.run.remote(specs)
                        inflight[ref] = (actor, run, chunk)
                        actor.inflight += 1
            self._export_queued(runs)
            if not inflight and not any(r.waiting for r in runs):
                break
            if not inflight:  # only work other drivers hold: wait for their results or their leases to end
                time.sleep(min(2.0, self.config.lease_s / 4))
                for run in runs:
                    self._recheck_waiting(store, run)
                continue
            done, _ = ray.wait(list(inflight), num_returns=1, timeout=1.0)
            for ref in done:
                actor, run, chunk = inflight.pop(ref)
                actor.inflight -= 1
                self._finish(store, ref, run, chunk, actor)
            now = time.monotonic()
            if now - last_recheck > max(2.0, self.config.lease_s / 4):
                for run in runs:
                    if not run.queue:
                        self._recheck_waiting(store, run)
                last_recheck = now

    def _finish(self, store: Store, ref: Any, run: _SystemRun, chunk: _Chunk, actor: _Actor) -> None:
        import ray

        system = run.target.system
        try:
            out = ray.get(ref)
        except Exception as exc:  # the worker died (twice) or raised: retry the specs one by one
            self._worker_failed(store, run, chunk, one_line(exc))
            return
        actor.remeasures[out["process"]] = out["remeasures"]  # cumulative over the process's life: the latest
        run.result.mark(out["disturbed"])
        outcomes = out["outcomes"]
        counts = {Outcome.OK: "measured", Outcome.FAILED: "failed", Outcome.SKIPPED: "skipped"}
        unanswered = []
        for i, sid in zip(chunk.indices, chunk.ids, strict=True):
            if sid not in outcomes:
                unanswered.append(i)
                continue
            outcome = Outcome(outcomes[sid])
            setattr(run.result, counts[outcome], getattr(run.result, counts[outcome]) + 1)
            self.progress(system, str(outcome), 1)
        run.result.spilled += out.get("spilled", 0)
        run.open -= len(chunk.ids) - len(unanswered)
        self._release(store, run, chunk.ids)
        if unanswered:  # a worker that returns without a result for a spec it was given failed on it
            rest = _Chunk(chunk.plan, unanswered, [run.plan.spec_id(i) for i in unanswered], chunk.attempt)
            self._worker_failed(store, run, rest, "the worker returned no result for it")

    def _worker_failed(self, store: Store, run: _SystemRun, chunk: _Chunk, error: str) -> None:
        if len(chunk.indices) > 1:
            for i in chunk.indices:
                run.attempts[i] = run.attempts.get(i, 0) + 1
                run.singles.append(i)
            return
        i = chunk.indices[0]
        attempts = run.attempts.get(i, 0) + 1
        run.attempts[i] = attempts
        if attempts < self.config.max_attempts:
            run.singles.append(i)
            return
        spec = run.plan.spec(i)
        reason = f"the worker died or failed {attempts} times running it: {error}"
        record = make_record(
            spec, system=run.target.system, stack_id=run.target.stack_id, outcome=Outcome.FAILED, reason=reason
        )
        try:
            store.upsert([record])
        except StoreError as exc:
            log.error("cannot store the failure of %s: %s", spec.label, one_line(exc))
        run.result.failed += 1
        run.open -= 1
        self.progress(run.target.system, "failed", 1)
        self._release(store, run, chunk.ids)

    def _release(self, store: Store, run: _SystemRun, ids: Sequence[str]) -> None:
        try:
            store.release(run.target.system, run.target.stack_id, ids, self.owner)
        except StoreError as exc:
            log.warning("cannot release leases: %s", one_line(exc))

    def _note_remeasures(self, actors: list[_Actor]) -> None:
        """Per system, a note on the disturbed measurements its workers' re-measure budgets declined."""
        for system, result in self.results.items():
            budgets = [b for a in actors if a.system == system for p in a.remeasures.values() for b in p.values()]
            note = remeasure_note(budgets)
            if note is not None:
                result.notes.append(note)

    # -- metrics -------------------------------------------------------------------------------

    def _setup_metrics(self) -> None:
        try:
            from ray.util.metrics import Gauge

            self._queued_gauge = Gauge("benanza_benchmarks_queued", "benchmarks not yet done", tag_keys=("system",))
        except Exception:  # metrics are optional
            self._queued_gauge = None

    def _export_queued(self, runs: list[_SystemRun]) -> None:
        if self._queued_gauge is None:
            return
        per_system: dict[str, int] = {}
        for run in runs:
            per_system[run.target.system] = per_system.get(run.target.system, 0) + run.open
        for system, n in per_system.items():
            self._queued_gauge.set(n, tags={"system": system})

    @staticmethod
    def _kill(handle: Any) -> None:
        import ray

        try:
            ray.kill(handle)
        except Exception:  # already gone
            log.debug("actor already gone", exc_info=True)


def run_fleet(config: FleetConfig, **kwargs: Any) -> FleetSummary:
    """Run the fleet on ``config`` (see ``FleetDriver``); raises ``BenanzaError`` on bad input."""
    if config.dtypes != ["float32"]:
        raise UsageError("dtypes other than the models' own are not benchmarked yet: leave `dtypes` at its default")
    return FleetDriver(config, **kwargs).run()
