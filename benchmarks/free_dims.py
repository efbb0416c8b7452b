"""A model as exported (its symbolic dimensions free) against the model as benanza runs it end to end (bound).

benanza binds every symbolic dimension (``--batch``, ``--shape``, ``--dim``) and folds what the
bound shapes make constant before it measures a model end to end (``e2e_ms``), as ONNX Runtime
does for a session given free-dimension overrides. A user who opens the exported file as it is
feeds the same shapes into a session that cannot fold them: the export's shape computations
(``Shape -> Gather -> Concat -> Reshape``) run on every call. This script measures, per model,
side by side in interleaved rounds on one ONNX Runtime configuration (level ``extended``,
``--threads``), the median call latency of

- ``exported_ms``: the file as it is, fed the bound shapes (an input that chooses an ``If``'s
  branch fed the value benanza binds it to);
- ``bound_ms``: what benanza's end to end runs (``process_model(..., keep_branches=True)``);
- ``without``: per ``--without`` (repeatable; ONNX Runtime optimizer names, comma-separated for several
  at once), the model bound with those optimizers disabled: which fusion, applied only where the
  shapes are known, makes the model bound slower than as exported (a BERT encoder: ``--without
  SkipLayerNormFusion --without MatMulAddFusion --without SkipLayerNormFusion,MatMulAddFusion``).

Beside the latencies, ``ops_differ``: the op types whose node counts differ between ONNX Runtime's
optimized graphs of the two (the fusions that binding the dimensions let it make, and the shape
computations left as exported).

Printed and saved to ``benchmarks/results/free_dims.json`` (``--tag`` adds a suffix). The models
are not in the repository (exports of today, random weights: the cost is the shapes'):

    python benchmarks/free_dims.py t5_onnx/decoder_with_past_model.onnx \\
        --dim encoder_sequence_length=64 --dim decoder_sequence_length=1 --dim past_decoder_sequence_length=16
"""

from __future__ import annotations

import argparse
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import onnx
import onnxruntime as ort
from onnx import numpy_helper
from side_by_side import median_call_ms, ort_session, save_results

from benanza.model.load import load_model, with_synthetic_weights
from benanza.model.process import process_model
from benanza.model.request import BindingRequest, parse_dim_overrides
from benanza.model.walks import all_graphs
from benanza.runtimes.onnxruntime import feeds_for, optimized_model


def optimized_ops(model: onnx.ModelProto) -> Counter[str]:
    """Nodes per op type (``domain:op`` outside ONNX's) in ONNX Runtime's optimized graph of ``model`` at level
    ``extended`` (``runtimes.onnxruntime.optimized_model``), and its subgraphs'."""
    graph = optimized_model(model, "extended").graph
    return Counter(
        f"{node.domain}:{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type
        for g in all_graphs(graph)
        for node in g.node
    )


def measure(
    path: Path, dims: dict[str, int], threads: int, rounds: int, runs: int, without: list[str]
) -> dict[str, Any]:
    shipped = load_model(path)  # read once: processed (which copies it), then run as it is
    processed = process_model(path, 1, BindingRequest(dims=dims), shipped, keep_branches=True)
    bound = with_synthetic_weights(processed.proto)  # its data in the protobuf (a data file's weights are left there)
    feeds = feeds_for(bound)
    defaults = {t.name: numpy_helper.to_array(t) for t in bound.graph.initializer if t.name in processed.binding.values}
    exported_model = with_synthetic_weights(shipped)
    exported_bytes, bound_bytes = exported_model.SerializeToString(), bound.SerializeToString()
    exported = ort_session(exported_bytes, threads)
    sessions = {"exported": exported, "bound": ort_session(bound_bytes, threads)}
    sessions.update(
        {f"bound without {names}": ort_session(bound_bytes, threads, disabled=names.split(",")) for names in without}
    )
    fed = {arm: feeds for arm in sessions}
    fed["exported"] = {i.name: {**feeds, **defaults}[i.name] for i in exported.get_inputs()}
    medians: dict[str, list[float]] = {arm: [] for arm in sessions}
    for _ in range(rounds):
        for arm, s in sessions.items():
            medians[arm].append(median_call_ms(lambda s=s, f=fed[arm]: s.run(None, f), runs))
    median = {arm: statistics.median(m) for arm, m in medians.items()}
    ops = {"exported": optimized_ops(exported_model), "bound": optimized_ops(bound)}
    differ = sorted(op for op in ops["exported"] | ops["bound"] if ops["exported"][op] != ops["bound"][op])
    return {
        "model": str(path),
        "dims": dims,
        "values": dict(processed.binding.values),
        "exported_ms": median["exported"],
        "bound_ms": median["bound"],
        "exported_over_bound": median["exported"] / median["bound"],
        "without": {name: median[f"bound without {name}"] for name in without},
        "ops_differ": {arm: {op: counts[op] for op in differ} for arm, counts in ops.items()},
        "rounds": medians,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--dim", action="append", default=[], help="NAME=N, as benanza run's --dim")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=150, help="timed calls per arm and round")
    parser.add_argument("--without", action="append", default=[], metavar="OPTIMIZER", help="also bound without it")
    parser.add_argument("--tag", default="", help="suffix of the results file")
    args = parser.parse_args()
    dims = parse_dim_overrides(args.dim)
    rows = []
    print(f"{'model':50s} {'exported':>9s} {'bound':>9s} {'ratio':>6s}")
    for path in args.models:
        row = measure(path, dims, args.threads, args.rounds, args.runs, args.without)
        rows.append(row)
        figures = f"{row['exported_ms']:9.3f} {row['bound_ms']:9.3f} {row['exported_over_bound']:6.2f}"
        print(f"{str(path)[-50:]:50s} {figures}")
        for name, ms in row["without"].items():
            print(f"{'  bound without ' + name:50s} {'':9s} {ms:9.3f} {row['exported_ms'] / ms:6.2f}")
        for arm, counts in row["ops_differ"].items():
            print(f"  {arm} runs " + ", ".join(f"{n} {op}" for op, n in counts.items() if n))
    doc = {"onnxruntime": ort.__version__, "threads": args.threads, "models": rows}
    print(f"saved {save_results('free_dims', args.tag, doc)}")


if __name__ == "__main__":
    main()
