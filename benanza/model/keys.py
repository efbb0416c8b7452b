"""Canonical layer keys.

Two layers are the same benchmark when the fields in ``KEY_FIELDS`` agree, whatever their
node names or weight values. The key is the first 16 hex digits of the SHA-256 of the
canonical JSON of those fields (sorted keys, no whitespace, Python's shortest float repr),
so it is the same across runs, machines and Python versions.

What is *not* in the key, on purpose: node and tensor names, weight values, the model's
opset version (attributes are normalised to their schema defaults instead, and ops whose
semantics changed across opsets, such as Softmax, record the difference as an attribute).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from benanza.model.graph import AttrValue, InputKind, LayerInput, TensorSpec

KEY_FIELDS = ("domain", "op_type", "inputs", "outputs", "attributes")
KEY_VERSION = 1  # bump when the fields or their canonical form change

# Integer constants up to this many elements are semantics (shapes, axes, indices), not weights:
# keyed by value, where weights are keyed by shape and dtype only.
VALUE_INPUT_MAX_ELEMENTS = 64
INDEX_DTYPES = frozenset({"int32", "int64"})


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
) -> dict[str, Any]:
    """The explicit fields a layer key is made of.

    Args:
        value_inputs: inputs (by index) whose values join the attributes under the given
            name, so an attribute that became an input in a later opset keys the same.
    """
    value_inputs = value_inputs or {}
    attrs: dict[str, Any] = {k: _canonical(v) for k, v in attributes.items()}
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
