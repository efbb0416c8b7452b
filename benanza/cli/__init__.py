"""The `benanza` command: one sub-app per noun."""

from __future__ import annotations

import sys

import click
import typer
from typer.core import TyperGroup

from benanza import __version__
from benanza.cli import analyze, bench, db, fleet, models, report
from benanza.errors import BenanzaError


class BenanzaGroup(TyperGroup):
    """The root command: the one place where a ``BenanzaError`` becomes one line and exit status 2.

    Every command runs inside the root group's ``invoke``, so no command handles errors itself;
    anything else (a bug) keeps its traceback.
    """

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except BenanzaError as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise typer.Exit(2) from None


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


def main() -> None:
    """The ``benanza`` command; a URI with a password on its command line is masked in the process title first."""
    from benanza.cli.store_options import hide_credentials_in_title

    hide_credentials_in_title()
    app()
