"""Canonical layer keys.

Two layers are the same benchmark when the fields in ``KEY_FIELDS`` agree, whatever their
node names or weight values. The key is the first 16 hex digits of the SHA-256 of the
canonical JSON of those fields (sorted keys, no whitespace, Python's shortest float repr),
so it is the same across runs, machines and Python versions.

What is *not* in the key, on purpose: node and tensor names, weight values, the model's
opset version (attributes are normalised to their schema defaults instead, and ops whose
semantics changed across opsets, such as Softmax, record the difference as an attribute).

Which constant inputs are *values* (keyed by value and carried into the benchmark by value),
which are *scales* (keyed by shape and dtype, carried by value) and which are *weights* (keyed
by shape and dtype, synthesised in the benchmark) is decided from the operator schema's input
slot and the tensor's size (``constant_kind``), never from a list of ops:

- a quantized op's scale (``Slot.SCALE``: a slot of an op with an 8-bit-or-narrower integer or
  float8 slot, which the schema names a scale and types with floats) of at most
  ``SCALE_MAX_ELEMENTS`` elements (a per-tensor or per-channel scale; a block-wise one of an int4
  weight can be larger) is a *scale*. Its values change the op's results, not its work: ONNX
  Runtime multiplies by them whatever they are (`benchmarks/scale_values.py` measures layers
  differing only in them as close as one layer measured twice). But they decide what it fuses: a
  QDQ convolution becomes one ``QLinearConv`` only when its int32 bias's scale is its input's
  times its weight's, so a per-channel scale drawn at random (as one of more than 64 channels
  was, a weight, until 2026-11-28) left every such unit of an int8 ResNet-50 unfused, its units
  2.8x its end to end. So two layers that differ only in their scales are one benchmark, run
  with the scales of the first one planned, which its stored spec shows. Which of a layer's
  scales are *equal* stays in the key (``value_classes``): ONNX Runtime removes a
  QuantizeLinear/DequantizeLinear pair around a MaxPool or Reshape only when their scales agree.
  The model's identity keeps every scale's value (``scale_identity``): a model quantized with
  other scales is another model;
- a single number (a scalar or a one-element tensor) in any other slot is always a value: a
  Clip bound, a zero point, a Pow exponent, a Pad constant;
- a constant of at most ``VALUE_MAX_ELEMENTS`` elements is a value when its slot is a
  *setting*: the schema marks it NonDifferentiable (shapes, axes, pads, starts and ends,
  Resize scales and sizes, TopK's k, indices, masks), or leaves differentiability unmarked
  and types it with integers only or apart from the op's data (quantization zero points of
  QuantizeLinear, QLinearConv and ONNX Runtime's QLinearAdd or QGemm, integer biases);
- everything else is a weight: *learned* slots (Differentiable, or unmarked and typed like
  the data: Conv and Gemm weights and biases, normalisation scales, embedding tables) of any
  size, and any constant larger than the threshold (a quantized op's int8 weight: its slot
  is typed with integers, like its zero point, so its size decides; a block-wise scale of more
  than ``SCALE_MAX_ELEMENTS``).

Schemas come from ONNX, or from ONNX Runtime for its contrib ops (``benanza.model.schemas``).
An op neither describes has no slots to read: there, a constant is a value when it is a
single number or a small integer tensor (zero points, indices, shapes).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any

from benanza.model.graph import AttrValue, InputKind, LayerInput, TensorSpec

KEY_FIELDS = ("domain", "op_type", "inputs", "outputs", "attributes")
KEY_VERSION = 1  # bump when the fields or their canonical form change

# Constants in a setting slot up to this many elements are values (see the module docstring):
# a shape, pads or axes of any rank up to 32, per-channel quantization parameters of small layers.
VALUE_MAX_ELEMENTS = 64
MAX_RUN_ELEMENTS = 1 << 22  # per tensor of the part of a model run_values runs (a 2048 x 2048 mask)
# A quantized op's scales up to this many elements are carried by value (per-tensor and per-channel ones)
SCALE_MAX_ELEMENTS = 1 << 14
VALUE_INPUT_MAX_ELEMENTS = VALUE_MAX_ELEMENTS  # the model identity's small integer constants
INDEX_DTYPES = frozenset({"int32", "int64"})
FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})
INTEGER_DTYPES = frozenset(
    {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool", "int4", "uint4"}
)


class Slot(StrEnum):
    """What an operator schema says one input slot holds (``extract.slot_kinds`` reads it)."""

    LEARNED = "learned"  # Differentiable, or unmarked and typed like the op's data: weights, biases
    SETTING = "setting"  # NonDifferentiable, or unmarked and typed with integers or apart from the data
    SCALE = "scale"  # a quantized op's scale: its values change the results, not the work
    UNKNOWN = "unknown"  # no schema (an op neither ONNX nor ONNX Runtime describes)


def constant_kind(numel: int, dtype: str, slot: Slot) -> InputKind:
    """What a constant input is: a value, a scale or a weight (see the module docstring).

    Args:
        numel: the constant's number of elements.
        dtype: its numpy dtype name.
        slot: what the schema says its input slot holds.
    """
    if slot is Slot.SCALE and dtype in FLOAT_DTYPES:
        return InputKind.SCALE if numel <= SCALE_MAX_ELEMENTS else InputKind.WEIGHT
    if numel <= 1:
        return InputKind.VALUE
    if numel > VALUE_MAX_ELEMENTS:
        return InputKind.WEIGHT
    if slot is Slot.UNKNOWN:
        return InputKind.VALUE if dtype in INTEGER_DTYPES else InputKind.WEIGHT
    return InputKind.VALUE if slot is Slot.SETTING else InputKind.WEIGHT


def value_classes(values: Sequence[Sequence[Any]]) -> list[int]:
    """Which of ``values`` are equal: each numbered by the first equal one's place among the distinct.

    ``[(0.1,), (0.2,), (0.1,)]`` gives ``[0, 1, 0]``: the key keeps the pattern of equal
    scales, not the scales.
    """
    seen: dict[tuple[Any, ...], int] = {}
    return [seen.setdefault(tuple(v), len(seen)) for v in values]


def equal_scales_field(scales: Sequence[Sequence[Any]]) -> dict[str, list[int]]:
    """A multi-layer key's field of which of its members' scales are equal; none without scales (keys unchanged)."""
    return {"equal_scales": value_classes(scales)} if scales else {}


def scale_identity(layer_key: str, scales: Sequence[Sequence[Any]]) -> str:
    """A layer's key with its scales' values, for the identity of the model it is in."""
    if not scales:
        return layer_key
    return stable_id({"layer": layer_key, "scales": [_canonical(list(v)) for v in scales]})


def is_small_index(dtype: str, numel: int) -> bool:
    """Whether a constant of ``dtype`` and ``numel`` elements is keyed by its values (shapes, axes, pads)."""
    return dtype in INDEX_DTYPES and numel <= VALUE_INPUT_MAX_ELEMENTS


def key_fields(
    op_type: str,
    domain: str,
    inputs: Iterable[LayerInput],
    outputs: Iterable[TensorSpec],
    attributes: Mapping[str, AttrValue],
    value_inputs: Mapping[int, str] | None = None,
    output_slots: tuple[int, ...] = (),
) -> dict[str, Any]:
    """The explicit fields a layer key is made of.

    Args:
        value_inputs: inputs (by index) whose values join the attributes under the given
            name, so an attribute that became an input in a later opset keys the same.
        output_slots: the outputs' positions among the node's where one is skipped before another
            (``Layer.output_slots``); keyed only then, so no other layer's key changes.
    """
    value_inputs = value_inputs or {}
    attrs: dict[str, Any] = {k: _canonical(v) for k, v in attributes.items()}
    inputs = list(inputs)
    classes = iter(value_classes([i.value or () for i in inputs if i.kind is InputKind.SCALE]))
    canon_inputs = []
    for i, inp in enumerate(inputs):
        if i in value_inputs:
            if inp.kind is InputKind.VALUE:
                # a 0-d input (Clip's min) keys as the scalar attribute it replaced
                scalar = inp.tensor.shape == () and inp.value is not None and len(inp.value) == 1
                attrs[value_inputs[i]] = _canonical(inp.value[0] if scalar else inp.value)
                continue
            if inp.kind is InputKind.ABSENT:
                continue
        entry: dict[str, Any] = {"kind": str(inp.kind)}
        if inp.kind is not InputKind.ABSENT:
            entry["shape"] = list(inp.tensor.shape)
            entry["dtype"] = inp.tensor.dtype
        if inp.kind is InputKind.VALUE:
            entry["value"] = _canonical(inp.value)
        elif inp.kind is InputKind.ACTIVATION and inp.value is not None:  # computed by the model: how much work
            entry["value"] = _canonical(inp.value)
        elif inp.kind is InputKind.SCALE:
            entry["equal_class"] = next(classes)
        canon_inputs.append(entry)
    # trailing absent optional inputs carry no meaning
    while canon_inputs and canon_inputs[-1]["kind"] == InputKind.ABSENT:
        canon_inputs.pop()
    return {
        "domain": domain,
        "op_type": op_type,
        "inputs": canon_inputs,
        "outputs": [{"shape": list(o.shape), "dtype": o.dtype} for o in outputs],
        "attributes": attrs,
        **({"output_slots": list(output_slots)} if output_slots else {}),
    }


def stable_id(fields: Mapping[str, Any], version: int = KEY_VERSION) -> str:
    """16 hex digits of SHA-256 over the canonical JSON of ``fields``."""
    payload = json.dumps({"v": version, **fields}, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(payload.encode("ascii")).hexdigest()[:16]


def _canonical(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_canonical(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value
