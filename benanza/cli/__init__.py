"""The `benanza` command: one sub-app per noun."""

from __future__ import annotations

import logging
import sys

import typer

from benanza import __version__
from benanza.cli import analyze, bench, db, fleet, models, report
from benanza.cli.common import BenanzaGroup

app = typer.Typer(
    cls=BenanzaGroup,
    help="benanza: how fast your models could run on each of your machines, and why they don't.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(models.app, name="models")
app.add_typer(bench.app, name="bench")
app.add_typer(analyze.app, name="analyze")
app.add_typer(db.app, name="db")
app.add_typer(fleet.app, name="fleet")
app.command("run")(bench.run_command)
app.command("report")(report.report_command)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"benanza {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="print the version"),
) -> None:
    """benanza: lower-bound latencies from per-layer benchmarks."""


class _Lines(logging.Formatter):
    """A log record as the command's other lines on stderr: ``warning: MESSAGE``."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {record.getMessage()}"


class _Stderr(logging.StreamHandler):
    """A handler that writes to ``sys.stderr`` as it is at each message: a progress bar swaps in its own
    stream while it draws, which keeps a line from being stuck onto the bar (as Python's own last resort)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def configure_logging() -> None:
    """benanza's warnings and errors on stderr as ``warning:`` lines (bare, Python printed them without a
    prefix), once per process (the command's: a Ray worker's are Ray's to show)."""
    logger = logging.getLogger("benanza")
    if not any(isinstance(h.formatter, _Lines) for h in logger.handlers):
        handler = _Stderr()
        handler.setFormatter(_Lines())
        handler.setLevel(logging.WARNING)
        logger.addHandler(handler)


def main(argv: list[str] | None = None) -> None:
    """The ``benanza`` command in the process that does the work (``benanza.supervisor`` starts it, passing
    ``argv``: ``["benanza", ARGS...]``; None: this process's own); a URI with a password on its command line is
    masked in the process title first."""
    from benanza.cli.store_options import hide_credentials_in_title

    hide_credentials_in_title(argv)
    configure_logging()
    app(args=None if argv is None else argv[1:], prog_name="benanza")
