"""Sizes of tensor element types, by their numpy-style names ("float32", "bfloat16", "float8e4m3fn")."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable

import numpy as np
import onnx
from onnx import helper

_ITEMSIZE = {"bfloat16": 2, "float8e4m3fn": 1, "float8e4m3fnuz": 1, "float8e5m2": 1, "float8e5m2fnuz": 1}


@functools.cache
def itemsize(dtype: str) -> int:
    """Bytes per element of a dtype name; 1 for the sub-byte and 8-bit types numpy does not name."""
    if dtype in _ITEMSIZE:
        return _ITEMSIZE[dtype]
    try:
        return np.dtype(dtype).itemsize
    except TypeError:  # float8/int4 variants and other ONNX types numpy does not name
        return 1


# element types ONNX packs several to a byte in ``raw_data`` (two 4-bit or four 2-bit values);
# ``itemsize`` counts them a byte each, as numpy holds them
PACKED_BITS = {"int4": 4, "uint4": 4, "float4_e2m1fn": 4, "int2": 2, "uint2": 2}


def packed_bytes(shape: Iterable[int], dtype: str) -> int | None:
    """Bytes of a tensor of a packed sub-byte dtype as ONNX stores it (rounded up); None for other dtypes."""
    bits = PACKED_BITS.get(dtype)
    return None if bits is None else -(-math.prod(int(d) for d in shape) * bits // 8)


def tensor_bytes(shape: Iterable[int], dtype: str) -> int:
    """Bytes of a dense tensor of ``shape`` and ``dtype``, a packed sub-byte one as stored (``packed_bytes``)."""
    shape = [int(d) for d in shape]
    packed = packed_bytes(shape, dtype)
    return packed if packed is not None else math.prod(shape) * itemsize(dtype)


def dtype_name(elem_type: int) -> str:
    """numpy-style name of an ONNX element type ("float32", "int64", "bfloat16")."""
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        return onnx.TensorProto.DataType.Name(elem_type).lower()


def proto_bytes(tensor: onnx.TensorProto) -> int:
    """``tensor_bytes`` of a ``TensorProto``, from its dims and element type (not its data, which it may not hold)."""
    return tensor_bytes(tensor.dims, dtype_name(tensor.data_type))


def ort_value(array: np.ndarray, elem: int | None = None, device: tuple[str, int] | None = None):
    """An ONNX Runtime ``OrtValue`` of ``array`` as ONNX element type ``elem`` (default: ``array``'s own).

    ``OrtValue.ortvalue_from_numpy`` takes numpy's own types only: a bfloat16 or float8 array (an
    ``ml_dtypes`` type, as ONNX's helpers give) goes as its bits, typed by ``elem``. On the host (``device``
    None) the value is a view of ``array``, which must be C-contiguous and outlive it; on a device
    (``("cuda", 0)``) it is a copy there.
    """
    import onnxruntime as ort

    native = array.dtype.kind in "biufc"
    onnx_type = helper.np_dtype_to_tensor_dtype(array.dtype) if elem is None else elem
    if not native:
        if device is None and not array.flags.c_contiguous:
            raise ValueError("a bfloat16 or float8 array is viewed, not copied: it must be C-contiguous")
        contiguous = array if array.flags.c_contiguous else np.ascontiguousarray(array)  # a scalar stays one
        bits = contiguous.view(np.dtype(f"uint{8 * array.dtype.itemsize}"))
    if device is None:
        if native:
            return ort.OrtValue.ortvalue_from_numpy(array)
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, onnx_type)
    kind, index = device
    if native:
        return ort.OrtValue.ortvalue_from_numpy(array, kind, index)
    value = ort.OrtValue.ortvalue_from_shape_and_type(list(array.shape), onnx_type, kind, index)
    value.update_inplace(bits)  # its bits copied into a tensor of its type there
    return value
