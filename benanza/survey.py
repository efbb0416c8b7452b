"""What the whole performance database holds, analysed: the input of ``benanza report``.

``survey`` reads the store and the model files once and calls the analysis functions the
CLI calls (``local.stored_analyses`` for lower bounds on every system and stack,
``local.system_reports``, ``model.corpus.summarize``, ``analysis.optimize``,
``analysis.breakdown``, ``analysis.history``, ``analysis.compare``); ``benanza.report.site``
only renders the ``Survey`` it returns.

Model files are needed to turn stored layer results into a model's figures (its layers,
fusion groups and sequences). The models analysed are the files given (default: the zoo);
stored end-to-end results of a model that is not among them are listed in ``unmatched``
(its label, batch size and the systems that measured it), since without its file nothing
else can be computed for it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benanza.analysis.breakdown import Spread, UnitShare, spread, unit_breakdown
from benanza.analysis.compare import Comparison, SystemReport, compare_systems, latest_stack
from benanza.analysis.history import FigureChange, UnitHistory, stack_changes, unit_history
from benanza.analysis.lower_bound import LowerBound
from benanza.analysis.optimize import Optimizations, optimizations
from benanza.bench.generate import batch_size_of
from benanza.bench.spec import SpecKind
from benanza.local import (
    ALL,
    StoredAnalysis,
    parse_variant,
    prices,
    stored_analyses,
    system_reports,
)
from benanza.model.corpus import CorpusSummary, summarize
from benanza.model.process import process_model
from benanza.store.base import Store

GPU_RUNTIMES = ("cudnn",)  # runtimes whose records hold every candidate (algorithm choice, tensor cores)


@dataclass(frozen=True)
class SystemFigures:
    """One model at one batch size on one system's stack: its row and what the pages show of it."""

    row: LowerBound
    e2e_spread: Spread | None
    breakdown: tuple[UnitShare, ...]
    optimizations: Optimizations

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.row.to_dict(),
            "e2e_spread": self.e2e_spread.to_dict() if self.e2e_spread else None,
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


def _tensor_core_variant(variant: str | None) -> str | None:
    """The same variant with tensor cores forbidden, when ``variant`` allows them."""
    parsed = parse_variant(variant)
    if parsed.get("tensor_cores") != "True":
        return None
    return ",".join(f"{k}={'False' if k == 'tensor_cores' else v}" for k, v in parsed.items())


def _optimizations(a: StoredAnalysis) -> Optimizations:
    """Benanza's analyses of one row: every one for a GPU runtime's records, else those of the bounds alone.

    On other runtimes a record holds one kernel (no candidates), so algorithm choice and
    tensor cores have no figure; fusion, parallelism and the framework gap come from the bounds.
    """
    row = a.row
    if row.runtime in GPU_RUNTIMES and row.variant is not None:
        other = _tensor_core_variant(row.variant)
        without = {r.key: r for r in a.records if r.variant == other and r.batch_size == row.batch_size}
        return optimizations(
            a.plan,
            a.results,
            system=row.system,
            stack_id=row.stack_id,
            runtime=row.runtime,
            variant=row.variant,
            without_tensor_cores=without or None,
        )
    return Optimizations(row.model, row.system, row.stack_id, row.variant, row.batch_size, row, None, None)


def survey(
    store: Store,
    paths: Sequence[Path],
    *,
    batches: Sequence[int | None] = (None,),
    overrides: Mapping[str, tuple[int, ...]] | None = None,
    granularities: Iterable[int] = (),
    opt_level: str = "extended",
    top: int = 10,
) -> Survey:
    """Everything the report shows, from the store and the model files (see the module docstring)."""
    systems = [s["name"] for s in store.systems()]
    loaded = [
        (path, batch, process_model(path, batch, overrides, fits_here=False)) for path in paths for batch in batches
    ]
    processed = [(batch, model) for _, batch, model in loaded]
    stacks = {name: store.stacks(name) for name in systems}
    order = {name: tuple(s["stack_id"] for s in docs) for name, docs in stacks.items()}
    latest = {name: (latest_stack(docs) or {}).get("stack_id") for name, docs in stacks.items()}
    analyses = (
        stored_analyses(
            store,
            processed,
            [ALL],
            stack=ALL,
            overrides=overrides,
            granularities=granularities,
            opt_level=opt_level,
        )
        if systems
        else []
    )
    grouped: dict[tuple[str, int], list[StoredAnalysis]] = defaultdict(list)
    for a in analyses:
        grouped[(a.row.model, a.row.batch_size)].append(a)
    models = []
    for path, _, model in loaded:
        graph = model.graph
        batch_size = batch_size_of(graph)
        group = grouped.get((graph.model, batch_size), [])
        newest = [a for a in group if latest.get(a.row.system) == a.row.stack_id]
        models.append(
            ModelFigures(
                model=graph.model,
                path=str(path),
                batch_size=batch_size,
                layers=len(graph.layers),
                unique_layers=len(graph.unique_layer_keys),
                not_benchmarked=tuple(
                    {"node": u.node, "op_type": u.op_type, "reason": u.reason} for u in graph.unsupported
                ),
                latest=tuple(
                    SystemFigures(
                        row=a.row,
                        e2e_spread=spread(a.results.get(a.plan.model_key), "call"),
                        breakdown=unit_breakdown(a.plan, a.row, a.results),
                        optimizations=_optimizations(a),
                    )
                    for a in newest
                ),
                every_stack=tuple(a.row for a in group),
                history=unit_history([a.row for a in group], order),
            )
        )
    first_batch = [m.graph for b, m in processed if b == batches[0]]
    corpus = summarize(first_batch)
    coverage_batch = batch_size_of(first_batch[0]) if first_batch else 1
    reports = (
        system_reports(store, [ALL], (), batch=coverage_batch, overrides=overrides, top=top, graphs=first_batch)
        if systems
        else []
    )
    latest_rows = [f.row for m in models for f in m.latest]
    comparisons = compare_systems(latest_rows, prices(store)) if latest_rows else []
    known = {a.plan.model_key for a in analyses} | _model_keys(processed)
    return Survey(
        db=store.shown_uri,
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
        systems=tuple(reports),
        stack_order=order,
        models=tuple(models),
        corpus=corpus,
        comparisons=tuple(comparisons),
        changes=tuple(stack_changes([a.row for a in analyses], order)),
        unmatched=_unmatched(store, known),
        model_paths=tuple(str(p) for p in paths),
    )


def _model_keys(processed: Sequence[tuple[int | None, Any]]) -> set[str]:
    from benanza.bench.generate import model_key

    return {model_key(m.graph) for _, m in processed}


def _unmatched(store: Store, known: set[str]) -> tuple[dict[str, Any], ...]:
    """Stored end-to-end results whose model is not among the files analysed: label, batch size, systems."""
    found: dict[tuple[str, str, int], set[str]] = defaultdict(set)
    for r in store.records(kind=str(SpecKind.MODEL)):
        if r.key not in known:
            found[(r.label, r.key, r.batch_size)].add(r.system)
    return tuple(
        {"label": label, "model_key": key, "batch_size": batch, "systems": sorted(systems)}
        for (label, key, batch), systems in sorted(found.items())
    )
