"""Repeatable ``NAME=V`` flags (``--dim``, ``--value``) read into one mapping."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from benanza.errors import UsageError

V = TypeVar("V")


def named_flags(texts: list[str] | None, parse: Callable[[str], tuple[str, V]], flag: str) -> dict[str, V]:
    """``flag``'s values by name, each text read by ``parse``; a name given twice with two values is an
    error (which one was meant?)."""
    found: dict[str, V] = {}
    for text in texts or []:
        name, value = parse(text)
        if name in found and found[name] != value:
            raise UsageError(f"{flag} {name} is given twice: {found[name]} and {value}")
        found[name] = value
    return found
