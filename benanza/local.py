"""The single-machine pipeline: models -> plans -> benchmarks in the store -> lower bounds.

The fleet reuses every piece; this module only wires them for one machine: the local
system's fingerprint and software stack, one runtime, one store. The analysis of stored
systems (``analyze_stored``, ``system_reports``) reads what any system wrote to the store.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benanza.analysis.compare import SystemReport, latest_stack, system_prices, system_report
from benanza.analysis.lower_bound import LowerBound, lower_bound
from benanza.analysis.optimize import Optimizations, optimizations
from benanza.analysis.regressions import (
    DEFAULT_SETTINGS,
    ModelUnits,
    RegressionReport,
    RegressionSettings,
    Subject,
    compare_stacks,
    history_changes,
)
from benanza.bench.execute import RunSummary, run_specs
from benanza.bench.generate import ModelPlan, batch_size_of, model_key, plan_model, specs_for_plan, unique_specs
from benanza.bench.harness import HarnessSettings
from benanza.bench.repro import ReproTarget
from benanza.bench.spec import BenchmarkSpec, SpecKind, variant_id
from benanza.errors import BenanzaError, UsageError
from benanza.fingerprint import default_system_name, stack_fingerprint, stack_id, system_fingerprint
from benanza.model.graph import ModelGraph
from benanza.model.process import ProcessedModel, process_model
from benanza.runtimes.base import Runtime, get_runtime
from benanza.store.base import Store, open_store
from benanza.store.records import BenchmarkRecord


@dataclass
class LocalContext:
    store: Store
    runtime: Runtime
    system: str
    stack_id: str
    stack: dict[str, Any]
    settings: HarnessSettings

    @property
    def variant(self) -> str:
        return variant_id(self.runtime.variant())

    def close(self) -> None:
        self.store.close()
        close_runtime = getattr(self.runtime, "close", None)
        if close_runtime is not None:
            close_runtime()


def open_local(
    db: str | None = None,
    runtime: str = "onnxruntime",
    runtime_options: Mapping[str, Any] | None = None,
    system: str | None = None,
    settings: HarnessSettings | None = None,
) -> LocalContext:
    """Open the store, fingerprint this machine and its stack, and register both."""
    rt = get_runtime(runtime, **dict(runtime_options or {}))
    stack = stack_fingerprint({"runtime": rt.name, **rt.stack()})
    sid = stack_id(stack)
    name = system or default_system_name()
    store = open_store(db)
    store.register_system(name, system_fingerprint([rt]))
    store.register_stack(name, sid, stack)
    return LocalContext(store, rt, name, sid, stack, settings or HarnessSettings())


def plan_models(
    paths: Iterable[Path],
    runtime: Runtime,
    batches: Sequence[int | None] = (None,),
    overrides: Mapping[str, tuple[int, ...]] | None = None,
    granularities: Iterable[int] = (),
) -> list[ModelPlan]:
    """One plan per model and batch size."""
    plans = []
    grans = tuple(granularities)
    for path in paths:
        for batch in batches:
            processed = process_model(path, batch, overrides)
            plans.append(plan_model(processed, runtime, grans, batch=batch, overrides=overrides))
    return plans


def spec_groups(ctx: LocalContext, plans: Sequence[ModelPlan], e2e: bool) -> list[list[BenchmarkSpec]]:
    """Per plan, every spec it needs with its end-to-end run first: the interleaved schedule's groups."""
    groups = []
    for plan in plans:
        specs = specs_for_plan(plan, ctx.runtime.name, ctx.runtime.variant(), e2e=e2e)
        groups.append(specs[-1:] + specs[:-1] if e2e else specs)
    return groups


def specs_for(ctx: LocalContext, plans: Sequence[ModelPlan], e2e: bool) -> list[BenchmarkSpec]:
    return unique_specs(s for group in spec_groups(ctx, plans, e2e) for s in group)


def bench(
    ctx: LocalContext,
    plans: Sequence[ModelPlan],
    e2e: bool = False,
    retry_failed: bool = False,
    progress: Callable[..., None] | None = None,
    repeat: bool = False,
) -> RunSummary:
    """Benchmark what the store lacks for this system and stack (everything again with ``repeat``)."""
    groups = spec_groups(ctx, plans, e2e)
    return run_specs(
        unique_specs(s for group in groups for s in group),
        ctx.runtime,
        ctx.store,
        ctx.settings,
        system=ctx.system,
        stack_id=ctx.stack_id,
        retry_failed=retry_failed,
        repeat=repeat,
        progress=progress,
        groups=groups,
    )


def analyze(ctx: LocalContext, plans: Sequence[ModelPlan]) -> list[LowerBound]:
    """Lower bounds of every plan from the store's results for this system and stack."""
    rows = []
    variant = ctx.variant
    for plan in plans:
        results = _results_by_key(_plan_records(ctx, plan), variant, plan.batch_size)
        rows.append(
            lower_bound(
                plan, results, system=ctx.system, stack_id=ctx.stack_id, runtime=ctx.runtime.name, variant=variant
            )
        )
    return rows


def optimize(ctx: LocalContext, plans: Sequence[ModelPlan]) -> list[Optimizations]:
    """Benanza's optimization analyses of every plan from this system's and stack's records.

    The tensor-core figure needs the same stack's variant with tensor cores forbidden
    (``--no-tensor-cores``); without it that figure is ``None``.
    """
    own = ctx.runtime.variant()
    other = variant_id({**own, "tensor_cores": False}) if own.get("tensor_cores") is True else None
    rows = []
    for plan in plans:
        records = _plan_records(ctx, plan)
        rows.append(
            optimizations(
                plan,
                _results_by_key(records, ctx.variant, plan.batch_size),
                system=ctx.system,
                stack_id=ctx.stack_id,
                runtime=ctx.runtime.name,
                variant=ctx.variant,
                without_tensor_cores=_results_by_key(records, other, plan.batch_size) if other else None,
            )
        )
    return rows


def _plan_records(ctx: LocalContext, plan: ModelPlan) -> list[BenchmarkRecord]:
    """Every record of this system, stack and runtime that ``plan`` can use (any variant)."""
    keys = set(plan.networks) | {plan.model_key}
    return ctx.store.records(system=ctx.system, stack_id=ctx.stack_id, runtime=ctx.runtime.name, keys=keys)


def _results_by_key(
    records: Iterable[BenchmarkRecord], variant: str | None, batch_size: int
) -> dict[str, BenchmarkRecord]:
    # one record per key: an ok result beats a failure, the newest beats older ones
    ordered = sorted(records, key=lambda r: (r.outcome == "ok", r.measured_at))
    return {r.key: r for r in ordered if r.variant == variant and r.batch_size == batch_size}


# -- analysis of stored systems -------------------------------------------------------------

ALL = "all"
LATEST = "latest"


def resolve_systems(store: Store, names: Iterable[str]) -> list[str]:
    """Stored system names for ``--system`` values (comma-separated allowed; ``all`` = every system).

    Raises:
        UsageError: a name the store does not know (the message lists the known ones), or
            ``all`` on a store without systems.
    """
    names = [names] if isinstance(names, str) else names
    wanted = [n.strip() for name in names for n in name.split(",") if n.strip()]
    known = [s["name"] for s in store.systems()]
    if not wanted:
        raise UsageError("--system expects system names or 'all'")
    if ALL in wanted:
        if not known:
            raise UsageError(f"{store.shown_uri}: no systems are registered")
        return known
    for name in wanted:
        if name not in known:
            raise UsageError(f"{store.shown_uri}: unknown system {name!r}; known: {', '.join(known) or 'none'}")
    return list(dict.fromkeys(wanted))


def select_stacks(store: Store, systems: Sequence[str], stack: str = LATEST) -> dict[str, list[str]]:
    """Stack ids to analyze per system: its latest stack, ``all`` of them (oldest first), or one id.

    A system that lacks a requested stack id is left out; no system having it is an error.

    Raises:
        UsageError: ``stack`` is an id that none of ``systems`` ran.
    """
    chosen: dict[str, list[str]] = {}
    seen: list[str] = []
    for system in systems:
        stacks = store.stacks(system)
        seen += [s["stack_id"] for s in stacks]
        if stack == LATEST:
            latest = latest_stack(stacks)
            chosen[system] = [latest["stack_id"]] if latest else []
        elif stack == ALL:
            chosen[system] = [s["stack_id"] for s in stacks]
        elif any(s["stack_id"] == stack for s in stacks):
            chosen[system] = [stack]
    if stack not in (LATEST, ALL) and not chosen:
        known = ", ".join(dict.fromkeys(seen)) or "none"
        raise UsageError(f"{store.shown_uri}: no system of {', '.join(systems)} ran stack {stack!r}; known: {known}")
    return chosen


def parse_variant(variant: str | None) -> dict[str, str]:
    """A canonical variant string (``ep=cpu,opt=extended,threads=1``) as a mapping."""
    return dict(item.split("=", 1) for item in (variant or "").split(",") if "=" in item)


def planning_runtime(runtime: str, variant: str | None, opt_level: str = "extended") -> Runtime:
    """The local runtime that groups a model the way ``runtime`` did on its system.

    ONNX Runtime results are planned with the local ONNX Runtime at the variant's
    optimisation level; another runtime with its local instance when it can be made here,
    else with the local ONNX Runtime (a known limitation: a system with another ONNX
    Runtime version, or a runtime not installed here, may have fused layers differently).
    """
    if runtime == "onnxruntime":
        return get_runtime("onnxruntime", threads=1, opt_level=parse_variant(variant).get("opt", opt_level))
    try:
        return get_runtime(runtime)
    except (BenanzaError, ImportError):  # not installed here: plan as ONNX Runtime would (stated above)
        return get_runtime("onnxruntime", threads=1, opt_level=opt_level)


def _runtime_and_variant(records: Sequence[BenchmarkRecord], mkey: str) -> tuple[str, str] | None:
    """The runtime and variant a system used for a model: its end-to-end record's, else the most common."""
    e2e = [r for r in records if r.kind == SpecKind.MODEL and r.key == mkey]
    if e2e:
        best = max(e2e, key=lambda r: (r.outcome == "ok", r.measured_at))
        return best.runtime, best.variant
    counts = Counter((r.runtime, r.variant) for r in records)
    if not counts:
        return None
    return min(counts, key=lambda rv: (-counts[rv], rv))


@dataclass(frozen=True)
class StoredAnalysis:
    """One lower-bound row of a stored system with what it was computed from."""

    plan: ModelPlan
    results: Mapping[str, BenchmarkRecord]  # key -> the record the row used (its variant)
    records: Sequence[BenchmarkRecord]  # every record of the plan's keys on this system, stack and runtime
    row: LowerBound


def analyze_stored(
    store: Store,
    paths: Iterable[Path],
    systems: Iterable[str],
    *,
    stack: str = LATEST,
    batches: Sequence[int | None] = (None,),
    overrides: Mapping[str, tuple[int, ...]] | None = None,
    granularities: Iterable[int] = (),
    opt_level: str = "extended",
) -> list[LowerBound]:
    """Lower bounds of the models on stored systems: one row per (model, system, stack, batch size).

    Each system's runtime and variant for a model come from its own records (the variant of
    its end-to-end record, else the most common among the model's records); a system with
    no record of the model gives a row with every figure None and ``variant`` None.

    Plans (execution groups, DLBricks sequences) are computed here with the local runtime,
    see ``planning_runtime``: a known limitation for systems whose runtime fuses differently.

    Args:
        systems: names or ``all`` (comma-separated values allowed), checked against the store.
        stack: ``latest`` (the stack each system registered last), ``all``, or one stack id.

    Raises:
        UsageError: an unknown system or stack.
    """
    processed = [(batch, process_model(path, batch, overrides, fits_here=False)) for path in paths for batch in batches]
    return [
        a.row
        for a in stored_analyses(
            store,
            processed,
            systems,
            stack=stack,
            overrides=overrides,
            granularities=granularities,
            opt_level=opt_level,
        )
    ]


def stored_analyses(
    store: Store,
    processed: Sequence[tuple[int | None, ProcessedModel]],
    systems: Iterable[str],
    *,
    stack: str = LATEST,
    overrides: Mapping[str, tuple[int, ...]] | None = None,
    granularities: Iterable[int] = (),
    opt_level: str = "extended",
) -> list[StoredAnalysis]:
    """``analyze_stored`` of processed models ((batch, model) pairs), each row with its plan and records."""
    names = resolve_systems(store, systems)
    stacks = select_stacks(store, names, stack)
    grans = tuple(granularities)
    runtimes: dict[tuple[str, str], Runtime] = {}
    plans: dict[tuple[int, str, str], ModelPlan] = {}

    def plan_for(i: int, batch: int | None, model: ProcessedModel, runtime: str, variant: str | None) -> ModelPlan:
        rt_key = (runtime, parse_variant(variant).get("opt", opt_level))
        if rt_key not in runtimes:
            runtimes[rt_key] = planning_runtime(runtime, variant, opt_level)
        if (i, *rt_key) not in plans:
            plans[(i, *rt_key)] = plan_model(model, runtimes[rt_key], grans, batch=batch, overrides=overrides)
        return plans[(i, *rt_key)]

    analyses = []
    for i, (batch, model) in enumerate(processed):
        batch_size = batch_size_of(model.graph)
        mkey = model_key(model.graph)
        probe_keys = set(model.graph.layer_keys) | {mkey}
        for system in names:
            for sid in stacks.get(system, []):
                found = store.records(system=system, stack_id=sid, keys=probe_keys, batch_size=batch_size)
                chosen = _runtime_and_variant(found, mkey)
                runtime, variant = chosen if chosen else ("onnxruntime", None)
                plan = plan_for(i, batch, model, runtime, variant)
                results: dict[str, BenchmarkRecord] = {}
                records: list[BenchmarkRecord] = []
                if chosen:
                    # what the probe read is not read again: only the plan's groups and sequences are
                    keys = set(plan.networks) | {plan.model_key}
                    records = [r for r in found if r.runtime == runtime and r.key in keys]
                    records += store.records(
                        system=system, stack_id=sid, runtime=runtime, keys=keys - probe_keys, batch_size=batch_size
                    )
                    records.sort(key=lambda r: r.identity())
                    results = _results_by_key(records, variant, batch_size)
                row = lower_bound(plan, results, system=system, stack_id=sid, runtime=runtime, variant=variant)
                analyses.append(StoredAnalysis(plan, results, records, row))
    return analyses


def prices(store: Store, config: Path | None = None) -> dict[str, float | None]:
    """USD per hour by system: ``config.price_per_hour`` of the stored fingerprints, overridden by a fleet config.

    Raises:
        UsageError: the config cannot be read (or this installation has no fleet config support).
    """
    overrides: dict[str, float | None] = {}
    if config is not None:
        try:
            from benanza.config import load_fleet_config
        except ImportError:
            raise UsageError(f"{config}: fleet configs need benanza.config, which this installation lacks") from None
        overrides = {s.name: s.price_per_hour for s in load_fleet_config(config).systems}
    return system_prices(store.systems(), overrides)


def system_reports(
    store: Store,
    systems: Iterable[str],
    corpus: Iterable[Path],
    *,
    batch: int = 1,
    overrides: Mapping[str, tuple[int, ...]] | None = None,
    top: int = 10,
    graphs: Sequence[ModelGraph] | None = None,
) -> list[SystemReport]:
    """Per system: hardware, stacks over time, record counts, slowest layers and corpus coverage.

    Coverage is the share of the corpus's unique layer keys at ``batch`` with an ok record
    (any runtime and variant) of the system's latest stack. ``graphs``: the corpus already
    processed at ``batch`` (then ``corpus`` is not read again).
    """
    names = resolve_systems(store, systems)
    if graphs is None:
        graphs = [process_model(path, batch, overrides, fits_here=False).graph for path in corpus]
    corpus_keys = {key for graph in graphs for key in graph.layer_keys}
    documents = {s["name"]: s for s in store.systems()}
    summary = store.summary()
    reports = []
    for name in names:
        stacks = store.stacks(name)
        latest = latest_stack(stacks)
        layers: list[BenchmarkRecord] = []
        covered: set[str] = set()
        if latest is not None:
            sid = latest["stack_id"]
            layers = store.records(system=name, stack_id=sid, kind=str(SpecKind.LAYER), outcome="ok")
            found = store.records(system=name, stack_id=sid, keys=corpus_keys, batch_size=batch, outcome="ok")
            covered = {r.key for r in found}
        reports.append(
            system_report(
                documents[name],
                stacks,
                summary,
                layers,
                corpus_keys=corpus_keys,
                covered_keys=covered,
                corpus_models=len(graphs),
                batch_size=batch,
                top=top,
            )
        )
    return reports


# -- regressions ------------------------------------------------------------------------------


def model_units(
    model_records: Iterable[BenchmarkRecord], paths: Iterable[Path] = (), opt_level: str = "extended"
) -> tuple[list[ModelUnits], list[str]]:
    """The execution units of the models behind end-to-end records (and of ``paths``), with notes.

    The one place the regression analysis learns a model's units: planned here with the local
    runtime (``planning_runtime``) from the model file an end-to-end record names. Stored plans
    can replace this body without changing its callers.
    """
    wanted: dict[tuple[str, Any, str, str, str], None] = {}
    for r in model_records:
        if r.kind != SpecKind.MODEL:
            continue
        model = r.spec.get("model") or {}
        if model.get("path"):
            shapes = json.dumps(model.get("shapes") or {}, sort_keys=True)
            wanted[(str(model["path"]), model.get("batch"), shapes, r.runtime, r.variant)] = None
    for path in paths:
        wanted[(str(path), None, "{}", "onnxruntime", "")] = None
    units, notes, done = [], [], set()
    for path, batch, shapes, runtime, variant in wanted:
        if not Path(path).exists():
            notes.append(f"{path}: model file not here; its change is not attributed to units")
            continue
        overrides = {k: tuple(v) for k, v in json.loads(shapes).items()} or None
        try:
            processed = process_model(Path(path), batch, overrides, fits_here=False)
            plan = plan_model(processed, planning_runtime(runtime, variant or None, opt_level), (), batch, overrides)
        except BenanzaError as exc:
            notes.append(f"{path}: cannot be planned here ({exc}); its change is not attributed to units")
            continue
        if (plan.model_key, plan.batch_size) in done:
            continue
        done.add((plan.model_key, plan.batch_size))
        counts = Counter(plan.unit_keys)
        units.append(ModelUnits(plan.model, plan.model_key, plan.batch_size, tuple(counts.items())))
    return units, notes


@dataclass(frozen=True)
class StoredRegressions:
    """One system's regression report with the head records the changes came from (for ``--repro``)."""

    report: RegressionReport
    head_records: Mapping[Subject, BenchmarkRecord]
    stacks: Mapping[str, Mapping[str, Any]]  # stack id -> fingerprint


def regressions(
    store: Store,
    systems: Iterable[str],
    *,
    base: str | None = None,
    head: str | None = None,
    history: bool = False,
    paths: Iterable[Path] = (),
    settings: RegressionSettings = DEFAULT_SETTINGS,
) -> list[StoredRegressions]:
    """Per system: its head stack against the stack before it (or ``base``), or with ``history`` its runs over time.

    Raises:
        UsageError: an unknown system or stack, or ``base`` without two stacks to compare.
    """
    names = resolve_systems(store, systems)
    paths = list(paths)
    out = []
    for system in names:
        stacks = store.stacks(system)
        order = [s["stack_id"] for s in stacks]
        fingerprints = {s["stack_id"]: s["stack"] for s in stacks}
        for wanted in (base, head):
            if wanted is not None and wanted not in fingerprints:
                raise UsageError(
                    f"{store.shown_uri}: system {system!r} has no stack {wanted!r}; known: {', '.join(order)}"
                )
        newest = latest_stack(stacks)
        head_id = head or (newest["stack_id"] if newest else None)
        if head_id is None:
            continue
        if history:
            records = store.records(system=system, stack_id=head_id) + store.repeats(system, head_id)
            units, notes = model_units(records, paths)
            report = history_changes(system, head_id, records, models=units, settings=settings)
        else:
            base_id = base or next((s for s in reversed(order[: order.index(head_id)]) if s != head_id), None)
            if base_id is None:
                report = RegressionReport(
                    system,
                    "stacks",
                    head_id,
                    head_id,
                    (),
                    (),
                    (),
                    settings,
                    (f"{system} has one stack: nothing to compare",),
                )
                out.append(StoredRegressions(report, {}, fingerprints))
                continue
            records = []
            for sid in (base_id, head_id):
                records += store.records(system=system, stack_id=sid) + store.repeats(system, sid)
            units, notes = model_units([r for r in records if r.stack_id == head_id], paths)
            report = compare_stacks(
                system, records, base=base_id, head=head_id, stacks=fingerprints, models=units, settings=settings
            )
        report = dataclasses.replace(report, notes=report.notes + tuple(notes))
        current = store.records(system=system, stack_id=head_id, outcome="ok")
        out.append(StoredRegressions(report, {Subject.of(r): r for r in current}, fingerprints))
    return out


def repro_targets(found: StoredRegressions) -> list[ReproTarget]:
    """The flagged regressions of a report whose head record holds a network, as ``write_repro`` targets."""
    targets = []
    for change in found.report.regressions:
        record = found.head_records.get(change.subject)
        network = (record.spec or {}).get("network") if record is not None else None
        if network:
            targets.append(
                ReproTarget(
                    kind=change.subject.kind,
                    key=change.subject.key,
                    label=change.label,
                    runtime=change.subject.runtime,
                    variant=change.subject.variant,
                    change=change.ratio - 1,
                    low=change.low - 1,
                    high=change.high - 1,
                    network=network,
                )
            )
    return targets


def new_regressions(store: Store, system: str, settings: RegressionSettings = DEFAULT_SETTINGS) -> int | None:
    """How many benchmarks a system's current stack flags as regressions against the stack before it.

    None when the system has fewer than two stacks. What ``fleet status`` shows; ``analyze
    regressions`` says which, why and by how much.
    """
    stacks = store.stacks(system)
    current = latest_stack(stacks)
    order = [s["stack_id"] for s in stacks]
    if current is None or order.index(current["stack_id"]) == 0:
        return None
    head = current["stack_id"]
    base = order[order.index(head) - 1]
    records = []
    for sid in (base, head):
        records += store.records(system=system, stack_id=sid, outcome="ok") + store.repeats(system, sid)
    report = compare_stacks(system, records, base=base, head=head, stacks={}, settings=settings)
    return len(report.regressions)
