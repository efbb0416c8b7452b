"""Does a model run the nodes its units run? ONNX Runtime's executed nodes, whole against summed over units.

A composition sums units measured alone against the whole model measured once; both must do
the same work. This script profiles one run of each (ONNX Runtime's profiler, at the main job's
session options) and compares what executed, node by node: op type and output shape, the
units' nodes summed (each unit as often as the model holds it), sinks left out. A node only
the units run is work the end to end lacks (the zoo's Inception v2 ran 5 convolutions fewer
whole than over its units while its weights were equal fills: ORT merged two branches of one
input); a node only the model runs is work no unit measured.

    python benchmarks/node_counts.py [--models inception_v2 my.onnx] [--threads 1]

JSON in ``benchmarks/results/node_counts.json``.
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import onnx

from benanza.bench.build import build_onnx, disabled_optimizers, is_sink
from benanza.config import MAIN_JOB_GRANULARITIES
from benanza.local import plan_models
from benanza.model.load import with_synthetic_weights
from benanza.model.network import network_of
from benanza.model.process import process_model
from benanza.model.zoo import zoo_paths
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU, _CpuModel, _profile_dir, feeds_for

RESULTS = Path(__file__).parent / "results"


def executed(model: onnx.ModelProto, threads: int) -> collections.Counter[tuple[str, str]]:
    """(op type, output shapes) of every node ORT ran in one profiled run of ``model``, sinks left out."""
    cpu = _CpuModel(model.SerializeToString(), feeds_for(model), "extended", threads, disabled_optimizers(model))
    session = cpu.session(profile_prefix=str(_profile_dir() / "nodes"))
    for _ in range(2):
        session.run(None, cpu.feeds)
    profile = Path(session.end_profiling())
    events = json.loads(profile.read_text())
    profile.unlink()
    last = max(e["ts"] for e in events if e.get("cat") == "Session" and e.get("name") == "model_run")
    return collections.Counter(
        (str(e["args"].get("op_name")), str(e["args"].get("output_type_shape")))
        for e in events
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] >= last and not is_sink(e["name"])
    )


def _rows(nodes: collections.Counter[tuple[str, str]]) -> list[dict[str, Any]]:
    return [{"op": op, "outputs": shapes, "count": n} for (op, shapes), n in sorted(nodes.items())]


def compare(path: Path, threads: int) -> dict[str, Any]:
    runtime = OnnxRuntimeCPU(threads=threads)
    (plan,) = plan_models([path], runtime, (1,), granularities=MAIN_JOB_GRANULARITIES)
    whole = executed(with_synthetic_weights(process_model(path, 1).proto), threads)
    units: collections.Counter[tuple[str, str]] = collections.Counter()
    for members in plan.units:
        units.update(executed(build_onnx(network_of(plan.graph, sorted(members))[1], sink=True), threads))
    return {
        "model": path.stem,
        "threads": threads,
        "model_nodes": sum(whole.values()),
        "unit_nodes": sum(units.values()),
        "only_in_units": _rows(units - whole),
        "only_in_model": _rows(whole - units),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=[], help="zoo names or model files (default: the zoo)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(RESULTS / "node_counts.json"))
    args = parser.parse_args()
    paths = [Path(m) for m in args.models if Path(m).is_file()]
    paths += [p for p in zoo_paths() if not args.models or any(m in p.stem for m in args.models)]
    rows = []
    for path in paths:
        row = compare(path, args.threads)
        rows.append(row)
        differ = len(row["only_in_units"]) + len(row["only_in_model"])
        print(
            f"{row['model']:24s} model {row['model_nodes']:4d} nodes, units {row['unit_nodes']:4d}"
            + (f"; differ in {differ} (op, shape) kinds" if differ else "; the same")
        )
        for side in ("only_in_units", "only_in_model"):
            for r in row[side][:5]:
                print(f"    {side.replace('_', ' ')}: {r['count']} x {r['op']} {r['outputs'][:80]}")
    doc = {
        "benchmark": "node_counts",
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()},
        "models": rows,
    }
    Path(args.out).write_text(json.dumps(doc, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
