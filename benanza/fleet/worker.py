"""The worker of one system: fingerprints it, runs benchmark specs, writes the results.

``SystemWorker`` is a plain class; the driver runs it as a Ray actor pinned to a node of its
system (``fleet.systems.actor_options``), and tests can also call it directly. At start it
fingerprints the system and every runtime's software stack, registers them in the store
(a stack never seen on that system is new work), and imports results that an earlier
worker on this host spilled while the database was unreachable. ``run`` measures a chunk
of specs and writes the records itself through a ``ResilientWriter``: upserts with retries,
then a local spill file, so nothing measured is lost; retries of a chunk are harmless
because every write is an idempotent upsert.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from dataclasses import replace
from typing import Any

from benanza.bench.execute import Measurer
from benanza.bench.harness import HarnessSettings
from benanza.bench.records import BenchmarkRecord, Outcome
from benanza.bench.spec import BenchmarkSpec
from benanza.config import SystemConfig, runtime_entry
from benanza.errors import BenanzaError, StoreError, one_line
from benanza.settings import Settings, default_settings
from benanza.store.base import Store, open_store
from benanza.store.spill import ResilientWriter, SpillFile, drain
from benanza.store.uri import StoreURI
from benanza.targets import Target, open_target, register, settle_threads

log = logging.getLogger(__name__)


def _ray_context() -> dict[str, Any]:
    """Where this worker runs in Ray (empty outside Ray)."""
    try:
        import ray

        if not ray.is_initialized():
            return {}
        ctx = ray.get_runtime_context()
        return {"node_id": ctx.get_node_id(), "actor_id": ctx.get_actor_id()}
    except Exception:  # Ray absent or not in a worker: no placement to report
        return {}


class _Metrics:
    """Ray metrics of one worker (benchmarks done and failed per system), when Ray is there."""

    def __init__(self, system: str) -> None:
        self._done = self._failed = None
        self._tags = {"system": system}
        try:
            from ray.util.metrics import Counter

            self._done = Counter("benanza_benchmarks_done", "benchmarks measured", tag_keys=("system",))
            self._failed = Counter("benanza_benchmarks_failed", "benchmarks stored as failed", tag_keys=("system",))
        except Exception:  # metrics are optional: no Ray, or no metrics agent
            log.debug("Ray metrics unavailable", exc_info=True)

    def count(self, done: int, failed: int) -> None:
        if self._done is not None and done:
            self._done.inc(done, tags=self._tags)
        if self._failed is not None and failed:
            self._failed.inc(failed, tags=self._tags)


class SystemWorker:
    """Runs benchmarks for one system (see the module docstring)."""

    def __init__(
        self,
        system: dict[str, Any],
        db: StoreURI | str | None,
        harness: dict[str, Any] | None = None,
        spill_dir: str | None = None,
        write_retries: int = 2,
        *,
        settings: Settings | None = None,
    ) -> None:
        self.config = SystemConfig.model_validate(system)
        # the driver's BENANZA_* settings (this process's environment is not read); None: the defaults
        self.env = settings if settings is not None else default_settings()
        self.name = self.config.name
        self.settings = HarnessSettings.model_validate(harness or {})
        self.host = socket.gethostname()
        self.placement = {**_ray_context(), "host": self.host, "pid": os.getpid()}
        self.process = uuid.uuid4().hex  # this worker process's life: a restarted actor is another one
        self.runtimes: dict[str, Any] = {}
        self.targets: dict[str, dict[str, Any]] = {}  # runtime entry -> what identity() reports of it
        self._targets: dict[str, Target] = {}
        self.errors: dict[str, str] = {}
        self._entries: dict[tuple[str, str], str] = {}  # (runtime name, variant id) -> runtime entry
        for name in self.config.runtimes:  # entries: "cudnn", "cudnn:tensor_cores=false", ...
            try:
                self._targets[name] = open_target(runtime_entry(name)[0], self.config.runtime_options(name))
            except (BenanzaError, ImportError, OSError) as exc:
                self.errors[name] = one_line(exc)
        self.spill_dir = spill_dir or str(self.env.spill_path())  # resolved here: relative to this worker
        owner = f"{self.name}-{self.host}-{os.getpid()}"
        self.store: Store | None = None
        self.writer: ResilientWriter | None = None
        self.spill = SpillFile(os.path.join(self.spill_dir, f"{owner}.jsonl"))
        self.drained = 0
        self._measurers: dict[str, Measurer] = {}  # runtime entry -> its measurer, kept for the actor's life
        self._new_stacks: dict[str, bool] = {}  # stack id -> new on this system (``register``)
        self._connect(db, owner, write_retries)
        for name, target in self._targets.items():
            self.runtimes[name] = target.runtime
            self.targets[name] = {
                "stack_id": target.stack_id,
                "variant": target.runtime.variant(),
                "notes": list(target.notes),
            }
            if target.stack_id in self._new_stacks:  # registered: the store was reached
                self.targets[name]["new_stack"] = self._new_stacks[target.stack_id]
            self._entries[(target.runtime.name, target.variant)] = name
        self.metrics = _Metrics(self.name)

    def _connect(self, db: StoreURI | str | None, owner: str, retries: int) -> None:
        """Open the store and register this system; an unreachable store means spilling.

        Before registering, a target whose threads are ``auto`` takes the count this system's
        stored results use where the free cores allow (``settle_threads``).
        """
        try:
            self.store = open_store(db, settings=self.env)
            for name, target in self._targets.items():
                options = self.config.runtime_options(name)
                self._targets[name] = settle_threads(target, runtime_entry(name)[0], options, self.store, self.name)
            self._new_stacks = register(
                self.store, self.name, self._targets.values(), self.config.model_dump(mode="json")
            )
            self.drained = drain(self.store, self.spill_dir)
            self.writer = ResilientWriter(self.store, self.spill_dir, owner, retries=retries, backoff_s=0.5)
        except StoreError as exc:
            log.warning("%s: results will be spilled to %s: %s", self.name, self.spill_dir, one_line(exc))
            self.errors.setdefault("store", one_line(exc))

    def identity(self) -> dict[str, Any]:
        """The system, where this worker runs, and each runtime's stack and variant."""
        return {
            "system": self.name,
            "placement": self.placement,
            "targets": {
                k: {kk: v[kk] for kk in ("stack_id", "variant", "new_stack", "notes") if kk in v}
                for k, v in self.targets.items()
            },
            "errors": dict(self.errors),
            "drained": self.drained,
        }

    def run(self, specs: list[dict[str, Any]]) -> dict[str, Any]:
        """Measure ``specs`` (``BenchmarkSpec.to_dict()`` form) and write their records."""
        measured: list[BenchmarkRecord] = []
        by_runtime: dict[str, list[BenchmarkSpec]] = {}
        wanted: set[str] = set()
        for data in specs:
            spec = BenchmarkSpec.from_dict(data)
            wanted.add(spec.spec_id)
            entry = self._entries.get((spec.runtime, spec.variant_id))
            if entry is None:
                variant = f" ({spec.variant_id})" if spec.variant_id else ""
                raise BenanzaError(f"{self.name}: runtime {spec.runtime!r}{variant} is not available here")
            by_runtime.setdefault(entry, []).append(spec)
        for name, todo in by_runtime.items():
            measurer = self._measurers.get(name)
            if measurer is None:  # the runtime's schedule, decided (and logged) once; a GPU's child process kept
                measurer = Measurer(
                    self.runtimes[name],
                    self.settings,
                    system=self.name,
                    stack_id=self.targets[name]["stack_id"],
                    admit=False,  # the driver sized the chunk; every spec sent gets an outcome
                )
                self._measurers[name] = measurer
            measured += [record for _, record, _ in measurer.measure(todo) if record is not None]
        records = [replace(r, settings={**r.settings, "placement": self.placement}) for r in measured]
        stored = spilled = 0
        if self.writer is not None:
            result = self.writer.write(records)
            stored, spilled = result.stored, result.spilled
        else:
            spilled = self.spill.append(records)
        # what was asked; an earlier call's group measured again (``Measurer.recheck``) is only written
        asked = {r.spec_id: r for r in records if r.spec_id in wanted}.values()
        outcomes = {r.spec_id: str(r.outcome) for r in asked}
        ok = sum(r.outcome == Outcome.OK for r in asked)
        failed = sum(r.outcome == Outcome.FAILED for r in asked)
        self.metrics.count(ok, failed)
        return {
            "system": self.name,
            "node_id": self.placement.get("node_id"),
            "outcomes": outcomes,
            "stored": stored,
            "spilled": spilled,
            # every record of this call, an earlier group's measured again too: whether it is marked disturbed
            "disturbed": {r.spec_id: r.stats.disturbed for r in records if r.stats is not None},
            # each runtime's re-measure budget over this worker process's life (``benanza.bench.remeasure``)
            "process": self.process,
            "remeasures": {name: m.remeasures.to_dict() for name, m in self._measurers.items()},
        }

    def close(self) -> None:
        for measurer in self._measurers.values():
            measurer.close()
        self._measurers.clear()
        for rt in self.runtimes.values():
            rt.close()
        if self.store is not None:
            self.store.close()
