"""Layer keys: what is in them, what is not, and that their canonical form does not drift."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from benanza.model.graph import InputKind, LayerInput, TensorSpec
from benanza.model.keys import KEY_FIELDS, KEY_VERSION, key_fields, stable_id

F = TensorProto.FLOAT

# The key of one Conv (1x3x8x8, 4x3x3x3 weight, bias, pads 1) and of one Relu; a change
# of these literals is a change of every stored key and needs a KEY_VERSION bump.
CONV_KEY = "45ea35cb59a25d49"
RELU_KEY = "13c4c62a85d2bd8c"


def small_cnn(build_model, seed: int, prefix: str, x_shape=(1, 3, 8, 8), opset: int = 17, **conv_attrs):
    """Conv -> Relu -> Flatten -> Gemm with random weights and names all starting with ``prefix``."""
    rng = np.random.default_rng(seed)
    n = lambda s: f"{prefix}{s}"  # noqa: E731
    conv_attrs = {"pads": [1, 1, 1, 1], **conv_attrs}
    return build_model(
        [
            helper.make_node("Conv", [n("x"), n("w"), n("b")], [n("c")], name=n("conv"), **conv_attrs),
            helper.make_node("Relu", [n("c")], [n("r")], name=n("relu")),
            helper.make_node("Flatten", [n("r")], [n("f")], name=n("flatten")),
            helper.make_node("Gemm", [n("f"), n("fc_w"), n("fc_b")], [n("y")], name=n("fc"), transB=1),
        ],
        [(n("x"), F, list(x_shape))],
        [(n("y"), F, None)],
        {
            n("w"): rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
            n("b"): rng.standard_normal(4).astype(np.float32),
            n("fc_w"): rng.standard_normal((10, 4 * 8 * 8)).astype(np.float32),
            n("fc_b"): rng.standard_normal(10).astype(np.float32),
        },
        opset=opset,
    )


def keys_of(process_proto, model, batch=None) -> list[str]:
    graph = process_proto(model, batch=batch).graph
    assert not graph.unsupported
    return graph.layer_keys


def one_key(process_proto, model) -> str:
    (key,) = keys_of(process_proto, model)
    return key


# ------------------------------------------------------------------ what is not in the key


def test_names_and_weight_values_are_not_in_the_key(build_model, process_proto):
    a = keys_of(process_proto, small_cnn(build_model, seed=0, prefix="a_"))
    b = keys_of(process_proto, small_cnn(build_model, seed=1, prefix="model_two/"))
    assert a == b
    assert len(set(a)) == 4


def test_opset_is_not_in_the_key(build_model, process_proto):
    assert keys_of(process_proto, small_cnn(build_model, 0, "p", opset=13)) == keys_of(
        process_proto, small_cnn(build_model, 0, "p", opset=17)
    )


def test_same_layer_twice_in_one_model_keys_alike(build_model, process_proto):
    model = build_model(
        [helper.make_node("Relu", ["x"], ["a"], name="first"), helper.make_node("Relu", ["a"], ["y"], name="second")],
        [("x", F, [2, 3])],
        [("y", F, None)],
    )
    graph = process_proto(model).graph
    assert graph.layer_keys[0] == graph.layer_keys[1]
    assert len(graph.unique_layer_keys) == 1


def test_trailing_absent_inputs_are_not_in_the_key(build_model, process_proto):
    def clip(inputs):
        return build_model([helper.make_node("Clip", inputs, ["y"])], [("x", F, [4])], [("y", F, None)])

    assert one_key(process_proto, clip(["x"])) == one_key(process_proto, clip(["x", "", ""]))


# ------------------------------------------------------------------ what is in the key


def test_input_shape_changes_the_key(build_model, process_proto):
    base = keys_of(process_proto, small_cnn(build_model, 0, "p"))
    model = small_cnn(build_model, 0, "p", x_shape=("N", 3, 8, 8))
    assert keys_of(process_proto, model, batch=1) == base
    at2 = keys_of(process_proto, model, batch=2)
    assert not set(at2) & set(base)


def test_dtype_changes_the_key(build_model, process_proto):
    def relu(elem_type):
        return build_model(
            [helper.make_node("Relu", ["x"], ["y"])], [("x", elem_type, [2, 3])], [("y", elem_type, None)]
        )

    assert one_key(process_proto, relu(F)) != one_key(process_proto, relu(TensorProto.FLOAT16))


def test_attribute_changes_the_key(build_model, process_proto):
    base = keys_of(process_proto, small_cnn(build_model, 0, "p"))
    dilated = keys_of(process_proto, small_cnn(build_model, 0, "p", pads=[2, 2, 2, 2], dilations=[2, 2]))
    assert dilated[0] != base[0]  # same shapes, other dilation
    assert dilated[1:] == base[1:]

    def elu(alpha):
        return build_model([helper.make_node("Elu", ["x"], ["y"], alpha=alpha)], [("x", F, [5])], [("y", F, None)])

    assert one_key(process_proto, elu(1.0)) != one_key(process_proto, elu(0.5))
    default = build_model([helper.make_node("Elu", ["x"], ["y"])], [("x", F, [5])], [("y", F, None)])
    assert one_key(process_proto, default) == one_key(process_proto, elu(1.0))  # 1.0 is the default


def test_value_input_changes_the_key(build_model, process_proto):
    def reshape(target):
        return build_model(
            [helper.make_node("Reshape", ["x", "shape"], ["y"])],
            [("x", F, [2, 3, 4])],
            [("y", F, None)],
            {"shape": np.array(target, np.int64)},
        )

    a, b = reshape([6, 4]), reshape([6, -1])
    assert process_proto(a).graph.layers[0].output_shapes == process_proto(b).graph.layers[0].output_shapes
    assert one_key(process_proto, a) != one_key(process_proto, b)
    assert one_key(process_proto, a) == one_key(process_proto, reshape([6, 4]))


def test_small_integer_constants_are_values(build_model, process_proto):
    def gather(indices):
        return build_model(
            [helper.make_node("Gather", ["x", "idx"], ["y"], axis=0)],
            [("x", F, [5, 3])],
            [("y", F, None)],
            {"idx": np.array(indices, np.int64)},
        )

    layer = process_proto(gather([0, 2])).graph.layers[0]
    assert layer.inputs[1].kind is InputKind.VALUE and layer.inputs[1].value == (0, 2)
    assert one_key(process_proto, gather([0, 2])) != one_key(process_proto, gather([1, 4]))


def test_weight_values_are_not_values(build_model, process_proto):
    def add(weight):
        return build_model(
            [helper.make_node("Add", ["x", "w"], ["y"])],
            [("x", F, [3])],
            [("y", F, None)],
            {"w": np.array(weight, np.float32)},
        )

    layer = process_proto(add([1, 2, 3])).graph.layers[0]
    assert layer.inputs[1].kind is InputKind.WEIGHT and layer.inputs[1].value is None
    assert one_key(process_proto, add([1, 2, 3])) == one_key(process_proto, add([7, 8, 9]))


# ------------------------------------------------------------------ canonical form


def test_key_literals(build_model, process_proto):
    """A fixed tiny graph has a fixed key: any change of the canonical form shows here."""
    keys = keys_of(process_proto, small_cnn(build_model, 0, "p"))
    assert keys[:2] == [CONV_KEY, RELU_KEY]


def test_key_fields_are_explicit():
    x = TensorSpec("x", (2, 3), "float32")
    shape = TensorSpec("s", (2,), "int64")
    fields = key_fields(
        "Reshape",
        "",
        [LayerInput(x, InputKind.ACTIVATION), LayerInput(shape, InputKind.VALUE, (3, 2))],
        [TensorSpec("y", (3, 2), "float32")],
        {"allowzero": 0},
        {1: "shape"},
    )
    assert tuple(fields) == KEY_FIELDS
    assert fields == {
        "domain": "",
        "op_type": "Reshape",
        "inputs": [{"kind": "activation", "shape": [2, 3], "dtype": "float32"}],
        "outputs": [{"shape": [3, 2], "dtype": "float32"}],
        "attributes": {"allowzero": 0, "shape": [3, 2]},  # the value input joins the attributes
    }
    assert stable_id(fields) == "cde718c417cee22b"
    assert stable_id(fields, version=KEY_VERSION + 1) != stable_id(fields)


def test_value_input_outside_value_slots_keeps_its_place():
    idx = TensorSpec("i", (2,), "int64")
    fields = key_fields(
        "Gather",
        "",
        [LayerInput(TensorSpec("x", (5,), "float32"), InputKind.ACTIVATION), LayerInput(idx, InputKind.VALUE, (1, 3))],
        [TensorSpec("y", (2,), "float32")],
        {"axis": 0},
    )
    assert fields["inputs"][1] == {"kind": "value", "shape": [2], "dtype": "int64", "value": [1, 3]}


def test_scalar_value_input_keys_as_a_scalar():
    lo = TensorSpec("lo", (), "float32")
    fields = key_fields(
        "Clip",
        "",
        [LayerInput(TensorSpec("x", (4,), "float32"), InputKind.ACTIVATION), LayerInput(lo, InputKind.VALUE, (0.0,))],
        [TensorSpec("y", (4,), "float32")],
        {},
        {1: "min", 2: "max"},
    )
    assert fields["attributes"] == {"min": 0.0}


def test_stable_id_does_not_depend_on_order_or_hash_seed():
    fields = {
        "op_type": "Relu",
        "domain": "",
        "inputs": [],
        "outputs": [{"shape": [1], "dtype": "float32"}],
        "attributes": {"b": 1, "a": 2.5},
    }
    reordered = {k: fields[k] for k in reversed(list(fields))}
    reordered["attributes"] = {"a": 2.5, "b": 1}
    assert stable_id(fields) == stable_id(reordered)
    code = "import json, sys; from benanza.model.keys import stable_id; print(stable_id(json.loads(sys.argv[1])))"
    seen = set()
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code, json.dumps(fields)], env=env, capture_output=True, text=True, check=True
        )
        seen.add(out.stdout.strip())
    assert seen == {stable_id(fields)}


@pytest.mark.parametrize("value", [(1, 2), [1, 2]])
def test_tuples_and_lists_key_alike(value):
    x = TensorSpec("x", (2,), "float32")
    fields = key_fields("Transpose", "", [LayerInput(x, InputKind.ACTIVATION)], [x], {"perm": value})
    assert stable_id(fields) == stable_id(
        key_fields("Transpose", "", [LayerInput(x, InputKind.ACTIVATION)], [x], {"perm": (1, 2)})
    )


@pytest.mark.parametrize(
    ("attribute", "value"),
    [("value_ints", [2, 12]), ("value", numpy_helper.from_array(np.array([2, 12], np.int64), "s"))],
)
def test_a_shape_held_by_any_constant_attribute_is_a_value_and_the_layer_runs(
    build_model, process_proto, fast_harness, attribute, value
):
    """onnxscript's optimizer folds a Shape into ``Constant(value_ints=...)`` (a legacy-exported
    GroupNorm's second Reshape): read as ``value`` alone, the shape was a weight with no values,
    synthesized as zeros, and ONNX Runtime refused the layer ("Invalid position of 0")."""
    from benanza.bench.execute import run_spec
    from benanza.bench.generate import plan_model, specs_for_plan
    from benanza.runtimes.onnxruntime import OnnxRuntimeCPU
    from benanza.store import Outcome

    model = build_model(
        [
            helper.make_node("Constant", [], ["s"], **{attribute: value}),
            helper.make_node("Reshape", ["x", "s"], ["y"]),
        ],
        [("x", F, [2, 3, 4])],
        [("y", F, None)],
    )
    processed = process_proto(model)
    (layer,) = processed.graph.layers
    assert layer.inputs[1].kind is InputKind.VALUE and layer.inputs[1].value == (2, 12)
    runtime = OnnxRuntimeCPU(threads=1)
    (spec,) = [s for s in specs_for_plan(plan_model(processed, runtime, ()), runtime.name, runtime.variant())]
    record = run_spec(spec, runtime, fast_harness, system="box", stack_id="s")
    assert record.outcome is Outcome.OK, record.reason
