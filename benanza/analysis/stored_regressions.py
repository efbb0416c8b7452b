"""Regressions read from a store: each system's stacks, records and repeats in; reports out.

``regressions`` compares a system's latest stack with the one before it (or two named
stacks), or with ``history`` a stack's own repeated runs; ``new_regressions`` counts what
``fleet status`` shows. A model's units come from the plans the store holds (``model_units``),
so no model file or runtime is needed here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from benanza.analysis.compare import latest_stack
from benanza.analysis.regressions import (
    DEFAULT_SETTINGS,
    ModelUnits,
    RegressionReport,
    RegressionSettings,
    Subject,
    compare_stacks,
    history_changes,
)
from benanza.analysis.stored import binding_names, resolve_systems
from benanza.bench.plans import StoredPlan
from benanza.bench.records import BenchmarkRecord
from benanza.errors import UsageError
from benanza.store.base import Store


def model_units(plans: Iterable[StoredPlan], models: Iterable[str] = ()) -> list[ModelUnits]:
    """The execution units of each stored plan (of the named ``models`` only, when given).

    The one place the regression analysis learns a model's units: the plans ``bench run``
    stored beside the results, one per model, batch size, runtime and variant.
    """
    wanted = set(models)
    units: dict[tuple[str, int], ModelUnits] = {}
    for plan in plans:
        if wanted and plan.model not in wanted:
            continue
        counts = Counter(plan.unit_keys)
        units.setdefault(
            (plan.model_key, plan.batch_size),
            ModelUnits(plan.model, plan.model_key, plan.batch_size, tuple(counts.items())),
        )
    return list(units.values())


def _placed(plans: Iterable[StoredPlan], system: str, stack_id: str) -> list[StoredPlan]:
    return [p for p in plans if (p.system, p.stack_id) == (system, stack_id)]


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
    models: Iterable[str] = (),
    settings: RegressionSettings = DEFAULT_SETTINGS,
) -> list[StoredRegressions]:
    """Per system: its head stack against the stack before it (or ``base``), or with ``history`` its runs over time.

    Raises:
        UsageError: an unknown system or stack, or ``base`` without two stacks to compare.
    """
    names = resolve_systems(store, systems)
    models = list(models)
    wanted = set(models)
    # a model's bindings named as the lower-bound tables name them (``binding_names``), over every stored plan;
    # a model is selected by its stored name or by the name a binding of it is shown by
    every = store.plans()
    plans = [
        shown
        for stored, shown in zip(every, binding_names(every), strict=True)
        if not wanted or stored.model in wanted or shown.model in wanted
    ]
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
            units = model_units(_placed(plans, system, head_id))
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
            units = model_units(_placed(plans, system, head_id))
            report = compare_stacks(
                system, records, base=base_id, head=head_id, stacks=fingerprints, models=units, settings=settings
            )
        current = store.records(system=system, stack_id=head_id, outcome="ok")
        out.append(StoredRegressions(report, {Subject.of(r): r for r in current}, fingerprints))
    return out


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
