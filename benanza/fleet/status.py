"""What each system of a fleet has, and still lacks, for its current software stack.

Reads only the store and the corpus (no Ray): a system's current stack is the one its
worker registered last; its variant (e.g. thread setting) is the one its records of that
stack use. A system whose current stack lacks results that an earlier stack of it had
complete is listed as *changed*: a driver or library update not yet re-measured. A system
with two stacks counts the *regressions* of its current stack against the one before it
(``local.new_regressions``; ``benanza analyze regressions`` lists them).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from benanza.analysis.compare import latest_stack
from benanza.analysis.stored_regressions import new_regressions
from benanza.bench.records import BenchmarkRecord
from benanza.bench.spec import parse_variant, variant_id
from benanza.config import FleetConfig, runtime_entry
from benanza.fleet.plan import Target, plan_target
from benanza.store.base import Store

if TYPE_CHECKING:
    from benanza.fleet.driver import CorpusPlan


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
    regressions: int | None = None  # flagged against the stack before the current one; None: one stack
    stacks: list[StackStatus] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "stacks"}
        out["stacks"] = [s.to_dict() for s in self.stacks]
        return out


def _matches(variant: str, options: Mapping[str, Any]) -> bool:
    """Whether a stored variant id has every option of a runtime entry (``tensor_cores=False``)."""
    return set(variant_id(options).split(",")) <= set(variant.split(",")) if options else True


def _variant_of(
    records: Callable[[str, str | None], list[BenchmarkRecord]], entry: str, siblings: list[dict[str, Any]]
) -> str | None:
    """The variant a runtime entry's records of this stack use (end-to-end records first).

    An entry with options takes the variants that carry them; an entry without takes those
    no sibling entry of the same runtime (``siblings``: their options) claims.
    """
    name, options = runtime_entry(entry)
    for kind in ("model", None):
        variants = [
            r.variant
            for r in records(name, kind)
            if _matches(r.variant, options) and (options or not any(_matches(r.variant, o) for o in siblings if o))
        ]
        if variants:
            return Counter(variants).most_common(1)[0][0]
    return None


def fleet_status(store: Store, config: FleetConfig, corpus: CorpusPlan) -> list[SystemStatus]:
    """Per system (configured or registered in the store): stacks, what is stored and lacking.

    ``corpus`` is the fleet's planned corpus (``driver.plan_corpus``); a configured system's
    runtime entries take their own work, a system known only from the store its runtimes'.
    """
    by_name = corpus.by_runtime()
    registered = {s["name"] for s in store.systems()}
    names = list(config.system_names()) + sorted(registered - set(config.system_names()))
    out = []
    for name in names:
        status = SystemStatus(name, configured=name in config.system_names(), registered=name in registered)
        system = config.system(name) if status.configured else None
        entries = system.runtimes if system else sorted(by_name)
        works = {rt: corpus.work_of(system, rt) if system else by_name.get(rt) for rt in entries}
        siblings = [runtime_entry(rt)[1] for rt in entries]
        stacks = store.stacks(name)
        current = latest_stack(stacks)
        status.current_stack = current["stack_id"] if current else None
        status.total = sum(len(work.templates) for work in works.values() if work is not None)
        for stack in stacks:
            sid = stack["stack_id"]
            present = store.present_spec_ids(name, sid)

            @functools.cache  # entries of one runtime read its records of this stack once
            def records(runtime: str, kind: str | None, sid: str = sid, name: str = name) -> list[BenchmarkRecord]:
                return store.records(system=name, stack_id=sid, runtime=runtime, kind=kind)

            lacks: int | None = 0
            variants = []
            for rt, work in works.items():
                if work is None:
                    continue
                variant = _variant_of(records, rt, siblings)
                if variant is None:
                    lacks = None
                    break
                variants.append(variant)
                target = Target(name, work.runtime, sid, parse_variant(variant))
                lacks += len(plan_target(work, target, present).todo)
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
        if status.registered:
            status.regressions = new_regressions(store, name)
        out.append(status)
    return out
