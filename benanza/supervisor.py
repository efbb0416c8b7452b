"""The ``benanza`` command's first process: it runs the command in a child and survives the child's crashes.

A crash in native code (ONNX Runtime) kills the process that runs it (``benanza.crashes``). This
process runs the command as a child, with a journal; when a signal ends the child it reads what the
child had open, says where the crash happened in one line, and runs the command again telling the
new child every crash known so far: what is stored stays stored and is reused, the crashed work is
recorded (a failed benchmark) or done without (a run that shapes a model). It gives up, with a line
and the signal's exit status, when a crash names nothing new (no open entry, or one known already).

It imports nothing heavy: the child does the work. The child is ``python -m benanza.supervisor FOLDER``,
the folder (private to this user) of the command's arguments, the journal and the known crashes: never
in the environment, which every process the child starts (Ray's workers) would inherit, and no password
of a ``--db`` URI on the child's command line (this process masks its own title, as the CLI does).
``BENANZA_SUPERVISE=0`` runs the command in this process (a crash then ends it, as any Python program).
Ctrl-C reaches the child from the terminal; SIGTERM and SIGHUP sent to this process are passed on to it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benanza import crashes

# the most times a command is run again: each run must name a crash not known before
MAX_RUNS = 50


def main() -> None:
    """The ``benanza`` command (and ``python -m benanza``)."""
    if not _supervises():
        from benanza.cli import main as cli_main

        cli_main()
        return
    if any("://" in arg or arg.startswith("--db") for arg in sys.argv):  # a URI may hold a password
        from benanza.cli.store_options import hide_credentials_in_title

        hide_credentials_in_title()
    sys.exit(supervise(sys.argv[1:]))


def child(folder: str) -> None:
    """The command's work, in the supervisor's child: its arguments and journal in ``folder``."""
    crashes.activate(folder)
    argv = json.loads(Path(folder, crashes.ARGV_FILE).read_text(encoding="utf-8"))
    sys.argv = ["benanza", *argv]
    from benanza.cli import app
    from benanza.cli.store_options import hide_credentials_in_title

    hide_credentials_in_title(sys.argv)
    app(prog_name="benanza")


def _supervises() -> bool:
    """``BENANZA_SUPERVISE`` (a variable that does not validate is the child's to report: supervised)."""
    from benanza.errors import BenanzaError
    from benanza.settings import load_settings

    try:
        return load_settings().supervise
    except BenanzaError:
        return True


def supervise(argv: Sequence[str], command: Sequence[str] = ()) -> int:
    """Run ``benanza argv`` in a child until it ends other than by a crash: its exit status.

    ``command``: what runs in the child instead of ``python -m benanza.supervisor`` (the folder follows it).
    """
    command = list(command) or [sys.executable, "-m", "benanza.supervisor"]
    known: list[crashes.Crash] = []
    with tempfile.TemporaryDirectory(prefix="benanza-journal-") as folder:  # readable by this user only
        journal, known_file = Path(folder, crashes.JOURNAL_FILE), Path(folder, crashes.KNOWN_FILE)
        Path(folder, crashes.ARGV_FILE).write_text(json.dumps(list(argv)), encoding="utf-8")
        for _ in range(MAX_RUNS):
            journal.write_text("")
            known_file.write_text(json.dumps([c.to_dict() for c in known]))
            status = _run_child([*command, folder])
            if status >= 0:
                return status
            number = -status
            _restore_terminal()
            stack = crashes.open_entries(journal.read_text(encoding="utf-8", errors="replace").splitlines())
            crash = crashes.Crash(stack, number)
            if number not in crashes.CRASH_SIGNALS:
                _say(f"the command was ended by a signal ({crash.signal_text()}); what was stored is kept")
                return 128 + number
            if not stack:
                _say(
                    f"the process crashed ({crash.signal_text()}) outside any work benanza journals; "
                    "what was stored is kept"
                )
                return 128 + number
            if any(c.work == crash.work for c in known):
                _say(f"the process crashed ({crash.signal_text()}) {crash.where()} again; what was stored is kept")
                return 128 + number
            known.append(crash)
            _say(
                f"the process crashed ({crash.signal_text()}) {crash.where()}; running the command again without "
                "it (what is stored is reused)"
            )
        _say(f"the command crashed {MAX_RUNS} times; what was stored is kept")
        return 1


def _say(line: str) -> None:
    print(f"benanza: {line}", file=sys.stderr, flush=True)


def _run_child(args: list[str]) -> int:
    """The child's exit status (negative: the signal that ended it), signals to this process passed on."""
    process = subprocess.Popen(args)
    passed = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}

    def pass_on(number: int, _frame: object) -> None:
        process.send_signal(number)

    # Ctrl-C in a terminal reaches the child as well (one process group): passed on, it would come twice
    interrupt = signal.SIG_IGN if _in_terminal_foreground() else pass_on
    passed[signal.SIGINT] = signal.getsignal(signal.SIGINT)
    for number in passed:
        signal.signal(number, interrupt if number == signal.SIGINT else pass_on)
    try:
        return process.wait()
    finally:
        for number, handler in passed.items():
            signal.signal(number, handler)


def _in_terminal_foreground() -> bool:
    """Whether this process's group is its terminal's foreground group (which Ctrl-C is sent to)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def _restore_terminal() -> None:
    """A progress bar hides the cursor while it draws; a child killed then leaves it hidden."""
    if sys.stderr.isatty():
        sys.stderr.write("\x1b[?25h")
        sys.stderr.flush()


if __name__ == "__main__":
    child(sys.argv[1])
