"""Stored documents as strict JSON: a value JSON has no spelling for is written as null.

Python's ``json.dumps`` writes a float that is not finite as ``Infinity`` or ``NaN``, which no
strict JSON reader accepts: the SQLite store reads its rows with ``orjson`` and reported such a
row as damaged, so that one value (a harness setting of ``inf``) made the whole database
unreadable. Every store writes its documents through ``document_json``: strict JSON, and where
the document holds a float that is not finite, that value as null (the rest as it was).
"""

from __future__ import annotations

import json
import math
from typing import Any


def document_json(value: Any, *, sort_keys: bool = False) -> str:
    """``value`` as compact strict JSON; floats that are not finite as null."""
    try:
        return json.dumps(value, sort_keys=sort_keys, separators=(",", ":"), allow_nan=False)
    except ValueError:  # a float JSON cannot spell: rare, so the walk is paid only then
        return json.dumps(finite(value), sort_keys=sort_keys, separators=(",", ":"), allow_nan=False)


def finite(value: Any) -> Any:
    """``value`` with every float that is not finite, at any depth of dicts, lists and tuples, as None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value
