"""What each system of a fleet has, and still lacks, for its current software stack.

Reads only the store and the corpus (no Ray): a system's current stack is the one its
worker registered last; its variant (e.g. thread setting) is the one its records of that
stack use. A system whose current stack lacks results that an earlier stack of it had
complete is listed as *changed*: a driver or library update not yet re-measured.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from benanza.analysis.compare import latest_stack
from benanza.config import FleetConfig
from benanza.fleet.plan import CorpusWork, Target, plan_target
from benanza.local import parse_variant
from benanza.store.base import Store


@dataclass
class StackStatus:
    stack_id: str
    first_seen: str
    last_seen: str
    variant: str | None
    stored: int
    lacks: int | None  # None: no variant known (nothing stored yet) for this stack

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class SystemStatus:
    name: str
    configured: bool
    registered: bool
    current_stack: str | None = None
    lacks: int | None = None
    total: int = 0
    changed: bool = False  # the current stack is incomplete and an earlier one was complete
    stacks: list[StackStatus] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "stacks"}
        out["stacks"] = [s.to_dict() for s in self.stacks]
        return out


def _variant_of(store: Store, system: str, stack_id: str, runtime: str) -> str | None:
    """The variant the system's records of this stack use (end-to-end records first)."""
    for kind in ("model", None):
        records = store.records(system=system, stack_id=stack_id, runtime=runtime, kind=kind)
        if records:
            return Counter(r.variant for r in records).most_common(1)[0][0]
    return None


def fleet_status(store: Store, config: FleetConfig, works: Mapping[str, CorpusWork]) -> list[SystemStatus]:
    """Per system (configured or registered in the store): stacks, what is stored and lacking.

    ``works`` maps a runtime name to its corpus work (``driver.plan_corpus``).
    """
    registered = {s["name"] for s in store.systems()}
    names = list(config.system_names()) + sorted(registered - set(config.system_names()))
    out = []
    for name in names:
        status = SystemStatus(name, configured=name in config.system_names(), registered=name in registered)
        system = config.system(name) if status.configured else None
        runtimes = system.runtimes if system else sorted(works)
        stacks = store.stacks(name)
        current = latest_stack(stacks)
        status.current_stack = current["stack_id"] if current else None
        status.total = sum(len(works[rt].templates) for rt in runtimes if rt in works)
        for stack in stacks:
            sid = stack["stack_id"]
            present = store.present_spec_ids(name, sid)
            lacks: int | None = 0
            variants = []
            for rt in runtimes:
                if rt not in works:
                    continue
                variant = _variant_of(store, name, sid, rt)
                if variant is None:
                    lacks = None
                    break
                variants.append(variant)
                target = Target(name, rt, sid, parse_variant(variant))
                lacks += len(plan_target(works[rt], target, present).todo)
            status.stacks.append(
                StackStatus(
                    sid, stack["first_seen"], stack["last_seen"], ";".join(variants) or None, len(present), lacks
                )
            )
        if status.stacks:
            cur = next(s for s in status.stacks if s.stack_id == status.current_stack)
            status.lacks = cur.lacks if cur.lacks is not None else status.total
            earlier_complete = any(s.lacks == 0 for s in status.stacks if s is not cur)
            status.changed = bool(status.lacks) and earlier_complete
        else:
            status.lacks = status.total
        out.append(status)
    return out
