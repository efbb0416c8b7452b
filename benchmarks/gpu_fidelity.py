"""GPU runtime fidelity: are benanza's GPU figures the figures of the kernels themselves?

Four checks, each saved in ``benchmarks/results/gpu_fidelity.json`` with the device named:

1. ``ncu``: a few kernels (convolutions and GEMMs of ResNet-50 and AlexNet) timed by benanza
   (cold: L2 flushed, CUDA events) vs Nsight Compute's ``gpu__time_duration`` of the same
   launches (``--cache-control all``, ``--clock-control none`` so that clocks are left as
   benanza found them). Goal: within 3%.
2. ``gemm``: a large GEMM's TFLOP/s with benanza's best cublasLt candidate vs the best of
   cuBLAS through PyTorch (``torch.matmul``), timed with CUDA events in the same run.
   Goal: at least 95%.
3. ``zoo``: every zoo model benchmarked at batch 1 and 32 with the ``cudnn`` runtime into a
   SQLite database; the sequential lower bound must not exceed ONNX Runtime's CUDA
   end-to-end latency.
4. ``resnet50``: Benanza's analyses (algorithm choice, tensor cores on/off, fusion,
   parallelism, framework gap) for ResNet-50 at both batch sizes.

    python benchmarks/gpu_fidelity.py [--db sqlite:///benchmarks/results/gpu.db] [--batch 1,32]
        [--skip ncu,gemm,zoo,resnet50] [--min-time 0.1] [--max-time 2]

Without a GPU it says so in one line and exits 2. ``--ncu-target KEY`` is how the script
runs one candidate under ``ncu`` (internal).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import platform
import shutil
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from benanza.bench.harness import HarnessSettings, measure_device
from benanza.errors import BenanzaError

RESULTS = Path(__file__).parent / "results"
NCU_LAUNCHES = 20
# (model, layer index) of the kernels compared with ncu: ResNet-50's stem and a 3x3 and a
# 1x1 bottleneck convolution, AlexNet's first fully-connected layer
NCU_LAYERS = (("resnet50", 0), ("resnet50", 5), ("resnet50", 8), ("bvlc_alexnet", 16))


def _settings(args: argparse.Namespace) -> HarnessSettings:
    return HarnessSettings(
        min_time_s=args.min_time,
        max_time_s=args.max_time,
        target_rel_stderr=0.005,
        min_sample_time_s=1e-4,
        warmup_runs=5,
    )


def _layer_spec(model: str, index: int, batch: int):
    from benanza.bench.generate import specs_for_plan
    from benanza.local import plan_models
    from benanza.model.zoo import zoo_paths
    from benanza.runtimes.base import get_runtime

    runtime = get_runtime("cudnn", tensor_cores=True)
    path = next(p for p in zoo_paths() if p.stem == f"light_{model}")
    (plan,) = plan_models([path], runtime, (batch,), None, ())
    key = plan.graph.layers[index].layer_key
    spec = next(s for s in specs_for_plan(plan, runtime.name, runtime.variant()) if s.key == key)
    return runtime, spec


def _default_candidate(runtime, spec):
    prepared = runtime.prepare(spec)
    return prepared, prepared.default


def ncu_target(key: str) -> None:
    """Run one layer's default candidate NCU_LAUNCHES times, synchronised (the ncu child)."""
    model, index = key.rsplit(":", 1)
    runtime, spec = _layer_spec(model, int(index), 1)
    prepared, candidate = _default_candidate(runtime, spec)
    for _ in range(NCU_LAUNCHES):
        candidate.launch()
        prepared.device.synchronize()
    runtime.close()


def check_ncu(args: argparse.Namespace) -> list[dict]:
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    if not Path(ncu).exists():
        return [{"error": "ncu not found"}]
    rows = []
    settings = _settings(args)
    for model, index in NCU_LAYERS:
        runtime, spec = _layer_spec(model, index, 1)
        prepared, candidate = _default_candidate(runtime, spec)
        ours = measure_device(prepared.device.cold_sampler(candidate.launch), settings).stats
        runtime.close()
        cmd = [
            ncu,
            "--csv",
            "--metrics",
            "gpu__time_duration.sum",
            "--cache-control",
            "all",
            "--clock-control",
            "none",
            sys.executable,
            __file__,
            "--ncu-target",
            f"{model}:{index}",
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        durations = _ncu_durations(out.stdout)
        # the candidate may launch helper kernels: sum per launch, as CUDA events around it see them
        per_launch = _per_launch(durations, NCU_LAUNCHES)
        ncu_median = statistics.median(per_launch) if per_launch else None
        rows.append(
            {
                "layer": f"{model}[{index}] {spec.label}",
                "candidate": candidate.label,
                "benanza_cold_median_us": ours.median * 1e6,
                "ncu_median_us": ncu_median * 1e6 if ncu_median else None,
                "ratio": ours.median / ncu_median if ncu_median else None,
                "ncu_kernels": len(durations),
                "ncu_error": None if durations else (out.stderr or out.stdout)[-400:],
            }
        )
    return rows


def _ncu_durations(text: str) -> list[float]:
    """Seconds of every kernel in ncu's CSV (``gpu__time_duration.sum`` rows; units as ncu states them)."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    scale = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0}
    out = []
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        if row.get("Metric Name") == "gpu__time_duration.sum":
            value = float(row["Metric Value"].replace(",", ""))
            out.append(value * scale.get(row.get("Metric Unit", "nsecond"), 1e-9))
    return out


def _per_launch(durations: list[float], launches: int) -> list[float]:
    if not durations or len(durations) % launches:
        return durations
    per = len(durations) // launches
    return [sum(durations[i * per : (i + 1) * per]) for i in range(launches)]


def check_gemm(args: argparse.Namespace, n: int = 8192) -> dict:
    import torch

    from benanza.runtimes.cuda.cublaslt import gemm_candidates
    from benanza.runtimes.cuda.device import DeviceContext
    from benanza.runtimes.cuda.params import GemmParams

    settings = _settings(args)
    out = {"m": n, "n": n, "k": n}
    for dtype, torch_dtype in (("float16", torch.float16), ("bfloat16", torch.bfloat16)):
        ctx = DeviceContext(0)
        try:
            params = GemmParams(1, n, n, n, False, False, dtype)
            results = []
            for c in gemm_candidates(ctx, params, True):
                stats = measure_device(ctx.hot_sampler(c.launch), settings).stats
                results.append((stats.median, c.label))
            best_s, best_label = min(results)
        finally:
            ctx.close()
        a = torch.randn(n, n, device="cuda", dtype=torch_dtype)
        b = torch.randn(n, n, device="cuda", dtype=torch_dtype)
        times = []
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(5):
            torch.matmul(a, b)
        for _ in range(50):
            start.record()
            torch.matmul(a, b)
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) / 1e3)
        torch_s = statistics.median(times)
        flops = 2 * n**3
        out[dtype] = {
            "benanza_best": best_label,
            "benanza_tflops": flops / best_s / 1e12,
            "torch_tflops": flops / torch_s / 1e12,
            "ratio": torch_s / best_s,
            "candidates": len(results),
        }
    return out


def check_zoo(args: argparse.Namespace) -> tuple[list[dict], list[dict]]:
    from benanza.local import analyze, bench, open_local, optimize, plan_models
    from benanza.model.zoo import zoo_paths

    batches = [int(b) for b in args.batch.split(",")]
    rows, analyses = [], []
    for tensor_cores in (True, False):
        ctx = open_local(args.db, "cudnn", {"tensor_cores": tensor_cores}, settings=_settings(args))
        try:
            plans = plan_models(zoo_paths(), ctx.runtime, batches, None, ())
            summary = bench(ctx, plans, e2e=True)
            print(f"tensor cores {tensor_cores}: {summary.to_dict()}", file=sys.stderr)
            if tensor_cores:
                for r in analyze(ctx, plans):
                    rows.append(
                        {
                            "model": r.model,
                            "batch": r.batch_size,
                            "sequential_ms": r.sequential_ms,
                            "parallel_ms": r.parallel_ms,
                            "e2e_ms": r.e2e_ms,
                            "lower_bound_below_e2e": (r.sequential_ms <= r.e2e_ms)
                            if r.sequential_ms and r.e2e_ms
                            else None,
                            "coverage": r.coverage,
                            "missing": len(r.missing),
                        }
                    )
        finally:
            ctx.close()
    ctx = open_local(args.db, "cudnn", {"tensor_cores": True}, settings=_settings(args))
    try:
        resnet = [p for p in zoo_paths() if "resnet50" in p.name]
        analyses = [o.to_dict() for o in optimize(ctx, plan_models(resnet, ctx.runtime, batches, None, ()))]
    finally:
        ctx.close()
    return rows, analyses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=f"sqlite:///{RESULTS / 'gpu.db'}")
    parser.add_argument("--batch", default="1,32")
    parser.add_argument("--skip", default="")
    parser.add_argument("--min-time", type=float, default=0.1)
    parser.add_argument("--max-time", type=float, default=2.0)
    parser.add_argument("--ncu-target", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ncu_target:
        ncu_target(args.ncu_target)
        return
    skip = set(filter(None, args.skip.split(",")))
    try:
        from benanza.runtimes.cuda.stack import gpu_stack, gpu_system

        stack, device = gpu_stack(0), gpu_system(0)
    except BenanzaError as exc:
        print(f"gpu_fidelity: {exc}", file=sys.stderr)
        sys.exit(2)
    result: dict = {"benchmark": "gpu_fidelity", "device": device, "stack": stack}
    if "ncu" not in skip:
        result["ncu"] = check_ncu(args)
        ratios = [r["ratio"] for r in result["ncu"] if r.get("ratio")]
        result["ncu_max_abs_error"] = max((abs(r - 1) for r in ratios), default=None)
    if "gemm" not in skip:
        result["gemm"] = check_gemm(args)
    if "zoo" not in skip:
        result["zoo"], result["resnet50"] = check_zoo(args)
    result["settings"] = _settings(args).model_dump()
    result["machine"] = {"python": platform.python_version()}
    result["time"] = datetime.now(UTC).isoformat(timespec="seconds")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "gpu_fidelity.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("stack", "zoo", "resnet50")}, indent=1, default=str))
    for row in result.get("zoo", []):
        print(row)
    if result.get("ncu_max_abs_error") is not None and not math.isnan(result["ncu_max_abs_error"]):
        print(f"ncu: max |benanza/ncu - 1| = {result['ncu_max_abs_error']:.1%} (goal 3%)")


if __name__ == "__main__":
    main()
