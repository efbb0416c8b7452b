"""A model end to end as its file is (``BenchmarkSpec.as_exported``): the dimensions it leaves free left free.

``e2e_ms`` runs the model bound, what its bound shapes make constant folded; a user who opens the
exported file as it is feeds the same shapes into a session that cannot fold them, and the export's
shape computations run on every call (Optimum's T5 decoder with its cache: 1.21x,
``benchmarks/free_dims.py``).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from cli_checks import json_command
from onnx import TensorProto, helper

from benanza.analysis.lower_bound import free_dims_cost
from benanza.bench.generate import plan_model_file, specs_for_plan
from benanza.bench.stats import Interval
from benanza.model.request import BindingRequest
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU
from benanza.store import open_store

F, I64 = TensorProto.FLOAT, TensorProto.INT64
ENV = {"BENANZA_DB": None, "BENANZA_SYSTEM": "exported-test", "BENANZA_HARNESS_MIN_SAMPLES": "3"}
FAST = ["--min-time", "0.001", "--max-time", "0.02", "--threads", "1", "--granularity", "1"]


def invoke(*args: object) -> list | dict:
    """A command with this file's environment, its JSON output read (``cli_checks.json_command``)."""
    return json_command(ENV, *args)


def reshaping(build_model, batch: str | int = "batch", sequence: str | int = "sequence") -> onnx.ModelProto:
    """A projection whose output is reshaped to heads by a shape computed from its input, as exporters write
    it: ``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` (constant once the dimensions are bound)."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["b"], axis=0),
        helper.make_node("Gather", ["shape", "one"], ["s"], axis=0),
        helper.make_node("Unsqueeze", ["b", "axis"], ["b1"]),
        helper.make_node("Unsqueeze", ["s", "axis"], ["s1"]),
        helper.make_node("Concat", ["b1", "s1", "heads"], ["target"], axis=0),
        helper.make_node("Reshape", ["h", "target"], ["y"]),
    ]
    constants = {
        "w": np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32),
        "zero": np.array(0, np.int64),
        "one": np.array(1, np.int64),
        "axis": np.array([0], np.int64),
        "heads": np.array([4, 4], np.int64),
    }
    return build_model(nodes, [("x", F, [batch, sequence, 16])], [("y", F, None)], initializers=constants)


def test_a_model_whose_file_leaves_dimensions_free_is_measured_as_exported_too(tmp_path, build_model):
    path = tmp_path / "reshaping.onnx"
    onnx.save(reshaping(build_model), path)
    uri = f"sqlite:///{tmp_path / 'e.db'}"
    (row,) = invoke("run", path, "--db", uri, *FAST, "--dim", "sequence=8")
    assert row["e2e_ms"] is not None and row["exported_e2e_ms"] is not None
    assert row["method"]["exported_e2e_ms"].endswith("of the file as exported, dimensions free")
    with open_store(uri, read_only=True) as store:
        (plan,) = store.plans()
        assert plan.exported
        (exported,) = [r for r in store.records(kind="model") if r.settings.get("session") == "as exported"]
        assert exported.outcome == "ok" and exported.label == "reshaping (as exported)"
    (stored,) = invoke("analyze", "lower-bound", "--db", uri)
    assert stored["exported_e2e_ms"] == row["exported_e2e_ms"]
    # an optimization of its own: what fixing the dimensions is worth
    (optimized,) = invoke("analyze", "optimizations", "--runtime", "onnxruntime", "--db", uri)
    assert optimized["speedups"]["static_shapes"] == pytest.approx(row["exported_e2e_ms"] / row["e2e_ms"])


def test_the_exported_session_runs_the_file_with_its_dimensions_free_on_the_bound_shapes(tmp_path, build_model):
    path = tmp_path / "reshaping.onnx"
    onnx.save(reshaping(build_model), path)
    runtime = OnnxRuntimeCPU(threads=1)
    ((plan,),) = plan_model_file(path, [runtime], [2], BindingRequest(dims={"sequence": 8}))
    assert plan.exported
    specs = specs_for_plan(plan, runtime.name, runtime.variant(), e2e=True, exported=True)
    (spec,) = [s for s in specs if s.as_exported]
    prepared = runtime.prepare(spec)
    try:
        session = prepared._session  # the file as it is: its input's dimensions still named
        (x,) = session.get_inputs()
        assert x.shape == ["batch", "sequence", 16]
        assert prepared.provenance["session"] == "as exported"
        prepared.call()
    finally:
        prepared.close()


@pytest.mark.parametrize(
    ("dims", "batch", "why"),
    [
        ((2, 8), None, "fixed in the file"),
        ((1, "sequence"), 4, "a fixed batch rewritten: the file cannot run at 4"),
    ],
)
def test_a_file_with_no_free_dimension_or_a_rewritten_batch_is_not_measured_as_exported(
    tmp_path, build_model, dims, batch, why
):
    path = tmp_path / "fixed.onnx"
    onnx.save(reshaping(build_model, *dims), path)
    runtime = OnnxRuntimeCPU(threads=1)
    ((plan,),) = plan_model_file(path, [runtime], [batch], BindingRequest(dims={"sequence": 8}))
    assert not plan.exported, why
    specs = specs_for_plan(plan, runtime.name, runtime.variant(), e2e=True, exported=True)
    assert not any(s.as_exported for s in specs), why


def test_a_shape_given_over_a_fixed_dimension_is_not_measured_as_exported(tmp_path, build_model):
    """A free batch beside a fixed sequence of 12, run at 8 by --shape: the file as it is refuses 8."""
    path = tmp_path / "fixed_sequence.onnx"
    onnx.save(reshaping(build_model, "batch", 12), path)
    runtime = OnnxRuntimeCPU(threads=1)
    ((plan,),) = plan_model_file(path, [runtime], [1], BindingRequest({"x": (1, 8, 16)}))
    assert not plan.exported
    ((at_its_own,),) = plan_model_file(path, [runtime], [1])
    assert at_its_own.exported  # the batch free, the sequence at the file's 12


def test_a_runtime_that_does_not_run_exported_models_gets_no_such_spec(tmp_path, build_model):
    from benanza.runtimes.null import NullRuntime

    path = tmp_path / "reshaping.onnx"
    onnx.save(reshaping(build_model), path)
    null = NullRuntime()
    assert not null.runs_exported() and OnnxRuntimeCPU(threads=1).runs_exported()
    ((plan,),) = plan_model_file(path, [null], [1], BindingRequest(dims={"sequence": 8}))
    from benanza.bench.plans import StoredPlan

    stored = StoredPlan.of(plan, null.name, "", exported=null.runs_exported())
    assert not stored.exported and all("as exported" not in k for k in stored.keys)
    assert StoredPlan.from_doc(StoredPlan.of(plan, "onnxruntime", "", exported=True).to_doc()).exported


def test_the_note_says_what_free_dimensions_cost_only_beyond_the_noise():
    bound = Interval(1.00, 0.98, 1.02)
    (note,) = free_dims_cost(Interval(1.21, 1.19, 1.23), bound)
    assert "1.21x its end to end at the bound shapes" in note and "saves 0.210 ms" in note
    assert free_dims_cost(Interval(1.01, 0.99, 1.03), bound) == ()  # within the noise of both
    assert free_dims_cost(Interval(0.97, 0.965, 0.975), bound) == ()  # apart, but within 5%: process to process
    (faster,) = free_dims_cost(Interval(0.90, 0.88, 0.92), bound)  # the file ran faster than the model bound
    assert "0.90x its end to end at the bound shapes" in faster and "changed how ONNX Runtime runs it" in faster
    assert free_dims_cost(None, bound) == () and free_dims_cost(Interval(1.2, 1.1, 1.3), None) == ()
