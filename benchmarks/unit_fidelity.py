"""Does each execution unit, built alone, run as the same ONNX Runtime kernels as inside its model?

A fused unit is benchmarked as a small model of its own (``bench/build.py``). It measures what
the model runs only if ONNX Runtime optimises it alone into the nodes it makes of those
layers inside the whole model (a tanh GELU into one ``FastGelu``, Add + LayerNormalization
into one ``SkipLayerNormalization``). For every corpus model at batch 1 (and any ONNX file
given), this script optimises the whole model once (ORT CPU provider, ``extended``) and
assigns each optimised node to the unit that produced its output (a node that writes only
tensors of its own, such as the ``Gemm`` between the two ``Reshape`` nodes ORT makes of a 3-D
MatMul + Add, goes with the unit that reads it). It then optimises each unique multi-layer
unit built alone, with and without sinks on its outputs, and compares the op types. Casts
ORT inserts to run float16 ops in float32 are left out of both sides. Nothing is timed.

    python benchmarks/unit_fidelity.py [--only NAME ...] [model.onnx ...]

Prints one line per unit that differs and the counts per model, and writes
``benchmarks/results/unit_fidelity.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import onnx
import onnxruntime as ort

from benanza.bench.build import build_onnx, is_sink
from benanza.bench.generate import plan_model
from benanza.model.load import with_synthetic_weights
from benanza.model.process import process_model
from benanza.model.request import BindingRequest
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU, optimized_model

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"
RESULTS = Path(__file__).parent / "results"
_CAST = "InsertedPrecisionFreeCast_"


def optimized(model: onnx.ModelProto) -> onnx.ModelProto:
    return optimized_model(model, "extended")


def counted(node: onnx.NodeProto) -> bool:
    return not node.name.startswith(_CAST) and not is_sink(node.name)


def model_side(graph: Any, units: list[tuple[int, ...]], whole: onnx.ModelProto) -> dict[int, list[str]]:
    """Per unit, the op types of the whole model's optimised nodes that belong to it."""
    producer = {t.name: layer.index for layer in graph.layers for t in layer.outputs}
    unit_of = {i: u for u, members in enumerate(units) for i in members}

    def original(name: str) -> str:
        return name[len(_CAST) :] if name not in producer and name.startswith(_CAST) else name

    owner: dict[int, int] = {}
    readers: dict[str, list[int]] = {}
    nodes = list(whole.graph.node)
    for k, node in enumerate(nodes):
        for x in node.input:
            readers.setdefault(x, []).append(k)
        mine = [producer[original(o)] for o in node.output if original(o) in producer]
        if mine:
            owner[k] = unit_of[mine[0]]
    for k in reversed(range(len(nodes))):  # a node writing only its own tensors goes with its reader
        if k in owner:
            continue
        for o in nodes[k].output:
            found = [owner[r] for r in readers.get(o, []) if r in owner]
            if found:
                owner[k] = found[0]
                break
    ops: dict[int, list[str]] = {}
    for k, u in owner.items():
        if counted(nodes[k]):
            ops.setdefault(u, []).append(nodes[k].op_type)
    return {u: sorted(v) for u, v in ops.items()}


def fidelity_of(path: Path, batch: int | None, request: BindingRequest) -> dict[str, Any]:
    processed = process_model(path, batch, request)
    plan = plan_model(processed, OnnxRuntimeCPU(threads=1), ())
    whole = optimized(with_synthetic_weights(processed.proto))
    expected = model_side(processed.graph, [tuple(u) for u in plan.units], whole)
    seen: set[str] = set()
    rows = []
    for u, (members, key) in enumerate(zip(plan.units, plan.unit_keys, strict=True)):
        if len(members) < 2 or key in seen:
            continue
        seen.add(key)
        network = plan.networks[key]
        alone = {
            sink: sorted(n.op_type for n in optimized(build_onnx(network, sink=sink)).graph.node if counted(n))
            for sink in (False, True)
        }
        rows.append(
            {
                "unit": "+".join(n.op_type for n in network.nodes),
                "model": expected.get(u, []),
                "alone": alone[False],
                "alone_with_sinks": alone[True],
            }
        )
    return {
        "model": path.stem,
        "units": len(rows),
        "differ": sum(r["model"] != r["alone"] for r in rows),
        "differ_with_sinks": sum(r["model"] != r["alone_with_sinks"] for r in rows),
        "differing": [r for r in rows if r["model"] != r["alone"] or r["model"] != r["alone_with_sinks"]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path, help="more ONNX files (their own batch and shapes)")
    parser.add_argument("--only", nargs="*", default=None, help="corpus model names")
    args = parser.parse_args()
    entries = json.loads((CORPUS / "corpus.json").read_text())
    jobs = [
        (CORPUS / e["file"], 1, BindingRequest.parse(e["shape_args"]))
        for e in entries
        if args.only is None or e["name"] in args.only
    ] + [(p, None, BindingRequest()) for p in args.models]
    results = []
    for path, batch, shapes in jobs:
        r = fidelity_of(path, batch, shapes)
        results.append(r)
        for d in r["differing"]:
            sides = f"model {d['model']}  alone {d['alone']}  with sinks {d['alone_with_sinks']}"
            print(f"  {r['model']}: {d['unit'][:60]}  {sides}")
        print(
            f"{r['model']}: {r['units']} unique fused units; unlike the model: {r['differ']} alone, "
            f"{r['differ_with_sinks']} with sinks"
        )
    total = {k: sum(r[k] for r in results) for k in ("units", "differ", "differ_with_sinks")}
    print(
        f"all {len(results)} models: {total['units']} unique fused units; unlike the model: "
        f"{total['differ']} built alone, {total['differ_with_sinks']} with sinks"
    )
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "unit_fidelity.json"
    out.write_text(
        json.dumps(
            {
                "when": datetime.now(UTC).isoformat(timespec="seconds"),
                "host": platform.node(),
                "onnxruntime": ort.__version__,
                "totals": total,
                "models": results,
            },
            indent=1,
        )
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
