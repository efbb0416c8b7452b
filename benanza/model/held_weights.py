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

A model's own large weights in its external data file are a third case (``model.load.on_file``):
they stay external data, which ONNX Runtime maps from the file in ``HeldModel.folder`` (of any
element type); ONNX Runtime copies the arrays it is given, not a file it maps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto
from onnx.external_data_helper import ExternalDataInfo, load_external_data_for_tensor, uses_external_data

from benanza.model.dtypes import proto_bytes

HELD_MIN_BYTES = 1 << 20
HELD_LOCATION = "benanza-held-apart"  # an external-data location that is never a file
# kOrtSessionOptionsModelExternalInitializersFileFolderPath: where a model given as bytes has its external data
EXTERNAL_DATA_FOLDER = "session.model_external_initializers_file_folder_path"

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
    nbytes = proto_bytes(tensor)
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


def inline_data(tensor: TensorProto, raw: bytes) -> None:
    """Give ``tensor`` its data in the protobuf: ``raw``, its external data fields cleared."""
    del tensor.external_data[:]
    tensor.ClearField("data_location")  # DEFAULT, unset: as a tensor saved with its data has it
    tensor.raw_data = raw


def is_placeholder(tensor: TensorProto) -> bool:
    """Whether ``tensor`` is a held weight's placeholder (``make_placeholder``)."""
    return uses_external_data(tensor) and ExternalDataInfo(tensor).location == HELD_LOCATION


@dataclass(frozen=True)
class HeldModel:
    """A model whose large initializers are placeholders, and their arrays by name.

    ``weights`` may share memory with the synthetic-weight cache (``model.synthetic``): read
    them, never write them. ``folder``: where the model's file is, when some of its large
    weights are left in their external data file (``model.load.on_file``): those stay external
    data, which ONNX Runtime maps from the file in that folder, copying nothing.
    """

    proto: onnx.ModelProto
    weights: Mapping[str, np.ndarray]
    folder: str = ""

    def external_bytes(self) -> int:
        """The bytes of its initializers held apart or left in their file."""
        return sum(proto_bytes(t) for t in self.proto.graph.initializer if uses_external_data(t))

    def whole(self) -> onnx.ModelProto:
        """A copy of the model with every held weight's data back in it, and that of the weights left in their
        file read from it (to save or check it)."""
        whole = onnx.ModelProto()
        whole.CopyFrom(self.proto)
        for tensor in whole.graph.initializer:
            if tensor.name in self.weights and is_placeholder(tensor):
                inline_data(tensor, np.ascontiguousarray(self.weights[tensor.name]).tobytes())
            elif self.folder and uses_external_data(tensor):
                load_external_data_for_tensor(tensor, self.folder)
                inline_data(tensor, tensor.raw_data)  # onnx before 1.2x left the external data fields set
        return whole


def hold_weights(so: Any, weights: Mapping[str, np.ndarray], folder: str = "") -> None:
    """Give a session's options the arrays of its model's held-apart initializers (``model.held_weights``),
    and the folder of the file its other external data is in (``HeldModel.folder``).

    ONNX Runtime puts each array in place of the placeholder of its name before it optimizes the
    graph (``SessionOptions.add_external_initializers``; it copies them). The arrays must outlive
    the session. A weight left in its file is mapped from it (``session.model_external_initializers_file_folder_path``).
    """
    if folder:
        so.add_session_config_entry(EXTERNAL_DATA_FOLDER, folder)
    if weights:
        import onnxruntime as ort

        names = list(weights)
        so.add_external_initializers(names, [ort.OrtValue.ortvalue_from_numpy(weights[n]) for n in names])
