"""The single-machine pipeline: models -> plans -> benchmarks in the store -> lower bounds.

The fleet reuses every piece; this module only wires them for one machine: the local
system's fingerprint and software stack, one runtime, one store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benanza.analysis.lower_bound import LowerBound, lower_bound
from benanza.bench.execute import RunSummary, run_specs
from benanza.bench.generate import ModelPlan, plan_model, specs_for_plan, unique_specs
from benanza.bench.harness import HarnessSettings
from benanza.bench.spec import BenchmarkSpec, variant_id
from benanza.fingerprint import default_system_name, stack_fingerprint, stack_id, system_fingerprint
from benanza.model.process import process_model
from benanza.runtimes.base import Runtime, get_runtime
from benanza.store.base import Store, open_store


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
    store.register_system(name, system_fingerprint())
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


def specs_for(ctx: LocalContext, plans: Sequence[ModelPlan], e2e: bool) -> list[BenchmarkSpec]:
    specs: list[BenchmarkSpec] = []
    for plan in plans:
        specs.extend(specs_for_plan(plan, ctx.runtime.name, ctx.runtime.variant(), e2e=e2e))
    return unique_specs(specs)


def bench(
    ctx: LocalContext,
    plans: Sequence[ModelPlan],
    e2e: bool = False,
    retry_failed: bool = False,
    progress: Callable[..., None] | None = None,
) -> RunSummary:
    """Benchmark what the store lacks for this system and stack."""
    specs = specs_for(ctx, plans, e2e)
    return run_specs(
        specs,
        ctx.runtime,
        ctx.store,
        ctx.settings,
        system=ctx.system,
        stack_id=ctx.stack_id,
        retry_failed=retry_failed,
        progress=progress,
    )


def analyze(ctx: LocalContext, plans: Sequence[ModelPlan]) -> list[LowerBound]:
    """Lower bounds of every plan from the store's results for this system and stack."""
    rows = []
    variant = ctx.variant
    for plan in plans:
        keys = set(plan.networks) | {plan.model_key}
        records = ctx.store.records(system=ctx.system, stack_id=ctx.stack_id, runtime=ctx.runtime.name, keys=keys)
        # one record per key: an ok result beats a failure, the newest beats older ones
        ordered = sorted(records, key=lambda r: (r.outcome == "ok", r.measured_at))
        results = {r.key: r for r in ordered if r.variant == variant and r.batch_size == plan.batch_size}
        rows.append(
            lower_bound(
                plan, results, system=ctx.system, stack_id=ctx.stack_id, runtime=ctx.runtime.name, variant=variant
            )
        )
    return rows
