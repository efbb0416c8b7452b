"""The values a graph carries in ``Constant`` nodes, whichever attribute holds them.

A ``Constant`` holds its value in one of ``value`` (a tensor), ``value_int(s)``,
``value_float(s)``, ``value_string(s)`` or ``sparse_value``. Exporters and optimizers use
them all: onnxscript's optimizer folds a ``Shape`` into ``Constant(value_ints=[1, 32, 64, 64])``
(a legacy-exported GroupNorm's second Reshape), so reading ``value`` alone lost the shape and
the layer ran with a synthesized one.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper


def constant_value(node: onnx.NodeProto) -> np.ndarray | None:
    """The value of a ``Constant`` node as an array; None for a sparse tensor or strings (no numbers to read)."""
    if node.op_type != "Constant" or len(node.attribute) != 1:
        return None
    attr = node.attribute[0]
    if attr.name == "value":
        return numpy_helper.to_array(attr.t)
    if attr.name == "value_int":
        return np.array(attr.i, np.int64)
    if attr.name == "value_ints":
        return np.array(list(attr.ints), np.int64)
    if attr.name == "value_float":
        return np.array(attr.f, np.float32)
    if attr.name == "value_floats":
        return np.array(list(attr.floats), np.float32)
    return None


def constant_tensor(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """``constant_value`` as a ``TensorProto`` named after the node's output (``value`` as it is)."""
    if node.op_type == "Constant" and len(node.attribute) == 1 and node.attribute[0].name == "value":
        return node.attribute[0].t  # as stored: a data-less (structure-only) tensor stays data-less
    value = constant_value(node)
    return numpy_helper.from_array(value, node.output[0]) if value is not None and node.output else None
