"""DLBricks layer sequences: splitting, keys and the runnable ONNX models written for them."""

from __future__ import annotations

import collections
import functools
import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from benanza.errors import SplitError, UsageError
from benanza.model import subgraphs
from benanza.model.process import ProcessedModel, process_model
from benanza.model.subgraphs import (
    LayerSequence,
    find_model_subgraphs,
    is_runnable_range,
    sequence_model,
    synthetic_inputs,
    write_sequences,
)

ZOO_DIR = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
ZOO_MODELS = sorted(ZOO_DIR.glob("light_*.onnx"))
OPSET = 13


@functools.cache
def _zoo(path: Path) -> ProcessedModel:
    return process_model(path)


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _spans(seqs: list[LayerSequence]) -> list[tuple[tuple[int, ...], bool]]:
    return [(s.layers, s.fallback) for s in seqs]


def _check_partition(processed: ProcessedModel, seqs: list[LayerSequence], granularity: int) -> None:
    graph = processed.graph
    assert [s.index for s in seqs] == list(range(len(seqs)))
    indices = [i for s in seqs for i in s.layers]
    assert sorted(indices) == list(range(len(graph.layers)))  # every layer exactly once
    keys = collections.Counter(graph.layers[i].layer_key for i in indices)
    assert keys == collections.Counter(graph.layer_keys)
    for s in seqs:
        assert s.model == graph.model
        assert 1 <= len(s.layers) <= granularity
        assert s.layers == tuple(range(s.layers[0], s.layers[-1] + 1))
        assert is_runnable_range(graph, s.layers[0], s.layers[-1] + 1)
        if s.fallback:
            assert len(s.layers) == 1


def _model(nodes, inputs, outputs, initializers=(), name="hand") -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _weight(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> TensorProto:
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def _float(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _branchy(depth: int) -> ProcessedModel:
    """x -> Relu -> two Conv chains of ``depth`` -> Concat -> Relu.

    The file interleaves the branches (r0, a1, b1, a2, b2, ..., concat, out) and the layer
    order keeps file order, so windows holding one branch's tail without the other are not
    runnable.
    """
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Relu", ["x"], ["r0"], name="r0")]
    inits = []
    prev = {"a": "r0", "b": "r0"}
    for d in range(1, depth + 1):
        for branch in "ab":
            w = f"w_{branch}{d}"
            inits.append(_weight(w, (4, 4, 1, 1), rng))
            nodes.append(helper.make_node("Conv", [prev[branch], w], [f"{branch}{d}"], name=f"{branch}{d}"))
            prev[branch] = f"{branch}{d}"
    nodes.append(helper.make_node("Concat", [f"a{depth}", f"b{depth}"], ["cat"], name="cat", axis=1))
    nodes.append(helper.make_node("Relu", ["cat"], ["y"], name="out"))
    model = _model(nodes, [_float("x", [1, 4, 5, 5])], [_float("y", [1, 8, 5, 5])], inits, name=f"branchy{depth}")
    return process_model(f"branchy{depth}.onnx", proto=model)


def _deterministic() -> ProcessedModel:
    """Conv, residual Concat branches, pooling, a Reshape fed by a Constant, Gemm, Softmax."""
    rng = np.random.default_rng(1)
    inits = [
        _weight("w1", (4, 3, 3, 3), rng),
        _weight("b1", (4,), rng),
        _weight("wa", (2, 4, 1, 1), rng),
        _weight("wb", (2, 4, 3, 3), rng),
        _weight("wfc", (64, 10), rng),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="c1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="r1"),
        helper.make_node("Conv", ["r1", "wa"], ["a"], name="a"),
        helper.make_node("Conv", ["r1", "wb"], ["b"], name="b", pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["a", "b"], ["cat"], name="cat", axis=1),
        helper.make_node("Add", ["cat", "r1"], ["res"], name="res"),
        helper.make_node("MaxPool", ["res"], ["pool"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Constant", [], ["flat_shape"], value=numpy_helper.from_array(np.array([1, -1], np.int64))),
        helper.make_node("Reshape", ["pool", "flat_shape"], ["flat"], name="flat"),
        helper.make_node("Constant", [], ["bias_shape"], value=numpy_helper.from_array(np.array([10], np.int64))),
        helper.make_node(
            "ConstantOfShape", ["bias_shape"], ["bias"], value=numpy_helper.from_array(np.array([0.25], np.float32))
        ),
        helper.make_node("Gemm", ["flat", "wfc", "bias"], ["fc"], name="fc"),
        helper.make_node("Softmax", ["fc"], ["prob"], name="prob"),
    ]
    model = _model(nodes, [_float("x", [1, 3, 8, 8])], [_float("prob", [1, 10])], inits, name="deterministic")
    return process_model("deterministic.onnx", proto=model)


def _renamed(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy with every tensor and node renamed (same topology, same file order)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    g = copy.graph
    names: dict[str, str] = {}

    def new(name: str) -> str:
        return names.setdefault(name, f"renamed_{len(names)}") if name else name

    for vi in (*g.input, *g.output, *g.value_info):
        vi.name = new(vi.name)
    for t in g.initializer:
        t.name = new(t.name)
    for i, node in enumerate(g.node):
        node.name = f"renamed_node_{i}"
        node.input[:] = [new(x) for x in node.input]
        node.output[:] = [new(x) for x in node.output]
    return copy


@pytest.mark.skipif(not ZOO_MODELS, reason="the onnx wheel ships no light zoo models")
@pytest.mark.parametrize("path", ZOO_MODELS, ids=lambda p: p.stem)
def test_zoo_sequences_cover_every_layer_and_run(path: Path) -> None:
    processed = _zoo(path)
    for granularity in (1, 3, 5):
        seqs = find_model_subgraphs(processed.graph, granularity)
        _check_partition(processed, seqs, granularity)
        for seq in seqs:
            model = sequence_model(processed, seq)
            onnx.checker.check_model(model)
            assert model.graph.name == f"{processed.graph.model}_seq{seq.index}"
            assert model.ir_version == processed.proto.ir_version
            assert list(model.opset_import) == list(processed.proto.opset_import)
            session = _session(model)
            results = session.run(None, synthetic_inputs(model, seed=seq.index))
            for vi, value in zip(session.get_outputs(), results, strict=True):
                assert list(value.shape) == vi.shape, (seq, vi.name)


def test_granularity_one_gives_single_layers() -> None:
    processed = _deterministic()
    seqs = find_model_subgraphs(processed.graph, 1)
    assert _spans(seqs) == [((i,), False) for i in range(len(processed.graph.layers))]
    assert [s.sequence_key for s in find_model_subgraphs(processed.graph, 1)] == [s.sequence_key for s in seqs]


def test_concat_without_its_producers_falls_back() -> None:
    processed = _branchy(1)  # r0, a1, b1, cat, out
    graph = processed.graph
    assert [layer.name for layer in graph.layers] == ["r0", "a1", "b1", "cat", "out"]
    assert not is_runnable_range(graph, 2, 4)  # b1 + Concat: a1 is read by Concat, not by b1
    assert is_runnable_range(graph, 1, 3)  # both branches read r0, which a1 reads first
    assert is_runnable_range(graph, 3, 5) and is_runnable_range(graph, 0, 5)

    assert _spans(find_model_subgraphs(graph, 2)) == [((0, 1), False), ((2,), True), ((3, 4), False)]
    assert _spans(find_model_subgraphs(graph, 3)) == [((0, 1, 2), False), ((3, 4), False)]
    assert _spans(find_model_subgraphs(graph, 4)) == [((0, 1, 2, 3), False), ((4,), False)]
    assert _spans(find_model_subgraphs(graph, 99)) == [((0, 1, 2, 3, 4), False)]


def test_fallback_shifts_window_until_runnable() -> None:
    processed = _branchy(2)  # r0, a1, b1, a2, b2, cat, out
    graph = processed.graph
    assert [layer.name for layer in graph.layers] == ["r0", "a1", "b1", "a2", "b2", "cat", "out"]
    seqs = find_model_subgraphs(graph, 2)
    assert _spans(seqs) == [((0, 1), False), ((2,), True), ((3,), True), ((4,), True), ((5, 6), False)]
    seqs3 = find_model_subgraphs(graph, 3)
    # [3, 6) and [4, 7) each hold a branch tail whose Concat input the first layer does not read
    assert _spans(seqs3) == [((0, 1, 2), False), ((3,), True), ((4,), True), ((5, 6), False)]
    for granularity in (1, 2, 3, 4, 7):
        _check_partition(processed, find_model_subgraphs(graph, granularity), granularity)


def test_sequence_models_reproduce_the_full_models_tensors() -> None:
    processed = _deterministic()
    full = onnx.ModelProto()
    full.CopyFrom(processed.proto)
    shapes = {vi.name: vi for vi in processed.proto.graph.value_info}
    known = {o.name for o in full.graph.output}
    full.graph.output.extend(
        shapes[o.name] for layer in processed.graph.layers for o in layer.outputs if o.name not in known
    )
    x = np.random.default_rng(7).standard_normal((1, 3, 8, 8)).astype(np.float32)
    session = _session(full)
    tensors = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"x": x}), strict=True))
    tensors["x"] = x

    n = len(processed.graph.layers)
    assert n == 10
    for granularity in range(1, n + 1):
        for seq in find_model_subgraphs(processed.graph, granularity):
            model = sequence_model(processed, seq)
            onnx.checker.check_model(model, full_check=True)
            feeds = {vi.name: tensors[vi.name] for vi in model.graph.input}
            sub = _session(model)
            for vi, value in zip(sub.get_outputs(), sub.run(None, feeds), strict=True):
                np.testing.assert_allclose(value, tensors[vi.name], rtol=1e-5, atol=1e-5, err_msg=vi.name)


def test_sequence_model_inputs_outputs_and_constants() -> None:
    processed = _deterministic()
    graph = processed.graph
    names = [layer.name for layer in graph.layers]
    begin, end = names.index("a"), names.index("fc") + 1  # a, b, cat, res, pool, flat, fc
    assert is_runnable_range(graph, begin, end)  # r1 is read by a (first), b and res
    seq = LayerSequence(graph.model, 0, tuple(range(begin, end)), "k", False)
    model = sequence_model(processed, seq)
    assert [vi.name for vi in model.graph.input] == ["r1"]
    assert [vi.name for vi in model.graph.output] == ["fc"]
    shape = model.graph.input[0].type.tensor_type.shape
    assert [d.dim_value for d in shape.dim] == [1, 4, 8, 8]
    node_ops = collections.Counter(n.op_type for n in model.graph.node)
    assert node_ops["Conv"] == 2 and node_ops["Gemm"] == 1 and node_ops["Relu"] == 0
    # constants come with their real values, as initializers or the nodes computing them
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    consts.update(
        (n.output[0], numpy_helper.to_array(n.attribute[0].t)) for n in model.graph.node if n.op_type == "Constant"
    )
    reshape = next(n for n in model.graph.node if n.op_type == "Reshape")
    assert consts[reshape.input[1]].tolist() == [1, -1]
    gemm = next(n for n in model.graph.node if n.op_type == "Gemm")
    produced = {o for n in model.graph.node for o in n.output}
    assert gemm.input[2] in consts or gemm.input[2] in produced  # the bias' ConstantOfShape and its shape
    assert "w1" not in consts and "b1" not in consts  # only what the range reads
    out = _session(model).run(None, synthetic_inputs(model))
    assert out[0].shape == (1, 10)


def test_unrunnable_range_is_a_split_error() -> None:
    processed = _branchy(1)  # r0, a1, b1, cat, out
    with pytest.raises(SplitError, match="first layer"):
        sequence_model(processed, LayerSequence("branchy1", 0, (2, 3), "k", False))
    with pytest.raises(SplitError, match="not contiguous"):
        sequence_model(processed, LayerSequence("branchy1", 0, (0, 2), "k", False))
    model = sequence_model(processed, LayerSequence("branchy1", 0, (1, 2, 3), "k", False))
    assert [vi.name for vi in model.graph.input] == ["r0"]
    assert {p.key: p.value for p in model.metadata_props}["benanza.layers"] == "1-3"


def test_internal_tensor_read_outside_becomes_an_output() -> None:
    processed = _deterministic()
    names = [layer.name for layer in processed.graph.layers]
    seq = LayerSequence("deterministic", 0, (names.index("c1"), names.index("r1")), "k", False)
    model = sequence_model(processed, seq)
    assert [vi.name for vi in model.graph.output] == ["r1"]
    seq = LayerSequence("deterministic", 0, tuple(range(names.index("r1"), names.index("b") + 1)), "k", False)
    model = sequence_model(processed, seq)  # r1, a, b: r1 is also read by res, outside
    assert [vi.name for vi in model.graph.output] == ["r1", "a", "b"]


def test_sequence_keys_ignore_names() -> None:
    path = ZOO_DIR / "light_inception_v1.onnx"
    if not path.exists():
        pytest.skip("the onnx wheel ships no light zoo models")
    original = _zoo(path)
    renamed = process_model("other_name.onnx", proto=_renamed(onnx.load(str(path))))
    assert renamed.graph.model == "other_name"
    assert [layer.name for layer in renamed.graph.layers] != [layer.name for layer in original.graph.layers]
    for granularity in (1, 3, 5):
        a = find_model_subgraphs(original.graph, granularity)
        b = find_model_subgraphs(renamed.graph, granularity)
        assert _spans(a) == _spans(b)
        assert [s.sequence_key for s in a] == [s.sequence_key for s in b]
    seq = find_model_subgraphs(renamed.graph, 3)[0]
    model = sequence_model(renamed, seq)
    _session(model).run(None, synthetic_inputs(model))


def test_identical_sequences_of_different_models_share_a_key() -> None:
    paths = [ZOO_DIR / "light_bvlc_alexnet.onnx", ZOO_DIR / "light_vgg19.onnx"]
    if not all(p.exists() for p in paths):
        pytest.skip("the onnx wheel ships no light zoo models")
    alexnet, vgg = (_zoo(p) for p in paths)
    tail_a = find_model_subgraphs(alexnet.graph, 2)[-1]
    tail_v = find_model_subgraphs(vgg.graph, 2)[-1]
    ops = [[g.graph.layers[i].op_type for i in s.layers] for g, s in ((alexnet, tail_a), (vgg, tail_v))]
    assert ops == [["Gemm", "Softmax"], ["Gemm", "Softmax"]]  # both end in fc8 (4096 -> 1000) + Softmax
    assert tail_a.sequence_key == tail_v.sequence_key
    keys_a = {s.sequence_key for s in find_model_subgraphs(alexnet.graph, 2)}
    keys_v = {s.sequence_key for s in find_model_subgraphs(vgg.graph, 2)}
    assert tail_a.sequence_key in keys_a & keys_v
    # the first conv blocks differ (11x11 stride 4 vs 3x3): different keys
    assert find_model_subgraphs(alexnet.graph, 2)[0].sequence_key != find_model_subgraphs(vgg.graph, 2)[0].sequence_key


def test_wiring_is_part_of_the_key() -> None:
    def relu_add(second: str) -> ProcessedModel:
        nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", second], ["y"])]
        model = _model(nodes, [_float("x", [2, 3])], [_float("y", [2, 3])])
        return process_model(f"relu_add_{second}.onnx", proto=model)

    same, skip = relu_add("r"), relu_add("x")
    assert same.graph.layer_keys == skip.graph.layer_keys
    (seq_same,) = find_model_subgraphs(same.graph, 2)
    (seq_skip,) = find_model_subgraphs(skip.graph, 2)  # Add reads x, which Relu (first) reads too
    assert seq_same.layers == seq_skip.layers == (0, 1)
    assert seq_same.sequence_key != seq_skip.sequence_key
    relu_same, add_same = find_model_subgraphs(same.graph, 1)
    relu_skip, add_skip = find_model_subgraphs(skip.graph, 1)
    assert relu_same.sequence_key == relu_skip.sequence_key
    assert add_same.sequence_key != add_skip.sequence_key  # one input read twice vs two inputs


def test_write_sequences(tmp_path: Path) -> None:
    processed = _branchy(1)
    seqs = find_model_subgraphs(processed.graph, 2)
    written = write_sequences(processed, seqs, tmp_path / "out")
    assert [w.index for w in written] == [0, 1, 2]
    for w, seq in zip(written, seqs, strict=True):
        assert w.path == tmp_path / "out" / "branchy1" / f"seq{seq.index:04d}_{seq.sequence_key}.onnx"
        assert w.layers == len(seq.layers)
        assert w.layer_keys == tuple(processed.graph.layers[i].layer_key for i in seq.layers)
        model = onnx.load(str(w.path))
        onnx.checker.check_model(model)
        assert model.graph.name == f"branchy1_seq{seq.index}"
        _session(model).run(None, synthetic_inputs(model))
        d = w.to_dict()
        assert d["path"] == str(w.path) and d["sequence_key"] == seq.sequence_key
        assert d["layer_keys"] == list(w.layer_keys)
    assert seqs[1].to_dict() == {
        "model": "branchy1",
        "index": 1,
        "layers": [2],
        "sequence_key": seqs[1].sequence_key,
        "fallback": True,
    }


def test_large_sequences_keep_weights_in_a_side_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subgraphs, "EXTERNAL_DATA_THRESHOLD_BYTES", 0)
    processed = _deterministic()
    (seq,) = find_model_subgraphs(processed.graph, 99)
    (written,) = write_sequences(processed, [seq], tmp_path)
    assert (tmp_path / "deterministic" / f"{written.path.name}.data").is_file()
    model = onnx.load(str(written.path))
    assert numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "wfc")).shape == (64, 10)
    _session(model).run(None, synthetic_inputs(model))


def test_synthetic_inputs_shapes_and_dtypes() -> None:
    inputs = [
        _float("f", [2, 3]),
        helper.make_tensor_value_info("i", TensorProto.INT64, [4]),
        helper.make_tensor_value_info("m", TensorProto.BOOL, [2, 3]),
        helper.make_tensor_value_info("h", TensorProto.FLOAT16, ["n", 2]),
    ]
    nodes = [
        helper.make_node("Where", ["m", "f", "f"], ["w"]),
        helper.make_node("Cast", ["i"], ["ic"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["h"], ["hc"], to=TensorProto.FLOAT),
    ]
    outputs = [_float("w", [2, 3]), _float("ic", [4]), _float("hc", ["n", 2])]
    model = _model(nodes, inputs, outputs)
    feeds = synthetic_inputs(model, seed=3)
    assert {k: (v.shape, v.dtype.name) for k, v in feeds.items()} == {
        "f": ((2, 3), "float32"),
        "i": ((4,), "int64"),
        "m": ((2, 3), "bool"),
        "h": ((1, 2), "float16"),
    }
    assert not feeds["i"].any() and not feeds["m"].any() and feeds["f"].std() > 0
    np.testing.assert_array_equal(synthetic_inputs(model, seed=3)["f"], feeds["f"])
    _session(model).run(None, feeds)


def test_bad_arguments_are_usage_errors() -> None:
    graph = _branchy(1).graph
    with pytest.raises(UsageError):
        find_model_subgraphs(graph, 0)
    for begin, end in ((0, 0), (3, 2), (-1, 2), (0, 6)):
        with pytest.raises(UsageError):
            is_runnable_range(graph, begin, end)
