"""The ``benanza`` command's first process: it runs the command in a child and survives the child's crashes.

A crash in native code (ONNX Runtime) kills the process that runs it (``benanza.crashes``). This
process runs the command as a child, with a journal; when a signal ends the child it reads what the
child had open, says where the crash happened in one line, and runs the command again telling the
new child every crash known so far: what is stored stays stored and is reused, the crashed work is
recorded (a failed benchmark) or done without (a run that shapes a model). A benchmark is taken for
crashing once it crashed twice (it is stored as failed, so a crash of something else at the same time,
a race, must not be blamed on it); the rest at once. It gives up, with a line and the signal's exit
status, when a crash names nothing new (no open entry, or work known to crash already).

It imports nothing heavy: the child does the work. The child is ``python -P -m benanza.supervisor
FOLDER FD``: the folder (private to this user) of the journal and the known crashes, and a pipe it
reads the command's arguments from, so that a ``--db`` password is on no command line and in no file
(this process masks its own title, as the CLI does), and nothing in the environment, which every
process the child starts (Ray's workers) would inherit. ``-P``: the working directory is not put
first on the child's module path (an ``onnx.py`` there would hide the library).

Signals: in a terminal's foreground the child shares this process's group, so Ctrl-C, Ctrl-Z and a
window's resize reach it from the terminal as they reach any command; elsewhere (CI, a container, a
background job) the child has a group of its own and every signal this process gets (SIGINT, SIGTERM,
SIGHUP, SIGQUIT) is passed on once. On Linux the child is killed when this process dies (``kill -9`` of
the command, the out-of-memory killer), as the command was before it had a child.
``BENANZA_SUPERVISE=0`` runs the command in this process (a crash then ends it, as it ends any Python
program); so does a system without POSIX processes.
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

# the most times a command is run: each run after the first must name a crash not known before
MAX_RUNS = 50
# the signals passed on to a child in a group of its own (the terminal sends none then)
_PASSED = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT") if hasattr(signal, name))


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


def child(folder: str, argv_fd: int) -> None:
    """The command's work, in the supervisor's child: its journal in ``folder``, its arguments from ``argv_fd``."""
    with os.fdopen(argv_fd, encoding="utf-8") as pipe:
        argv = json.load(pipe)
    crashes.activate(folder)
    sys.argv = ["benanza", *argv]
    from benanza.cli import main as cli_main

    cli_main(sys.argv)


def _supervises() -> bool:
    """``BENANZA_SUPERVISE`` (a variable that does not validate is the child's to report: supervised)."""
    if os.name != "posix":  # no process groups to pass signals to, no inherited pipes
        return False
    from benanza.errors import BenanzaError
    from benanza.settings import load_settings

    try:
        return load_settings().supervise
    except BenanzaError:
        return True


def supervise(argv: Sequence[str], command: Sequence[str] = ()) -> int:
    """Run ``benanza argv`` in a child until it ends other than by a crash: its exit status.

    ``command``: what runs in the child instead of ``python -P -m benanza.supervisor`` (the folder and the
    pipe's descriptor follow it).
    """
    command = list(command) or [sys.executable, "-P", "-m", "benanza.supervisor"]
    arguments = json.dumps(list(argv)).encode()
    known: list[crashes.Crash] = []
    once: list[crashes.Crash] = []  # benchmarks that crashed once: run again before they are stored as failed
    with tempfile.TemporaryDirectory(prefix="benanza-journal-") as folder, _Children() as children:
        journal, known_file = Path(folder, crashes.JOURNAL_FILE), Path(folder, crashes.KNOWN_FILE)
        for _ in range(MAX_RUNS):
            journal.write_text("")
            known_file.write_text(json.dumps([c.to_dict() for c in known]))
            status = children.run(command, folder, arguments)
            if status >= 0:
                return status
            number = -status
            _restore_terminal()
            if children.asked:  # stopped from outside: whatever ended the child, nothing runs again
                _say(f"the command was stopped ({crashes.signal_text(children.asked[0])}); what was stored is kept")
                return 128 + children.asked[0]
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
            if stack[-1].kind == "benchmark" and not any(c.work == crash.work for c in once):
                once.append(crash)
                _say(
                    f"the process crashed ({crash.signal_text()}) {crash.where()}; running the command again, "
                    "that benchmark once more before it is stored as failed"
                )
                continue
            known.append(crash)
            _say(
                f"the process crashed ({crash.signal_text()}) {crash.where()}; running the command again without "
                "it (what is stored is reused)"
            )
        _say(f"the command was run {MAX_RUNS} times, each ended by a crash; what was stored is kept (exit status 1)")
        return 1


def _say(line: str) -> None:
    print(f"benanza: {line}", file=sys.stderr, flush=True)


class _Children:
    """Runs the command's children one at a time, this process's signals passed on to the one running.

    In a terminal's foreground the child gets Ctrl-C (and Ctrl-\\) from the terminal itself: those are not
    passed on. A signal passed on, or one that came while no child ran, is ``asked``: no child starts after it.
    """

    def __init__(self) -> None:
        self.foreground = _in_terminal_foreground()
        self.asked: list[int] = []
        self._running: subprocess.Popen | None = None
        self._previous: dict[int, object] = {}

    def _pass_on(self, number: int, _frame: object) -> None:
        self.asked.append(number)
        if self._running is not None:
            try:  # to its group where it has one: what it started (a benchmark's own process) too
                if self.foreground:
                    self._running.send_signal(number)
                else:
                    os.killpg(self._running.pid, number)
            except ProcessLookupError:
                pass

    def _not_passed(self, number: int, _frame: object) -> None:
        """Ctrl-C in a terminal: the child got it from the terminal too; nothing runs after it."""
        self.asked.append(number)

    def __enter__(self) -> _Children:
        own = {signal.SIGINT, getattr(signal, "SIGQUIT", None)} if self.foreground else set()
        for number in _PASSED:
            # a handler, never SIG_IGN: an ignored signal stays ignored in the child (Ctrl-C would do nothing there)
            self._previous[number] = signal.signal(number, self._not_passed if number in own else self._pass_on)
        return self

    def __exit__(self, *exc: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)

    def run(self, command: Sequence[str], folder: str, arguments: bytes) -> int:
        """One child's exit status (negative: the signal that ended it); -the signal asked, if one was."""
        if self.asked:
            return -self.asked[0]
        read, write = os.pipe()
        try:
            self._running = subprocess.Popen(
                [*command, folder, str(read)],
                pass_fds=(read,),
                process_group=None if self.foreground else 0,
                env=child_environment(_package_root(), sys.path, os.getcwd(), os.environ),
                preexec_fn=_dies_with(os.getpid()) if _PRCTL is not None else None,
            )
        except OSError as exc:
            os.close(write)
            _say(f"cannot start the command's process: {exc}")
            return 1  # an exit status: the command ends with it
        finally:
            os.close(read)
        try:
            with os.fdopen(write, "wb") as pipe:  # after the start: a long command line cannot fill the pipe
                pipe.write(arguments)
        except BrokenPipeError:  # the child ended before it read them: its status says how
            pass
        try:
            return self._running.wait()
        finally:
            self._running = None


def _load_prctl():
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()
_PR_SET_PDEATHSIG = 1


def _dies_with(parent: int):
    """What the child runs before its program: it is killed when this process dies, as the command was
    before it had a child (``kill -9`` of the command, the kernel's out-of-memory killer): never left running
    alone. Linux only; elsewhere the child outlives a killed supervisor."""

    def die_with_parent() -> None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # it died before the line above
            os._exit(1)

    return die_with_parent


def _package_root() -> str:
    return str(Path(crashes.__file__).resolve().parents[1])


def child_environment(root: str, path: Sequence[str], cwd: str, environ: dict[str, str]) -> dict[str, str] | None:
    """The child's environment: this one, with ``root`` (the folder this benanza is imported from) first on
    ``PYTHONPATH`` where only the working folder made it importable (a checkout run as ``python -m benanza``
    from its root, not installed), which ``-P`` leaves off the child's path; else None (this one as it is)."""
    others = {str(Path(p).resolve()) for p in path if p and Path(p).resolve() != Path(cwd).resolve()}
    if str(Path(root).resolve()) in others:
        return None
    return {**environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, environ.get("PYTHONPATH")]))}


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
    child(sys.argv[1], int(sys.argv[2]))
