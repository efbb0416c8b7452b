"""A system's runtimes with their software stacks, registered in the store: what every pipeline opens first.

``benanza run`` (``benanza.local``) opens one target on this machine; a fleet worker
(``benanza.fleet.worker``) opens one per runtime entry of its system. Both fingerprint and
register the same way here: the system's fingerprint (the host, plus the ``gpu_*`` keys of
any device a runtime drives) and each target's stack, a stack never seen on that system being
new work.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from benanza.bench.contract import Runtime
from benanza.bench.spec import variant_id
from benanza.fingerprint import StackFingerprint, stack_fingerprint, system_fingerprint
from benanza.runtimes.base import get_runtime
from benanza.store.base import Store


@dataclass(frozen=True)
class Target:
    """One runtime of a system and the software stack its measurements belong to."""

    runtime: Runtime
    stack: StackFingerprint
    stack_id: str

    @property
    def variant(self) -> str:
        return variant_id(self.runtime.variant())


def open_target(runtime: str, options: Mapping[str, Any] | None = None) -> Target:
    """The runtime registered as ``runtime``, built with ``options``, and its stack fingerprint."""
    rt = get_runtime(runtime, **dict(options or {}))
    stack = stack_fingerprint({"runtime": rt.name, **rt.stack()})
    return Target(rt, stack, stack.stack_id)


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
