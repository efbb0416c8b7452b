"""Benchmarks in a worker process of their own, replaced when it dies or is left unusable.

A GPU benchmark can leave the CUDA context broken for good (an illegal address in a bad
plan is a sticky error: every later call in that process fails), or kill its process. So a
runtime that says ``isolated = True`` runs its specs in a child process that owns the
runtime and the device: after a failed spec the child asks the runtime whether it is still
``healthy()`` and exits if not; the parent starts a fresh child for the next spec. A child
that dies while measuring leaves a failed record naming the exit code, and the rest go on.

Children are started with ``spawn``: a forked child would inherit the parent's CUDA state,
which CUDA does not support.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any

from benanza.bench.contract import Runtime
from benanza.bench.harness import HarnessSettings
from benanza.bench.records import BenchmarkRecord, Outcome, make_record
from benanza.bench.spec import BenchmarkSpec

RuntimeFactory = Callable[[], Runtime]
# How a spec is measured in the child: ``execute.run_spec`` (passed in, since execute uses this module).
Measure = Callable[..., BenchmarkRecord]
START_METHOD = "spawn"


def _serve(
    factory: RuntimeFactory, run_spec: Measure, settings: HarnessSettings, system: str, stack_id: str, conn: Any
) -> None:
    """The child's loop: build the runtime once, then measure each spec it is sent."""
    runtime = factory()
    try:
        while True:
            message = conn.recv()
            if message is None:
                return
            spec = BenchmarkSpec.from_dict(message)
            record = run_spec(spec, runtime, settings, system=system, stack_id=stack_id)
            healthy = record.outcome is not Outcome.FAILED or _healthy(runtime)
            conn.send((record.to_doc(), healthy))
            if not healthy:
                return  # the parent starts a fresh process for the next spec
    except (EOFError, KeyboardInterrupt):
        return
    finally:
        runtime.close()


def _healthy(runtime: Runtime) -> bool:
    try:
        return bool(runtime.healthy())
    except Exception:
        return False


class IsolatedRunner:
    """Measures specs one at a time in a child process that owns ``factory()``'s runtime.

    Args:
        factory: a picklable callable that builds the runtime in the child
            (``functools.partial(get_runtime, name, **options)``).
        run_spec: what measures one spec in the child (``benanza.bench.execute.run_spec``), picklable.
        settings, system, stack_id: as for ``run_spec``.
    """

    def __init__(
        self, factory: RuntimeFactory, run_spec: Measure, settings: HarnessSettings, *, system: str, stack_id: str
    ) -> None:
        self._factory, self._run_spec, self._settings = factory, run_spec, settings
        self._system, self._stack_id = system, stack_id
        self._context = multiprocessing.get_context(START_METHOD)
        self._process: Any = None
        self._conn: Any = None
        self.started = 0  # children started so far (a replaced child counts again)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _start(self) -> None:
        parent, child = self._context.Pipe()
        self._process = self._context.Process(
            target=_serve,
            args=(self._factory, self._run_spec, self._settings, self._system, self._stack_id, child),
            name="benanza-benchmark-worker",
            daemon=True,
        )
        self._process.start()
        child.close()
        self._conn = parent
        self.started += 1

    def run(self, spec: BenchmarkSpec, runtime: Runtime) -> BenchmarkRecord:
        """One spec's record; a child that dies while measuring it gives a failed record."""
        if self._process is None or not self._process.is_alive():
            self._start()
        try:
            self._conn.send(spec.to_dict())
            doc, healthy = self._conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            self._process.join(timeout=5)
            code = self._process.exitcode
            self._reset()
            return make_record(
                spec,
                system=self._system,
                stack_id=self._stack_id,
                outcome=Outcome.FAILED,
                reason=f"WorkerDied: the benchmark process exited with code {code} while measuring this spec",
                settings={"runtime": runtime.variant(), "harness": self._settings.model_dump()},
            )
        if not healthy:
            self._process.join(timeout=10)
            self._reset()
        return BenchmarkRecord.from_doc(doc)

    def _reset(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._process is not None and self._process.is_alive():
            self._process.kill()
            self._process.join(timeout=5)
        self._process = self._conn = None

    def close(self) -> None:
        if self._process is not None and self._process.is_alive():
            try:
                self._conn.send(None)
            except (OSError, BrokenPipeError):
                pass
            self._process.join(timeout=10)
        self._reset()
