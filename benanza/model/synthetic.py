"""Synthetic data for tensors a model or a benchmark does not carry: weights, and inputs to feed.

Values do not change a kernel's cost, only shapes and dtypes do: floats are drawn uniform in
[-1, 1), integers and booleans are zeros (index-like inputs such as Gather indices stay in
range). A model's integer inputs and the small integer tensors it computes from them are the
exception: how much work there is (``benanza.model.run_values``). A weight's values depend
only on its shape, dtype, seed, slot and copy, so the same
weight is the same bytes in every benchmark that holds it, drawn once and cached; two weights
of one model never share values, which would let ONNX Runtime merge the nodes that read them.
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Sequence

import numpy as np

from benanza.model.dtypes import packed_bytes


def synthetic_array(shape: list[int], dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Random data of a shape and dtype: floats in [-1, 1), integers and booleans as zeros.

    Zeros for integers keep index-like inputs (Gather indices, shapes) in range. Always an
    array, a 0-d one for shape ``[]`` (numpy's arithmetic on it gives a scalar, which ONNX
    Runtime refuses as a feed).
    """
    dt = np.dtype(dtype)
    if dt.kind == "f":
        values = rng.random(shape, dtype=np.float32)
        values *= 2  # in place: the bits of ``values * 2 - 1``, without two temporaries of a weight's size
        values -= 1
        return values if dt == values.dtype else values.astype(dt)
    return np.zeros(shape, dtype=dt)


# What synthetic weights are, in the stack of a runtime that runs models with them
# (``Runtime.stack``): earlier records, whose whole structure-only models ran two same-shape
# weights as one node (``synthetic_weight``'s ``copy``), are a different stack, never mixed.
SYNTHETIC_WEIGHTS = "floats uniform in [-1, 1) drawn per shape, dtype, slot and copy; no two weights of a model alike"

# Synthetic weights are drawn once per (shape, dtype, seed, slot, copy) and shared, read-only, by every
# benchmark that needs them (the same weight recurs in a layer, its fused group, its family's
# other depths and the whole model), up to this many bytes held; the least recently used go first.
WEIGHT_CACHE_BYTES = 256 << 20
_WeightKey = tuple[tuple[int, ...], str, int, int, int]  # shape, dtype, seed, slot, copy
_weights: OrderedDict[_WeightKey, bytes] = OrderedDict()
_weights_held = 0  # the bytes ``_weights`` holds
# A weight larger than a quarter of the cache is never held by it, but while a benchmark holds its array
# (a held weight, ``model.held_weights``) every other benchmark gets that array: an interleaved group
# prepares a model's layers, fused groups, sequences and the whole model together, and VGG-19's 411 MB
# fc6 weight was drawn once for each of them.
_live: weakref.WeakValueDictionary[_WeightKey, np.ndarray] = weakref.WeakValueDictionary()
_weights_lock = threading.Lock()


class WeightCopies:
    """Counts a model's weights by (shape, element type, slot), in order: the ``copy`` of the next."""

    def __init__(self) -> None:
        self._seen: Counter[tuple[tuple[int, ...], int, int]] = Counter()

    def next(self, shape: Sequence[int], elem_type: int, slot: int) -> int:
        """The ``copy`` of a weight (``elem_type``: ONNX's ``TensorProto`` data type): how many came before it."""
        key = (tuple(int(d) for d in shape), int(elem_type), slot)
        self._seen[key] += 1
        return self._seen[key] - 1


def synthetic_weight(shape: Sequence[int], dtype: str | np.dtype, seed: int = 0, slot: int = 0, copy: int = 0) -> bytes:
    """The raw data of ``synthetic_array(shape, dtype)`` for a weight, cached.

    The values depend only on (shape, dtype, seed, slot, copy), not on which other weights
    were drawn before, so that a weight is drawn once however many benchmarks hold it.
    ``slot`` (the input position the weight takes in its node) keeps a node's weights of one
    shape apart: a BatchNormalization's scale, bias, mean and variance. ``copy`` (how many
    weights of the same shape, element type and slot come before it in its model,
    ``WeightCopies``) keeps two nodes' weights apart: with equal values, ONNX Runtime's
    common-subexpression elimination runs two nodes that read one input as one (an Inception
    module's 1x1 branches), which the layers measured apart never do. Inception v2's whole
    model ran 110 nodes where its layers ran 115 (``load.weight_stand_ins``).
    """
    key = _weight_key(shape, dtype, seed, slot, copy)
    if (packed := packed_bytes(key[0], key[1])) is not None:  # zeros of the packed size (dtypes.PACKED_BITS)
        return bytes(packed)
    weight = _drawn(key)
    return weight if isinstance(weight, bytes) else weight.tobytes()


def synthetic_weight_array(
    shape: Sequence[int], dtype: str | np.dtype, seed: int = 0, slot: int = 0, copy: int = 0
) -> np.ndarray:
    """``synthetic_weight``'s values as a read-only array of ``shape`` (a held weight, ``model.held_weights``).

    A weight the cache holds is the cache's bytes, not a copy; a larger one is drawn as an
    array, never turned into bytes, and is the same array for every caller while one holds it.
    Not for packed element types (``dtypes.PACKED_BITS``).
    """
    key = _weight_key(shape, dtype, seed, slot, copy)
    weight = _drawn(key)
    if isinstance(weight, bytes):
        return np.frombuffer(weight, dtype=np.dtype(key[1])).reshape(key[0])
    return weight


def _weight_key(shape: Sequence[int], dtype: str | np.dtype, seed: int, slot: int, copy: int) -> _WeightKey:
    return (tuple(int(d) for d in shape), np.dtype(dtype).name, seed, slot, copy)


def _drawn(key: _WeightKey) -> bytes | np.ndarray:
    """A weight's values: the cache's bytes when it holds them (or now takes them), else the array a
    benchmark still holds, else a fresh array (read-only)."""
    global _weights_held
    with _weights_lock:
        if key in _weights:
            _weights.move_to_end(key)
            return _weights[key]
        live = _live.get(key)
    if live is not None:
        return live
    shape, dtype, seed, slot, copy = key
    rng = np.random.default_rng([seed, slot, len(shape), *shape, *([copy] if copy else [])])
    values = synthetic_array(list(shape), dtype, rng)
    if values.nbytes > WEIGHT_CACHE_BYTES // 4:
        values.flags.writeable = False  # shared by every benchmark that asks while one holds it
        with _weights_lock:
            _live[key] = values
        return values
    data = values.tobytes()
    with _weights_lock:
        if key not in _weights:  # another thread may have drawn it meanwhile
            _weights[key] = data
            _weights_held += len(data)
        while _weights_held > WEIGHT_CACHE_BYTES:
            _weights_held -= len(_weights.popitem(last=False)[1])
    return data
