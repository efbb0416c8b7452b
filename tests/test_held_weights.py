"""Large weights held apart from the protobuf (``benanza.model.held_weights``): the same model, run alike."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from benanza.bench.build import build_held, build_onnx
from benanza.bench.generate import plan_model, specs_for_plan
from benanza.bench.spec import SpecKind
from benanza.model import synthetic
from benanza.model.held_weights import HELD_LOCATION, HELD_MIN_BYTES, HeldModel, is_placeholder
from benanza.model.load import held_apart, with_synthetic_weights
from benanza.model.network import network_of
from benanza.model.synthetic import synthetic_array, synthetic_weight, synthetic_weight_array
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU, _OrtPrepared, feeds_for, optimized_model

F = TensorProto.FLOAT
BIG = (512, 1024)  # 2 MiB of float32: held apart
ARRAYS = {
    "w": np.random.default_rng(0).random(BIG, dtype=np.float32),
    "b": np.random.default_rng(1).random(BIG[1], dtype=np.float32),
    "w2": np.random.default_rng(2).random((BIG[1], 8), dtype=np.float32),
}


@pytest.fixture(scope="module")
def dense(build_model) -> onnx.ModelProto:
    """``x[1,512]`` -> MatMul(w, 2 MiB) -> Add(b) -> Relu -> MatMul(w2, 32 KiB) -> y, with its weights."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["y"]),
    ]
    return build_model(nodes, [("x", F, [1, BIG[0]])], [("y", F, None)], ARRAYS)


@pytest.fixture(scope="module")
def network(dense, process_proto):
    processed = process_proto(dense)
    return network_of(processed.graph, range(len(processed.graph.layers)))[1]


def optimized_nodes(model: onnx.ModelProto | HeldModel) -> list[tuple[str, tuple[str, ...]]]:
    return [(n.op_type, tuple(n.input)) for n in optimized_model(model, "extended").graph.node]


def run_whole(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def without_data_location(model: onnx.ModelProto) -> bytes:
    """The model's bytes, its initializers' ``data_location`` left unset (``DEFAULT``, set or not, is the same)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for tensor in copy.graph.initializer:
        if tensor.data_location == TensorProto.DEFAULT:
            tensor.ClearField("data_location")
    return copy.SerializeToString()


def test_a_built_network_holds_its_large_weights_apart_and_is_otherwise_the_same_model(network):
    held = build_held(network, sink=True)
    (name,) = held.weights  # only the 2 MiB weight: the bias and the 32 KiB weight stay in the model
    placeholder = next(t for t in held.proto.graph.initializer if t.name == name)
    assert is_placeholder(placeholder) and not placeholder.raw_data
    assert {e.key: e.value for e in placeholder.external_data}["location"] == HELD_LOCATION
    assert held.weights[name].shape == BIG and held.weights[name].nbytes >= HELD_MIN_BYTES
    assert not held.weights[name].flags.writeable  # it may be the synthetic-weight cache's bytes
    assert len(held.proto.SerializeToString()) < 64 << 10
    # the same values, drawn straight into the array: put back, the very model build_onnx makes
    assert held.whole().SerializeToString() == build_onnx(network, sink=True).SerializeToString()


def test_onnx_runtime_optimizes_and_runs_a_held_model_as_the_whole_one(network):
    held = build_held(network, sink=True)
    whole = build_onnx(network, sink=True)
    assert optimized_nodes(held) == optimized_nodes(whole)
    assert any(op == "FusedGemm" for op, _ in optimized_nodes(held))  # MatMul+Add+Relu fused on a held weight
    feeds = feeds_for(whole)
    prepared = _OrtPrepared(held.proto.SerializeToString(), feeds, "extended", 1, weights=held.weights)
    try:
        prepared.call()
        for got, want in zip(prepared.outputs(), run_whole(whole, feeds), strict=True):
            np.testing.assert_array_equal(got, want)
        assert len(prepared.kernel_times(2)) == 2  # the profiling session takes the same arrays
    finally:
        prepared.close()


def test_sessions_leave_the_held_arrays_as_they_were_drawn(network):
    """The arrays may be the synthetic-weight cache's bytes, shared by every benchmark that holds the
    weight: ONNX Runtime reads them in place and must never write them (its fusions make new tensors)."""
    held = build_held(network, sink=True)
    (array,) = held.weights.values()
    # drawn afresh, not from the cache the held array may share: a write into the cache would show
    drawn = synthetic_array(list(BIG), "float32", np.random.default_rng([0, 1, 2, *BIG]))  # seed, slot 1
    runtime = OnnxRuntimeCPU(threads=1)
    prepared = _OrtPrepared(
        held.proto.SerializeToString(), feeds_for(held.proto), runtime.opt_level, 1, (), held.weights
    )
    try:
        for _ in range(3):
            prepared.call()
        prepared.kernel_times(2)
    finally:
        prepared.close()
    np.testing.assert_array_equal(array, drawn)
    assert drawn.min() >= -1 and drawn.max() < 1  # synthetic values, not zeros or garbage


def test_a_weight_too_large_for_the_cache_is_drawn_once_while_a_benchmark_holds_it(monkeypatch):
    """Beyond a quarter of the cache a weight is not cached, but every benchmark that asks while one
    holds it gets that array (an interleaved group's layer, fused group and model hold VGG-19's fc6)."""
    monkeypatch.setattr(synthetic, "WEIGHT_CACHE_BYTES", 4 * BIG[0] * BIG[1] * 4 - 1)  # a BIG float32 is too large
    draws = []
    real = synthetic.synthetic_array
    monkeypatch.setattr(synthetic, "synthetic_array", lambda *a: draws.append(a) or real(*a))
    shape = (BIG[0], BIG[1] + 3)  # a shape no other test draws
    first = synthetic_weight_array(shape, "float32", slot=1)
    again = synthetic_weight_array(shape, "float32", slot=1)
    assert again is first and len(draws) == 1 and not first.flags.writeable
    assert synthetic_weight(shape, "float32", slot=1) == first.tobytes()  # the bytes of the same values
    other = synthetic_weight_array(shape, "float32", slot=1, copy=1)  # another weight of the model
    assert other is not first and not np.array_equal(other, first) and len(draws) == 2
    kept = first.copy()
    del first, again, other
    redrawn = synthetic_weight_array(shape, "float32", slot=1)  # nobody held it: drawn again, the same values
    assert len(draws) == 3
    np.testing.assert_array_equal(redrawn, kept)
    drawn = synthetic_array(list(shape), "float32", np.random.default_rng([0, 1, 2, *shape]))
    np.testing.assert_array_equal(redrawn, drawn)


def test_a_model_with_its_own_large_weights_is_held_apart_without_touching_it(dense):
    before = dense.SerializeToString()
    held = held_apart(dense)
    assert dense.SerializeToString() == before  # the caller's model keeps its data
    assert set(held.weights) == {"w"}
    np.testing.assert_array_equal(held.weights["w"], ARRAYS["w"])
    assert is_placeholder(next(t for t in held.proto.graph.initializer if t.name == "w"))
    assert held.whole().SerializeToString() == before
    feeds = {"x": np.random.default_rng(3).random((1, BIG[0]), dtype=np.float32)}
    prepared = _OrtPrepared(held.proto.SerializeToString(), feeds, "extended", 1, weights=held.weights)
    try:
        prepared.call()
        (got,) = prepared.outputs()
        np.testing.assert_allclose(got, run_whole(dense, feeds)[0], rtol=1e-5)
    finally:
        prepared.close()


def test_a_structure_only_model_draws_its_held_weights_as_with_synthetic_weights_fills_them(dense, tmp_path):
    path = tmp_path / "dense.onnx"
    onnx.save(dense, str(path), save_as_external_data=True, location="dense.data", size_threshold=1024)
    (tmp_path / "dense.data").unlink()
    from benanza.model.process import process_model

    proto = process_model(path, batch=1).proto
    filled = with_synthetic_weights(proto)
    held = held_apart(proto)
    assert set(held.weights) == {"w"}
    assert without_data_location(held.whole()) == without_data_location(filled)
    expected = synthetic_array(list(BIG), "float32", np.random.default_rng([0, 1, 2, *BIG]))  # seed, slot 1
    np.testing.assert_array_equal(held.weights["w"], expected)


def test_the_cpu_runtime_prepares_every_benchmark_with_its_large_weights_held_apart(dense, process_proto):
    runtime = OnnxRuntimeCPU(threads=1)
    plan = plan_model(process_proto(dense), runtime, (2,))
    specs = [s for s in specs_for_plan(plan, runtime.name, runtime.variant(), e2e=False) if s.network is not None]
    holding = 0
    for spec in specs:
        prepared = runtime.prepare(spec)
        try:
            assert isinstance(prepared, _OrtPrepared)
            held = prepared._model.weights
            holding += bool(held)
            assert all(a.nbytes >= HELD_MIN_BYTES for a in held.values())
            assert len(prepared._model.model_bytes) < 64 << 10
            prepared.call()
            whole = build_onnx(spec.network, sink=True)
            for got, want in zip(prepared.outputs(), run_whole(whole, prepared._feeds), strict=True):
                np.testing.assert_array_equal(got, want)
        finally:
            prepared.close()
    assert holding >= 2  # the MatMul's layer and its fused group, at least
    assert any(s.kind is SpecKind.SEQUENCE for s in specs)


@pytest.mark.slow
def test_a_whole_model_above_protobufs_2_gb_is_benchmarked(tmp_path):
    """Two float32 MatMuls of 16384x16384 (2 GiB of weights): its protobuf cannot be serialized
    (protobuf's 2 GB), so ONNX Runtime could neither plan it nor be given it whole; held apart, both."""
    side = 16384
    weights = []
    for name in ("w1", "w2"):
        tensor = TensorProto(name=name, data_type=F, dims=[side, side], data_location=TensorProto.EXTERNAL)
        for key, value in (("location", "absent.data"), ("offset", "0"), ("length", str(side * side * 4))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        weights.append(tensor)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("MatMul", ["h", "w2"], ["y"])],
        "big",
        [helper.make_tensor_value_info("x", F, [1, side])],
        [helper.make_tensor_value_info("y", F, [1, side])],
        weights,
    )
    path = tmp_path / "big.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    runtime = OnnxRuntimeCPU(threads=1)
    from benanza.model.process import process_model

    plan = plan_model(process_model(path, batch=1), runtime, ())
    assert plan.notes == ()  # ONNX Runtime's optimized graph was written (its weights to a file of their own)
    (spec,) = [s for s in specs_for_plan(plan, runtime.name, runtime.variant(), e2e=True) if s.kind is SpecKind.MODEL]
    prepared = runtime.prepare(spec)
    try:
        assert sum(a.nbytes for a in prepared._model.weights.values()) == 2 * side * side * 4
        prepared.call()
        (out,) = prepared.outputs()
        assert out.shape == (1, side) and np.isfinite(out).all()
    finally:
        prepared.close()
