"""Analysis of what a performance database holds: stored plans and records, nothing else.

Every figure here comes from ``Store.plans`` (what each system's stack measured for a
model: its layers, execution units and sequences, ``bench/plans.py``) and ``Store.records``
(read without raw samples). No model file is read, no runtime is built and nothing is
written, so a database can be analysed read-only on a machine that has neither the models
nor the runtime that measured them (a laptop reading a GPU fleet's results).

A plan is stored per (system, stack, runtime, variant, model, batch size, granularities):
one lower-bound row is computed per plan, with the records of that system, stack, runtime,
variant and batch size. Two plans of a model that differ only in their granularities (runs
with different ``--granularity`` lists) are read as one.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benanza.analysis.compare import SystemReport, latest_stack, system_prices, system_report
from benanza.analysis.lower_bound import LowerBound, lower_bound
from benanza.analysis.optimize import Optimizations, optimizations
from benanza.bench.plans import StoredPlan
from benanza.bench.records import BenchmarkRecord
from benanza.bench.spec import SpecKind, parse_variant
from benanza.errors import UsageError
from benanza.store.base import Store

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


def results_by_key(
    records: Iterable[BenchmarkRecord], variant: str | None, batch_size: int
) -> dict[str, BenchmarkRecord]:
    """One record per key of ``variant`` and ``batch_size``: an ok result beats a failure, the newest older ones."""
    ordered = sorted(records, key=lambda r: (r.outcome == "ok", r.measured_at))
    return {r.key: r for r in ordered if r.variant == variant and r.batch_size == batch_size}


@dataclass(frozen=True)
class PlanSelection:
    """Which stored plans to analyse; None (or empty) selects all.

    ``models``: model names (a file's stem: ``resnet50`` of ``resnet50.onnx``), as stored or as a
    binding is shown (``model (input_ids=Bx1)``: ``binding_names``);
    ``variant``: settings a plan's variant must have (``{"threads": "1"}``);
    ``granularities``: the composition's G values to report (those a plan has);
    ``shapes``: bound input shapes a plan must have.
    """

    models: frozenset[str] | None = None
    batches: frozenset[int] | None = None
    runtime: str | None = None
    variant: Mapping[str, str] | None = None
    granularities: tuple[int, ...] | None = None
    shapes: Mapping[str, tuple[int, ...]] | None = None  # bound inputs a plan must have (``--shape``)

    @classmethod
    def of(
        cls,
        *,
        models: Iterable[str | Path] | None = None,
        batches: Iterable[int | None] | None = None,
        runtime: str | None = None,
        variant: Mapping[str, Any] | None = None,
        granularities: Iterable[int] | None = None,
        shapes: Mapping[str, Sequence[int]] | None = None,
    ) -> PlanSelection:
        """A selection from command-line values: model files or names, batch sizes (None: any)."""
        names = {Path(m).stem if str(m).endswith(".onnx") else str(m) for m in models or ()}
        sizes = list(batches or ())
        grans = tuple(sorted(set(granularities or ())))
        return cls(
            models=frozenset(names) or None,
            batches=None if not sizes or None in sizes else frozenset(int(b) for b in sizes if b is not None),
            runtime=runtime,
            variant={k: str(v) for k, v in variant.items() if v is not None} if variant else None,
            granularities=grans or None,
            shapes={name: tuple(int(d) for d in dims) for name, dims in shapes.items()} if shapes else None,
        )

    def admits(self, plan: StoredPlan, shown: str | None = None) -> bool:
        """Whether ``plan`` is selected; ``shown``: the name its binding is shown by, which selects it too."""
        if self.models is not None and plan.model not in self.models and shown not in self.models:
            return False
        if self.batches is not None and plan.batch_size not in self.batches:
            return False
        if self.runtime is not None and plan.runtime != self.runtime:
            return False
        if self.shapes and any(plan.shapes.get(name) != dims for name, dims in self.shapes.items()):
            return False
        if self.variant:
            have = parse_variant(plan.variant)
            if any(k in have and have[k] != v for k, v in self.variant.items()):
                return False
        return True


def binding_names(plans: Sequence[StoredPlan]) -> list[StoredPlan]:
    """The plans, each model stored at several bindings beyond its batch size named by the one it has.

    A decoder measured at its prompt and at one step after it (``--dim sequence_length=128`` and
    ``=1``), BERT at sequences 128 and 384: one model, one batch size, two workloads, which every
    table, report page and CSV keys by model and batch size would show as one. Where a model's plans
    bind its inputs' other dimensions (all but the leading, the batch's) in more than one way, each
    is named by the inputs that tell them apart, the batch written ``B``: ``model (input_ids=Bx1)``
    and ``model (input_ids=Bx128)``. A model stored at one binding keeps its name.
    """
    signatures: dict[str, list[tuple]] = defaultdict(list)
    for p in plans:
        signature = _binding(p)
        if signature not in signatures[p.model]:
            signatures[p.model].append(signature)
    labels: dict[tuple[str, tuple], str] = {}
    for model, found in signatures.items():
        if len(found) < 2:
            continue
        names = sorted({name for signature in found for name, _ in signature})
        differing = sorted(
            (n for n in names if len({dict(sig).get(n) for sig in found}) > 1),
            key=lambda n: _telling(n, found),
        )
        for count in range(1, len(differing) + 1):  # the fewest inputs that tell every binding apart
            shown = differing[:count]
            texts = {sig: ", ".join(_bound_text(n, dict(sig).get(n)) for n in shown) for sig in found}
            if len(set(texts.values())) == len(found):
                break
        labels.update({(model, sig): f"{model} ({text})" for sig, text in texts.items()})
    return [replace(p, model=labels[key]) if (key := (p.model, _binding(p))) in labels else p for p in plans]


def _telling(name: str, signatures: Sequence[tuple]) -> tuple[int, float]:
    """How well an input tells bindings apart, best first: fewer dimensions (token ids before a KV
    cache), then the widest spread of sizes (a prompt's ``input_ids`` of 128 against a step's 1
    before its attention mask's 128 against 129). An input bound to a value (a merged decoder's
    ``use_cache_branch``) tells them apart best of all."""
    bound = [dict(sig).get(name) for sig in signatures]
    if any(isinstance(b, int | str) for b in bound):
        return -1, 0.0
    shapes = [b or () for b in bound]
    sizes = [math.prod(shape) for shape in shapes]
    spread = max(sizes) / min(sizes) if min(sizes) > 0 else math.inf
    return max(len(shape) for shape in shapes), -spread


def _binding(plan: StoredPlan) -> tuple:
    """A plan's bound inputs without their leading (batch) dimension, in input order, then the inputs bound
    to a value (``model.steering``) by their value, then those given their values (``--input``) by file name."""
    shapes = tuple((name, tuple(shape[1:])) for name, shape in plan.shapes.items())
    values = tuple((name, int(value)) for name, value in sorted(plan.values.items()))
    return shapes + values + tuple((f"{name} from", file) for name, file in sorted(plan.fed.items()))


def _bound_text(name: str, bound: tuple[int, ...] | int | str | None) -> str:
    if name.endswith(" from"):  # a given input's file (``_binding``)
        return f"{name} {bound or 'synthetic values'}"
    if bound is None:
        return f"{name}=absent"
    if isinstance(bound, int):
        return f"{name}={bound}"
    return f"{name}={'x'.join(['B', *map(str, bound)])}"


def merged_plans(plans: Iterable[StoredPlan], granularities: Sequence[int] | None = None) -> list[StoredPlan]:
    """One plan per (system, stack, runtime, variant, model, batch size): same-unit plans' sequences joined.

    ``granularities`` keeps only those G of each plan's sequences (the others are not reported).
    """
    merged: dict[tuple, StoredPlan] = {}
    for plan in plans:
        key = plan.identity()[:6]
        merged[key] = merged[key].with_sequences(plan) if key in merged else plan
    if not granularities:
        return list(merged.values())
    wanted = set(granularities)
    return [
        p
        if set(p.sequence_keys) <= wanted
        else _shared_graph(
            p,
            replace(
                p,
                sequences={g: s for g, s in p.sequences.items() if g in wanted},
                sequence_keys={g: k for g, k in p.sequence_keys.items() if g in wanted},
            ),
        )
        for p in merged.values()
    ]


def _shared_graph(source: StoredPlan, derived: StoredPlan) -> StoredPlan:
    derived.__dict__["graph"] = source.graph  # same layers: build the graph once
    return derived


@dataclass(frozen=True)
class StoredAnalysis:
    """One lower-bound row of a stored system with what it was computed from."""

    plan: StoredPlan
    results: Mapping[str, BenchmarkRecord]  # key -> the record the row used (its variant)
    records: Sequence[BenchmarkRecord]  # every record of the plan's keys on this system, stack and runtime
    row: LowerBound


def stored_analyses(
    store: Store,
    systems: Iterable[str] = (ALL,),
    *,
    stack: str = LATEST,
    selection: PlanSelection | None = None,
    plans: Sequence[StoredPlan] | None = None,
) -> list[StoredAnalysis]:
    """Lower bounds of the stored plans on stored systems: one per plan (see the module docstring).

    Rows come per system and stack (in the order asked, stacks oldest first), then by model,
    batch size, runtime and variant.

    Args:
        systems: names or ``all`` (comma-separated values allowed), checked against the store.
        stack: ``latest`` (the stack each system registered last), ``all``, or one stack id.
        selection: which plans (default: all).
        plans: the store's plans when the caller has read them already (``store.plans()``).

    Raises:
        UsageError: an unknown system or stack.
    """
    selection = selection or PlanSelection()
    names = resolve_systems(store, systems)
    stacks = select_stacks(store, names, stack)
    by_place: dict[tuple[str, str], list[StoredPlan]] = defaultdict(list)
    # named over every stored plan: a model's bindings are named alike on every system and stack, whatever
    # is selected (``binding_names``), and a binding is selected by the name it is shown by too
    every = list(store.plans() if plans is None else plans)
    for stored, shown in zip(every, binding_names(every), strict=True):
        if selection.admits(stored, shown.model):
            by_place[(shown.system, shown.stack_id)].append(shown)
    analyses = []
    for system in names:
        for sid in stacks.get(system, []):
            chosen = merged_plans(by_place.get((system, sid), []), selection.granularities)
            chosen.sort(key=lambda p: (p.model, p.batch_size, p.runtime, p.variant))
            if not chosen:
                continue
            wanted = set().union(*(p.keys for p in chosen))
            grouped: dict[tuple[str, int], list[BenchmarkRecord]] = defaultdict(list)
            for r in store.records(system=system, stack_id=sid, keys=wanted, payload=False):
                grouped[(r.runtime, r.batch_size)].append(r)
            for plan in chosen:
                keys = plan.keys
                records = [r for r in grouped.get((plan.runtime, plan.batch_size), ()) if r.key in keys]
                results = results_by_key(records, plan.variant, plan.batch_size)
                row = lower_bound(
                    plan, results, system=system, stack_id=sid, runtime=plan.runtime, variant=plan.variant
                )
                analyses.append(StoredAnalysis(plan, results, records, row))
    return analyses


def analyze_stored(
    store: Store,
    systems: Iterable[str] = (ALL,),
    *,
    stack: str = LATEST,
    selection: PlanSelection | None = None,
) -> list[LowerBound]:
    """The lower-bound rows of ``stored_analyses``."""
    return [a.row for a in stored_analyses(store, systems, stack=stack, selection=selection)]


def tensor_core_variant(variant: str | None) -> str | None:
    """The same variant with tensor cores forbidden, when ``variant`` allows them."""
    parsed = parse_variant(variant)
    if parsed.get("tensor_cores") != "True":
        return None
    return ",".join(f"{k}={'False' if k == 'tensor_cores' else v}" for k, v in parsed.items())


def stored_optimizations(analysis: StoredAnalysis) -> Optimizations:
    """Benanza's optimisation analyses of one stored row; the tensor-core figure needs the same stack's
    records with tensor cores forbidden (``--no-tensor-cores``), else it is None."""
    row = analysis.row
    other = tensor_core_variant(row.variant)
    without = {r.key: r for r in analysis.records if r.variant == other and r.batch_size == row.batch_size}
    return optimizations(
        analysis.plan,
        analysis.results,
        system=row.system,
        stack_id=row.stack_id,
        runtime=row.runtime,
        variant=row.variant,
        without_tensor_cores=without or None,
    )


def prices(store: Store, overrides: Mapping[str, float | None] | None = None) -> dict[str, float | None]:
    """USD per hour by system: ``config.price_per_hour`` of the stored fingerprints, ``overrides`` (a fleet
    config's prices, read by the caller) first."""
    return system_prices(store.systems(), dict(overrides or {}))


def corpus_plans(plans: Iterable[StoredPlan], batch: int | None = None) -> list[StoredPlan]:
    """One plan per model (the first stored) at ``batch`` (None: each model's smallest batch size), by name."""
    chosen: dict[str, StoredPlan] = {}
    for p in sorted(plans, key=lambda p: (p.model, p.batch_size)):
        if batch is not None and p.batch_size != batch:
            continue
        chosen.setdefault(p.model, p)
    return list(chosen.values())


def system_reports(
    store: Store,
    systems: Iterable[str] = (ALL,),
    *,
    batch: int | None = None,
    top: int = 10,
    selection: PlanSelection | None = None,
    plans: Sequence[StoredPlan] | None = None,
) -> list[SystemReport]:
    """Per system: hardware, stacks over time, record counts, slowest layers and corpus coverage.

    The corpus is every stored model (or those ``selection`` names) at ``batch`` (None: each at its smallest
    stored batch size, a model's own batch being the default of every command), from the
    stored plans; coverage is the share of its unique layer keys with an ok record (any
    runtime and variant) of the system's latest stack. ``plans``: ``store.plans()`` already read.
    """
    names = resolve_systems(store, systems)
    selection = selection or PlanSelection()
    stored = plans if plans is not None else store.plans()
    corpus = corpus_plans((p for p in stored if selection.models is None or p.model in selection.models), batch)
    corpus_keys = {layer.layer_key for p in corpus for layer in p.layers}
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
            layers = store.records(system=name, stack_id=sid, kind=str(SpecKind.LAYER), outcome="ok", payload=False)
            covered = {r.key for r in layers if (batch is None or r.batch_size == batch) and r.key in corpus_keys}
        reports.append(
            system_report(
                documents[name],
                stacks,
                summary,
                layers,
                corpus_keys=corpus_keys,
                covered_keys=covered,
                corpus_models=len(corpus),
                batch_size=batch,
                top=top,
            )
        )
    return reports
