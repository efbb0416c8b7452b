"""`benanza report`: the whole performance database as a static site (HTML, SVG figures, CSV)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from benanza.cli.common import GranOpt, StoredBatchesOpt, StoredModelsOpt, model_names, parse_batches, parse_int_list
from benanza.cli.store_options import DbFileOpt, DbOpt, open_read_only
from benanza.report.output import OutputFormat, emit
from benanza.report.site import write_site
from benanza.survey import survey


def report_command(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="folder for the site (created; its report files replaced)")
    ] = Path("site"),
    models: StoredModelsOpt = None,
    batch: StoredBatchesOpt = None,
    granularity: GranOpt = "",
    db: DbOpt = None,
    db_file: DbFileOpt = None,
    format: Annotated[
        OutputFormat, typer.Option("--format", "-f", help="table: where to open it; json: the files written")
    ] = OutputFormat.table,
) -> None:
    """Write the performance database as a static site that opens from file:// (no server, no network).

    Pages: an overview (each model's lower bound, composed and end-to-end latency per
    system, the latest changes between stacks, systems and models), one page per model
    (bounds, per-unit breakdown, optimisation analyses, layer history), one per system
    (fingerprint, stacks, slowest layers, cost) and the corpus; every table also as CSV.
    Read from the database alone (stored plans and records; no model file, no runtime):
    every stored model, or those MODELS name (files or names), at every stored batch size
    or --batch's, with every stored G or --granularity's. A stored result of a model
    without a stored plan (a database from before plans were stored) is listed.
    """

    batches = [b for b in parse_batches(batch) if b is not None]
    grans = parse_int_list(granularity, "--granularity") if granularity else []
    with open_read_only(db, db_file) as store:
        data = survey(store, model_names(models, store.model_names()), batches=batches, granularities=grans)
    files = write_site(data, out)
    listing = [{"kind": kind, "path": path} for kind, names in files.listing() for path in names]
    if not emit(format, files.to_dict(), listing):
        index = (out / "index.html").resolve()
        print(
            f"wrote {len(files.pages)} pages, {len(files.figures)} figures and {len(files.tables)} CSV tables "
            f"to {out}; open {index.as_uri()} in a browser"
        )
    if not data.systems:
        print(f"warning: {data.db} holds no system yet: the report has no figures", file=sys.stderr)
