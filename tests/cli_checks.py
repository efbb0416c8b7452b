"""Checks shared by the CLI tests: what a handled user error looks like."""

from __future__ import annotations


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
