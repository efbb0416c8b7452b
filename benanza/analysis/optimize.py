"""Benanza's optimization analyses: what each optimization is worth for one model on one GPU.

From the records of the GPU runtime (``runtimes.cuda``), where a layer's ``kernel_samples``
are its fastest candidate's and its ``samples`` the candidate a framework picks without
benchmarking (``stats.extras["algorithms"]`` holds them all):

- ``algorithm_selection``: the sequential lower bound with the heuristic's pick for every
  layer over the bound with the best algorithm for every layer (Benanza: up to 1.32x
  geo-mean). Per op type as well: where the framework's default pick leaves time.
- ``tensor_cores``: the bound with tensor cores forbidden over the bound with them allowed
  (two variants of the same stack; ``None`` until both are measured).
- ``fusion``: every layer run alone over conv+bias+activation chains fused.
- ``parallel``: the sequential bound over the critical path of the layer DAG.
- ``framework_gap``: the framework's measured end-to-end latency (ONNX Runtime's CUDA
  execution provider) over the sequential bound; above 1 is what the framework adds.
- ``combined``: end to end over the parallel, fused, best-algorithm bound (Benanza: up to
  1.95x on ResNet-50 with every optimization).
- ``static_shapes``: the model end to end as its file is, its input dimensions free, over the
  model bound (``LowerBound.exported_e2e_ms``; measured by ONNX Runtime on the CPU): what fixing
  the dimensions is worth (Optimum's T5 decoder with its cache: 1.21x). Below 1, the model runs
  faster as exported (the corpus's BERT: ONNX Runtime fuses otherwise at static shapes).

Every figure is ``None`` when an input is missing; coverage comes from the lower bound.
Pure: records in, values out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from benanza.analysis.lower_bound import KERNEL_STATISTIC, LowerBound, lower_bound

if TYPE_CHECKING:  # a ModelPlan or a stored plan (bench/plans.py): analysis loads no model
    from benanza.bench.generate import ModelPlan
    from benanza.bench.plans import StoredPlan
    from benanza.bench.records import BenchmarkRecord


def _kernel_ms(record: BenchmarkRecord | None, which: str) -> float | None:
    """A record's kernel figure in ms: ``best`` candidate or ``default`` (the framework's pick).

    Both are device-timed kernel samples on the GPU runtime, so both take the lower bound's
    statistic (``KERNEL_STATISTIC``) and their ratio compares like with like. A record that lists no
    candidates (``extras["algorithms"]``: a runtime that picks none, ONNX Runtime) has one figure for
    both: its kernel time (its ``stats`` are call latencies there, and their ratio to kernel times
    read as a 5.4x algorithm choice for a Qwen3 of Adds and MatMuls).
    """
    if record is None or record.outcome != "ok":
        return None
    extras = record.stats.extras if record.stats is not None else {}
    if extras.get("view"):
        return 0.0  # a view (Reshape, Flatten, ...) launches nothing: no pick to make, free both ways
    algorithms = extras.get("algorithms")
    if which == "default" and algorithms is not None and not algorithms.get("default"):
        return None  # the framework's library ran no candidate: there is no default pick to compare
    stats = record.kernel_stats if which == "best" or algorithms is None else record.stats
    figure = stats.statistic(KERNEL_STATISTIC) if stats is not None else None
    return float(figure) * 1e3 if figure is not None else None


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


@dataclass(frozen=True)
class Optimizations:
    model: str
    system: str
    stack_id: str
    variant: str | None
    batch_size: int
    bound: LowerBound
    heuristic_ms: float | None  # sequential bound with every layer's default pick
    no_tensor_cores_ms: float | None  # sequential bound of the variant without tensor cores
    by_op_type: Mapping[str, dict[str, float]] = field(default_factory=dict)
    e2e_framework: str | None = None  # what ran the model end to end (its record's settings.framework)

    @property
    def algorithm_selection(self) -> float | None:
        return _ratio(self.heuristic_ms, self.bound.sequential_ms)

    @property
    def tensor_cores(self) -> float | None:
        return _ratio(self.no_tensor_cores_ms, self.bound.sequential_ms)

    @property
    def fusion(self) -> float | None:
        return _ratio(self.bound.sequential_unfused_ms, self.bound.sequential_ms)

    @property
    def parallel(self) -> float | None:
        return _ratio(self.bound.sequential_ms, self.bound.parallel_ms)

    @property
    def framework_gap(self) -> float | None:
        return _ratio(self.bound.e2e_ms, self.bound.sequential_ms)

    @property
    def combined(self) -> float | None:
        return _ratio(self.bound.e2e_ms, self.bound.parallel_ms)

    @property
    def static_shapes(self) -> float | None:
        return _ratio(self.bound.exported_e2e_ms, self.bound.e2e_ms)

    def to_dict(self) -> dict[str, Any]:
        b = self.bound
        return {
            "model": self.model,
            "system": self.system,
            "stack_id": self.stack_id,
            "variant": self.variant,
            "batch_size": self.batch_size,
            "sequential_ms": b.sequential_ms,
            "sequential_unfused_ms": b.sequential_unfused_ms,
            "parallel_ms": b.parallel_ms,
            "heuristic_ms": self.heuristic_ms,
            "no_tensor_cores_ms": self.no_tensor_cores_ms,
            "e2e_ms": b.e2e_ms,
            "e2e_framework": self.e2e_framework,
            "coverage": b.coverage,
            "speedups": {
                "algorithm_selection": self.algorithm_selection,
                "tensor_cores": self.tensor_cores,
                "fusion": self.fusion,
                "parallel": self.parallel,
                "framework_gap": self.framework_gap,
                "combined": self.combined,
                "static_shapes": self.static_shapes,
            },
            "by_op_type": {k: dict(v) for k, v in sorted(self.by_op_type.items())},
            "checks": list(b.checks),
            "method": METHOD,
        }


METHOD = {
    "algorithm_selection": f"sum of default-pick / best-candidate kernel times ({KERNEL_STATISTIC}, hot, fused units)",
    "tensor_cores": "sequential bound without tensor cores / with them (same stack, two variants)",
    "fusion": "every layer alone / conv+bias+activation fused (sequential bounds)",
    "parallel": "sequential bound / critical path of the layer DAG",
    "framework_gap": "the framework end to end (e2e_framework: ONNX Runtime's CUDA EP, or PyTorch where it has none)"
    " / sequential bound",
    "combined": "the framework end to end / parallel bound (fused, best algorithms)",
    "static_shapes": "end to end of the file as exported, input dimensions free / end to end bound",
}


def optimizations(
    plan: ModelPlan | StoredPlan,
    results: Mapping[str, Any],
    *,
    system: str,
    stack_id: str,
    runtime: str,
    variant: str | None,
    without_tensor_cores: Mapping[str, Any] | None = None,
) -> Optimizations:
    """Benanza's analyses of one model from its records (network or model key -> record).

    Args:
        without_tensor_cores: the records of the same stack's variant with tensor cores
            forbidden, when it was measured.
    """
    bound = lower_bound(plan, results, system=system, stack_id=stack_id, runtime=runtime, variant=variant)
    graph = plan.graph
    heuristic: float | None = 0.0
    by_op: dict[str, dict[str, float]] = {}
    picks = False  # whether any record chose among candidates: else algorithm selection is no figure
    for members, key in zip(plan.units, plan.unit_keys, strict=True):
        rec = results.get(key)
        picks = picks or (rec is not None and rec.stats is not None and "algorithms" in rec.stats.extras)
        best, default = _kernel_ms(rec, "best"), _kernel_ms(rec, "default")
        if default is None or heuristic is None:
            heuristic = None
        else:
            heuristic += default
        op = "+".join(graph.layers[i].op_type for i in members)
        entry = by_op.setdefault(op, {"count": 0, "best_ms": 0.0, "default_ms": 0.0})
        entry["count"] += 1
        if best is not None and default is not None:
            entry["best_ms"] += best
            entry["default_ms"] += default
    for entry in by_op.values():
        entry["default_over_best"] = _ratio(entry["default_ms"], entry["best_ms"]) or 0.0
    e2e = results.get(plan.model_key)
    framework = e2e.settings.get("framework") if e2e is not None and e2e.outcome == "ok" else None
    no_tc = None
    if without_tensor_cores:
        other = lower_bound(plan, without_tensor_cores, system=system, stack_id=stack_id, runtime=runtime, variant=None)
        no_tc = other.sequential_ms
    return Optimizations(
        model=plan.model,
        system=system,
        stack_id=stack_id,
        variant=variant,
        batch_size=plan.batch_size,
        bound=bound,
        heuristic_ms=heuristic if bound.coverage == 1.0 and picks else None,
        no_tensor_cores_ms=no_tc,
        by_op_type=by_op,
        e2e_framework=framework,
    )
