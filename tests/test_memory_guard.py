"""The memory guard: impossible shapes are refused when bound, and a benchmark that cannot fit
in memory is never allocated.

The model is sized to this machine: a 1x1 convolution fans a ``N x 4 x 32 x 32`` input out to
256 channels and back, with ``N`` chosen so that the input is 1/32 of physical memory and every
activation twice physical memory. The input alone could be allocated; no benchmark of the model
can run here.
"""

from __future__ import annotations

import json
import re
import resource
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_checks import one_line_error
from onnx import helper
from typer.testing import CliRunner

from benanza.bench.execute import run_specs
from benanza.bench.generate import plan_model, specs_for_plan
from benanza.bench.spec import SpecKind
from benanza.cli import app
from benanza.host_memory import memory_bytes
from benanza.model.network import InputRef, Network, NetworkNode, NetworkOutput, NetworkTensor
from benanza.model.request import BindingRequest
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU
from benanza.store import Outcome, open_store

PHYSICAL = memory_bytes()
IMAGE_BYTES = 4 * 32 * 32 * 4  # one float32 4 x 32 x 32 image
FAN_OUT = 64  # activations per input byte
GIB = 1 << 30
SKIP_REASON = re.compile(r"^needs ~\d+\.\d GiB, the system has \d+\.\d GiB$")

pytestmark = pytest.mark.skipif(PHYSICAL is None, reason="the OS does not report physical memory")


@pytest.fixture(scope="module")
def fan_out(tmp_path_factory, build_model) -> Path:
    rng = np.random.default_rng(0)
    model = build_model(
        [
            helper.make_node("Conv", ["x", "w1"], ["wide"], name="fan_out"),
            helper.make_node("Relu", ["wide"], ["act"], name="relu"),
            helper.make_node("Conv", ["act", "w2"], ["y"], name="fan_in"),
        ],
        [("x", onnx.TensorProto.FLOAT, ["N", 4, 32, 32])],
        [("y", onnx.TensorProto.FLOAT, None)],
        {
            "w1": rng.standard_normal((4 * FAN_OUT, 4, 1, 1)).astype(np.float32),
            "w2": rng.standard_normal((4, 4 * FAN_OUT, 1, 1)).astype(np.float32),
        },
    )
    path = tmp_path_factory.mktemp("guard") / "fan_out.onnx"
    path.write_bytes(model.SerializeToString())
    return path


@pytest.fixture(scope="module")
def huge_batch() -> int:
    return max(1, PHYSICAL // (32 * IMAGE_BYTES))


def _invoke(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args], env={"BENANZA_DB": None, "BENANZA_SYSTEM": "guard"})


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@pytest.mark.timeout(180)  # a hang guard: nothing the size of the batch is ever built or run
@pytest.mark.parametrize("schedule", ["sequential", "interleaved"])
def test_a_huge_batch_is_stored_as_skipped_without_allocating(fan_out, huge_batch, tmp_path, schedule):
    db = f"sqlite:///{tmp_path / 'guard.db'}"
    peak_before = _peak_rss()
    result = _invoke(
        "bench", "run", fan_out, "--batch", huge_batch, "-g", "1,3", "--e2e", "--db", db,
        "--threads", "1", "--schedule", schedule, "--min-time", "0.001", "--max-time", "0.05", "-f", "json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert _peak_rss() - peak_before < huge_batch * IMAGE_BYTES  # not even the input was allocated
    with open_store(db, create=False) as store:
        records = store.records(system="guard")
    # every benchmark of the batch skipped; the call overhead's one float has no batch and is measured
    (overhead,) = [r for r in records if r.label == "Relu 1"]
    assert overhead.outcome is Outcome.OK
    records = [r for r in records if r is not overhead]
    assert records and {r.outcome for r in records} == {Outcome.SKIPPED}
    assert all(SKIP_REASON.match(r.reason) for r in records), {r.reason for r in records}
    assert {r.kind for r in records} == {"layer", "group", "sequence", "model"}
    assert (summary["measured"], summary["failed"], summary["skipped"]) == (1, 0, len(records))
    assert summary["deferred"] == 0


@pytest.mark.parametrize(
    "args",
    [
        ["bench", "run", "MODEL", "--shape", "data_0=1x3x100000x100000", "--db", "DB"],
        ["models", "inspect", "MODEL", "--shape", "data_0=1x3x100000x100000"],
        ["models", "inspect", "MODEL", "--batch", "100000000"],
    ],
)
@pytest.mark.timeout(120)  # a hang guard: refused when bound, before any allocation
def test_an_input_larger_than_memory_is_refused_when_bound(args, zoo_path, tmp_path):
    model = zoo_path("squeezenet")
    args = [str(model) if a == "MODEL" else f"sqlite:///{tmp_path / 'x.db'}" if a == "DB" else a for a in args]
    line = one_line_error(_invoke(*args))
    assert str(model) in line and "'data_0'" in line
    gib = re.findall(r"(\d+\.\d) GiB", line)
    assert len(gib) == 2 and float(gib[0]) > float(gib[1]) == round(PHYSICAL / GIB, 1), line


@pytest.mark.parametrize("text", ["x=0x3x8x8", "x=1x3x0x8", "x=1x-3x8x8", "x=1x3.5x8x8", "x=1xx8", "=1x3", "x"])
def test_impossible_dimensions_are_refused_when_the_flag_is_parsed(text, tmp_path, conv_chain):
    model = tmp_path / "chain.onnx"
    model.write_bytes(conv_chain("reshape").SerializeToString())
    line = one_line_error(_invoke("models", "inspect", model, "--shape", text))
    assert "--shape" in line and repr(text) in line
    assert ("--dim NAME=0" in line) == (text in ("x=0x3x8x8", "x=1x3x0x8"))  # where an empty dimension is given


def test_a_conv_layer_estimate_counts_weights_inputs_and_activations():
    from benanza.bench.memory import network_memory

    y = NetworkTensor((8, 16, 32, 32), "float32")
    conv_inputs = (InputRef.of_input(0), InputRef.weight((16, 4, 1, 1), "float32"))
    conv = NetworkNode("Conv", "", 17, (), conv_inputs, (y,), "conv")
    relu = NetworkNode("Relu", "", 17, (), (InputRef.of_node(0, 0),), (y,), "relu")
    net = Network((NetworkTensor((8, 4, 32, 32), "float32"),), (conv, relu), (NetworkOutput(1, 0),), 2)
    estimate = network_memory(net)
    assert (estimate.weights, estimate.inputs) == (16 * 4 * 4, 8 * 4 * 32 * 32 * 4)
    assert estimate.activations == 2 * 8 * 16 * 32 * 32 * 4  # Relu's output while the Conv's is read


def test_a_float16_weight_counts_the_float32_copy_the_cpu_kernels_read():
    """ONNX Runtime's CPU kernels cast a float16 weight to float32: a copy twice its size per session,
    held as activations are; a float32 weight of the same bytes has none."""
    from benanza.bench.memory import ACTIVATION_COPIES, WIDENED, network_memory

    def matmul(dtype: str, rows: int) -> Network:
        y = NetworkTensor((1, 256), dtype)
        node = NetworkNode("MatMul", "", 17, (), (InputRef.of_input(0), InputRef.weight((rows, 256), dtype)), (y,), "m")
        return Network((NetworkTensor((1, rows), dtype),), (node,), (NetworkOutput(0, 0),), 1)

    half, single = network_memory(matmul("float16", 512)), network_memory(matmul("float32", 256))
    assert half.weights == single.weights == 256 * 256 * 4
    assert (half.widened, single.widened) == (half.weights, 0)
    rest = half.inputs + half.activations * ACTIVATION_COPIES - single.inputs - single.activations * ACTIVATION_COPIES
    assert half.total - single.total == WIDENED * half.weights * ACTIVATION_COPIES + rest


@pytest.mark.parametrize("schedule", ["sequential", "interleaved"])
def test_what_does_not_fit_the_free_memory_now_is_not_run_and_not_stored(fan_out, tmp_path, fast_harness, schedule):
    """Free memory cannot be taken away for real on a shared machine: the reading is injected."""
    from benanza.host_memory import SystemMemory
    from benanza.model.process import process_model

    runtime = OnnxRuntimeCPU(threads=1)
    settings = fast_harness.model_copy(update={"schedule": schedule})
    specs = specs_for_plan(plan_model(process_model(fan_out, 1), runtime, (1,)), runtime.name, runtime.variant())
    assert {s.kind for s in specs} >= {SpecKind.LAYER, SpecKind.GROUP}
    scarce = SystemMemory(physical=PHYSICAL, available=0)
    with open_store(f"sqlite:///{tmp_path / 'now.db'}") as store:
        first = run_specs(specs, runtime, store, settings, system="s", stack_id="k", memory=lambda: scarce)
        assert (first.measured, first.failed, first.skipped, first.deferred) == (0, 0, 0, len(specs))
        assert "free now" in first.deferred_reason
        assert store.records(system="s") == []  # nothing stored: a later run retries
        second = run_specs(specs, runtime, store, settings, system="s", stack_id="k")
        assert (second.measured, second.deferred) == (len(specs), 0)


@pytest.mark.timeout(180)  # a hang guard
def test_a_fleet_worker_stores_what_cannot_fit_as_skipped_without_allocating(fan_out, huge_batch, tmp_path):
    pytest.importorskip("ray")
    from benanza.config import SystemConfig
    from benanza.fleet.worker import SystemWorker
    from benanza.model.process import process_model

    db = f"sqlite:///{tmp_path / 'w.db'}"
    harness = {"warmup_runs": 1, "min_samples": 3, "min_time_s": 0.001, "max_time_s": 0.05, "kernel_runs": 3}
    worker = SystemWorker(
        SystemConfig(name="big", runtimes=["onnxruntime:threads=1"]).model_dump(mode="json"), db, harness
    )
    runtime = worker.runtimes["onnxruntime:threads=1"]
    plan = plan_model(process_model(fan_out, huge_batch), runtime, (1,), batch=huge_batch)
    specs = specs_for_plan(plan, runtime.name, runtime.variant(), e2e=True)
    peak_before = _peak_rss()
    try:
        out = worker.run([s.to_dict() for s in specs])
    finally:
        worker.close()
    assert _peak_rss() - peak_before < huge_batch * IMAGE_BYTES
    assert len(out["outcomes"]) == len(specs)
    (overhead,) = [s.spec_id for s in specs if s.key == plan.call_overhead_key]  # one float: no batch, measured
    assert {v for k, v in out["outcomes"].items() if k != overhead} == {"skipped"}
    with open_store(db, create=False) as store:
        assert all(SKIP_REASON.match(r.reason) for r in store.records(system="big") if r.key != plan.call_overhead_key)


def test_a_shape_only_a_bigger_system_holds_is_planned_for_the_fleet(zoo_path):
    """The fleet driver and analyses of stored systems process models that other, bigger systems run:
    the input-size refusal is for this machine only, and each system's workers apply the guard."""
    from benanza.errors import ModelError
    from benanza.model.process import process_model

    huge = {"data_0": (1, 3, 100000, 100000)}
    with pytest.raises(ModelError, match="more than this machine's"):
        process_model(zoo_path("squeezenet"), None, BindingRequest(huge))
    processed = process_model(zoo_path("squeezenet"), None, BindingRequest(huge), fits_here=False)
    assert processed.binding.shapes["data_0"] == (1, 3, 100000, 100000)
    assert processed.graph.layers
