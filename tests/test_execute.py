"""Running specs into the store: every outcome a record, incremental runs, failures kept as data."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from benanza.bench import host_cpu
from benanza.bench.execute import (
    effective_settings,
    group_chunks,
    interleave_max_specs,
    run_interleaved,
    run_spec,
    run_specs,
    spec_memory_bytes,
    without_profiler_overhead,
)
from benanza.bench.generate import plan_model, specs_for_plan
from benanza.bench.harness import HarnessSettings
from benanza.bench.memory import ACTIVATION_COPIES, WEIGHT_COPIES, network_memory
from benanza.bench.spec import BenchmarkSpec, SpecKind
from benanza.local import bench, measurer_for, open_local, plan_models, specs_for
from benanza.model.network import InputRef, Network, NetworkNode, NetworkOutput, NetworkTensor, RefKind
from benanza.runtimes.null import NullPrepared, NullRuntime
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU
from benanza.settings import load_settings
from benanza.store import Outcome, open_store

SYSTEM = "test-system"
STACK = "stack-under-test"


@pytest.fixture(scope="module")
def runtime():
    return OnnxRuntimeCPU(threads=1)


@pytest.fixture(scope="module")
def chain_specs(conv_chain, process_proto, runtime):
    plan = plan_model(process_proto(conv_chain("reshape")), runtime, (1, 2))
    return specs_for_plan(plan, runtime.name, runtime.variant())


@pytest.fixture
def store(tmp_path):
    with open_store(f"sqlite:///{tmp_path / 'results.db'}") as s:
        yield s


def model_file(tmp_path, conv_chain, tail: str):
    path = tmp_path / f"chain_{tail}.onnx"
    path.write_bytes(conv_chain(tail).SerializeToString())
    return path


# -- one spec ------------------------------------------------------------------------------------


def test_run_spec_records_samples_kernel_times_and_provenance(chain_specs, runtime, fast_harness):
    group = next(s for s in chain_specs if s.kind is SpecKind.GROUP)
    record = run_spec(group, runtime, fast_harness, system=SYSTEM, stack_id=STACK, host="bench-host")
    assert record.outcome is Outcome.OK and record.reason is None
    assert (record.spec_id, record.key, record.kind) == (group.spec_id, group.key, "group")
    assert record.variant == "ep=cpu,opt=extended,threads=1"
    assert (record.system, record.stack_id, record.host) == (SYSTEM, STACK, "bench-host")
    assert record.samples and all(s > 0 for s in record.samples)
    assert record.stats.n == len(record.samples)
    assert record.stats.stopped_by in ("noise", "time_cap", "max_samples")
    assert len(record.kernel_samples) == fast_harness.kernel_runs
    assert record.kernel_stats.n == fast_harness.kernel_runs
    kernel_time = record.settings.pop("kernel_time")
    assert record.settings == {"runtime": runtime.variant(), "harness": fast_harness.model_dump()}
    # the profiler's cost taken out: every kernel time at most the unprofiled call latency
    assert 0 < kernel_time["scale_median"] <= 1 and kernel_time["raw_median_s"] > 0
    assert kernel_time["node_floor_s"] > 0  # and each node's span less what a no-op node spans
    assert max(record.kernel_samples) <= record.stats.median
    assert BenchmarkSpec.from_dict(record.spec).spec_id == group.spec_id
    assert record.duration_s > 0
    assert _stored_keys(record) == _previous_keys("onnxruntime")  # readable by the code before typed stats


# records written before the statistics were typed (tests/test_records.py)
PINNED = json.loads((Path(__file__).parent / "data" / "records_80e1d22.json").read_text())


def _previous_keys(name: str) -> tuple[list[str], list[str]]:
    """The pinned keys, and the newer provenance a CPU measurement stores after them (other_cores,
    where the host's CPU time can be read: conftest makes it unreadable outside test_interference)."""
    newer = ["other_cores"] if host_cpu.host_busy_s() is not None else []
    return [*PINNED[name]["stats"], *newer], list(PINNED[name]["kernel_stats"])


def _stored_keys(record) -> tuple[list[str], list[str]]:
    """The keys of the record's stored statistics (``disturbed_reason`` only where it was disturbed)."""
    stats = record.to_doc()["stats"]
    if "disturbed_reason" in stats:
        assert (
            stats["disturbed"] is True and list(stats).index("disturbed_reason") == list(stats).index("disturbed") + 1
        )
    return [k for k in stats if k != "disturbed_reason"], list(record.to_doc()["kernel_stats"])


def test_profiler_overhead_is_taken_out_run_by_run_and_never_added():
    # runs profiled at 10 and 20 us, the unprofiled call takes 8 us: scales 0.8 and 0.4
    kernel, how = without_profiler_overhead([6e-6, 6e-6], [10e-6, 20e-6], 8e-6)
    assert kernel == pytest.approx((4.8e-6, 2.4e-6))
    assert how["raw_median_s"] == pytest.approx(6e-6) and how["scale_median"] == pytest.approx(0.6)
    # a profiled run faster than the call (noise) scales by 1, not more
    assert without_profiler_overhead([5e-6], [4e-6], 8e-6)[0] == (5e-6,)
    # a runtime that reports no run times, or mismatched ones, keeps its kernel times
    assert without_profiler_overhead([5e-6], None, 8e-6) == ((5e-6,), None)
    assert without_profiler_overhead([5e-6, 1e-6], [9e-6], 8e-6) == ((5e-6, 1e-6), None)


def test_no_kernel_runs_no_kernel_times(chain_specs, runtime, fast_harness):
    settings = fast_harness.model_copy(update={"kernel_runs": 0})
    record = run_spec(chain_specs[0], runtime, settings, system=SYSTEM, stack_id=STACK)
    assert record.outcome is Outcome.OK
    assert record.kernel_samples == () and record.kernel_stats is None


def with_group(network: Network, group: int) -> Network:
    """``network`` with its first node's ``group`` attribute set to ``group`` (a new value)."""
    node = network.nodes[0]
    attributes = tuple((k, group if k == "group" else v) for k, v in node.attributes)
    return dataclasses.replace(network, nodes=(dataclasses.replace(node, attributes=attributes), *network.nodes[1:]))


def test_an_impossible_network_is_a_failed_record(chain_specs, runtime, fast_harness):
    conv = next(s for s in chain_specs if s.kind is SpecKind.LAYER and s.label.startswith("Conv"))
    network = with_group(conv.network, 5)  # 3 input channels cannot split into 5 groups
    broken = dataclasses.replace(conv, key="broken-conv-key", network=network)
    record = run_spec(broken, runtime, fast_harness, system=SYSTEM, stack_id=STACK)
    assert record.outcome is Outcome.FAILED
    # ONNX Runtime's own message, on one line (a bound run reports it as a RuntimeError, session.run as Fail)
    assert "Conv" in record.reason and "group" in record.reason and "\n" not in record.reason
    assert record.samples == () and record.stats is None
    assert conv.network.nodes[0].attrs["group"] == 1  # the original is untouched


def test_a_missing_model_file_is_a_skipped_record(runtime, fast_harness, tmp_path):
    missing = tmp_path / "not_here.onnx"
    spec = BenchmarkSpec(SpecKind.MODEL, "m" * 16, 1, "float32", "onnxruntime", model={"path": str(missing)})
    record = run_spec(spec, runtime, fast_harness, system=SYSTEM, stack_id=STACK)
    assert record.outcome is Outcome.SKIPPED
    assert str(missing) in record.reason


# -- many specs into a store -------------------------------------------------------------------


def test_failures_are_stored_and_the_rest_still_measured(chain_specs, runtime, fast_harness, store, tmp_path):
    conv = next(s for s in chain_specs if s.kind is SpecKind.LAYER and s.label.startswith("Conv"))
    network = with_group(conv.network, 5)
    broken = dataclasses.replace(conv, key="broken-conv-key", label="broken Conv", network=network)
    missing_model = BenchmarkSpec(
        SpecKind.MODEL, "m" * 16, 1, "float32", "onnxruntime", label="gone", model={"path": str(tmp_path / "x.onnx")}
    )
    specs = [broken, *chain_specs, missing_model]
    summary = run_specs(specs, runtime, store, fast_harness, system=SYSTEM, stack_id=STACK, batch=3)
    assert summary.to_dict() == {"measured": len(chain_specs), "reused": 0, "failed": 1, "skipped": 1, "deferred": 0}
    by_id = {r.spec_id: r for r in store.records(system=SYSTEM, stack_id=STACK)}
    assert set(by_id) == {s.spec_id for s in specs}
    assert by_id[broken.spec_id].outcome is Outcome.FAILED and by_id[broken.spec_id].reason
    assert by_id[missing_model.spec_id].outcome is Outcome.SKIPPED
    assert "x.onnx" in by_id[missing_model.spec_id].reason
    assert all(by_id[s.spec_id].outcome is Outcome.OK for s in chain_specs)
    assert [r.spec_id for r in summary.records] == [s.spec_id for s in specs]


class _FlakyRuntime(NullRuntime):
    """The null runtime, except that chosen keys raise in prepare, call or kernel_times."""

    def __init__(self, fail: dict[str, str]) -> None:
        self.fail = fail

    def prepare(self, spec):
        where = self.fail.get(spec.key)
        if where == "prepare":
            raise RuntimeError("cannot prepare\nsecond line of a long error")
        return _FlakyPrepared(where)


class _FlakyPrepared(NullPrepared):
    __slots__ = ("where",)

    def __init__(self, where):
        self.where = where

    def call(self):
        if self.where == "call":
            raise MemoryError("out of memory")

    def kernel_times(self, runs, evict_bytes=0):
        if self.where == "kernel":
            raise ValueError("profile unreadable")
        return [1e-6] * runs


def _null_specs(n: int) -> list[BenchmarkSpec]:
    return [BenchmarkSpec(SpecKind.LAYER, f"key{i:013d}", 1, "float32", "null", label=f"layer {i}") for i in range(n)]


def test_faults_in_any_phase_lose_nothing(store, fast_harness):
    specs = _null_specs(7)
    faults = {specs[1].key: "prepare", specs[3].key: "call", specs[5].key: "kernel"}
    seen = []
    summary = run_specs(
        specs,
        _FlakyRuntime(faults),
        store,
        fast_harness,
        system=SYSTEM,
        stack_id=STACK,
        batch=2,
        progress=lambda spec, record: seen.append((spec.key, record.outcome)),
    )
    assert summary.to_dict() == {"measured": 4, "reused": 0, "failed": 3, "skipped": 0, "deferred": 0}
    assert [key for key, _ in seen] == [s.key for s in specs]
    stored = {r.key: r for r in store.records(system=SYSTEM, stack_id=STACK)}
    assert set(stored) == {s.key for s in specs}
    assert stored[specs[1].key].reason == "RuntimeError: cannot prepare"
    assert stored[specs[3].key].reason == "MemoryError: out of memory"
    assert stored[specs[5].key].reason == "ValueError: profile unreadable"
    assert stored[specs[0].key].kernel_samples == (1e-6,) * fast_harness.kernel_runs


def test_retry_failed_measures_only_the_failures_again(store, fast_harness):
    specs = _null_specs(5)
    faults = {specs[0].key: "prepare", specs[2].key: "call"}
    run_specs(specs, _FlakyRuntime(faults), store, fast_harness, system=SYSTEM, stack_id=STACK)
    again = run_specs(specs, _FlakyRuntime({}), store, fast_harness, system=SYSTEM, stack_id=STACK)
    assert again.to_dict() == {"measured": 0, "reused": 5, "failed": 0, "skipped": 0, "deferred": 0}
    assert again.reused_failed == 2  # the summary's line says them: "failed 0" alone hid them
    retried = run_specs(specs, _FlakyRuntime({}), store, fast_harness, system=SYSTEM, stack_id=STACK, retry_failed=True)
    assert retried.to_dict() == {"measured": 2, "reused": 3, "failed": 0, "skipped": 0, "deferred": 0}
    assert retried.reused_failed == 0
    assert {r.outcome for r in store.records(system=SYSTEM, stack_id=STACK)} == {Outcome.OK}
    assert len(store.records(system=SYSTEM, stack_id=STACK)) == 5


def test_results_are_per_system_and_stack(store, fast_harness):
    specs = _null_specs(3)
    run_specs(specs, NullRuntime(), store, fast_harness, system=SYSTEM, stack_id=STACK)
    other = run_specs(specs, NullRuntime(), store, fast_harness, system=SYSTEM, stack_id="new-stack")
    assert other.to_dict() == {"measured": 3, "reused": 0, "failed": 0, "skipped": 0, "deferred": 0}


# -- interleaved groups ----------------------------------------------------------------------------


def test_interleaved_group_records_like_one_by_one(chain_specs, runtime, fast_harness):
    settings = fast_harness.model_copy(update={"schedule": "interleaved"})
    records = run_interleaved(chain_specs, runtime, settings, system=SYSTEM, stack_id=STACK, host="h")
    assert [r.spec_id for r in records] == [s.spec_id for s in chain_specs]
    assert {r.kind for r in records} == {"layer", "group", "sequence"}
    for record in records:
        assert record.outcome is Outcome.OK
        assert record.stats.n == len(record.samples) >= settings.min_samples
        assert record.settings["harness"]["schedule"] == "interleaved"
        assert record.host == "h" and record.duration_s > 0
        assert 0 < record.stats.spent_s < record.duration_s  # its own share of the group's time
        if record.kind == "sequence":  # composed from its call latency alone: no profiler, no kernel time
            assert (record.kernel_samples, record.kernel_stats) == ((), None)
            assert "kernel_time" not in record.settings
            continue
        assert settings.kernel_runs <= len(record.kernel_samples) <= 2 * settings.kernel_runs  # spread over the rounds
        assert 0 < record.settings["kernel_time"]["scale_median"] <= 1  # profiler cost taken out
        assert _stored_keys(record) == _previous_keys("onnxruntime_interleaved")
    assert len({r.stats.n for r in records}) == 1  # one sample of each per round


def test_a_group_of_sequences_alone_is_not_held_for_kernel_runs(chain_specs, runtime, fast_harness):
    """Nothing reads a DLBricks sequence's kernel time: a group of sequences alone takes no profiled run,
    and its rounds stop when its samples settle, not after ``kernel_runs`` companion runs."""
    sequences = [s for s in chain_specs if s.kind is SpecKind.SEQUENCE]
    assert sequences
    settings = fast_harness.model_copy(
        update={
            "schedule": "interleaved",
            "min_samples": 3,
            "min_time_s": 0.0,
            "kernel_runs": 40,
            "target_rel_stderr": 1.0,
        }
    )
    records = run_interleaved(sequences, runtime, settings, system=SYSTEM, stack_id=STACK)
    for record in records:
        assert record.outcome is Outcome.OK and record.stats.stopped_by == "noise"
        assert record.kernel_samples == () and record.stats.n < settings.kernel_runs
    one = run_spec(
        sequences[0], runtime, settings.model_copy(update={"schedule": "sequential"}), system=SYSTEM, stack_id=STACK
    )
    assert one.outcome is Outcome.OK and one.kernel_samples == () and "kernel_time" not in one.settings


def test_interleaved_faults_lose_nothing(store, fast_harness):
    specs = _null_specs(7)
    faults = {specs[1].key: "prepare", specs[3].key: "call", specs[5].key: "kernel"}
    settings = fast_harness.model_copy(update={"schedule": "interleaved"})
    summary = run_specs(
        specs, _FlakyRuntime(faults), store, settings, system=SYSTEM, stack_id=STACK, groups=[specs[:4], specs[2:]]
    )
    assert summary.to_dict() == {"measured": 4, "reused": 0, "failed": 3, "skipped": 0, "deferred": 0}
    stored = {r.key: r for r in store.records(system=SYSTEM, stack_id=STACK)}
    assert stored[specs[1].key].reason == "RuntimeError: cannot prepare"
    assert stored[specs[3].key].reason == "MemoryError: out of memory"
    assert stored[specs[5].key].reason == "ValueError: profile unreadable"
    assert stored[specs[0].key].kernel_samples == (1e-6,) * fast_harness.kernel_runs  # kernel_times fallback
    again = run_specs(specs, NullRuntime(), store, settings, system=SYSTEM, stack_id=STACK, retry_failed=True)
    assert again.to_dict() == {"measured": 3, "reused": 4, "failed": 0, "skipped": 0, "deferred": 0}


def test_a_packed_int4_weight_counts_the_bytes_it_is_stored_in():
    """A 4-bit weight takes half a byte an element (two to a byte, as ONNX and ONNX Runtime hold it),
    not the byte a numpy element of it would: the guard counted int4 models' weights twice over."""
    out = NetworkTensor((64, 63), "float32")
    dequantize = NetworkNode(
        "DequantizeLinear",
        "",
        21,
        (),
        (InputRef.weight((64, 63), "int4"), InputRef.weight((), "float32")),
        (out,),
        layer_key="dq",
    )
    memory = network_memory(Network((), (dequantize,), (NetworkOutput(0, 0),), 1))
    assert memory.weights == 64 * 63 // 2 + 4  # 2016 bytes of packed int4, one float scale
    assert memory.activations == 64 * 63 * 4


def test_groups_are_cut_to_the_memory_budget(chain_specs):
    conv = next(s for s in chain_specs if s.kind is SpecKind.LAYER and s.label.startswith("Conv"))
    node = conv.network.nodes[0]
    weights = sum(4 * int(np.prod(ref.shape)) for ref in node.inputs if ref.kind is RefKind.WEIGHT)
    inputs = sum(4 * int(np.prod(t.shape)) for t in conv.network.inputs)
    output = sum(4 * int(np.prod(t.shape)) for t in node.outputs)
    expected = weights * WEIGHT_COPIES + inputs + output * ACTIVATION_COPIES  # copies ORT holds of each
    assert weights > 0 and spec_memory_bytes(conv) == expected
    sizes = [spec_memory_bytes(s) for s in chain_specs]
    chunks = list(group_chunks(chain_specs, budget=max(sizes)))
    assert [s for chunk in chunks for s in chunk] == list(chain_specs)
    assert all(sum(map(spec_memory_bytes, c)) <= max(sizes) for c in chunks)
    assert len(chunks) > 1
    assert [len(c) for c in group_chunks(chain_specs, budget=0)] == [1] * len(chain_specs)


def test_groups_are_cut_to_the_live_session_bound(chain_specs):
    chunks = list(group_chunks(chain_specs, budget=1 << 40, max_specs=2))
    assert [s for chunk in chunks for s in chunk] == list(chain_specs)
    assert [len(c) for c in chunks[:-1]] == [2] * (len(chunks) - 1) and 1 <= len(chunks[-1]) <= 2
    # two sessions per benchmark when kernel times are taken (the profiling one), else one
    assert interleave_max_specs(HarnessSettings()) == 512
    assert interleave_max_specs(HarnessSettings(kernel_runs=0)) == 1024
    assert interleave_max_specs(HarnessSettings(interleave_max_sessions=1)) == 1


def test_interleaved_local_pipeline_is_incremental(tmp_path, conv_chain, fast_harness):
    path = model_file(tmp_path, conv_chain, "reshape")
    settings = fast_harness.model_copy(update={"schedule": "interleaved"})
    ctx = open_local(f"sqlite:///{tmp_path / 'i.db'}", "onnxruntime", {"threads": 1}, system=SYSTEM, settings=settings)
    try:
        plans = plan_models([path], ctx.runtime, granularities=(1, 2))
        model_spec = next(s for s in specs_for(ctx, plans, e2e=True) if s.kind is SpecKind.MODEL)
        assert model_spec.model["weight_bytes"] > 0
        first = bench(ctx, plans, e2e=True)
        assert first.failed == first.skipped == 0 and first.measured == len(specs_for(ctx, plans, e2e=True))
        assert len({r.stats.n for r in first.records}) == 1  # the model and its units in the same rounds
        assert bench(ctx, plans, e2e=True).to_dict()["measured"] == 0
    finally:
        ctx.close()


# -- the local pipeline, incrementally -------------------------------------------------------------


def test_incremental_runs_measure_only_what_is_new(tmp_path, conv_chain, fast_harness):
    first, second = model_file(tmp_path, conv_chain, "reshape"), model_file(tmp_path, conv_chain, "maxpool")
    ctx = open_local(
        f"sqlite:///{tmp_path / 'bench.db'}", "onnxruntime", {"threads": 1}, system=SYSTEM, settings=fast_harness
    )
    try:
        plans_a = plan_models([first], ctx.runtime, granularities=(1, 2))
        ids_a = {s.spec_id for s in specs_for(ctx, plans_a, e2e=True)}
        run1 = bench(ctx, plans_a, e2e=True)
        assert run1.to_dict() == {"measured": len(ids_a), "reused": 0, "failed": 0, "skipped": 0, "deferred": 0}
        assert ctx.store.present_spec_ids(ctx.system, ctx.stack_id) == ids_a

        run2 = bench(ctx, plan_models([first], ctx.runtime, granularities=(1, 2)), e2e=True)
        assert run2.to_dict() == {"measured": 0, "reused": len(ids_a), "failed": 0, "skipped": 0, "deferred": 0}

        plans_ab = plan_models([first, second], ctx.runtime, granularities=(1, 2))
        ids_b = {s.spec_id for s in specs_for(ctx, plans_ab[1:], e2e=True)}
        new = ids_b - ids_a
        # Conv, BN, Relu, Conv, the fused group, Conv+BN+Relu->Conv
        assert len(ids_b & ids_a) == 6
        # the MaxPool layer (also B's last G=2 sequence), B's call overhead, B end to end and at ORT's default level
        assert len(new) == 4
        run3 = bench(ctx, plans_ab, e2e=True)
        assert run3.to_dict() == {"measured": len(new), "reused": len(ids_a), "failed": 0, "skipped": 0, "deferred": 0}
        assert {r.spec_id for r in run3.records} == new
        assert ctx.store.present_spec_ids(ctx.system, ctx.stack_id) == ids_a | ids_b
    finally:
        ctx.close()


def test_a_measurer_kept_across_bench_calls_judges_every_model_against_one_host_reference(
    tmp_path, conv_chain, fast_harness
):
    """A model at a time through ``bench`` with ``measurer_for``: each call's group adds to the
    one reference of the host (a measurer a call would start each afresh)."""
    first, second = model_file(tmp_path, conv_chain, "reshape"), model_file(tmp_path, conv_chain, "maxpool")
    settings = fast_harness.model_copy(update={"schedule": "interleaved", "reference_call": True})
    ctx = open_local(f"sqlite:///{tmp_path / 'k.db'}", "onnxruntime", {"threads": 1}, system=SYSTEM, settings=settings)
    try:
        plans = plan_models([first, second], ctx.runtime)
        with measurer_for(ctx) as measurer:
            runs = [bench(ctx, [plan], e2e=True, measurer=measurer) for plan in plans]
            assert measurer.reference is not None and len(measurer.reference.figures) == 2
        assert [r.failed for r in runs] == [0, 0] and all(r.measured for r in runs)
        stored = ctx.store.present_spec_ids(ctx.system, ctx.stack_id)
        assert {s.spec_id for s in specs_for(ctx, plans, e2e=True)} <= stored
    finally:
        ctx.close()


def test_the_default_schedule_is_interleaved_at_any_thread_count(tmp_path, conv_chain, fast_harness):
    # the default, not asked for: a model's parts and whole sampled in rounds with 2-thread sessions
    assert HarnessSettings().schedule == "interleaved"
    assert load_settings({"BENANZA_HARNESS_SCHEDULE": "sequential"}).harness_settings().schedule == "sequential"
    path = model_file(tmp_path, conv_chain, "reshape")
    settings = fast_harness.model_copy(update={"schedule": "interleaved"})
    ctx = open_local(f"sqlite:///{tmp_path / 't.db'}", "onnxruntime", {"threads": 2}, system=SYSTEM, settings=settings)
    try:
        assert ctx.runtime.interleaves is True
        plans = plan_models([path], ctx.runtime, granularities=(1,))
        summary = bench(ctx, plans, e2e=True)
        assert summary.failed == 0 and summary.measured == len(specs_for(ctx, plans, e2e=True))
        assert {r.settings["harness"]["schedule"] for r in summary.records} == {"interleaved"}
        assert {r.settings["runtime"]["threads"] for r in summary.records} == {2}
    finally:
        ctx.close()


def test_every_onnxruntime_session_keeps_its_idle_pool_from_spinning(conv_chain, process_proto):
    runtime = OnnxRuntimeCPU(threads=2)
    plan = plan_model(process_proto(conv_chain("reshape")), runtime, (1,))
    spec = next(s for s in specs_for_plan(plan, runtime.name, runtime.variant()) if s.label.startswith("Conv"))
    prepared = runtime.prepare(spec)
    profiler = prepared.profiler()
    try:
        for session in (prepared._session, profiler._session):
            options = session.get_session_options()
            assert options.intra_op_num_threads == 2
            assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
            assert options.get_session_config_entry("session.force_spinning_stop") == "1"
    finally:
        profiler.close()
        prepared.close()


class _Sequential(NullRuntime):
    interleaves = False


def test_a_runtime_that_cannot_interleave_falls_back_and_warns_only_when_asked(caplog):
    runtime = _Sequential()
    with caplog.at_level("INFO"):
        assert effective_settings(runtime, HarnessSettings()).schedule == "sequential"
    assert [r.levelname for r in caplog.records] == ["INFO"]
    caplog.clear()
    with caplog.at_level("INFO"):
        assert effective_settings(runtime, HarnessSettings(schedule="interleaved")).schedule == "sequential"
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "cannot be measured interleaved" in caplog.text


def test_a_group_holding_a_whole_model_samples_it_min_samples_times_past_the_time_cap(zoo_model, fast_harness) -> None:
    """A real ONNX Runtime model measured alone, its cap shorter than its warm-up: min_samples rounds still."""
    runtime = OnnxRuntimeCPU(threads=1)
    plan = plan_model(zoo_model("squeezenet"), runtime, ())
    (model,) = [s for s in specs_for_plan(plan, runtime.name, runtime.variant(), e2e=True) if s.kind is SpecKind.MODEL]
    never_settled = {"min_samples": 6, "max_time_s": 0.001, "kernel_runs": 0, "target_rel_stderr": 1e-9}
    s = fast_harness.model_copy(update=never_settled)
    (record,) = run_interleaved([model], runtime, s, system=SYSTEM, stack_id=STACK)
    assert record.outcome == "ok" and record.stats.stopped_by == "time_cap" and len(record.samples) == 6


def test_a_whole_model_measured_alone_takes_min_samples_past_the_time_cap(zoo_model, fast_harness) -> None:
    """The sequential schedule too: SqueezeNet whole, its cap shorter than its warm-up."""
    runtime = OnnxRuntimeCPU(threads=1)
    plan = plan_model(zoo_model("squeezenet"), runtime, ())
    (model,) = [s for s in specs_for_plan(plan, runtime.name, runtime.variant(), e2e=True) if s.kind is SpecKind.MODEL]
    never_settled = {"min_samples": 6, "max_time_s": 0.001, "kernel_runs": 0, "target_rel_stderr": 1e-9}
    record = run_spec(model, runtime, fast_harness.model_copy(update=never_settled), system=SYSTEM, stack_id=STACK)
    assert record.outcome == "ok" and record.stats.stopped_by == "time_cap" and len(record.samples) == 6
