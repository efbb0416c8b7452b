"""ONNX Runtime's contrib ops (``com.microsoft``): described, shaped, keyed, benchmarked.

ONNX's registry has no schema for the ops ONNX Runtime's quantizer writes in QOperator
format (QLinearAdd, QLinearMul, QLinearSigmoid, QLinearGlobalAveragePool, QGemm...); ONNX
Runtime's own registry has, and benanza reads it where ONNX has none. Without that fallback
every such node was "not benchmarkable" and the model had no bound. An op ONNX Runtime
describes but cannot run here (a CUDA-only kernel) is still a layer: its benchmark is stored
as failed with the reason, and the model's bound names it as missing.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cli_checks import FAST_ENV, fast_flags
from onnx import TensorProto, helper
from typer.testing import CliRunner

from benanza.bench.build import build_onnx
from benanza.bench.generate import plan_model
from benanza.cli import app
from benanza.model.extract import schema_of, slot_kinds
from benanza.model.graph import InputKind
from benanza.model.keys import Slot
from benanza.model.network import Network, network_of
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU, feeds_for, session_options
from benanza.store import open_store

F = TensorProto.FLOAT
U8 = TensorProto.UINT8
MS = "com.microsoft"
SYSTEM = "contrib-test-system"
FAST_FLAGS = fast_flags(SYSTEM)
CONTRIB_OPS = ["QLinearSigmoid", "QLinearAdd", "QLinearMul", "QLinearGlobalAveragePool", "QGemm"]


def invoke(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args], env=FAST_ENV)


def qop_model(build_model, *, add_scale: float = 0.05, weight_seed: int = 0) -> onnx.ModelProto:
    """A QOperator int8 graph as ``quantize_static`` writes one, with ONNX Runtime's contrib ops.

    ``x -> QuantizeLinear -> QLinearSigmoid -> QLinearAdd(x, .) -> QLinearMul(., 8 per-channel
    gains) -> QLinearGlobalAveragePool -> Flatten -> QGemm(int8 weight 8x32, int32 bias) ->
    DequantizeLinear -> y``.
    """
    rng = np.random.default_rng(weight_seed)
    inits = {
        "s": np.array(0.02, np.float32),
        "z": np.array(128, np.uint8),
        "sig_s": np.array(1 / 256, np.float32),
        "sig_z": np.array(0, np.uint8),
        "add_s": np.array(add_scale, np.float32),
        "gain": np.arange(8, dtype=np.uint8).reshape(1, 8, 1, 1) + 120,  # small: a value
        "mul_s": np.array(0.03, np.float32),
        "w": rng.integers(-127, 127, (8, 32), dtype=np.int8),  # large: a weight
        "w_s": np.array(0.01, np.float32),
        "w_z": np.array(0, np.int8),
        "bias": np.arange(32, dtype=np.int32),
        "y_s": np.array(0.1, np.float32),
        "y_z": np.array(128, np.uint8),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="quant"),
        helper.make_node("QLinearSigmoid", ["xq", "s", "z", "sig_s", "sig_z"], ["sq"], name="sigmoid", domain=MS),
        helper.make_node(
            "QLinearAdd", ["xq", "s", "z", "sq", "sig_s", "sig_z", "add_s", "z"], ["aq"], name="add", domain=MS
        ),
        helper.make_node(
            "QLinearMul", ["aq", "add_s", "z", "gain", "s", "z", "mul_s", "z"], ["mq"], name="mul", domain=MS
        ),
        helper.make_node(
            "QLinearGlobalAveragePool", ["mq", "mul_s", "z", "mul_s", "z"], ["pq"], name="pool", domain=MS
        ),
        helper.make_node("Flatten", ["pq"], ["fq"], name="flatten"),
        helper.make_node(
            "QGemm", ["fq", "mul_s", "z", "w", "w_s", "w_z", "bias", "y_s", "y_z"], ["gq"], name="gemm", domain=MS
        ),
        helper.make_node("DequantizeLinear", ["gq", "y_s", "y_z"], ["y"], name="dequant"),
    ]
    return build_model(
        nodes,
        [("x", F, [1, 8, 6, 6])],
        [("y", F, [1, 32])],
        inits,
        extra_opsets={MS: 1},
        check=False,  # ONNX's checker knows no com.microsoft schema
    )


def layer_of(processed, op_type):
    (layer,) = [lay for lay in processed.graph.layers if lay.op_type == op_type]
    return layer


def run_alone(processed, layer) -> onnx.ModelProto:
    """The layer's benchmark model as a runtime gets it, run once in ONNX Runtime."""
    _, network = network_of(processed.graph, [layer.index])
    model = build_onnx(network)
    session = ort.InferenceSession(
        model.SerializeToString(), session_options("extended", 1), providers=["CPUExecutionProvider"]
    )
    outputs = session.run(None, feeds_for(model))
    assert [list(o.shape) for o in outputs] == layer.output_shapes
    return model


# -- the schemas ----------------------------------------------------------------------------------


def test_onnx_ops_are_described_by_onnx_and_contrib_ops_by_onnxruntime():
    conv = schema_of("Conv", 17, "")
    assert conv.source == "onnx" and conv.onnx_schema is not None
    add = schema_of("QLinearAdd", 1, MS)
    assert add.source == "onnxruntime" and add.onnx_schema is None
    assert [p.name for p in add.inputs] == [
        "A",
        "A_scale",
        "A_zero_point",
        "B",
        "B_scale",
        "B_zero_point",
        "C_scale",
        "C_zero_point",
    ]
    assert add.allowed_types(add.inputs[0]) == {"tensor(int8)", "tensor(uint8)"}
    assert schema_of("Frob", 1, "com.example") is None


def test_onnxruntime_attribute_defaults_are_read():
    softmax = schema_of("QLinearSoftmax", 1, MS)
    assert helper.get_attribute_value(softmax.defaults["axis"]) == -1
    assert "opset" in softmax.attributes and "opset" not in softmax.defaults  # required, no default
    gemm = schema_of("QGemm", 1, MS)
    assert helper.get_attribute_value(gemm.defaults["alpha"]) == 1.0
    assert helper.get_attribute_value(gemm.defaults["transB"]) == 0


def test_quantization_slots_from_either_registry():
    # a quantized op's scales are scales; integer slots are settings (their size decides)
    setting, scale = Slot.SETTING, Slot.SCALE
    assert slot_kinds("QLinearAdd", 1, MS) == (setting, scale, setting) * 2 + (scale, setting)
    assert slot_kinds("QLinearConv", 10, "") == (setting, scale, setting) * 2 + (scale, setting, setting)
    for opset in (10, 13, 19, 21, 23, 25):  # whatever types each opset allows
        assert slot_kinds("QuantizeLinear", opset, "")[1] == scale
        assert slot_kinds("DequantizeLinear", opset, "")[1] == scale
    assert slot_kinds("MatMulIntegerToFloat", 1, MS)[2:4] == (scale, scale)
    # an op with no quantized slot has no scales, whatever its inputs are called
    assert Slot.SCALE not in slot_kinds("Resize", 19, "") + slot_kinds("LayerNormalization", 17, "")
    # a float slot typed like the data is learned (a second operand, a bias)
    assert slot_kinds("BiasGelu", 1, MS) == (Slot.LEARNED, Slot.LEARNED)


# -- a QOperator graph, end to end ----------------------------------------------------------------


@pytest.fixture(scope="module")
def qop(build_model, process_proto):
    return process_proto(qop_model(build_model))


def test_every_contrib_node_is_a_shaped_layer(qop):
    graph = qop.graph
    assert graph.unsupported == ()
    assert [lay.op_type for lay in graph.layers if lay.domain == MS] == CONTRIB_OPS
    assert layer_of(qop, "QGemm").output_shapes == [[1, 32]]
    assert layer_of(qop, "QLinearGlobalAveragePool").output_shapes == [[1, 8, 1, 1]]
    assert layer_of(qop, "QLinearAdd").opset == 1


def test_scales_are_scales_zero_points_values_and_int8_weights_weights(qop):
    add = layer_of(qop, "QLinearAdd")
    kinds = [i.kind for i in add.inputs]
    act, scale, value = InputKind.ACTIVATION, InputKind.SCALE, InputKind.VALUE
    assert kinds == [act, scale, value, act, scale, value, scale, value]
    assert add.inputs[6].value == (pytest.approx(0.05),) and add.inputs[7].value == (128,)
    mul = layer_of(qop, "QLinearMul")
    assert mul.inputs[3].kind is InputKind.VALUE and mul.inputs[3].value == tuple(range(120, 128))
    gemm = layer_of(qop, "QGemm")
    by_slot = dict(zip(["A", "a_s", "a_z", "B", "b_s", "b_z", "C", "y_s", "y_z"], gemm.inputs, strict=True))
    assert by_slot["B"].kind is InputKind.WEIGHT and by_slot["B"].tensor.dtype == "int8"
    assert all(by_slot[s].kind is InputKind.SCALE for s in ("a_s", "b_s", "y_s"))
    assert all(by_slot[s].kind is InputKind.VALUE for s in ("a_z", "b_z", "y_z"))
    assert by_slot["C"].kind is InputKind.VALUE and by_slot["C"].value == tuple(range(32))
    assert dict(gemm.attributes) == {"alpha": 1.0, "transA": 0, "transB": 0}  # ONNX Runtime's defaults


def test_contrib_layers_are_keyed_by_which_scales_are_equal_not_by_scales_or_weights(build_model, process_proto, qop):
    other_scale = process_proto(qop_model(build_model, add_scale=0.07))
    assert layer_of(other_scale, "QLinearAdd").layer_key == layer_of(qop, "QLinearAdd").layer_key
    assert layer_of(other_scale, "QLinearSigmoid").layer_key == layer_of(qop, "QLinearSigmoid").layer_key
    assert other_scale.graph.graph_key != qop.graph.graph_key  # another model all the same
    same_as_input = process_proto(qop_model(build_model, add_scale=0.02))  # the output's scale is the input's
    assert layer_of(same_as_input, "QLinearAdd").layer_key != layer_of(qop, "QLinearAdd").layer_key
    other_weights = process_proto(qop_model(build_model, weight_seed=1))
    assert layer_of(other_weights, "QGemm").layer_key == layer_of(qop, "QGemm").layer_key


@pytest.mark.parametrize("op_type", CONTRIB_OPS)
def test_a_contrib_layer_alone_carries_its_domain_and_values_and_runs(qop, op_type):
    layer = layer_of(qop, op_type)
    model = run_alone(qop, layer)
    assert {o.domain: o.version for o in model.opset_import}[MS] == 1
    (node,) = model.graph.node
    assert node.domain == MS
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    for pos, inp in enumerate(layer.inputs):
        if inp.kind is InputKind.VALUE:
            assert inits[node.input[pos]].ravel().tolist() == pytest.approx(list(inp.value))


def test_onnxruntime_runs_a_qoperator_graph_node_by_node(qop):
    units = OnnxRuntimeCPU(threads=1).execution_groups(qop.graph, qop.proto)
    assert sorted(i for unit in units for i in unit) == list(range(len(qop.graph.layers)))
    plan = plan_model(qop, OnnxRuntimeCPU(threads=1), (1,))
    assert plan.notes == () and plan.not_benchmarked == ()


def measured_and_bounded(path: Path, uri: str) -> set[str]:
    """``bench run --e2e`` of ``path``: every benchmark measured, the bound covering the model whole;
    the ops the records measured."""
    result = invoke("bench", "run", path, "--db", uri, "--e2e", "-f", "json", *FAST_FLAGS)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["failed"] == 0 and out["measured"] > 0 and out["not_benchmarked"] == []
    with open_store(uri, create=False) as store:
        records = store.records(system=SYSTEM)
    assert all(r.outcome == "ok" for r in records), [(r.label, r.reason) for r in records if r.outcome != "ok"]
    bound = invoke("analyze", "lower-bound", path, "--db", uri, "-f", "json", *FAST_FLAGS[4:])
    assert bound.exit_code == 0, bound.output
    (row,) = json.loads(bound.stdout)
    assert row["coverage"] == 1.0 and row["missing"] == []
    assert row["sequential_ms"] > 0 and row["e2e_ms"] > 0
    return {r.label.split("[")[0].split(" ")[0] for r in records}


def test_bench_run_measures_every_contrib_layer_and_the_bound_covers_them(build_model, tmp_path):
    path = tmp_path / "qop.onnx"
    onnx.save(qop_model(build_model), path)
    labels = measured_and_bounded(path, f"sqlite:///{tmp_path / 'qop.db'}")
    assert set(CONTRIB_OPS) <= labels, labels


# -- described but not runnable here --------------------------------------------------------------


@pytest.fixture(scope="module")
def bias_add_file(tmp_path_factory, build_model) -> Path:
    """``x -> Relu -> com.microsoft::BiasAdd(., bias, skip) -> Sigmoid``: ONNX Runtime has BiasAdd's schema,
    but only a CUDA kernel."""
    model = build_model(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("BiasAdd", ["r", "bias", "skip"], ["a"], name="bias_add", domain=MS),
            helper.make_node("Sigmoid", ["a"], ["y"], name="sigmoid"),
        ],
        [("x", F, [2, 4, 8]), ("skip", F, [2, 4, 8])],
        [("y", F, [2, 4, 8])],
        {"bias": np.ones(8, np.float32)},
        extra_opsets={MS: 1},
        check=False,
    )
    path = tmp_path_factory.mktemp("bias_add") / "bias_add.onnx"
    onnx.save(model, path)
    return path


def test_a_described_op_without_a_kernel_is_stored_failed_and_the_bound_says_so(bias_add_file, tmp_path):
    uri = f"sqlite:///{tmp_path / 'bias_add.db'}"
    result = invoke("bench", "run", bias_add_file, "--db", uri, "-f", "json", *FAST_FLAGS)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    out = json.loads(result.stdout)
    assert out["failed"] == 1 and out["measured"] == 2  # Relu and Sigmoid
    with open_store(uri, create=False) as store:
        (failed,) = store.records(system=SYSTEM, outcome="failed")
    assert failed.label.startswith("BiasAdd") and "BiasAdd" in failed.reason and "\n" not in failed.reason
    bound = invoke("analyze", "lower-bound", bias_add_file, "--db", uri, "-f", "json", *FAST_FLAGS[4:])
    assert bound.exit_code == 0, bound.output
    (row,) = json.loads(bound.stdout)
    assert row["coverage"] == pytest.approx(2 / 3) and row["sequential_ms"] is None
    (missing,) = row["missing"]
    assert missing["name"] == "bias_add" and missing["domain"] == MS
    assert missing["reason"].startswith("failed: ") and "BiasAdd" in missing["reason"]


# -- ONNX Runtime's ops in ONNX's own domain -----------------------------------------------------


def rms_norm_model(build_model, op_type: str = "SimplifiedLayerNormalization") -> onnx.ModelProto:
    """``x -> SimplifiedLayerNormalization(., w) -> MatMul(., 64x32)``, the norm in ONNX's domain as ONNX
    Runtime's transformer optimizer and onnxruntime-genai's builder write it into Llama-style exports."""
    return build_model(
        [
            helper.make_node(op_type, ["x", "w"], ["n"], name="rms", axis=-1, epsilon=1e-5, stash_type=1),
            helper.make_node("MatMul", ["n", "proj"], ["y"], name="proj"),
        ],
        [("x", F, [1, 8, 64])],
        [("y", F, [1, 8, 32])],
        {"w": np.ones(64, np.float32), "proj": np.ones((64, 32), np.float32)},
        check=False,
    )


def test_an_onnxruntime_op_in_onnx_domain_is_a_model_ort_runs_not_an_invalid_one(build_model, tmp_path):
    """ONNX's checker knows only ONNX's schemas and refuses the model; ONNX Runtime registers the op in
    that domain and runs it. benanza takes what ONNX Runtime runs, and still refuses an op nobody knows."""
    model = rms_norm_model(build_model)
    with pytest.raises(onnx.checker.ValidationError, match="SimplifiedLayerNormalization"):
        onnx.checker.check_model(model)
    path = tmp_path / "rms.onnx"
    onnx.save(model, path)
    uri = f"sqlite:///{tmp_path / 'rms.db'}"
    labels = measured_and_bounded(path, uri)
    assert "SimplifiedLayerNormalization" in labels, labels

    unknown = tmp_path / "unknown.onnx"
    onnx.save(rms_norm_model(build_model, "NoSuchNormalization"), unknown)
    refused = invoke("bench", "run", unknown, "--db", uri, "-f", "json", *FAST_FLAGS)
    assert refused.exit_code != 0
    assert f"{unknown}: invalid ONNX model: No Op registered for NoSuchNormalization" in refused.output


def test_the_checker_takes_onnxruntime_ops_in_onnx_domain_inside_subgraphs_too(build_model, tmp_path):
    """An ``If`` whose branches hold the op: the copy the checker sees moves it in every subgraph."""
    from benanza.model.load import load_model, onnxruntime_ops_in_onnx_domain

    branch = rms_norm_model(build_model).graph
    then, other = onnx.GraphProto(), onnx.GraphProto()
    for g, name in ((then, "then"), (other, "else")):
        g.CopyFrom(branch)
        g.name = name
        del g.input[:]  # a branch reads x from the outer graph
    model = build_model(
        [helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then, else_branch=other)],
        [("c", TensorProto.BOOL, []), ("x", F, [1, 8, 64])],
        [("y", F, [1, 8, 32])],
        check=False,
    )
    assert onnxruntime_ops_in_onnx_domain(model) == {"SimplifiedLayerNormalization"}
    path = tmp_path / "if_rms.onnx"
    onnx.save(model, path)
    loaded = load_model(path)
    assert [n.domain for n in loaded.graph.node[0].attribute[0].g.node] == ["", ""]  # the model itself unchanged


@pytest.mark.parametrize("elem", [TensorProto.FLOAT, TensorProto.FLOAT16])
def test_a_skipped_output_keeps_the_positions_of_those_after_it(build_model, process_proto, elem):
    """onnxruntime-genai's decoders read ``SkipSimplifiedLayerNormalization``'s outputs 0 and 3 (the
    normalised sum and the sum) and leave 1 and 2 (mean, inv_std_var, float32 whatever the input)
    unnamed. Built alone without those gaps the sum went to slot 1: a float16 unit failed in ONNX
    Runtime (its float32 mean into a float16 sink), a float32 one ran another output than the model's."""
    dtype = np.float16 if elem == TensorProto.FLOAT16 else np.float32
    node = helper.make_node(
        "SkipSimplifiedLayerNormalization", ["x", "skip", "gamma"], ["norm", "", "", "sum"], domain=MS, epsilon=1e-6
    )
    consume = helper.make_node("Add", ["norm", "sum"], ["y"])
    model = build_model(
        [node, consume],
        [("x", elem, [1, 4, 64]), ("skip", elem, [1, 4, 64])],
        [("y", elem, None)],
        initializers={"gamma": np.ones(64, dtype)},
        extra_opsets={MS: 1},
    )
    processed = process_proto(model)
    layer = layer_of(processed, "SkipSimplifiedLayerNormalization")
    assert layer.output_slots == (0, 3) and [o.dtype for o in layer.outputs] == [np.dtype(dtype).name] * 2
    built = run_alone(processed, layer)
    (unit,) = [n for n in built.graph.node if n.op_type == "SkipSimplifiedLayerNormalization"]
    assert [bool(name) for name in unit.output] == [True, False, False, True]
    # and in the spec's document, as a fleet's workers and the stored records get the network
    network = network_of(processed.graph, [layer.index])[1]
    assert Network.from_doc(network.to_doc()) == network and network.nodes[0].output_slots == (0, 3)
    # a node whose outputs have no gap keeps no slots: its key is what it was
    add = layer_of(processed, "Add")
    assert add.output_slots == () and network_of(processed.graph, [add.index])[1].nodes[0].output_slots == ()


def test_symbolic_shapes_are_remembered_per_signature_not_per_name(monkeypatch):
    """An int4 LLM's ``MatMulNBits`` share a few signatures: a node of another name and the same signature gets the
    same shapes without a second inference; another input shape is inferred afresh, and a large value is not keyed."""
    from benanza.model import resolve

    inferred = []
    infer = resolve._symbolic_shapes
    monkeypatch.setattr(resolve, "_SYMBOLIC_SEEN", {})
    monkeypatch.setattr(
        resolve, "_symbolic_shapes", lambda model, needed: inferred.append(needed) or infer(model, needed)
    )

    def int4(name: str) -> onnx.NodeProto:
        return helper.make_node(
            "MatMulNBits", [f"{name}_a", f"{name}_b", f"{name}_s"], [f"{name}_y"], name=name, domain="com.microsoft",
            K=32, N=16, bits=4, block_size=32,
        )  # fmt: skip

    of = helper.make_model(
        helper.make_graph([], "g", [], []),
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
    )

    def shapes(name: str, rows: int) -> dict:
        inputs = {f"{name}_a": ((rows, 32), 1), f"{name}_b": ((16, 1, 16), 2), f"{name}_s": ((16,), 1)}
        return resolve.OneNode(int4(name), inputs, {}, of).symbolic_shapes([f"{name}_y"])

    assert shapes("q_proj", 5) == {"q_proj_y": ((5, 16), 1)}
    assert shapes("k_proj", 5) == {"k_proj_y": ((5, 16), 1)}
    assert len(inferred) == 1  # remembered, under no name
    assert shapes("k_proj", 7) == {"k_proj_y": ((7, 16), 1)}
    assert len(inferred) == 2
    big = {"v_a": np.zeros((3000, 32), np.float32)}  # 384,000 bytes: not keyed, inferred every time
    for _ in range(2):
        found = resolve.OneNode(
            int4("v"), {"v_a": ((3000, 32), 1), "v_b": ((16, 1, 16), 2), "v_s": ((16,), 1)}, big, of
        ).symbolic_shapes(["v_y"])
        assert found == {"v_y": ((3000, 16), 1)}
    assert len(inferred) == 4 and len(resolve._SYMBOLIC_SEEN) == 2


def test_an_output_a_session_cannot_shape_is_unknown_not_a_scalar():
    """ONNX Runtime gives an output it could not shape as ``[]``, as it gives a scalar (``com.microsoft::CDist``): taken
    for a scalar, the rebatch walk carried a rank-0 shape and failed on the ``Expand`` after it."""
    from benanza.model.resolve import OneNode

    of = helper.make_model(
        helper.make_graph([], "g", [], []),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
    )
    cdist = helper.make_node("CDist", ["x", "c"], ["d"], domain="com.microsoft")
    one = OneNode(cdist, {"x": ((3, 4), TensorProto.FLOAT), "c": ((5, 4), TensorProto.FLOAT)}, {}, of)
    assert one.session_shapes(["d"]) == {"d": None}
