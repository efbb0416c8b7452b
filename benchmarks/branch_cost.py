"""What an ``If`` on an input costs a run: a merged decoder as shipped against the branch it takes.

Optimum's merged decoders (``decoder_model_merged.onnx``) are one ``If`` on ``use_cache_branch``
over two whole decoders. benanza measures such a model's layers as the branch the input's value
takes (``benanza.model.steering``) and its end to end as shipped, the ``If`` included. This script
measures, per model and per value of the input, side by side in interleaved rounds on one ONNX
Runtime configuration (level ``extended``, ``--threads``):

- ``shipped_ms``: median call latency of the model as shipped (``process_model(..., keep_branches=True)``:
  the ``If`` kept, the input defaulted to the value), what benanza's end to end runs;
- ``branch_ms``: the same of the model with the ``If`` folded to its branch (what its layers are);
- from one profiled session of the shipped model: the ``If`` node's span and the summed spans of the
  nodes of its branch (``if_us``, ``branch_nodes_us``), medians over the profiled runs.

Printed and saved to ``benchmarks/results/branch_cost.json`` (``--tag`` adds a suffix). The models
are not in the repository; an Optimum export makes one (random weights are enough: the cost is the
shapes'), e.g. from a ``transformers`` config saved with ``save_pretrained``:

    optimum-cli export onnx --model tiny-t5 --task text2text-generation-with-past t5_onnx
    python benchmarks/branch_cost.py t5_onnx/decoder_model_merged.onnx \
        --dim encoder_sequence_length=64 --dim decoder_sequence_length=1 --dim past_decoder_sequence_length=16
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import onnxruntime as ort
from side_by_side import median_call_ms, ort_session, save_results

from benanza.model.load import with_synthetic_weights
from benanza.model.process import process_model
from benanza.model.request import BindingRequest, parse_dim_overrides
from benanza.runtimes.onnxruntime import feeds_for


def profiled_spans(proto, threads: int, runs: int) -> tuple[float, float]:
    """Median per run of the ``If`` nodes' spans and of the spans of the nodes within them (microseconds)."""
    with tempfile.TemporaryDirectory(prefix="benanza-branch-") as tmp:
        s = ort_session(proto.SerializeToString(), threads, str(Path(tmp) / "branch"))
        feeds = feeds_for(proto)
        for _ in range(runs):
            s.run(None, feeds)
        events = json.loads(Path(s.end_profiling()).read_text())
    model_runs = [e for e in events if e.get("name") == "model_run"][-runs:]
    nodes = [e for e in events if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time")]
    ifs, inner = [], []
    for r in model_runs:
        within = [n for n in nodes if r["ts"] <= n["ts"] <= r["ts"] + r["dur"]]
        is_if = [(n.get("args") or {}).get("op_name") == "If" for n in within]
        spans = [(n["ts"], n["ts"] + n["dur"]) for n, flag in zip(within, is_if, strict=True) if flag]
        ifs.append(sum(end - start for start, end in spans))
        held = [
            n["dur"]
            for n, flag in zip(within, is_if, strict=True)
            if not flag and any(start <= n["ts"] and n["ts"] + n["dur"] <= end for start, end in spans)
        ]
        inner.append(sum(held))
    return statistics.median(ifs), statistics.median(inner)


def measure(path: Path, dims: dict[str, int], value: int, threads: int, rounds: int, runs: int) -> dict[str, Any]:
    """One model at one value of its steering input: shipped and branch latency, interleaved, and the If's span."""
    fed = process_model(path, 1, BindingRequest(dims=dims)).binding.values
    if len(fed) != 1:
        raise SystemExit(f"{path}: expected one input that chooses an If's branch, found {sorted(fed) or 'none'}")
    (name,) = fed
    request = BindingRequest(dims=dims, values={name: value})
    # with their data in the protobuf: the weights a model's data file holds are left there by loading
    shipped = with_synthetic_weights(process_model(path, 1, request, keep_branches=True).proto)
    branch = with_synthetic_weights(process_model(path, 1, request).proto)
    sessions = {
        arm: ort_session(m.SerializeToString(), threads) for arm, m in (("shipped", shipped), ("branch", branch))
    }
    feeds = {"shipped": feeds_for(shipped), "branch": feeds_for(branch)}
    medians: dict[str, list[float]] = {"shipped": [], "branch": []}
    for _ in range(rounds):
        for arm, s in sessions.items():
            medians[arm].append(median_call_ms(lambda s=s, f=feeds[arm]: s.run(None, f), runs))
    if_us, inner_us = profiled_spans(shipped, threads, runs)
    shipped_ms, branch_ms = statistics.median(medians["shipped"]), statistics.median(medians["branch"])
    return {
        "model": str(path),
        "input": name,
        "value": value,
        "shipped_ms": shipped_ms,
        "branch_ms": branch_ms,
        "if_cost_ms": shipped_ms - branch_ms,
        "shipped_over_branch": shipped_ms / branch_ms,
        "rounds": medians,
        "profiled_if_us": if_us,
        "profiled_branch_nodes_us": inner_us,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=Path, help="merged decoders (one If on an input)")
    parser.add_argument("--dim", action="append", default=[], help="NAME=N, as benanza run's --dim")
    parser.add_argument("--values", default="1,0", help="values of the steering input to measure at")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=200, help="timed calls per arm and round")
    parser.add_argument("--tag", default="", help="suffix of the results file")
    args = parser.parse_args()
    dims = parse_dim_overrides(args.dim)
    rows = []
    header = f"{'model':44s} {'value':>5s} {'shipped':>8s} {'branch':>8s} {'If ms':>6s} {'ratio':>6s}"
    print(header + " | profiled If/nodes us")
    for path in args.models:
        for value in (int(v) for v in args.values.split(",")):
            row = measure(path, dims, value, args.threads, args.rounds, args.runs)
            rows.append(row)
            print(
                f"{str(path)[-44:]:44s} {value:5d} {row['shipped_ms']:8.3f} {row['branch_ms']:8.3f} "
                f"{row['if_cost_ms']:6.3f} {row['shipped_over_branch']:6.2f} | "
                f"{row['profiled_if_us']:.0f}/{row['profiled_branch_nodes_us']:.0f}"
            )
    doc = {"onnxruntime": ort.__version__, "threads": args.threads, "models": rows}
    print(f"saved {save_results('branch_cost', args.tag, doc)}")


if __name__ == "__main__":
    main()
