"""Checks shared by the CLI tests: what a handled user error looks like, fast harness settings, and
a failure planted in a SQLite database as an earlier version would have stored it."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from pathlib import Path


def one_line_error(result, *needles: str) -> str:
    """The one ``error: ...`` line of a handled failure (exit 2, no traceback), holding every needle."""
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # handled, not a crash
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def json_command(env: Mapping[str, str | None], *args: object) -> list | dict:
    """A command through typer's runner with ``env``, its exit checked, its JSON output read (``--format json``)."""
    from typer.testing import CliRunner

    from benanza.cli import app

    result = CliRunner().invoke(app, [str(a) for a in args] + ["--format", "json"], env=dict(env))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# The harness's shortest settings, for CLI runs whose point is that benchmarks run, not their precision.
FAST_ENV = {
    "BENANZA_DB": None,
    "BENANZA_SYSTEM": None,
    "BENANZA_HARNESS_WARMUP_RUNS": "1",
    "BENANZA_HARNESS_MIN_SAMPLES": "3",
    "BENANZA_HARNESS_KERNEL_RUNS": "2",
}


def fast_flags(system: str) -> list[str]:
    """``bench``/``run`` flags to go with ``FAST_ENV``, on one thread, as ``system``."""
    return ["--min-time", "0.001", "--max-time", "0.02", "--threads", "1", "--system", system]


def plant_failure(db: Path) -> str:
    """Mark one stored layer result failed, as a version whose bug was fixed since stored it; its key."""
    with sqlite3.connect(db) as c:
        (key,) = c.execute("SELECT key FROM results WHERE kind = 'layer' ORDER BY key LIMIT 1").fetchone()
        c.execute(
            "UPDATE results SET outcome = 'failed', doc = json_set(doc, '$.outcome', 'failed', '$.reason', "
            "'a failure fixed since') WHERE kind = 'layer' AND key = ?",
            (key,),
        )
    return key


def layer_outcome(db: Path, key: str) -> str:
    """The stored outcome of the layer result ``key``."""
    with sqlite3.connect(db) as c:
        return c.execute("SELECT outcome FROM results WHERE kind = 'layer' AND key = ?", (key,)).fetchone()[0]
