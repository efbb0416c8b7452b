"""Benanza's optimization analyses from GPU-runtime records (built by hand: the arithmetic is the test)."""

from __future__ import annotations

import dataclasses

import pytest

from benanza.analysis.optimize import METHOD, optimizations
from benanza.bench.generate import plan_model, specs_for_plan
from benanza.bench.records import MeasurementStats
from benanza.bench.spec import SpecKind
from benanza.bench.stats import describe
from benanza.runtimes.cuda.runtime import CudnnRuntime
from benanza.store import make_record

SYSTEM, STACK = "h100", "gpu-stack"

# per unit of Conv -> BN -> Relu -> Conv -> MaxPool on the GPU runtime: (best, default) in ms
UNIT_MS = {"Conv+BatchNormalization+Relu": (2.0, 3.0), "Conv": (1.0, 1.0), "MaxPool": (0.5, 0.5)}
# every layer alone (unfused): best in ms
LAYER_MS = {"Conv": 1.8, "BatchNormalization": 0.4, "Relu": 0.3, "MaxPool": 0.5}


@pytest.fixture(scope="module")
def plan(conv_chain, process_proto):
    # channels=4 everywhere makes both Convs' keys differ (3->4 and 4->4 channels)
    return plan_model(process_proto(conv_chain("maxpool")), CudnnRuntime(), ())


# what the GPU runtime's records list of their candidates (``stats.extras["algorithms"]``), here by name only
PICKS = {"algorithms": {"default": "cudnn-graph:heuristic", "best": "cudnn-graph:eng0"}}


def records(plan, *, scale: float = 1.0, e2e_ms: float = 10.0, extras=PICKS):
    out = {}
    runtime = CudnnRuntime()
    for spec in specs_for_plan(plan, runtime.name, runtime.variant(), e2e=True):
        if spec.kind is SpecKind.MODEL:
            best = default = e2e_ms
        else:
            ops = "+".join(n.op_type for n in spec.network.nodes)
            if spec.kind is SpecKind.GROUP:
                best, default = UNIT_MS[ops]
            elif spec.key in plan.unit_keys:  # a single-layer unit: the second Conv, the MaxPool
                best, default = UNIT_MS[ops]
            else:
                best = default = LAYER_MS[ops]
            best, default = best * scale, default * scale
        calls, kernels = [default / 1e3] * 3, [best / 1e3] * 3
        out[spec.key] = make_record(
            spec,
            system=SYSTEM,
            stack_id=STACK,
            outcome="ok",
            samples=calls,
            stats=MeasurementStats.of(describe(calls), extras=extras if spec.kind is not SpecKind.MODEL else {}),
            kernel_samples=kernels,
            kernel_stats=describe(kernels),
        )
    return out


def test_each_optimization_is_a_ratio_of_two_bounds(plan):
    assert plan.units == ((0, 1, 2), (3,), (4,))
    row = optimizations(
        plan,
        records(plan),
        system=SYSTEM,
        stack_id=STACK,
        runtime="cudnn",
        variant="v",
        without_tensor_cores=records(plan, scale=2.5),
    )
    b = row.bound
    assert b.sequential_ms == pytest.approx(2.0 + 1.0 + 0.5)
    assert row.heuristic_ms == pytest.approx(3.0 + 1.0 + 0.5)
    assert row.algorithm_selection == pytest.approx(4.5 / 3.5)
    # the first Conv alone (1.8), BN, Relu; the second Conv and the MaxPool are units of their own
    assert b.sequential_unfused_ms == pytest.approx(1.8 + 0.4 + 0.3 + 1.0 + 0.5)
    assert row.fusion == pytest.approx(4.0 / 3.5)
    assert row.parallel == pytest.approx(1.0)  # a chain: the critical path is everything
    assert row.tensor_cores == pytest.approx(2.5)
    assert row.framework_gap == pytest.approx(10.0 / 3.5)
    assert row.combined == pytest.approx(10.0 / 3.5)
    ops = row.by_op_type
    assert ops["Conv+BatchNormalization+Relu"] == {
        "count": 1,
        "best_ms": 2.0,
        "default_ms": 3.0,
        "default_over_best": 1.5,
    }
    d = row.to_dict()
    assert d["speedups"]["algorithm_selection"] == pytest.approx(4.5 / 3.5) and d["method"] == METHOD


def test_a_missing_variant_or_record_leaves_its_figure_empty(plan):
    results = records(plan)
    row = optimizations(plan, results, system=SYSTEM, stack_id=STACK, runtime="cudnn", variant="v")
    assert row.tensor_cores is None and row.no_tensor_cores_ms is None
    del results[plan.unit_keys[1]]
    row = optimizations(plan, results, system=SYSTEM, stack_id=STACK, runtime="cudnn", variant="v")
    assert row.bound.sequential_ms is None and row.heuristic_ms is None
    assert row.algorithm_selection is None and row.framework_gap is None
    assert row.bound.coverage == pytest.approx(4 / 5)


def test_a_layer_whose_framework_library_ran_nothing_has_no_default_figure(plan):
    results = records(plan)
    unit = results[plan.unit_keys[1]]
    stats = dataclasses.replace(unit.stats, extras={"algorithms": {"default": None, "best": "cudnn-graph:nhwc:eng0"}})
    results[plan.unit_keys[1]] = dataclasses.replace(unit, stats=stats)
    row = optimizations(plan, results, system=SYSTEM, stack_id=STACK, runtime="cudnn", variant="v")
    assert row.bound.sequential_ms == pytest.approx(3.5)  # the best figures are all there
    assert row.heuristic_ms is None and row.algorithm_selection is None


def test_a_view_costs_nothing_either_way_and_keeps_the_heuristic_figure(plan):
    """A view's record (Reshape: ``extras.view``, no candidate, so no default) left the whole model's
    algorithm-selection figure empty: ResNet-50 on an H200 had 1.94x by op type and none overall."""
    results = records(plan)
    unit = results[plan.unit_keys[2]]
    zero = describe((0.0,))
    stats = MeasurementStats.of(zero, extras={"algorithms": {"default": None, "best": None}, "view": True})
    results[plan.unit_keys[2]] = dataclasses.replace(
        unit, samples=[0.0], stats=stats, kernel_samples=[0.0], kernel_stats=zero
    )
    row = optimizations(plan, results, system=SYSTEM, stack_id=STACK, runtime="cudnn", variant="v")
    assert row.bound.sequential_ms == pytest.approx(3.0)
    assert row.heuristic_ms == pytest.approx(4.0) and row.algorithm_selection == pytest.approx(4.0 / 3.0)


def test_the_end_to_end_framework_is_named(plan):
    results = records(plan)
    model = next(r for r in results.values() if r.kind == "model")
    results[model.key] = dataclasses.replace(model, settings={"framework": "pytorch"})
    row = optimizations(plan, results, system=SYSTEM, stack_id=STACK, runtime="cudnn", variant="v")
    assert row.e2e_framework == "pytorch" and row.to_dict()["e2e_framework"] == "pytorch"
    assert "PyTorch" in METHOD["framework_gap"]


def test_a_runtime_that_picks_no_algorithm_has_no_algorithm_selection_figure(plan):
    """ONNX Runtime's records list no candidates and their ``stats`` are call latencies: read as a default pick
    over the kernel time, a Qwen3 of Adds and MatMuls showed a 5.4x algorithm choice (Add 8-16x). One figure
    for both: each layer's kernel time; the model's algorithm selection is no figure."""
    row = optimizations(
        plan, records(plan, extras={}), system=SYSTEM, stack_id=STACK, runtime="onnxruntime", variant="v"
    )
    assert row.bound.sequential_ms == pytest.approx(3.5)
    assert row.heuristic_ms is None and row.algorithm_selection is None
    assert all(entry["default_over_best"] == pytest.approx(1.0) for entry in row.by_op_type.values())
    assert row.fusion == pytest.approx(4.0 / 3.5)  # the other analyses stand
