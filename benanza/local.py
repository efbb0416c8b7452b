"""The single-machine pipeline: models -> plans -> benchmarks in the store -> lower bounds.

The fleet reuses every piece; this module only wires them for one machine: the local
system's fingerprint and software stack, one runtime, one store. ``bench`` stores the plans
beside the results, so the analysis of stored systems (``benanza.analysis.stored``) reads
what any system wrote without the models or the runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benanza.analysis.lower_bound import LowerBound, lower_bound
from benanza.analysis.optimize import Optimizations, optimizations
from benanza.analysis.stored import results_by_key
from benanza.analysis.stored_regressions import StoredRegressions
from benanza.bench.execute import Measurer, RunSummary, run_specs
from benanza.bench.generate import ModelPlan, plan_model_file, specs_for_plan, unique_specs, with_distinct_names
from benanza.bench.harness import HarnessSettings
from benanza.bench.plans import stored_plans
from benanza.bench.records import BenchmarkRecord
from benanza.bench.repro import ReproTarget
from benanza.bench.spec import BenchmarkSpec, variant_id, whole_model_keys
from benanza.errors import CrashedModelError
from benanza.fingerprint import StackFingerprint
from benanza.model.names import NamedModel
from benanza.model.request import NO_REQUEST, BindingRequest
from benanza.runtimes.base import Runtime
from benanza.settings import Settings, load_settings
from benanza.store.base import Store, open_store
from benanza.targets import open_target, register, settle_threads


@dataclass
class LocalContext:
    store: Store
    runtime: Runtime
    system: str
    stack_id: str
    stack: StackFingerprint
    settings: HarnessSettings
    notes: tuple[str, ...] = ()  # what was decided when the target was opened (``Target.notes``)

    @property
    def variant(self) -> str:
        return variant_id(self.runtime.variant())

    def close(self) -> None:
        self.store.close()
        self.runtime.close()


def open_local(
    db: str | None = None,
    runtime: str = "onnxruntime",
    runtime_options: Mapping[str, Any] | None = None,
    system: str | None = None,
    settings: HarnessSettings | None = None,
    *,
    env: Settings | None = None,
) -> LocalContext:
    """Open the store, fingerprint this machine and its stack, and register both.

    Args:
        db: the store's URI; None: the environment's (``BENANZA_DB``...) or ``sqlite:///benanza.db``.
        runtime: the runtime's registered name.
        runtime_options: keyword arguments of the runtime's factory.
        system: this machine's name; None: ``BENANZA_SYSTEM`` or the host name.
        settings: how to measure; None: the defaults with ``BENANZA_HARNESS_*`` applied.
        env: the resolved ``BENANZA_*`` settings; None reads this process's environment once, here.
    """
    env = env if env is not None else load_settings()
    harness = settings if settings is not None else env.harness_settings()
    target = open_target(runtime, runtime_options)
    name = system or env.system_name()
    store = open_store(db, settings=env)
    try:
        target = settle_threads(target, runtime, runtime_options, store, name)
        register(store, name, [target])
    except BaseException:
        store.close()
        target.runtime.close()
        raise
    return LocalContext(store, target.runtime, name, target.stack_id, target.stack, harness, target.notes)


def plan_models(
    paths: Iterable[Path],
    runtime: Runtime,
    batches: Sequence[int | None] = (None,),
    request: BindingRequest = NO_REQUEST,
    granularities: Iterable[int] = (),
    *,
    known: Iterable[NamedModel] = (),
    on_crash: Callable[[CrashedModelError], None] | None = None,
) -> list[ModelPlan]:
    """One plan per model and batch size, the models named apart from each other and from ``known``
    (the store's: ``Store.model_names``; see ``benanza.model.names``). ``request``: the ``--shape``,
    ``--dim`` and ``--value`` flags (``benanza.model.request``).

    ``on_crash``: told of each model whose processing crashed the process earlier in a supervised
    command (``benanza.crashes``), which is then left out and the rest planned; None: raised."""
    plans = []
    for path in paths:
        try:
            plans.extend(plan_model_file(path, [runtime], batches, request, granularities)[0])
        except CrashedModelError as exc:
            if on_crash is None:
                raise
            on_crash(exc)
    return with_distinct_names(plans, known)


def spec_groups(ctx: LocalContext, plans: Sequence[ModelPlan], e2e: bool) -> list[list[BenchmarkSpec]]:
    """Per plan, every spec it needs (``specs_for_plan``'s order): the interleaved schedule's groups."""
    runtime = ctx.runtime
    defaults, exported = runtime.runtime_defaults() is not None, runtime.runs_exported()
    return [
        specs_for_plan(plan, runtime.name, runtime.variant(), e2e=e2e, defaults=defaults, exported=exported)
        for plan in plans
    ]


def specs_for(ctx: LocalContext, plans: Sequence[ModelPlan], e2e: bool) -> list[BenchmarkSpec]:
    return unique_specs(s for group in spec_groups(ctx, plans, e2e) for s in group)


def bench(
    ctx: LocalContext,
    plans: Sequence[ModelPlan],
    e2e: bool = False,
    retry_failed: bool = False,
    progress: Callable[..., None] | None = None,
    repeat: bool = False,
    measurer: Measurer | None = None,
) -> RunSummary:
    """Benchmark what the store lacks for this system and stack, after storing the plans (what analysis reads).

    With ``repeat`` everything is measured again: the store keeps the replaced results as repeats.
    ``measurer``: one kept across calls (``measurer_for``; ``run_specs``), else one for this call.
    """
    exported = ctx.runtime.runs_exported()
    ctx.store.put_plans(ctx.system, ctx.stack_id, stored_plans(plans, ctx.runtime.name, ctx.variant, exported=exported))
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
        measurer=measurer,
    )


def measurer_for(ctx: LocalContext) -> Measurer:
    """A measurer of ``ctx``'s runtime for several ``bench`` calls (a model at a time, say), which the
    caller closes: the GPU runtime's worker process is then started once (``run_specs``)."""
    return Measurer(ctx.runtime, ctx.settings, system=ctx.system, stack_id=ctx.stack_id)


def analyze(ctx: LocalContext, plans: Sequence[ModelPlan]) -> list[LowerBound]:
    """Lower bounds of every plan from the store's results for this system and stack."""
    rows = []
    variant = ctx.variant
    for plan in plans:
        results = results_by_key(_plan_records(ctx, plan), variant, plan.batch_size)
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
                results_by_key(records, ctx.variant, plan.batch_size),
                system=ctx.system,
                stack_id=ctx.stack_id,
                runtime=ctx.runtime.name,
                variant=ctx.variant,
                without_tensor_cores=results_by_key(records, other, plan.batch_size) if other else None,
            )
        )
    return rows


def _plan_records(ctx: LocalContext, plan: ModelPlan) -> list[BenchmarkRecord]:
    """Every record of this system, stack and runtime that ``plan`` can use (any variant)."""
    keys = set(plan.networks) | whole_model_keys(plan.model_key)
    return ctx.store.records(system=ctx.system, stack_id=ctx.stack_id, runtime=ctx.runtime.name, keys=keys)


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
