"""Time to process the zoo and the corpus: load, bind, fold, infer, resolve, extract, dedup, Jaccard.

Targets: the nine zoo models under 3 s (issue 2); the corpus of today's models (``corpus/``,
at batch 1, text models at their corpus sequence length) under 10 s per 40 models (issue 14),
on a 2-core machine.

Each run processes every model once with ``process_model`` (what ``models`` commands do)
and then summarises them (unique layers, repeats, pairwise Jaccard); the first run of each
set is a warm-up, not counted (for the corpus it also pays for importing ONNX Runtime and
sympy, which shape resolution needs; reported as ``corpus.cold_total_s``). One more pass runs
the same pipeline stage by stage (``--stage-runs``), for the breakdown; its layer keys and
model keys are checked against ``process_model``'s, so the breakdown measures the real thing.

    python benchmarks/model_processing.py [--repeat 5] [--corpus-repeat 3] [--stage-runs 1] [--no-corpus]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benanza.collector import collection_paused
from benanza.model.corpus import summarize
from benanza.model.extract import extract
from benanza.model.graph import ModelGraph
from benanza.model.load import load_model
from benanza.model.process import model_name, process_model
from benanza.model.qdq import unique_dequantize
from benanza.model.request import BindingRequest, parse_shape_overrides
from benanza.model.resolve import needs_resolution, resolve_if_needed
from benanza.model.shapes import apply_binding, bind_shapes, fold_constants, infer_shapes
from benanza.model.zoo import zoo_paths

RESULTS = Path(__file__).parent / "results"
CORPUS = Path(__file__).resolve().parent.parent / "corpus"
ZOO_TARGET_S = 3.0
CORPUS_TARGET_S = 10.0
CORPUS_TARGET_MODELS = 40
_RUN_STAGES = ("process_s", "dedup_jaccard_s", "total_s")
STAGES = ("load_s", "bind_s", "fold_s", "infer_s", "resolve_s", "qdq_s", "extract_s")


@dataclass(frozen=True)
class Item:
    """One model to process: its file and how it is bound."""

    name: str
    path: Path
    batch: int | None
    shapes: Mapping[str, tuple[int, ...]]


def zoo_items() -> list[Item]:
    return [Item(model_name(p), p, None, {}) for p in zoo_paths()]


def corpus_items() -> list[Item]:
    manifest = json.loads((CORPUS / "corpus.json").read_text())
    return [Item(e["name"], CORPUS / e["file"], 1, parse_shape_overrides(e["shape_args"])) for e in manifest]


def run_once(items: list[Item]) -> dict[str, Any]:
    """Process every model end to end, then summarise: per-model and total seconds."""
    per_model: dict[str, float] = {}
    graphs = []
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for item in items:
        started = time.perf_counter()
        graphs.append(process_model(item.path, item.batch, BindingRequest(item.shapes)).graph)
        per_model[item.name] = time.perf_counter() - started
    t1 = time.perf_counter()
    summary = summarize(graphs)
    t2 = time.perf_counter()
    cpu = time.process_time() - cpu0
    assert summary.unique_layers > 0
    return {
        "process_s": t1 - t0,
        "dedup_jaccard_s": t2 - t1,
        "total_s": t2 - t0,
        "cpu_s": cpu,
        "per_model_s": per_model,
    }


def staged_once(items: list[Item]) -> dict[str, Any]:
    """``process_model``'s pipeline (``shapes.prepare_model``, ``extract``) timed stage by stage."""
    totals = dict.fromkeys(STAGES, 0.0)
    per_model: dict[str, dict[str, float]] = {}
    shaped_by: Counter[str] = Counter()
    resolved_models: list[str] = []
    graphs: list[ModelGraph] = []

    def timed(stage: str, row: dict[str, float], fn: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        out = fn()
        row[stage] = row.get(stage, 0.0) + time.perf_counter() - started
        return out

    for item in items:
        row: dict[str, float] = {}
        with collection_paused():  # as process_model runs
            proto = timed("load_s", row, lambda item=item: load_model(item.path))
            binding = timed(
                "bind_s", row, lambda p=proto, i=item: bind_shapes(p, i.path, i.batch, BindingRequest(i.shapes))
            )
            if binding.rebatch:  # prepare_model's rebatch pass is not staged here
                raise SystemExit(f"{item.name}: rebatched inputs; stage the model at its own batch")
            bound = timed("bind_s", row, lambda p=proto, b=binding: apply_binding(p, b))
            folded = timed("fold_s", row, lambda m=bound, i=item: fold_constants(m, i.path))
            inferred = timed("infer_s", row, lambda m=folded, i=item: infer_shapes(m, i.path))
            prepared, report = timed("resolve_s", row, lambda m=inferred, i=item: resolve_if_needed(m, i.path))
            if needs_resolution(inferred):
                resolved_models.append(item.name)
            unique = timed("qdq_s", row, lambda m=prepared: unique_dequantize(m))
            graph = timed("extract_s", row, lambda m=unique, r=report, i=item: extract(m, i.name, str(i.path), r))
        graphs.append(graph)
        shaped_by.update(dict(report.shaped_by))
        per_model[item.name] = row
        for stage, seconds in row.items():
            totals[stage] += seconds
    started = time.perf_counter()
    summarize(graphs)
    totals["dedup_jaccard_s"] = time.perf_counter() - started
    return {
        "totals": totals,
        "per_model": per_model,
        "graphs": graphs,
        "tensors_shaped_by": dict(shaped_by),
        "resolved_models": resolved_models,
    }


def check_same(items: list[Item], staged: list[ModelGraph]) -> None:
    """The staged pipeline must give ``process_model``'s layers and model keys."""
    for item, graph in zip(items, staged, strict=True):
        whole = process_model(item.path, item.batch, BindingRequest(item.shapes)).graph
        if whole.layer_keys != graph.layer_keys or whole.graph_key != graph.graph_key:
            reasons = {u.reason for u in whole.unsupported} ^ {u.reason for u in graph.unsupported}
            raise SystemExit(
                f"{item.name}: the staged pipeline differs from process_model: layers {len(graph.layers)} staged, "
                f"{len(whole.layers)} whole; shaped by {dict(graph.shaped_by)} staged, {dict(whole.shaped_by)} whole; "
                f"reasons in one only: {sorted(reasons)[:3]}"
            )


def measure(items: list[Item], repeat: int, stage_runs: int) -> dict[str, Any]:
    cold = run_once(items)  # warm imports and caches; not counted
    runs = [run_once(items) for _ in range(repeat)]
    staged = [staged_once(items) for _ in range(stage_runs)]
    if staged:
        check_same(items, staged[-1]["graphs"])
    totals = [r["total_s"] for r in runs]
    out: dict[str, Any] = {
        "models": len(items),
        "repeat": repeat,
        "cold_total_s": cold["total_s"],
        "total_s_median": statistics.median(totals),
        "total_s_min": min(totals),
        "total_s_max": max(totals),
        "total_s_runs": totals,
        # this process's CPU time: what the work costs, whatever else the machine runs
        "cpu_s_median": statistics.median(r["cpu_s"] for r in runs),
        "cpu_s_min": min(r["cpu_s"] for r in runs),
        "stages_median": {k: statistics.median(r[k] for r in runs) for k in _RUN_STAGES},
        "per_model_s_median": {
            i.name: round(statistics.median(r["per_model_s"][i.name] for r in runs), 4) for i in items
        },
    }
    if staged:
        out["stage_breakdown_s"] = {
            k: round(statistics.median(s["totals"][k] for s in staged), 4) for k in (*STAGES, "dedup_jaccard_s")
        }
        out["stage_breakdown_per_model_s"] = {
            name: {k: round(v, 4) for k, v in row.items()} for name, row in staged[-1]["per_model"].items()
        }
        out["tensors_shaped_by"] = staged[-1]["tensors_shaped_by"]
        out["models_resolved"] = staged[-1]["resolved_models"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="counted runs over the zoo")
    parser.add_argument("--corpus-repeat", type=int, default=3, help="counted runs over the corpus")
    parser.add_argument("--stage-runs", type=int, default=1, help="stage-by-stage runs per set (0: none)")
    parser.add_argument("--no-corpus", action="store_true", help="the zoo only")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    zoo = measure(zoo_items(), args.repeat, args.stage_runs)
    result: dict[str, Any] = {
        "benchmark": "model_processing",
        # the zoo's figures at the top level, as before the corpus was measured
        **{k: zoo[k] for k in ("models", "repeat", "total_s_median", "total_s_min", "total_s_max", "stages_median")},
        "target_s": ZOO_TARGET_S,
        "zoo": zoo,
    }
    if not args.no_corpus:
        corpus = measure(corpus_items(), args.corpus_repeat, args.stage_runs)
        rate = CORPUS_TARGET_MODELS / corpus["models"]
        corpus.update(
            per_40_models_s_median=corpus["total_s_median"] * rate,
            per_40_models_s_min=corpus["total_s_min"] * rate,
            target_s_per_40_models=CORPUS_TARGET_S,
        )
        result["corpus"] = corpus
    result["machine"] = {
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        # other work on the machine slows every figure: the 1-minute load average before and after
        "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    result["time"] = datetime.now(UTC).isoformat(timespec="seconds")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "model_processing.json").write_text(json.dumps(result, indent=2) + "\n")
    for label, res in (("zoo", zoo), ("corpus", result.get("corpus"))):
        if res is None:
            continue
        print(
            f"{label} ({res['models']} models) processed in {res['total_s_median']:.2f} s median "
            f"(min {res['total_s_min']:.2f}, max {res['total_s_max']:.2f}, {res['repeat']} runs; "
            f"CPU {res['cpu_s_median']:.2f} s median)"
            + (f"; stages {_stages(res['stage_breakdown_s'])}" if "stage_breakdown_s" in res else "")
        )
    before, after = result["machine"]["load_average_1m"]
    print(f"zoo target < {ZOO_TARGET_S:.0f} s; load average {before} -> {after} on {os.cpu_count()} CPUs")
    if "corpus" in result:
        c = result["corpus"]
        print(
            f"corpus: {c['per_40_models_s_median']:.2f} s per {CORPUS_TARGET_MODELS} models median "
            f"(min {c['per_40_models_s_min']:.2f}); "
            f"target < {CORPUS_TARGET_S:.0f} s per {CORPUS_TARGET_MODELS} models; "
            f"first run {c['cold_total_s']:.2f} s (imports ONNX Runtime and sympy)"
        )


def _stages(stages: Mapping[str, float]) -> str:
    return ", ".join(f"{k.removesuffix('_s')} {v:.2f}" for k, v in stages.items())


if __name__ == "__main__":
    main()
