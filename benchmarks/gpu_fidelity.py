"""GPU runtime fidelity: are benanza's GPU figures the figures of the kernels themselves?

Four checks, each saved in ``benchmarks/results/gpu_fidelity.json`` with the device named:

1. ``ncu``: a convolution, batch normalisation, max pooling, element-wise Add (ResNet-50) and
   a GEMM (AlexNet) at batch 1 and 32, each layer's default candidate timed by benanza (cold:
   L2 flushed by reading, CUDA events, the stream held until the launch is enqueued; and the
   same with the L2 flushed by a memset, side by side) vs Nsight Compute's
   ``gpu__time_duration`` of the same launches (``--cache-control all``, ``--clock-control
   none`` so that clocks are left as benanza found them; only the launches between
   cudaProfilerStart/Stop). Goal: at least 5 kernels within 3%. Beside them, the same launches
   timed by CUPTI's kernel records (``runtimes/cuda/cupti_clock.py``: the GPU's own timestamps, no
   events around the launch), where ``cupti-python`` is installed.
2. ``gemm``: a large GEMM's TFLOP/s with benanza's best cublasLt candidate vs the best of
   cuBLAS through PyTorch (``torch.matmul``), timed with CUDA events in the same run.
   Goal: at least 95%.
3. ``zoo``: every zoo model benchmarked at batch 1 and 32 with the ``cudnn`` runtime into a
   SQLite database; the sequential lower bound must not exceed ONNX Runtime's CUDA
   end-to-end latency.
4. ``resnet50`` in each zoo part: Benanza's analyses (algorithm choice, tensor cores on/off,
   fusion, parallelism, framework gap) for ResNet-50 in that variant and batch.

    python benchmarks/gpu_fidelity.py [--db sqlite:///benchmarks/results/gpu.db] [--batch 1,32]
        [--skip ncu,gemm,zoo | --only ...] [--out DIR] [--min-time 0.1] [--max-time 2]
        [--variants float32-tc,float32-no-tc,float16-tc]

The zoo in every variant at both batches takes longer than one 15-minute GPU session: run a few
parts per session (``--variants float32-tc --batch 1``); each part is merged into the saved
results beside the earlier ones, and a part an earlier run left cut short (its ``gpu_fidelity.json``
in ``--out``, the same ``--min-time`` and ``--max-time``) goes on with the models it did not finish.

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
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benanza.analysis.lower_bound import LowerBound
from benanza.bench.harness import HarnessSettings, measure_device
from benanza.errors import BenanzaError

RESULTS = Path(__file__).parent / "results"
NCU_LAUNCHES = 20
CHECKS = ("ncu", "gemm", "zoo")
# (model, op type, batch) of the kernels compared with ncu: the first layer of that op type in the
# model, at batch 1 (a few microseconds: the timing method's fixed cost shows) and 32
NCU_LAYERS = tuple(
    (model, op, batch)
    for batch in (1, 32)
    for model, op in (
        ("resnet50", "Conv"),
        ("resnet50", "BatchNormalization"),
        ("resnet50", "MaxPool"),
        ("resnet50", "Sum"),
        ("bvlc_alexnet", "Gemm"),
    )
)
# The method's floor, timed first: a kernel that does nothing, cold and against ncu like the layers.
# What benanza times over ncu for it is the events' own cost, which no flush removes.
EMPTY = ("", "empty kernel", 1)
EMPTY_SOURCE = 'extern "C" __global__ void benanza_empty() {}'


@dataclass
class NcuTarget:
    """One kernel compared with ncu: the device it runs on, its launch, and what to call it."""

    device: Any
    launch: Callable[[], None]
    label: str
    candidate: str
    close: Callable[[], None]


def open_target(model: str, op_type: str, batch: int) -> NcuTarget:
    """A layer's default candidate, built as the runtime builds it; or the empty kernel (``EMPTY``)."""
    if (model, op_type, batch) == EMPTY:
        import cupy

        from benanza.runtimes.cuda.device import DeviceContext

        device = DeviceContext(0)
        kernel = cupy.RawKernel(EMPTY_SOURCE, "benanza_empty")
        return NcuTarget(
            device, lambda: kernel((1,), (1,), (), stream=device.stream), op_type, "cupy:benanza_empty", device.close
        )
    runtime, spec = _layer_spec(model, op_type, batch)
    prepared = runtime.prepare(spec)
    candidate = prepared.default
    return NcuTarget(prepared.device, candidate.launch, f"{model} {spec.label}", candidate.label, runtime.close)


def _settings(args: argparse.Namespace) -> HarnessSettings:
    return HarnessSettings(
        min_time_s=args.min_time,
        max_time_s=args.max_time,
        target_rel_stderr=0.005,
        min_sample_time_s=1e-4,
        warmup_runs=5,
    )


def _layer_spec(model: str, op_type: str, batch: int):
    from benanza.bench.generate import specs_for_plan
    from benanza.local import plan_models
    from benanza.model.zoo import zoo_paths
    from benanza.runtimes.base import get_runtime

    runtime = get_runtime("cudnn", tensor_cores=True)
    path = next(p for p in zoo_paths() if p.stem == f"light_{model}")
    (plan,) = plan_models([path], runtime, (batch,))
    key = next(layer.layer_key for layer in plan.graph.layers if layer.op_type == op_type)
    spec = next(s for s in specs_for_plan(plan, runtime.name, runtime.variant()) if s.key == key)
    return runtime, spec


def ncu_target(target: str) -> None:
    """The ncu child: one layer's default candidate, NCU_LAUNCHES synchronised launches between
    cudaProfilerStart and cudaProfilerStop (ncu runs with ``--profile-from-start off``, so the
    kernels of planning, algorithm search and warm-up are not profiled)."""
    import cupy

    model, op_type, batch = target.split(":")
    kernel = open_target(model, op_type, int(batch))
    for _ in range(3):  # warm: lazy loading and first-call setup
        kernel.launch()
    kernel.device.synchronize()
    cupy.cuda.runtime.profilerStart()
    for _ in range(NCU_LAUNCHES):
        kernel.launch()
        kernel.device.synchronize()
    cupy.cuda.runtime.profilerStop()
    kernel.close()


def check_ncu(args: argparse.Namespace, saved: Callable[[list[dict]], None]) -> list[dict]:
    """benanza's cold median of each layer's default candidate against ncu's kernel durations."""
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    if not Path(ncu).exists():
        return [{"error": "ncu not found"}]
    rows = []
    settings = _settings(args)
    try:  # subscribed before the first row, so that every row's cold timing is taken alike
        from benanza.runtimes.cuda.cupti_clock import recorder

        recorder()
    except BenanzaError:
        pass  # each row says why it has no CUPTI column
    for model, op_type, batch in (EMPTY, *NCU_LAYERS):
        kernel = open_target(model, op_type, batch)
        device = kernel.device
        sampler = device.cold_sampler(kernel.launch)
        ours = measure_device(sampler, settings).stats
        flush = device.flush.info()
        written = None  # the same with the L2 flushed by a memset (nvbench's way), side by side
        if flush["mode"] == "read":
            device.flush.use("write")
            written = measure_device(device.cold_sampler(kernel.launch), settings).stats
            device.flush.use("read")
        cupti, cupti_error = None, None  # the kernels' own GPU timestamps (CUPTI), side by side
        try:
            cupti = measure_device(device.cupti_sampler(kernel.launch), settings).stats
        except BenanzaError as exc:
            cupti_error = str(exc)
        gating = device.gating()
        kernel.close()
        cmd = [
            ncu,
            "--csv",
            "--profile-from-start",
            "off",
            "--metrics",
            "gpu__time_duration.sum",
            "--cache-control",
            "all",
            "--clock-control",
            "none",
            sys.executable,
            __file__,
            "--ncu-target",
            f"{model}:{op_type}:{batch}",
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        durations = _ncu_durations(out.stdout)
        # the candidate may launch several kernels: their sum per launch, as CUDA events around it see them
        per_launch = _per_launch(durations, NCU_LAUNCHES)
        ncu_median = statistics.median(per_launch) if per_launch else None
        rows.append(
            {
                "layer": kernel.label,
                "op_type": op_type,
                "batch": batch,
                "floor": (model, op_type, batch) == EMPTY,
                "candidate": kernel.candidate,
                "benanza_cold_median_us": ours.median * 1e6,
                "ncu_median_us": ncu_median * 1e6 if ncu_median else None,
                "ratio": ours.median / ncu_median if ncu_median else None,
                "difference_us": (ours.median - ncu_median) * 1e6 if ncu_median else None,
                "ncu_kernels_per_launch": len(durations) / NCU_LAUNCHES,
                "flush": flush["mode"],
                "flush_error": flush["error"],
                "write_flush_cold_median_us": written.median * 1e6 if written else None,
                "write_flush_ratio": written.median / ncu_median if written and ncu_median else None,
                "cupti_median_us": cupti.median * 1e6 if cupti else None,
                "cupti_ratio": cupti.median / ncu_median if cupti and ncu_median else None,
                "cupti_error": cupti_error,
                "gated": gating["gated"] and not sampler.gated.timeouts,
                "gate_error": gating["error"],
                "ncu_error": None if durations else (out.stderr or out.stdout)[-400:],
            }
        )
        print(rows[-1], flush=True)
        saved(rows)
    return rows


def less_floor(rows: list[dict]) -> list[dict]:
    """Each layer's ratio to ncu with the method's floor taken off: what the empty kernel's cold
    median exceeds its ncu duration by (the events' own cost around one launch, which no flush
    removes), subtracted from each layer's cold median. Stated beside the plain ratio, never in its
    place: benanza stores what it timed."""
    floor = next((r for r in rows if r.get("floor") and r.get("ncu_median_us")), None)
    if floor is None:
        return rows
    over = floor["benanza_cold_median_us"] - floor["ncu_median_us"]
    return [
        {**r, "less_floor_ratio": (r["benanza_cold_median_us"] - over) / r["ncu_median_us"]}
        if not r.get("floor") and r.get("ncu_median_us")
        else r
        for r in rows
    ]


def _ncu_durations(text: str) -> list[float]:
    """Seconds of every kernel in ncu's CSV (``gpu__time_duration.sum`` rows; units as ncu states them)."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    scale = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3, "second": 1.0}
    out = []
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        if row.get("Metric Name") == "gpu__time_duration.sum":
            value = float(row["Metric Value"].replace(",", ""))
            out.append(value * scale.get(row.get("Metric Unit", "nsecond"), 1e-9))
    return out


def _per_launch(durations: list[float], launches: int) -> list[float]:
    """Each launch's summed kernel time, where every launch ran the same number of kernels; else none."""
    if not durations or len(durations) % launches:
        return []
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


# (precision, tensor cores): the issue's three variants of the zoo; ResNet-50's tensor-core figure
# needs the float32 pair
ZOO_VARIANTS = {"float32-tc": ("float32", True), "float32-no-tc": ("float32", False), "float16-tc": ("float16", True)}


def zoo_part(precision: str, tensor_cores: bool, batch: int) -> str:
    """The key of one variant at one batch in the saved ``zoo`` results (one session may run a few)."""
    return f"{precision},tensor_cores={tensor_cores},batch={batch}"


def check_zoo(args: argparse.Namespace, saved: Callable[[dict], None]) -> dict:
    """The zoo through the normal pipeline (plan, bench with ``--e2e``, analyze), variant by variant.

    One part per variant (``--variants``) and batch, each saved when it is done under its
    ``zoo_part`` key, merged with the parts earlier runs saved: at about 0.5 s per layer with
    every candidate timed, the whole zoo in three variants at two batches is more than one
    15-minute GPU session. Within a part the models run smallest first, each saved when it is done
    (``complete`` false until the last): a run cut short keeps the models it finished. A part's
    row: what the run measured, failed and skipped (with the reasons), and per model the
    sequential and parallel bounds beside the framework's end to end.
    """
    from benanza.local import analyze, bench, measurer_for, open_local, optimize, plan_models
    from benanza.model.zoo import zoo_paths

    batches = [int(b) for b in args.batch.split(",")]
    unknown = set(args.variants.split(",")) - set(ZOO_VARIANTS)
    if unknown:
        raise SystemExit(f"gpu_fidelity: unknown zoo variant(s) {sorted(unknown)}; known: {', '.join(ZOO_VARIANTS)}")
    parts: dict[str, dict] = {}
    path = args.out / "gpu_fidelity.json"
    earlier = (json.loads(path.read_text()) if path.exists() else {}).get("zoo", {})
    for name in args.variants.split(","):
        precision, tensor_cores = ZOO_VARIANTS[name]
        options = {"precision": precision, "tensor_cores": tensor_cores}
        for batch in batches:
            key = zoo_part(precision, tensor_cores, batch)
            ctx = open_local(args.db, "cudnn", options, settings=_settings(args))
            # one worker process for the part's models, not one a model (PyTorch and a CUDA context: seconds each)
            measurer = measurer_for(ctx)
            try:
                plans = sorted(plan_models(zoo_paths(), ctx.runtime, [batch]), key=lambda p: len(p.unit_keys))
                row: dict = {
                    **options,
                    "batch": batch,
                    "settings": {"min_time_s": args.min_time, "max_time_s": args.max_time},
                    "complete": False,
                    "models_planned": [p.model for p in plans],
                    "summary": {},
                    "not_ok": [],
                    "models": [],
                    "cost": {},
                }
                row, done = resumed(row, earlier.get(key))
                records = []
                for plan in (p for p in plans if p.model not in done):  # smallest first, each saved when done
                    summary = bench(ctx, [plan], e2e=True, measurer=measurer)
                    records += summary.records
                    row["summary"] = {k: row["summary"].get(k, 0) + v for k, v in summary.to_dict().items()}
                    row["not_ok"] += [
                        {"outcome": r.outcome.value, "label": r.label, "reason": (r.reason or "")[:300]}
                        for r in summary.records
                        if r.outcome.value != "ok"
                    ]
                    row["models"] += [_zoo_model(r) for r in analyze(ctx, [plan])]
                    row["cost"] = zoo_cost(records)
                    parts[key] = row
                    print(f"{key} {plan.model}: {summary.to_dict()}", file=sys.stderr)
                    saved(parts)
                row["complete"] = True
                # Benanza's analyses of ResNet-50 in this variant (the Tensor Core speedup where the
                # other variant was measured into the same database)
                # (a part resumed on another machine has no records of the models an earlier run did: none then)
                resnet = [o.to_dict() for o in optimize(ctx, [p for p in plans if "resnet50" in p.model])]
                row["resnet50"] = [o for o in resnet if o.get("coverage")]
            finally:
                measurer.close()
                ctx.close()
            parts[key] = row
            print(f"{key}: {row['summary']}", file=sys.stderr)
            saved(parts)
    return parts


def resumed(row: dict, earlier: dict | None) -> tuple[dict, set[str]]:
    """A zoo part that an earlier run saved cut short goes on where it stopped: its models, counts and
    failures are kept and the models it finished are not run again (a session's device time is scarce).
    Returns the row to add to and the models already done; a complete or absent earlier part starts anew.
    The earlier run's cost is kept apart (``resumed_from``), since this run's cost covers its own records."""
    if not earlier or earlier.get("complete", True) or earlier.get("settings") != row["settings"]:
        return row, set()
    done = {m["model"] for m in earlier.get("models", [])}
    kept = {k: earlier[k] for k in ("summary", "not_ok", "models") if k in earlier}
    history = [*earlier.get("resumed_from", []), {"models": sorted(done), "cost": earlier.get("cost", {})}]
    return {**row, **kept, "resumed_from": history}, done


def zoo_cost(records: Iterable[Any]) -> dict:
    """Where a zoo part's seconds went: per op type (the label's first word, or "model") the records
    and their mean wall seconds, and over the layer and group records the seconds spent building candidates,
    timing them hot and timing the best and default cold (``stats.extras["cost_s"]``)."""
    by_op: dict[str, list[float]] = defaultdict(list)
    phases = {"build": 0.0, "hot": 0.0, "cold": 0.0}
    for r in records:
        op = "model" if r.kind == "model" else (r.label or "?").split(" ")[0]
        by_op[op].append(r.duration_s or 0.0)
        cost = (r.stats.extras.get("cost_s") if r.stats is not None else None) or {}
        for phase in phases:
            phases[phase] += cost.get(phase) or 0.0
    return {
        "seconds": round(sum(sum(v) for v in by_op.values()), 1),
        "phases_s": {k: round(v, 1) for k, v in phases.items()},
        "by_op_type": {
            op: {"records": len(v), "seconds_each": round(sum(v) / len(v), 3)}
            for op, v in sorted(by_op.items(), key=lambda kv: -sum(kv[1]))
        },
    }


def _zoo_model(r: LowerBound) -> dict:
    """One model's bounds beside its end to end, and whether they are in the order they must be."""
    return {
        "model": r.model,
        "batch": r.batch_size,
        "sequential_ms": r.sequential_ms,
        "parallel_ms": r.parallel_ms,
        "e2e_ms": r.e2e_ms,
        "bound_below_e2e": r.sequential_ms <= r.e2e_ms if r.sequential_ms and r.e2e_ms else None,
        "parallel_below_sequential": r.parallel_ms <= r.sequential_ms if r.parallel_ms and r.sequential_ms else None,
        "coverage": r.coverage,
        "missing": len(r.missing),
        "checks": list(r.checks),
    }


def _not_over_complete(saved: dict, parts: dict) -> dict:
    """``parts`` less those a run cut short would write over a complete part an earlier run saved: a session
    that runs out of device time keeps the earlier whole part (a complete one replaces it)."""
    return {
        key: part
        for key, part in parts.items()
        if part.get("complete", True) or not saved.get(key, {}).get("complete", False)
    }


def _save(out: Path, result: dict) -> None:
    """Write what is measured so far: a later check that hangs or fails leaves the earlier ones saved."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gpu_fidelity.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    for key, value in result.items():  # the zoo's parts from earlier runs stay beside this run's
        merge = key in ("zoo", "settings") and isinstance(value, dict) and isinstance(saved.get(key), dict)
        saved[key] = {**saved[key], **_not_over_complete(saved[key], value)} if merge else value
    saved["time"] = datetime.now(UTC).isoformat(timespec="seconds")
    path.write_text(json.dumps(saved, indent=2, default=str) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=f"sqlite:///{RESULTS / 'gpu.db'}")
    parser.add_argument("--batch", default="1,32")
    parser.add_argument("--skip", default="", help="checks to leave out, comma-separated")
    parser.add_argument("--only", default="", help="the checks to run, comma-separated (default: all)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder of gpu_fidelity.json (merged)")
    parser.add_argument("--min-time", type=float, default=0.1)
    parser.add_argument("--max-time", type=float, default=2.0)
    parser.add_argument(
        "--variants", default=",".join(ZOO_VARIANTS), help=f"zoo variants, comma-separated: {', '.join(ZOO_VARIANTS)}"
    )
    parser.add_argument("--ncu-target", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ncu_target:
        ncu_target(args.ncu_target)
        return
    checks = [c for c in CHECKS if c not in set(filter(None, args.skip.split(",")))]
    if args.only:
        checks = [c for c in checks if c in set(args.only.split(","))]
    try:
        from benanza.runtimes.cuda.stack import gpu_stack, gpu_system

        stack, device = gpu_stack(0), gpu_system(0)
    except BenanzaError as exc:
        print(f"gpu_fidelity: {exc}", file=sys.stderr)
        sys.exit(2)
    result: dict = {
        "benchmark": "gpu_fidelity",
        "device": device,
        "stack": stack,
        # per check, kept beside those of earlier runs: one run's ncu check and a later run's zoo part
        # are timed at their own settings
        "settings": {check: _settings(args).model_dump() for check in checks},
        "machine": {"python": platform.python_version()},
    }
    _save(args.out, result)
    if "ncu" in checks:
        result["ncu"] = less_floor(check_ncu(args, lambda partial: _save(args.out, {"ncu": partial})))
        layers = [r for r in result["ncu"] if not r.get("floor")]
        for floor in (r for r in result["ncu"] if r.get("floor") and r.get("ncu_median_us")):
            print(
                f"ncu: the method's floor, an empty kernel: {floor['benanza_cold_median_us']:.2f} us cold, "
                f"{floor['ncu_median_us']:.2f} us in ncu"
            )
        ratios = [r["ratio"] for r in layers if r.get("ratio")]
        result["ncu_max_abs_error"] = max((abs(r - 1) for r in ratios), default=None)
        longer = [r["ratio"] for r in layers if r.get("ratio") and r["ncu_median_us"] >= 20]
        result["ncu_max_abs_error_20us"] = max((abs(r - 1) for r in longer), default=None)
        _save(args.out, result)
        if result["ncu_max_abs_error"] is not None and not math.isnan(result["ncu_max_abs_error"]):
            print(f"ncu: max |benanza/ncu - 1| = {result['ncu_max_abs_error']:.1%} (goal 3%)")
        if result["ncu_max_abs_error_20us"] is not None:
            print(f"ncu, kernels of 20 us or more: max |benanza/ncu - 1| = {result['ncu_max_abs_error_20us']:.1%}")
        result["ncu_within_3pct"] = sum(abs(r - 1) <= 0.03 for r in ratios)
        written = [r["write_flush_ratio"] for r in layers if r.get("write_flush_ratio")]
        result["ncu_within_3pct_write_flush"] = sum(abs(r - 1) <= 0.03 for r in written)
        floored = [r["less_floor_ratio"] for r in layers if r.get("less_floor_ratio")]
        result["ncu_within_3pct_less_floor"] = sum(abs(r - 1) <= 0.03 for r in floored)
        by_cupti = [r["cupti_ratio"] for r in layers if r.get("cupti_ratio")]
        result["ncu_within_3pct_cupti"] = sum(abs(r - 1) <= 0.03 for r in by_cupti)
        _save(args.out, result)
        print(
            f"ncu: {result['ncu_within_3pct']} of {len(ratios)} kernels within 3% (goal: at least 5); "
            f"flushing the L2 by a memset instead: {result['ncu_within_3pct_write_flush']} of {len(written)}; "
            f"less the empty kernel's excess: {result['ncu_within_3pct_less_floor']} of {len(floored)}; "
            f"timed by CUPTI's kernel records: {result['ncu_within_3pct_cupti']} of {len(by_cupti)}"
        )
    if "gemm" in checks:
        result["gemm"] = check_gemm(args)
        _save(args.out, result)
        print(json.dumps(result["gemm"], indent=1))
    if "zoo" in checks:
        result["zoo"] = check_zoo(args, lambda partial: _save(args.out, {"zoo": partial}))
        _save(args.out, result)
        for part, row in result["zoo"].items():
            out_of_order = [m for m in row["models"] if False in (m["bound_below_e2e"], m["parallel_below_sequential"])]
            print(part, row["summary"], "bounds out of order:", out_of_order)
            for analysis in row.get("resnet50", []):
                print(part, "ResNet-50:", analysis["speedups"])


if __name__ == "__main__":
    main()
