"""Reading ONNX files: the model processor's only I/O.

Every failure becomes a ``ModelError`` that names the file and the reason in one line.

Weights in external data files are read when the file is there, but for a graph's large
initializers (``HELD_MIN_BYTES`` and more; ``_left_on_file``): their data is left in the file,
checked but not read (``on_file``), and mapped from it by ONNX Runtime when it runs the model
whole (``held_apart``). Processing reads no large weight's values, so a model of more than
protobuf's 2 GB (an fp32 LLM, a bfloat16 one) is processed in the memory of its structure and
run with its own weights: five 12288x12288 MatMuls (2.8 GiB) were processed in 1.1 s, at a
peak of 3.1 GB while ONNX Runtime ran it once for a length its data decides; loaded whole,
they failed protobuf's serialization after 12.5 GB.

A tensor whose external data file is absent is a *structure-only* tensor: its shape and dtype
are in the model, its values are not. Benchmark costs do not depend on weight values, so such
a model is processed like any other (its weights are layer inputs of kind weight, synthesised
when a benchmark is built) and ``with_synthetic_weights`` fills the tensors with synthetic data
where ONNX Runtime runs the model whole. This is how a model is shared without its weights:
save it with external data (``onnx.save(..., save_as_external_data=True)``) and leave the
data file out; ``corpus/`` ships its models that way.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import ExternalDataInfo, load_external_data_for_tensor, uses_external_data

from benanza.errors import BenanzaError, ModelError, one_line
from benanza.model.dtypes import dtype_name, proto_bytes, tensor_bytes
from benanza.model.held_weights import (
    HELD_MIN_BYTES,
    HeldModel,
    held_bytes,
    inline_data,
    is_placeholder,
    make_placeholder,
)
from benanza.model.keys import INTEGER_DTYPES, MAX_RUN_ELEMENTS
from benanza.model.schemas import op_schema
from benanza.model.synthetic import WeightCopies, synthetic_weight, synthetic_weight_array
from benanza.model.walks import all_graphs, domain_of, sort_graphs

if TYPE_CHECKING:
    import onnx_ir as ir

ONNX_SUFFIXES = (".onnx",)

# the external-data key that marks a tensor ``on_file``, with the model's folder: ONNX's own ``basepath``
ON_FILE_KEY = "basepath"


def load_model(path: str | Path) -> onnx.ModelProto:
    """Load and validate one ONNX file, with the external data that is there.

    A tensor whose external data file is absent stays a reference without data (see the
    module docstring); a data file that is there but cannot be read (truncated, a location
    outside the model's folder) is a ``ModelError``.
    """
    p = Path(path)
    if not p.exists():
        raise ModelError(p, "no such file")
    if p.is_dir():
        raise ModelError(p, "is a directory; pass .onnx files or use a folder as a corpus")
    try:
        model = onnx.load(str(p), load_external_data=False)
    except DecodeError as exc:
        raise ModelError(p, f"not an ONNX model (protobuf could not decode it: {one_line(exc)})") from None
    except (OSError, ValueError, RuntimeError) as exc:
        raise ModelError(p, f"cannot read: {one_line(exc)}") from None
    if model.ir_version <= 0 or not model.HasField("graph") or not model.graph.output:
        raise ModelError(p, "not an ONNX model (no IR version or graph outputs; truncated or another format?)")
    sort_graphs(model)  # an export out of topological order, which ONNX Runtime runs (sort_graphs)
    try:  # checked before its external data is read: a model of more than 2 GB is checked too
        onnx.checker.check_model(_checkable(model))
    except (onnx.checker.ValidationError, ValueError) as exc:
        raise ModelError(p, f"invalid ONNX model: {one_line(exc)}") from None
    try:
        there: dict[str, bool] = {}  # data file -> whether it is there (many tensors share one file)

        def readable(tensor: TensorProto) -> bool:
            location = ExternalDataInfo(tensor).location
            if location not in there:
                there[location] = (p.parent / location).is_file()
            return there[location]

        for tensor in model_tensors(model):  # ONNX's ``basepath`` is ours to set (``on_file``), whatever a file says
            _unmark(tensor)
        for tensor in model.graph.initializer:  # the large weights a run maps from the file
            if uses_external_data(tensor) and _left_on_file(tensor) and readable(tensor):
                _leave_on_file(tensor, p)
        for tensor in model_tensors(model):
            if uses_external_data(tensor) and not on_file(tensor) and readable(tensor):
                load_external_data_for_tensor(tensor, str(p.parent))  # onnx checks the location
    except onnx.checker.ValidationError as exc:  # onnx >= 1.17 checks external data paths on load
        raise ModelError(p, f"external data cannot be read: {one_line(exc)}") from None
    except (OSError, ValueError, RuntimeError) as exc:
        raise ModelError(p, f"cannot read: {one_line(exc)}") from None
    return model


def _left_on_file(tensor: TensorProto) -> bool:
    """Whether ``load_model`` leaves a graph initializer's data in its file: from ``HELD_MIN_BYTES``, but an
    integer or boolean one small enough for ``run_values`` to compute with (``MAX_RUN_ELEMENTS``: a mask, a
    table of positions), which computes with no initializer left in its file. An int8 or packed 4-bit
    weight of a quantized LLM is larger."""
    dtype = dtype_name(tensor.data_type)
    if dtype in INTEGER_DTYPES and math.prod(tensor.dims) <= MAX_RUN_ELEMENTS:
        return False
    return tensor_bytes(tensor.dims, dtype) >= HELD_MIN_BYTES


def _leave_on_file(tensor: TensorProto, path: Path) -> None:
    """Mark ``tensor``'s data as left in its external data file (``on_file``), once its place there is checked.

    Raises:
        ModelError: the file is outside the model's folder, or does not hold the tensor's bytes.
    """
    info = ExternalDataInfo(tensor)
    base = path.parent.resolve()
    file = (base / info.location).resolve()
    nbytes = proto_bytes(tensor)
    offset = info.offset or 0
    if not file.is_relative_to(base):
        reason = f"its data file {info.location!r} is outside the model's folder"
    elif info.length is not None and info.length != nbytes:
        reason = f"{info.length} bytes in {info.location!r} for a tensor of {nbytes}"
    elif offset + nbytes > file.stat().st_size:
        reason = f"{info.location!r} ends before its {nbytes} bytes from offset {offset} (truncated?)"
    else:
        reason = None
    if reason is not None:
        raise ModelError(path, f"external data cannot be read: tensor {tensor.name!r}: {reason}")
    entry = tensor.external_data.add()
    entry.key, entry.value = ON_FILE_KEY, str(base)


def on_file(tensor: TensorProto) -> bool:
    """Whether ``tensor``'s data was left in its external data file by ``load_model`` (``file_data`` reads it)."""
    return uses_external_data(tensor) and bool(ExternalDataInfo(tensor).basepath)


def keep_on_file(source: onnx.ModelProto, model: onnx.ModelProto) -> onnx.ModelProto:
    """``model``, a rewrite of ``source``, with its initializers that were ``on_file`` in ``source`` marked so
    again: onnx_ir writes a tensor's external data back without the mark (its place in the file stays)."""
    places = {(t.name, *_place(t)): ExternalDataInfo(t).basepath for t in source.graph.initializer if on_file(t)}
    if places:
        for tensor in model.graph.initializer:
            folder = places.get((tensor.name, *_place(tensor))) if uses_external_data(tensor) else None
            if folder is not None and not on_file(tensor):
                entry = tensor.external_data.add()
                entry.key, entry.value = ON_FILE_KEY, folder
    return model


def _place(tensor: TensorProto) -> tuple[str, int]:
    """Where a tensor's external data is: its file and offset."""
    info = ExternalDataInfo(tensor)
    return info.location, int(info.offset or 0)


def file_bytes(model: onnx.ModelProto) -> int:
    """The bytes of ``model``'s weights left in their external data file (``on_file``)."""
    return sum(proto_bytes(t) for t in model.graph.initializer if on_file(t))


def file_data(tensor: TensorProto) -> bytes:
    """The data of an ``on_file`` tensor, read from its file.

    Raises:
        ModelError: the file no longer holds the bytes ``load_model`` checked (truncated since).
    """
    info = ExternalDataInfo(tensor)
    path = Path(info.basepath) / info.location
    nbytes = proto_bytes(tensor)
    with open(path, "rb") as data:
        data.seek(info.offset or 0)
        raw = data.read(nbytes)
    if len(raw) != nbytes:
        raise ModelError(
            path, f"tensor {tensor.name!r}: {len(raw)} of its {nbytes} bytes left (truncated since loaded?)"
        )
    return raw


def _unmark(tensor: TensorProto) -> None:
    """``tensor`` without the ``on_file`` mark (ONNX Runtime refuses the key)."""
    if any(e.key == ON_FILE_KEY for e in tensor.external_data):
        kept = [e for e in tensor.external_data if e.key != ON_FILE_KEY]
        del tensor.external_data[:]
        tensor.external_data.extend(kept)


def model_tensors(model: onnx.ModelProto) -> Iterator[TensorProto]:
    """Every tensor that can hold data: initializers and tensor attributes, subgraphs included."""
    yield from _graph_tensors(model.graph)


def _graph_tensors(graph: onnx.GraphProto) -> Iterator[TensorProto]:
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _graph_tensors(attr.g)
            for sub in attr.graphs:
                yield from _graph_tensors(sub)


def has_data(tensor: TensorProto) -> bool:
    """Whether a tensor's values are in the proto; False for a structure-only tensor and for one ``on_file``.

    ``load_model`` reads every external data file that is there, but for large weights, so a
    tensor that still refers to external data is one whose file was absent or one left there.
    """
    return not uses_external_data(tensor)


def structure_only(model: onnx.ModelProto) -> int:
    """How many tensors of ``model`` have no data (shape and dtype only; not those ``on_file``)."""
    return sum(not has_data(t) and not on_file(t) for t in model_tensors(model))


# The domain the checked copy of a model gives the ops ONNX Runtime registers in ONNX's own domain
# (``onnxruntime_ops_in_onnx_domain``): one the checker does not know, so it leaves them be.
ONNXRUNTIME_OPS_DOMAIN = "benanza.onnxruntime_in_onnx_domain"


def onnxruntime_ops_in_onnx_domain(model: onnx.ModelProto) -> set[str]:
    """The ops of ``model`` in ONNX's domain that ONNX does not define at the model's opset and ONNX
    Runtime registers there: ``SimplifiedLayerNormalization``, which ONNX Runtime's transformer
    optimizer and onnxruntime-genai's model builder write into Llama, Phi and Mistral exports.
    ONNX Runtime runs them; ONNX's checker, which knows only ONNX's schemas, refuses them."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None:
        return set()
    found = set()
    for graph in all_graphs(model.graph):
        for node in graph.node:
            if domain_of(node) or node.op_type in found:
                continue
            schema = op_schema(node.op_type, opset, "")
            if schema is not None and schema.source == "onnxruntime":
                found.add(node.op_type)
    return found


def _checkable(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model``, or a copy the checker can take: its data-less tensors empty (the checker looks for
    their files), the ops ONNX Runtime registers in ONNX's domain moved to a domain of their own."""
    ort_ops = onnxruntime_ops_in_onnx_domain(model)
    if not ort_ops and all(has_data(t) for t in model_tensors(model)):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for tensor in model_tensors(copy):
        if not has_data(tensor):
            del tensor.external_data[:]
            tensor.data_location = TensorProto.DEFAULT
            del tensor.dims[:]
            tensor.dims.append(0)
    if ort_ops:
        for graph in all_graphs(copy.graph):
            for node in graph.node:
                if not domain_of(node) and node.op_type in ort_ops:
                    node.domain = ONNXRUNTIME_OPS_DOMAIN
        copy.opset_import.append(helper.make_opsetid(ONNXRUNTIME_OPS_DOMAIN, 1))
    return copy


# ONNX's float element types: a ``ConstantOfShape`` that fills one is a weight's stand-in
_FLOAT_TYPES = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE})


def weight_stand_ins(graph: onnx.GraphProto) -> dict[str, tuple[list[int], int]]:
    """The weights a ``ConstantOfShape`` stands in for: its output's name -> (shape, element type).

    ``onnx.tools.replace_constants`` shares a model without its weights that way, each one a
    float fill of a constant shape (the zoo's ``light_*`` models: every weight one value).
    Run as it is, ONNX Runtime folds the fills into equal constants and then runs as one node
    the convolutions that read the same input with equal weights: Inception v2's whole model
    ran 110 nodes where its layers ran 115, 3% of its latency missing from its end to end.
    The extractor already takes such a fill for a weight (a layer input of kind weight,
    synthesised when the layer is built); ``with_synthetic_weights`` does the same for the model.

    Not a fill of zero (ONNX's default value; ``replace_constants`` fills 0.5 unless told otherwise, the zoo
    0.02), nor one no larger than a float weight the graph holds with its data (``replace_constants`` replaced
    every weight above its threshold): such a fill is the model's own computation. A Qwen3-MoE export's
    ``torch.zeros`` accumulator, filled with random values, made the model's run count other experts' tokens
    than the model does (its NonZero lengths came out 2x11 where the model gives 2x0), and its end to end failed.
    """
    shapes = {t.name: t for t in graph.initializer}
    # the largest float weight the graph holds with its data (in the proto, or on file): a stand-in is larger
    held = max(
        (math.prod(t.dims) for t in graph.initializer if t.data_type in _FLOAT_TYPES and (has_data(t) or on_file(t))),
        default=0,
    )
    stand_ins: dict[str, tuple[list[int], int]] = {}
    for node in graph.node:
        if node.op_type != "ConstantOfShape" or node.domain not in ("", "ai.onnx") or not node.input:
            continue
        shape = shapes.get(node.input[0])
        value = next((a.t for a in node.attribute if a.name == "value"), None)
        elem_type = value.data_type if value is not None else TensorProto.FLOAT  # the operator's default
        if shape is None or elem_type not in _FLOAT_TYPES or not has_data(shape) or value is None:
            continue
        dims = [int(d) for d in numpy_helper.to_array(shape)]
        fill = numpy_helper.to_array(value).ravel()
        if fill.size == 0 or not fill[0] or math.prod(dims) <= held:
            continue
        stand_ins[node.output[0]] = (dims, elem_type)
    return stand_ins


def with_synthetic_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """``model`` runnable by ONNX Runtime: a copy with synthetic data in every data-less tensor.

    The data follows the benchmarks' rule (``model.synthetic``): floats in
    [-1, 1), integers and booleans zero, no two tensors of the same shape alike (their
    ``copy``). A weight a ``ConstantOfShape`` stands in for (``weight_stand_ins``) becomes an
    initializer of synthetic data too; a tensor ``on_file`` gets its data from the file. A
    model with all its data is returned as it is.
    """
    return _filled(model, seed, None)


def held_apart(model: onnx.ModelProto, seed: int = 0, held: Mapping[str, np.ndarray] | None = None) -> HeldModel:
    """``with_synthetic_weights``, with the model's large initializers held apart (``model.held_weights``).

    A synthetic weight is drawn straight into its array (the same values); a weight with its
    data (a model shared with its weights) is moved out of the copy's protobuf into one; one
    ``on_file`` stays in its file, which ONNX Runtime maps (``HeldModel.folder``).

    Args:
        held: arrays already held for some of ``model``'s placeholders (``build.build_held``).
    """
    weights = dict(held or {})
    # ``load_model`` marks a model's weights left in their file with its one folder
    folder = next((ExternalDataInfo(t).basepath for t in model.graph.initializer if on_file(t)), "")
    return HeldModel(_filled(model, seed, weights), weights, folder)


def _filled(model: onnx.ModelProto, seed: int, held: dict[str, np.ndarray] | None) -> onnx.ModelProto:
    """``with_synthetic_weights``; with ``held``, the graph's large initializers go there, but for those
    ``on_file``: left to ONNX Runtime to map from their folder (``held_apart``), else read in."""
    stand_ins = weight_stand_ins(model.graph)
    moved = held is not None and any(has_data(t) and held_bytes(t) for t in model.graph.initializer)
    if all(has_data(t) for t in model_tensors(model)) and not stand_ins and not moved:
        return model
    filled = onnx.ModelProto()
    filled.CopyFrom(model)
    if stand_ins:
        kept = [n for n in filled.graph.node if not (n.op_type == "ConstantOfShape" and n.output[0] in stand_ins)]
        del filled.graph.node[:]
        filled.graph.node.extend(kept)
        for name, (shape, elem_type) in stand_ins.items():
            filled.graph.initializer.append(TensorProto(name=name, dims=shape, data_type=elem_type))
    slots: dict[str, int] = {}  # a weight's input position in the node that reads it, as in built layers
    for node in filled.graph.node:
        for i, name in enumerate(node.input):
            slots.setdefault(name, i)
    initializers = len(filled.graph.initializer)  # ``model_tensors`` gives the graph's own initializers first
    weights: dict[str, np.ndarray] = held if held is not None else {}
    copies = WeightCopies()  # counted over every tensor, with data or not, as build_onnx counts its own
    for index, tensor in enumerate(model_tensors(filled)):
        slot = slots.get(tensor.name, 0)
        copy = copies.next(tensor.dims, tensor.data_type, slot)
        if on_file(tensor):  # only a graph's own initializers are (``load_model``)
            if held is not None:
                _unmark(tensor)
            else:
                inline_data(tensor, file_data(tensor))
            continue
        nbytes = held_bytes(tensor) if held is not None and index < initializers else None
        if nbytes and tensor.name in weights and is_placeholder(tensor):
            continue  # held already
        data = has_data(tensor) and tensor.name not in stand_ins
        if data and not nbytes:
            continue
        dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
        if nbytes:
            weights[tensor.name] = (
                numpy_helper.to_array(tensor) if data else synthetic_weight_array(tensor.dims, dtype, seed, slot, copy)
            )
            make_placeholder(tensor, nbytes)
            continue
        inline_data(tensor, synthetic_weight(list(tensor.dims), dtype, seed, slot, copy))
    return filled


def fold_policy(node: ir.Node) -> bool | None:
    """onnxscript's ``should_fold``: a node that reads a data-less tensor is never folded.

    It has no values to fold (onnxscript would warn per tensor and give up); ``None`` leaves
    every other node to onnxscript's own rules.
    """
    import onnx_ir as ir

    for value in node.inputs:
        if value is not None and isinstance(value.const_value, ir.ExternalTensor):
            return False
    if node.op_type == "Constant" and any(isinstance(a.value, ir.ExternalTensor) for a in node.attributes.values()):
        return False
    return None


def expand_model_paths(paths: list[str | Path]) -> list[Path]:
    """Files as given; a folder contributes its ``*.onnx`` files, sorted, recursively."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.suffix in ONNX_SUFFIXES and f.is_file())
            if not found:
                raise ModelError(p, "folder holds no .onnx files")
            out.extend(found)
        else:
            out.append(p)
    if not out:
        raise BenanzaError("no models given")
    return out
