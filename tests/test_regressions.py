"""Regressions (issue 17): the statistics, the report over a real store, the CLI, --repro and --repeat.

The statistics are checked on samples drawn from known distributions (a known shift, or
none), where right and wrong answers are known; the command runs over real SQLite stores
with the real plan of a zoo model; the slow test measures two real onnxruntime releases.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from neighbours import spinning
from typer.testing import CliRunner

from benanza.analysis.regressions import (
    REGRESSION,
    UNCHANGED,
    ModelUnits,
    RegressionSettings,
    Run,
    Series,
    Subject,
    attribute,
    change_point,
    compare_runs,
    compare_stacks,
    history_changes,
    stack_diff,
)
from benanza.analysis.stored_regressions import model_units, regressions
from benanza.bench.execute import run_specs
from benanza.bench.generate import specs_for_plan
from benanza.bench.harness import HarnessSettings
from benanza.bench.plans import stored_plans
from benanza.bench.spec import SpecKind, variant_id
from benanza.cli import app
from benanza.local import open_local, plan_models, specs_for
from benanza.model.process import process_model
from benanza.model.zoo import zoo_paths
from benanza.runtimes.base import get_runtime
from benanza.store import BenchmarkRecord, Outcome, make_record, open_store

SYSTEM = "box"
# run-to-run noise (relative) above which a host is too noisy for the real slow-down test's premise
NOISY_HOST = 0.10
VARIANT = {"threads": 1, "opt": "extended", "ep": "cpu"}
OLD, NEW = "stack-old0000001", "stack-new0000002"
FINGERPRINTS = {
    OLD: {"python": {"version": "3.11.7"}, "onnxruntime": "1.22.1", "numpy": {"version": "2.4.6"}},
    NEW: {"python": {"version": "3.11.7"}, "onnxruntime": "1.32.0", "numpy": {"version": "2.4.6"}},
}


def _samples(rng: np.random.Generator, median_s: float, noise: float, n: int = 60) -> tuple[float, ...]:
    return tuple(median_s * np.exp(rng.normal(0.0, noise, n)))


def _runs(
    rng: np.random.Generator, stack: str, median_s: float, *, runs: int = 3, noise: float = 0.03, jitter: float = 0.01
) -> tuple[Run, ...]:
    """Runs of one benchmark: each run's median moves by ``jitter`` (run-to-run), samples by ``noise``."""
    return tuple(
        Run(
            stack,
            f"2026-11-{1 + i:02d}T{10 if stack == OLD else 20}:00:00",
            _samples(rng, median_s * math.exp(rng.normal(0, jitter)), noise),
        )
        for i in range(runs)
    )


def _series(key: str, runs: tuple[Run, ...], kind: str = "layer") -> Series:
    return Series(Subject("onnxruntime", kind, key, 1, "float32", "threads=1"), f"Conv {key}", runs)


# -- statistics --------------------------------------------------------------------------------


def test_unchanged_benchmarks_are_rarely_flagged_and_slowed_ones_are_found() -> None:
    rng = np.random.default_rng(17)
    settings = RegressionSettings(threshold=0.05, confidence=0.99)
    flagged_null = found = 0
    for i in range(300):
        median_s = 1e-4 * (1 + i % 7)
        base, head = _runs(rng, OLD, median_s), _runs(rng, NEW, median_s)
        change = compare_runs(
            _series(f"n{i}", base + head), base, head, base=OLD, head=NEW, settings=settings, floor=None
        )
        flagged_null += change.significant
    for i in range(40):
        base, head = _runs(rng, OLD, 1e-4), _runs(rng, NEW, 1e-4 * 1.12)
        change = compare_runs(
            _series(f"s{i}", base + head), base, head, base=OLD, head=NEW, settings=settings, floor=None
        )
        found += change.direction == REGRESSION
        assert change.low < 1.12 * 1.03 and change.high > 1.12 / 1.03  # the interval holds the true ratio
    assert flagged_null / 300 < 0.01
    assert found / 40 >= 0.95


def test_a_noisy_benchmark_needs_a_bigger_change() -> None:
    rng = np.random.default_rng(3)
    settings = RegressionSettings(threshold=0.05)
    quiet_base, quiet_head = _runs(rng, OLD, 1e-3, noise=0.01), _runs(rng, NEW, 1.08e-3, noise=0.01)
    noisy_base = _runs(rng, OLD, 1e-3, noise=0.3, jitter=0.1)
    noisy_head = _runs(rng, NEW, 1.08e-3, noise=0.3, jitter=0.1)
    quiet = compare_runs(
        _series("q", quiet_base + quiet_head), quiet_base, quiet_head, base=OLD, head=NEW, settings=settings, floor=None
    )
    noisy = compare_runs(
        _series("n", noisy_base + noisy_head), noisy_base, noisy_head, base=OLD, head=NEW, settings=settings, floor=None
    )
    assert quiet.direction == REGRESSION
    assert noisy.direction == UNCHANGED and (noisy.high - noisy.low) > 3 * (quiet.high - quiet.low)


def test_run_to_run_noise_from_repeats_widens_the_interval() -> None:
    """One run per side looks precise; repeats that disagree show the change is within the noise."""
    rng = np.random.default_rng(5)
    settings = RegressionSettings(threshold=0.05)
    base = _runs(rng, OLD, 1e-3, noise=0.005, jitter=0.1, runs=4)
    head = _runs(rng, NEW, 1e-3 * 1.08, noise=0.005, jitter=0.1, runs=4)
    alone = compare_runs(
        _series("k", base + head), base[-1:], head[-1:], base=OLD, head=NEW, settings=settings, floor=None
    )
    learned = compare_runs(_series("k", base + head), base, head, base=OLD, head=NEW, settings=settings, floor=None)
    assert learned.noise is not None and learned.noise > 0.03 and alone.noise is None
    assert (learned.high - learned.low) > 2 * (alone.high - alone.low)
    floored = compare_runs(
        _series("k", base + head), base[-1:], head[-1:], base=OLD, head=NEW, settings=settings, floor=0.1
    )
    assert floored.noise == 0.1 and not floored.significant  # a system-wide noise floor applies without own repeats


def test_a_change_measured_while_the_host_was_disturbed_is_reported_but_not_flagged() -> None:
    """The harness marks a measurement the host disturbed (stats.disturbed); it is no evidence of a regression."""
    rng = np.random.default_rng(11)

    def record(stack: str, median_s: float, disturbed: bool) -> BenchmarkRecord:
        spec = next(iter(_layer_specs()))
        return make_record(
            spec,
            system=SYSTEM,
            stack_id=stack,
            outcome=Outcome.OK,
            samples=_samples(rng, median_s, 0.01),
            stats={"disturbed": disturbed} if disturbed else {},
            settings={"runtime": VARIANT},
        )

    clean = compare_stacks(
        SYSTEM, [record(OLD, 1e-3, False), record(NEW, 1.5e-3, False)], base=OLD, head=NEW, stacks=FINGERPRINTS
    )
    assert [c.direction for c in clean.changes] == [REGRESSION] and not clean.changes[0].disturbed
    held = compare_stacks(
        SYSTEM, [record(OLD, 1e-3, False), record(NEW, 1.5e-3, True)], base=OLD, head=NEW, stacks=FINGERPRINTS
    )
    (change,) = held.changes
    assert change.disturbed and not change.significant and change.direction == UNCHANGED
    assert change.ratio > 1.4  # the figure is still there to read
    assert any("disturbed" in note for note in held.notes)
    assert change.to_dict()["disturbed"] is True


def _layer_specs():
    runtime = get_runtime("onnxruntime", threads=1)
    (plan,) = plan_models([next(p for p in zoo_paths() if "squeezenet" in p.name)], runtime, [1], granularities=[1])
    return [s for s in specs_for_plan(plan, "onnxruntime", VARIANT) if s.kind is SpecKind.LAYER][:1]


def test_change_point_in_a_history() -> None:
    rng = np.random.default_rng(11)
    steady = list(np.log(1e-3) + rng.normal(0, 0.01, 5))
    stepped = steady + list(np.log(1.3e-3) + rng.normal(0, 0.01, 4))
    assert change_point(stepped, 0.01) == 5
    assert change_point(steady + list(np.log(1e-3) + rng.normal(0, 0.01, 4)), 0.01) is None
    assert change_point(stepped[:2], 0.01) is None  # too short to tell


def test_history_flags_a_step_but_not_one_outlier_run() -> None:
    rng = np.random.default_rng(2)

    def run(i: int, median_s: float) -> Run:
        return Run("s", f"2026-11-{1 + i:02d}T00:00:00", _samples(rng, median_s, 0.01))

    def records(key: str, medians: list[float]) -> list[BenchmarkRecord]:
        return [
            BenchmarkRecord(
                system=SYSTEM,
                stack_id="s",
                runtime="onnxruntime",
                kind="layer",
                key=key,
                batch_size=1,
                dtype="float32",
                variant="threads=1",
                spec_id=key,
                label=key,
                outcome=Outcome.OK,
                samples=run(i, m).samples,
                measured_at=run(i, m).measured_at,
            )
            for i, m in enumerate(medians)
        ]

    stepped = records("step", [1e-3] * 5 + [1.25e-3] * 4)
    outlier = records("outlier", [1e-3] * 4 + [1.6e-3] + [1e-3] * 3)
    steady = [r for i in range(20) for r in records(f"steady{i}", [1e-3] * 8)]
    report = history_changes(SYSTEM, "s", stepped + outlier + steady)
    by_key = {c.subject.key: c for c in report.changes}
    assert by_key["step"].direction == REGRESSION and report.change_points["step"] == 5
    assert 1.2 < by_key["step"].ratio < 1.3 and by_key["step"].base_runs == 5 and by_key["step"].head_runs == 4
    assert by_key["outlier"].direction == UNCHANGED
    assert [c.subject.key for c in report.regressions] == ["step"]

    # a step at the latest run waits for one more run: the next one confirms it, or dismisses it
    latest = records("latest", [1e-3] * 5 + [1.5e-3])
    waiting = history_changes(SYSTEM, "s", latest + steady)
    assert not waiting.regressions and any("wait for one more run" in n for n in waiting.notes)
    confirmed = history_changes(SYSTEM, "s", records("latest", [1e-3] * 5 + [1.5e-3] * 2) + steady)
    assert [c.subject.key for c in confirmed.regressions] == ["latest"]


def test_stack_diff_names_nested_entries() -> None:
    diff = stack_diff(FINGERPRINTS[OLD], {**FINGERPRINTS[NEW], "cuda": {"driver": "580"}})
    assert [(d.path, d.before, d.after) for d in diff] == [
        ("cuda.driver", None, "580"),
        ("onnxruntime", "1.22.1", "1.32.0"),
    ]


def test_a_model_change_is_attributed_to_its_units() -> None:
    rng = np.random.default_rng(8)
    settings = RegressionSettings()
    changes = []
    units = {"u1": (2e-3, 1.3), "u2": (1e-3, 1.0), "u3": (0.5e-3, 1.0)}  # u1 slowed 30%, the rest unchanged
    for key, (median_s, factor) in units.items():
        base, head = _runs(rng, OLD, median_s), _runs(rng, NEW, median_s * factor)
        changes.append(
            compare_runs(_series(key, base + head), base, head, base=OLD, head=NEW, settings=settings, floor=None)
        )
    base, head = _runs(rng, OLD, 5e-3), _runs(rng, NEW, 5e-3 + 2 * 0.6e-3)  # the model runs u1 twice
    changes.append(
        compare_runs(_series("m", base + head, "model"), base, head, base=OLD, head=NEW, settings=settings, floor=None)
    )
    [model] = attribute(changes, [ModelUnits("net", "m", 1, (("u1", 2), ("u2", 1), ("u3", 1)))])
    assert model.figure == "e2e" and model.significant and 1.2 < model.ratio < 1.28
    assert [u.key for u in model.causes] == ["u1"] and model.causes[0].count == 2
    assert 0.8 < model.explained < 1.2
    assert model.summary().startswith("+2") and "of it from 1 unit: Conv u1" in model.summary()
    [by_units] = attribute(
        [c for c in changes if c.subject.key != "m"], [ModelUnits("net", "m", 1, (("u1", 2), ("u2", 1)))]
    )
    assert by_units.figure == "sum of units" and by_units.change is None and by_units.significant


# -- the report over a real store, and the command ---------------------------------------------


@pytest.fixture(scope="module")
def squeezenet_plan():
    path = next(p for p in zoo_paths() if p.stem == "light_squeezenet")
    [plan] = plan_models([path], get_runtime("onnxruntime", threads=1))
    return plan


@pytest.fixture
def two_stacks(tmp_path: Path, squeezenet_plan) -> tuple[str, list[str]]:
    """A SQLite store where the new stack made three of squeezenet's units 25% slower; three runs per stack."""
    rng = np.random.default_rng(1)
    specs = specs_for_plan(squeezenet_plan, "onnxruntime", VARIANT, e2e=True)
    units = [s for s in specs if s.kind in (SpecKind.LAYER, SpecKind.GROUP)]
    slowed = sorted({s.key for s in units if s.key in squeezenet_plan.unit_keys})[:3]
    uri = f"sqlite:///{tmp_path / 'perf.db'}"
    base_ms = {s.key: 2e-3 if s.key in slowed else 1e-4 * (1 + i % 5) for i, s in enumerate(specs)}
    model_s = sum(base_ms[k] for k in squeezenet_plan.unit_keys)
    with open_store(uri, clock=iter(range(1_000_000, 2_000_000)).__next__) as store:
        for stack in (OLD, NEW):
            store.register_stack(SYSTEM, stack, FINGERPRINTS[stack])
            store.put_plans(SYSTEM, stack, stored_plans([squeezenet_plan], "onnxruntime", variant_id(VARIANT)))
            for run in range(3):
                records = []
                for spec in specs:
                    median_s = model_s if spec.kind is SpecKind.MODEL else base_ms[spec.key]
                    if stack == NEW and spec.key in slowed:
                        median_s *= 1.25
                    if stack == NEW and spec.kind is SpecKind.MODEL:
                        median_s += 0.25 * sum(base_ms[k] for k in squeezenet_plan.unit_keys if k in slowed)
                    records.append(
                        make_record(
                            spec,
                            system=SYSTEM,
                            stack_id=stack,
                            outcome="ok",
                            samples=_samples(rng, median_s * math.exp(rng.normal(0, 0.01)), 0.03, 40),
                            measured_at=f"2026-11-{1 + run:02d}T{10 if stack == OLD else 20}:00:00.000000+00:00",
                        )
                    )
                store.upsert(records)
        store.register_system(SYSTEM, {"cpu_model": "test"})
    return uri, slowed


def test_the_report_finds_the_slowed_units_and_names_the_stack_change(two_stacks, squeezenet_plan) -> None:
    uri, slowed = two_stacks
    result = CliRunner().invoke(app, ["analyze", "regressions", "--system", SYSTEM, "--db", uri, "--format", "json"])
    assert result.exit_code == 0, result.output
    [doc] = json.loads(result.output)
    assert (doc["base"], doc["head"]) == (OLD, NEW)
    assert doc["stack_diff"] == [{"path": "onnxruntime", "before": "1.22.1", "after": "1.32.0"}]
    flagged = {c["key"] for c in doc["changes"] if c["significant"] and c["kind"] in ("layer", "group")}
    assert set(slowed) <= flagged and len(flagged - set(slowed)) <= 1  # the slowed units, hardly any other
    for c in doc["changes"]:
        if c["key"] in slowed and c["kind"] != "model":
            assert c["direction"] == "regression" and c["low"] < 1.25 < c["high"] and c["base_runs"] == 3
    [model] = doc["models"]
    assert model["model"] == "light_squeezenet" and model["figure"] == "e2e" and model["significant"]
    assert {u["key"] for u in model["units"] if u["significant"] and u["direction"] == "regression"} >= set(slowed)
    assert 0.8 < model["explained"] < 1.2 and "of it from" in model["summary"]


def test_the_table_csv_and_the_ci_gate(two_stacks) -> None:
    uri, _ = two_stacks
    runner = CliRunner()
    table = runner.invoke(app, ["analyze", "regressions", "--system", SYSTEM, "--db", uri])
    assert table.exit_code == 0 and "1.22.1" in table.output and "1.32.0" in table.output
    assert "regression" in table.output and "light_squeezenet" in table.output
    gate = runner.invoke(app, ["analyze", "regressions", "--system", SYSTEM, "--db", uri, "--fail-on", "regression"])
    assert gate.exit_code == 1
    loose = runner.invoke(
        app,
        ["analyze", "regressions", "--system", SYSTEM, "--db", uri, "--fail-on", "regression", "--threshold", "40%"],
    )
    assert loose.exit_code == 0, loose.output  # a 25% slowdown is below a 40% threshold
    rows = runner.invoke(app, ["analyze", "regressions", "--system", SYSTEM, "--db", uri, "--format", "csv"])
    header = rows.output.splitlines()[0].split(",")
    assert {"system", "key", "change", "low", "high", "significant"} <= set(header)
    same = runner.invoke(app, ["analyze", "regressions", "--system", SYSTEM, "--db", uri, "--base", NEW, "--head", NEW])
    assert same.exit_code == 0 and "0 regressions" in same.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--threshold", "lots"], "--threshold expects a fraction"),
        (["--confidence", "1.5"], "--confidence expects a value between"),
        (["--base", "nope"], "has no stack 'nope'"),
        (["--history", "--base", OLD], "--history looks at one stack"),
    ],
)
def test_bad_arguments_are_one_line_errors(two_stacks, args: list[str], message: str) -> None:
    uri, _ = two_stacks
    result = CliRunner().invoke(app, ["analyze", "regressions", "--system", SYSTEM, "--db", uri, *args])
    assert result.exit_code == 2 and message in result.output


def test_repro_writes_each_regressed_unit_as_a_model_with_its_commands(two_stacks, tmp_path: Path) -> None:
    uri, slowed = two_stacks
    folder = tmp_path / "repro"
    result = CliRunner().invoke(
        app, ["analyze", "regressions", "--system", SYSTEM, "--db", uri, "--repro", str(folder)]
    )
    assert result.exit_code == 0, result.output
    models = sorted(folder.glob("*.onnx"))
    assert len(models) >= len(slowed)
    written = set()
    for path in models:
        graph = process_model(path, fits_here=False).graph
        keys = {layer.layer_key for layer in graph.layers}
        [plan] = plan_models([path], get_runtime("onnxruntime", threads=1))
        written |= (keys | set(plan.unit_keys)) & set(slowed)  # benchmarking the file measures the regressed key
    assert written == set(slowed)
    script = (folder / "commands.sh").read_text()
    assert "onnxruntime==1.22.1" in script and "onnxruntime==1.32.0" in script
    assert script.count("benanza bench run") == 2 * len(models) and "--threads 1" in script
    assert "onnxruntime: 1.22.1 -> 1.32.0" in (folder / "README.md").read_text()


def test_bench_run_repeat_builds_a_history_that_history_mode_reads(tmp_path: Path) -> None:
    """Real runs (the null runtime: the harness's own overhead) of one small model, three times."""
    path = next(p for p in zoo_paths() if p.stem == "light_squeezenet")
    uri = f"sqlite:///{tmp_path / 'h.db'}"
    runner = CliRunner()
    base = [
        "bench",
        "run",
        str(path),
        "--runtime",
        "null",
        "--db",
        uri,
        "--system",
        SYSTEM,
        "--max-time",
        "0.05",
        "-f",
        "json",
    ]
    first = runner.invoke(app, base)
    assert first.exit_code == 0, first.output
    again = runner.invoke(app, base)
    assert json.loads(again.output)["measured"] == 0  # without --repeat nothing stored is measured again
    for _ in range(2):
        assert runner.invoke(app, [*base, "--repeat"]).exit_code == 0
    with open_store(uri, read_only=True) as store:
        [stack] = store.stacks(SYSTEM)
        current = store.records(system=SYSTEM)
        repeats = store.repeats(SYSTEM, stack["stack_id"])
    assert len(repeats) == 2 * len(current) and {r.identity() for r in repeats} == {r.identity() for r in current}
    history = runner.invoke(app, ["analyze", "regressions", "--system", SYSTEM, "--db", uri, "--history", "-f", "json"])
    assert history.exit_code == 0, history.output
    [doc] = json.loads(history.output)
    runs: dict[tuple, int] = {}  # runs the analysis uses: ok, with at least 5 samples (a time cap under load cuts some)
    for r in [*current, *repeats]:
        if len(r.samples) >= 5:
            runs[r.identity()] = runs.get(r.identity(), 0) + 1
    assert doc["mode"] == "history" and doc["compared"] == sum(1 for n in runs.values() if n >= 2) > 0
    assert sorted(c["base_runs"] + c["head_runs"] for c in doc["changes"]) == sorted(n for n in runs.values() if n >= 2)


def test_model_units_come_from_the_stored_plans(two_stacks, squeezenet_plan) -> None:
    uri, _ = two_stacks
    with open_store(uri, read_only=True) as store:
        plans = store.plans(system=SYSTEM, stack_id=NEW)
    units = model_units(plans)
    assert [u.model_key for u in units] == [squeezenet_plan.model_key] and model_units(plans, ["other"]) == []
    assert sum(count for _, count in units[0].units) == len(squeezenet_plan.unit_keys)


def test_a_model_at_two_bindings_is_two_models_in_the_report_named_as_the_tables_name_them(two_stacks) -> None:
    """The same model stored at a second binding (another input shape at the same batch size): its change is
    reported apart, under the name the lower-bound tables give it (``binding_names``), not as a second
    'light_squeezenet'."""
    from dataclasses import replace

    uri, _ = two_stacks
    with open_store(uri) as store:
        for stack in (OLD, NEW):
            (plan,) = store.plans(system=SYSTEM, stack_id=stack)
            (name, shape), *rest = plan.shapes.items()
            wide = replace(plan, model_key="squeezenet-112", shapes={name: (*shape[:2], 112, 112), **dict(rest)})
            store.put_plans(SYSTEM, stack, [wide])
            models = [r for r in store.records(system=SYSTEM, stack_id=stack, kind="model") if r.key == plan.model_key]
            store.upsert([replace(r, key="squeezenet-112", spec_id=f"{r.spec_id}-112") for r in models])
        [found] = regressions(store, [SYSTEM])
    names = sorted(m.model for m in found.report.models)
    assert names == ["light_squeezenet (data_0=Bx3x112x112)", "light_squeezenet (data_0=Bx3x224x224)"]
    # a binding is selected by the name it is shown by, as by its stored name
    with open_store(uri, read_only=True) as store:
        [one] = regressions(store, [SYSTEM], models=["light_squeezenet (data_0=Bx3x112x112)"])
        [both] = regressions(store, [SYSTEM], models=["light_squeezenet"])
    assert [m.model for m in one.report.models] == ["light_squeezenet (data_0=Bx3x112x112)"]
    assert len(both.report.models) == 2


# -- two real onnxruntime releases -------------------------------------------------------------

OLD_ORT = "1.22.1"


@pytest.fixture(scope="module")
def old_onnxruntime(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """onnxruntime 1.22.1 installed into its own folder, imported first through PYTHONPATH."""
    target = tmp_path_factory.mktemp("ort-old")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--quiet",
            "--target",
            str(target),
            f"onnxruntime=={OLD_ORT}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        pytest.skip(f"onnxruntime=={OLD_ORT} cannot be installed here: {done.stderr.strip()[-200:]}")
    return target


@pytest.mark.slow
def test_two_real_onnxruntime_releases(old_onnxruntime: Path, tmp_path: Path) -> None:
    path = next(p for p in zoo_paths() if p.stem == "light_squeezenet")
    uri = f"sqlite:///{tmp_path / 'two.db'}"
    root = str(Path(__file__).resolve().parents[1])
    command = [sys.executable, "-m", "benanza", "bench", "run", str(path), "--db", uri, "--system", SYSTEM]
    command += ["--threads", "1", "--e2e", "--max-time", "0.2", "-f", "json"]
    for pythonpath in (f"{old_onnxruntime}{os.pathsep}{root}", root):
        env = {**os.environ, "PYTHONPATH": pythonpath}
        for repeat in ([], ["--repeat"]):
            done = subprocess.run([*command, *repeat], env=env, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stderr
    result = CliRunner().invoke(app, ["analyze", "regressions", "--system", SYSTEM, "--db", uri, "-f", "json", "--all"])
    assert result.exit_code == 0, result.output
    [doc] = json.loads(result.output)
    assert {"path": "onnxruntime", "before": OLD_ORT, "after": "1.32.0"} in doc["stack_diff"]
    assert doc["compared"] > 30 and all(c["low"] <= c["ratio"] <= c["high"] for c in doc["changes"])
    assert all(c["base_runs"] == 2 and c["head_runs"] == 2 for c in doc["changes"])
    [model] = doc["models"]
    assert model["figure"] == "e2e" and model["units"]


def test_fleet_status_counts_the_new_regressions(two_stacks) -> None:
    uri, slowed = two_stacks
    path = next(p for p in zoo_paths() if p.stem == "light_squeezenet")
    result = CliRunner().invoke(app, ["fleet", "status", "--models", str(path), "--db", uri, "--format", "json"])
    assert result.exit_code == 0, result.output
    [row] = [r for r in json.loads(result.output) if r["name"] == SYSTEM]
    report = CliRunner().invoke(app, ["analyze", "regressions", "--system", SYSTEM, "--db", uri, "-f", "json"])
    assert row["regressions"] == json.loads(report.output)[0]["regressions"] >= len(slowed)
    table = CliRunner().invoke(app, ["fleet", "status", "--models", str(path), "--db", uri])
    assert "regressions" in table.output


def test_a_run_of_too_few_samples_is_left_out() -> None:
    """A time-capped run of one sample (the process descheduled through it) is no figure to compare."""
    rng = np.random.default_rng(4)

    def record(stack: str, hour: int, samples: tuple[float, ...]) -> BenchmarkRecord:
        return BenchmarkRecord(
            system=SYSTEM,
            stack_id=stack,
            runtime="onnxruntime",
            kind="layer",
            key="k",
            batch_size=1,
            dtype="float32",
            variant="threads=1",
            spec_id="k",
            label="Conv k",
            outcome=Outcome.OK,
            samples=samples,
            measured_at=f"2026-11-01T{hour:02d}:00:00",
        )

    records = [
        record(OLD, 1, (0.5,)),
        record(OLD, 2, _samples(rng, 1e-4, 0.01)),
        record(NEW, 3, _samples(rng, 1e-4, 0.01)),
    ]
    report = compare_stacks(SYSTEM, records, base=OLD, head=NEW, stacks=FINGERPRINTS)
    [change] = report.changes
    assert change.base_runs == 1 and not change.significant and 0.9 < change.ratio < 1.1
    assert "1 runs with fewer than 5 samples left out" in report.notes


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_a_real_slow_down_of_some_units_is_found_by_the_history(tmp_path: Path) -> None:
    """Real ONNX Runtime runs of squeezenet's units: three as usual, then two in which a few of
    them share their core with a process spinning on it (about 2x slower). The history flags
    those and attributes the model's change to them. The harness's CPU-share check is off here (it would hold the
    slowed runs back as interference); see benchmarks/regression_detection.py --part power."""
    cpu = min(os.sched_getaffinity(0))
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    path = next(p for p in zoo_paths() if p.stem == "light_squeezenet")
    settings = HarnessSettings(
        min_sample_time_s=0.02, max_time_s=0.5, min_samples=10, min_cpu_share=0.0, max_other_cores=64.0
    )
    ctx = open_local(f"sqlite:///{tmp_path / 'p.db'}", "onnxruntime", {"threads": 1}, SYSTEM, settings)
    try:
        plans = plan_models([path], ctx.runtime)
        ctx.store.put_plans(ctx.system, ctx.stack_id, stored_plans(plans, ctx.runtime.name, ctx.variant))
        specs = specs_for(ctx, plans, e2e=False)
        units = [s for s in specs if s.key in set(plans[0].unit_keys)]
        slowed = sorted(units, key=lambda s: s.key)[:3]
        others = [s for s in units if s not in slowed]  # the model's units: what its change is attributed to
        for run in range(5):
            run_specs(
                others, ctx.runtime, ctx.store, ctx.settings, system=ctx.system, stack_id=ctx.stack_id, repeat=True
            )
            with spinning(cpu) if run >= 3 else contextlib.nullcontext():
                run_specs(
                    slowed, ctx.runtime, ctx.store, ctx.settings, system=ctx.system, stack_id=ctx.stack_id, repeat=True
                )
        [found] = regressions(ctx.store, [SYSTEM], history=True)
    finally:
        ctx.close()
        os.sched_setaffinity(0, saved)
    changes = {c.subject.key: c for c in found.report.changes}
    for spec in slowed:
        c = changes[spec.key]
        if c.direction != REGRESSION and c.noise is not None and c.noise > NOISY_HOST:
            # 2026-11-26, on a 2-core VM whose whole test suite ran 1.7x slower than the day before:
            # the same unit's quiet runs differed by up to 35% (0.88 to 1.22 ms), run-to-run noise
            # 16-18%, and a 2.5-3.3x slow-down's interval reached below 1 (0.97-8.4) even with 4
            # quiet runs against 3. The test's premise, a slow-down standing out of quiet runs, is gone.
            pytest.skip(
                f"this host's run-to-run noise ({c.noise:.0%}) is above {NOISY_HOST:.0%}: "
                f"a {c.ratio:.1f}x slow-down's interval is {c.low:.2f}-{c.high:.2f}"
            )
        assert c.direction == REGRESSION, (c.ratio, c.low, c.high, c.base_runs, c.head_runs, c.noise)
    [model] = found.report.models
    assert {s.key for s in slowed} <= {u.key for u in model.causes}
