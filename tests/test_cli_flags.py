"""Every command's numeric and shape flags: a bad value is one line on stderr and exit status 2.

The commands are found by walking the command tree (what ``python -m benanza --help`` lists),
so a command added later with one of these flags is covered too. A bad value must be refused
before anything else happens (no store opened, no GPU library asked, no Ray started).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import typer
from cli_checks import one_line_error
from typer.testing import CliRunner

from benanza.cli import app


def _commands(group, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], object]]:
    """(path, command) of every leaf command under ``group`` (typer vendors click: duck-typed)."""
    found = []
    for name, command in sorted(group.commands.items()):
        if getattr(command, "commands", None) is not None:
            found += _commands(command, (*prefix, name))
        else:
            found.append(((*prefix, name), command))
    return found


COMMANDS = _commands(typer.main.get_command(app))


def _taking(flag: str) -> list[tuple[str, ...]]:
    return [path for path, command in COMMANDS if any(flag in p.opts for p in command.params)]


def test_the_tree_holds_the_commands_that_take_a_batch() -> None:
    assert set(_taking("--batch")) >= {
        ("models", "inspect"),
        ("models", "dedup"),
        ("models", "split"),
        ("bench", "run"),
        ("analyze", "lower-bound"),
        ("analyze", "optimizations"),
        ("analyze", "systems"),
        ("run",),
        ("fleet", "run"),
        ("fleet", "status"),
    }


def test_every_batch_flag_states_the_default_it_has() -> None:
    """Every command runs a model at its own batch unless --batch is given (the main job measured at 1 a model
    exported at 16, and its help once said "the model's own" of it); analyze systems counts its corpus at 1."""
    for path in _taking("--batch"):
        (flag,) = [p for p in dict(COMMANDS)[path].params if "--batch" in p.opts]
        if flag.default == "1":
            assert flag.help.endswith("(default: 1)"), (path, flag.help)
        else:
            assert flag.default is None and (
                "the model's own" in flag.help
                or "the config's" in flag.help
                or "every stored batch" in flag.help
                or "each model's smallest stored batch" in flag.help
            ), path
    assert (
        "the config's batch_sizes" in next(p for p in dict(COMMANDS)[("fleet", "run")].params if p.name == "batch").help
    )


def _invoke(path: tuple[str, ...], flag: str, value: str, model: Path, tmp_path: Path):
    command = dict(COMMANDS)[path]
    required = [str(model) for p in command.params if p.param_type_name == "argument" and p.required]
    env = {"BENANZA_DB": f"sqlite:///{tmp_path / 'flags.db'}", "BENANZA_SYSTEM": "flags-test"}
    return CliRunner().invoke(app, [*path, *required, f"{flag}={value}"], env=env)


@pytest.fixture(scope="module")
def model(tmp_path_factory, conv_chain) -> Path:
    path = tmp_path_factory.mktemp("flags") / "chain.onnx"
    path.write_bytes(conv_chain("reshape").SerializeToString())
    return path


@pytest.mark.parametrize("path", _taking("--batch"), ids=" ".join)
@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_a_bad_batch_is_one_line_and_exit_2(path, value, model, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # nothing may be written, but if it were, not into the repository
    one_line_error(_invoke(path, "--batch", value, model, tmp_path), "--batch")
    assert not (tmp_path / "flags.db").exists() and not (tmp_path / "benanza.db").exists()


@pytest.mark.parametrize("path", _taking("--granularity"), ids=" ".join)
@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_a_bad_granularity_is_one_line_and_exit_2(path, value, model, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    one_line_error(_invoke(path, "--granularity", value, model, tmp_path), "--granularity")


@pytest.mark.parametrize("path", _taking("--shape"), ids=" ".join)
@pytest.mark.parametrize("value", ["x=1x0x8x8", "x=1x-3x8x8", "x=1xax8", "nonsense"])
def test_a_bad_shape_is_one_line_and_exit_2(path, value, model, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    one_line_error(_invoke(path, "--shape", value, model, tmp_path), "--shape")


@pytest.mark.parametrize("path", _taking("--threads"), ids=" ".join)
@pytest.mark.parametrize("value", ["0", "abc"])
def test_a_bad_thread_count_is_one_line_and_exit_2(path, value, model, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    one_line_error(_invoke(path, "--threads", value, model, tmp_path), "--threads")


def test_benanzas_log_warnings_are_warning_lines_naming_the_file(capsys, build_model) -> None:
    """A part of a model ONNX Runtime could not run printed a bare ``main_graph: ...`` line: now ``warning:``
    and the file, as the command's other lines."""
    import logging

    import numpy as np
    from onnx import TensorProto, helper

    from benanza.cli import configure_logging
    from benanza.model.run_values import run_values

    logger = logging.getLogger("benanza")
    before = list(logger.handlers)
    try:
        configure_logging()
        configure_logging()  # once per process, however often asked
        assert len(logger.handlers) == len(before) + 1
        # a Range ONNX Runtime refuses (a zero delta), on the integers the model computes
        model = build_model(
            [
                helper.make_node("Shape", ["x"], ["s"]),
                helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
                helper.make_node("Range", ["zero", "n", "zero"], ["r"]),
                helper.make_node("Reshape", ["x", "r"], ["y"]),
            ],
            [("x", TensorProto.FLOAT, [4])],
            [("y", TensorProto.FLOAT, None)],
            initializers={"zero": np.int64(0)},
        )
        types = {"x": ((4,), "float32"), "s": ((1,), "int64"), "n": ((), "int64"), "zero": ((), "int64")}
        types["r"] = ((4,), "int64")
        run_values(model, types, {"x": np.zeros(4, "float32")}, "models/m.onnx")
    finally:
        for handler in logger.handlers[len(before) :]:
            logger.removeHandler(handler)
    err = capsys.readouterr().err
    assert err.startswith("warning: models/m.onnx: the integer values it computes could not be run"), err


def test_a_log_warning_goes_to_stderr_as_it_is_when_said(monkeypatch) -> None:
    """A progress bar swaps ``sys.stderr`` for its own stream while it draws: a handler holding the stream of
    its start wrote past it, and the line stuck onto the bar."""
    import io
    import logging

    from benanza.cli import configure_logging

    logger = logging.getLogger("benanza")
    before = list(logger.handlers)
    try:
        configure_logging()
        swapped = io.StringIO()
        monkeypatch.setattr(sys, "stderr", swapped)
        logging.getLogger("benanza.store.spill").warning("store write failed")
    finally:
        for handler in logger.handlers[len(before) :]:
            logger.removeHandler(handler)
    assert swapped.getvalue() == "warning: store write failed\n"
