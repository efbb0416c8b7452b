"""The host's reference call (issue 16): a slow period of the host that covers a whole group.

First the verdict on figures; then real ONNX Runtime benchmarks measured by a ``Measurer`` on a
host whose speed the test sets: every call prepared during the slow period, the reference
call's too, takes its own time again on top (a spin), as when a neighbouring VM or a clock drop
slows the whole host for the length of one group. The group's own checks cannot see it (its
rounds are evenly slow, and nothing else runs); the reference call, compared across groups, does.
"""

from __future__ import annotations

import time

import pytest

from benanza.bench.contract import KernelProfiler, Prepared
from benanza.bench.execute import Measurer, run_specs
from benanza.bench.generate import plan_model, specs_for_plan
from benanza.bench.harness import HarnessSettings
from benanza.bench.reference import REFERENCE_KEY, HostReference, reference_spec
from benanza.bench.spec import BenchmarkSpec
from benanza.bench.stats import Interval
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU
from benanza.store import Outcome, open_store

SYSTEM, STACK = "vm", "stack"
# A shared 2-core VM's own speed swung 2x within a minute (benchmarks/reference_tracking.py): the injected
# period is slower than that, and the verdict's step larger than it, so that only the injected one is found.
SLOW_FACTOR = 4
US = 1e-6


def figure(value_us: float, half_us: float = 0.2) -> Interval:
    return Interval(value_us * US, (value_us - half_us) * US, (value_us + half_us) * US)


# -- the verdict ----------------------------------------------------------------------------------


def test_a_group_slower_than_the_run_beyond_the_step_and_the_noise_is_slow() -> None:
    ref = HostReference(step=0.10)
    assert ref.verdict(figure(10.0)) is None  # nothing to compare with yet
    for value in (10.0, 10.3, 9.9):
        ref.add(figure(value))
    assert ref.run_figure() == figure(10.0)  # the median group's
    reason = ref.verdict(figure(13.0))
    assert reason is not None and "+30% over the run's 10.0 us" in reason
    assert ref.verdict(figure(10.9)) is None  # 9%: under the step
    assert ref.verdict(figure(12.0, half_us=1.9)) is None  # 20% but within the noise of both
    assert ref.verdict(figure(7.0)) is None  # faster is not a slow period
    assert ref.verdict(None) is None  # a reference that gave no figure judges nothing


def test_groups_measured_before_the_run_settled_are_found_afterwards() -> None:
    ref = HostReference(step=0.10)
    for value in (14.0, 10.1, 10.0, 9.8, 10.2):  # the first group in a slow period: nothing to compare with then
        ref.add(figure(value))
    assert ref.slow_groups() == [0]
    ref.replace(0, figure(10.1))  # measured again
    assert ref.slow_groups() == []
    assert len(ref.figures) == 5


def test_the_reference_is_a_convolution_and_never_a_layer_key() -> None:
    spec = reference_spec("onnxruntime", (("threads", 1),))
    assert spec.network is not None and spec.network.nodes[0].op_type == "Conv"
    assert spec.network.inputs[0].shape == (1, 64, 28, 28) and spec.key == REFERENCE_KEY
    assert len(REFERENCE_KEY) != 16  # layer keys are 16 hex digits


# -- on real ONNX Runtime benchmarks --------------------------------------------------------------


class _Host:
    """Whether the host is in a slow period now (each call ``SLOW_FACTOR`` times as long), and how many
    benchmarks were prepared."""

    def __init__(self) -> None:
        self.slow = False
        self.prepared = 0


class _Slowed(Prepared):
    def __init__(self, inner: Prepared, host: _Host) -> None:
        self.inner, self.host = inner, host

    def call(self) -> object:
        start = time.perf_counter()
        out = self.inner.call()
        if self.host.slow:  # the host at a quarter of its speed: the call's own time three times again
            end = start + SLOW_FACTOR * (time.perf_counter() - start)
            while time.perf_counter() < end:
                pass
        return out

    def profiler(self, precalls: int = 0, evict_bytes: int = 0) -> KernelProfiler | None:
        return None

    def close(self) -> None:
        self.inner.close()


class _SlowableRuntime(OnnxRuntimeCPU):
    """The real CPU runtime at one thread, on a host the test slows down."""

    def __init__(self, host: _Host) -> None:
        super().__init__(threads=1)
        self.host = host

    def prepare(self, spec: BenchmarkSpec) -> Prepared:
        self.host.prepared += 1
        return _Slowed(super().prepare(spec), self.host)


def _ends_after_first_slow_verdict(reference: HostReference, host: _Host) -> None:
    """The slow period ends as soon as the reference has found a group slow once (its first rounds)."""
    verdict = reference.verdict

    def once(figure, without=None):
        reason = verdict(figure, without=without)
        if reason is not None:
            host.slow = False
        return reason

    reference.verdict = once  # type: ignore[method-assign]


@pytest.fixture(scope="module")
def model_groups(conv_chain, process_proto) -> list[list[BenchmarkSpec]]:
    """Three models' specs (each its own interleaved group)."""
    runtime = OnnxRuntimeCPU(threads=1)
    groups = []
    for channels in (4, 5, 6):
        plan = plan_model(process_proto(conv_chain("maxpool", channels=channels)), runtime, (1,))
        groups.append(specs_for_plan(plan, runtime.name, runtime.variant()))
    return groups


SETTINGS = HarnessSettings(
    warmup_runs=2,
    min_samples=40,
    max_samples=400,
    min_time_s=0.02,
    max_time_s=1.0,
    min_sample_time_s=0.0002,
    kernel_runs=0,
    schedule="interleaved",
    min_cpu_share=0.0,  # the other checks off: only the reference can find a period covering the group
    max_other_cores=64.0,
    disturbance_step=10.0,
    reference_step=1.0,
    disturbance_retries=1,
)


def _reference_of(records) -> list[dict]:
    return [r.settings["host_reference"] for r in records]


def test_a_group_in_a_slow_period_is_sampled_again_then_marked(model_groups) -> None:
    host = _Host()
    with Measurer(_SlowableRuntime(host), SETTINGS, system=SYSTEM, stack_id=STACK, admit=False) as measurer:
        quiet = [r for g in model_groups[:2] for _, r, _ in measurer.measure(g)]
        before = host.prepared
        host.slow = True  # the slow period lasts past the group's second rounds
        slow = [r for _, r, _ in measurer.measure(model_groups[2])]
    # sampled twice with the sessions it had: prepared once, with its reference call
    assert host.prepared - before == len(model_groups[2]) + 1
    assert len(slow) == len(model_groups[2])  # one record per spec, the last rounds'
    assert all(r.outcome is Outcome.OK for r in quiet + slow)
    assert not any(r.stats.disturbed for r in quiet)
    for record, ref in zip(slow, _reference_of(slow), strict=True):
        assert record.stats.disturbed and record.stats.remeasured == 1
        assert record.stats.disturbed_reason.startswith("the host ran slower while this group was measured")
        assert ref["remeasured"] == 1 and ref["call_s"] > 2 * ref["run_s"]
    assert {r["call_s"] for r in _reference_of(slow)} == {_reference_of(slow)[0]["call_s"]}  # the group's one figure


@pytest.mark.parametrize(
    "budget",
    [
        {},  # the default: the reserve pays for it
        {"remeasure_share": 10.0, "remeasure_reserve_s": 0.0},  # no reserve: the quiet groups' time earns it
    ],
    ids=["reserve", "earned"],
)
def test_a_slow_period_that_ends_leaves_the_group_sampled_again_and_unmarked(model_groups, budget) -> None:
    host = _Host()
    settings = SETTINGS.model_copy(update=budget)
    with Measurer(_SlowableRuntime(host), settings, system=SYSTEM, stack_id=STACK, admit=False) as measurer:
        for group in model_groups[:2]:
            list(measurer.measure(group))
        before = host.prepared
        _ends_after_first_slow_verdict(measurer.reference, host)
        host.slow = True  # the group's first rounds only
        records = [r for _, r, _ in measurer.measure(model_groups[2])]
    assert host.prepared - before == len(model_groups[2]) + 1  # not prepared again
    assert not any(r.stats.disturbed for r in records)
    assert {r["remeasured"] for r in _reference_of(records)} == {1}
    assert {r.stats.remeasured for r in records} == {1}
    spent = measurer.remeasures
    assert spent.taken == 1 and spent.declined == 0 and 0 < spent.spent_s <= spent.earned_s


def test_a_first_group_in_a_slow_period_is_found_at_the_end_and_replaced(model_groups, tmp_path) -> None:
    host = _Host()
    host.slow = True  # nothing to compare the first group with when it is measured
    ended = HostReference.add

    def add_then_end(self, figure):
        host.slow = False  # the period ends with the first group
        return ended(self, figure)

    specs = [s for g in model_groups for s in g]
    with open_store(f"sqlite:///{tmp_path / 'r.db'}") as store, pytest.MonkeyPatch.context() as patch:
        patch.setattr(HostReference, "add", add_then_end)
        summary = run_specs(
            specs, _SlowableRuntime(host), store, SETTINGS, system=SYSTEM, stack_id=STACK, groups=model_groups
        )
        stored = store.records(system=SYSTEM, stack_id=STACK)
    unique = {s.spec_id for s in specs}
    assert summary.measured == len(unique) and summary.failed == summary.skipped == 0  # replaced, not counted twice
    assert len(summary.records) == len(stored) == len(unique)
    first = {s.spec_id for s in model_groups[0]}
    again = [r for r in stored if r.spec_id in first]
    assert again and all(r.settings["host_reference"]["remeasured"] == 1 for r in again)
    assert not any(r.stats.disturbed for r in stored)
    calls = {r.settings["host_reference"]["call_s"] for r in stored}
    assert max(calls) < 3 * min(calls)  # the slow figure is gone with the records it came with


def test_without_the_reference_call_a_slow_group_goes_unseen_as_before(model_groups) -> None:
    host = _Host()
    settings = SETTINGS.model_copy(update={"reference_call": False})
    with Measurer(_SlowableRuntime(host), settings, system=SYSTEM, stack_id=STACK, admit=False) as measurer:
        list(measurer.measure(model_groups[0]))
        before = host.prepared
        host.slow = True
        records = [r for _, r, _ in measurer.measure(model_groups[1])]
    assert measurer.reference is None and host.prepared - before == len(model_groups[1])  # no reference call
    assert not any(r.stats.disturbed for r in records)
    assert not any("host_reference" in r.settings for r in records)


def test_a_spent_remeasure_budget_marks_a_slow_group_without_measuring_it_again(model_groups) -> None:
    host = _Host()
    settings = SETTINGS.model_copy(update={"remeasure_share": 0.0, "remeasure_reserve_s": 0.0})
    with Measurer(_SlowableRuntime(host), settings, system=SYSTEM, stack_id=STACK, admit=False) as measurer:
        quiet = [r for g in model_groups[:2] for _, r, _ in measurer.measure(g)]
        before = host.prepared
        host.slow = True
        slow = [r for _, r, _ in measurer.measure(model_groups[2])]
    assert host.prepared - before == len(model_groups[2]) + 1  # measured once, with its reference call
    assert not any(r.stats.disturbed for r in quiet)
    for record, ref in zip(slow, _reference_of(slow), strict=True):
        assert record.stats.disturbed and ref["remeasured"] == 0 and record.stats.remeasured == 0
        reason = record.stats.disturbed_reason
        assert reason.startswith("the host ran slower while this group was measured")
        assert "; not measured again: re-measures had spent 0 s" in reason
    assert measurer.remeasures.declined == 1 and measurer.remeasures.spent_s == 0.0


def test_a_first_group_found_slow_at_the_end_is_marked_when_the_budget_is_spent(model_groups, tmp_path) -> None:
    host = _Host()
    host.slow = True
    ended = HostReference.add

    def add_then_end(self, figure):
        host.slow = False
        return ended(self, figure)

    specs = [s for g in model_groups for s in g]
    settings = SETTINGS.model_copy(update={"remeasure_share": 0.0, "remeasure_reserve_s": 0.0})
    with open_store(f"sqlite:///{tmp_path / 'r.db'}") as store, pytest.MonkeyPatch.context() as patch:
        patch.setattr(HostReference, "add", add_then_end)
        summary = run_specs(
            specs, _SlowableRuntime(host), store, settings, system=SYSTEM, stack_id=STACK, groups=model_groups
        )
        stored = store.records(system=SYSTEM, stack_id=STACK)
    assert host.prepared == len(specs) + len(model_groups)  # every group once with its reference: none again
    unique = {s.spec_id for s in specs}
    assert summary.measured == len(unique) and len(stored) == len(unique)
    first = {s.spec_id for s in model_groups[0]}
    marked = {r.spec_id for r in stored if r.stats.disturbed}
    assert marked == first
    assert all("not measured again" in r.stats.disturbed_reason for r in stored if r.spec_id in first)
    assert summary.remeasure_note.startswith("1 disturbed measurement(s) were not measured again, 0 were")
