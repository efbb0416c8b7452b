"""Models without their weight data (structure only) and models with external data files.

A structure-only model is saved with external data and shipped without the data file: its
large tensors have shapes and dtypes but no values. benanza loads it, processes it like any
other model, synthesises its weights in benchmarks and where ONNX Runtime runs it whole.
A model whose external data file is there loads its real data.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from benanza.bench.build import build_onnx
from benanza.cli import app
from benanza.errors import ModelError
from benanza.model.graph import InputKind
from benanza.model.load import has_data, load_model, structure_only, with_synthetic_weights
from benanza.model.network import network_of
from benanza.model.process import process_model

F = TensorProto.FLOAT
DATA = "model.onnx.data"
# Conv weight (1728 B) and the MatMul weight behind a Transpose (2048 B) go to the data file;
# the Conv bias (64 B) stays in the model, by value.
ARRAYS = {
    "w": np.random.default_rng(0).random((16, 3, 3, 3), dtype=np.float32),
    "b": np.random.default_rng(1).random(16, dtype=np.float32),
    "w2": np.random.default_rng(2).random((32, 16), dtype=np.float32),
}


def small_net() -> onnx.ModelProto:
    """``x[N,3,16,16]`` -> Conv(w, b) -> Relu -> GlobalAveragePool -> Flatten -> MatMul(Transpose(w2))."""
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Transpose", ["w2"], ["w2t"], perm=[1, 0]),
        helper.make_node("MatMul", ["f", "w2t"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "small_net",
        [helper.make_tensor_value_info("x", F, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("y", F, ["N", 32])],
        [numpy_helper.from_array(v, k) for k, v in ARRAYS.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def save_external(folder: Path, *, keep_data: bool) -> Path:
    path = folder / "model.onnx"
    onnx.save(small_net(), str(path), save_as_external_data=True, location=DATA, size_threshold=1024)
    assert (folder / DATA).is_file()
    if not keep_data:
        (folder / DATA).unlink()
    return path


@pytest.fixture(scope="module")
def stripped(tmp_path_factory) -> Path:
    return save_external(tmp_path_factory.mktemp("stripped"), keep_data=False)


@pytest.fixture(scope="module")
def with_data(tmp_path_factory) -> Path:
    return save_external(tmp_path_factory.mktemp("with_data"), keep_data=True)


def test_a_structure_only_model_loads(stripped):
    model = load_model(stripped)
    absent = {t.name for t in model.graph.initializer if not has_data(t)}
    assert absent == {"w", "w2"}
    assert structure_only(model) == 2
    assert numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "b")).tolist() == pytest.approx(
        ARRAYS["b"].tolist()
    )


def test_a_model_with_its_data_file_loads_the_real_data(with_data):
    model = load_model(with_data)
    assert structure_only(model) == 0
    for tensor in model.graph.initializer:
        assert has_data(tensor)
        np.testing.assert_array_equal(numpy_helper.to_array(tensor), ARRAYS[tensor.name])
    assert with_synthetic_weights(model) is model  # nothing to synthesise


def test_a_data_file_that_cannot_be_read_is_a_one_line_error(tmp_path):
    path = save_external(tmp_path, keep_data=True)
    (tmp_path / DATA).write_bytes(b"\0" * 100)  # shorter than the offsets the model names
    with pytest.raises(ModelError) as info:
        load_model(path)
    text = str(info.value)
    assert text.startswith(f"{path}: ") and "\n" not in text, text


def test_a_structure_only_model_processes_silently_with_its_weights_as_weights(stripped, with_data, caplog):
    caplog.set_level(logging.WARNING)
    processed = process_model(stripped, batch=1)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [r.getMessage() for r in caplog.records]
    graph = processed.graph
    assert [layer.op_type for layer in graph.layers] == ["Conv", "Relu", "GlobalAveragePool", "Flatten", "MatMul"]
    assert not graph.unsupported
    conv, matmul = graph.layers[0], graph.layers[-1]
    assert [(i.kind, i.tensor.shape) for i in conv.inputs[1:]] == [
        (InputKind.WEIGHT, (16, 3, 3, 3)),
        (InputKind.WEIGHT, (16,)),
    ]
    assert (matmul.inputs[1].kind, matmul.inputs[1].tensor.shape) == (InputKind.WEIGHT, (16, 32))
    # the same layers and keys as the model with its weights, so they share layer benchmarks
    full = process_model(with_data, batch=1).graph
    assert [layer.layer_key for layer in graph.layers] == [layer.layer_key for layer in full.layers]
    # the weight's Transpose is not folded (no values): a constant node, not a layer
    assert graph.constant_nodes == 1 and full.constant_nodes == 0


def test_a_model_with_every_tensor_stripped_processes_without_raising(tmp_path):
    """Even Clip's bounds and a Reshape's target without their data (value inputs, in the key by value).

    Clip's output shape does not depend on its bounds; Reshape's does, and is then unknown,
    said per node.

    Files keep small tensors (``onnx.save``'s default ``size_threshold`` is 1 KiB): their
    values decide what an op does. Without them benanza says what it cannot shape.
    """
    nodes = [
        helper.make_node("Clip", ["x", "lo", "hi"], ["c"]),
        helper.make_node("Reshape", ["c", "shape"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "all_stripped",
        [helper.make_tensor_value_info("x", F, ["N", 4, 4])],
        [helper.make_tensor_value_info("y", F, ["N", 16])],
        [
            numpy_helper.from_array(np.array(-1, np.float32), "lo"),
            numpy_helper.from_array(np.array(1, np.float32), "hi"),
            numpy_helper.from_array(np.array([0, 16], np.int64), "shape"),
        ],
    )
    path = tmp_path / "model.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path), save_as_external_data=True, location=DATA, size_threshold=0)
    (tmp_path / DATA).unlink()
    graph = process_model(path, batch=1).graph
    (clip,) = graph.layers  # its bounds have no values: weights of their shape, not part of the key
    assert [i.kind for i in clip.inputs] == [InputKind.ACTIVATION, InputKind.WEIGHT, InputKind.WEIGHT]
    assert [u.op_type for u in graph.unsupported] == ["Reshape", "Relu"]
    reshape, relu = (u.reason for u in graph.unsupported)
    assert reshape.startswith("unknown shape of output 'r': its shape depends on the value of 'shape', which the file")
    assert relu.startswith("unknown shape of input 'r'")


def test_a_benchmark_network_synthesises_the_missing_weights(stripped):
    graph = process_model(stripped, batch=1).graph
    _, network = network_of(graph, range(len(graph.layers)))
    model = build_onnx(network)
    shapes = sorted((tuple(t.dims), t.data_type) for t in model.graph.initializer)
    assert shapes == sorted([((16, 3, 3, 3), F), ((16,), F), ((16, 32), F)])
    assert all(has_data(t) for t in model.graph.initializer)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {"in0": np.ones((1, 3, 16, 16), np.float32)})
    assert out.shape == (1, 32)


def test_with_synthetic_weights_makes_the_whole_model_runnable(stripped):
    proto = process_model(stripped, batch=1).proto
    with pytest.raises(Exception, match=DATA):  # ONNX Runtime looks for the data file
        ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    runnable = with_synthetic_weights(proto)
    assert structure_only(proto) == 2 and structure_only(runnable) == 0  # the processed proto is unchanged
    dims = {t.name: (tuple(t.dims), t.data_type) for t in runnable.graph.initializer}
    assert dims["w"] == ((16, 3, 3, 3), F) and dims["w2"] == ((32, 16), F)
    session = ort.InferenceSession(runnable.SerializeToString(), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {"x": np.ones((1, 3, 16, 16), np.float32)})
    assert out.shape == (1, 32)


def test_bench_run_measures_a_structure_only_model_with_its_fusion_groups_and_end_to_end(stripped, tmp_path):
    env = {
        "BENANZA_DB": None,
        "BENANZA_SYSTEM": None,
        "BENANZA_HARNESS_WARMUP_RUNS": "1",
        "BENANZA_HARNESS_MIN_SAMPLES": "3",
        "BENANZA_HARNESS_KERNEL_RUNS": "3",
    }
    args = ["bench", "run", str(stripped), "--batch", "1", "--db", f"sqlite:///{tmp_path / 'b.db'}", "--e2e"]
    args += ["--format", "json", "--min-time", "0.001", "--max-time", "0.05", "--threads", "1", "--system", "s"]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["failed"] == 0 and summary["skipped"] == 0, summary
    assert summary["planning_warnings"] == [] and summary["not_benchmarked"] == [], summary
    assert summary["measured"] > 0


def test_split_writes_runnable_sequences_of_a_structure_only_model(stripped, tmp_path):
    from benanza.model.subgraphs import find_model_subgraphs, write_sequences

    processed = process_model(stripped, batch=1)
    written = write_sequences(processed, find_model_subgraphs(processed.graph, 2), tmp_path)
    assert written
    for seq in written:
        model = onnx.load(str(seq.path))
        assert structure_only(model) == 0
        session = ort.InferenceSession(str(seq.path), providers=["CPUExecutionProvider"])
        feeds = {
            i.name: np.zeros([d.dim_value for d in i.type.tensor_type.shape.dim], np.float32) for i in model.graph.input
        }
        session.run(None, feeds)


# -- no two synthetic weights alike: ONNX Runtime would run their nodes as one -----------------


def branches_of_one_input() -> onnx.ModelProto:
    """``x`` -> two 1x1 Convs with weights of one shape (an Inception module's branches) -> Concat."""
    rng = np.random.default_rng(3)
    weights = [numpy_helper.from_array(rng.random((8, 4, 1, 1), dtype=np.float32), k) for k in ("wa", "wb")]
    nodes = [
        helper.make_node("Conv", ["x", "wa"], ["a"]),
        helper.make_node("Conv", ["x", "wb"], ["b"]),
        helper.make_node("Concat", ["a", "b"], ["y"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "branches",
        [helper.make_tensor_value_info("x", F, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", F, [1, 16, 8, 8])],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def executed_convs(model: onnx.ModelProto, folder: Path) -> int:
    """How many convolutions ONNX Runtime runs of ``model`` (its optimized graph, benanza's level)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(folder / "optimized.onnx")
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return sum(n.op_type in ("Conv", "FusedConv") for n in onnx.load(options.optimized_model_filepath).graph.node)


def test_weights_a_constant_of_shape_stands_in_for_run_as_distinct_synthetic_weights(tmp_path):
    """The zoo's light models: each weight a ConstantOfShape fill (onnx.tools.replace_constants).
    Run as they are, ONNX Runtime folds the fills into equal constants and runs the two branches
    as one convolution (Inception v2 ran 110 nodes whole where its layers ran 115)."""
    from onnx.tools.replace_constants import replace_initializer_by_constant_of_shape

    from benanza.model.load import weight_stand_ins

    light = replace_initializer_by_constant_of_shape(branches_of_one_input(), threshold=16)
    assert sorted(weight_stand_ins(light.graph)) == ["wa", "wb"]
    assert executed_convs(light, tmp_path) == 1  # what benanza measured as the whole model before
    runnable = with_synthetic_weights(light)
    assert not any(n.op_type == "ConstantOfShape" for n in runnable.graph.node)
    weights = {t.name: numpy_helper.to_array(t) for t in runnable.graph.initializer if t.name in ("wa", "wb")}
    assert weights["wa"].shape == weights["wb"].shape == (8, 4, 1, 1)
    assert not np.array_equal(weights["wa"], weights["wb"])
    assert executed_convs(runnable, tmp_path) == 2
    (out,) = ort.InferenceSession(runnable.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.ones((1, 4, 8, 8), np.float32)}
    )
    assert out.shape == (1, 16, 8, 8)


def test_structure_only_weights_of_one_shape_are_synthesised_apart_in_the_model_and_in_a_built_network(tmp_path):
    path = tmp_path / "branches.onnx"
    onnx.save(branches_of_one_input(), str(path), save_as_external_data=True, location=DATA, size_threshold=64)
    (tmp_path / DATA).unlink()
    processed = process_model(path, batch=1)
    runnable = with_synthetic_weights(processed.proto)
    weights = [numpy_helper.to_array(t) for t in runnable.graph.initializer if t.dims == [8, 4, 1, 1]]
    assert len(weights) == 2 and not np.array_equal(*weights)
    assert executed_convs(runnable, tmp_path) == 2
    # a network of both branches, as a fused group or a sequence holds them, keeps them apart too
    _, network = network_of(processed.graph, range(len(processed.graph.layers)))
    built = build_onnx(network)
    weights = [numpy_helper.to_array(t) for t in built.graph.initializer if list(t.dims) == [8, 4, 1, 1]]
    assert len(weights) == 2 and not np.array_equal(*weights)
    assert executed_convs(built, tmp_path) == 2
