"""Benchmarks in a replaceable worker process: real child processes that really die or turn unusable."""

from __future__ import annotations

import os

import pytest

from benanza.bench.execute import Measurer, effective_settings, isolated_runner, run_spec, run_specs
from benanza.bench.harness import HarnessSettings
from benanza.bench.isolation import IsolatedRunner
from benanza.bench.spec import BenchmarkSpec, SpecKind
from benanza.model.network import Network, NetworkNode
from benanza.runtimes.base import Runtime
from benanza.runtimes.null import NullPrepared
from benanza.store import Outcome, open_store

QUICK = HarnessSettings(warmup_runs=0, min_samples=3, min_time_s=0.0, max_time_s=0.05)


def spec(label: str) -> BenchmarkSpec:
    relu = NetworkNode("Relu", "", 14, (), (), (), "relu")
    net = Network((), (relu,), (), 1)
    return BenchmarkSpec(SpecKind.LAYER, f"key-{label}", 1, "float32", "faulty", label=label, network=net)


class WherePrepared(NullPrepared):
    """Says, in its record, which process measured it."""

    __slots__ = ("provenance",)

    def __init__(self) -> None:
        self.provenance = {"pid": os.getpid()}


class FaultyRuntime(Runtime):
    """Measures like the null runtime; ``crash`` kills its process, ``poison`` breaks it for good.

    Defined at module level so that a spawned worker process can build it from a pickle.
    """

    name = "faulty"
    isolated = True

    def __init__(self) -> None:
        self.poisoned = False

    def factory(self):
        return FaultyRuntime

    def supports(self, spec):
        return None

    def prepare(self, spec):
        if self.poisoned:
            raise RuntimeError("sticky error: an earlier benchmark broke this process")
        if spec.label == "crash":
            os._exit(7)
        if spec.label == "poison":
            self.poisoned = True
            raise RuntimeError("illegal address")
        return WherePrepared()

    def healthy(self) -> bool:
        return not self.poisoned

    def variant(self):
        return {}

    def stack(self):
        return {"faulty": "1"}


@pytest.fixture
def runner():
    r = IsolatedRunner(FaultyRuntime, run_spec, QUICK, system="sys", stack_id="stack")
    yield r
    r.close()


def test_specs_run_in_one_child_process_that_is_not_this_one(runner):
    first = runner.run(spec("a"), FaultyRuntime())
    pid = runner.pid
    second = runner.run(spec("b"), FaultyRuntime())
    assert first.outcome is Outcome.OK and second.outcome is Outcome.OK
    assert pid != os.getpid() and runner.pid == pid and runner.started == 1


def test_a_child_that_dies_leaves_a_failed_record_and_the_next_spec_gets_a_fresh_child(runner):
    runner.run(spec("a"), FaultyRuntime())
    crashed = runner.run(spec("crash"), FaultyRuntime())
    assert crashed.outcome is Outcome.FAILED
    assert crashed.reason == "WorkerDied: the benchmark process exited with code 7 while measuring this spec"
    after = runner.run(spec("b"), FaultyRuntime())
    assert after.outcome is Outcome.OK and runner.started == 2


def test_a_poisoned_child_is_replaced_so_later_specs_do_not_inherit_its_error(runner):
    poisoned = runner.run(spec("poison"), FaultyRuntime())
    assert poisoned.outcome is Outcome.FAILED and "illegal address" in poisoned.reason
    after = runner.run(spec("b"), FaultyRuntime())
    assert after.outcome is Outcome.OK  # in-process, the sticky error would have failed it too
    assert runner.started == 2


def test_run_specs_isolates_runtimes_that_ask_for_it(tmp_path):
    specs = [spec("a"), spec("crash"), spec("poison"), spec("b")]
    with open_store(f"sqlite:///{tmp_path / 'perf.db'}") as store:
        summary = run_specs(specs, FaultyRuntime(), store, QUICK, system="sys", stack_id="stack")
        stored = {r.label: r.outcome for r in store.records(system="sys", stack_id="stack")}
    assert (summary.measured, summary.failed) == (2, 2)
    assert stored == {"a": "ok", "crash": "failed", "poison": "failed", "b": "ok"}


def test_runtimes_that_do_not_ask_run_in_process():
    from benanza.runtimes.null import NullRuntime

    assert isolated_runner(NullRuntime(), QUICK, system="s", stack_id="x") is None


def _pids(summary) -> list[int]:
    return [r.settings["pid"] for r in summary.records]


def test_a_measurer_kept_across_run_specs_calls_keeps_its_worker_process(tmp_path):
    """A model at a time (the GPU zoo's parts): one child for all calls, not one a call."""
    settings = effective_settings(FaultyRuntime(), QUICK)
    with open_store(f"sqlite:///{tmp_path / 'perf.db'}") as store:
        runtime = FaultyRuntime()
        where = {"system": "sys", "stack_id": "stack"}
        with Measurer(runtime, settings, **where) as measurer:
            first = run_specs([spec("a")], runtime, store, QUICK, measurer=measurer, **where)
            second = run_specs([spec("b"), spec("c")], runtime, store, QUICK, measurer=measurer, **where)
            assert measurer.runtime is runtime  # still open: the caller closes it
        alone = [run_specs([spec(x)], runtime, store, QUICK, **where) for x in ("d", "e")]
    kept = _pids(first) + _pids(second)
    assert len(kept) == 3 and len(set(kept)) == 1 and kept[0] != os.getpid()
    assert len({p for s in alone for p in _pids(s)} | {kept[0]}) == 3  # a call without one: a child of its own


def test_a_kept_measurer_of_another_runtime_or_system_is_refused(tmp_path):
    settings = effective_settings(FaultyRuntime(), QUICK)
    runtime = FaultyRuntime()
    with (
        open_store(f"sqlite:///{tmp_path / 'perf.db'}") as store,
        Measurer(runtime, settings, system="sys", stack_id="stack") as measurer,
    ):
        with pytest.raises(ValueError, match="another runtime, system, stack or settings"):
            run_specs([spec("a")], FaultyRuntime(), store, QUICK, system="sys", stack_id="stack", measurer=measurer)
        with pytest.raises(ValueError, match="another runtime"):
            run_specs([spec("a")], runtime, store, QUICK, system="other", stack_id="stack", measurer=measurer)
        with pytest.raises(ValueError, match="settings"):
            slower = QUICK.model_copy(update={"min_samples": 5})
            run_specs([spec("a")], runtime, store, slower, system="sys", stack_id="stack", measurer=measurer)
