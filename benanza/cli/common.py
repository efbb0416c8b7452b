"""What every command shares: error handling, common options, model loading."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from benanza.errors import BenanzaError
from benanza.report.output import OutputFormat

F = TypeVar("F", bound=Callable[..., Any])


def handles_errors(fn: F) -> F:
    """Turn a ``BenanzaError`` into one line on stderr and exit status 2 (no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except BenanzaError as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


FormatOpt = Annotated[
    OutputFormat, typer.Option("--format", "-f", help="table for people; json or csv (the JSON's columns) for programs")
]
# Numeric flags are taken as text and parsed by ``parse_count``/``parse_int_list``: a bad value is
# then a one-line ``UsageError`` like every other error, not click's usage box.
BatchOpt = Annotated[
    str | None,
    typer.Option("--batch", "-b", metavar="N", help="bind the leading (batch) dimension of every input"),
]
ShapeOpt = Annotated[
    list[str] | None,
    typer.Option("--shape", "-s", help="bind an input's shape, NAME=1x3x640x640 (repeatable)"),
]
ModelsArg = Annotated[
    list[Path] | None,
    typer.Argument(help="ONNX files or folders of them (default: the zoo in the onnx wheel)", show_default=False),
]


def model_paths(models: list[Path] | None) -> list[Path]:
    from benanza.model.load import expand_model_paths
    from benanza.model.zoo import zoo_paths

    return expand_model_paths(list(models)) if models else zoo_paths()


def parse_int_list(text: str, flag: str) -> list[int]:
    """``"1,8"`` -> ``[1, 8]``; anything but positive integers is a one-line ``UsageError``."""
    from benanza.errors import UsageError

    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{flag} expects comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise UsageError(f"{flag} expects positive integers, got {text!r}")
    return values


def parse_count(text: str | None, flag: str, minimum: int = 1) -> int | None:
    """One integer flag of at least ``minimum`` (None when not given); else a one-line ``UsageError``."""
    from benanza.errors import UsageError

    if text is None:
        return None
    kind = "a positive integer" if minimum == 1 else f"an integer of at least {minimum}"
    try:
        value = int(text.strip())
    except ValueError:
        raise UsageError(f"{flag} expects {kind}, got {text!r}") from None
    if value < minimum:
        raise UsageError(f"{flag} expects {kind}, got {text!r}")
    return value
