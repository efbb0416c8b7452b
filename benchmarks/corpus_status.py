"""Where benanza stands on the corpus of today's models (``corpus/``), model by model.

For every corpus model at batch 1 (text models at their corpus sequence length): the nodes
in the file, the layers and unique layers benanza extracts, the constant nodes, the nodes it
cannot benchmark with their reasons (``models inspect``'s ``unsupported``), and the plan on
ONNX Runtime's CPU provider (its execution units, and the notes where the plan departs from
how ORT runs the model, such as ORT failing to build its optimized graph). A model is *fully
shaped* when no node is left unbenchmarkable. Nothing is measured; this is the state that
issue 14's shape and coverage work starts from.

    python benchmarks/corpus_status.py [--no-plan] [--only NAME ...]

Writes ``benchmarks/results/corpus_status.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benanza.errors import BenanzaError
from benanza.model.corpus import summarize
from benanza.model.process import process_model
from benanza.model.request import BindingRequest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"
RESULTS = Path(__file__).parent / "results"
_QUOTED = re.compile(r"'[^']*'")


def reason_kind(reason: str) -> str:
    """A reason without the tensor names in it: ``unknown shape of input 'x'`` -> ``unknown shape of input``."""
    return _QUOTED.sub("", reason).replace("  ", " ").strip()


def status_of(entry: dict[str, Any], plan: bool) -> tuple[dict[str, Any], Any]:
    path = CORPUS / entry["file"]
    record: dict[str, Any] = {
        "model": entry["name"],
        "family": entry["family"],
        "variant": entry["variant"],
        "nodes": entry["nodes"],
        "shapes": entry["shape_args"],
    }
    started = time.perf_counter()
    try:
        processed = process_model(path, 1, BindingRequest.parse(entry["shape_args"]))
    except BenanzaError as exc:
        return {**record, "error": str(exc)}, None
    graph = processed.graph
    record.update(
        process_s=round(time.perf_counter() - started, 3),
        layers=len(graph.layers),
        unique_layers=len(graph.unique_layer_keys),
        constant_nodes=graph.constant_nodes,
        not_benchmarkable=len(graph.unsupported),
        fully_shaped=not graph.unsupported,
        reasons=dict(Counter(reason_kind(u.reason) for u in graph.unsupported).most_common()),
        ops_not_benchmarkable=dict(
            Counter(f"{u.domain}::{u.op_type}" if u.domain else u.op_type for u in graph.unsupported).most_common()
        ),
        examples=[{"node": u.node, "op_type": u.op_type, "reason": u.reason} for u in graph.unsupported[:5]],
    )
    if plan and graph.layers:
        from benanza.bench.generate import plan_model
        from benanza.runtimes.base import get_runtime

        started = time.perf_counter()
        model_plan = plan_model(processed, get_runtime("onnxruntime", threads=1), batch=1)
        record.update(
            plan_s=round(time.perf_counter() - started, 3),
            units=len(model_plan.units),
            unique_units=len(set(model_plan.unit_keys)),
            planning_warnings=list(model_plan.warnings),
        )
    return record, graph


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-plan", action="store_true", help="skip ONNX Runtime's plan (fusion groups)")
    parser.add_argument("--only", nargs="*", help="corpus model names")
    args = parser.parse_args()
    manifest = json.loads((CORPUS / "corpus.json").read_text())
    entries = [e for e in manifest if not args.only or e["name"] in args.only]
    records, graphs = [], []
    for entry in entries:
        record, graph = status_of(entry, plan=not args.no_plan)
        records.append(record)
        if graph is not None:
            graphs.append(graph)
        reasons = "; ".join(f"{n}x {r}" for r, n in list(record.get("reasons", {}).items())[:2])
        print(
            f"{record['model']:34s} nodes {record['nodes']:5d}  layers {record.get('layers', '-'):>5}  "
            f"unique {record.get('unique_layers', '-'):>4}  not benchmarkable {record.get('not_benchmarkable', '-'):>4}"
            f"  {record.get('error') or reasons}",
            flush=True,
        )
    processed = [r for r in records if "error" not in r]
    reasons: Counter[str] = Counter()
    for r in processed:
        reasons.update(r["reasons"])
    totals = {
        "models": len(records),
        "errors": len(records) - len(processed),
        "fully_shaped": sum(r["fully_shaped"] for r in processed),
        "nodes": sum(r["nodes"] for r in records),
        "layers": sum(r["layers"] for r in processed),
        "unique_layers_corpus": summarize(graphs).unique_layers if graphs else 0,
        "not_benchmarkable": sum(r["not_benchmarkable"] for r in processed),
        "reasons": dict(reasons.most_common()),
        "models_with_planning_warnings": sum(bool(r.get("planning_warnings")) for r in processed),
        "process_s": round(sum(r["process_s"] for r in processed), 2),
    }
    result = {
        "benchmark": "corpus_status",
        "batch": 1,
        "totals": totals,
        "models": records,
        "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()},
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    if not args.only:
        (RESULTS / "corpus_status.json").write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"\n{totals['models']} models: {totals['fully_shaped']} fully shaped, {totals['errors']} errors; "
        f"{totals['layers']} layers ({totals['unique_layers_corpus']} unique in the corpus), "
        f"{totals['not_benchmarkable']} nodes not benchmarkable; "
        f"{totals['models_with_planning_warnings']} models with a planning warning (planned without ORT's fusion "
        "groups, or bound other than their file)"
    )
    for reason, n in totals["reasons"].items():
        print(f"  {n:6d}  {reason}")


if __name__ == "__main__":
    main()
