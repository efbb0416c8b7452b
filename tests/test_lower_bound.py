"""Lower bounds, DLBricks composition and coverage from (fake and real) benchmark records."""

from __future__ import annotations

import dataclasses
import math

import pytest
from onnx import TensorProto, helper

from benanza.analysis.lower_bound import COMPOSITION_TOLERANCE, METHOD, composition_departures, lower_bound
from benanza.bench.generate import plan_model, specs_for_plan
from benanza.bench.records import MeasurementStats
from benanza.bench.spec import SpecKind
from benanza.bench.stats import SAMPLE_STATISTICS, Interval, describe
from benanza.local import analyze, bench, open_local, plan_models
from benanza.runtimes.null import NullRuntime
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU
from benanza.store import Outcome, make_record

SYSTEM, STACK = "test-system", "stack-under-test"

# kernel time (seconds) of each op in the branching model below
KERNEL_S = {"Relu": 0.001, "Sigmoid": 0.003, "Tanh": 0.002, "Add": 0.0005}


@pytest.fixture(scope="module")
def branching(build_model, process_proto):
    """x -> Relu -> a; a -> Sigmoid -> b; a -> Tanh -> Tanh -> d; Add(b, d).

    Both Tanh layers have one key: one benchmark, counted twice.
    """
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Sigmoid", ["a"], ["b"]),
        helper.make_node("Tanh", ["a"], ["c"]),
        helper.make_node("Tanh", ["c"], ["d"]),
        helper.make_node("Add", ["b", "d"], ["y"]),
    ]
    processed = process_proto(build_model(nodes, [("x", TensorProto.FLOAT, [1, 16])], [("y", TensorProto.FLOAT, None)]))
    # the null runtime has no execution groups: every layer is its own unit
    return plan_model(processed, NullRuntime(), (1, 2))


OVERHEAD_S = 1e-5  # the call overhead network's call latency: 0.01 ms


def fake_records(plan, call_s, kernel_s, *, runtime="null", variant=None, outcome=Outcome.OK, overhead_s=OVERHEAD_S):
    """One OK record per spec of ``plan``; ``call_s(spec)`` and ``kernel_s(spec)`` give seconds.

    The call overhead network (``plan.call_overhead_key``) takes ``overhead_s`` a call.
    """
    records = {}
    for spec in specs_for_plan(plan, runtime, variant or {}, e2e=True):
        overhead = spec.key == plan.call_overhead_key
        calls, kernels = [overhead_s if overhead else call_s(spec)] * 5, [kernel_s(spec)] * 5
        records[spec.key] = make_record(
            spec,
            system=SYSTEM,
            stack_id=STACK,
            outcome=outcome,
            reason=None if outcome is Outcome.OK else "broken",
            samples=calls,
            stats=MeasurementStats.of(describe(calls)),
            kernel_samples=kernels,
            kernel_stats=describe(kernels),
        )
    return records


def call_seconds(spec):
    """Call latency: a tenth of a millisecond per node (or 50 ms for the whole model)."""
    if spec.kind is SpecKind.MODEL:
        return 0.05
    return 1e-4 * len(spec.network.nodes)


def kernel_seconds(spec):
    if spec.kind is SpecKind.MODEL:
        return 0.04
    return sum(KERNEL_S[n.op_type] for n in spec.network.nodes)


def bound(plan, results):
    return lower_bound(plan, results, system=SYSTEM, stack_id=STACK, runtime="null", variant="")


@pytest.fixture(scope="module")
def all_results(branching):
    return fake_records(branching, call_seconds, kernel_seconds)


def test_the_branching_model(branching):
    assert [layer.op_type for layer in branching.graph.layers] == ["Relu", "Sigmoid", "Tanh", "Tanh", "Add"]
    assert branching.graph.edges == ((0, 1), (0, 2), (1, 4), (2, 3), (3, 4))
    assert branching.units == ((0,), (1,), (2,), (3,), (4,))
    assert branching.graph.layers[2].layer_key == branching.graph.layers[3].layer_key
    assert branching.sequences[2] == ((0, 1), (2, 3), (4,))


def test_complete_results(branching, all_results):
    lb = bound(branching, all_results)
    # every unit's kernel median, the repeated Tanh counted twice: 1 + 3 + 2 + 2 + 0.5
    assert lb.sequential_ms == pytest.approx(8.5)
    assert lb.sequential_unfused_ms == pytest.approx(8.5)  # no fused units here
    assert lb.partial_sequential_ms == pytest.approx(8.5)
    # critical path Relu -> Tanh -> Tanh -> Add = 5.5 beats Relu -> Sigmoid -> Add = 4.5
    assert lb.parallel_ms == pytest.approx(5.5)
    assert lb.parallel_ms <= lb.sequential_ms
    assert lb.coverage == 1.0
    assert lb.missing == ()
    # five single-layer sequences of 0.1 ms, less the 0.01 ms call overhead four times (the model pays it once)
    assert lb.composed_sum_ms[1] == pytest.approx(5 * 0.1)
    assert lb.composed_ms[1] == pytest.approx(5 * 0.1 - 4 * 0.01)
    assert lb.call_overhead_ms == pytest.approx(0.01)
    # (Relu, Sigmoid), (Tanh, Tanh), (Add)
    assert lb.composed_sum_ms[2] == pytest.approx(0.2 + 0.2 + 0.1)
    assert lb.composed_ms[2] == pytest.approx(0.2 + 0.2 + 0.1 - 2 * 0.01)
    assert lb.e2e_ms == pytest.approx(50.0)
    assert lb.e2e_kernel_ms == pytest.approx(40.0)
    assert [u.kernel_ms for u in lb.units] == pytest.approx([1.0, 3.0, 2.0, 2.0, 0.5])
    assert [u.call_ms for u in lb.units] == pytest.approx([0.1] * 5)
    assert lb.batch_size == 1 and lb.model == "mem"
    assert lb.checks == ()  # 8.5 and 5.5 ms are below the 50 ms end to end


def test_a_bound_above_end_to_end_is_reported_not_clipped(branching, all_results):
    results = dict(all_results)
    model = next(s for s in specs_for_plan(branching, "null", {}, e2e=True) if s.kind is SpecKind.MODEL)
    # e2e of 8.0 ms: the sequential bound (8.5) is above it by 6.25%, the parallel one (5.5) is not
    results.update(fake_records(branching, lambda s: 0.008 if s.key == model.key else call_seconds(s), kernel_seconds))
    lb = bound(branching, results)
    assert lb.sequential_ms == pytest.approx(8.5) and lb.e2e_ms == pytest.approx(8.0)
    (check,) = lb.checks  # identical samples: intervals of no width, 8.5 is above 8.0 beyond any noise
    assert check.startswith("sequential_ms 8.500 ms (95% interval 8.500-8.500) exceeds e2e 8.000 ms")
    assert "by 6.2%, beyond the noise of both" in check
    assert lb.to_dict()["checks"] == [check]
    # equal: not above
    results.update(fake_records(branching, lambda s: 0.0085 if s.key == model.key else call_seconds(s), kernel_seconds))
    assert bound(branching, results).checks == ()


def noisy_records(plan, call_s, kernel_s, spread):
    """Like ``fake_records`` with 30 samples spread +-``spread`` (relative) around each figure."""
    wobble = [1 + spread * ((i * 7) % 11 - 5) / 5 for i in range(30)]
    records = {}
    for spec in specs_for_plan(plan, "null", {}, e2e=True):
        calls, kernels = [call_s(spec) * w for w in wobble], [kernel_s(spec) * w for w in wobble]
        records[spec.key] = make_record(
            spec,
            system=SYSTEM,
            stack_id=STACK,
            outcome=Outcome.OK,
            samples=calls,
            stats=MeasurementStats.of(describe(calls)),
            kernel_samples=kernels,
            kernel_stats=describe(kernels),
        )
    return records


def test_checks_compare_intervals_not_points(branching):
    model = next(s for s in specs_for_plan(branching, "null", {}, e2e=True) if s.kind is SpecKind.MODEL)
    # e2e 8.3 ms: the sequential bound's p10 sum (about 8.5 * 0.82) is below it whatever the noise
    quiet = noisy_records(branching, lambda s: 0.0083 if s.key == model.key else call_seconds(s), kernel_seconds, 0.2)
    lb = bound(branching, quiet)
    seq, e2e = lb.interval("sequential_ms"), lb.interval("e2e_ms")
    assert seq.low < seq.value < seq.high and e2e.low < e2e.value < e2e.high
    assert lb.checks == ()
    # a bound above e2e by 2% while both are known to +-5%: within the noise of both, no check
    near = noisy_records(
        branching, lambda s: seq.value / 1.02 / 1e3 if s.key == model.key else call_seconds(s), kernel_seconds, 0.2
    )
    lb = bound(branching, near)
    assert lb.sequential_ms > lb.e2e_ms
    assert lb.interval("sequential_ms").low <= lb.interval("e2e_ms").high
    assert lb.checks == ()
    # far above: a check
    far = noisy_records(
        branching, lambda s: seq.value / 1.5 / 1e3 if s.key == model.key else call_seconds(s), kernel_seconds, 0.2
    )
    (check,) = bound(branching, far).checks
    assert check.startswith("sequential_ms")


def test_intervals_of_sums_and_json(branching):
    records = noisy_records(branching, call_seconds, kernel_seconds, 0.1)
    lb = bound(branching, records)
    units = [lb.units[u].kernel_ms for u in range(5)]
    assert lb.sequential_ms == pytest.approx(sum(units))
    seq, par = lb.interval("sequential_ms"), lb.interval("parallel_ms")
    # quadrature: the sum's half-width is below the sum of the units' half-widths, above the largest
    unit_half = [
        (r.kernel_stats.p10_high - r.kernel_stats.p10_low) * 1e3 / 2 for r in (records[k] for k in branching.unit_keys)
    ]
    # the Tanh unit counted twice is one measurement: its error counts twice, the others add in quadrature
    tanh = unit_half[2]
    others = unit_half[:2] + unit_half[4:]
    assert seq.half_width == pytest.approx(math.sqrt(sum(h * h for h in others) + (2 * tanh) ** 2))
    assert max(unit_half) < seq.half_width < sum(unit_half)
    # each unit carries the interval the sum is built from (the report's unit breakdown prints it)
    assert [lb.units[u].kernel_interval.half_width for u in range(5)] == pytest.approx(unit_half)
    assert all(u.kernel_interval.value == u.kernel_ms for u in lb.units)
    assert par.value == pytest.approx(lb.parallel_ms) and par.half_width < seq.half_width
    assert lb.interval("composed_ms[1]").value == pytest.approx(lb.composed_ms[1])
    doc = lb.to_dict()
    assert doc["intervals"]["sequential_ms"] == {"low": seq.low, "high": seq.high}
    assert set(doc["intervals"]["composed_ms"]) == {"1", "2"}
    assert doc["confidence"] == 0.95 and doc["disturbed"] == []


def test_disturbed_measurements_mark_their_figures(branching, all_results):
    results = dict(all_results)
    model = next(s for s in specs_for_plan(branching, "null", {}, e2e=True) if s.kind is SpecKind.MODEL)
    stats = dataclasses.replace(results[model.key].stats, disturbed=True, disturbed_reason="step")
    results[model.key] = dataclasses.replace(results[model.key], stats=stats)
    lb = bound(branching, results)
    assert lb.disturbed == ("e2e_ms", "e2e_kernel_ms")
    # a layer's record marks the unfused sum too (the main job measured DenseNet's layers alone apart)
    layer = branching.graph.layers[0].layer_key
    stats = dataclasses.replace(all_results[layer].stats, disturbed=True, disturbed_reason="step")
    lb = bound(branching, {**all_results, layer: dataclasses.replace(all_results[layer], stats=stats)})
    assert "sequential_unfused_ms" in lb.disturbed and "e2e_ms" not in lb.disturbed


def test_records_stored_before_intervals_get_them_from_their_samples(branching):
    records = noisy_records(branching, call_seconds, kernel_seconds, 0.1)
    fresh = bound(branching, records)
    no_intervals = {n: None for n in SAMPLE_STATISTICS if n.endswith(("_low", "_high"))}
    old = {
        k: dataclasses.replace(
            r,
            stats=dataclasses.replace(r.stats, **no_intervals),
            kernel_stats=dataclasses.replace(r.kernel_stats, **no_intervals),
        )
        for k, r in records.items()
    }
    again = bound(branching, old)
    assert again.intervals == fresh.intervals and again.composed_intervals == fresh.composed_intervals


def test_parallel_bound_follows_the_costs(branching, all_results):
    # make the Sigmoid branch the longest: Relu 1 + Sigmoid 10 + Add 0.5
    results = dict(all_results)
    sigmoid_key = branching.graph.layers[1].layer_key
    results.update(
        fake_records(branching, call_seconds, lambda s: 0.010 if s.key == sigmoid_key else kernel_seconds(s))
    )
    lb = bound(branching, results)
    assert lb.parallel_ms == pytest.approx(11.5)
    assert lb.sequential_ms == pytest.approx(15.5)


def test_a_chain_s_parallel_bound_is_its_sequential_one(build_model, process_proto):
    """On a chain the critical path is every unit. Summed along the path by plain additions, it came
    out one rounding over the sequential bound (``sum``: compensated since Python 3.12; now
    ``math.fsum``), and the zoo check "parallel <= sequential" failed on VGG-19 and DenseNet-121 on an
    H200 (2026-11-29). A path is never longer than the whole."""
    nodes = [
        helper.make_node(op, [a], [b]) for op, a, b in (("Relu", "x", "a"), ("Sigmoid", "a", "b"), ("Tanh", "b", "y"))
    ]
    processed = process_proto(build_model(nodes, [("x", TensorProto.FLOAT, [1, 8])], [("y", TensorProto.FLOAT, None)]))
    chain = plan_model(processed, NullRuntime(), (1,))
    seconds = {layer.layer_key: s for layer, s in zip(chain.graph.layers, (1e-4, 2e-4, 3e-4), strict=True)}
    results = fake_records(chain, call_seconds, lambda spec: seconds.get(spec.key, kernel_seconds(spec)))
    lb = bound(chain, results)
    assert 0.1 + 0.2 + 0.3 > math.fsum([0.1, 0.2, 0.3])  # the two ways of adding differ here
    assert lb.parallel_ms <= lb.sequential_ms
    assert lb.parallel_ms == lb.sequential_ms


def test_a_path_summed_one_rounding_over_the_whole_is_the_whole(branching, all_results, monkeypatch):
    """Whatever Python's ``sum`` does (3.11's adds plainly, so the chain above agrees on it by chance): a
    critical path that comes out longer than the sequential bound is the sequential bound."""
    from benanza.model.graph import CriticalPath, ModelGraph

    whole = bound(branching, all_results).sequential_ms
    monkeypatch.setattr(
        ModelGraph, "critical_path", lambda self, cost: CriticalPath(math.nextafter(whole, math.inf), (0, 4))
    )
    assert bound(branching, all_results).parallel_ms == whole


def test_missing_layers_give_no_totals_and_exact_coverage(branching, all_results):
    tanh_key = branching.graph.layers[2].layer_key
    results = {k: r for k, r in all_results.items() if k != tanh_key}
    lb = bound(branching, results)
    assert lb.sequential_ms is None
    assert lb.parallel_ms is None
    assert lb.sequential_unfused_ms is None
    assert lb.coverage == 3 / 5
    assert lb.missing == tuple(
        {
            "index": i,
            "name": branching.graph.layers[i].name,
            "op_type": "Tanh",
            "domain": "",
            "layer_key": tanh_key,
            "reason": "not measured on this system and stack",
        }
        for i in (2, 3)
    )
    assert lb.partial_sequential_ms == pytest.approx(1.0 + 3.0 + 0.5)  # what is present
    assert lb.composed_ms[1] is None  # G=1 needs the Tanh unit
    assert lb.composed_ms[2] == pytest.approx(0.5 - 2 * 0.01)  # the Tanh pair was measured as a sequence
    assert lb.e2e_ms == pytest.approx(50.0)


def test_a_missing_sequence_leaves_only_its_granularity_open(branching, all_results):
    pair = branching.sequence_keys[2][1]
    results = {k: r for k, r in all_results.items() if k != pair}
    lb = bound(branching, results)
    assert lb.composed_ms[2] is None
    assert lb.composed_ms[1] == pytest.approx(0.5 - 4 * 0.01)
    assert lb.sequential_ms == pytest.approx(8.5)
    assert lb.coverage == 1.0


def test_failed_records_and_records_without_kernel_times_count_as_missing(branching, all_results):
    add = branching.graph.layers[4]
    failed = fake_records(branching, call_seconds, kernel_seconds, outcome=Outcome.FAILED)
    results = {**all_results, add.layer_key: failed[add.layer_key]}
    lb = bound(branching, results)
    assert lb.sequential_ms is None and lb.coverage == 4 / 5
    assert [m["index"] for m in lb.missing] == [4]
    assert lb.composed_ms == {1: None, 2: None}

    no_kernel = dataclasses.replace(all_results[add.layer_key], kernel_samples=(), kernel_stats=None)
    lb = bound(branching, {**all_results, add.layer_key: no_kernel})
    assert lb.sequential_ms is None and [m["index"] for m in lb.missing] == [4]
    assert lb.composed_ms[1] == pytest.approx(0.5 - 4 * 0.01)  # the call latency is there


def test_no_results_at_all(branching):
    lb = bound(branching, {})
    assert lb.coverage == 0.0
    assert lb.partial_sequential_ms == 0.0
    assert len(lb.missing) == 5
    assert (lb.sequential_ms, lb.parallel_ms, lb.e2e_ms, lb.e2e_kernel_ms) == (None, None, None, None)
    assert lb.composed_ms == {1: None, 2: None}


def test_fused_units_carry_the_cost_of_all_their_layers(conv_chain, process_proto):
    runtime = OnnxRuntimeCPU(threads=1)
    plan = plan_model(process_proto(conv_chain("reshape")), runtime, (1, 2))
    assert plan.units == ((0, 1, 2), (3,), (4,))
    costs = {"Conv": 0.004, "BatchNormalization": 0.002, "Relu": 0.001, "Reshape": 0.0005}

    def kernel(spec):
        if spec.kind is SpecKind.MODEL:
            return 0.1
        if spec.kind is SpecKind.GROUP:
            return 0.003  # the fused Conv+BN+Relu is cheaper than its parts
        return sum(costs[n.op_type] for n in spec.network.nodes)

    results = fake_records(plan, call_seconds, kernel, runtime="onnxruntime", variant=runtime.variant())
    lb = lower_bound(plan, results, system=SYSTEM, stack_id=STACK, runtime="onnxruntime", variant="v")
    assert lb.sequential_ms == pytest.approx(3.0 + 4.0 + 0.5)
    assert lb.sequential_unfused_ms == pytest.approx(4.0 + 2.0 + 1.0 + 4.0 + 0.5)
    assert lb.parallel_ms == pytest.approx(lb.sequential_ms)  # a chain has no parallelism
    assert [u.layers for u in lb.units] == [(0, 1, 2), (3,), (4,)]

    del results[plan.unit_keys[0]]
    lb = lower_bound(plan, results, system=SYSTEM, stack_id=STACK, runtime="onnxruntime", variant="v")
    assert [m["index"] for m in lb.missing] == [0, 1, 2]
    assert lb.coverage == 2 / 5
    assert lb.partial_sequential_ms == pytest.approx(4.5)
    assert lb.sequential_unfused_ms == pytest.approx(11.5)  # every single layer is still there


@pytest.mark.parametrize(("fused_s", "said"), [(0.003, False), (0.0079, False), (0.0126, True)])
def test_fused_units_slower_than_their_layers_alone_are_said(conv_chain, process_proto, fused_s, said):
    """A DeBERTa-v2's Add and LayerNormalization, fused by ONNX Runtime into one SkipLayerNormalization, took 8.9 us
    against 2.9 us alone on a 2-core VM: the ``fusion`` figure (0.93x) said something fused ran slower, not what.
    Faster fused, or slower within 20%, is nothing to say."""
    runtime = OnnxRuntimeCPU(threads=1)
    plan = plan_model(process_proto(conv_chain("reshape")), runtime, (1,))
    costs = {"Conv": 0.004, "BatchNormalization": 0.002, "Relu": 0.001, "Reshape": 0.0005}

    def kernel(spec):
        if spec.kind is SpecKind.MODEL:
            return 0.1
        if spec.kind is SpecKind.GROUP:
            return fused_s
        return sum(costs[n.op_type] for n in spec.network.nodes)

    results = fake_records(plan, call_seconds, kernel, runtime="onnxruntime", variant=runtime.variant())
    lb = lower_bound(plan, results, system=SYSTEM, stack_id=STACK, runtime="onnxruntime", variant="v")
    if not said:
        assert lb.fusion_notes == () and lb.to_dict()["fusion_notes"] == []
        return
    (note,) = lb.fusion_notes
    assert note.startswith(
        "its fused Conv+BatchNormalization+Relu unit takes 1.80x the kernel time of its layers run alone: "
        "12600.0 us against 7000.0 us"
    ) and note.endswith("5600.0 us more of its units' kernel time: the runtime's fusion of it costs time here")
    assert note in lb.notes and lb.to_dict()["fusion_notes"] == [note]
    del results[plan.graph.layers[1].layer_key]  # a layer alone without a figure: nothing to compare
    assert (
        lower_bound(plan, results, system=SYSTEM, stack_id=STACK, runtime="onnxruntime", variant="v").fusion_notes == ()
    )


def test_to_dict_contract(branching, all_results):
    row = bound(branching, all_results).to_dict()
    for field in ("model", "system", "stack_id", "batch_size", "sequential_ms", "parallel_ms", "e2e_ms"):
        assert field in row
    assert set(row["composed_ms"]) == {"1", "2"}
    assert row["coverage"] == 1.0 and row["missing"] == []
    assert row["method"] == METHOD
    assert (row["system"], row["stack_id"], row["runtime"]) == (SYSTEM, STACK, "null")


def test_measured_in_the_store_then_analyzed(tmp_path, conv_chain, fast_harness):
    path = tmp_path / "chain.onnx"
    path.write_bytes(conv_chain("reshape").SerializeToString())
    ctx = open_local(f"sqlite:///{tmp_path / 'lb.db'}", "onnxruntime", {"threads": 1}, SYSTEM, fast_harness)
    try:
        plans = plan_models([path], ctx.runtime, granularities=(1, 2))
        before = analyze(ctx, plans)[0]
        assert before.coverage == 0.0 and before.sequential_ms is None
        summary = bench(ctx, plans, e2e=True)
        assert summary.failed == summary.skipped == 0
        (lb,) = analyze(ctx, plans)
    finally:
        ctx.close()
    assert lb.model == "chain" and lb.system == SYSTEM and lb.stack_id == ctx.stack_id
    assert lb.variant == "ep=cpu,opt=extended,threads=1"
    assert lb.coverage == 1.0 and lb.missing == ()
    for value in (lb.sequential_ms, lb.sequential_unfused_ms, lb.parallel_ms, lb.e2e_ms, *lb.composed_ms.values()):
        assert value is not None and value >= 0
    assert lb.parallel_ms == pytest.approx(lb.sequential_ms)
    assert lb.e2e_ms > 0


def test_without_a_measured_call_overhead_the_composition_is_dlbricks_plain_sum(branching, all_results):
    """A plan stored before the overhead was measured, or its record missing: the plain sum, said so."""
    results = {k: r for k, r in all_results.items() if k != branching.call_overhead_key}
    lb = bound(branching, results)
    assert lb.call_overhead_ms is None
    assert lb.composed_ms[1] == pytest.approx(0.5) == lb.composed_sum_ms[1]
    assert lb.to_dict()["call_overhead_ms"] is None


def test_a_call_overhead_above_a_sequences_latency_is_capped_by_it(branching, all_results):
    """Measured under another load (reused from another run, a busy host), an overhead of 0.2 ms is above
    the 0.1 ms sequences it would be taken off, which made a composition of a hundred sequences negative:
    the cheapest sequence's latency is taken off instead, and ``checks`` says so."""
    lb = bound(branching, fake_records(branching, call_seconds, kernel_seconds, overhead_s=2e-4))
    assert lb.call_overhead_ms == pytest.approx(0.2)  # as measured
    assert lb.composed_ms[1] == pytest.approx(5 * 0.1 - 4 * 0.1)
    assert lb.composed_ms[2] == pytest.approx(0.2 + 0.2 + 0.1 - 2 * 0.1)  # its cheapest sequence, (Add)
    (check,) = lb.checks  # one cap for every G, said once
    assert check.startswith("the call overhead (0.2000 ms) is above the call latency of the cheapest sequence")
    assert "beyond the noise of both" in check
    assert all(v >= 0 for v in lb.composed_ms.values())
    assert bound(branching, all_results).checks == ()  # 0.01 ms: below every sequence


def test_an_overhead_within_the_noise_of_the_cheapest_sequence_is_capped_without_a_check():
    """The zoo at the defaults beside another job: a Relu of one float at 0.0045 ms (0.0032-0.0058), the
    cheapest sequence at 0.0039 (0.0037-0.0041): capped, as no call costs less than the fixed cost, but no
    contradiction to report."""
    from benanza.analysis.lower_bound import fixed_call_cost

    checks: list[str] = []
    calls = {"reshape": Interval(0.0039, 0.0037, 0.0041), "conv": Interval(0.05, 0.049, 0.051), "none": None}
    assert fixed_call_cost(Interval(0.0045, 0.0032, 0.0058), calls, checks) == "reshape" and checks == []
    assert fixed_call_cost(Interval(0.0030, 0.0028, 0.0032), calls, checks) is None and checks == []
    # apart beyond the noise of both, by 7.7% only (a quiet host's narrow intervals): capped, nothing to report
    assert fixed_call_cost(Interval(0.0042, 0.00415, 0.00425), calls, checks) == "reshape" and checks == []
    assert fixed_call_cost(Interval(0.0101, 0.0095, 0.0107), calls, checks) == "reshape" and len(checks) == 1


def test_a_sequence_taken_off_as_the_fixed_cost_counts_its_error_once_net():
    """134 sequences of one key, its latency also the fixed cost: the composition is that one measurement,
    with its own error, not 267 errors' worth (one measurement counted c times carries c times its error)."""
    from benanza.analysis.lower_bound import _total

    one = Interval(0.01, 0.008, 0.012)
    composed = _total([("k", one)] * 135, {"k": -134})
    assert (composed.value, composed.low, composed.high) == pytest.approx((0.01, 0.008, 0.012))
    mixed = _total([("a", one), ("b", Interval(0.03, 0.027, 0.033)), ("a", one)], {"a": -2})  # 2a + b - 2a
    assert (mixed.value, mixed.low, mixed.high) == pytest.approx((0.03, 0.027, 0.033))


def test_a_composition_far_from_end_to_end_is_said_to_be_no_estimate():
    """Beyond ``COMPOSITION_TOLERANCE`` and beyond the noise of both: one message for the compositions
    below end to end, one for those above; within either, nothing."""
    e2e = Interval(0.733, 0.718, 0.749)
    (below,) = composition_departures({1: Interval(0.335, 0.332, 0.337), 3: Interval(0.337, 0.335, 0.339)}, e2e)
    assert below.startswith("composed G=1 0.335 ms (0.332-0.337, 0.46x), G=3 0.337 ms (0.335-0.339, 0.46x) below ")
    assert "end to end 0.733 ms (0.718-0.749, 95% intervals)" in below and "caches between its layers" in below
    assert composition_departures({1: Interval(0.70, 0.69, 0.71)}, e2e) == ()  # 0.95x: within the tolerance
    # 0.85x, but the intervals overlap: not known to be off
    assert composition_departures({1: Interval(0.62, 0.40, 0.75)}, e2e) == ()
    (above,) = composition_departures({2: Interval(0.90, 0.88, 0.92)}, e2e)
    assert above.startswith("composed G=2 0.900 ms (0.880-0.920, 1.23x) above ") and "slower than the whole" in above
    both = composition_departures({1: Interval(0.335, 0.332, 0.337), 2: Interval(0.90, 0.88, 0.92)}, e2e)
    assert [m.split(" ", 2)[1] for m in both] == ["G=1", "G=2"]
    assert composition_departures({1: Interval(0.335, 0.332, 0.337)}, None) == ()
    edge = e2e.value * (1 - 0.999 * COMPOSITION_TOLERANCE)  # just within it
    assert composition_departures({1: Interval.point(edge)}, Interval.point(e2e.value)) == ()


def test_above_end_to_end_the_conversions_each_part_pays_alone_are_named():
    """A float16 graph's parts, or any at ONNX Runtime's level ``all``, pay casts or layout reorders at
    their edges that the whole pays once per region: where their units left some out of their kernel
    time, that is the reason given, with how much."""
    e2e = Interval(20.1, 19.7, 20.5)
    (above,) = composition_departures({1: Interval(25.3, 25.0, 25.5)}, e2e, left_out_ms=4.25)
    assert "each part alone converts at its edges what the whole converts once per region (4.250 ms" in above
    assert "timed colder" not in above
    (plain,) = composition_departures({1: Interval(25.3, 25.0, 25.5)}, e2e)
    assert "timed colder" in plain and "converts" not in plain


def test_the_conversions_left_out_are_summed_over_the_units(branching, all_results):
    records = dict(all_results)
    unit = branching.unit_keys[0]
    records[unit] = dataclasses.replace(
        records[unit], settings={**records[unit].settings, "kernel_time": {"left_out_median_s": 0.0015}}
    )
    assert bound(branching, records).units_left_out_ms == pytest.approx(1.5 * branching.unit_keys.count(unit))
    assert bound(branching, all_results).units_left_out_ms is None


def test_below_end_to_end_the_kernels_say_whether_they_ran_slower_inside_the_model():
    """The whole's profiled kernel time against its units': slower inside (caches, a slower state), or alike
    (the time goes between the kernels: the framework's work per node, thread wake-ups)."""
    e2e, composed = Interval(0.733, 0.718, 0.749), {1: Interval(0.335, 0.332, 0.337)}
    units = Interval(0.257, 0.253, 0.261)
    (slower,) = composition_departures(composed, e2e, Interval(0.584, 0.570, 0.598), units)
    assert "its kernels ran 2.27x slower inside the model than alone" in slower
    assert "(profiled kernel time of the whole 0.584 ms, of its units 0.257 ms)" in slower
    (alike,) = composition_departures(composed, e2e, Interval(0.259, 0.250, 0.268), units)
    assert "its kernels ran no slower inside the model than alone" in alike and "between them" in alike
    # apart by their values, within the noise of both (one short profiled sample widened the whole's: OWLv2 said
    # "no slower" at 1.47x)
    (noisy,) = composition_departures(composed, e2e, Interval(0.378, 0.039, 0.700), units)
    assert "its kernels ran 1.47x as long inside the model as alone, within the noise of both" in noisy
    assert "no slower" not in noisy and "not known to be slower there" in noisy


def test_the_lower_bound_says_which_compositions_are_no_estimate(branching, all_results):
    lb = bound(branching, all_results)  # 0.46 and 0.48 ms composed against a 50 ms end to end
    (note,) = lb.departures
    assert note.startswith("composed G=1 0.460 ms") and "G=2 0.480 ms" in note and "below end to end 50.000 ms" in note
    assert "its kernels ran 4.71x slower inside the model than alone" in note  # 40 ms profiled whole, 8.5 ms units
    assert lb.to_dict()["departures"] == [note]

    def close_to_whole(spec):  # the model as the sum of its parts' calls, less the overheads
        return 0.00046 if spec.kind is SpecKind.MODEL else call_seconds(spec)

    assert bound(branching, fake_records(branching, close_to_whole, kernel_seconds)).departures == ()


def test_a_whole_model_run_that_failed_says_why_its_figure_is_empty(branching):
    """A text-to-speech model whose output length changes per call had no end to end and nothing said why."""
    records = fake_records(branching, call_seconds, lambda spec: 1e-5)
    e2e = records[branching.model_key]
    records[branching.model_key] = dataclasses.replace(
        e2e, outcome=Outcome.FAILED, reason="Fail: output OrtValue has shape {1,848}, the run computed {1,1440}"
    )
    row = lower_bound(branching, records, system=SYSTEM, stack_id=STACK, runtime="null", variant="")
    assert row.e2e_ms is None and row.sequential_ms is not None
    assert row.whole_model_notes == (
        "its end to end failed: Fail: output OrtValue has shape {1,848}, the run computed {1,1440}",
    )
    assert row.to_dict()["whole_model_notes"] == list(row.whole_model_notes)
    assert bound(branching, fake_records(branching, call_seconds, lambda spec: 1e-5)).whole_model_notes == ()
