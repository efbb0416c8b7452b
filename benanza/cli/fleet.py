"""`benanza fleet run|status`: the distributed benchmark fleet."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Annotated

import typer

from benanza.cli.analyze import report_lower_bounds
from benanza.cli.common import (
    BenanzaGroup,
    DimOpt,
    FleetBatchesOpt,
    FormatOpt,
    InputOpt,
    ModelsOpt,
    RetryFailedOpt,
    ShapeOpt,
    ValueOpt,
    cli_settings,
    parse_int_list,
)
from benanza.cli.store_options import DbFileOpt, DbOpt, store_uri
from benanza.config import default_fleet_config, load_fleet_config
from benanza.errors import BenanzaError
from benanza.fleet.bounds import run_lower_bounds
from benanza.fleet.driver import plan_corpus, run_fleet
from benanza.fleet.status import fleet_status
from benanza.model.request import BindingRequest
from benanza.report.bench import plan_notes, plan_warnings
from benanza.report.fleet import FleetProgress, status_table, summary_table
from benanza.report.output import OutputFormat, console, emit
from benanza.store.base import default_uri, open_store

app = typer.Typer(
    cls=BenanzaGroup,
    help="Benchmark a corpus on every system of a fleet (Ray + a shared database).",
    no_args_is_help=True,
)

ConfigArg = Annotated[
    Path | None,
    typer.Argument(help="fleet config (TOML, e.g. configs/local-fleet.toml); default: this machine alone"),
]


def _config(
    config: Path | None,
    db,
    address: str | None = None,
    models=None,
    batch=None,
    shape=None,
    dim=None,
    value=None,
    input=None,
):
    """The fleet config with the flags applied; its ``db`` resolved here, once, for the driver and its workers.

    ``db`` is the store URI of ``--db``/``--db-file`` (None: the config's, else the
    environment's, else the default); workers are handed this URI rather than reading their
    own environment, so a URI that comes from a secret file on the driver reaches them too.
    """

    batches = parse_int_list(batch, "--batch") if batch else None
    # a bad flag is one line naming it, before the config is read
    request = BindingRequest.parse(shape, dim, value, input)
    settings = cli_settings()
    cfg = load_fleet_config(config) if config is not None else default_fleet_config(settings)
    db = db or cfg.db or default_uri(settings)
    return cfg.with_overrides(
        db=db,
        address=address,
        models=models or None,
        batch_sizes=batches,
        shapes=shape or None,
        dims=request.dims,
        values=request.values,
        inputs=input or None,
    )


@app.command("run")
def run(
    config: ConfigArg = None,
    models: ModelsOpt = None,
    batch: FleetBatchesOpt = None,
    shape: ShapeOpt = None,
    dim: DimOpt = None,
    value: ValueOpt = None,
    input: InputOpt = None,
    db: DbOpt = None,
    db_file: DbFileOpt = None,
    address: Annotated[
        str | None, typer.Option("--address", help="an existing Ray cluster: auto, HOST:6379 or ray://HOST:10001")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bars")] = False,
    format: FormatOpt = OutputFormat.table,
    retry_failed: RetryFailedOpt = False,
) -> None:
    """Benchmark what every system lacks for its current software stack; print a summary and the lower bounds.

    With no arguments this is benanza's main job: this machine as the only system, Ray in this
    process, the SQLite database ``benanza.db`` here, the zoo of the ``onnx`` wheel. It ends
    with each model's lower bounds next to its composed and end-to-end latency per system
    (JSON: ``lower_bounds``), as ``benanza analyze lower-bound --system`` prints them.

    Exits 2 when nothing asked for could be measured or reused (every model invalid, no
    system with a worker, ...), with one ``error:`` line per reason; a run that measured or
    reused something exits 0 and prints a ``warning:`` line per model or system that failed.
    Both lists are the summary's ``problems``.
    """

    cfg = _config(config, store_uri(db, db_file), address, models, batch, shape, dim, value, input)
    if quiet:
        summary = run_fleet(cfg, settings=cli_settings(), retry_failed=retry_failed)
    else:
        with FleetProgress(console(sys.stderr)) as progress:
            summary = run_fleet(cfg, progress=progress, settings=cli_settings(), retry_failed=retry_failed)
    data = summary.to_dict()
    with _analysis_store(cfg, summary.ok) as store:
        bounds = _lower_bounds(store, cfg, summary) if store is not None else []
        data["lower_bounds"] = [row.to_dict() for row in bounds]
        if not emit(format, data, [{"system": name, **s} for name, s in data["systems"].items()]):
            console().print(summary_table(data))
            if bounds:
                report_lower_bounds(store, bounds, format, None, by_system=len(data["systems"]) > 1)
    for name, system in data["systems"].items():
        for note in system["notes"]:
            print(f"note: {name}: {note}", file=sys.stderr)
    for line in plan_notes(data):
        print(f"note: {line}", file=sys.stderr)
    for line in plan_warnings(data):
        print(f"warning: {line}", file=sys.stderr)
    for problem in data["problems"]:
        print(f"{'warning' if data['ok'] else 'error'}: {problem}", file=sys.stderr)
    if not data["ok"]:
        raise typer.Exit(2)


@contextlib.contextmanager
def _analysis_store(cfg, ok: bool):
    """The run's store opened read-only for its lower bounds; None when nothing was stored or it cannot be opened."""

    if not ok:
        yield None
        return
    try:
        store = open_store(cfg.db, read_only=True, settings=cli_settings())
    except BenanzaError as exc:
        print(f"warning: lower bounds not computed: {exc}", file=sys.stderr)
        yield None
        return
    with store:
        yield store


def _lower_bounds(store, cfg, summary):
    """The run's lower-bound rows; a failure to analyze is a warning, since the measurements are stored."""

    try:
        return run_lower_bounds(store, cfg, summary)
    except BenanzaError as exc:
        print(f"warning: lower bounds not computed: {exc}", file=sys.stderr)
        return []


@app.command("status")
def status(
    config: ConfigArg = None,
    models: ModelsOpt = None,
    batch: FleetBatchesOpt = None,
    shape: ShapeOpt = None,
    dim: DimOpt = None,
    value: ValueOpt = None,
    input: InputOpt = None,
    db: DbOpt = None,
    db_file: DbFileOpt = None,
    format: FormatOpt = OutputFormat.table,
) -> None:
    """Systems, their stacks, and what each still lacks (no Ray needed)."""

    cfg = _config(config, store_uri(db, db_file), None, models, batch, shape, dim, value, input)
    with open_store(cfg.db, read_only=True, settings=cli_settings()) as store:
        corpus = plan_corpus(cfg, known=store.model_names)
        rows = [s.to_dict() for s in fleet_status(store, cfg, corpus)]
    if not emit(format, rows):
        console().print(status_table(rows))
