"""Loading and binding: every bad input is a one-line ``ModelError`` that starts with the file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from benanza.errors import BenanzaError, ModelError, UnboundDimensionError, UsageError
from benanza.model.load import expand_model_paths, load_model
from benanza.model.process import process_model
from benanza.model.request import BindingRequest, parse_shape_override, parse_shape_overrides
from benanza.model.shapes import bind_shapes, runtime_inputs

F = TensorProto.FLOAT


def assert_model_error(exc: ModelError, path: Path, *fragments: str) -> None:
    text = str(exc)
    assert text.startswith(f"{path}: "), text
    assert "\n" not in text, text
    for fragment in fragments:
        assert fragment in text, text


@pytest.fixture
def save(tmp_path: Path):
    """Write a model to ``tmp_path`` and return its path."""

    def write(model: onnx.ModelProto, name: str = "model.onnx") -> Path:
        path = tmp_path / name
        onnx.save(model, str(path))
        return path

    return write


@pytest.fixture
def symbolic_model(build_model) -> onnx.ModelProto:
    """``x: [N, 3, S]`` -> Relu: a leading symbolic batch and a symbolic sequence length."""
    return build_model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [("x", F, ["N", 3, "S"])],
        [("y", F, ["N", 3, "S"])],
    )


# ------------------------------------------------------------------ reading files


def test_zoo_model_loads(zoo_path):
    model = load_model(zoo_path("resnet50"))
    assert model.ir_version == 3
    assert sum(n.op_type == "Conv" for n in model.graph.node) == 53


def test_missing_file(tmp_path):
    path = tmp_path / "nope.onnx"
    with pytest.raises(ModelError) as info:
        load_model(path)
    assert_model_error(info.value, path, "no such file")
    assert info.value.path == str(path)


def test_directory(tmp_path):
    with pytest.raises(ModelError) as info:
        load_model(tmp_path)
    assert_model_error(info.value, tmp_path, "is a directory")


def test_text_file_is_not_onnx(tmp_path):
    path = tmp_path / "notes.onnx"
    path.write_text("this is a text file, not a protobuf\n")
    with pytest.raises(ModelError) as info:
        load_model(path)
    assert_model_error(info.value, path, "not an ONNX model")


def test_empty_file_is_not_onnx(tmp_path):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(ModelError) as info:
        load_model(path)
    assert_model_error(info.value, path, "not an ONNX model")


@pytest.mark.parametrize("name", ["resnet50", "vgg19", "squeezenet"])
def test_truncated_zoo_file(tmp_path, zoo_path, name):
    data = zoo_path(name).read_bytes()
    path = tmp_path / f"half_{name}.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError) as info:
        process_model(path, batch=1)
    assert_model_error(info.value, path, "not an ONNX model")


def test_other_protobuf_is_not_a_model(tmp_path, zoo_dir):
    """A TensorProto (the zoo's reference outputs) decodes but has no graph."""
    path = tmp_path / "output_0.onnx"
    path.write_bytes((zoo_dir / "light_resnet50_output_0.pb").read_bytes())
    with pytest.raises(ModelError) as info:
        load_model(path)
    assert_model_error(info.value, path, "not an ONNX model", "no IR version or graph outputs")


def test_invalid_model_fails_the_checker(build_model, save):
    model = build_model([helper.make_node("Relu", ["missing"], ["y"])], [("x", F, [2])], [("y", F, [2])], check=False)
    path = save(model)
    with pytest.raises(ModelError) as info:
        load_model(path)
    assert_model_error(info.value, path, "invalid ONNX model")


def test_a_float16_conversion_out_of_topological_order_loads_and_runs(build_model, save):
    """ONNX Runtime's float16 converter, keeping float32 inputs and outputs, appends the input's ``Cast``
    after the nodes that read it: ONNX's checker refuses such a graph, ONNX Runtime sorts and runs it."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    weight = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    model = build_model(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        [("x", F, [1, 3, 8, 8])],
        [("y", F, [1, 4, 8, 8])],
        {"w": weight},
    )
    half = convert_float_to_float16(model, keep_io_types=True)
    with pytest.raises(onnx.checker.ValidationError, match="topologically sorted"):
        onnx.checker.check_model(half)  # what the converter makes, as users get it
    path = save(half)
    loaded = load_model(path)
    onnx.checker.check_model(loaded)
    assert [n.op_type for n in loaded.graph.node] == ["Cast", "Conv", "Relu", "Cast"]
    processed = process_model(path, batch=2)
    layers = processed.graph.layers
    assert sorted(layer.op_type for layer in layers) == ["Cast", "Cast", "Conv", "Relu"]
    assert {layer.outputs[0].dtype for layer in layers if layer.op_type in ("Conv", "Relu")} == {"float16"}


def test_a_subgraph_out_of_topological_order_is_sorted_in_place(build_model, save):
    """The body of an ``If`` reads a tensor a later node of the body makes; its outer captures stay as they are."""
    body = helper.make_graph(
        [helper.make_node("Neg", ["t"], ["b"]), helper.make_node("Relu", ["x"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("b", F, [2])],
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F, [2])]
    )
    model = build_model(
        [
            helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=other),
            helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
            helper.make_node("Greater", ["s", "zero"], ["c"]),
        ],
        [("x", F, [2])],
        [("y", F, [2])],
        {"zero": np.float32(0)},
        check=False,
    )
    loaded = load_model(save(model))
    onnx.checker.check_model(loaded)
    assert [n.op_type for n in loaded.graph.node] == ["ReduceSum", "Greater", "If"]
    [then] = [a.g for a in loaded.graph.node[2].attribute if a.name == "then_branch"]
    assert [n.op_type for n in then.node] == ["Relu", "Neg"]


def test_a_cycle_is_still_an_invalid_model(build_model, save):
    model = build_model(
        [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"])],
        [("x", F, [2])],
        [("a", F, [2])],
        check=False,
    )
    path = save(model)
    with pytest.raises(ModelError) as info:
        load_model(path)
    assert_model_error(info.value, path, "invalid ONNX model")


def test_missing_external_data_is_a_structure_only_model(build_model, tmp_path):
    """No data file: the weight keeps its shape and dtype and is synthesised (tests/test_structure_only.py)."""
    model = build_model(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        [("x", F, [64, 64])],
        [("y", F, [64, 64])],
        initializers={"w": np.ones((64, 64), np.float32)},
    )
    path = tmp_path / "external.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="external.bin", size_threshold=0)
    (tmp_path / "external.bin").unlink()
    (w,) = load_model(path).graph.initializer
    assert (list(w.dims), w.data_location) == ([64, 64], TensorProto.EXTERNAL)


def test_external_data_outside_the_model_folder_is_refused(build_model, tmp_path):
    model = build_model(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        [("x", F, [64, 64])],
        [("y", F, [64, 64])],
        initializers={"w": np.ones((64, 64), np.float32)},
    )
    folder = tmp_path / "models"
    folder.mkdir()
    path = folder / "external.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="external.bin", size_threshold=0)
    (folder / "external.bin").rename(tmp_path / "external.bin")
    saved = onnx.load(str(path), load_external_data=False)
    saved.graph.initializer[0].external_data[0].value = "../external.bin"
    onnx.save(saved, str(path))
    with pytest.raises(ModelError) as info:
        load_model(path)
    assert_model_error(info.value, path, "external data cannot be read", "external.bin")


def test_expand_model_paths(tmp_path, build_model, save):
    model = build_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2])], [("y", F, [2])])
    b = save(model, "b.onnx")
    a = save(model, "a.onnx")
    (tmp_path / "readme.txt").write_text("not a model")
    sub = tmp_path / "sub"
    sub.mkdir()
    c = sub / "c.onnx"
    onnx.save(model, str(c))
    assert expand_model_paths([tmp_path]) == [a, b, c]
    assert expand_model_paths([str(b), a]) == [b, a]


def test_expand_empty_folder_and_nothing(tmp_path):
    with pytest.raises(ModelError) as info:
        expand_model_paths([tmp_path])
    assert_model_error(info.value, tmp_path, "no .onnx files")
    with pytest.raises(BenanzaError, match="no models given"):
        expand_model_paths([])


# ------------------------------------------------------------------ binding shapes


def test_a_free_batch_is_one_without_batch_and_the_dimensions_left_are_named(symbolic_model, save):
    """Without --batch a model runs at its own batch, 1 where its file leaves it free: only ``S`` is unbound."""
    path = save(symbolic_model)
    with pytest.raises(UnboundDimensionError) as info:
        process_model(path)
    assert isinstance(info.value, ModelError)
    assert_model_error(info.value, path, "'x'", "dimension 2", "'S'", "--dim S=N")
    assert "--batch" not in str(info.value) and "dimension 0" not in str(info.value)
    assert process_model(path, request=BindingRequest(dims={"S": 5})).binding.shapes == {"x": (1, 3, 5)}


def test_without_batch_a_fixed_leading_dimension_is_the_files(build_model):
    """A static export at batch 8, a detector's ``3xHxW`` image, OWLv2's three text queries beside its free
    image batch: without --batch each input keeps the leading dimension its file fixes (benanza run's default
    was batch 1, which rewrote them, baked Reshape targets and all) and a free one is 1; nothing is rebatched,
    nothing warned."""
    model = build_model(
        [helper.make_node("Relu", ["ids"], ["a"]), helper.make_node("Relu", ["image"], ["b"])],
        [("ids", F, [3, 16]), ("image", F, ["batch", 3, 8, 8])],
        [("a", F, None), ("b", F, None)],
    )
    binding = bind_shapes(model, "m.onnx")
    assert binding.shapes == {"ids": (3, 16), "image": (1, 3, 8, 8)} and binding.rebatch == {}
    asked = bind_shapes(model, "m.onnx", batch=2)
    assert asked.shapes == {"ids": (2, 16), "image": (2, 3, 8, 8)} and asked.rebatch == {"ids": (3, 2)}


def test_unbound_symbolic_inner_dimension(symbolic_model, save):
    path = save(symbolic_model)
    with pytest.raises(UnboundDimensionError) as info:
        process_model(path, batch=4)
    assert_model_error(info.value, path, "'x'", "dimension 2", "'S'", "--shape x=")


def test_input_without_shape_is_unbound(build_model):
    model = build_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2])], [("y", F, [2])])
    model.graph.input[0].type.tensor_type.ClearField("shape")
    with pytest.raises(UnboundDimensionError, match=r"^m\.onnx: input 'x' has no shape"):
        bind_shapes(model, "m.onnx")


def test_shape_override_binds_everything(symbolic_model, save):
    path = save(symbolic_model)
    processed = process_model(path, request=BindingRequest({"x": (2, 3, 7)}))
    assert processed.binding.shapes == {"x": (2, 3, 7)}
    assert processed.graph.inputs[0].shape == (2, 3, 7)
    assert processed.graph.layers[0].output_shapes == [[2, 3, 7]]


def test_batch_and_shape_together(symbolic_model):
    binding = bind_shapes(symbolic_model, "m.onnx", 5, BindingRequest({"x": (2, 3, 7)}))
    assert binding.shapes == {"x": (2, 3, 7)}  # --shape wins for the input it names
    assert binding.rebatch == {}


def test_shape_names_unknown_input(symbolic_model, save):
    path = save(symbolic_model)
    with pytest.raises(ModelError) as info:
        process_model(path, request=BindingRequest({"images": (1, 3, 8)}))
    assert not isinstance(info.value, UnboundDimensionError)
    assert_model_error(info.value, path, "unknown input(s) images", "inputs are x")


def test_shape_with_wrong_rank(symbolic_model, save):
    path = save(symbolic_model)
    with pytest.raises(ModelError) as info:
        process_model(path, request=BindingRequest({"x": (1, 3)}))
    assert_model_error(info.value, path, "rank 2", "rank 3")


@pytest.mark.parametrize("batch", [0, -1])
def test_batch_below_one(zoo_path, batch):
    with pytest.raises(UsageError, match=rf"--batch must be at least 1, got {batch}"):
        process_model(zoo_path("squeezenet"), batch=batch)


def test_non_tensor_input(save):
    seq = helper.make_tensor_sequence_value_info("s", F, [2])
    graph = helper.make_graph(
        [helper.make_node("SequenceLength", ["s"], ["n"])],
        "g",
        [seq],
        [helper.make_tensor_value_info("n", TensorProto.INT64, [])],
    )
    path = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(ModelError) as info:
        process_model(path)
    assert_model_error(info.value, path, "input 's' is not a tensor")


def test_fixed_batch_rebinds_and_records_rebatch(zoo_path):
    model = load_model(zoo_path("resnet50"))
    (name,) = [i.name for i in runtime_inputs(model)]
    assert bind_shapes(model, "r", batch=1).rebatch == {}
    binding = bind_shapes(model, "r", batch=8)
    assert binding.shapes == {name: (8, 3, 224, 224)}
    assert binding.rebatch == {name: (1, 8)}
    assert bind_shapes(model, "r").shapes == {name: (1, 3, 224, 224)}


def test_a_fixed_leading_dimension_other_than_one_rewritten_to_the_batch_is_said(build_model, process_proto):
    """torchvision's detectors take one ``3xHxW`` image, no batch dimension: ``--batch 1`` (``benanza run``'s
    default once) makes it a one-channel image (its normalisation broadcast it back to three), silently. A file
    fixed at batch 1 rebatched to 8 is what ``--batch`` is for: nothing said."""
    model = build_model(
        [helper.make_node("Relu", ["image"], ["y"])],
        [("image", TensorProto.FLOAT, [3, 8, 8])],
        [("y", TensorProto.FLOAT, None)],
    )
    rebatched = process_proto(model, batch=1)
    (warning,) = rebatched.warnings()
    assert (
        warning.startswith("input 'image': its file fixes its leading dimension at 3, bound here to 1")
        and "--shape image=3x8x8 binds the input as its file is" in warning
    )
    assert rebatched.notes() == []  # a departure from the file is a warning, not a note for the record
    assert process_proto(model).warnings() == [] and process_proto(model, batch=3).warnings() == []
    batch_one = build_model(
        [helper.make_node("Relu", ["x"], ["y"])], [("x", TensorProto.FLOAT, [1, 8])], [("y", TensorProto.FLOAT, None)]
    )
    assert process_proto(batch_one, batch=8).warnings() == []


def test_initializers_are_not_runtime_inputs(zoo_path):
    model = load_model(zoo_path("vgg19"))
    assert len(model.graph.input) > 1  # IR 3: weights are listed as graph inputs
    assert [i.name for i in runtime_inputs(model)] == ["data_0"]


# ------------------------------------------------------------------ --shape syntax


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("images=1x3x640x640", ("images", (1, 3, 640, 640))),
        ("images=1,3,224,224", ("images", (1, 3, 224, 224))),
        ("  ids=4x128 ", ("ids", (4, 128))),
        ("gpu_0/data_0=2x3x224x224", ("gpu_0/data_0", (2, 3, 224, 224))),
        ("scale=", ("scale", ())),
    ],
)
def test_parse_shape_override(text, expected):
    assert parse_shape_override(text) == expected


@pytest.mark.parametrize(
    "text", ["images", "images:1x3", "images=1x", "images=ax3", "=1x3", "images=1x-3", "images=1.5"]
)
def test_bad_shape_syntax(text):
    with pytest.raises(UsageError, match="bad --shape") as info:
        parse_shape_override(text)
    assert isinstance(info.value, ValueError)


def test_parse_shape_overrides():
    assert parse_shape_overrides(None) == {}
    assert parse_shape_overrides(["a=1x2", "b=3"]) == {"a": (1, 2), "b": (3,)}
    assert parse_shape_overrides(["a=1x2", "a=1x2"]) == {"a": (1, 2)}  # the same twice: meant
    with pytest.raises(UsageError, match=r"^--shape a is given twice: 1x2 and 1x3$"):  # which one was meant?
        parse_shape_overrides(["a=1x2", "b=3", "a=1x3"])


def test_folding_a_constant_that_is_infinite_is_quiet(build_model):
    """T5's relative position buckets take the log of a 0: the folded constant is ``-inf``, as the model
    computes it, and numpy's 'divide by zero' warnings printed on every command's stderr."""
    import warnings

    from benanza.model.process import process_model

    model = build_model(
        [
            helper.make_node("Log", ["zero"], ["minus_inf"]),
            helper.make_node("Cast", ["minus_inf"], ["as_int"], to=TensorProto.INT64),
            helper.make_node("Cast", ["as_int"], ["back"], to=F),
            helper.make_node("Max", ["x", "back"], ["y"]),
        ],
        [("x", F, [2, 3])],
        [("y", F, None)],
        initializers={"zero": np.zeros((3,), np.float32)},
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graph = process_model("t5.onnx", proto=model).graph
    assert [w.message for w in caught if issubclass(w.category, RuntimeWarning)] == []
    assert [layer.op_type for layer in graph.layers] == ["Max"]  # the constant folded away


@pytest.mark.parametrize("name", ["squeezenet", "inception_v2"])
def test_every_fill_of_a_model_shared_without_its_weights_stands_in_for_a_weight(zoo_path, name):
    from benanza.model.load import weight_stand_ins

    model = onnx.load(zoo_path(name))
    fills = [n for n in model.graph.node if n.op_type == "ConstantOfShape"]
    assert len(weight_stand_ins(model.graph)) == len(fills) > 0


def _filled(build_model, fill: float | None, weight_elements: int) -> onnx.ModelProto:
    value = {} if fill is None else {"value": onnx.numpy_helper.from_array(np.array([fill], np.float32))}
    return build_model(
        [
            helper.make_node("ConstantOfShape", ["shape"], ["acc"], **value),
            helper.make_node("Add", ["x", "acc"], ["s"]),
            helper.make_node("MatMul", ["s", "w"], ["y"]),
        ],
        [("x", TensorProto.FLOAT, [16, 128])],
        [("y", TensorProto.FLOAT, None)],
        {
            "shape": np.array([16, 128], np.int64),
            "w": np.ones((128, weight_elements // 128), np.float32),
        },
    )


@pytest.mark.parametrize(
    ("fill", "weight_elements", "stands_in"),
    [
        (0.5, 128, True),  # onnx.tools.replace_constants: every weight above its threshold a fill of 0.5
        (0.0, 128, False),  # a zeros accumulator (torch.zeros): the model's computation
        (None, 128, False),  # the operator's default fill, zero
        (1.0, 128 * 128, False),  # no larger than a weight the model holds: not a model without its weights
    ],
)
def test_a_fill_is_a_weight_stand_in_only_where_no_weight_is_held_and_it_is_not_zero(
    build_model, fill, weight_elements, stands_in
):
    """A Qwen3-MoE export's torch.zeros accumulator was taken for a weight and filled with random values in the
    model's run: the NonZero lengths its routing gave were other experts' (2x11 where the model gives 2x0)."""
    from benanza.model.load import weight_stand_ins

    assert bool(weight_stand_ins(_filled(build_model, fill, weight_elements).graph)) is stands_in
