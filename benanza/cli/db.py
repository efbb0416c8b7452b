"""`benanza db ...`: look into the performance database."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import typer

from benanza.bench.records import Outcome
from benanza.cli.common import BenanzaGroup, FormatOpt
from benanza.cli.store_options import DbFileOpt, DbOpt, open_read_only
from benanza.fingerprint import SystemFingerprint
from benanza.report.output import OutputFormat, console, emit, table

app = typer.Typer(
    cls=BenanzaGroup,
    help="The performance database: systems, software stacks and stored results.",
    no_args_is_help=True,
)


@app.callback()
def _db() -> None:
    """The performance database: systems, software stacks and stored results."""


@app.command("ls")
def ls(db: DbOpt = None, db_file: DbFileOpt = None, format: FormatOpt = OutputFormat.table) -> None:
    """Systems, their software stacks, and result counts per runtime, kind and outcome (the URI shown masked)."""

    with open_read_only(db, db_file) as store:
        listing = {
            "db": store.shown_uri,
            "systems": store.systems(),
            "stacks": store.stacks(),
            "summary": store.summary(),
        }
    if emit(format, listing, listing["summary"]):  # CSV: the result counts, the JSON's ``summary``
        return
    out = console()
    for t in _listing_tables(listing):
        out.print(t)


def _listing_tables(listing: dict[str, Any]) -> list[Any]:
    systems = listing["systems"]
    systems_table = table(
        f"{len(systems)} systems in {listing['db']}",
        [
            "system",
            "cpu",
            ("logical cores", "right"),
            ("physical cores", "right"),
            ("memory GiB", "right"),
            "os",
            "first seen (UTC)",
            "last seen (UTC)",
        ],
        (
            (
                s["name"],
                fp.cpu_model,
                fp.logical_cores,
                fp.physical_cores,
                _gib(fp.memory_bytes),
                fp.os,
                _when(s["first_seen"]),
                _when(s["last_seen"]),
            )
            for s in systems
            for fp in [SystemFingerprint.from_doc(s["fingerprint"])]
        ),
    )
    stacks = listing["stacks"]
    stacks_table = table(
        f"{len(stacks)} software stacks",
        ["system", "stack id", "stack", "first seen (UTC)", "last seen (UTC)"],
        (
            (s["system"], s["stack_id"], _stack_text(s["stack"]), _when(s["first_seen"]), _when(s["last_seen"]))
            for s in stacks
        ),
    )
    counts: dict[tuple[str, str, str, str], dict[str, int]] = defaultdict(dict)
    for row in listing["summary"]:
        counts[(row["system"], row["stack_id"], row["runtime"], row["kind"])][row["outcome"]] = row["count"]
    outcomes = [str(o) for o in Outcome]
    results_table = table(
        f"{sum(r['count'] for r in listing['summary'])} results",
        ["system", "stack id", "runtime", "kind", *((o, "right") for o in outcomes), ("total", "right")],
        ((*group, *(n.get(o, 0) for o in outcomes), sum(n.values())) for group, n in counts.items()),
    )
    return [systems_table, stacks_table, results_table]


def _when(timestamp: str) -> str:
    """``2026-11-22 12:42:20`` of an ISO-8601 UTC timestamp."""
    return timestamp[:19].replace("T", " ")


def _gib(memory_bytes: int | None) -> float | None:
    return memory_bytes / 2**30 if memory_bytes else None


def _stack_text(stack: dict[str, Any]) -> str:
    """``python 3.11.7, numpy 2.4.6 (scipy-openblas 0.3.31), ...`` for people."""
    parts = []
    for name, value in stack.items():
        if isinstance(value, dict):
            version = value.get("version")
            blas = value.get("blas")
            text = f"{name} {version}" if version is not None else f"{name} {value}"
            if isinstance(blas, dict) and blas.get("name"):
                text += f" ({blas['name']} {blas.get('version') or '?'})"
            parts.append(text)
        else:
            parts.append(f"{name} {value}")
    return ", ".join(parts)
