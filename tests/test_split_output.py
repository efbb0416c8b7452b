"""`models split` writes only under --out, and an unwritable --out is one line and exit 2.

Real files throughout: a model file whose stem is ``..``, a symlink planted under --out, an
--out that is a file, and a folder the kernel refuses to write to (immutable for root,
``chmod 555`` for anyone else).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_checks import one_line_error
from typer.testing import CliRunner

from benanza.cli import app


def _split(*args: str | Path):
    return CliRunner().invoke(app, ["models", "split", *map(str, args), "-g", "2", "-f", "json"])


def _tree(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


@pytest.fixture
def chain_file(tmp_path: Path, conv_chain) -> Path:
    path = tmp_path / "models" / "chain.onnx"
    path.parent.mkdir()
    path.write_bytes(conv_chain("reshape").SerializeToString())
    return path


def test_a_model_named_dot_dot_is_not_written_above_out(tmp_path: Path, chain_file: Path) -> None:
    dotdot = chain_file.with_name("...onnx")  # Path("...onnx").stem == ".."
    assert dotdot.stem == ".."
    shutil.copy(chain_file, dotdot)
    out = tmp_path / "out" / "inner"
    before = _tree(tmp_path)
    result = _split(dotdot, "--out", out)
    written = _tree(tmp_path) - before
    assert all(p == out or out in p.parents for p in written), sorted(written)  # nothing outside --out
    one_line_error(result, str(out), "..")


def test_a_symlink_under_out_cannot_lead_the_files_elsewhere(tmp_path: Path, chain_file: Path) -> None:
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "chain").symlink_to(elsewhere, target_is_directory=True)
    result = _split(chain_file, "--out", out)
    assert list(elsewhere.iterdir()) == []
    one_line_error(result, str(out / "chain"))


def test_an_out_that_is_a_file_is_one_line(tmp_path: Path, chain_file: Path) -> None:
    out = tmp_path / "results.txt"
    out.write_text("not a folder\n")
    one_line_error(_split(chain_file, "--out", out), str(out))
    assert out.read_text() == "not a folder\n"


def test_an_out_below_a_file_is_one_line(tmp_path: Path, chain_file: Path) -> None:
    (tmp_path / "results.txt").write_text("not a folder\n")
    out = tmp_path / "results.txt" / "split"
    one_line_error(_split(chain_file, "--out", out), str(tmp_path / "results.txt"))


@pytest.fixture
def unwritable_dir(tmp_path: Path):
    """A real folder this process cannot create entries in: immutable (root) or mode 555 (others)."""
    folder = tmp_path / "locked"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("root, and this filesystem cannot make a folder immutable (chattr +i)")
    try:
        yield folder
    finally:
        subprocess.run([chattr, "-i", str(folder)], check=True)


def test_an_out_in_a_read_only_folder_is_one_line(unwritable_dir: Path, chain_file: Path) -> None:
    out = unwritable_dir / "split"
    one_line_error(_split(chain_file, "--out", out), str(out))
    assert not out.exists()


def test_a_read_only_out_is_one_line(unwritable_dir: Path, chain_file: Path) -> None:
    one_line_error(_split(chain_file, "--out", unwritable_dir), str(unwritable_dir))
    assert list(unwritable_dir.iterdir()) == []


def test_split_still_writes_every_sequence_under_out(tmp_path: Path, chain_file: Path) -> None:
    out = tmp_path / "out"
    result = _split(chain_file, "--out", out)
    assert result.exit_code == 0, result.output
    files = [p for p in out.rglob("*") if p.is_file()]
    assert files and all(p.resolve().is_relative_to(out.resolve()) for p in files)
