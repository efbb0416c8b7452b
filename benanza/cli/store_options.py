"""The options that name the performance database, and the process title that hides a password.

``--db URI`` names the database on the command line; ``--db-file FILE`` reads the URI from a
file (a mounted secret), so that the password is never part of the command line. A command
line is visible to every user of the machine (``ps``, ``/proc/PID/cmdline``) and Ray stores
the driver's in its job table, so ``hide_credentials_in_title`` rewrites this process's title
with every URI masked before anything else runs; the environment (``BENANZA_DB``,
``BENANZA_DB_FILE``) or ``--db-file`` keeps the password out of the command line from the start.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from benanza.cli.common import cli_settings
from benanza.store.base import Store, open_store
from benanza.store.uri import StoreURI, mask_uri, resolve_store_uri

DB_FLAG = "--db"
DbOpt = Annotated[
    str | None,
    typer.Option(
        DB_FLAG,
        help="database URI (default: $BENANZA_DB, the URI in the file $BENANZA_DB_FILE, or sqlite:///benanza.db); "
        "prefer --db-file or the environment for a URI with a password",
        show_default=False,
    ),
]
DbFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--db-file",
        help="a file that holds the database URI (e.g. a mounted secret): keeps the password off the command line",
        show_default=False,
    ),
]


def store_uri(db: str | None, db_file: Path | None) -> StoreURI | None:
    """The URI that ``--db`` or ``--db-file`` gives; None when neither is given (the environment decides).

    Raises:
        UsageError: both are given, or the file cannot be read.
    """
    db = db or None  # ``--db ""``: as if not given
    if db is None and db_file is None:
        return None
    return resolve_store_uri(db, db_file)


def open_read_only(db: str | None, db_file: Path | None) -> Store:
    """The database that ``--db``/``--db-file`` or the environment names, opened read-only (commands that only read)."""
    return open_store(store_uri(db, db_file), read_only=True, settings=cli_settings())


def masked_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with every URI, and the value of every ``--db``, masked (``mask_uri``)."""
    shown: list[str] = []
    for arg in argv:
        flag, eq, value = arg.partition("=")
        if shown and shown[-1] == DB_FLAG:
            arg = mask_uri(arg)
        elif flag == DB_FLAG and eq:
            arg = f"{flag}={mask_uri(value)}"
        elif "://" in arg:
            arg = mask_uri(arg)
        shown.append(arg)
    return shown


def hide_credentials_in_title(argv: Sequence[str] | None = None) -> bool:
    """Rewrite this process's title (what ``ps``, ``/proc/PID/cmdline`` and Ray see) with URIs masked.

    Returns whether the title was rewritten: only when masking changed something, so that a
    command line without credentials stays as the user typed it.
    """
    argv = list(sys.orig_argv if argv is None else argv)
    shown = masked_argv(argv)
    if shown == argv:
        return False
    try:
        import setproctitle
    except ImportError:  # a declared dependency; say what stays visible rather than fail the command
        print(
            "warning: setproctitle is not installed, so the password in --db stays visible in process listings; "
            "use --db-file or BENANZA_DB",
            file=sys.stderr,
        )
        return False
    name = setproctitle.getthreadtitle()  # the process name (``comm``: what top and pgrep match) stays
    setproctitle.setproctitle(" ".join(shown))
    setproctitle.setthreadtitle(name)
    return True
