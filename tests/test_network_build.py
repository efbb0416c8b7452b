"""Networks (name-free frozen values of one or more layers), their documents, and building them into ONNX."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import ZOO_MODELS
from onnx import TensorProto, helper, numpy_helper

from benanza.bench.build import QDQ_PROPAGATION, build_onnx, disabled_optimizers
from benanza.bench.generate import plan_model, specs_for_plan
from benanza.model.network import InputRef, Network, NetworkOutput, NetworkTensor, RefKind, network_of
from benanza.model.synthetic import synthetic_array
from benanza.runtimes.null import NullRuntime
from benanza.runtimes.onnxruntime import OnnxRuntimeCPU, feeds_for, optimized_model, session_options


def run_network(network):
    """Build ``network``, run it once in ONNX Runtime and return the outputs."""
    model = build_onnx(network)
    session = ort.InferenceSession(
        model.SerializeToString(), session_options("extended", 1), providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds_for(model))


def initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


@pytest.fixture(scope="module")
def chain(conv_chain, process_proto):
    return process_proto(conv_chain("reshape"))


def test_every_unique_layer_of_squeezenet_builds_and_runs(zoo_model):
    graph = zoo_model("squeezenet").graph
    first_of = {}
    for layer in graph.layers:
        first_of.setdefault(layer.layer_key, layer.index)
    assert len(first_of) == len(graph.unique_layer_keys) > 20
    for key, index in first_of.items():
        net_key, network = network_of(graph, [index])
        assert net_key == key
        model = build_onnx(network)
        onnx.checker.check_model(model)
        outputs = run_network(network)
        expected = [list(o.shape) for o in graph.layers[index].outputs]
        assert [list(o.shape) for o in outputs] == expected, graph.layers[index].name


def test_a_fused_group_runs_as_one_network(chain):
    key, network = network_of(chain.graph, [0, 1, 2])
    assert network.layers == 3
    assert [n.op_type for n in network.nodes] == ["Conv", "BatchNormalization", "Relu"]
    assert network.inputs == (NetworkTensor((1, 3, 8, 8), "float32"),)
    assert network.outputs == (NetworkOutput(2, 0),)
    # BN reads the Conv, Relu reads the BN: wired by position, not by name
    assert network.nodes[1].inputs[0] == InputRef.of_node(0, 0)
    assert network.nodes[2].inputs[0] == InputRef.of_node(1, 0)
    (out,) = run_network(network)
    assert out.shape == (1, 4, 8, 8)
    finite = out[np.isfinite(out)]  # random variances below zero give NaN channels: fine for timing
    assert finite.size and (finite >= 0).all()  # it ends in a Relu
    assert key not in chain.graph.layer_keys


def test_a_whole_model_network_runs(chain):
    _, network = network_of(chain.graph, range(5))
    (out,) = run_network(network)
    assert out.shape == (1, 256)


def test_value_inputs_keep_their_values(chain):
    _, network = network_of(chain.graph, [4])  # Reshape to [1, -1]
    assert network.nodes[0].inputs[1] == InputRef.of_value([2], "int64", [1, -1])
    assert network.nodes[0].inputs[1].to_doc() == {"kind": "value", "shape": [2], "dtype": "int64", "value": [1, -1]}
    model = build_onnx(network)
    (target,) = [v for v in initializers(model).values() if v.dtype == np.int64]
    assert target.tolist() == [1, -1]
    (out,) = run_network(network)
    assert out.shape == (1, 256)


def test_weights_are_random_with_the_recorded_shape(chain):
    _, network = network_of(chain.graph, [0])  # Conv 4x3x3x3 with bias
    assert [r.kind for r in network.nodes[0].inputs] == [RefKind.INPUT, RefKind.WEIGHT, RefKind.WEIGHT]
    model = build_onnx(network, seed=0)
    weights = initializers(model)
    assert sorted(w.shape for w in weights.values()) == [(4,), (4, 3, 3, 3)]
    for w in weights.values():
        assert w.dtype == np.float32
        assert ((w >= -1) & (w < 1)).all()
        assert len(np.unique(w)) == w.size  # random, not a constant fill
    original = numpy_helper.to_array(next(t for t in chain.proto.graph.initializer if t.name == "w1"))
    built = next(w for w in weights.values() if w.ndim == 4)
    assert not np.array_equal(built, original)  # values are synthetic, never copied
    assert build_onnx(network, seed=0).SerializeToString() == model.SerializeToString()
    assert build_onnx(network, seed=1).SerializeToString() != model.SerializeToString()


def test_synthetic_arrays_float_in_range_integers_zero():
    rng = np.random.default_rng(0)
    floats = synthetic_array([64], "float16", rng)
    assert floats.dtype == np.float16 and ((floats >= -1) & (floats <= 1)).all() and floats.std() > 0
    ints = synthetic_array([2, 3], "int64", rng)
    assert ints.dtype == np.int64 and ints.shape == (2, 3) and not ints.any()
    assert synthetic_array([4], "bool", rng).tolist() == [False] * 4


def test_a_layer_fed_a_scalar_computed_at_run_time_builds_and_runs(process_proto):
    """Dynamic quantization multiplies by a scale computed at run time (shape ``()``): the layer
    alone gets a synthetic 0-d array, which ONNX Runtime takes (a numpy scalar it refuses)."""
    nodes = [
        helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),  # a scalar that depends on the input
        helper.make_node("Mul", ["x", "m"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "scalar_scale",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
    )
    processed = process_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    (mul,) = [i for i, layer in enumerate(processed.graph.layers) if layer.op_type == "Mul"]
    assert processed.graph.layers[mul].inputs[1].tensor.shape == ()
    model = build_onnx(network_of(processed.graph, [mul])[1])
    options = session_options("extended", 1)
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    (out,) = session.run(None, feeds_for(model))
    assert out.shape == (1, 8)
    assert isinstance(synthetic_array([], "float32", np.random.default_rng(0)), np.ndarray)


def test_renamed_copies_have_equal_networks_and_keys(chain, conv_chain, process_proto):
    renamed = process_proto(conv_chain("reshape", prefix="copy_")).graph
    for members in ([0], [3], [4], [0, 1, 2], [2, 3], list(range(5))):
        assert network_of(chain.graph, members) == network_of(renamed, members), members


def test_networks_are_json_data(chain):
    _, network = network_of(chain.graph, range(5))
    doc = network.to_doc()
    back = Network.from_doc(json.loads(json.dumps(doc)))
    assert back == network
    assert back.to_doc() == doc
    assert build_onnx(back).SerializeToString() == build_onnx(network).SerializeToString()


# The keys and the documents' hashes of the conv chain's networks, and the spec ids of its plan,
# computed before networks became typed values (from plain dicts): a change of one is a change
# of stored keys or records and needs a KEY_VERSION or SPEC_VERSION bump.
CHAIN_NETWORKS = {
    (0, 1, 2): ("c617d4175eb83559", "b920442c8dd3d3d5"),  # Conv+BN+Relu
    (0, 1, 2, 3, 4): ("0043a489b3979717", "9b0cbeeec670d3a2"),  # the whole chain
    (4,): ("b6588f369efb3c13", "1553f22c109eb1d1"),  # Reshape with a value input
}
CHAIN_SPEC_IDS = {
    "45ea35cb59a25d49": "5855e1f08437d2c6",  # Conv
    "bebdc168d54d5056": "934d4087fbc2d9e8",  # BatchNormalization
    "13c4c62a85d2bd8c": "ff80aedafacca558",  # Relu
    "1769c8504671764d": "51d6078af6bde757",  # Conv
    "b6588f369efb3c13": "998e94e3ad29b318",  # Reshape
    "ceea9d595813c844": "0c024b99807ebe9a",  # sequence Conv+BatchNormalization
    "78c2ddb47cc3b44a": "ef5082abbe51f353",  # sequence Relu+Conv
    # the call overhead: Relu of one float at opset 17, keyed by the model since each model measures
    # its own (a new key beside the old shared one, whose records stay readable: no version bump)
    "0d3887f844357739": "94df3909886d7c05",
}


def _doc_hash(network: Network) -> str:
    text = json.dumps(network.to_doc(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def test_network_keys_documents_and_spec_ids_are_those_of_plain_dict_networks(chain):
    for members, (key, doc_hash) in CHAIN_NETWORKS.items():
        got_key, network = network_of(chain.graph, members)
        assert (got_key, _doc_hash(network)) == (key, doc_hash), members
    plan = plan_model(chain, NullRuntime(), granularities=(2,))
    specs = specs_for_plan(plan, "onnxruntime", {"threads": 1})
    assert {s.key: s.spec_id for s in specs if s.network is not None} == CHAIN_SPEC_IDS


@pytest.mark.parametrize("name", ZOO_MODELS)
def test_every_zoo_network_survives_its_document(zoo_model, name):
    plan = plan_model(zoo_model(name), NullRuntime(), granularities=(2, 4))
    assert len(plan.networks) > len(plan.graph.unique_layer_keys)  # layers and sequences
    for key, network in plan.networks.items():
        doc = network.to_doc()
        assert Network.from_doc(doc) == network, key
        assert Network.from_doc(json.loads(json.dumps(doc))) == network, key
        assert hash(Network.from_doc(doc)) == hash(network)  # frozen all the way down


def test_a_reference_needs_the_fields_of_its_kind():
    with pytest.raises(ValueError, match="node input reference needs output"):
        InputRef(RefKind.NODE, node=0)
    with pytest.raises(ValueError, match="value input reference needs value"):
        InputRef.from_doc({"kind": "value", "shape": [1], "dtype": "int64", "value": None})
    with pytest.raises(ValueError):
        InputRef.from_doc({"kind": "tensor"})


def test_an_empty_layer_list_is_an_error(chain):
    with pytest.raises(ValueError, match="at least one layer"):
        network_of(chain.graph, [])


# -- wiring: branches and shared inputs ------------------------------------------------------


def _two_branches(build_model, process_proto, shared: bool):
    """Relu(x1) -> Sigmoid and Tanh; the Tanh reads the Relu (shared) or the second input."""
    nodes = [
        helper.make_node("Relu", ["x1"], ["a"]),
        helper.make_node("Sigmoid", ["a"], ["b"]),
        helper.make_node("Tanh", ["a" if shared else "x2"], ["c"]),
        helper.make_node("Add", ["b", "c"], ["y"]),
    ]
    inputs = [("x1", TensorProto.FLOAT, [2, 5])]
    if not shared:
        nodes[0:1] = [helper.make_node("Relu", ["x1"], ["a"]), helper.make_node("Relu", ["x2"], ["a2"])]
        nodes[3] = helper.make_node("Tanh", ["a2"], ["c"])
        inputs.append(("x2", TensorProto.FLOAT, [2, 5]))
    return process_proto(build_model(nodes, inputs, [("y", TensorProto.FLOAT, None)])).graph


def test_an_output_read_outside_the_network_is_exposed(build_model, process_proto):
    graph = _two_branches(build_model, process_proto, shared=True)
    assert [layer.op_type for layer in graph.layers] == ["Relu", "Sigmoid", "Tanh", "Add"]
    _, network = network_of(graph, [0, 1])
    # the Relu feeds the Tanh outside, the Sigmoid feeds the Add outside
    assert network.outputs == (NetworkOutput(0, 0), NetworkOutput(1, 0))
    relu, sigmoid = run_network(network)
    assert relu.shape == sigmoid.shape == (2, 5)
    np.testing.assert_allclose(sigmoid, 1 / (1 + np.exp(-relu)), rtol=1e-5)


def test_wiring_is_part_of_a_multi_layer_key(build_model, process_proto):
    shared = _two_branches(build_model, process_proto, shared=True)
    apart = _two_branches(build_model, process_proto, shared=False)
    # Sigmoid and Tanh on one tensor vs on two tensors: same layer keys, different wiring
    shared_key, shared_net = network_of(shared, [1, 2])
    sig = next(layer.index for layer in apart.layers if layer.op_type == "Sigmoid")
    tanh = next(layer.index for layer in apart.layers if layer.op_type == "Tanh")
    apart_key, apart_net = network_of(apart, [sig, tanh])
    assert [n.layer_key for n in shared_net.nodes] == [n.layer_key for n in apart_net.nodes]
    assert len(shared_net.inputs) == 1 and len(apart_net.inputs) == 2
    assert shared_key != apart_key
    assert len(run_network(shared_net)) == len(run_network(apart_net)) == 2


def test_attributes_unknown_to_the_opset_are_dropped():
    network = Network.from_doc(
        {
            "inputs": [{"shape": [2, 3], "dtype": "float32"}],
            "nodes": [
                {
                    "op_type": "LeakyRelu",
                    "domain": "",
                    "opset": 13,
                    "attributes": {"alpha": 0.5, "not_an_attribute": [1, 2]},
                    "inputs": [{"kind": "input", "input": 0}],
                    "outputs": [{"shape": [2, 3], "dtype": "float32"}],
                    "layer_key": "k",
                }
            ],
            "outputs": [{"node": 0, "output": 0}],
            "layers": 1,
        }
    )
    model = build_onnx(network)
    assert [a.name for a in model.graph.node[0].attribute] == ["alpha"]
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 13)]
    (out,) = run_network(network)
    assert out.shape == (2, 3)


# -- sinks: a built unit's outputs read as inside its model -------------------------------------


@pytest.fixture(scope="module")
def tanh_gelu_model(build_model, process_proto):
    """GPT-2's tanh GELU between two MatMuls, as ``torch.onnx`` exports it (x [1, 8, 16])."""
    rng = np.random.default_rng(0)
    c = {
        "half": np.float32(0.5),
        "three": np.float32(3.0),
        "k": np.float32(0.044715),
        "s": np.float32(0.7978846),
        "one": np.float32(1.0),
        "w1": rng.standard_normal((16, 32)).astype(np.float32),
        "w2": rng.standard_normal((32, 16)).astype(np.float32),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Mul", ["h", "half"], ["m0"]),
        helper.make_node("Pow", ["h", "three"], ["p"]),
        helper.make_node("Mul", ["p", "k"], ["m1"]),
        helper.make_node("Add", ["h", "m1"], ["a0"]),
        helper.make_node("Mul", ["a0", "s"], ["m2"]),
        helper.make_node("Tanh", ["m2"], ["t"]),
        helper.make_node("Add", ["t", "one"], ["a1"]),
        helper.make_node("Mul", ["m0", "a1"], ["g"]),
        helper.make_node("MatMul", ["g", "w2"], ["y"]),
    ]
    model = build_model(nodes, [("x", TensorProto.FLOAT, [1, 8, 16])], [("y", TensorProto.FLOAT, None)], c)
    return process_proto(model)


def optimized_ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in optimized_model(model, "extended").graph.node]


def test_a_fused_group_built_with_a_sink_optimizes_as_inside_its_model(tanh_gelu_model):
    from benanza.runtimes.onnxruntime import OnnxRuntimeCPU

    plan = plan_model(tanh_gelu_model, OnnxRuntimeCPU(threads=1), ())
    gelu = next(k for members, k in zip(plan.units, plan.unit_keys, strict=True) if len(members) == 8)
    network = plan.networks[gelu]
    # the cause: ONNX Runtime fuses no pattern whose last node writes a graph output
    assert optimized_ops(build_onnx(network)) == ["Mul", "Pow", "Mul", "Add", "Mul", "Tanh", "Add", "Mul"]
    sunk = build_onnx(network, sink=True)
    onnx.checker.check_model(sunk)
    assert optimized_ops(sunk) == ["FastGelu", "Slice"]  # one kernel, as in the model
    session = ort.InferenceSession(sunk.SerializeToString(), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, feeds_for(sunk))
    assert out.shape == (1, 1, 1)


def test_a_sink_is_opaque_to_the_transpose_optimizer(build_model, process_proto):
    """A Slice of constant axes lets ORT push a Transpose through it onto one element; the sink's axes are an input."""
    model = build_model(
        [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]), helper.make_node("Relu", ["t"], ["y"])],
        [("x", TensorProto.FLOAT, [1, 64, 12, 64])],
        [("y", TensorProto.FLOAT, None)],
    )
    graph = process_proto(model).graph
    _, network = network_of(graph, [0])
    assert optimized_ops(build_onnx(network, sink=True)) == ["Transpose", "Slice"]


def test_a_network_of_an_opset_before_ten_is_built_without_sinks(build_model, process_proto):
    model = build_model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sigmoid", ["r"], ["y"])],
        [("x", TensorProto.FLOAT, [1, 4])],
        [("y", TensorProto.FLOAT, None)],
        opset=9,
    )
    _, network = network_of(process_proto(model).graph, [0, 1])
    built = build_onnx(network, sink=True)
    assert [n.op_type for n in built.graph.node] == ["Relu", "Sigmoid"]
    assert [i.name for i in built.graph.input] == ["in0"]
    assert built.opset_import[0].version == 9


def test_every_output_of_a_network_gets_its_own_sink_and_the_sinks_feeds_are_every_axis(build_model, process_proto):
    model = build_model(
        [helper.make_node("Split", ["x"], ["a", "b"], axis=1), helper.make_node("Relu", ["a"], ["y"])],
        [("x", TensorProto.FLOAT, [1, 4, 3])],
        [("y", TensorProto.FLOAT, None), ("b", TensorProto.FLOAT, None)],
    )
    _, network = network_of(process_proto(model).graph, [0, 1])
    built = build_onnx(network, sink=True)
    sinks = [n for n in built.graph.node if n.op_type == "Slice"]
    assert len(sinks) == len(built.graph.output) == 2
    feeds = feeds_for(built)
    assert [k for k in feeds if k.startswith("benanza_sink")] == ["benanza_sink_axes3"]
    assert feeds["benanza_sink_axes3"].tolist() == [0, 1, 2]
    session = ort.InferenceSession(built.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [o.shape for o in session.run(None, feeds)] == [(1, 1, 1), (1, 1, 1)]


def int8_dequantize_model(build_model, opset, then=None):
    """An int8 activation dequantized at ``opset`` (zero point 3), optionally through ``then`` (a Reshape)."""
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["d"])]
    out = "d"
    if then == "Reshape":
        nodes.append(helper.make_node("Reshape", ["d", "shape"], ["y"]))
        out = "y"
    return build_model(
        nodes,
        [("x", TensorProto.INT8, [1, 64])],
        [(out, TensorProto.FLOAT, None)],
        {"s": np.array(0.05, np.float32), "z": np.array(3, np.int8), "shape": np.array([8, 8], np.int64)},
        opset=opset,
    )


@pytest.mark.parametrize(("opset", "then"), [(13, None), (21, None), (13, "Reshape"), (21, "Reshape")])
def test_a_dequantized_output_gets_a_sink_qdq_propagation_does_not_move_past(build_model, process_proto, opset, then):
    """Before: a Slice sink, which ONNX Runtime's QDQ propagation moves a DequantizeLinear past;
    at opset 21 with int8 data ONNX Runtime 1.32 then refused the model, so the layer failed.
    Reached through a Reshape, the propagation is left out of the built model's sessions."""
    graph = process_proto(int8_dequantize_model(build_model, opset, then)).graph
    _, network = network_of(graph, range(len(graph.layers)))
    built = build_onnx(network, sink=True)
    assert [n.op_type for n in built.graph.node][-1] == "GatherElements"
    assert disabled_optimizers(built) == ([QDQ_PROPAGATION] if then else [])
    feeds = feeds_for(built)
    session = ort.InferenceSession(
        built.SerializeToString(),
        session_options("extended", 1),
        providers=["CPUExecutionProvider"],
        disabled_optimizers=disabled_optimizers(built),
    )
    (out,) = session.run(None, feeds)
    assert out.shape == tuple(1 for _ in graph.layers[-1].outputs[0].shape)
    assert out.ravel()[0] == pytest.approx(0.05 * (feeds["in0"].ravel()[0] - 3))  # the first element, dequantized
    # a float output keeps the Slice sink
    relu = build_model(
        [helper.make_node("Relu", ["x"], ["y"])], [("x", TensorProto.FLOAT, [2, 3])], [("y", TensorProto.FLOAT, None)]
    )
    _, plain = network_of(process_proto(relu).graph, [0])
    assert [n.op_type for n in build_onnx(plain, sink=True).graph.node][-1] == "Slice"


def test_an_empty_dequantized_output_gets_a_sink_that_runs(build_model, process_proto):
    """A quantized detector's boxes after a NonZero the model's run found nothing for (a YOLO11 quantized by ONNX
    Runtime, on a random image): its GatherElements sink read one element along an axis of none, and ONNX Runtime
    refused the unit ("'indices' shape should have values within bounds of 'data' shape"): 33 layers failed."""
    model = build_model(
        [
            helper.make_node("Slice", ["x", "zero", "zero"], ["none"]),  # no box kept: (0, 4)
            helper.make_node("QuantizeLinear", ["none", "s", "z"], ["q"]),
            helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
        ],
        [("x", TensorProto.FLOAT, [8, 4])],
        [("d", TensorProto.FLOAT, None)],
        {"s": np.array(0.05, np.float32), "z": np.array(3, np.int8), "zero": np.array([0], np.int64)},
    )
    graph = process_proto(model).graph
    assert [layer.op_type for layer in graph.layers] == ["Slice", "QuantizeLinear", "DequantizeLinear"]
    assert graph.layers[1].inputs[0].tensor.shape == (0, 4)
    _, network = network_of(graph, [1, 2])
    built = build_onnx(network, sink=True)
    assert [n.op_type for n in built.graph.node][-1] == "GatherElements"
    session = ort.InferenceSession(built.SerializeToString(), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, feeds_for(built))
    assert out.shape == (0, 1)


@pytest.mark.parametrize("then", ["Reshape", "Transpose", "Unsqueeze"])
def test_every_unit_of_an_opset21_int8_graph_dequantized_through_a_reshape_runs(build_model, process_proto, then):
    """The runtime's sessions (timed and profiled) leave QDQ propagation out for such a unit:
    before, ONNX Runtime 1.32 refused every one ("output_dtype INT8 does not match y_zero_point
    type UINT8"), as two DLBricks sequences of an unseen int8 LeViT at opset 21."""
    after = {
        "Reshape": (helper.make_node("Reshape", ["d", "shape"], ["r"]), {"shape": np.array([8, 8], np.int64)}),
        "Transpose": (helper.make_node("Transpose", ["d"], ["r"], perm=[1, 0]), {}),
        "Unsqueeze": (helper.make_node("Unsqueeze", ["d", "axes"], ["r"]), {"axes": np.array([0], np.int64)}),
    }[then]
    model = build_model(
        [
            helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
            helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
            after[0],
            helper.make_node("Relu", ["r"], ["y"]),
        ],
        [("x", TensorProto.FLOAT, [1, 64])],
        [("y", TensorProto.FLOAT, None)],
        {"s": np.array(0.05, np.float32), "z": np.array(3, np.int8), **after[1]},
        opset=21,
    )
    runtime = OnnxRuntimeCPU(threads=1)
    plan = plan_model(process_proto(model), runtime, (2, 3))
    specs = [s for s in specs_for_plan(plan, runtime.name, runtime.variant()) if s.network is not None]
    cut = [s for s in specs if s.network.nodes[-1].op_type == then]
    assert cut, "no unit or sequence ends at the op that the propagation would cross"
    for spec in specs:
        prepared = runtime.prepare(spec)
        try:
            prepared.call()
            assert len(prepared.kernel_times(2)) == 2
        finally:
            prepared.close()


def test_an_int4_weight_is_synthesised_packed_and_its_blocked_dequantize_runs(build_model, process_proto):
    """ONNX packs two int4 values to a byte; a synthetic int4 weight of one per byte was refused."""
    w = helper.make_tensor("w", TensorProto.INT4, [64, 32], np.zeros(64 * 32, np.int8).tolist())
    model = build_model(
        [
            helper.make_node("DequantizeLinear", ["w", "ws"], ["wf"], axis=0, block_size=16),
            helper.make_node("MatMul", ["x", "wf"], ["y"]),
        ],
        [("x", TensorProto.FLOAT, [1, 64])],
        [("y", TensorProto.FLOAT, None)],
        {"ws": np.full((4, 32), 0.1, np.float32)},
        opset=21,
        check=False,
    )
    model.graph.initializer.append(w)
    onnx.checker.check_model(model)
    graph = process_proto(model).graph
    dq = graph.layers[0]
    assert dq.inputs[0].tensor.dtype == "int4" and dq.inputs[0].kind.value == "weight"
    _, network = network_of(graph, [0])
    built = build_onnx(network, sink=True)
    (weight,) = [t for t in built.graph.initializer if t.data_type == TensorProto.INT4]
    assert len(weight.raw_data) == 64 * 32 // 2
    session = ort.InferenceSession(
        built.SerializeToString(), session_options("extended", 1), providers=["CPUExecutionProvider"]
    )
    assert session.run(None, feeds_for(built))[0].shape == (1, 1)


@pytest.mark.parametrize(
    "dtype, values",
    [
        ("float32", np.random.default_rng(0).random(5000, dtype=np.float32)),
        ("int64", np.arange(-2000, 2000, dtype=np.int64)),
        ("bool", np.arange(3000) % 3 == 0),
    ],
)
def test_many_carried_values_travel_packed_and_come_back_exact(dtype, values):
    """What a data-decided If reads (an SSDlite's 27,000 boxes) made each record 2 MB of JSON numbers:
    beyond ``PACKED_MIN_ELEMENTS`` a network input's values travel as their bytes, and come back the same."""
    from benanza.model.network import PACKED_MIN_ELEMENTS

    tensor = NetworkTensor((len(values),), dtype, tuple(values.tolist()))
    doc = json.loads(json.dumps(tensor.to_doc()))
    assert "value" not in doc and len(values) > PACKED_MIN_ELEMENTS
    assert len(json.dumps(doc)) < len(json.dumps(values.tolist()))
    assert NetworkTensor.from_doc(doc) == tensor
    few = NetworkTensor((3,), "int64", (1, 2, 3))
    assert few.to_doc()["value"] == [1, 2, 3] and NetworkTensor.from_doc(few.to_doc()) == few
