"""The model end to end at its runtime's defaults, beside the figures at the variant's settings.

ONNX Runtime's default level, ``all``, runs float32 convolutions in NCHWc blocks and int8 ones in
NHWC from one layer to the next, and converts float16 weights once at load; benanza measures the
layers at ``extended`` by default, where no layout spans layers. On the 2-core VM ResNet-50 ran
end to end in 25.0 ms at ``extended`` and 19.0 ms at ``all``, below its sequential bound at
``extended`` (23.1 ms): a user who runs the model with ORT's defaults would have found it faster
than benanza's "could run". So each model is also measured end to end at the defaults, and the
analysis says where that lies below the bound.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_checks import FAST_ENV, fast_flags
from typer.testing import CliRunner

from benanza.analysis.lower_bound import defaults_below_bound
from benanza.bench.execute import takes_kernel_times
from benanza.bench.generate import plan_model, specs_for_plan
from benanza.bench.harness import HarnessSettings
from benanza.bench.spec import RUNTIME_DEFAULTS, SpecKind, runtime_defaults_key
from benanza.bench.stats import Interval
from benanza.cli import app
from benanza.report.output import fmt_interval
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU
from benanza.store import open_store

SYSTEM = "defaults-test-system"


def test_only_a_variant_that_is_not_the_defaults_measures_the_model_at_them():
    assert "level, all" in (OnnxRuntimeCPU(threads=1, opt_level="extended").runtime_defaults() or "")
    assert OnnxRuntimeCPU(threads=1, opt_level="basic").runtime_defaults() is not None
    # at all, the model end to end is measured at all already
    assert OnnxRuntimeCPU(threads=1, opt_level="all").runtime_defaults() is None


def test_the_plan_holds_the_model_at_the_defaults_beside_it(conv_chain, process_proto):
    runtime = OnnxRuntimeCPU(threads=1)
    plan = plan_model(process_proto(conv_chain("maxpool", channels=16)), runtime, (1,))
    plain = specs_for_plan(plan, runtime.name, runtime.variant(), e2e=True)
    both = specs_for_plan(plan, runtime.name, runtime.variant(), e2e=True, defaults=True)
    assert [s.kind for s in plain].count(SpecKind.MODEL) == 1
    whole, at_defaults = [s for s in both if s.kind is SpecKind.MODEL]
    assert whole.key == plan.model_key and "session" not in whole.model
    assert at_defaults.key == runtime_defaults_key(plan.model_key) != plan.model_key
    assert at_defaults.model == {**whole.model, "session": RUNTIME_DEFAULTS}
    assert at_defaults.spec_id != whole.spec_id
    # only its call latency is read: no profiled runs, which cost as much as its timing
    assert at_defaults.at_runtime_defaults and not whole.at_runtime_defaults
    harness = HarnessSettings()
    assert takes_kernel_times(whole, harness) and not takes_kernel_times(at_defaults, harness)
    # without end to end, neither
    only_parts = specs_for_plan(plan, runtime.name, runtime.variant(), defaults=True)
    assert not [s for s in only_parts if s.kind is SpecKind.MODEL]


def test_a_defaults_end_to_end_below_the_bound_is_said_so():
    bound = Interval(23.0, 22.9, 23.1)
    (note,) = defaults_below_bound(Interval(19.5, 19.2, 19.8), bound)
    assert "19.500 ms" in note and "0.85x its sequential bound 23.000 ms" in note and "spans layers" in note
    assert defaults_below_bound(Interval(22.9, 22.5, 23.3), bound) == ()  # within the noise of both
    assert defaults_below_bound(Interval(25.0, 24.8, 25.2), bound) == ()  # no faster than the bound
    assert defaults_below_bound(None, bound) == defaults_below_bound(Interval(19.5, 19.2, 19.8), None) == ()


def _run(model: Path, uri: str, *flags: str):
    args = ["run", model, "--db", uri, "--granularity", "1", "--format", "json", *fast_flags(SYSTEM), *flags]
    result = CliRunner().invoke(app, [str(a) for a in args], env=FAST_ENV)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def nchwc_model(tmp_path_factory, conv_chain) -> Path:
    """Convolutions ORT runs in NCHWc blocks at ``all``."""
    path = tmp_path_factory.mktemp("defaults") / "chain.onnx"
    path.write_bytes(conv_chain("maxpool", channels=16).SerializeToString())
    return path


def test_the_main_job_measures_the_model_at_the_defaults_and_says_what_they_are(nchwc_model, tmp_path):
    uri = f"sqlite:///{tmp_path / 'defaults.db'}"
    (row,) = _run(nchwc_model, uri)
    assert row["variant"] == "ep=cpu,opt=extended,threads=1"
    assert row["defaults_e2e_ms"] > 0 and row["e2e_ms"] > 0
    assert row["defaults_what"].startswith("ONNX Runtime's default optimisation level, all")
    assert "defaults_e2e_ms" in row["intervals"]
    with open_store(uri, create=False) as store:
        (record,) = [r for r in store.records(system=SYSTEM, kind="model") if r.settings.get("session")]
    # measured at all, in the variant's threads, stored under the variant it was planned in
    assert record.settings["opt"] == "all" and record.settings["session"] == RUNTIME_DEFAULTS
    assert record.variant == row["variant"]
    # at all, there is nothing more to measure; the variant says how its layouts are measured, so results of
    # all stored before (one unit for a model's body, conversions in kernel time) are never reused
    (at_all,) = _run(nchwc_model, f"sqlite:///{tmp_path / 'all.db'}", "--opt-level", "all")
    assert at_all["defaults_e2e_ms"] is None and at_all["e2e_ms"] > 0
    assert at_all["variant"] == "ep=cpu,layouts=per-layer,opt=all,threads=1"


def test_the_reports_answer_names_the_variant_of_a_system_measured_at_two_levels(nchwc_model, tmp_path):
    """One system at ``extended`` and at ``all``: the answer said "on vm" and "Fastest of 2 systems", of one
    system, and took the figures of whichever of its rows came first, not necessarily the fastest."""
    uri = f"sqlite:///{tmp_path / 'levels.db'}"
    (extended,) = _run(nchwc_model, uri)
    (at_all,) = _run(nchwc_model, uri, "--opt-level", "all")
    # the comparison's basis: the lowest end to end where every row has one (``analysis.compare``); by the
    # bound, as this test chose before, it failed whenever the two levels' bounds and end to ends ranked apart
    fastest = min((extended, at_all), key=lambda r: r["e2e_ms"])
    out = tmp_path / "site"
    result = CliRunner().invoke(app, ["report", "--db", uri, "--out", str(out)], env=FAST_ENV)
    assert result.exit_code == 0, result.output
    index = (out / "index.html").read_text()
    sentence = index[index.index(f"at batch 1 on {SYSTEM} ({fastest['variant']})") :].split("</div>")[0]
    bound = fastest["intervals"]["sequential_ms"]
    shown = fmt_interval(fastest["sequential_ms"], bound["low"], bound["high"])
    assert f"could run in <b>{shown} ms" in sentence.replace(" (disturbed)", "")  # the fastest row's own figures
    assert "Fastest of 2 system variants." in sentence and "Fastest of 2 systems" not in index
