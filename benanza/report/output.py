"""Writing results for people (rich tables) or programs (JSON)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from enum import StrEnum
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table


class OutputFormat(StrEnum):
    table = "table"
    json = "json"


def emit_json(obj: Any, file: TextIO | None = None) -> None:
    """One JSON document on stdout (or ``file``)."""
    out = file or sys.stdout
    json.dump(obj, out, indent=2, default=_default)
    out.write("\n")


def _default(obj: Any) -> Any:
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    return str(obj)


def console(file: TextIO | None = None, width: int | None = None) -> Console:
    """A console for tables; wide when output is not a terminal (pipes, CI logs)."""
    stream = file or sys.stdout
    if width is None and not (hasattr(stream, "isatty") and stream.isatty()):
        width = 160
    return Console(file=stream, width=width, soft_wrap=False)


def table(title: str | None, columns: Iterable[str | tuple[str, str]], rows: Iterable[Iterable[Any]]) -> Table:
    """A rich table; a column given as (name, "right") is right-aligned (numbers)."""
    t = Table(title=title, title_justify="left", header_style="bold")
    for col in columns:
        name, justify = (col, "left") if isinstance(col, str) else col
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        t.add_row(*(fmt(v) for v in row))
    return t


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, list | tuple):
        return "x".join(str(v) for v in value) if all(isinstance(v, int) for v in value) else str(list(value))
    return str(value)
