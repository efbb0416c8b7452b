"""`benanza report`: the whole performance database as a static site (HTML, SVG figures, CSV)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from benanza.cli.common import (
    MAIN_JOB_GRANULARITY,
    BatchesOpt,
    GranOpt,
    ModelsOpt,
    OptLevelOpt,
    ShapeOpt,
    model_paths,
    parse_batches,
    parse_int_list,
)
from benanza.cli.store_options import DbFileOpt, DbOpt, store_uri
from benanza.model.shapes import parse_shape_overrides
from benanza.report.output import OutputFormat, emit
from benanza.report.site import write_site
from benanza.store import open_store
from benanza.survey import survey


def report_command(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="folder for the site (created; its report files replaced)")
    ] = Path("site"),
    models: ModelsOpt = None,
    batch: BatchesOpt = "1",
    shape: ShapeOpt = None,
    granularity: GranOpt = MAIN_JOB_GRANULARITY,
    opt_level: OptLevelOpt = "extended",
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
    Models are MODELS files (default: the zoo); a stored model without a file is listed.
    """

    batches = parse_batches(batch)
    grans = parse_int_list(granularity, "--granularity")
    overrides = parse_shape_overrides(shape)
    paths = model_paths(models)
    with open_store(store_uri(db, db_file), read_only=True) as store:
        data = survey(store, paths, batches=batches, overrides=overrides, granularities=grans, opt_level=opt_level)
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
