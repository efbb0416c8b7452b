"""Synthetic data for tensors a model or a benchmark does not carry: weights, and inputs to feed.

Values do not change a kernel's cost, only shapes and dtypes do: floats are drawn uniform in
[-1, 1), integers and booleans are zeros (index-like inputs such as Gather indices stay in
range). A weight's values depend only on its shape, dtype, seed and slot, so the same weight
is the same bytes in every benchmark that holds it, drawn once and cached.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
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
        return np.asarray(rng.random(shape, dtype=np.float32) * 2 - 1, dtype=dt)
    return np.zeros(shape, dtype=dt)


# Synthetic weights are drawn once per (shape, dtype, seed) and shared, read-only, by every
# benchmark that needs them (the same weight recurs in a layer, its fused group, its family's
# other depths and the whole model), up to this many bytes held; the least recently used go first.
WEIGHT_CACHE_BYTES = 256 << 20
_weights: OrderedDict[tuple[tuple[int, ...], str, int, int], bytes] = OrderedDict()
_weights_lock = threading.Lock()


def synthetic_weight(shape: Sequence[int], dtype: str | np.dtype, seed: int = 0, slot: int = 0) -> bytes:
    """The raw data of ``synthetic_array(shape, dtype)`` for a weight, cached.

    The values depend only on (shape, dtype, seed, slot), not on which other weights were
    drawn before, so that a weight is drawn once however many benchmarks hold it. ``slot``
    (the input position the weight takes in its node) keeps a node's weights of one shape
    apart: a BatchNormalization's scale, bias, mean and variance.
    """
    key = (tuple(int(d) for d in shape), np.dtype(dtype).name, seed, slot)
    with _weights_lock:
        if key in _weights:
            _weights.move_to_end(key)
            return _weights[key]
    if (packed := packed_bytes(key[0], key[1])) is not None:  # zeros of the packed size (dtypes.PACKED_BITS)
        return bytes(packed)
    rng = np.random.default_rng([seed, slot, len(key[0]), *key[0]])
    data = synthetic_array(list(key[0]), dtype, rng).tobytes()
    if len(data) <= WEIGHT_CACHE_BYTES // 4:
        with _weights_lock:
            _weights[key] = data
            held = sum(len(v) for v in _weights.values())
            while held > WEIGHT_CACHE_BYTES:
                held -= len(_weights.popitem(last=False)[1])
    return data
