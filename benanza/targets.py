"""A system's runtimes with their software stacks, registered in the store: what every pipeline opens first.

``benanza run`` (``benanza.local``) opens one target on this machine; a fleet worker
(``benanza.fleet.worker``) opens one per runtime entry of its system. Both fingerprint and
register the same way here: the system's fingerprint (the host, plus the ``gpu_*`` keys of
any device a runtime drives) and each target's stack, a stack never seen on that system being
new work.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from benanza.bench import host_cpu
from benanza.bench.contract import Runtime
from benanza.bench.spec import parse_variant, variant_id
from benanza.fingerprint import StackFingerprint, stack_fingerprint, system_fingerprint
from benanza.runtimes.base import get_runtime
from benanza.store.base import Store


@dataclass(frozen=True)
class Target:
    """One runtime of a system and the software stack its measurements belong to."""

    runtime: Runtime
    stack: StackFingerprint
    stack_id: str
    notes: tuple[str, ...] = ()  # what was decided when it was opened, for the run's output (the threads auto chose)

    @property
    def variant(self) -> str:
        return variant_id(self.runtime.variant())


def open_target(runtime: str, options: Mapping[str, Any] | None = None) -> Target:
    """The runtime registered as ``runtime``, built with ``options``, and its stack fingerprint."""
    rt = get_runtime(runtime, **dict(options or {}))
    stack = stack_fingerprint({"runtime": rt.name, **rt.stack()})
    return Target(rt, stack, stack.stack_id, rt.notes())


def keep_stored_threads(
    target: Target, runtime: str, options: Mapping[str, Any] | None, stored: Mapping[str, int]
) -> Target:
    """With ``threads = "auto"``, the target at the thread count its system's stored results use, if one is free.

    Auto reads the cores other processes leave free when a run starts; a count unlike the last
    run's would make another variant (``threads=N`` is part of it) and reuse nothing stored. So
    among the counts ``stored`` holds for this runtime's variant otherwise alike, auto keeps the
    most that the free cores allow (``host_cpu.kept_threads``), and says so in ``notes``; where
    none fits, it keeps its own count and says that nothing stored is reused.

    Args:
        target: the target as ``open_target`` built it from ``runtime`` and ``options``.
        stored: variant id -> records, for this system, the target's stack and runtime (``Store.variants``).
    """
    options = dict(options or {})
    free = target.runtime.cpu_threads()
    variant = target.runtime.variant()
    if options.get("threads") != host_cpu.AUTO or free is None or variant.get("threads") != free:
        return target
    counts = [
        n
        for vid in stored
        if (n := _count(parse_variant(vid).get("threads"))) is not None and variant_id({**variant, "threads": n}) == vid
    ]
    keep = host_cpu.kept_threads(free, counts)
    if keep == free or (keep is None and not counts):
        return target
    seen = host_cpu.free_cores_once()
    if keep is None:
        return replace(target, notes=(host_cpu.unfit_note(counts, seen),))
    kept = get_runtime(runtime, **{**options, "threads": keep})  # the same stack: threads are not part of it
    target.runtime.close()
    return Target(kept, target.stack, target.stack_id, (host_cpu.kept_note(keep, seen),))


def settle_threads(
    target: Target, runtime: str, options: Mapping[str, Any] | None, store: Store, system: str
) -> Target:
    """``keep_stored_threads`` with what ``store`` holds for ``system``; read only for ``threads = "auto"``."""
    if (options or {}).get("threads") != host_cpu.AUTO:
        return target
    return keep_stored_threads(target, runtime, options, store.variants(system, target.stack_id, target.runtime.name))


def _count(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def register(
    store: Store, system: str, targets: Iterable[Target], config: Mapping[str, Any] | None = None
) -> dict[str, bool]:
    """Register ``system`` (its fingerprint, with the fleet config's entry of it) and every target's stack.

    Returns:
        stack id -> whether that stack is new on the system.
    """
    targets = list(targets)
    fingerprint = system_fingerprint(t.runtime for t in targets)
    if config is not None:
        fingerprint = fingerprint.with_config(config)
    store.register_system(system, fingerprint.to_doc())
    return {t.stack_id: store.register_stack(system, t.stack_id, t.stack.to_doc()) for t in targets}
