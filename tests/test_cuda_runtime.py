"""The ``cudnn`` runtime's logic on the CPU: options, what it supports, and how it measures candidates.

The device is replaced by ``FakeDevice``, whose samplers report fixed times per candidate: no
GPU exists here, and what is tested is the runtime's own logic (every candidate timed, the
best and the framework's pick chosen, cold figures for both, failures kept). The real
device path is in the ``gpu``-marked tests.
"""

from __future__ import annotations

import dataclasses
import json
import time
import types
from pathlib import Path

import pytest

from benanza.bench.execute import interleaving, run_spec
from benanza.bench.generate import plan_model, specs_for_plan
from benanza.bench.harness import HarnessSettings
from benanza.bench.spec import SpecKind
from benanza.errors import GpuError, UnsupportedLayer, UsageError
from benanza.model.network import Network
from benanza.runtimes.base import Runtime, get_runtime, runtime_names
from benanza.runtimes.cuda.candidate import Candidate
from benanza.runtimes.cuda.params import ConvParams, DataMovementParams, PoolParams
from benanza.runtimes.cuda.runtime import CudnnRuntime, GpuPrepared
from benanza.store import Outcome

QUICK = HarnessSettings(warmup_runs=1, min_samples=5, min_time_s=0.0, max_time_s=0.2, min_sample_time_s=0.0)
CONV = ConvParams((1, 3, 8, 8), (4, 3, 3, 3), (1, 4, 8, 8), (1, 1), (1, 1), (1, 1), (1, 1), 1, "float32")


class HotSampler:
    mode = "graph"

    def __init__(self, sample) -> None:
        self._sample = sample

    def __call__(self, k: int) -> float:
        return self._sample(k)


class FakeDevice:
    """Samplers that report ``hot[name]`` / ``cold[name]`` seconds for a candidate's launch."""

    def __init__(self, hot: dict[str, float], cold: dict[str, float] | None = None) -> None:
        self.hot, self.cold = hot, cold or {k: 2 * v for k, v in hot.items()}
        self.order: list[str] = []
        self.cold_timed: list[str] = []
        self.synced = 0

    def hot_sampler(self, launch):
        name = launch()
        self.order.append(name)
        return HotSampler(lambda k: self.hot[name])

    def cold_sampler(self, launch):
        name = launch()
        self.cold_timed.append(name)
        return lambda k: self.cold[name]

    def synchronize(self) -> None:
        self.synced += 1

    def clocks(self):
        return {"sm_clock_mhz": 1980, "throttle_reasons": []}

    def gating(self):
        return {"gated": True, "error": None, "timeouts": 0}

    @property
    def flush(self):
        return types.SimpleNamespace(info=lambda: {"mode": "read", "bytes": 1 << 20, "error": None})


def candidate(name: str, source: str = "cudnn-legacy", **kw) -> Candidate:
    def launch() -> str:
        if name == "broken":
            raise RuntimeError("CUDNN_STATUS_EXECUTION_FAILED")
        return name

    return Candidate(source, name, launch, **kw)


def prepared_with(candidates, device, params=CONV) -> GpuPrepared:
    return GpuPrepared(device, params, candidates)


def test_registered_without_any_gpu_library():
    assert "cudnn" in runtime_names()
    rt = get_runtime("cudnn", precision="float16", tensor_cores=False)
    assert rt.variant() == {"precision": "float16", "tensor_cores": False, "timing": "hot"}
    assert rt.interleaves is False and not interleaving(rt, HarnessSettings(schedule="interleaved"))
    assert get_runtime("cudnn", sources=["cublaslt"]).variant()["sources"] == "cublaslt"
    with pytest.raises(UsageError, match="unknown precision 'int8'"):
        CudnnRuntime(precision="int8")
    with pytest.raises(UsageError, match="unknown GPU sources"):
        CudnnRuntime(sources=["tensorrt"])


@pytest.fixture(scope="module")
def chain_specs(conv_chain, process_proto):
    rt = CudnnRuntime()
    plan = plan_model(process_proto(conv_chain("maxpool")), rt, (1, 2))
    return rt, plan, specs_for_plan(plan, rt.name, rt.variant(), e2e=True)


def test_the_runtime_plans_fused_conv_bn_relu_groups(chain_specs):
    rt, plan, specs = chain_specs
    assert plan.units == ((0, 1, 2), (3,), (4,))
    group = next(s for s in specs if s.kind is SpecKind.GROUP)
    assert rt.supports(group) is None
    assert group.label.startswith("Conv+BatchNormalization+Relu")


def test_what_the_runtime_skips_says_why(chain_specs, monkeypatch):
    rt, _, specs = chain_specs
    sequence = next(s for s in specs if s.kind is SpecKind.SEQUENCE)
    assert "DLBricks sequences" in rt.supports(sequence)
    model = next(s for s in specs if s.kind is SpecKind.MODEL)
    assert "not available on this system" in rt.supports(model)  # mem.onnx is not a file
    layer = next(s for s in specs if s.kind is SpecKind.LAYER)
    no_net = dataclasses.replace(layer, network=Network((), (), (), 0))
    assert rt.supports(no_net) == "spec carries no network"


def test_model_specs_need_onnxruntime_cuda(chain_specs, tmp_path, conv_chain):
    rt, _, specs = chain_specs
    model = next(s for s in specs if s.kind is SpecKind.MODEL)
    path = tmp_path / "chain.onnx"
    path.write_bytes(conv_chain("maxpool").SerializeToString())
    on_disk = dataclasses.replace(model, model={**model.model, "path": str(path)})
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        assert rt.supports(on_disk) is None
    else:
        assert "install onnxruntime-gpu" in rt.supports(on_disk)


def test_every_candidate_is_timed_and_the_best_and_the_default_are_kept():
    device = FakeDevice({"IMPLICIT_GEMM": 3e-5, "WINOGRAD": 1e-5, "FFT": 2e-5, "nhwc:eng0": 1.5e-5})
    prepared = prepared_with(
        [
            candidate("IMPLICIT_GEMM", heuristic_rank=0),
            candidate("FFT", heuristic_rank=1),
            candidate("WINOGRAD", heuristic_rank=2, workspace_bytes=1 << 20),
            candidate("FFT", heuristic_rank=3),  # listed twice by two heuristic modes: kept once
            candidate("nhwc:eng0", "cudnn-graph", heuristic_rank=0),
        ],
        device,
    )
    m = prepared.measure(QUICK)
    assert sorted(device.order) == ["FFT", "IMPLICIT_GEMM", "WINOGRAD", "nhwc:eng0"]
    algos = m.stats.extras["algorithms"]
    assert algos["best"] == "cudnn-legacy:WINOGRAD" and algos["best_s"] == pytest.approx(1e-5)
    # the framework's pick is the legacy API's first heuristic choice, not the graph API's
    assert algos["default"] == "cudnn-legacy:IMPLICIT_GEMM" and algos["default_over_best"] == pytest.approx(3.0)
    assert [c["name"] for c in algos["candidates"]] == ["WINOGRAD", "nhwc:eng0", "FFT", "IMPLICIT_GEMM"]
    assert all(s == pytest.approx(3e-5) for s in m.samples)  # call figure: the default pick
    assert all(s == pytest.approx(1e-5) for s in m.kernel_samples)  # kernel figure: the best
    assert m.stats.extras["cold"]["best"]["median"] == pytest.approx(2e-5)
    assert m.stats.extras["cold"]["default"]["median"] == pytest.approx(6e-5)
    assert m.stats.extras["hot_modes"] == ["graph"]
    assert m.stats.extras["flush"]["mode"] == "read"
    assert {c["hot_mode"] for c in algos["candidates"]} == {"graph"}
    assert m.settings["gpu_clocks"]["before"]["sm_clock_mhz"] == 1980


def test_a_default_that_is_also_the_best_is_timed_cold_once():
    """Cold samples flush the L2 before every launch: on an H100 they were most of a one-candidate
    layer's time (a Relu's 0.2 s with --min-time 0.01), and the same candidate was timed twice."""
    device = FakeDevice({"IMPLICIT_GEMM": 1e-5, "FFT": 3e-5})
    prepared = prepared_with([candidate("IMPLICIT_GEMM", heuristic_rank=0), candidate("FFT", heuristic_rank=1)], device)
    cold = prepared.measure(QUICK).stats.extras["cold"]
    assert device.cold_timed == ["IMPLICIT_GEMM"]
    assert cold["best"] == cold["default"] and cold["default"]["median"] == pytest.approx(2e-5)


def test_a_record_says_what_building_and_timing_its_candidates_cost():
    """Where a GPU record's seconds go (an H100 took 0.5 s a zoo layer, 1 s a convolution of 40
    candidates): the build, each candidate's hot measurement, the cold ones, in wall seconds."""
    device = FakeDevice({"IMPLICIT_GEMM": 1e-5, "FFT": 3e-5})
    slow_hot, slow_cold = device.hot_sampler, device.cold_sampler

    def hot_sampler(launch):  # FFT's samples take 2 ms of wall time each, the others none
        sample = slow_hot(launch)
        if device.order[-1] != "FFT":
            return sample
        return HotSampler(lambda k: (time.sleep(0.002), sample(k))[1])

    def cold_sampler(launch):  # every cold sample takes 1 ms
        sample = slow_cold(launch)
        return lambda k: (time.sleep(0.001), sample(k))[1]

    device.hot_sampler, device.cold_sampler = hot_sampler, cold_sampler
    candidates = [candidate("IMPLICIT_GEMM", heuristic_rank=0), candidate("FFT", heuristic_rank=1)]
    candidates.append(candidate("broken", heuristic_rank=2))
    m = GpuPrepared(device, CONV, candidates, build_s=0.25).measure(QUICK)
    spent = m.stats.extras["cost_s"]
    by_name = {c["name"]: c["spent_s"] for c in m.stats.extras["algorithms"]["candidates"]}
    assert spent["build"] == 0.25
    assert by_name["FFT"] >= 0.002 * (QUICK.warmup_runs + QUICK.min_samples) > by_name["IMPLICIT_GEMM"]
    assert by_name["broken"] is not None and by_name["broken"] < by_name["FFT"]  # a failure's time is counted too
    assert spent["hot"] == pytest.approx(sum(by_name.values()))
    assert spent["cold"] >= 0.001 * (QUICK.warmup_runs + QUICK.min_samples)  # the best, also the default: once


def test_a_candidate_that_fails_at_run_time_is_kept_with_its_error():
    device = FakeDevice({"IMPLICIT_GEMM": 3e-5})
    candidates = [candidate("broken", heuristic_rank=0), candidate("IMPLICIT_GEMM", heuristic_rank=1)]
    prepared = prepared_with(candidates, device)
    m = prepared.measure(QUICK)
    algos = m.stats.extras["algorithms"]
    assert algos["measured"] == 1 and algos["failed"] == 1
    assert algos["candidates"][-1]["error"] == "RuntimeError: CUDNN_STATUS_EXECUTION_FAILED"
    assert algos["best"] == "cudnn-legacy:IMPLICIT_GEMM"
    # the heuristic's pick failed: a framework falls back to the next ranked candidate that runs
    assert algos["default"] == "cudnn-legacy:IMPLICIT_GEMM" and algos["default_fallback"] is True


def test_no_candidate_running_is_a_failure_not_a_zero():
    prepared = prepared_with([candidate("broken", heuristic_rank=0)], FakeDevice({}))
    with pytest.raises(GpuError, match="no candidate ran"):
        prepared.measure(QUICK)


def test_a_view_costs_nothing_on_the_gpu():
    flatten = DataMovementParams("Flatten", ((2, 3, 4),), (2, 12), "float32", view=True)
    m = prepared_with([], FakeDevice({}), params=flatten).measure(QUICK)
    assert m.samples == (0.0,) and m.kernel_samples == (0.0,) and m.stats.extras["view"] is True


def test_a_layer_that_computes_is_never_free():
    pool = PoolParams("max", (1, 1, 2, 2), (1, 1, 1, 1), (2, 2), (0, 0), (1, 1), "float32")
    with pytest.raises(UnsupportedLayer, match="only views launch nothing"):
        prepared_with([], FakeDevice({}), params=pool)


class SelfMeasuringRuntime(Runtime):
    """A runtime whose prepared benchmarks measure themselves, as the GPU runtime's do."""

    name = "null"
    interleaves = False

    def __init__(self, prepared=None, error: Exception | None = None) -> None:
        self._prepared, self._error = prepared, error

    def supports(self, spec):
        return None

    def prepare(self, spec):
        if self._error is not None:
            raise self._error
        return self._prepared

    def variant(self):
        return {}

    def stack(self):
        return {}


def test_run_spec_stores_what_a_self_measuring_benchmark_reports(chain_specs):
    _, _, specs = chain_specs
    layer = next(s for s in specs if s.kind is SpecKind.LAYER)
    device = FakeDevice({"IMPLICIT_GEMM": 3e-5, "WINOGRAD": 1e-5})
    prepared = prepared_with([candidate("IMPLICIT_GEMM", heuristic_rank=0), candidate("WINOGRAD")], device)
    record = run_spec(layer, SelfMeasuringRuntime(prepared), QUICK, system="gpu", stack_id="s")
    assert record.outcome is Outcome.OK
    assert record.stats.median == pytest.approx(3e-5)
    assert record.kernel_stats.median == pytest.approx(1e-5)
    assert record.stats.extras["algorithms"]["best"] == "cudnn-legacy:WINOGRAD"
    assert record.settings["gpu_clocks"]["after"]["sm_clock_mhz"] == 1980


def test_the_stored_statistics_are_those_the_previous_code_wrote(chain_specs):
    """The same fake measurement gives the statistics documents written before they were typed, byte for byte."""
    pinned = json.loads((Path(__file__).parent / "data" / "records_80e1d22.json").read_text())
    _, _, specs = chain_specs
    layer = next(s for s in specs if s.kind is SpecKind.LAYER)
    device = FakeDevice({"IMPLICIT_GEMM": 3e-5, "WINOGRAD": 1e-5})
    candidates = [
        candidate("IMPLICIT_GEMM", heuristic_rank=0),
        candidate("WINOGRAD"),
        candidate("broken", heuristic_rank=1),
    ]
    prepared = prepared_with(candidates, device)
    prepared.build_errors = {"cudnn-graph": "no engine"}
    flatten = DataMovementParams("Flatten", ((2, 3, 4),), (2, 12), "float32", view=True)
    view = prepared_with([], FakeDevice({}), params=flatten)
    for name, measured in (("cudnn", prepared), ("cudnn_view", view)):
        doc = run_spec(layer, SelfMeasuringRuntime(measured), QUICK, system="gpu", stack_id="s").to_doc()
        # added since: how the samples were held (device.StreamGate) and the L2 flushed, beside the pinned statistics
        gating = doc["stats"].pop("gating", None)
        assert name == "cudnn_view" or gating == {"gated": True, "error": None, "timeouts": 0}
        flush = doc["stats"].pop("flush", None)
        assert name == "cudnn_view" or flush == {"mode": "read", "bytes": 1 << 20, "error": None}
        # and what the record cost to take, wall seconds that differ from run to run
        cost = doc["stats"].pop("cost_s", None)
        assert name == "cudnn_view" or set(cost) == {"build", "hot", "cold"}
        for c in doc["stats"].get("algorithms", {}).get("candidates", []):
            assert c.pop("spent_s") >= 0
        for part in ("stats", "kernel_stats"):
            assert json.dumps(doc[part]) == json.dumps(pinned[name][part]), (name, part)


def test_run_spec_stores_an_unsupported_layer_as_skipped_and_a_gpu_error_as_failed(chain_specs):
    _, _, specs = chain_specs
    layer = next(s for s in specs if s.kind is SpecKind.LAYER)
    unsupported = SelfMeasuringRuntime(error=UnsupportedLayer("cudnn-legacy: LRN size 17 > 16"))
    record = run_spec(layer, unsupported, QUICK, system="gpu", stack_id="s")
    assert (record.outcome, record.reason) == (Outcome.SKIPPED, "cudnn-legacy: LRN size 17 > 16")
    broken = SelfMeasuringRuntime(error=GpuError("no CUDA device: cudaErrorNoDevice"))
    record = run_spec(layer, broken, QUICK, system="gpu", stack_id="s")
    assert (record.outcome, record.reason) == (Outcome.FAILED, "GpuError: no CUDA device: cudaErrorNoDevice")


def test_the_cli_says_in_one_line_that_there_is_no_gpu_and_stores_nothing(tmp_path, zoo_path, no_gpu):
    from typer.testing import CliRunner

    from benanza.cli import app

    db = tmp_path / "perf.db"
    model = str(zoo_path("squeezenet"))
    result = CliRunner().invoke(app, ["bench", "run", model, "--runtime", "cudnn", "--db", f"sqlite:///{db}"])
    assert result.exit_code == 2, result.output
    (line,) = [x for x in result.output.splitlines() if x.strip()]
    assert line.startswith("error: ") and "benanza[gpu]" in line
    assert not db.exists()
    # analysis reads the database only (no GPU needed): a missing one is an error, and not created
    result = CliRunner().invoke(app, ["analyze", "optimizations", model, "--db", f"sqlite:///{db}"])
    assert result.exit_code == 2 and "no database here" in result.output
    assert not db.exists()
    wrong = CliRunner().invoke(app, ["bench", "run", model, "--precision", "float16", "--db", f"sqlite:///{db}"])
    assert wrong.exit_code == 2 and "--precision is not an option of runtime 'onnxruntime'" in wrong.output


def test_without_a_gpu_framework_a_model_spec_says_what_is_missing(chain_specs, tmp_path, conv_chain, no_gpu):
    from benanza.runtimes.cuda.torch_model import torch_missing

    rt, _, specs = chain_specs
    model = next(s for s in specs if s.kind is SpecKind.MODEL)
    path = tmp_path / "chain.onnx"
    path.write_bytes(conv_chain("maxpool").SerializeToString())
    reason = rt.supports(dataclasses.replace(model, model={**model.model, "path": str(path)}))
    assert torch_missing() is not None and reason.endswith(f"and PyTorch: {torch_missing()}")


def test_the_end_to_end_framework_runs_the_variants_precision():
    """ONNX Runtime's CUDA EP runs the model's own float32; a half-precision variant is PyTorch's cast module."""
    from benanza.runtimes.cuda.runtime import e2e_framework

    assert e2e_framework("float32", None, None) == ("onnxruntime-cuda", None)
    assert e2e_framework("float32", "no CUDA EP", None) == ("pytorch", None)
    assert e2e_framework("float16", None, None) == ("pytorch", None)
    assert e2e_framework("bfloat16", None, "PyTorch is not installed") == (
        None,
        "a bfloat16 model runs end to end in PyTorch only, and PyTorch is not installed",
    )
    assert e2e_framework("float32", "no CUDA EP", "no torch") == (None, "no CUDA EP; and PyTorch: no torch")


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_a_zoo_model_runs_end_to_end_in_a_gpu_framework(zoo_path, precision):
    from benanza.bench.generate import specs_for_plan
    from benanza.local import plan_models

    rt = CudnnRuntime(precision=precision)
    (plan,) = plan_models([zoo_path("squeezenet")], rt, (1,))
    model = next(s for s in specs_for_plan(plan, rt.name, rt.variant(), e2e=True) if s.kind is SpecKind.MODEL)
    reason = rt.supports(model)
    if reason is not None:
        pytest.skip(reason)
    record = run_spec(model, rt, QUICK, system="gpu", stack_id="s")
    assert record.outcome is Outcome.OK, record.reason
    assert record.settings["framework"] in ("onnxruntime-cuda", "pytorch")
    assert precision == "float32" or record.settings["dtype"] == precision
    assert 0 < record.stats.median < 1.0
    rt.close()


@pytest.mark.gpu
def test_in_onnx_runtime_s_cuda_provider_an_output_whose_length_changes_is_bound_anew(random_length_model):
    """The framework's end to end on the GPU (``OrtCudaModel``) makes the same call as on the CPU: a second
    call into an output of another length was refused there too, and the model had no end to end."""
    import numpy as np

    from benanza.runtimes.onnxruntime import OUTPUTS_REBOUND, OrtCudaModel, cuda_provider_missing

    missing = cuda_provider_missing()
    if missing:
        pytest.skip(missing)
    prepared = OrtCudaModel(random_length_model, feeds={"x": np.zeros(16, np.float32)})
    lengths = set()
    call = prepared.call  # as the harness holds it
    for _ in range(10):
        call()
        lengths.add(prepared._binding.get_outputs()[0].shape()[1])
    assert len(lengths) > 1  # the length did change from call to call
    assert prepared.provenance["outputs"] == OUTPUTS_REBOUND
    prepared.close()


def test_when_the_framework_library_runs_nothing_its_pick_stays_empty():
    device = FakeDevice({"nhwc:eng0": 2e-5})
    prepared = prepared_with([candidate("broken", heuristic_rank=0), candidate("nhwc:eng0", "cudnn-graph")], device)
    m = prepared.measure(QUICK)
    algos = m.stats.extras["algorithms"]
    assert algos["best"] == "cudnn-graph:nhwc:eng0"
    assert algos["default"] is None and algos["default_fallback"] is True  # never read as the framework's pick
    assert all(s == pytest.approx(2e-5) for s in m.kernel_samples)


def test_every_layer_of_a_transformer_block_and_its_quantized_tail_has_a_gpu_call(build_model, process_proto):
    """LayerNormalization, an RMS norm spelt out (ReduceMean), a masked softmax (Where with a constant
    fill), QuantizeLinear/DequantizeLinear, IsNaN: planned for the GPU, each layer has a library call,
    and the CuPy ones run on NumPy (what the device runs is checked against that in the gpu tests)."""
    import numpy as np
    from onnx import TensorProto, helper

    from benanza.runtimes.cuda import framework
    from benanza.runtimes.cuda.runtime import spec_params

    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], axis=-1),
        helper.make_node("MatMul", ["ln", "w"], ["scores"]),
        helper.make_node("Where", ["mask", "scores", "fill"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
        helper.make_node("Pow", ["p", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq", "last"], ["ms"], keepdims=1),
        helper.make_node("Add", ["ms", "eps"], ["mse"]),
        helper.make_node("Sqrt", ["mse"], ["rms"]),
        helper.make_node("Div", ["p", "rms"], ["normed"]),
        helper.make_node("QuantizeLinear", ["normed", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"]),
        helper.make_node("IsNaN", ["dq"], ["bad"]),
    ]
    inits = {
        "g": np.ones(64, np.float32),
        "b": np.zeros(64, np.float32),
        "w": np.ones((64, 8), np.float32),
        "fill": np.array(-1e4, np.float32),
        "two": np.array(2.0, np.float32),
        "last": np.array([-1], np.int64),
        "eps": np.array(1e-6, np.float32),
        "s": np.array(0.02, np.float32),
        "z": np.array(0, np.int8),
    }
    inputs = [("x", f, [2, 8, 64]), ("mask", TensorProto.BOOL, [2, 1, 8])]
    proto = build_model(nodes, inputs, [("bad", TensorProto.BOOL, None)], inits, opset=18)
    rt = CudnnRuntime(precision="float16")
    plan = plan_model(process_proto(proto), rt, (1,))
    layers = [s for s in specs_for_plan(plan, rt.name, rt.variant()) if s.kind is SpecKind.LAYER]
    assert {s.label.split(" ")[0] for s in layers} >= {"LayerNormalization", "Where", "ReduceMean", "QuantizeLinear"}
    assert {s.label: rt.supports(s) for s in layers} == {s.label: None for s in layers}
    for spec in layers:
        params = spec_params(spec, "float16")
        if isinstance(params, framework.FrameworkParams):
            call = framework.layer_call(params)
            if call is not None:
                outputs = framework.empty_outputs(call.outputs)
                with np.errstate(invalid="ignore"):  # Sqrt of random data below 0
                    call.run(framework.numpy_ops(), framework.host_arrays(call.inputs), outputs)
                assert all(o.shape == s.shape for o, s in zip(outputs, call.outputs, strict=True))
