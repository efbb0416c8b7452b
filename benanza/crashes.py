"""Crashes of the process itself, survived: native code that kills it is recorded and not run again.

A fault inside native code (ONNX Runtime on a graph it mishandles: a ``Loop`` whose first output is
unnamed ends ONNX Runtime 1.32 with a segmentation fault) kills the process: no exception, no record,
and the rest of the corpus is gone with it. So the ``benanza`` command runs in a child process
(``benanza.supervisor``) that keeps a *journal*: wherever native code runs on what a user gave (a
model's runs that find its shapes, its optimized graph, each benchmark, each group of benchmarks
sampled in rounds) the child writes what it enters and what it leaves, nested (a model, then the
run that finds its shapes). A child killed by a signal leaves the entries it had open: the
supervisor takes them for a *crash* and runs the command again, telling the new child every crash
it knows. The new child does not run that work again (``native`` raises ``NativeCrash`` there):

- a run that finds a model's shapes or values fails with the crash as its error (the model's other
  layers go on; those it would have shaped are reported per layer with the reason);
- a model's optimized graph: the model is planned without its fusion groups, each layer alone;
- a benchmark: a failed record naming the crash (reused as every failure is; ``--retry-failed``
  measures it again, and a crash again is recorded again);
- a group sampled in rounds: its benchmarks are measured one at a time, so that a crash names one.

A crash is the stack of entries open when the child died, matched whole from its innermost model on
(a model's processing is the same work whether its planning or a benchmark of it does it): the same
kind of work elsewhere (another model's run) is other work. Work nobody journals that crashes ends the command
with a line saying so, as does a crash of work known to crash (nothing more could be learned).

Nothing here imports more than the standard library: the supervisor stays a light process.
"""

from __future__ import annotations

import json
import os
import signal as signals
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from benanza.errors import BenanzaError

# the files of a supervised command's folder, which the supervisor names on its child's command line (never
# in the environment: no process the child starts, a Ray worker or a benchmark's own process, writes there)
JOURNAL_FILE = "journal"  # what the running child has open
KNOWN_FILE = "known.json"  # the crashes known so far (``Crash.to_dict``), written before each child starts
SAID_FILE = "said"  # the lines printed once over the command's runs (``first_time``)
STORED_FILE = "stored"  # the benchmarks the command's runs stored so far, an id a line (``stored_earlier``)
DECIDED_FILE = "decided.json"  # what the command's first run decided from the moment (``decided``)

# signals a fault in native code ends a process with; others (SIGKILL from the kernel's out-of-memory
# killer, SIGTERM, SIGINT) are not crashes of the work and are not run around
_CRASHES = ("SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT")
CRASH_SIGNALS = frozenset(int(getattr(signals, name)) for name in _CRASHES if hasattr(signals, name))

# what each kind of entry is, for the lines that say where a crash happened
KINDS = {
    "model": "processing model {label}",
    "run": "running {label} in ONNX Runtime",
    "graph": "building ONNX Runtime's optimized graph of {label}",
    "benchmark": "measuring {label}",
    "group": "measuring {label} in rounds",
}


@dataclass(frozen=True, slots=True)
class Entry:
    """One piece of work the journal has open: its kind (``KINDS``), what it is about (compared), and
    how a person would name it (not compared)."""

    kind: str
    subject: str
    label: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return self.kind, self.subject

    def says(self) -> str:
        return KINDS.get(self.kind, self.kind + " {label}").format(label=self.label or self.subject)

    def to_list(self) -> list[str]:
        return [self.kind, self.subject, self.label]

    @classmethod
    def from_list(cls, items: Sequence[str]) -> Entry:
        kind, subject, *label = items
        return cls(str(kind), str(subject), str(label[0]) if label else "")


@dataclass(frozen=True, slots=True)
class Crash:
    """What a child had open when a signal ended it."""

    stack: tuple[Entry, ...]
    signal: int

    @property
    def work(self) -> tuple[tuple[str, str], ...]:
        """What crashed, as compared (``work_of``)."""
        return work_of([e.key for e in self.stack])

    def signal_text(self) -> str:
        return signal_text(self.signal)

    def where(self) -> str:
        """Where it happened, innermost last ("processing model a.onnx, running ... in ONNX Runtime")."""
        return ", ".join(e.says() for e in self.stack)

    def reason(self) -> str:
        """The reason work known to crash gives instead of running again."""
        return f"the process crashed running it ({self.signal_text()}); benanza went on without it"

    def to_dict(self) -> dict:
        return {"stack": [e.to_list() for e in self.stack], "signal": self.signal}

    @classmethod
    def from_dict(cls, doc: dict) -> Crash:
        return cls(tuple(Entry.from_list(e) for e in doc["stack"]), int(doc["signal"]))


def work_of(keys: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """Open entries as the work they are: from the innermost model on, where one is open (a model's
    processing is the same work whether planning or a benchmark of it does it), else all of them."""
    models = [i for i, (kind, _) in enumerate(keys) if kind == "model"]
    return tuple(keys[models[-1] :] if models else keys)


def signal_text(number: int) -> str:
    """``SIGSEGV, segmentation fault`` for 11."""
    try:
        name = signals.Signals(number).name
    except ValueError:
        return f"signal {number}"
    description = signals.strsignal(number) or ""
    return f"{name}, {description[:1].lower()}{description[1:]}" if description else name


class NativeCrash(BenanzaError):
    """Work that crashed the process earlier in this command: not run again (``Crash.reason``)."""

    def __init__(self, crash: Crash) -> None:
        self.crash = crash
        super().__init__(crash.reason())


def open_entries(lines: Iterable[str]) -> tuple[Entry, ...]:
    """The entries a journal's lines leave open, outermost first.

    Each line is ``["enter", kind, subject, label]`` or ``["leave"]`` (JSON); a line cut short by
    the crash itself is ignored.
    """
    stack: list[Entry] = []
    for line in lines:
        try:
            items = json.loads(line)
        except ValueError:
            continue
        if items and items[0] == "enter":
            stack.append(Entry.from_list(items[1:]))
        elif items and items[0] == "leave" and stack:
            stack.pop()
    return tuple(stack)


class Journal:
    """The child's side: where it writes what it enters and leaves, and the crashes already known."""

    def __init__(self, fd: int | None, known: Sequence[Crash] = (), folder: str | None = None) -> None:
        self._fd = fd
        self._folder = folder
        self._said_path = os.path.join(folder, SAID_FILE) if folder else None  # lines printed so far, JSON a line
        self._said: set[str] | None = None
        self._stored_path = os.path.join(folder, STORED_FILE) if folder else None
        self.stored_earlier = frozenset(_lines(self._stored_path)) if self._stored_path else frozenset()
        self._open: list[Entry] = []
        self._known = {c.work: c for c in known}
        # the benchmarks of every group known to crash: measured one at a time
        self.singles = frozenset(
            spec_id for c in known if c.stack[-1].kind == "group" for spec_id in c.stack[-1].subject.split(",")
        )

    def _write(self, items: list[str]) -> None:
        if self._fd is None:
            return
        try:  # one unbuffered write a line: what is written is there when the process dies
            os.write(self._fd, (json.dumps(items) + "\n").encode())
        except OSError:  # a full disk: the work goes on unjournaled (a crash then ends the command)
            self._fd = None

    def first_time(self, line: str) -> bool:
        """Whether no earlier run of the command printed ``line`` (which is taken as printed now)."""
        if self._said_path is None:
            return True
        if self._said is None:
            self._said = set()
            for said in _lines(self._said_path):
                try:
                    self._said.add(json.loads(said))
                except ValueError:  # cut short by a crash
                    continue
        if line in self._said:
            return False
        self._said.add(line)
        try:
            with open(self._said_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(line) + "\n")
        except OSError:
            pass  # printed again by a run after a crash, at worst
        return True

    def decided(self, name: str, decide: Callable[[], Any]) -> Any:
        """What the command's first run took for ``name`` (JSON), else ``decide()``, kept for the runs after it."""
        path = os.path.join(self._folder, DECIDED_FILE) if self._folder else None
        if path is None:
            return decide()
        try:
            with open(path, encoding="utf-8") as f:
                decisions = json.load(f)
        except (OSError, ValueError):
            decisions = {}
        if name not in decisions:
            decisions[name] = decide()
            try:
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(decisions, f)
            except OSError:
                pass
        return decisions[name]

    def note_stored(self, spec_ids: Iterable[str]) -> None:
        """Keep that these benchmarks' records are stored: a run of the command after a crash takes them as
        measured (``--repeat`` and ``--retry-failed`` would measure them again)."""
        if self._stored_path is None:
            return
        try:
            with open(self._stored_path, "a", encoding="utf-8") as f:
                f.writelines(f"{spec_id}\n" for spec_id in spec_ids)
        except OSError:
            pass  # measured again after a crash, at worst

    def known(self, entry: Entry) -> Crash | None:
        """The crash of ``entry`` entered where the journal stands now, if one is known."""
        return self._known.get(work_of([*(e.key for e in self._open), entry.key]))

    @contextmanager
    def entered(self, entry: Entry) -> Iterator[None]:
        crash = self.known(entry)
        if crash is not None:
            raise NativeCrash(crash)
        self._open.append(entry)
        self._write(["enter", *entry.to_list()])
        try:
            yield
        finally:
            self._open.pop()
            self._write(["leave"])


_journal = Journal(None)


def activate(folder: str) -> None:
    """Keep this process's journal in the supervisor's ``folder``, where it wrote the crashes known so far."""
    global _journal
    known: list[Crash] = []
    try:
        with open(os.path.join(folder, KNOWN_FILE), encoding="utf-8") as f:
            known = [Crash.from_dict(d) for d in json.load(f)]
    except FileNotFoundError:
        pass
    fd = os.open(os.path.join(folder, JOURNAL_FILE), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    _journal = Journal(fd, known, folder)


def _lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except OSError:
        return []


@contextmanager
def native(kind: str, subject: str, label: str = "") -> Iterator[None]:
    """Run native code on what a user gave inside: journaled where a supervisor reads the journal.

    Raises:
        NativeCrash: this work, entered here, crashed the process earlier in this command.
    """
    with _journal.entered(Entry(kind, subject, label)):
        yield


def first_time(line: str) -> bool:
    """Whether ``line`` is new to this command: a run after a crash does not print again what the runs
    before it printed (the notes and warnings of planning the same models). True where not supervised."""
    return _journal.first_time(line)


def crashed(kind: str, subject: str) -> Crash | None:
    """The known crash of this work entered where the journal stands now (``native`` would raise it)."""
    return _journal.known(Entry(kind, subject))


def decided(name: str, decide: Callable[[], Any]) -> Any:
    """``decide()`` (JSON), taken once per command: a run after a crash takes what the first run decided
    from the moment (the threads ``auto`` saw free: another count would be another variant, and the first
    run's records, and its known crashes, would not be this run's). Where not supervised, ``decide()``."""
    return _journal.decided(name, decide)


def stored_earlier() -> frozenset[str]:
    """The benchmarks that runs of this command before a crash stored (none where not supervised)."""
    return _journal.stored_earlier


def note_stored(spec_ids: Iterable[str]) -> None:
    """Keep that these benchmarks are stored (``Journal.note_stored``)."""
    _journal.note_stored(spec_ids)


def measured_alone(spec_id: str) -> bool:
    """Whether a benchmark is in a group that crashed the process when sampled in rounds."""
    return spec_id in _journal.singles
