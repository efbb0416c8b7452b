"""The package's layering, declared as import-linter contracts in pyproject.toml, holds.

The contracts say which layer may import which (``model`` at the bottom, the CLI and the fleet at
the top; see docs/architecture.md) and that no package has import cycles between its modules. A
change that breaks them fails here, with import-linter's report naming the offending imports.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_in_pyproject_are_kept() -> None:
    pytest.importorskip("importlinter")
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "from importlinter.cli import lint_imports_command; lint_imports_command()",
            "--no-cache",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout
