"""Which layers of today's models the GPU runtime has a library call for: planned, not measured.

For every corpus model (``corpus/``) at batch 1 (text models at their corpus sequence length),
planned for the ``cudnn`` runtime in float32 and float16: its unique layer specs, those the
runtime would run (``supports`` is None, and a CuPy layer's call builds and runs on NumPy, as
its ``gpu`` test checks it against the device; an attention layer's cuDNN SDPA graph is accepted in
half precision, else its unfused call runs on NumPy) and those it would store as skipped, with the
reasons by op type. Pure logic: no GPU, no GPU library is loaded. A model whose layers all have
a call has a lower bound on a GPU that leaves nothing out.

    python benchmarks/gpu_coverage.py [--only NAME ...] [--out FILE]
    python benchmarks/gpu_coverage.py MODEL.onnx ... [--shape NAME=1x128 ...] [--dim NAME=N ...] [--out FILE]

Writes ``benchmarks/results/gpu_coverage.json`` (``--out`` elsewhere); for model files given
(your own, not the corpus's) it prints and writes only where ``--out`` says.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benanza.bench.generate import plan_model, specs_for_plan
from benanza.bench.spec import SpecKind
from benanza.errors import BenanzaError, UnsupportedLayer
from benanza.model.process import process_model
from benanza.model.request import BindingRequest
from benanza.runtimes.cuda import attention, framework
from benanza.runtimes.cuda.params import AttentionParams, Unsupported
from benanza.runtimes.cuda.runtime import CudnnRuntime, spec_params

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"
RESULTS = Path(__file__).parent / "results"
PRECISIONS = ("float32", "float16")


def why_not(spec: Any, runtime: CudnnRuntime) -> str | None:
    """Why the runtime would store ``spec`` as skipped, or None: what ``supports`` says, then what
    building a CuPy layer's call says (the device runs that call; NumPy runs it here)."""
    reason = runtime.supports(spec)
    if reason is not None:
        return reason
    params = spec_params(spec, runtime.precision)
    if isinstance(params, Unsupported):
        return None
    if isinstance(params, AttentionParams) and params.dtype in attention.SDPA_DTYPES:
        try:  # cuDNN's fused attention is the candidate that matters in half precision
            attention.sdpa_check(params)
        except UnsupportedLayer:
            pass  # the unfused call below still runs it
        else:
            return None
    elif not isinstance(params, framework.FrameworkParams):
        return None
    try:
        call = attention.attention_call(params) if isinstance(params, AttentionParams) else framework.layer_call(params)
        if call is not None:
            outputs = framework.empty_outputs(call.outputs)
            with np.errstate(all="ignore"):  # random data: a Log or Sqrt of a negative value
                call.run(framework.numpy_ops(), framework.host_arrays(call.inputs), outputs)
    except UnsupportedLayer as exc:
        return str(exc)
    return None


def coverage_of(entry: dict[str, Any]) -> dict[str, Any]:
    record: dict[str, Any] = {"model": entry["name"], "family": entry["family"], "variant": entry["variant"]}
    started = time.perf_counter()
    try:
        request = BindingRequest.parse(entry["shape_args"], entry.get("dim_args"))
        processed = process_model(CORPUS / entry["file"], 1, request)
    except BenanzaError as exc:
        return {**record, "error": str(exc)}
    for precision in PRECISIONS:
        runtime = CudnnRuntime(precision=precision)
        plan = plan_model(processed, runtime, batch=1)
        specs = [s for s in specs_for_plan(plan, runtime.name, runtime.variant()) if s.kind is not SpecKind.MODEL]
        skipped: Counter[str] = Counter()
        reasons: Counter[str] = Counter()
        for spec in specs:
            reason = why_not(spec, runtime)
            if reason is not None:
                op = (spec.label or "?").split(" ")[0]
                skipped[op] += 1
                reasons[f"{op}: {reason[:140]}"] += 1
        record[precision] = {
            "specs": len(specs),
            "with_a_call": len(specs) - sum(skipped.values()),
            "skipped_by_op": dict(skipped.most_common()),
            "reasons": dict(reasons.most_common()),
        }
    record["seconds"] = round(time.perf_counter() - started, 2)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path, help="model files (default: the corpus)")
    parser.add_argument("--only", nargs="*", help="corpus model names")
    parser.add_argument("--shape", action="append", default=[], help="input shapes of the model files, as benanza's")
    parser.add_argument("--dim", action="append", default=[], help="symbolic dimensions, as benanza's")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.models:
        stems = Counter(m.stem for m in args.models)  # onnxruntime-genai's are all model.onnx: named by folder
        entries = [
            {
                "name": m.stem if stems[m.stem] == 1 else f"{m.parent.name}/{m.stem}",
                "file": m.resolve(),
                "family": None,
                "variant": None,
                "shape_args": args.shape,
                "dim_args": args.dim,
            }
            for m in args.models
        ]
    else:
        manifest = json.loads((CORPUS / "corpus.json").read_text())
        entries = [e for e in manifest if not args.only or e["name"] in args.only]
        args.out = args.out or RESULTS / "gpu_coverage.json"
    records = []
    for entry in entries:
        record = coverage_of(entry)
        records.append(record)
        if "error" in record:
            print(f"{record['model']:34s} error: {record['error']}", flush=True)
            continue
        f32 = record["float32"]
        print(
            f"{record['model']:34s} {f32['with_a_call']:4d} of {f32['specs']:4d} specs with a GPU call"
            f"  skipped: {f32['skipped_by_op'] or '-'}",
            flush=True,
        )
    done = [r for r in records if "error" not in r]
    totals: dict[str, Any] = {"models": len(records), "errors": len(records) - len(done)}
    for precision in PRECISIONS:
        skipped: Counter[str] = Counter()
        for r in done:
            skipped.update(r[precision]["skipped_by_op"])
        totals[precision] = {
            "specs": sum(r[precision]["specs"] for r in done),
            "with_a_call": sum(r[precision]["with_a_call"] for r in done),
            "models_fully_covered": sum(r[precision]["with_a_call"] == r[precision]["specs"] for r in done),
            "skipped_by_op": dict(skipped.most_common()),
        }
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    result = {
        "benchmark": "gpu_coverage",
        "command": " ".join(["python benchmarks/gpu_coverage.py", *sys.argv[1:]]),
        "commit": commit.stdout.strip() or None,
        "batch": 1,
        "totals": totals,
        "models": records,
        "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()},
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    for precision in PRECISIONS:
        t = totals[precision]
        print(
            f"\n{precision}: {t['with_a_call']} of {t['specs']} specs with a GPU call; "
            f"{t['models_fully_covered']} of {len(done)} models fully covered; skipped: {t['skipped_by_op']}"
        )


if __name__ == "__main__":
    main()
