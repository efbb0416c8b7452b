"""Large weights left in their external data file (``model.load.on_file``): never read by processing,
mapped by ONNX Runtime when the model runs whole, so a model of more than protobuf's 2 GB (an fp32
LLM) is processed and run like any other, with its own weights."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from benanza.bench.generate import plan_model_file, specs_for_plan
from benanza.bench.memory import FILE_WEIGHT_COPIES, MODEL_WEIGHT_COPIES, graph_memory, spec_memory
from benanza.bench.spec import SpecKind
from benanza.errors import ModelError
from benanza.model.held_weights import HELD_MIN_BYTES, hold_weights
from benanza.model.load import (
    file_bytes,
    file_data,
    has_data,
    held_apart,
    load_model,
    on_file,
    structure_only,
    with_synthetic_weights,
)
from benanza.model.process import process_model
from benanza.model.request import NO_REQUEST
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU

F = TensorProto.FLOAT
DATA = "model.onnx.data"
ARRAYS = {
    "w": np.random.default_rng(0).standard_normal((512, 1024), dtype=np.float32),  # 2 MiB: left in the file
    "b": np.random.default_rng(1).standard_normal(1024, dtype=np.float32),  # 4 KiB: read
    "w2": np.random.default_rng(2).standard_normal((8, 1024), dtype=np.float32),  # 32 KiB: read
    # 4.1 MiB int8, past what run_values computes with (``MAX_RUN_ELEMENTS``): left in the file
    "q": np.random.default_rng(3).integers(-128, 128, (1024, 4224), dtype=np.int8),
    # a 1 MiB mask, small enough for run_values to compute with: read
    "mask": np.tril(np.ones((1024, 1024), bool)),
}
BIG = {"w", "q"}
SCALARS = [("qs", 0.01, np.float32), ("zero", 0, np.int64), ("one", 1, np.int64)]


def dense() -> onnx.ModelProto:
    """``x[N,512]`` -> MatMul(w) -> Add(b) -> Relu -> MatMul(Transpose(w2)) -> y, and an int8 weight
    dequantized into a second output (a quantized model's weight)."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Transpose", ["w2"], ["w2t"], perm=[1, 0]),
        helper.make_node("MatMul", ["r", "w2t"], ["y"]),
        helper.make_node("DequantizeLinear", ["q", "qs"], ["dq"]),
        helper.make_node("MatMul", ["a", "dq"], ["z"]),
        # a length the mask's values decide, as run_values computes it: 1024 * 1025 / 2 ones
        helper.make_node("Cast", ["mask"], ["mask64"], to=TensorProto.INT64),
        helper.make_node("ReduceSum", ["mask64"], ["ones"], keepdims=0),
        helper.make_node("Range", ["zero", "ones", "one"], ["positions"]),
    ]
    graph = helper.make_graph(
        nodes,
        "dense",
        [helper.make_tensor_value_info("x", F, ["N", 512])],
        [
            helper.make_tensor_value_info("y", F, ["N", 8]),
            helper.make_tensor_value_info("z", F, ["N", 4224]),
            helper.make_tensor_value_info("positions", TensorProto.INT64, ["P"]),
        ],
        [numpy_helper.from_array(v, k) for k, v in ARRAYS.items()]
        + [numpy_helper.from_array(np.array(v, dtype), k) for k, v, dtype in SCALARS],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def save(folder: Path, external: bool = True) -> Path:
    path = folder / "model.onnx"
    if external:
        onnx.save(dense(), str(path), save_as_external_data=True, location=DATA, size_threshold=1024)
    else:
        onnx.save(dense(), str(path))
    return path


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    return save(tmp_path_factory.mktemp("on_file"))


def reference(path: Path, x: np.ndarray) -> list[np.ndarray]:
    """ONNX Runtime's outputs for ``x`` on the file itself."""
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})


def test_the_large_weights_stay_in_their_file_and_the_small_ones_are_read(saved):
    model = load_model(saved)
    tensors = {t.name: t for t in model.graph.initializer}
    assert {name for name, t in tensors.items() if on_file(t)} == BIG
    assert all(has_data(t) for name, t in tensors.items() if name not in BIG)
    assert not any(has_data(tensors[name]) for name in BIG)  # nothing of them in memory
    assert structure_only(model) == 0  # not a model without its weights
    assert file_bytes(model) == ARRAYS["w"].nbytes + ARRAYS["q"].nbytes
    assert all(ARRAYS[name].nbytes >= HELD_MIN_BYTES for name in BIG)
    for name in BIG:
        assert file_data(tensors[name]) == ARRAYS[name].tobytes()


def test_processing_keeps_them_in_their_file(saved, caplog):
    """Through constant folding (onnxscript's, which writes external data back without the mark) and binding;
    the integers computed from the mask (``run_values``) are computed as with the mask inside the model (left in
    the file, it went to ONNX Runtime with the mark: 'model format error', the values given up)."""
    with caplog.at_level(logging.WARNING):
        processed = process_model(saved, 2, NO_REQUEST)
    tensors = {t.name: t for t in processed.proto.graph.initializer}
    assert {name for name, t in tensors.items() if on_file(t)} == BIG
    assert processed.graph.unsupported == ()
    assert not [r for r in caplog.records if "could not be run" in r.getMessage()]


def test_a_basepath_the_file_names_is_not_taken_for_the_weights_left_in_it(tmp_path):
    """``basepath`` is an ONNX external-data key a file may carry; it pointed a tensor's data elsewhere."""
    path = save(tmp_path)
    model = onnx.load(str(path), load_external_data=False)
    for tensor in model.graph.initializer:
        entry = tensor.external_data.add()
        entry.key, entry.value = "basepath", "/somewhere/else"
    onnx.save(model, str(path))
    loaded = {t.name: t for t in load_model(path).graph.initializer}
    assert {name for name, t in loaded.items() if on_file(t)} == BIG
    assert all(has_data(t) for name, t in loaded.items() if name not in BIG)
    assert held_apart(load_model(path)).folder == str(tmp_path.resolve())


def test_the_layers_and_the_model_are_the_same_as_with_the_weights_inside(saved, tmp_path):
    """The store's keys of a model do not depend on where its weights are kept."""
    inside = save(tmp_path, external=False)
    runtime = OnnxRuntimeCPU()
    ((on,),) = plan_model_file(saved, [runtime], [2], granularities=[2])
    ((inline,),) = plan_model_file(inside, [runtime], [2], granularities=[2])
    assert on.model_key == inline.model_key
    assert on.graph.layer_keys == inline.graph.layer_keys
    assert set(on.networks) == set(inline.networks)
    assert (on.file_weight_bytes, inline.file_weight_bytes) == (ARRAYS["w"].nbytes + ARRAYS["q"].nbytes, 0)


def test_a_run_of_the_whole_model_maps_its_own_weights_from_the_file(saved):
    """``held_apart`` leaves them to ONNX Runtime (the model's folder), no array of theirs in memory: the
    outputs are those of the file run by ONNX Runtime itself, not of synthetic weights."""
    held = held_apart(load_model(saved))
    assert held.folder == str(saved.parent.resolve())
    assert not set(held.weights) & BIG
    options = ort.SessionOptions()
    hold_weights(options, held.weights, held.folder)
    session = ort.InferenceSession(held.proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(4).standard_normal((2, 512), dtype=np.float32)
    for got, want in zip(session.run(None, {"x": x}), reference(saved, x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    whole = held.whole()  # the data back in the proto, read from the file
    assert all(has_data(t) for t in whole.graph.initializer)
    got = ort.InferenceSession(whole.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got[0], reference(saved, x)[0], rtol=1e-5, atol=1e-4)


def test_a_copy_with_its_data_reads_them_from_the_file(saved):
    """``with_synthetic_weights`` (a whole model for a provider that takes no held weights): real data."""
    filled = with_synthetic_weights(load_model(saved))
    tensors = {t.name: t for t in filled.graph.initializer}
    for name in BIG:
        np.testing.assert_array_equal(numpy_helper.to_array(tensors[name]), ARRAYS[name])


def test_the_model_benchmarks_run_it_with_its_own_weights(saved):
    """The end-to-end specs (bound, at the runtime's defaults, as exported) prepare and call, their memory
    estimated with the weights in the file at their own copies."""
    runtime = OnnxRuntimeCPU()
    ((plan,),) = plan_model_file(saved, [runtime], [2])
    specs = specs_for_plan(plan, runtime.name, runtime.variant(), e2e=True, defaults=True, exported=True)
    models = [s for s in specs if s.kind is SpecKind.MODEL]
    assert len(models) == 3
    for spec in models:
        estimate = spec_memory(spec)
        assert estimate.file_weights == plan.file_weight_bytes
        prepared = runtime.prepare(spec)
        prepared.call()
        # the weights left in the file are mapped by ONNX Runtime from it, not drawn as synthetic arrays
        assert prepared._model.folder == str(saved.parent.resolve())
        assert not set(prepared._model.weights) & BIG
    weights = graph_memory(plan.graph).weights
    in_memory = graph_memory(plan.graph).total - graph_memory(plan.graph, plan.file_weight_bytes).total
    assert in_memory == plan.file_weight_bytes * (MODEL_WEIGHT_COPIES - FILE_WEIGHT_COPIES)
    assert weights > plan.file_weight_bytes


def test_a_bfloat16_weight_stays_in_its_file_too(tmp_path):
    """An element type numpy does not hold (a bfloat16 LLM's weights) is left to ONNX Runtime the same way."""
    bits = np.random.default_rng(5).integers(0x3C00, 0x3F80, (1024, 1024), dtype=np.uint16)  # bfloat16 of 0.0078..1
    weight = helper.make_tensor("w", TensorProto.BFLOAT16, [1024, 1024], bits.tobytes(), raw=True)
    graph = helper.make_graph(
        [helper.make_node("Cast", ["w"], ["wf"], to=F), helper.make_node("MatMul", ["x", "wf"], ["y"])],
        "bf16",
        [helper.make_tensor_value_info("x", F, [1, 1024])],
        [helper.make_tensor_value_info("y", F, [1, 1024])],
        [weight],
    )
    path = tmp_path / "bf16.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path), save_as_external_data=True, location=DATA, size_threshold=0)
    loaded = load_model(path)
    assert on_file(loaded.graph.initializer[0])
    assert file_data(loaded.graph.initializer[0]) == bits.tobytes()
    held = held_apart(loaded)
    options = ort.SessionOptions()
    hold_weights(options, held.weights, held.folder)
    session = ort.InferenceSession(held.proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    x = np.ones((1, 1024), np.float32)
    np.testing.assert_allclose(session.run(None, {"x": x})[0], reference(path, x)[0], rtol=1e-5)


def test_a_truncated_data_file_is_refused_with_the_tensor_and_the_file(tmp_path):
    path = save(tmp_path)
    data = tmp_path / DATA
    data.write_bytes(data.read_bytes()[: ARRAYS["w"].nbytes // 2])
    with pytest.raises(ModelError) as info:
        load_model(path)
    message = str(info.value)
    assert message.startswith(str(path)) and "\n" not in message
    assert "external data cannot be read" in message and "'w'" in message and DATA in message


def test_a_data_file_outside_the_model_folder_is_refused(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    path = save(folder)
    (folder / DATA).rename(tmp_path / DATA)
    model = onnx.load(str(path), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = f"../{DATA}"
    onnx.save(model, str(path))
    with pytest.raises(ModelError) as info:
        load_model(path)
    assert "external data cannot be read" in str(info.value) and "outside the model's folder" in str(info.value)


# 40 MatMuls of 4096x4096 float32 weights: 2.5 GiB in a sparse data file (zeros, no disk written)
LAYERS, WIDTH = 40, 4096


def more_than_2_gb(folder: Path) -> Path:
    """An fp32 model past protobuf's 2 GB: its weights in a data file, as an exporter writes one that large."""
    nbytes = WIDTH * WIDTH * 4
    nodes, inits, last = [], [], "x"
    for i in range(LAYERS):
        weight = TensorProto(name=f"w{i}", dims=[WIDTH, WIDTH], data_type=F, data_location=TensorProto.EXTERNAL)
        for key, value in (("location", DATA), ("offset", str(i * nbytes)), ("length", str(nbytes))):
            entry = weight.external_data.add()
            entry.key, entry.value = key, value
        inits.append(weight)
        nodes.append(helper.make_node("MatMul", [last, f"w{i}"], [f"h{i}"]))
        last = f"h{i}"
    graph = helper.make_graph(
        nodes,
        "past_2gb",
        [helper.make_tensor_value_info("x", F, ["batch", WIDTH])],
        [helper.make_tensor_value_info(last, F, ["batch", WIDTH])],
        inits,
    )
    path = folder / "past_2gb.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with open(folder / DATA, "wb") as data:
        data.truncate(LAYERS * nbytes)
    return path


@pytest.mark.slow
def test_a_model_of_more_than_2_gb_runs_end_to_end(tmp_path):
    """``benanza run`` on it, as a user runs an fp32 LLM: every layer, its end to end as bound, at the
    runtime's defaults and as exported; the weights were read whole once each run, in no protobuf."""
    path = more_than_2_gb(tmp_path)
    assert LAYERS * WIDTH * WIDTH * 4 > 2**31
    db = tmp_path / "past_2gb.db"
    fast = ["--min-time", "0.001", "--max-time", "0.05"]
    cmd = [sys.executable, "-m", "benanza", "run", str(path), "--batch", "1", "--db", f"sqlite:///{db}", *fast]
    done = subprocess.run([*cmd, "--format", "json"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = json.loads(done.stdout)
    assert row["coverage"] == 1.0 and not row["missing"]
    for figure in ("e2e_ms", "defaults_e2e_ms", "exported_e2e_ms", "sequential_ms"):
        assert row[figure] and row[figure] > 0, (figure, row)
