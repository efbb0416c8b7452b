"""Writing results for people (rich tables) or programs (JSON, CSV).

CSV has the JSON's columns: each row is one JSON object of the command's table, nested
objects flattened to dotted column names (``stats.median``) and lists written as JSON text
in their cell; a missing value is an empty cell. Columns come in the order the rows first
name them.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console
from rich.table import Table

from benanza.bench.spec import parse_variant

if TYPE_CHECKING:
    from benanza.analysis.lower_bound import LowerBound
    from benanza.bench.stats import Interval

DISTURBED_MARK = " (disturbed)"
DISTURBED_NOTE = (
    "(disturbed): the host's speed changed while a measurement it is built from ran, and again when"
    " measured again (or the run's re-measure budget was spent): not a figure to trust"
)


class OutputFormat(StrEnum):
    table = "table"
    json = "json"
    csv = "csv"


def emit_json(obj: Any, file: TextIO | None = None) -> None:
    """One JSON document on stdout (or ``file``)."""
    out = file or sys.stdout
    json.dump(obj, out, indent=2, default=_default)
    out.write("\n")


def csv_cells(row: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """One JSON object as CSV cells: nested objects to dotted names, lists to JSON text."""
    cells: dict[str, Any] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if hasattr(value, "to_dict"):
            value = value.to_dict()
        if isinstance(value, Mapping) and value:
            cells.update(csv_cells(value, f"{name}."))
        elif isinstance(value, Mapping):
            cells[name] = ""
        elif isinstance(value, list | tuple | set | frozenset):
            cells[name] = json.dumps(list(value), default=_default)
        else:
            cells[name] = "" if value is None else value
    return cells


def write_csv(rows: Iterable[Mapping[str, Any]], file: TextIO | None = None) -> None:
    """Rows (JSON objects) as one CSV document with a header (see the module docstring)."""
    flat = [csv_cells(r.to_dict() if hasattr(r, "to_dict") else r) for r in rows]
    columns = list(dict.fromkeys(name for cells in flat for name in cells))
    writer = csv.DictWriter(file or sys.stdout, fieldnames=columns, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(flat)


def emit(fmt_: OutputFormat, document: Any, csv_rows: Iterable[Mapping[str, Any]] | None = None) -> bool:
    """Write ``document`` as JSON, or ``csv_rows`` (default: the document, a list of rows) as CSV.

    Returns False for ``table``: the caller prints its tables.
    """
    if fmt_ is OutputFormat.json:
        emit_json(document)
        return True
    if fmt_ is OutputFormat.csv:
        write_csv(document if csv_rows is None else csv_rows)
        return True
    return False


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
    """A rich table; a column given as (name, "right") is right-aligned (numbers).

    A narrow terminal folds a text cell onto more lines rather than cutting it: a model named
    ``llama_int4/model`` cut to ``llama_int4/mo…`` is not told from its neighbours.
    """
    t = Table(title=title, title_justify="left", header_style="bold")
    for col in columns:
        name, justify = (col, "left") if isinstance(col, str) else col
        t.add_column(name, justify=justify, overflow="fold" if justify == "left" else "ellipsis")  # type: ignore[arg-type]
    for row in rows:
        t.add_row(*(fmt(v) for v in row))
    return t


def variant_column(variants: Iterable[str | None]) -> tuple[str, dict[str | None, str]]:
    """A column that tells rows of several variants (``key=value,...``) apart: its header and cells.

    Only the settings that differ between the variants are shown: ``precision=float32,
    tensor_cores=True,timing=hot`` beside the same with ``tensor_cores=False`` gives the column
    ``tensor cores`` with cells ``True`` and ``False``; where several settings differ, the column
    is ``variant`` and its cells their ``key=value`` pairs. No cells for fewer than two variants:
    a table whose rows share one variant needs no column for it.
    """
    unique = sorted(set(variants), key=str)
    if len(unique) < 2:
        return "variant", {}
    parsed = {v: parse_variant(v) for v in unique}
    keys = sorted({k for d in parsed.values() for k in d})
    differing = [k for k in keys if len({d.get(k) for d in parsed.values()}) > 1]
    if len(differing) == 1:
        (key,) = differing
        return key.replace("_", " "), {v: d.get(key, "-") for v, d in parsed.items()}
    return "variant", {v: ",".join(f"{k}={d[k]}" for k in differing if k in d) or "-" for v, d in parsed.items()}


def fmt_interval(value: float | None, low: float | None = None, high: float | None = None) -> str:
    """``42.1 ± 0.4``: the value to three significant digits, the half-width of its interval at
    the same precision (a width that rounds to nothing gets one more significant digit).
    No interval known: the value alone."""
    if value is None:
        return "-"
    if low is None or high is None:
        return fmt(value)
    half = (high - low) / 2
    magnitude = math.floor(math.log10(abs(value))) if value else 0
    decimals = max(0, 2 - magnitude)
    if half > 0 and round(half, decimals) == 0:
        decimals = max(decimals, -math.floor(math.log10(half)))
    return f"{value:,.{decimals}f} ± {half:.{decimals}f}"


def fmt_figure(value: float | None, interval: Interval | None) -> str:
    """``fmt_interval`` of a figure and its ``Interval`` (the value alone where none is known)."""
    return fmt_interval(value, *((interval.low, interval.high) if interval is not None else ()))


def figure_cell(row: LowerBound, figure: str, value: float | None, unit: str = "") -> str:
    """A figure of ``row`` as ``42.1 ± 0.4`` (its interval's half-width) followed by ``unit``, marked
    ``(disturbed)`` where the harness found its measurement disturbed: the CLI's tables and the
    report's pages print a figure the same way."""
    text = fmt_figure(value, row.interval(figure))
    if value is None:
        return text
    return text + unit + (DISTURBED_MARK if figure in row.disturbed else "")


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


def fmt_coverage(share: float) -> str:
    """A coverage share as a percentage that never rounds up to a whole: ``100%`` only where every node has a
    figure (a Mask R-CNN missing 2 of 625 nodes is ``99.6%``, not ``100%``), one decimal from 99%."""
    if share >= 1:
        return "100%"
    if share >= 0.99:
        return f"{math.floor(share * 1000 + 1e-9) / 10:.1f}%"
    return f"{math.floor(share * 100 + 1e-9):.0f}%"  # 29/50 is 57.99999...%: 58%
