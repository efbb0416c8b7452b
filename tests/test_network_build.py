"""Networks (name-free plain data of one or more layers) and building them back into ONNX."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from benanza.bench.build import build_onnx
from benanza.model.network import network_of
from benanza.model.synthetic import synthetic_array
from benanza.runtimes.onnxruntime import feeds_for, session_options


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
    assert network["layers"] == 3
    assert [n["op_type"] for n in network["nodes"]] == ["Conv", "BatchNormalization", "Relu"]
    assert network["inputs"] == [{"shape": [1, 3, 8, 8], "dtype": "float32"}]
    assert network["outputs"] == [{"node": 2, "output": 0}]
    # BN reads the Conv, Relu reads the BN: wired by position, not by name
    assert network["nodes"][1]["inputs"][0] == {"kind": "node", "node": 0, "output": 0}
    assert network["nodes"][2]["inputs"][0] == {"kind": "node", "node": 1, "output": 0}
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
    assert network["nodes"][0]["inputs"][1] == {"kind": "value", "shape": [2], "dtype": "int64", "value": [1, -1]}
    model = build_onnx(network)
    (target,) = [v for v in initializers(model).values() if v.dtype == np.int64]
    assert target.tolist() == [1, -1]
    (out,) = run_network(network)
    assert out.shape == (1, 256)


def test_weights_are_random_with_the_recorded_shape(chain):
    _, network = network_of(chain.graph, [0])  # Conv 4x3x3x3 with bias
    assert [r["kind"] for r in network["nodes"][0]["inputs"]] == ["input", "weight", "weight"]
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
    back = json.loads(json.dumps(network))
    assert back == network
    assert build_onnx(back).SerializeToString() == build_onnx(network).SerializeToString()


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
    assert network["outputs"] == [{"node": 0, "output": 0}, {"node": 1, "output": 0}]
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
    assert [n["layer_key"] for n in shared_net["nodes"]] == [n["layer_key"] for n in apart_net["nodes"]]
    assert len(shared_net["inputs"]) == 1 and len(apart_net["inputs"]) == 2
    assert shared_key != apart_key
    assert len(run_network(shared_net)) == len(run_network(apart_net)) == 2


def test_attributes_unknown_to_the_opset_are_dropped():
    network = {
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
    model = build_onnx(network)
    assert [a.name for a in model.graph.node[0].attribute] == ["alpha"]
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 13)]
    (out,) = run_network(network)
    assert out.shape == (2, 3)
