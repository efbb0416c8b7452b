"""The ``cudnn`` runtime: every layer through cuDNN, cuBLAS(Lt) and CuPy, every algorithm.

What one record holds (the method, stated once):

- A layer (or a fused conv+bias+activation group) is run by every *candidate* the libraries
  offer: each legacy cuDNN algorithm, each cuDNN graph-API engine configuration from the
  heuristics, each cublasLt algorithm, or the CuPy kernel frameworks use for element-wise
  and data-movement ops. Plans are built before any timing.
- Each candidate is timed *hot*: CUDA events around one replay of a CUDA graph of ``k``
  back-to-back launches on a private stream, divided by ``k`` (no launch overhead, data in
  L2 as inside a model), with the harness's warm-up, calibration and adaptive stopping.
  The default and the best candidates are also timed *cold* (L2 flushed before each
  launch); both figures are stored.
- ``kernel_samples``: the fastest candidate, hot (Benanza's lower bound: the best the
  libraries can do). ``samples``: the candidate a framework picks without benchmarking, hot:
  for convolutions the first choice of the legacy ``cudnnGetConvolutionForwardAlgorithm_v7``
  heuristic (PyTorch with ``cudnn.benchmark`` off; ONNX Runtime with cuDNN 9 goes through the
  graph API, whose heuristic's first plan is the graph candidates' default), for GEMMs
  cublasLt's first heuristic algorithm. ``stats.extras["algorithms"]`` lists every candidate with its statistics.
- A whole model (``MODEL`` spec) runs in ONNX Runtime's CUDA execution provider with inputs
  and outputs bound on the device (IOBinding), or, where ONNX Runtime has no CUDA EP, in
  PyTorch (converted by onnx2torch, ``cudnn.benchmark`` off): the framework end to end the
  lower bound is compared with. ``settings.framework`` of the record says which.
- NVML clocks and throttle reasons are read before and after every record's measurement
  and stored with it; GPU settings are never changed.
- What the record cost to take (``stats.extras["cost_s"]``, wall seconds): building its
  candidates (``build``: descriptors, plans, the libraries' own searches), timing them hot
  (``hot``; each candidate's share in its ``spent_s``) and the best and default cold (``cold``).

Variants: ``precision`` (float32, float16, bfloat16: the data type every layer runs in) and
``tensor_cores`` (allowed or forbidden; float32 with tensor cores allowed means TF32).
"""

from __future__ import annotations

import dataclasses
import functools
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benanza.bench.harness import HarnessSettings, Timing, measure_device
from benanza.bench.records import MeasurementStats
from benanza.bench.spec import BenchmarkSpec, SpecKind, model_binding
from benanza.bench.stats import describe
from benanza.errors import GpuError, UnsupportedLayer, UsageError, one_line
from benanza.model.given_inputs import given_feeds, missing_input_file
from benanza.model.graph import ModelGraph
from benanza.runtimes.base import Measured, Prepared, Runtime, register_runtime
from benanza.runtimes.cuda.candidate import Candidate, CandidateResult, dedupe, mark_default, summarise
from benanza.runtimes.cuda.fusion import fused_groups
from benanza.runtimes.cuda.params import (
    ActivationParams,
    AttentionParams,
    BatchNormParams,
    ConvParams,
    DataMovementParams,
    FrameworkParams,
    GemmParams,
    LayerParams,
    LrnParams,
    PoolParams,
    SoftmaxParams,
    Unsupported,
    fused_conv,
    layer_params,
)

PRECISIONS = ("float32", "float16", "bfloat16")
SOURCES = ("cudnn-legacy", "cudnn-graph", "cublaslt", "cupy")
PRIMARY_SOURCE = {  # whose default pick is "the framework's": what ONNX Runtime and PyTorch call
    ConvParams: "cudnn-legacy",
    GemmParams: "cublaslt",
    AttentionParams: "cudnn-graph",  # the fused attention PyTorch and ONNX Runtime run in half precision
}


Builder = Callable[[Any, Any, LayerParams, bool], list[Candidate]]


def _builders(params: LayerParams, fused: bool) -> list[tuple[str, Builder]]:
    """(source, builder) pairs for one kind of call; each imports its library lazily."""
    from benanza.runtimes.cuda import attention, cublaslt, cudnn_graph, cudnn_legacy, framework

    if isinstance(params, AttentionParams):
        return [
            ("cudnn-graph", lambda ctx, h, p, tc: attention.sdpa_candidates(ctx, p, tc)),
            ("cupy", lambda ctx, h, p, tc: attention.cupy_candidates(ctx, p)),
        ]
    if isinstance(params, ConvParams):
        legacy = cudnn_legacy.conv_bias_activation_candidates if fused else cudnn_legacy.conv_candidates
        out: list[tuple[str, Builder]] = [("cudnn-legacy", lambda ctx, h, p, tc: legacy(ctx, h, p, tc))]
        if not params.transpose:
            out.append(("cudnn-graph", lambda ctx, h, p, tc: cudnn_graph.graph_conv_candidates(ctx, p, tc)))
        return out
    if isinstance(params, GemmParams):
        return [
            ("cublaslt", lambda ctx, h, p, tc: cublaslt.gemm_candidates(ctx, p, tc)),
            ("cudnn-graph", lambda ctx, h, p, tc: cudnn_graph.graph_matmul_candidates(ctx, p, tc)),
        ]
    legacy_ops: dict[type, Callable[..., list[Candidate]]] = {
        PoolParams: cudnn_legacy.pooling_candidates,
        LrnParams: cudnn_legacy.lrn_candidates,
        SoftmaxParams: cudnn_legacy.softmax_candidates,
        ActivationParams: cudnn_legacy.activation_candidates,
        BatchNormParams: cudnn_legacy.batchnorm_candidates,
    }
    build = legacy_ops.get(type(params))
    if build is not None:
        out = [("cudnn-legacy", lambda ctx, h, p, tc, build=build: build(ctx, h, p))]
        if isinstance(params, BatchNormParams):
            out.append(("cudnn-graph", lambda ctx, h, p, tc: cudnn_graph.graph_batchnorm_candidates(ctx, p, tc)))
        return out
    if isinstance(params, FrameworkParams):
        return [("cupy", lambda ctx, h, p, tc: framework.framework_candidates(ctx, p))]
    raise UnsupportedLayer(f"no GPU library call for {type(params).__name__}")


def spec_params(spec: BenchmarkSpec, precision: str) -> LayerParams | Unsupported:
    """The one library call a layer or group spec needs, at ``precision``."""
    network = spec.network
    if network is None or not network.nodes:
        return Unsupported("spec carries no network")
    if spec.kind is SpecKind.GROUP or len(network.nodes) > 1:
        return fused_conv(network, precision)
    return layer_params(network, 0, precision)


def build_candidates(
    ctx: Any, handle: Any, params: LayerParams, fused: bool, tensor_cores: bool, sources: Sequence[str]
) -> tuple[list[Candidate], dict[str, str]]:
    """Every candidate the chosen libraries build for one call, and each library's build error.

    Raises:
        UnsupportedLayer: no library can run the call (each one's reason, joined).
        GpuError: no library built a candidate and at least one failed for another reason.
    """
    candidates: list[Candidate] = []
    errors: dict[str, str] = {}
    unsupported: list[str] = []
    for source, build in _builders(params, fused):
        if source not in sources:
            continue
        try:
            candidates.extend(build(ctx, handle, params, tensor_cores))
        except UnsupportedLayer as exc:
            unsupported.append(f"{source}: {one_line(exc)}")
        except Exception as exc:  # one library failing to build leaves the others
            errors[source] = f"{type(exc).__name__}: {one_line(exc)}"
    if not candidates and (unsupported or errors):
        reasons = "; ".join(unsupported + [f"{s}: {e}" for s, e in errors.items()])
        raise (GpuError if errors else UnsupportedLayer)(reasons)
    if not candidates and not _is_view(params):  # never a silent zero for a layer that computes
        raise UnsupportedLayer(f"no library built a candidate for {type(params).__name__}")
    return mark_default(dedupe(candidates)), errors


class GpuPrepared(Prepared):
    """A layer's candidates, built; ``measure`` times each of them with the harness.

    A view (Reshape, Flatten and the like change only metadata) has no candidate and costs
    0; any other layer without a candidate is refused, never counted as free.
    """

    def __init__(
        self,
        ctx: Any,
        params: LayerParams,
        candidates: Sequence[Candidate],
        build_errors: dict[str, str] | None = None,
        seed: int = 0,
        build_s: float | None = None,
    ) -> None:
        self._ctx = ctx
        self.params = params
        self.candidates = mark_default(dedupe(candidates))
        self.build_errors = dict(build_errors or {})
        self.build_s = build_s  # wall seconds the candidates took to build (None: not timed)
        self.view = _is_view(params)
        if not self.candidates and not self.view:
            raise UnsupportedLayer(f"no candidate for {type(params).__name__}: only views launch nothing")
        self._rng = random.Random(seed)

    @property
    def device(self) -> Any:
        """The ``DeviceContext`` the candidates launch on."""
        return self._ctx

    @property
    def default(self) -> Candidate | None:
        primary = PRIMARY_SOURCE.get(type(self.params))
        defaults = [c for c in self.candidates if c.default]
        return next((c for c in defaults if c.source == primary), defaults[0] if defaults else None)

    def call(self) -> object:
        """One launch of the default candidate, synchronised (for a quick check, not timing)."""
        if self.default is not None:
            self.default.launch()
        self._ctx.synchronize()
        return None

    def kernel_times(self, runs: int, evict_bytes: int = 0) -> list[float] | None:
        return None

    def measure(self, settings: HarnessSettings) -> Measured:
        """Every candidate hot in a shuffled order, then the default and the best cold."""
        ctx = self._ctx
        before = ctx.clocks()
        timeouts_before = ctx.gating()["timeouts"]
        if self.view:  # a view (Reshape, Squeeze, ...): metadata only, no kernel runs on the GPU
            view = MeasurementStats.of(describe((0.0,)), extras={"algorithms": summarise([]), "view": True})
            return Measured((0.0,), view, (0.0,))
        order = list(self.candidates)
        self._rng.shuffle(order)
        results: dict[str, CandidateResult] = {}
        timings: dict[str, Timing] = {}
        for c in order:
            sampler = None
            started = time.perf_counter()
            try:
                sampler = ctx.hot_sampler(c.launch)
                timing = measure_device(sampler, settings)
            except Exception as exc:  # a candidate that fails at run time is a result, not a crash
                error = f"{type(exc).__name__}: {one_line(exc)}"
                results[c.label] = CandidateResult.of(c, error=error, spent_s=time.perf_counter() - started)
                continue
            timings[c.label] = timing
            mode = getattr(sampler, "mode", None)
            spent = time.perf_counter() - started
            results[c.label] = CandidateResult.of(
                c, samples=timing.samples, stats=timing.stats, hot_mode=mode, spent_s=spent
            )
        hot_s = sum(r.spent_s or 0.0 for r in results.values())
        ordered = [results[c.label] for c in self.candidates]
        summary = summarise(ordered, PRIMARY_SOURCE.get(type(self.params)))
        if summary["best"] is None:
            errors = "; ".join(f"{r.label}: {r.error}" for r in ordered if r.error)
            raise GpuError(f"no candidate ran: {errors}")
        best = timings[summary["best"]]
        default_label = summary["default"]
        # no candidate of the framework's library ran: the call figure is the best's, and
        # ``algorithms.default`` stays None so that no analysis reads it as the framework's pick
        default = timings[default_label] if default_label is not None else best
        cold: dict[str, Any] = {}
        by_label = {c.label: c for c in self.candidates}
        cold_started = time.perf_counter()
        for role, label in (("best", summary["best"]), ("default", default_label)):
            if role == "default" and label == summary["best"]:  # one candidate in both roles: timed once
                cold[role] = cold["best"]
            elif label in timings:
                cold[role] = measure_device(ctx.cold_sampler(by_label[label].launch), settings).stats.to_dict()
        cold_s = time.perf_counter() - cold_started
        after = ctx.clocks()
        gating = ctx.gating()
        extras = {
            "algorithms": summary,
            "cold": cold,
            "hot_modes": sorted({str(r.hot_mode) for r in ordered if r.hot_mode}),
            # whether the samples were held until enqueued (device.StreamGate); timeouts: gates
            # that gave up during this record (those samplers went on ungated)
            "gating": {**gating, "timeouts": gating["timeouts"] - timeouts_before},
            "flush": ctx.flush.info(),  # how the cold figures' L2 was flushed
            "cost_s": {"build": self.build_s, "hot": hot_s, "cold": cold_s},  # what taking the record cost
        }
        if self.build_errors:
            extras["build_errors"] = dict(self.build_errors)
        stats = MeasurementStats.of(
            default.stats, stopped_by=default.stopped_by, iterations=default.iterations, extras=extras
        )
        return Measured(default.samples, stats, best.samples, {"gpu_clocks": {"before": before, "after": after}})

    def close(self) -> None:
        self.candidates = []


def e2e_framework(precision: str, ort_missing: str | None, torch_missing: str | None) -> tuple[str | None, str | None]:
    """Which framework runs a whole model end to end, and why none can: ``(framework, why_not)``.

    ONNX Runtime's CUDA EP runs the model's own float32 graph; a float16 or bfloat16 variant is
    run by PyTorch with the converted module and its inputs cast to that type, as a PyTorch user
    runs a model in half precision (``model.half()``), so that the bound and the end to end are
    of one precision. ``ort_missing``/``torch_missing``: why each cannot run here, or None.
    """
    if precision == "float32" and ort_missing is None:
        return "onnxruntime-cuda", None
    if torch_missing is None:
        return "pytorch", None
    if precision == "float32":
        return None, f"{ort_missing}; and PyTorch: {torch_missing}"
    return None, f"a {precision} model runs end to end in PyTorch only, and {torch_missing}"


def _is_view(params: LayerParams) -> bool:
    return isinstance(params, DataMovementParams) and params.view


@register_runtime("cudnn")
class CudnnRuntime(Runtime):
    """cuDNN (legacy and graph API), cublasLt and CuPy kernels on one GPU; see the module docstring."""

    name = "cudnn"
    interleaves = False  # each candidate is timed by CUDA events with its own warm-up and L2 flush
    isolated = True  # a bad plan can leave a sticky CUDA error: benchmarks run in a replaceable process

    def __init__(
        self,
        device: int = 0,
        precision: str = "float32",
        tensor_cores: bool = True,
        sources: Sequence[str] | str | None = None,
    ) -> None:
        if precision not in PRECISIONS:
            raise UsageError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
        if isinstance(sources, str):  # "cudnn-legacy+cublaslt", as the variant writes it (a fleet entry's option)
            sources = sources.split("+")
        chosen = tuple(sources) if sources is not None else SOURCES
        unknown = [s for s in chosen if s not in SOURCES]
        if unknown or not chosen:
            raise UsageError(f"unknown GPU sources {unknown or chosen}; known: {', '.join(SOURCES)}")
        self.device = device
        self.precision = precision
        self.tensor_cores = bool(tensor_cores)
        self.sources = chosen
        self._ctx: Any = None
        self._handle: Any = None

    def variant(self) -> dict[str, Any]:
        variant: dict[str, Any] = {"precision": self.precision, "tensor_cores": self.tensor_cores, "timing": "hot"}
        if self.sources != SOURCES:
            variant["sources"] = "+".join(self.sources)
        return variant

    def stack(self) -> dict[str, Any]:
        from benanza.model.synthetic import SYNTHETIC_WEIGHTS
        from benanza.runtimes.cuda.stack import gpu_stack

        return {"gpu": gpu_stack(self.device), "synthetic_weights": SYNTHETIC_WEIGHTS}

    def factory(self) -> Callable[[], CudnnRuntime]:
        """A picklable recipe for this runtime in the benchmark worker process."""
        return functools.partial(
            CudnnRuntime,
            device=self.device,
            precision=self.precision,
            tensor_cores=self.tensor_cores,
            sources=self.sources,
        )

    def healthy(self) -> bool:
        """Whether the device still works after a failure (a sticky CUDA error breaks every later call)."""
        if self._ctx is None:
            return True
        try:
            probe = self._ctx.array((16,), "float32", "ones")
            self._ctx.synchronize()
            return float(probe.sum()) == 16.0
        except Exception:
            return False

    def system(self) -> dict[str, Any]:
        """What the system fingerprint adds: the GPU's name, UUID, memory, compute capability."""
        from benanza.runtimes.cuda.stack import gpu_system

        return gpu_system(self.device)

    def _device(self) -> tuple[Any, Any]:
        if self._ctx is None:
            from benanza.runtimes.cuda.cudnn_legacy import CudnnHandle
            from benanza.runtimes.cuda.device import DeviceContext

            self._ctx = DeviceContext(self.device)
            self._handle = CudnnHandle(self._ctx)
        return self._ctx, self._handle

    def supports(self, spec: BenchmarkSpec) -> str | None:
        if spec.kind is SpecKind.MODEL:
            path = (spec.model or {}).get("path")
            if not path or not Path(path).exists():
                return f"model file not available on this system: {path}"
            missing = missing_input_file(spec.model or {})
            if missing:
                return missing
            return self._e2e_missing()
        if spec.kind is SpecKind.SEQUENCE:
            return (
                "DLBricks sequences compose CPU call latencies; on the GPU benanza measures layers, "
                "fused groups and whole models"
            )
        params = spec_params(spec, self.precision)
        if isinstance(params, Unsupported):
            return params.reason
        if isinstance(params, ConvParams) and params.transpose and "cudnn-legacy" not in self.sources:
            return "ConvTranspose runs through the legacy cuDNN API only, which this variant leaves out"
        return None

    def prepare(self, spec: BenchmarkSpec) -> Any:
        if spec.kind is SpecKind.MODEL:
            from benanza.model.load import with_synthetic_weights
            from benanza.model.process import process_model
            from benanza.runtimes.onnxruntime import OrtCudaModel, cuda_provider_missing, feeds_for

            info = dict(spec.model or {})
            from benanza.runtimes.cuda.torch_model import TorchModel, torch_missing

            processed = process_model(info["path"], *model_binding(info), keep_branches=True)  # as shipped
            model = with_synthetic_weights(processed.proto)
            feeds = given_feeds(feeds_for(model), processed.binding.given)  # --input's values, where given
            framework, why_not = e2e_framework(self.precision, cuda_provider_missing(), torch_missing())
            if framework == "onnxruntime-cuda":
                return OrtCudaModel(model, self.device, self.precision, feeds=feeds)
            if framework is None:
                raise GpuError(f"no framework can run this model end to end here: {why_not}")
            return TorchModel(model, self.device, self.precision, self.tensor_cores, feeds)
        params = spec_params(spec, self.precision)
        if isinstance(params, Unsupported):
            raise UnsupportedLayer(params.reason)
        ctx, handle = self._device()
        fused = isinstance(params, ConvParams) and params.fused and spec.kind is SpecKind.GROUP
        if isinstance(params, ConvParams) and not fused:  # a layer alone: the convolution, every source alike
            params = dataclasses.replace(params, bias=False, activation=None)
        started = time.perf_counter()
        candidates, errors = build_candidates(ctx, handle, params, fused, self.tensor_cores, self.sources)
        return GpuPrepared(ctx, params, candidates, errors, build_s=time.perf_counter() - started)

    def _e2e_missing(self) -> str | None:
        """Why no framework can run a whole model here in this variant's precision (``e2e_framework``)."""
        from benanza.runtimes.cuda.torch_model import torch_missing
        from benanza.runtimes.onnxruntime import cuda_provider_missing

        return e2e_framework(self.precision, cuda_provider_missing(), torch_missing())[1]

    def execution_groups(self, graph: ModelGraph, proto: Any = None) -> list[list[int]]:
        """Conv [+ BatchNormalization] [+ bias Add] [+ activation] chains, as cuDNN fuses them."""
        return fused_groups(graph)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
        if self._ctx is not None:
            self._ctx.close()
        self._ctx = self._handle = None
