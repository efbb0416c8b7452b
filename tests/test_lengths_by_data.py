"""Outputs whose length their data decides (``walks.LENGTH_BY_DATA``): a detector's NonMaxSuppression.

How many boxes NonMaxSuppression keeps depends on the image, so no binding of input shapes gives
its output's shape, nor the shapes of what reads it. Left unshaped, a detector that ends so (an
ultralytics export with ``nms=True``, torchvision's detection models, SSD) had those nodes
unbenchmarked and no bound at all. The length is taken from the model's own run on the inputs its
benchmarks get, and said per tensor.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cli_checks import json_command
from onnx import TensorProto, helper

from benanza.bench.build import build_onnx
from benanza.bench.generate import plan_model
from benanza.host_memory import SystemMemory
from benanza.model.graph import InputKind
from benanza.model.process import process_model
from benanza.model.request import BindingRequest
from benanza.model.resolve import resolve_shapes
from benanza.model.run_values import model_feeds
from benanza.model.shapes import apply_binding, bind_shapes, fold_and_infer
from benanza.runtimes.null import NullRuntime
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU, feeds_for

F = TensorProto.FLOAT
I64 = TensorProto.INT64
ENV = {"BENANZA_DB": None, "BENANZA_SYSTEM": "by-data", "BENANZA_HARNESS_MIN_SAMPLES": "3"}
FAST = ["--min-time", "0.001", "--max-time", "0.02", "--threads", "1", "--granularity", "1"]


@pytest.fixture
def detector(build_model) -> onnx.ModelProto:
    """A convolutional head whose boxes and class scores go through NonMaxSuppression, the kept boxes gathered:
    how the exporters end a detector (``boxes [N, A, 4]``, ``scores [N, C, A]``, ``selected [K, 3]``)."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["images", "w"], ["f"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["f"], ["fr"]),
        helper.make_node("Conv", ["fr", "wb"], ["box4"]),
        helper.make_node("Conv", ["fr", "ws"], ["logits"]),
        helper.make_node("Sigmoid", ["logits"], ["probs"]),
        helper.make_node("Reshape", ["box4", "to_boxes"], ["b1"]),
        helper.make_node("Transpose", ["b1"], ["boxes"], perm=[0, 2, 1]),
        helper.make_node("Reshape", ["probs", "to_scores"], ["scores"]),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_boxes", "iou", "score_min"], ["selected"]),
        helper.make_node("Gather", ["selected", "two"], ["box_ids"], axis=1),
        helper.make_node("Squeeze", ["boxes", "zero"], ["all_boxes"]),
        helper.make_node("Gather", ["all_boxes", "box_ids"], ["detections"], axis=0),
    ]
    inits = {
        "w": rng.standard_normal((8, 3, 3, 3)).astype(np.float32),
        "wb": rng.standard_normal((4, 8, 1, 1)).astype(np.float32),
        "ws": rng.standard_normal((3, 8, 1, 1)).astype(np.float32),
        "to_boxes": np.array([0, 4, -1], np.int64),
        "to_scores": np.array([0, 3, -1], np.int64),
        "max_boxes": np.array([20], np.int64),
        "iou": np.array([0.5], np.float32),
        "score_min": np.array([0.3], np.float32),
        "two": np.array(2, np.int64),
        "zero": np.array([0], np.int64),
    }
    return build_model(nodes, [("images", F, ["N", 3, 32, 32])], [("detections", F, ["K", 4])], inits)


def _kept(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[int, ...]:
    """The shape of NonMaxSuppression's output when ONNX Runtime runs ``model`` on ``feeds``."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.output.append(onnx.ValueInfoProto(name="selected"))
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return tuple(session.run(["selected"], feeds)[0].shape)


def test_a_length_the_data_decides_is_the_models_own_runs_and_what_reads_it_is_shaped(detector, process_proto):
    processed = process_proto(detector, 1)
    layers = {layer.name: layer for layer in processed.graph.layers}
    nms = next(layer for layer in layers.values() if layer.op_type == "NonMaxSuppression")
    # the model run on the inputs every benchmark of it is fed, as its end to end is
    kept = _kept(processed.proto, model_feeds(processed.proto))
    assert nms.outputs[0].shape == kept and kept[1] == 3 and 0 < kept[0] <= 20 * 3
    gathered = [layer for layer in layers.values() if layer.op_type == "Gather"]
    assert sorted(layer.outputs[0].shape for layer in gathered) == sorted([(kept[0],), (kept[0], 4)])
    assert processed.graph.unsupported == ()  # was: the NMS and both Gathers, unshaped
    assert dict(processed.graph.shaped_by).get("model") == 1  # the NMS's output; the rest follow by inference
    ((tensor, how),) = processed.shapes.by_data
    assert tensor == "selected"
    assert how.startswith("its shape depends on the value of runtime input 'images': ")
    assert f"its run on the benchmark inputs gave, {kept[0]}x3, and on the values its inputs had in that run" in how


def test_a_model_the_memory_guard_refuses_to_run_keeps_the_length_unknown_with_the_reason(detector):
    bound = fold_and_infer(apply_binding(detector, bind_shapes(detector, "d.onnx", 1)), "d.onnx")
    # room for the NonMaxSuppression alone (its 7 KB of boxes and scores, and copies), not for the model
    # (its 12 KB image and copies, its weights twice)
    small = SystemMemory(physical=44_000, available=None)
    _, report = resolve_shapes(bound, "d.onnx", memory=lambda: small)
    reasons = dict(report.unresolved)
    assert "the model was not run to see its length" in reasons["selected"], reasons
    assert report.by_data == () and "model" not in dict(report.shaped_by)


def test_nonzero_of_data_is_shaped_by_the_run_and_so_is_what_reads_it(build_model, process_proto):
    model = build_model(
        [
            helper.make_node("Relu", ["x"], ["pos"]),
            helper.make_node("NonZero", ["pos"], ["where"]),
            helper.make_node("Neg", ["where"], ["out"]),
        ],
        [("x", F, [3, 4])],
        [("out", I64, None)],
    )
    processed = process_proto(model)
    session = ort.InferenceSession(processed.proto.SerializeToString(), providers=["CPUExecutionProvider"])
    found = session.run(None, model_feeds(processed.proto))[0].shape  # floats in [-1, 1): about half kept
    layers = {layer.op_type: layer for layer in processed.graph.layers}
    assert layers["NonZero"].outputs[0].shape == layers["Neg"].outputs[0].shape == found
    assert [t for t, _ in processed.shapes.by_data] == ["where"] and processed.graph.unsupported == ()


def test_the_shape_of_a_tensor_the_data_sizes_is_a_runtime_value_until_the_run_gives_it(build_model, process_proto):
    """A ``Shape`` of the boxes NonZero keeps, made into a ``ConstantOfShape`` (torchvision's RoI pooler): its
    value waits for the model's run. It was taken as a constant, the ``ConstantOfShape`` shaped from synthetic
    values (one box): a Faster R-CNN whose bound model ONNX Runtime then refused to load."""
    model = build_model(
        [
            helper.make_node("Relu", ["x"], ["pos"]),
            helper.make_node("NonZero", ["pos"], ["where"]),
            helper.make_node("Shape", ["where"], ["shape"]),
            helper.make_node("Gather", ["shape", "one"], ["kept"]),
            helper.make_node("Unsqueeze", ["kept", "axes"], ["kept1"]),
            helper.make_node("Concat", ["kept1", "width"], ["dims"], axis=0),
            helper.make_node("ConstantOfShape", ["dims"], ["zeros"]),
            helper.make_node("Cast", ["where"], ["wf"], to=F),
            helper.make_node("Transpose", ["wf"], ["boxes"], perm=[1, 0]),
            helper.make_node("Concat", ["zeros", "boxes"], ["out"], axis=1),
        ],
        [("x", F, [1, 64])],
        [("out", F, None)],
        {"one": np.array(1, np.int64), "axes": np.array([0], np.int64), "width": np.array([4096], np.int64)},
    )
    processed = process_proto(model)
    session = ort.InferenceSession(processed.proto.SerializeToString(), providers=["CPUExecutionProvider"])
    found = session.run(None, model_feeds(processed.proto))[0].shape  # floats in [-1, 1): about half kept
    (last,) = [layer for layer in processed.graph.layers if layer.outputs[0].name == "out"]
    assert 1 < found[0] < 64 and found[1] == 4098
    assert last.outputs[0].shape == found
    (zeros,) = [vi for vi in processed.proto.graph.value_info if vi.name == "zeros"]  # too large to fold: kept
    assert [d.dim_value for d in zeros.type.tensor_type.shape.dim] == [found[0], 4096]
    # not from ONNX Runtime running the ConstantOfShape on synthetic values (a 1x1 there; in a Faster R-CNN
    # the 1 stuck, and its bound model did not load)
    assert "onnxruntime" not in dict(processed.shapes.shaped_by)
    assert processed.graph.unsupported == ()


def test_what_nonzero_counts_is_fed_as_data_and_at_the_length_the_model_gave(build_model, process_proto):
    """A mask NonZero counts (through ``And``) is fed ones, not the zeros of a setting; a layer that counts a
    mask of its own is fed exactly the count the model's run gave. Zeros counted none: ONNX Runtime refused
    the second call of a layer whose network holds the model's length (a torchvision detector's NonZero)."""
    from benanza.bench.generate import plan_model, specs_for_plan
    from benanza.bench.spec import SpecKind
    from benanza.runtimes.onnxruntime import OnnxRuntimeCPU

    model = build_model(
        [
            helper.make_node("Greater", ["x", "half"], ["high"]),
            helper.make_node("And", ["high", "valid"], ["keep"]),
            helper.make_node("NonZero", ["keep"], ["where"]),
            helper.make_node("Neg", ["where"], ["out"]),
        ],
        [("x", F, [1, 64]), ("valid", TensorProto.BOOL, [1, 64])],
        [("out", I64, None)],
        {"half": np.array(0.5, np.float32)},
    )
    processed = process_proto(model)
    feeds = model_feeds(processed.proto)
    assert feeds["valid"].all()  # a mask, all valid
    kept = int(np.count_nonzero((feeds["x"] > 0.5) & feeds["valid"]))  # about a quarter of floats in [-1, 1)
    layers = {layer.op_type: layer for layer in processed.graph.layers}
    assert layers["NonZero"].outputs[0].shape == (2, kept) and 0 < kept < 64
    runtime = OnnxRuntimeCPU(threads=1)
    plan = plan_model(processed, runtime)
    (spec,) = [s for s in specs_for_plan(plan, runtime.name, runtime.variant()) if s.label.startswith("NonZero")]
    assert spec.kind is SpecKind.LAYER
    prepared = runtime.prepare(spec)
    for _ in range(3):  # the first call of an empty count passed, the next were refused
        prepared.call()
    (fed,) = [a for name, a in prepared._feeds.items() if a.dtype == bool]
    assert int(np.count_nonzero(fed)) == kept


def test_a_mask_is_fed_so_that_what_nonzero_counts_is_not_empty(build_model):
    """Ones through ``And``; zeros through ``Not``, which makes them the ones NonZero counts."""
    from benanza.model.run_values import input_fills

    model = build_model(
        [
            helper.make_node("And", ["a", "b"], ["ab"]),
            helper.make_node("NonZero", ["ab"], ["both"]),
            helper.make_node("Not", ["c"], ["not_c"]),
            helper.make_node("NonZero", ["not_c"], ["neither"]),
        ],
        [("a", TensorProto.BOOL, [8]), ("b", TensorProto.BOOL, [8]), ("c", TensorProto.BOOL, [8])],
        [("both", I64, None), ("neither", I64, None)],
    )
    assert input_fills(model) == {"a": 1, "b": 1, "c": 0}


def test_a_length_a_setting_fed_at_run_time_decides_is_not_run(build_model, process_proto):
    """NonMaxSuppression's max_output_boxes_per_class fed as an input is a setting, not data: fed zeros as every
    setting is, the run would keep no box; it stays unknown, naming the input."""
    model = build_model(
        [helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_boxes"], ["selected"])],
        [("boxes", F, [1, 6, 4]), ("scores", F, [1, 2, 6]), ("max_boxes", I64, [1])],
        [("selected", I64, None)],
    )
    processed = process_proto(model)
    assert processed.shapes.by_data == ()
    assert "runtime input 'max_boxes'" in processed.shapes.reason("selected")


def test_a_length_random_values_decide_is_not_run(build_model, process_proto):
    """Which elements of random data are non-zero is the random draw's: no run of the model says more."""
    model = build_model(
        [
            helper.make_node("RandomUniformLike", ["x"], ["r"], low=-1.0, high=1.0),
            helper.make_node("Relu", ["r"], ["pos"]),
            helper.make_node("NonZero", ["pos"], ["where"]),
        ],
        [("x", F, [2, 8])],
        [("where", I64, None)],
    )
    processed = process_proto(model)
    assert processed.shapes.by_data == ()
    assert "random values" in processed.shapes.reason("where")


def test_the_main_job_bounds_a_detector_that_ends_in_nms(detector, tmp_path):
    path = tmp_path / "detector.onnx"
    onnx.save(detector, path)
    (row,) = json_command(ENV, "run", path, "--db", f"sqlite:///{tmp_path / 'd.db'}", *FAST)
    assert row["coverage"] == 1.0 and row["missing"] == [] and row["coverage_notes"] == []
    assert row["sequential_ms"] is not None and row["e2e_ms"] is not None


def _run_values(model: onnx.ModelProto, names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(names, feeds)


def _benchmark_outputs(processed, op_type: str) -> list[np.ndarray]:
    """What the execution unit holding the model's one ``op_type`` layer gives, built and fed as its benchmark is."""
    plan = plan_model(processed, OnnxRuntimeCPU(threads=1), (1,))
    (layer,) = [layer for layer in plan.graph.layers if layer.op_type == op_type]
    network = plan.networks[plan.unit_keys[next(u for u, m in enumerate(plan.units) if layer.index in m)]]
    model = build_onnx(network)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds_for(model))


def test_an_nms_is_benchmarked_on_the_boxes_and_scores_of_the_models_run(detector, process_proto):
    """An NMS's work is its boxes': how many pass its threshold, how many it keeps, how they overlap. On synthetic
    boxes a YOLO11's top-level NMS (an ultralytics export with ``nms=True``) took 18 ms where its model's own boxes
    took 1.7 ms, and its lower bound came out twice its end to end. Its data inputs carry the values the model's
    run gave them, so its benchmark does the model's work and keeps as many boxes as the model did."""
    processed = process_proto(detector, 1)
    (nms,) = [layer for layer in processed.graph.layers if layer.op_type == "NonMaxSuppression"]
    carried = {i.tensor.name: i.value for i in nms.inputs if i.kind is InputKind.ACTIVATION}
    assert set(carried) == {"boxes", "scores"}
    boxes, scores, kept = _run_values(processed.proto, ["boxes", "scores", "selected"], model_feeds(processed.proto))
    # the model's run's (its session's kernels may round the last bit otherwise than this one's)
    np.testing.assert_allclose(np.array(carried["boxes"]).reshape(boxes.shape), boxes, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(carried["scores"]).reshape(scores.shape), scores, rtol=1e-5, atol=1e-6)
    assert nms.data_decided
    (selected,) = _benchmark_outputs(processed, "NonMaxSuppression")
    np.testing.assert_array_equal(selected, kept)  # the boxes the model kept (synthetic boxes keep others)


def test_the_values_an_nms_read_are_in_its_key_but_not_in_the_models(detector, process_proto):
    import dataclasses

    from benanza.model.extract import extract

    processed = process_proto(detector, 1)
    report = processed.shapes
    other = dataclasses.replace(report, work_values=tuple((x, v * 0.999) for x, v in report.work_values))
    graphs = [extract(processed.proto, "m", "mem.onnx", shapes=r) for r in (report, other)]
    keys = [next(layer for layer in g.layers if layer.op_type == "NonMaxSuppression").layer_key for g in graphs]
    assert keys[0] != keys[1]
    assert graphs[0].graph_key == graphs[1].graph_key == processed.graph.graph_key


def test_an_nms_reading_more_than_benanza_carries_is_benchmarked_on_synthetic_values_and_says_so(
    detector, process_proto, monkeypatch
):
    """Left out, a detector whose NMS reads more than benanza carries (a tf2onnx EfficientDet's 49,104 anchors x 90
    classes) lost the bound it had: benchmarked on synthetic boxes as before, its note says the figure is of other
    work than the model's."""
    from benanza.model import extract, resolve

    monkeypatch.setattr(resolve, "WORK_VALUE_MAX_ELEMENTS", 8)
    monkeypatch.setattr(extract, "WORK_VALUE_MAX_ELEMENTS", 8)
    processed = process_proto(detector, 1)
    assert processed.graph.unsupported == ()
    (nms,) = [layer for layer in processed.graph.layers if layer.op_type == "NonMaxSuppression"]
    assert all(i.value is None for i in nms.inputs if i.kind is InputKind.ACTIVATION)
    assert nms.data_decided  # its length is still the run's
    assert processed.shapes.data_work == () and processed.shapes.work_values == ()
    (note,) = [n for n in processed.notes() if "output 'selected'" in n]
    assert "on synthetic values (what it reads holds" in note
    assert "more than benanza carries into a benchmark (8)): the figure is of other work" in note


def batched_nms(build_model) -> onnx.ModelProto:
    """torchvision's ``batched_nms`` as it exports: ``If(no box left?)`` over the boxes a ``NonZero`` of the
    scores kept, its else branch an NMS of them (here: the boxes above a second cut), what it keeps gathered and
    projected. ONNX cannot shape the ``If``: its branches give other lengths."""
    empty = helper.make_node("Constant", [], ["none"], value=onnx.numpy_helper.from_array(np.zeros(0, np.int64)))
    suppress = [
        helper.make_node("Greater", ["kept_scores", "second_cut"], ["strong"]),
        helper.make_node("NonZero", ["strong"], ["strong_at"]),
        helper.make_node("Squeeze", ["strong_at", "zero"], ["survivors"]),
    ]
    out = helper.make_tensor_value_info
    nodes = [
        helper.make_node("Greater", ["scores", "cut"], ["keep"]),
        helper.make_node("NonZero", ["keep"], ["at"]),
        helper.make_node("Squeeze", ["at", "zero"], ["idx"]),
        helper.make_node("Gather", ["boxes", "idx"], ["kept_boxes"]),
        helper.make_node("Gather", ["scores", "idx"], ["kept_scores"]),
        helper.make_node("Size", ["kept_scores"], ["count"]),
        helper.make_node("Equal", ["count", "nothing"], ["no_box_left"]),
        helper.make_node(
            "If",
            ["no_box_left"],
            ["chosen"],
            name="batched_nms",
            then_branch=helper.make_graph([empty], "then", [], [out("none", I64, [0])]),
            else_branch=helper.make_graph(suppress, "else", [], [out("survivors", I64, None)]),
        ),
        helper.make_node("Gather", ["kept_boxes", "chosen"], ["final"]),
        helper.make_node("MatMul", ["final", "w"], ["y"]),
    ]
    inits = {
        "cut": np.array(0.5, np.float32),
        "second_cut": np.array(0.75, np.float32),
        "nothing": np.array(0, np.int64),
        "zero": np.array([0], np.int64),
        "w": np.ones((4, 8), np.float32),
    }
    return build_model(nodes, [("scores", F, [64]), ("boxes", F, [64, 4])], [("y", F, None)], inits)


def test_an_if_whose_branch_the_data_decides_is_shaped_by_the_run_and_benchmarked_on_its_values(
    build_model, process_proto
):
    """Before: the If (torchvision's batched_nms) stayed unshaped, and with it everything after it: a Faster
    R-CNN's whole second stage (63% covered), a Mask R-CNN's (53%). Shaped by the model's run, what reads it
    is benchmarked; the If itself is benchmarked on what it read in that run (its condition and the scores its
    branch suppresses), carried by value: on synthetic boxes an SSDlite's NMS did five times the whole model's
    work."""
    processed = process_proto(batched_nms(build_model))
    assert processed.graph.unsupported == ()
    assert processed.shapes.data_work == ("chosen",)
    (matmul,) = [layer for layer in processed.graph.layers if layer.op_type == "MatMul"]
    assert matmul.inputs[0].tensor.shape[1] == 4 and matmul.output_shapes[0][1] == 8
    (branch,) = [layer for layer in processed.graph.layers if layer.op_type == "If"]
    carried = {i.tensor.name: i.value for i in branch.inputs if i.kind is InputKind.ACTIVATION}
    assert set(carried) == {"kept_scores"}  # what its else branch reads
    assert branch.inputs[0].value == (False,)  # its condition: constant once the run shaped what it counts
    assert len(carried["kept_scores"]) > 0
    assert all(v > 0.5 for v in carried["kept_scores"])  # the scores the model kept, not synthetic ones
    (note,) = [note for note in processed.notes() if "the If itself on the values its inputs had" in note]
    assert note.startswith("batched_nms: output 'chosen': ")  # named by its node


def test_a_data_decided_if_fed_other_scores_is_another_benchmark(build_model, tmp_path):
    """The If's key covers the values it read: given scores (``--input``) that keep other boxes, another key."""
    path = tmp_path / "nms.onnx"
    onnx.save(batched_nms(build_model), path)
    scores = np.linspace(0.0, 1.0, 64, dtype=np.float32)  # 32 above the cut, 16 of them above the second
    np.save(tmp_path / "scores.npy", scores)
    synthetic = process_model(path, None)
    given = process_model(path, None, BindingRequest.parse(inputs=[f"scores={tmp_path / 'scores.npy'}"]))

    def branch(processed):
        (layer,) = [layer for layer in processed.graph.layers if layer.op_type == "If"]
        return layer

    carried = {i.tensor.name: i.value for i in branch(given).inputs if i.kind is InputKind.ACTIVATION}
    assert carried["kept_scores"] == tuple(float(v) for v in scores[scores > 0.5])
    assert branch(given).layer_key != branch(synthetic).layer_key


def test_a_data_decided_if_benchmarked_alone_takes_the_branch_and_gives_the_length_the_model_did(
    build_model, process_proto
):
    """Built as its benchmark is (its inputs initializers holding the run's values), the If does the model's
    work: its output has the length the model's run gave, where synthetic scores would keep others."""
    processed = process_proto(batched_nms(build_model))
    (branch,) = [layer for layer in processed.graph.layers if layer.op_type == "If"]
    (out,) = _benchmark_outputs(processed, "If")
    assert out.shape == branch.outputs[0].shape


def test_the_main_job_measures_a_data_decided_if_too_and_the_model_has_its_bound(build_model, tmp_path):
    path = tmp_path / "nms.onnx"
    onnx.save(batched_nms(build_model), path)
    (row,) = json_command(ENV, "run", path, "--db", f"sqlite:///{tmp_path / 'n.db'}", *FAST)
    assert row["missing"] == [] and row["coverage"] == 1.0
    assert row["e2e_ms"] is not None and row["sequential_ms"] is not None


def test_a_layer_table_shows_many_carried_values_as_a_count_and_a_digest():
    """`models inspect -f json` of an SSDlite printed the 27,000 scores its NMS If reads: people read that table."""
    from benanza.model.graph import LayerInput, TensorSpec

    many = LayerInput(TensorSpec("s", (100,), "float32"), InputKind.ACTIVATION, tuple(float(i) for i in range(100)))
    shown = many.to_dict()
    assert "value" not in shown and shown["value_elements"] == 100 and len(shown["value_sha256"]) == 16
    few = LayerInput(TensorSpec("n", (2,), "int64"), InputKind.ACTIVATION, (3, 4))
    assert few.to_dict()["value"] == [3, 4]


def test_the_values_a_data_decided_if_read_are_in_its_key_but_not_in_the_models(build_model, process_proto):
    """Another machine's run (other CPU kernels, another ONNX Runtime release) may give the If other values:
    another benchmark of it, not another model (history and comparisons across systems follow the model)."""
    import dataclasses

    from benanza.model.extract import extract

    processed = process_proto(batched_nms(build_model))
    report = processed.shapes
    other = dataclasses.replace(report, work_values=tuple((x, v * 0.999) for x, v in report.work_values))
    graphs = [extract(processed.proto, "m", "mem.onnx", shapes=r) for r in (report, other)]
    ifs = [next(layer for layer in g.layers if layer.op_type == "If") for g in graphs]
    assert ifs[0].layer_key != ifs[1].layer_key
    assert graphs[0].graph_key == graphs[1].graph_key == processed.graph.graph_key


def test_a_data_decided_if_only_starts_a_sequence_so_that_it_is_fed_its_runs_values(build_model, process_proto):
    """DLBricks sequences: an If after its producer in one window would be fed what the window computes from
    synthetic data (an NMS of random boxes), not what it read in the model's run."""
    processed = process_proto(batched_nms(build_model))
    plan = plan_model(processed, NullRuntime(), (1, 2, 3))
    (branch,) = [layer for layer in plan.graph.layers if layer.op_type == "If"]
    assert branch.data_decided
    for g in (2, 3):
        for members, key in zip(plan.sequences[g], plan.sequence_keys[g], strict=True):
            if branch.index in members:
                assert members[0] == branch.index, (g, members)
                network = plan.networks[key]
                assert all(t.value is not None for t in network.inputs if t.dtype == "float32"), network.inputs


def test_what_a_data_decided_if_reads_beyond_the_limit_is_not_kept_and_the_if_says_why(
    build_model, process_proto, monkeypatch
):
    from benanza.model import extract, resolve

    monkeypatch.setattr(resolve, "WORK_VALUE_MAX_ELEMENTS", 8)
    monkeypatch.setattr(extract, "WORK_VALUE_MAX_ELEMENTS", 8)
    processed = process_proto(batched_nms(build_model))
    assert processed.shapes.work_values == ()  # nothing kept that would not be carried
    (missing,) = processed.graph.unsupported
    assert missing.op_type == "If" and "more than benanza carries into a benchmark (8)" in missing.reason
    assert any(layer.op_type == "MatMul" for layer in processed.graph.layers)  # what reads it, still measured
    (note,) = [n for n in processed.notes() if n.startswith("batched_nms: output 'chosen'")]
    assert "where they can be carried (else it is reported not benchmarked" in note


def test_every_sequence_of_a_detector_runs_at_the_lengths_its_model_gave(build_model, process_proto):
    """A NonZero after what computes its condition, in one window (a torchvision Faster R-CNN's
    Reshape+Greater+NonZero), counted what the window made of synthetic data, not the model's length: ONNX
    Runtime refused the sequence ("invalid dimensions for output") and the model had no composition at G=3.
    A layer whose length (or branch) the model's data decides only starts a window: fed so that it gives the
    model's length (``data_length_feeds``), every sequence runs."""
    from benanza.bench.build import data_length_feeds

    processed = process_proto(batched_nms(build_model))
    plan = plan_model(processed, OnnxRuntimeCPU(threads=1), (1, 2, 3))
    decided = {layer.index for layer in plan.graph.layers if layer.data_decided}
    assert {plan.graph.layers[i].op_type for i in decided} >= {"NonZero", "If"}
    for g in (2, 3):
        for members, key in zip(plan.sequences[g], plan.sequence_keys[g], strict=True):
            assert not decided & set(members[1:]), (g, members)
            network = plan.networks[key]
            model = build_onnx(network)
            session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            outs = session.run(None, data_length_feeds(network, feeds_for(model)))
            declared = [network.nodes[o.node].outputs[o.output].shape for o in network.outputs]
            assert [o.shape for o in outs] == [tuple(d) for d in declared], (g, members)


def resizing_loop(build_model, trips_from_data: bool = False) -> onnx.ModelProto:
    """A Keypoint R-CNN's per-box Loop in small: each iteration resizes an image by scales the data computes
    (``[1, 1, s, s]``, s = mean(relu(x)) + 1), 3 times or ``ArgMax(x) + 1`` times."""
    body = helper.make_graph(
        [
            # linear: ONNX Runtime refuses any scale of the batch and channel dimensions but 1, so no synthetic
            # scales (random, or zeros) run it, as none ran the Keypoint R-CNN's
            helper.make_node("Resize", ["img", "", "scales"], ["big"], mode="linear"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("big", F, None),
        ],
    )
    counted = [
        helper.make_node("ArgMax", ["x"], ["at"], keepdims=0),
        helper.make_node("Add", ["at", "one_int"], ["trips"]),
    ]
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("ReduceMean", ["r"], ["m"], keepdims=1),
        helper.make_node("Add", ["m", "one"], ["s"]),
        helper.make_node("Concat", ["ones", "s", "s"], ["scales"], axis=0),
        *(counted if trips_from_data else []),
        helper.make_node("Loop", ["trips", "go"], ["stacked"], body=body, name="per_box"),
        helper.make_node("ReduceSum", ["stacked"], ["y"], keepdims=0),
    ]
    inits = {
        "one": np.ones(1, np.float32),
        "ones": np.ones(2, np.float32),
        "img": np.ones((1, 1, 2, 2), np.float32),
        "go": np.array(True),
        **({"one_int": np.array(1, np.int64)} if trips_from_data else {"trips": np.array(3, np.int64)}),
    }
    return build_model(nodes, [("x", F, [8])], [("y", F, None)], inits)


def test_a_loop_whose_work_the_data_decides_is_shaped_by_the_run_and_benchmarked_on_its_values(
    build_model, process_proto
):
    """A Keypoint R-CNN's per-box Loop resizes by the boxes' sizes: on synthetic values ONNX Runtime refused
    it ("Scale value should be greater than 0") and it, and all after it, had no shape. Like a data-decided
    If, it is shaped by the model's run and benchmarked on what it read there."""
    processed = process_proto(resizing_loop(build_model))
    assert processed.graph.unsupported == ()
    (loop,) = [layer for layer in processed.graph.layers if layer.op_type == "Loop"]
    assert loop.data_decided
    (scales,) = [i for i in loop.inputs if i.tensor.name == "scales"]
    assert scales.value[:2] == (1.0, 1.0) and scales.value[2] == scales.value[3] > 1.0  # the run's, not synthetic
    side = int(2 * scales.value[2])
    assert loop.outputs[0].shape == (3, 1, 1, side, side)
    plan = plan_model(processed, OnnxRuntimeCPU(threads=1), (1,))
    network = plan.networks[loop.layer_key]
    model = build_onnx(network)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, feeds_for(model))
    assert out.shape == loop.outputs[0].shape


def per_image_nms_loop(build_model) -> onnx.ModelProto:
    """A per-image NMS in a Loop over the batch, what it keeps concatenated in a loop-carried tensor (TF's
    ``map_fn`` as tf2onnx exports it): synthetic values run it, and its length follows them."""
    body = helper.make_graph(
        [
            helper.make_node("Gather", ["boxes", "i"], ["b_i"], axis=0),
            helper.make_node("Gather", ["scores", "i"], ["s_i"], axis=0),
            helper.make_node("Unsqueeze", ["b_i", "zero"], ["b1"]),
            helper.make_node("Unsqueeze", ["s_i", "zero"], ["s1"]),
            helper.make_node("NonMaxSuppression", ["b1", "s1", "max_boxes", "iou", "score_min"], ["sel"]),
            helper.make_node("Concat", ["kept_in", "sel"], ["kept_out"], axis=0),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "per_image",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("kept_in", I64, ["K", 3]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("kept_out", I64, ["K2", 3]),
        ],
    )
    nodes = [
        helper.make_node("Conv", ["images", "w"], ["f"]),
        helper.make_node("Sigmoid", ["f"], ["p"]),
        helper.make_node("Reshape", ["p", "to_boxes"], ["boxes"]),  # [N, 64, 4]
        helper.make_node("Reshape", ["p", "to_scores"], ["scores"]),  # [N, 4, 64]
        helper.make_node("Shape", ["images"], ["dims"]),
        helper.make_node("Gather", ["dims", "first"], ["n"], axis=0),
        helper.make_node("Loop", ["n", "true", "none"], ["kept"], name="per_image", body=body),
        helper.make_node("Cast", ["kept"], ["y"], to=F),
    ]
    inits = {
        "w": np.random.default_rng(0).standard_normal((4, 3, 1, 1)).astype(np.float32),
        "to_boxes": np.array([0, -1, 4], np.int64),
        "to_scores": np.array([0, 4, -1], np.int64),
        "zero": np.array([0], np.int64),
        "first": np.array(0, np.int64),
        "true": np.array(True),
        "none": np.zeros((0, 3), np.int64),
        "max_boxes": np.array([10], np.int64),
        "iou": np.array([0.5], np.float32),
        "score_min": np.array([0.3], np.float32),
    }
    return build_model(nodes, [("images", F, ["N", 3, 8, 8])], [("y", F, ["K", 3])], inits, check=False)


def test_a_per_image_nms_in_a_loop_is_shaped_by_the_run_and_benchmarked_on_its_values(build_model, process_proto):
    """Before: synthetic values ran the Loop and changed its length, so it was taken as a length a setting
    decides, and it and all after it had no shape ("its shape depends on the value of runtime input"): no bound.
    Its body holds an op whose length its data decides (``walks.LENGTH_BY_DATA``): the model's run shapes it,
    and its benchmark gets the boxes and scores of that run, so it keeps what the model kept."""
    processed = process_proto(per_image_nms_loop(build_model), 2)
    assert processed.graph.unsupported == ()
    (loop,) = [layer for layer in processed.graph.layers if layer.op_type == "Loop"]
    assert loop.data_decided
    carried = {i.tensor.name for i in loop.inputs if i.kind is InputKind.ACTIVATION and i.value is not None}
    assert carried == {"boxes", "scores"}  # what its body reads of the outer graph, by value
    kept = _run_values(processed.proto, ["kept"], model_feeds(processed.proto))[0]
    assert loop.outputs[0].shape == kept.shape and kept.shape[0] > 0
    (out,) = _benchmark_outputs(processed, "Loop")
    np.testing.assert_array_equal(out, kept)  # the model's work, not synthetic boxes'


def per_image_nms_count_loop(build_model) -> onnx.ModelProto:
    """``per_image_nms_loop`` writing per image how many boxes its NMS kept (a scan output of one value each)."""
    model = per_image_nms_loop(build_model)
    body = next(a.g for a in model.graph.node[6].attribute if a.name == "body")
    # per image: the boxes kept, counted (a scan output of one value each), no loop-carried concatenation
    del body.node[5:]
    body.node.extend(
        [
            helper.make_node("Cast", ["sel"], ["self"], to=F),
            helper.make_node("ReduceSum", ["self"], ["count"], keepdims=0),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ]
    )
    del body.input[2:], body.output[1:]
    body.output.append(helper.make_tensor_value_info("count", F, []))
    loop = model.graph.node[6]
    del loop.input[2:]
    model.graph.node[7].input[0] = "kept"
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("y", F, ["N"]))
    return model


def test_a_loop_whose_body_holds_an_nms_is_benchmarked_on_its_runs_values_though_its_length_is_fixed(
    build_model, process_proto
):
    """What the Loop writes per image (how many boxes its NMS kept) has a fixed length: nothing sent it to the
    model's run, and its benchmark ran the NMS on synthetic boxes, other work than the model's (as a top-level
    NMS did). Its body holds an op whose work its data decides (``walks.WORK_BY_DATA``): it is benchmarked on
    what it read in the run, and gives what the model gave."""
    processed = process_proto(per_image_nms_count_loop(build_model), 2)
    assert processed.graph.unsupported == ()
    (layer,) = [layer for layer in processed.graph.layers if layer.op_type == "Loop"]
    assert layer.data_decided and layer.outputs[0].shape == (2,)
    carried = {i.tensor.name for i in layer.inputs if i.kind is InputKind.ACTIVATION and i.value is not None}
    assert carried == {"boxes", "scores"}
    kept = _run_values(processed.proto, ["kept"], model_feeds(processed.proto))[0]
    (out,) = _benchmark_outputs(processed, "Loop")
    np.testing.assert_array_equal(out, kept)  # per image, the boxes the model's NMS kept


def test_a_loop_holding_an_nms_that_reads_more_than_benanza_carries_is_benchmarked_on_synthetic_values(
    build_model, process_proto, monkeypatch
):
    """As before its run's values were carried, not left out: it is no data-decided layer then."""
    from benanza.model import extract, resolve

    monkeypatch.setattr(resolve, "WORK_VALUE_MAX_ELEMENTS", 8)
    monkeypatch.setattr(extract, "WORK_VALUE_MAX_ELEMENTS", 8)
    processed = process_proto(per_image_nms_count_loop(build_model), 2)
    assert processed.graph.unsupported == ()
    (layer,) = [layer for layer in processed.graph.layers if layer.op_type == "Loop"]
    assert not layer.data_decided
    assert all(i.value is None for i in layer.inputs if i.kind is InputKind.ACTIVATION)
    (note,) = [n for n in processed.notes() if "output 'kept'" in n]
    assert "the NonMaxSuppression in its Loop's body does the work its data decides: benchmarked on synthetic" in note


def test_a_length_given_integers_decide_is_carried_and_starts_no_sequence(build_model, tmp_path):
    """``--input n=30`` shapes a Range to n + 1, and the length travels by value into every benchmark that
    computes it: unlike a count the data decides, nothing forces that Range to start a sequence."""
    nodes = [
        helper.make_node("Add", ["n", "one"], ["m"]),
        helper.make_node("Range", ["zero", "m", "one"], ["idx"]),
        helper.make_node("Cast", ["idx"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Relu", ["f"], ["r"]),
        helper.make_node("Add", ["r", "x"], ["y"]),
    ]
    inits = {"zero": np.array(0, np.int64), "one": np.array(1, np.int64)}
    onnx.save(
        build_model(nodes, [("x", F, [1]), ("n", TensorProto.INT64, [])], [("y", F, None)], inits), tmp_path / "r.onnx"
    )
    np.save(tmp_path / "n.npy", np.array(30, np.int64))
    processed = process_model(tmp_path / "r.onnx", None, BindingRequest.parse(inputs=[f"n={tmp_path / 'n.npy'}"]))
    (ranged,) = [layer for layer in processed.graph.layers if layer.op_type == "Range"]
    assert ranged.outputs[0].shape == (31,) and not any(layer.data_decided for layer in processed.graph.layers)


def test_a_loop_whose_trip_count_the_data_decides_is_benchmarked_at_its_runs_count(build_model, process_proto):
    """The Loop above run as many times as the data says (``ArgMax(x) + 1``): its trip count is what it read in
    the model's run, carried into its benchmark like the rest. A trip count fed as a model input stays a runtime
    value (``test_control_flow``): that is its caller's setting, not data; so does a Loop that synthetic values
    run and whose length follows them (a Range's expansion, to its limit: ONNX's conformance cases)."""
    processed = process_proto(resizing_loop(build_model, trips_from_data=True))
    assert processed.graph.unsupported == ()
    (loop,) = [layer for layer in processed.graph.layers if layer.op_type == "Loop"]
    (trips,) = [i.value for i in loop.inputs if i.tensor.name == "trips"]
    assert loop.outputs[0].shape[0] == trips[0] >= 1


def test_a_zeros_accumulator_keeps_its_zeros_in_the_run_that_gives_lengths(build_model, tmp_path):
    """A MoE's torch.zeros accumulator (a float ConstantOfShape) was filled with random values in the model's
    run, as a weight stand-in is: its routing's NonZero counted other tokens than the model does, and its end
    to end failed ("Shape mismatch attempting to re-use buffer"). Fed 0.4 everywhere, 0.4 + 0 > 0.5 nowhere."""
    model = build_model(
        [
            helper.make_node(
                "ConstantOfShape", ["shape"], ["acc"], value=onnx.numpy_helper.from_array(np.zeros(1, np.float32))
            ),
            helper.make_node("Add", ["x", "acc"], ["s"]),
            helper.make_node("Greater", ["s", "half"], ["g"]),
            helper.make_node("NonZero", ["g"], ["at"]),
        ],
        [("x", F, [64])],
        [("at", I64, None)],
        {"shape": np.array([64], np.int64), "half": np.array(0.5, np.float32)},
    )
    path = tmp_path / "acc.onnx"
    onnx.save(model, path)
    np.save(tmp_path / "x.npy", np.full(64, 0.4, np.float32))
    processed = process_model(path, None, BindingRequest.parse(inputs=[f"x={tmp_path / 'x.npy'}"]))
    (nonzero,) = [layer for layer in processed.graph.layers if layer.op_type == "NonZero"]
    assert nonzero.outputs[0].shape == (1, 0)
