"""What the whole performance database holds, analysed: the input of ``benanza report``.

``survey`` reads the store only (its stored plans and its records, without raw samples)
and calls the analysis functions the CLI calls (``analysis.stored.stored_analyses`` for
lower bounds on every system and stack, ``analysis.stored.system_reports``,
``model.corpus.summarize``, ``analysis.optimize``, ``analysis.breakdown``,
``analysis.history``, ``analysis.compare``); ``benanza.report.site`` only renders the
``Survey`` it returns.

The models are those the store has plans of (every one, or those named): no model file is
read. Stored end-to-end results of a model without a stored plan (a database written
before plans were stored) are listed in ``unmatched`` (its label, batch size and the
systems that measured it), since without its plan nothing else can be computed for it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benanza.analysis.breakdown import UnitShare, unit_breakdown
from benanza.analysis.compare import Comparison, SystemReport, compare_systems, latest_stack
from benanza.analysis.history import FigureChange, UnitHistory, stack_changes, unit_history
from benanza.analysis.lower_bound import LowerBound
from benanza.analysis.optimize import Optimizations
from benanza.analysis.stored import (
    ALL,
    PlanSelection,
    StoredAnalysis,
    binding_names,
    corpus_plans,
    prices,
    stored_analyses,
    stored_optimizations,
    system_reports,
)
from benanza.bench.spec import SpecKind, whole_model_keys
from benanza.errors import UsageError
from benanza.model.corpus import CorpusSummary, summarize
from benanza.store.base import Store

GPU_RUNTIMES = ("cudnn",)  # runtimes whose records hold every candidate (algorithm choice, tensor cores)


@dataclass(frozen=True)
class SystemFigures:
    """One model at one batch size on one system's stack: its row and what the pages show of it."""

    row: LowerBound
    breakdown: tuple[UnitShare, ...]
    optimizations: Optimizations

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.row.to_dict(),
            "units": [u.to_dict() for u in self.breakdown],
            "optimizations": self.optimizations.to_dict()["speedups"],
        }


@dataclass(frozen=True)
class ModelFigures:
    """One model at one batch size: its latest figures per system, every stack's, and its layers' history."""

    model: str
    path: str
    batch_size: int
    layers: int
    unique_layers: int
    not_benchmarked: tuple[dict[str, str], ...]
    latest: tuple[SystemFigures, ...]  # one per system, its latest stack
    every_stack: tuple[LowerBound, ...]
    history: tuple[UnitHistory, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "path": self.path,
            "batch_size": self.batch_size,
            "layers": self.layers,
            "unique_layers": self.unique_layers,
            "not_benchmarked": list(self.not_benchmarked),
            "latest": [f.to_dict() for f in self.latest],
            "every_stack": [r.to_dict() for r in self.every_stack],
            "history": [h.to_dict() for h in self.history],
        }


@dataclass(frozen=True)
class Survey:
    db: str
    generated_at: str
    systems: tuple[SystemReport, ...]
    stack_order: Mapping[str, tuple[str, ...]]  # per system, oldest first
    models: tuple[ModelFigures, ...]
    corpus: CorpusSummary
    comparisons: tuple[Comparison, ...]  # latest stacks, with cost per 1000 inferences
    changes: tuple[FigureChange, ...]
    unmatched: tuple[dict[str, Any], ...]  # stored end-to-end results of models without a file here
    model_paths: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "db": self.db,
            "generated_at": self.generated_at,
            "systems": [s.to_dict() for s in self.systems],
            "models": [m.to_dict() for m in self.models],
            "corpus": self.corpus.to_dict(),
            "comparisons": [c.to_dict() for c in self.comparisons],
            "changes": [c.to_dict() for c in self.changes],
            "unmatched": list(self.unmatched),
            "model_paths": list(self.model_paths),
        }


def _optimizations(a: StoredAnalysis) -> Optimizations:
    """Benanza's analyses of one row: every one for a GPU runtime's records, else those of the bounds alone.

    On other runtimes a record holds one kernel (no candidates), so algorithm choice and
    tensor cores have no figure; fusion, parallelism and the framework gap come from the bounds.
    """
    row = a.row
    if row.runtime in GPU_RUNTIMES and row.variant is not None:
        return stored_optimizations(a)
    return Optimizations(row.model, row.system, row.stack_id, row.variant, row.batch_size, row, None, None)


def survey(
    store: Store,
    models: Iterable[str | Path] | None = None,
    *,
    batches: Sequence[int | None] | None = None,
    granularities: Iterable[int] | None = None,
    top: int = 10,
) -> Survey:
    """Everything the report shows, from the store alone (see the module docstring).

    Raises:
        UsageError: a model named in ``models`` has no stored plan.

    Args:
        models: model names or files (their stem names the model); default every stored one.
        batches: batch sizes to report (None in it, or none given: every stored one); the
            first one given is the corpus's batch size (default: each model's smallest).
        granularities: the composition's G values to report (default: every stored one).
    """
    selection = PlanSelection.of(models=models, batches=batches, granularities=granularities)
    systems = [s["name"] for s in store.systems()]
    stacks = {name: store.stacks(name) for name in systems}
    order = {name: tuple(s["stack_id"] for s in docs) for name, docs in stacks.items()}
    latest = {name: (latest_stack(docs) or {}).get("stack_id") for name, docs in stacks.items()}
    plans = store.plans() if systems else []
    shown = binding_names(plans)  # a binding is selected by the name its page has too
    if selection.models is not None:
        unknown = sorted(selection.models - {p.model for p in plans} - {p.model for p in shown})
        if unknown:
            stored = ", ".join(sorted({p.model for p in shown})) or "none"
            raise UsageError(f"{store.shown_uri}: no stored plan of model {', '.join(unknown)}; stored: {stored}")
    analyses = stored_analyses(store, [ALL], stack=ALL, selection=selection, plans=plans) if systems else []
    grouped: dict[tuple[str, int], list[StoredAnalysis]] = defaultdict(list)
    for a in analyses:
        grouped[(a.row.model, a.row.batch_size)].append(a)
    models_figures = []
    for (_, batch_size), group in sorted(grouped.items()):
        plan = group[0].plan
        newest = [a for a in group if latest.get(a.row.system) == a.row.stack_id]
        models_figures.append(
            ModelFigures(
                model=plan.model,
                path=plan.path,
                batch_size=batch_size,
                layers=len(plan.layers),
                unique_layers=len({layer.layer_key for layer in plan.layers}),
                not_benchmarked=tuple(
                    {"node": u.node, "op_type": u.op_type, "reason": u.reason} for u in plan.unsupported
                ),
                latest=tuple(
                    SystemFigures(
                        row=a.row,
                        breakdown=unit_breakdown(a.plan, a.row),
                        optimizations=_optimizations(a),
                    )
                    for a in newest
                ),
                every_stack=tuple(a.row for a in group),
                history=unit_history([a.row for a in group], order),
            )
        )
    selected = [p for p, s in zip(plans, shown, strict=True) if selection.admits(p, s.model)]
    first = batches[0] if batches else None
    corpus = corpus_plans(selected, first)
    reports = system_reports(store, [ALL], batch=first, top=top, selection=selection, plans=plans) if systems else []
    latest_rows = [f.row for m in models_figures for f in m.latest]
    comparisons = compare_systems(latest_rows, prices(store)) if latest_rows else []
    known = {key for p in plans for key in whole_model_keys(p.model_key)}
    return Survey(
        db=store.shown_uri,
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
        systems=tuple(reports),
        stack_order=order,
        models=tuple(models_figures),
        corpus=summarize([p.graph for p in corpus]),
        comparisons=tuple(comparisons),
        changes=tuple(stack_changes([a.row for a in analyses], order)),
        unmatched=_unmatched(store, known),
        model_paths=tuple(sorted({p.path for p in corpus})),
    )


def _unmatched(store: Store, known: set[str]) -> tuple[dict[str, Any], ...]:
    """Stored end-to-end results whose model is not among the files analysed: label, batch size, systems."""
    found: dict[tuple[str, str, int], set[str]] = defaultdict(set)
    for r in store.records(kind=str(SpecKind.MODEL), payload=False):
        if r.key not in known and "session" not in r.settings:  # its model is listed once, not per session
            found[(r.label, r.key, r.batch_size)].add(r.system)
    return tuple(
        {"label": label, "model_key": key, "batch_size": batch, "systems": sorted(systems)}
        for (label, key, batch), systems in sorted(found.items())
    )
