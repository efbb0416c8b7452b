"""Nothing measured is lost: results the database does not take are spilled to local files.

``ResilientWriter.write`` upserts records with retries; when the store still fails it appends
them to a spill file (one ``BenchmarkRecord.to_doc()`` JSON object per line, flushed and
fsynced before ``write`` returns). ``drain`` imports every spill file of a folder into a store
and removes a file only after its records were written; the next run calls it first.

Spill folder: the caller's (``Settings.spill_path``: ``$BENANZA_SPILL_DIR``), else ``benanza-spill`` in the
working directory.

Concurrency: an append holds an exclusive ``flock`` on the file and checks, once it holds it,
that the name still leads to the file it opened; a drainer first renames a file to a name of
its own (``NAME.draining-HOST-PID``; a rename succeeds for one drainer only, so two drainers
never import one file twice) and then takes the same lock, so it never reads an append half
done. A drain that dies leaves its renamed file behind; the next drain on that host adopts it
when the process named in it is gone. A last line cut short by a crash is skipped with a
warning; a damaged line elsewhere stops the drain of that file with a ``StoreError`` and the
file is put back for a person to look at.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import socket
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from benanza.bench.records import BenchmarkRecord
from benanza.errors import StoreError
from benanza.settings import DEFAULT_SPILL_DIR
from benanza.store.base import Store
from benanza.store.documents import document_json

SUFFIX = ".jsonl"
DRAINING = ".draining-"  # NAME.jsonl.draining-HOST-PID: taken by the drainer HOST-PID

log = logging.getLogger(__name__)


def default_spill_dir() -> Path:
    """``benanza-spill`` in the working directory (``$BENANZA_SPILL_DIR`` is ``Settings.spill_path``'s)."""
    return Path(DEFAULT_SPILL_DIR).absolute()


@contextmanager
def _locked(path: Path, mode: str) -> Iterator[IO[str]]:
    """``path`` opened and exclusively locked; for appends, the file the name leads to once locked."""
    while True:
        f = path.open(mode, encoding="utf-8")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                current = os.stat(path)
            except FileNotFoundError:
                current = None
            if current is not None and current.st_ino == os.fstat(f.fileno()).st_ino:
                break
        except BaseException:
            f.close()
            raise
        f.close()  # renamed away by a drainer between our open and our lock: open the name again
        if "a" not in mode:
            raise FileNotFoundError(path)
    try:
        yield f
    finally:
        f.close()  # releases the lock


class SpillFile:
    """An append-only file of records that could not be stored (JSON lines)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def append(self, records: Iterable[BenchmarkRecord]) -> int:
        """Append records durably (flushed and fsynced); returns how many.

        Raises:
            StoreError: the file cannot be written.
        """
        lines = [document_json(r.to_doc()) + "\n" for r in records]
        if not lines:
            return 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with _locked(self.path, "a+") as f:  # readable too: see _cut_torn_tail
                _cut_torn_tail(f, self.path)
                f.write("".join(lines))
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot spill {len(lines)} records: {exc.strerror or exc}") from None
        return len(lines)

    def __repr__(self) -> str:
        return f"SpillFile({str(self.path)!r})"


def _cut_torn_tail(f: IO[str], path: Path) -> None:
    """Drop a last line that a crashed writer left unfinished, so that appends start on a line of their own."""
    fd = f.fileno()
    end = os.fstat(fd).st_size
    if end == 0 or os.pread(fd, 1, end - 1) == b"\n":
        return
    keep = 0  # up to and including the last newline
    position = end
    while position > 0:
        start = max(0, position - 65_536)
        block = os.pread(fd, position - start, start)
        newline = block.rfind(b"\n")
        if newline >= 0:
            keep = start + newline + 1
            break
        position = start
    os.ftruncate(fd, keep)
    log.warning("%s: dropped %d bytes of a line cut short by a crash", path, end - keep)


def read_spilled(path: Path) -> list[BenchmarkRecord]:
    """The records of a spill file; a torn last line is skipped with a warning.

    Raises:
        StoreError: a line other than the last is damaged (names the file and line).
    """
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(BenchmarkRecord.from_doc(json.loads(line)))
        except (ValueError, StoreError) as exc:
            if number == len(lines) and not text.endswith("\n"):  # the last line, unfinished
                log.warning("%s:%d: skipped a line cut short by a crash (%s)", path, number, exc)
                continue
            raise StoreError(f"{path}:{number}: damaged spill line: {exc}") from None
    return records


def drain(store: Store, spill_dir: str | os.PathLike[str] | None = None) -> int:
    """Import every spill file of ``spill_dir`` (default: ``default_spill_dir()``) into ``store``.

    A file is removed only after its records were upserted; a file whose upsert fails is
    put back for the next drain, and the error is raised. A file with a damaged line (other
    than a torn last one) is set aside as ``NAME.damaged`` for a person, never imported in part.

    Returns:
        How many records were imported.

    Raises:
        StoreError: the store refused the records, or a spill file is damaged.
    """
    folder = Path(spill_dir) if spill_dir is not None else default_spill_dir()
    if not folder.is_dir():
        return 0
    me = f"{DRAINING}{_host()}-{os.getpid()}"
    imported = 0
    for path in sorted(folder.iterdir()):
        original = _original_name(path)
        if original is None:
            continue
        taken = folder / f"{original}{me}"
        try:
            path.rename(taken)  # only one drainer wins this rename
            with _locked(taken, "r"):  # waits for an append that opened the file before the rename
                records = read_spilled(taken)
        except FileNotFoundError:
            continue
        except StoreError as exc:
            kept = _unused_name(folder / f"{original}.damaged")
            taken.rename(kept)
            raise StoreError(f"{str(exc).replace(str(taken), str(kept))} (set aside, not imported)") from None
        if records:
            try:
                store.upsert(records)
            except BaseException:
                _put_back(taken, folder / original, records)
                raise
        taken.unlink()
        imported += len(records)
        log.info("imported %d spilled records from %s", len(records), folder / original)
    return imported


def _unused_name(path: Path) -> Path:
    candidate, n = path, 1
    while candidate.exists():
        candidate, n = path.with_name(f"{path.name}.{n}"), n + 1
    return candidate


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname())


def _original_name(path: Path) -> str | None:
    """The spill file name of ``path`` when it is free to drain: a spill file, or one a dead drainer took."""
    name = path.name
    if name.endswith(SUFFIX):
        return name
    original, sep, drainer = name.partition(DRAINING)
    if not sep or not original.endswith(SUFFIX):
        return None
    host, _, pid = drainer.rpartition("-")
    if host != _host() or not pid.isdigit() or _alive(int(pid)):
        return None  # another host's drainer, or one still running here
    return original


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _put_back(taken: Path, original: Path, records: list[BenchmarkRecord]) -> None:
    """Give a drained file back to its name; if a writer made a new one meanwhile, append to that."""
    try:
        os.link(taken, original)  # unlike rename, never replaces a file made meanwhile
    except FileExistsError:
        SpillFile(original).append(records)
    taken.unlink()


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What became of one ``ResilientWriter.write``: records stored, and records spilled."""

    stored: int
    spilled: int


class ResilientWriter:
    """Writes records to a store, retrying, and spills what the store does not take."""

    def __init__(
        self,
        store: Store,
        spill_dir: str | os.PathLike[str] | None = None,
        owner: str = "benanza",
        *,
        retries: int = 3,
        backoff_s: float = 1.0,
    ) -> None:
        """A writer to ``store`` that spills what it cannot write there.

        Args:
            store: where records go.
            spill_dir: the spill folder (default: ``default_spill_dir()``).
            owner: who writes (e.g. an actor's name); names the spill file ``OWNER.jsonl``.
            retries: upsert attempts after the first before spilling.
            backoff_s: the first wait between attempts; it doubles each time.
        """
        self.store = store
        self.spill_dir = Path(spill_dir) if spill_dir is not None else default_spill_dir()
        safe_owner = re.sub(r"[^A-Za-z0-9_.-]", "_", owner) or "benanza"
        self.spill = SpillFile(self.spill_dir / f"{safe_owner}{SUFFIX}")
        self.retries, self.backoff_s = retries, backoff_s

    def write(self, records: Iterable[BenchmarkRecord]) -> WriteResult:
        """Upsert ``records``; after ``retries`` failed retries, spill them.

        Raises:
            StoreError: neither the store nor the spill file took the records.
            TypeError: a record cannot be stored anywhere (not JSON-able).
        """
        batch = list(records)
        if not batch:
            return WriteResult(0, 0)
        delay, error = self.backoff_s, None
        for attempt in range(self.retries + 1):
            try:
                self.store.upsert(batch)
                return WriteResult(stored=len(batch), spilled=0)
            except StoreError as exc:
                error = exc
                if attempt < self.retries:
                    log.warning("store write failed (attempt %d of %d): %s", attempt + 1, self.retries + 1, exc)
                    time.sleep(delay)
                    delay *= 2
        try:
            self.spill.append(batch)
        except StoreError as spill_error:
            raise StoreError(f"{spill_error}; the store failed too: {error}") from None
        log.warning("spilled %d records to %s: %s", len(batch), self.spill.path, error)
        return WriteResult(stored=0, spilled=len(batch))

    def drain(self) -> int:
        """Import the spill folder into the store (``drain(self.store, self.spill_dir)``)."""
        return drain(self.store, self.spill_dir)
