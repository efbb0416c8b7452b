"""A model's large weights held beside it as arrays, not inside its protobuf.

A benchmark of a VGG-19 layer holds a 411 MB weight. Carried in the protobuf, every session
of it paid about five copies of those bytes: into the ``TensorProto``, into the graph and the
model (``onnx.helper`` copies what it is given), into ``SerializeToString``'s string, and
ONNX Runtime parsing that string once per session, before making its own tensor of it. The
bytes also cap a model at protobuf's 2 GB, which an fp32 LLM passes.

Held apart, such a weight is an *external-data placeholder* in the model (its name, shape and
element type, ``data_location = EXTERNAL`` at ``HELD_LOCATION``, which is never a file) and a
numpy array beside it, which ONNX Runtime takes as the initializer of that name before it
optimizes anything (``SessionOptions.add_external_initializers``). The graph it optimizes and
runs is the same (the tests compare the executed graphs); a 411 MB weight's two sessions were
made in 1.3 s instead of 4-6 s with 2-6 s of building before them, here.

Only a graph's own initializers are held (the ones ONNX Runtime replaces by name), from
``HELD_MIN_BYTES`` up, and only of element types numpy holds as ONNX Runtime expects
(``HELD_TYPES``): a subgraph's constants, a tensor attribute, a bfloat16 or a packed 4-bit
weight stay in the protobuf, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto
from onnx.external_data_helper import ExternalDataInfo, uses_external_data

from benanza.model.dtypes import dtype_name, tensor_bytes

HELD_MIN_BYTES = 1 << 20
HELD_LOCATION = "benanza-held-apart"  # an external-data location that is never a file

# element types whose numpy arrays ONNX Runtime takes as they are (``OrtValue.ortvalue_from_numpy``)
HELD_TYPES = frozenset(
    {
        TensorProto.FLOAT,
        TensorProto.DOUBLE,
        TensorProto.FLOAT16,
        TensorProto.INT8,
        TensorProto.UINT8,
        TensorProto.INT16,
        TensorProto.UINT16,
        TensorProto.INT32,
        TensorProto.UINT32,
        TensorProto.INT64,
        TensorProto.UINT64,
        TensorProto.BOOL,
    }
)


def held_bytes(tensor: TensorProto) -> int | None:
    """The bytes of a graph initializer that is held apart (its type in ``HELD_TYPES``, ``HELD_MIN_BYTES`` or
    more); None for one that stays in the protobuf."""
    if tensor.data_type not in HELD_TYPES:
        return None
    nbytes = tensor_bytes(tensor.dims, dtype_name(tensor.data_type))
    return nbytes if nbytes >= HELD_MIN_BYTES else None


def make_placeholder(tensor: TensorProto, nbytes: int) -> None:
    """Turn ``tensor`` (name, shape and element type set) into a held weight's placeholder, its data cleared.

    Written by hand: ``onnx.external_data_helper.set_external_data`` refuses a tensor without ``raw_data``.
    """
    for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data"):
        tensor.ClearField(field)
    del tensor.external_data[:]
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", HELD_LOCATION), ("offset", "0"), ("length", str(nbytes))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


def is_placeholder(tensor: TensorProto) -> bool:
    """Whether ``tensor`` is a held weight's placeholder (``make_placeholder``)."""
    return uses_external_data(tensor) and ExternalDataInfo(tensor).location == HELD_LOCATION


@dataclass(frozen=True)
class HeldModel:
    """A model whose large initializers are placeholders, and their arrays by name.

    ``weights`` may share memory with the synthetic-weight cache (``model.synthetic``): read
    them, never write them.
    """

    proto: onnx.ModelProto
    weights: Mapping[str, np.ndarray]

    def whole(self) -> onnx.ModelProto:
        """A copy of the model with every held weight's data back in it (to save or check it)."""
        whole = onnx.ModelProto()
        whole.CopyFrom(self.proto)
        for tensor in whole.graph.initializer:
            if tensor.name in self.weights and is_placeholder(tensor):
                del tensor.external_data[:]
                tensor.ClearField("data_location")
                tensor.raw_data = np.ascontiguousarray(self.weights[tensor.name]).tobytes()
        return whole
