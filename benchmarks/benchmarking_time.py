"""Benchmarking time: DLBricks' speed-up, unique layers vs every model whole, one more family member.

Every benchmark runs through benanza's own pipeline (``run_specs`` into a SQLite store, the
harness's statistical stopping rule from ``HarnessSettings`` and ``BENANZA_HARNESS_*``,
kernel times included), so the benchmarks of the layers and of the models differ only in
*what* they run. Models are taken in order; for each, the model is benchmarked whole, then
the unique layers (and ONNX Runtime's fused groups) it adds to those already stored. Both
sides therefore spread over the same period of a shared machine.

Figures (``benchmarks/results/benchmarking_time_<set>.json``):

1. ``dlbricks``: DLBricks' benchmarking-time speed-up (Li et al., section 4.2): the sum over
   models of the end-to-end latency divided by the sum over the *unique* layers (their
   granularity G = 1 benchmarks) of the layer latency, each latency the 20% trimmed mean of
   one call, as in DLBricks. It is the ratio of benchmarking times when every benchmark runs
   the same number of calls (their 100), fixed costs left out. Given for every model and for
   the models whose every node is a benchmarked layer (in the others the layers cover less
   than the model runs, which flatters the figure).
1b. ``units``: the same ratio over the units benanza benchmarks at G = 1 in place of single
   nodes: each layer as the runtime runs it, alone or as the group it fuses into. DLBricks'
   layers were its units (MXNet runs each alone); ONNX Runtime fuses, and a QDQ model's
   ``DequantizeLinear -> Conv -> QuantizeLinear`` runs as one int8 convolution, not as three
   nodes of which two are measured alone at a few microseconds each.
2. ``wall_clock``: wall seconds to benchmark every model whole vs the unique layers, at the
   same stopping rule, preparation, kernel times and store writes included; and with the
   fused groups that ``benanza bench`` also measures; and the units alone (what the G = 1
   bound needs).
3. ``adding``: the wall seconds to benchmark what one more model adds once others are
   stored (one more ResNet depth, an int8 or fp16 variant of a stored model) vs benchmarking
   it whole; summed from the same run's per-benchmark times. ``adding_last`` gives the same
   for every model added after all the others.

    python benchmarks/benchmarking_time.py [--set corpus|zoo] [--models NAME ...] [--threads 1] [--tag TAG]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benanza.bench.execute import run_specs
from benanza.bench.generate import ModelPlan, plan_model, specs_for_plan
from benanza.bench.spec import BenchmarkSpec, SpecKind
from benanza.local import open_local
from benanza.model.process import process_model
from benanza.model.request import BindingRequest
from benanza.model.zoo import zoo_paths
from benanza.settings import load_settings

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"
RESULTS = Path(__file__).parent / "results"
# (model, models already stored): one more family member, and a variant of a stored model
FAMILY_ADDITIONS = (
    ("resnet152", ("resnet18", "resnet34", "resnet50", "resnet101")),
    ("resnet101", ("resnet18", "resnet34", "resnet50")),
    ("resnet50", ("resnet18", "resnet34", "resnet101")),
    ("resnet50_fp16", ("resnet18", "resnet34", "resnet50", "resnet101")),
    ("resnet50_int8_qdq", ("resnet18", "resnet18_int8_qdq", "resnet34", "resnet50", "resnet101")),
    ("bert_fp16", ("bert", "roberta", "distilbert")),
    ("gpt2_int8_dynamic", ("gpt2", "bert", "bert_int8_dynamic")),
    ("vit_small_patch16_224", ("deit_tiny_patch16_224", "yolos_tiny")),
    ("convnext_small", ("convnext_tiny",)),
    ("swin_small_patch4_window7_224", ("swin_tiny_patch4_window7_224",)),
    ("light_zfnet512", ("light_bvlc_alexnet", "light_vgg19")),
)


@dataclass(frozen=True)
class Entry:
    name: str
    path: Path
    request: BindingRequest
    fully_benchmarked: bool = True
    variant: str = "fp32"  # the corpus's variant (fp32, int8_qdq, int8_qop, int8_dynamic, fp16)


def corpus_entries() -> list[Entry]:
    manifest = json.loads((CORPUS / "corpus.json").read_text())
    return [
        Entry(e["name"], CORPUS / e["file"], BindingRequest.parse(e["shape_args"]), variant=e["variant"])
        for e in manifest
    ]


def zoo_entries() -> list[Entry]:
    return [Entry(p.stem, p, BindingRequest()) for p in zoo_paths()]


def plan_of(entry: Entry, runtime: Any) -> ModelPlan:
    processed = process_model(entry.path, 1, entry.request)
    return plan_model(processed, runtime, batch=1, request=entry.request)


def trimmed_s(record: Any) -> float | None:
    return float(record.stats.trimmed_mean) if record.outcome == "ok" and record.stats is not None else None


def measure_in_order(ctx: Any, plans: Sequence[ModelPlan]) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Per spec id: kind, wall seconds, latency, outcome; per model its spec ids. Models in order."""
    per_spec: dict[str, dict[str, Any]] = {}
    per_model: list[dict[str, Any]] = []
    for plan in plans:
        specs = specs_for_plan(plan, ctx.runtime.name, ctx.runtime.variant(), e2e=True)
        unit_keys = set(plan.unit_keys)
        model = next(s for s in specs if s.kind is SpecKind.MODEL)
        parts = [s for s in specs if s.kind in (SpecKind.LAYER, SpecKind.GROUP)]
        new = [s for s in parts if s.spec_id not in per_spec]
        # the model alone, then its new layers, then its new fused groups: each batch's wall time is its own
        layers = [s for s in new if s.kind is SpecKind.LAYER]
        for batch in ([model], layers, [s for s in new if s.kind is SpecKind.GROUP]):
            if batch:
                run_timed(ctx, batch, per_spec, plan.model)
        per_model.append(
            {
                "model": plan.model,
                "model_spec": model.spec_id,
                "layers": [s.spec_id for s in parts if s.kind is SpecKind.LAYER],
                "groups": [s.spec_id for s in parts if s.kind is SpecKind.GROUP],
                # benanza's G = 1 benchmarks: each layer as the runtime runs it, alone or inside the
                # group it fuses into (a QDQ model's DequantizeLinear -> Conv -> QuantizeLinear is one)
                "units": [s.spec_id for s in parts if s.key in unit_keys],
                "layer_count": len(plan.graph.layers),
                "not_benchmarkable": len(plan.graph.unsupported),
            }
        )
        m = per_spec[model.spec_id]
        new = [i for i in per_model[-1]["layers"] if per_spec[i]["first_for"] == plan.model]
        print(
            f"{plan.model:34s} whole {m['wall_s']:6.2f} s  e2e {1e3 * (m['latency_s'] or 0):8.2f} ms  "
            f"new layers {len(new):4d} {sum(per_spec[i]['wall_s'] for i in new):6.2f} s",
            flush=True,
        )
    return per_spec, per_model


def run_timed(ctx: Any, specs: Sequence[BenchmarkSpec], per_spec: dict[str, dict[str, Any]], model: str) -> None:
    """``run_specs`` on ``specs``, and each spec's share of the batch's wall time.

    The interleaved schedule measures a batch's specs together and reports them at its end, so
    a spec's wall time is its own warm-up, calibration and samples (``stats.spent_s``) plus an
    equal share of what the batch spent outside them (building sessions, profiling, storing).
    """
    records: dict[str, Any] = {}

    def progress(spec: BenchmarkSpec, record: Any) -> None:
        records[spec.spec_id] = record

    started = time.perf_counter()
    summary = run_specs(
        specs, ctx.runtime, ctx.store, ctx.settings, system=ctx.system, stack_id=ctx.stack_id, progress=progress
    )
    wall = time.perf_counter() - started
    spent = {i: float(r.stats.spent_s or 0.0) if r.stats is not None else 0.0 for i, r in records.items()}
    rest = max(wall - sum(spent.values()), 0.0) / max(len(records), 1)
    for spec in specs:
        record = records.get(spec.spec_id)
        if record is None:  # not run: the memory free at the time did not admit it (said, not hidden)
            why = summary.deferred_reason or f"not run ({summary.to_dict()})"
            print(f"  {spec.label}: {why}", flush=True)
        per_spec[spec.spec_id] = {
            "kind": str(spec.kind),
            "label": spec.label,
            "wall_s": spent[spec.spec_id] + rest if record is not None else 0.0,
            "latency_s": trimmed_s(record) if record is not None else None,
            "outcome": str(record.outcome) if record is not None else "deferred",
            "stopped_by": record.stats.stopped_by if record is not None and record.stats is not None else None,
            "first_for": model,
        }


def total(per_spec: dict[str, dict[str, Any]], ids: Sequence[str] | set[str], field: str) -> float:
    return sum(per_spec[i][field] or 0.0 for i in ids)


def adding(
    per_spec: dict[str, dict[str, Any]], by_name: dict[str, dict[str, Any]], model: str, stored: Sequence[str]
) -> dict[str, Any]:
    """What benchmarking ``model`` costs with ``stored`` models' layers (and groups) in the store."""
    have = {i for m in stored for i in by_name[m]["layers"] + by_name[m]["groups"]}
    mine = by_name[model]
    new_layers = sorted(set(mine["layers"]) - have)
    new_parts = sorted(set(mine["layers"] + mine["groups"]) - have)
    whole = per_spec[mine["model_spec"]]["wall_s"]
    cost, cost_parts = total(per_spec, new_layers, "wall_s"), total(per_spec, new_parts, "wall_s")
    return {
        "model": model,
        "stored": list(stored),
        "unique_layers": len(set(mine["layers"])),
        "new_layers": len(new_layers),
        "new_layers_s": cost,
        "new_layers_and_groups": len(new_parts),
        "new_layers_and_groups_s": cost_parts,
        "whole_model_s": whole,
        "new_over_whole": cost / whole if whole else None,
        "new_with_groups_over_whole": cost_parts / whole if whole else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=("corpus", "zoo"), default="corpus")
    parser.add_argument("--models", "--only", nargs="*", help="model names (corpus.json names or zoo file stems)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (1: steadier on a shared machine)")
    parser.add_argument("--tag", default="", help="suffix of the result file, e.g. 'before'")
    args = parser.parse_args()
    entries = corpus_entries() if args.set == "corpus" else zoo_entries()
    if args.models:
        unknown = set(args.models) - {e.name for e in entries}
        if unknown:
            parser.error(f"unknown models for --set {args.set}: {', '.join(sorted(unknown))}")
        entries = [e for e in entries if e.name in args.models]
    settings = load_settings().harness_settings()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="benanza-bt-") as tmp:
        ctx = open_local(
            db=f"sqlite:///{tmp}/bt.db",
            runtime_options={"threads": args.threads},
            system="benchmarking-time",
            settings=settings,
        )
        try:
            plans = [plan_of(e, ctx.runtime) for e in entries]
            planned_s = time.perf_counter() - started
            per_spec, per_model = measure_in_order(ctx, plans)
        finally:
            ctx.close()
    by_name = {m["model"]: m for m in per_model}
    variant = {e.name: e.variant for e in entries}
    models = [m["model_spec"] for m in per_model]
    layers = sorted({i for m in per_model for i in m["layers"]})
    groups = sorted({i for m in per_model for i in m["groups"]} - set(layers))
    complete = [m for m in per_model if not m["not_benchmarkable"]]
    complete_layers = sorted({i for m in complete for i in m["layers"]})

    def dlbricks(ms: Sequence[dict[str, Any]], ls: Sequence[str], of: str = "layers") -> dict[str, Any]:
        e2e = total(per_spec, [m["model_spec"] for m in ms], "latency_s")
        parts = total(per_spec, ls, "latency_s")
        return {
            "models": len(ms),
            "layers": sum(m["layer_count"] for m in ms),
            f"unique_{of}": len(ls),
            "sum_e2e_ms": 1e3 * e2e,
            f"sum_unique_{of}_ms": 1e3 * parts,
            "speedup": e2e / parts if parts else None,
        }

    def by_variant(of: str) -> dict[str, Any]:
        """Per variant: its models' e2e over the unique benchmarks among them (one shared across
        variants counts in each), which shows where the corpus repeats and where it does not."""
        return {
            v: dlbricks(ms, sorted({i for m in ms for i in m[of]}), of)
            for v in sorted({variant[m["model"]] for m in per_model})
            for ms in [[m for m in per_model if variant[m["model"]] == v]]
        }

    units = sorted({i for m in per_model for i in m["units"]})
    units_s = total(per_spec, units, "wall_s")

    whole_s = total(per_spec, models, "wall_s")
    layers_s = total(per_spec, layers, "wall_s")
    groups_s = total(per_spec, groups, "wall_s")
    outcomes: dict[str, dict[str, int]] = {}
    for rec in per_spec.values():
        kind = outcomes.setdefault(rec["kind"], {})
        kind[rec["outcome"]] = kind.get(rec["outcome"], 0) + 1
    stops: dict[str, dict[str, int]] = {}
    for rec in per_spec.values():
        kind = stops.setdefault(rec["kind"], {})
        kind[str(rec["stopped_by"])] = kind.get(str(rec["stopped_by"]), 0) + 1
    names = set(by_name)
    others = [m["model"] for m in per_model]
    last = [adding(per_spec, by_name, m, [o for o in others if o != m]) for m in others] if len(others) > 1 else []
    result = {
        "benchmark": "benchmarking_time",
        "set": args.set,
        "batch": 1,
        "models": len(per_model),
        "dlbricks": {
            "definition": "sum over models of e2e latency / sum over unique layers of layer latency "
            "(20% trimmed mean per call; DLBricks section 4.2, G = 1)",
            "all_models": dlbricks(per_model, layers),
            "fully_benchmarked_models": dlbricks(complete, complete_layers),
            "by_variant": by_variant("layers"),
        },
        "units": {
            "definition": "sum over models of e2e latency / sum over unique units of unit latency: benanza's "
            "G = 1 benchmarks, each layer as the runtime runs it (alone, or the group it fuses into); "
            "the same figure as dlbricks with the units benanza benchmarks in place of single nodes",
            "all_models": dlbricks(per_model, units, "units"),
            "by_variant": by_variant("units"),
        },
        "wall_clock": {
            "whole_models_s": whole_s,
            "unique_layers": len(layers),
            "unique_layers_s": layers_s,
            "whole_over_unique_layers": whole_s / layers_s if layers_s else None,
            "unique_groups": len(groups),
            "unique_groups_s": groups_s,
            "whole_over_layers_and_groups": whole_s / (layers_s + groups_s) if layers_s + groups_s else None,
            "unique_units": len(units),
            "unique_units_s": units_s,
            "whole_over_unique_units": whole_s / units_s if units_s else None,
            "median_layer_s": statistics.median(per_spec[i]["wall_s"] for i in layers) if layers else None,
            "median_model_s": statistics.median(per_spec[i]["wall_s"] for i in models) if models else None,
            "planning_s": planned_s,
        },
        "outcomes": outcomes,
        "stopped_by": stops,
        "adding": [adding(per_spec, by_name, m, s) for m, s in FAMILY_ADDITIONS if {m, *s} <= names],
        "adding_last": {
            "models": len(last),
            "cheaper_than_whole": sum(1 for a in last if a["new_over_whole"] is not None and a["new_over_whole"] < 1),
            "median_new_over_whole": statistics.median(a["new_over_whole"] for a in last) if last else None,
            "per_model": last,
        },
        "per_model": [
            {
                "model": m["model"],
                "layers": m["layer_count"],
                "unique_layers": len(set(m["layers"])),
                "not_benchmarkable": m["not_benchmarkable"],
                "whole_s": per_spec[m["model_spec"]]["wall_s"],
                "e2e_ms": 1e3 * (per_spec[m["model_spec"]]["latency_s"] or 0.0),
                # the unique layers first benchmarked for this model (models in order) and their latency
                "new_layers": len(new := [i for i in set(m["layers"]) if per_spec[i]["first_for"] == m["model"]]),
                "new_layers_ms": 1e3 * total(per_spec, new, "latency_s"),
            }
            for m in per_model
        ],
        "harness": settings.model_dump(),
        "threads": args.threads,
        "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()},
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = f"benchmarking_time_{args.set}{'_' + args.tag if args.tag else ''}.json"
    if not args.models or args.tag:
        (RESULTS / name).write_text(json.dumps(result, indent=1) + "\n")
    d, w = result["dlbricks"], result["wall_clock"]
    print(
        f"\nDLBricks speed-up (sum e2e / sum unique layers): {d['all_models']['speedup']:.2f}x over "
        f"{d['all_models']['models']} models, {d['fully_benchmarked_models']['speedup'] or 0:.2f}x over the "
        f"{d['fully_benchmarked_models']['models']} fully benchmarked"
    )
    print(
        f"wall clock: {len(models)} models whole {whole_s:.1f} s; {len(layers)} unique layers {layers_s:.1f} s "
        f"(whole/unique = {w['whole_over_unique_layers'] or 0:.2f}x); with {len(groups)} fused groups "
        f"{layers_s + groups_s:.1f} s ({w['whole_over_layers_and_groups'] or 0:.2f}x)"
    )
    for v, fig in d["by_variant"].items():
        print(
            f"  {v:13s} {fig['models']:3d} models, {fig['unique_layers']:5d} unique layers: "
            f"{fig['sum_e2e_ms']:8.1f} ms e2e / {fig['sum_unique_layers_ms']:7.1f} ms = {fig['speedup'] or 0:.2f}x"
        )
    u = result["units"]
    print(
        f"by unit (benanza's G = 1 benchmarks): {u['all_models']['speedup'] or 0:.2f}x, "
        f"{len(units)} unique units; wall clock whole/units = {w['whole_over_unique_units'] or 0:.2f}x"
    )
    for v, fig in u["by_variant"].items():
        print(
            f"  {v:13s} {fig['models']:3d} models, {fig['unique_units']:5d} unique units: "
            f"{fig['sum_e2e_ms']:8.1f} ms e2e / {fig['sum_unique_units_ms']:7.1f} ms = {fig['speedup'] or 0:.2f}x"
        )
    for a in result["adding"]:
        print(
            f"adding {a['model']} to {', '.join(a['stored'])}: {a['new_layers']} new of {a['unique_layers']} "
            f"unique layers, {a['new_layers_s']:.2f} s ({a['new_layers_and_groups_s']:.2f} s with groups) vs "
            f"{a['whole_model_s']:.2f} s whole"
        )
    if last:
        al = result["adding_last"]
        print(
            f"each model added last: cheaper than whole for {al['cheaper_than_whole']} of {al['models']}, "
            f"median new/whole {al['median_new_over_whole']:.2f}"
        )


if __name__ == "__main__":
    main()
