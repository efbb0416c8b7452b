"""An LLM decoder step as onnxruntime-genai exports it: its int4 projections alone (warm and evicted) and inside it.

A decoder at one token uses each weight of its ``com.microsoft::MatMulNBits`` projections once. For a
float32 product of one row that makes the layer bound by reading its weights, and benanza times such
a layer with its weights out of the caches (``benanza.bench.cold_weights``), as the rest of the model
leaves them. Whether the int4 projections need that, and how much the rest of the model leaves of
their weights in the caches, is measured here, in one process, interleaved in rounds: each unique
projection's kernel time alone warm (call after call); alone after what the rest of the model reads
per run was read before each call (``evicted_bytes`` of ``weights_read_per_run``: a gathered
embedding counted as the rows it reads), as benanza times it; alone after every weight the model
holds was read (the embedding table whole: the rule before 2026-11-29); and the same nodes' kernel
times inside the whole model (ONNX Runtime's profiler, ``extended``, the harness's threads).
Then the main job (``benanza run``) over the decoders, each run into a fresh database, with the
eviction on and off (``BENANZA_EVICT_STREAMED_WEIGHTS``; off is what an int4 projection got before its
FLOPs were counted), alternated over ``--main-job-rounds``: the sequential bound, the composition at
G = 1, the end to end and the end to end at ORT's defaults.

Printed and saved to ``benchmarks/results/decoder_step.json`` (``--tag`` adds a suffix). The decoders
are not shipped (the builder needs ``transformers`` and writes the weights); made with
onnxruntime-genai 0.18.0 from random-weight Llama configurations, e.g. TinyLlama-1.1B's widths at
4 of its 22 layers::

    pip install onnxruntime-genai transformers
    python -c "from transformers import LlamaConfig as C, LlamaForCausalLM as M; M(C(hidden_size=2048,
        intermediate_size=5632, num_hidden_layers=4, num_attention_heads=32, num_key_value_heads=4,
        vocab_size=32000)).save_pretrained('tinyllama-4l')"     # plus a tokenizer.json in that folder
    python -m onnxruntime_genai.models.builder -i tinyllama-4l -o tinyllama4l_int4 -p int4 -e cpu

    python benchmarks/decoder_step.py tinyllama4l_int4/model.onnx [--context 128] [--head-size 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import onnxruntime as ort

from benanza.bench import host_cache
from benanza.bench.cold_weights import evicted_bytes, streamed_weight_bytes, weights_read_per_run
from benanza.bench.generate import plan_model_file, specs_for_plan
from benanza.bench.memory import weight_bytes
from benanza.bench.spec import SpecKind
from benanza.model.process import process_model
from benanza.model.request import BindingRequest
from benanza.runtimes.base import get_runtime
from benanza.runtimes.onnxruntime import feeds_for

RESULTS = Path(__file__).parent / "results"
THREADS = 2
RUNS = 20  # profiled runs per measurement


def dims(context: int, head_size: int) -> dict[str, int]:
    """One decoder step after ``context`` tokens, as onnxruntime-genai names its symbolic dimensions."""
    return {
        "sequence_length": 1,
        "past_sequence_length": context,
        "total_sequence_length": context + 1,
        "kv_cache_dim": head_size,
    }


def inside_model(path: str, feeds: dict[str, Any]) -> dict[str, list[float]]:
    """Each node's kernel time (seconds) over ``RUNS`` profiled runs of the whole model, by node name."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.intra_op_num_threads = THREADS
    options.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        options.profile_file_prefix = str(Path(tmp) / "decoder")
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        for _ in range(5 + RUNS):
            session.run(None, feeds)
        events = json.loads(Path(session.end_profiling()).read_text())
    per_node: dict[str, list[float]] = defaultdict(list)
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            per_node[event["name"].removesuffix("_kernel_time")].append(event["dur"] * 1e-6)
    return {name: spans[5:] for name, spans in per_node.items()}


def projections(path: str, bound: dict[str, int]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The model's unique MatMulNBits units (spec, node names) and feeds for the whole model."""
    runtime = get_runtime("onnxruntime", threads=THREADS)
    ((plan,),) = plan_model_file(path, [runtime], [1], BindingRequest(dims=bound))
    specs = {s.key: s for s in specs_for_plan(plan, runtime.name, runtime.variant(), e2e=False)}
    units: dict[str, dict[str, Any]] = {}
    read, held, flush = weights_read_per_run(plan.graph), weight_bytes(plan.graph), host_cache.flush_bytes()
    for members, key in zip(plan.units, plan.unit_keys, strict=True):
        layers = [plan.graph.layers[i] for i in members]
        if len(layers) == 1 and layers[0].op_type == "MatMulNBits" and specs[key].kind is not SpecKind.MODEL:
            streamed = streamed_weight_bytes(specs[key].network)
            evict = {"read": evicted_bytes(streamed, read, flush), "held": evicted_bytes(streamed, held, flush)}
            entry = units.setdefault(key, {"spec": specs[key], "nodes": [], "evict": evict})
            entry["nodes"].append(layers[0].name)
            entry["label"] = specs[key].label
    feeds = feeds_for(process_model(path, 1, BindingRequest(dims=bound)).proto)
    return list(units.values()), {"runtime": runtime, "feeds": feeds}


def main_job(models: list[str], bound: dict[str, int], evict: bool) -> list[dict[str, Any]]:
    flags = [flag for name, size in bound.items() for flag in ("--dim", f"{name}={size}")]
    env = {**os.environ, "BENANZA_EVICT_STREAMED_WEIGHTS": "true" if evict else "false"}
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "benanza", "run", *models, "--db", f"sqlite:///{tmp}/d.db", *flags]
        started = time.perf_counter()
        done = subprocess.run([*command, "--format", "json"], capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise SystemExit(f"benanza run failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    rows = []
    for row in json.loads(done.stdout):
        e2e, composed = row.get("e2e_ms"), (row.get("composed_ms") or {}).get("1")
        rows.append(
            {
                "evict": evict,
                "model": row["model"],
                "sequential_ms": row["sequential_ms"],
                "composed_g1_ms": composed,
                "e2e_ms": e2e,
                "defaults_e2e_ms": row.get("defaults_e2e_ms"),
                "composed_over_e2e": composed / e2e if composed and e2e else None,
                "notes": row.get("notes"),
            }
        )
    print(f"benanza run, eviction {'on' if evict else 'off'}: {time.perf_counter() - started:.0f} s", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("models", nargs="+", help="decoders exported by onnxruntime-genai (model.onnx)")
    parser.add_argument("--context", type=int, default=128, help="tokens in the KV cache before the step")
    parser.add_argument("--head-size", type=int, default=64, help="the models' head size (kv_cache_dim)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--main-job-rounds", type=int, default=1, help="main job runs with the eviction on and off")
    parser.add_argument("--skip-projections", action="store_true", help="only the main job")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    bound = dims(args.context, args.head_size)
    flush = host_cache.flush_bytes()
    results = []
    for path in [] if args.skip_projections else args.models:
        units, whole = projections(path, bound)
        samples: dict[str, dict[str, list[float]]] = {u["spec"].key: defaultdict(list) for u in units}
        prepared = {u["spec"].key: whole["runtime"].prepare(u["spec"]) for u in units}
        for _ in range(args.rounds):  # interleaved: the host's drift hits the three alike
            inside = inside_model(path, whole["feeds"])
            for u in units:
                key = u["spec"].key
                samples[key]["inside"] += [t for node in u["nodes"] for t in inside.get(node, [])]
                samples[key]["warm"] += prepared[key].kernel_times(RUNS) or []
                for rule, nbytes in u["evict"].items():
                    samples[key][f"evicted_{rule}"] += prepared[key].kernel_times(RUNS, evict_bytes=nbytes) or []
        for p in prepared.values():
            p.close()
        for u in units:
            medians = {k: statistics.median(v) * 1e6 for k, v in samples[u["spec"].key].items() if v}
            results.append(
                {"model": path, "unit": u["label"], "nodes": len(u["nodes"]), "evict_bytes": u["evict"], "us": medians}
            )
            print(
                f"{Path(path).parent.name}: {u['label']} x{len(u['nodes'])}: warm {medians.get('warm', 0):.0f} us, "
                f"after the rest of the model ({u['evict']['read'] >> 20} MiB) "
                f"{medians.get('evicted_read', 0):.0f} us, "
                f"{medians.get('evicted_read', 0):.0f} us, "
                f"after all it holds ({u['evict']['held'] >> 20} MiB) {medians.get('evicted_held', 0):.0f} us, "
                f"inside the model {medians.get('inside', 0):.0f} us",
                flush=True,
            )
    rows = []
    for r in range(args.main_job_rounds):
        for evict in (True, False) if r % 2 == 0 else (False, True):  # alternated: drift hits both arms alike
            found = main_job(args.models, bound, evict)
            rows += [{**row, "round": r} for row in found]
            for row in found:
                print(
                    f"  {row['model']}: bound {row['sequential_ms']:.3f}, composed G=1 {row['composed_g1_ms']:.3f}, "
                    f"e2e {row['e2e_ms']:.3f} ms (composed/e2e {row['composed_over_e2e']:.2f})",
                    flush=True,
                )
    out = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "dims": bound,
        "threads": THREADS,
        "flush_bytes": flush,
        "projections": results,
        "main_job": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"decoder_step{'_' + args.tag if args.tag else ''}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"saved {path}")


if __name__ == "__main__":
    main()
