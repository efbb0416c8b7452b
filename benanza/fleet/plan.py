"""The fleet's plan: corpus work x systems, minus what each system's stack already holds.

Pure: no Ray, no I/O. The corpus is planned once per runtime (``CorpusWork``: unique spec
templates without a variant); each system turns the templates of its runtime into specs by
adding its own variant (e.g. its thread setting), and the plan keeps the templates whose
spec id the store lacks for that system's stack. Spec ids are hashed straight from the
template fields (``bench.spec.spec_id_of``), so a plan of a million combinations costs one
hash and one set lookup each.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from benanza.bench.plans import StoredPlan
from benanza.bench.spec import BenchmarkSpec, canonical_variant, spec_id_of, variant_id


@dataclass(frozen=True)
class CorpusWork:
    """Unique spec templates of a corpus for one runtime (their variant is left empty).

    ``plans``: the models' plans the templates come from (variant empty too), which each
    system stores with its own stack and variant (``placed_plans``) so analysis can read them.
    ``models``: per template, the number of the first model that needs it (templates come
    model by model, so a model's are consecutive); empty when unknown. The driver cuts chunks
    at these boundaries when a model's benchmarks are sampled together (interleaved).
    """

    runtime: str
    templates: tuple[BenchmarkSpec, ...]
    plans: tuple[StoredPlan, ...] = ()
    models: tuple[int, ...] = ()

    def placed_plans(self, target: Target) -> list[StoredPlan]:
        """The plans as ``target`` measures them: its runtime's variant (the records' ``variant``)."""
        return [replace(p, variant=target.variant_id) for p in self.plans]

    def __post_init__(self) -> None:
        if self.models and len(self.models) != len(self.templates):
            raise ValueError("models needs one entry per template")
        seen: set[tuple[str, int, str]] = set()
        for t in self.templates:
            if t.runtime != self.runtime:
                raise ValueError(f"template for runtime {t.runtime!r} in the work of {self.runtime!r}")
            ident = (t.key, t.batch_size, t.dtype)
            if ident in seen:
                raise ValueError(f"duplicate template {ident}")
            seen.add(ident)


@dataclass(frozen=True)
class Target:
    """One system's runtime as its worker reported it: where results go and what they are."""

    system: str
    runtime: str
    stack_id: str
    variant: Mapping[str, Any]

    @property
    def variant_id(self) -> str:
        return variant_id(self.variant)


@dataclass
class SystemPlan:
    """What one target still lacks: indices into its corpus templates, in corpus order."""

    target: Target
    work: CorpusWork
    todo: list[int] = field(default_factory=list)
    reused: int = 0

    @property
    def total(self) -> int:
        return len(self.todo) + self.reused

    def spec(self, index: int) -> BenchmarkSpec:
        """The runnable spec of template ``index`` for this target."""
        return replace(self.work.templates[index], variant=canonical_variant(self.target.variant))

    def spec_id(self, index: int) -> str:
        t = self.work.templates[index]
        return spec_id_of(t.key, t.batch_size, t.dtype, t.runtime, self.target.variant_id)


def spec_ids(work: CorpusWork, variant: str) -> list[str]:
    """Spec ids of every template of ``work`` under one variant id, in template order."""
    rt = work.runtime
    return [spec_id_of(t.key, t.batch_size, t.dtype, rt, variant) for t in work.templates]


def plan_target(work: CorpusWork, target: Target, present: set[str]) -> SystemPlan:
    """The templates of ``work`` whose spec the store lacks (``present``) for ``target``."""
    if work.runtime != target.runtime:
        raise ValueError(f"work of runtime {work.runtime!r} planned for {target.runtime!r}")
    plan = SystemPlan(target, work)
    if not present:
        plan.todo = list(range(len(work.templates)))
        return plan
    ids = spec_ids(work, target.variant_id)
    plan.todo = [i for i, sid in enumerate(ids) if sid not in present]
    plan.reused = len(ids) - len(plan.todo)
    return plan


def plan_fleet(
    works: Mapping[str, CorpusWork], targets: Iterable[Target], present: Mapping[tuple[str, str], set[str]]
) -> list[SystemPlan]:
    """One ``SystemPlan`` per target; ``present`` maps (system, stack_id) to stored spec ids."""
    return [plan_target(works[t.runtime], t, present.get((t.system, t.stack_id), set())) for t in targets]


def chunks(items: Sequence[int], size: int) -> list[list[int]]:
    """``items`` cut into lists of at most ``size``."""
    if size < 1:
        raise ValueError("chunk size must be at least 1")
    return [list(items[i : i + size]) for i in range(0, len(items), size)]
