"""Questions across systems: which is fastest and cheapest per model, and what each system holds.

Everything here is pure: it takes lower-bound rows, stored system and stack documents and
records, and returns values with ``to_dict``; ``benanza.local`` reads the store and
``benanza.report.compare`` renders.

Comparison rules (also in every comparison's JSON):

- ``fastest``: the system with the lowest figure on one basis, named in ``fastest_by``:
  ``e2e_ms`` (whole-model latency) when at least as many compared systems have it as have a
  sequential lower bound, else ``sequential_ms``; systems without a figure on that basis are
  not ranked (a missing figure is never read as zero). ``None`` when no system has either.
- ``cost_per_1000``: the USD cost of 1000 inferences (calls at the row's batch size) at
  the system's hourly price: ``price_per_hour / 3600 * latency_s * 1000`` with the
  end-to-end latency when measured, else the sequential lower bound (``cost_basis`` says
  which). ``None`` without a price or a latency.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benanza.analysis.lower_bound import KERNEL_STATISTIC, LowerBound
from benanza.fingerprint import SystemFingerprint

E2E = "e2e_ms"
SEQUENTIAL = "sequential_ms"
LAYER_STATISTIC = "median"  # of call latency, for ranking a system's slowest layers

# Flattened stack fields shown first when a stack is summarised for people.
KEY_VERSIONS = ("runtime", "onnxruntime", "onnx", "python.version", "numpy.version")


# -- cross-system comparison ----------------------------------------------------------------


def cost_per_1000(price_per_hour: float | None, latency_ms: float | None) -> float | None:
    """USD for 1000 inferences of ``latency_ms`` each at ``price_per_hour`` (None if either is missing)."""
    if price_per_hour is None or latency_ms is None:
        return None
    return price_per_hour / 3600 * (latency_ms / 1e3) * 1000


@dataclass(frozen=True)
class SystemLatency:
    """One system's (and stack's) figures for one model and batch size."""

    system: str
    stack_id: str
    variant: str | None
    sequential_ms: float | None
    parallel_ms: float | None
    e2e_ms: float | None
    coverage: float
    price_per_hour: float | None

    @property
    def cost_basis(self) -> str | None:
        if self.price_per_hour is None:
            return None
        if self.e2e_ms is not None:
            return E2E
        return SEQUENTIAL if self.sequential_ms is not None else None

    @property
    def cost_per_1000(self) -> float | None:
        basis = self.cost_basis
        return None if basis is None else cost_per_1000(self.price_per_hour, getattr(self, basis))

    def to_dict(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "stack_id": self.stack_id,
            "variant": self.variant,
            "sequential_ms": self.sequential_ms,
            "parallel_ms": self.parallel_ms,
            "e2e_ms": self.e2e_ms,
            "coverage": self.coverage,
            "price_per_hour": self.price_per_hour,
            "cost_per_1000": self.cost_per_1000,
            "cost_basis": self.cost_basis,
        }


@dataclass(frozen=True)
class Comparison:
    """Every compared system's figures for one model at one batch size, and the fastest."""

    model: str
    batch_size: int
    systems: tuple[SystemLatency, ...]

    @property
    def fastest_by(self) -> str | None:
        with_e2e = sum(s.e2e_ms is not None for s in self.systems)
        with_lb = sum(s.sequential_ms is not None for s in self.systems)
        if with_e2e == with_lb == 0:
            return None
        return E2E if with_e2e >= with_lb else SEQUENTIAL

    @property
    def fastest(self) -> SystemLatency | None:
        basis = self.fastest_by
        if basis is None:
            return None
        ranked = [s for s in self.systems if getattr(s, basis) is not None]
        return min(ranked, key=lambda s: (getattr(s, basis), s.system, s.stack_id))

    def to_dict(self) -> dict[str, Any]:
        best, basis = self.fastest, self.fastest_by
        return {
            "model": self.model,
            "batch_size": self.batch_size,
            "systems": [s.to_dict() for s in self.systems],
            "fastest": best.system if best else None,
            "fastest_stack_id": best.stack_id if best else None,
            "fastest_by": basis,
            "fastest_ms": getattr(best, basis) if best and basis else None,
            "method": {
                "fastest": "lowest e2e_ms, or sequential_ms when fewer systems have e2e_ms",
                "cost_per_1000": "price_per_hour / 3600 * latency_s * 1000, latency from cost_basis",
            },
        }


def compare_systems(rows: Iterable[LowerBound], prices: Mapping[str, float | None]) -> list[Comparison]:
    """Group lower-bound rows by model and batch size (first-seen order) into comparisons.

    Args:
        rows: one row per (model, system, stack, batch size), e.g. from ``local.analyze_stored``.
        prices: USD per hour by system name; systems absent or None have no cost.
    """
    groups: dict[tuple[str, int], list[SystemLatency]] = defaultdict(list)
    for r in rows:
        groups[(r.model, r.batch_size)].append(
            SystemLatency(
                system=r.system,
                stack_id=r.stack_id,
                variant=r.variant,
                sequential_ms=r.sequential_ms,
                parallel_ms=r.parallel_ms,
                e2e_ms=r.e2e_ms,
                coverage=r.coverage,
                price_per_hour=prices.get(r.system),
            )
        )
    return [Comparison(model, batch, tuple(entries)) for (model, batch), entries in groups.items()]


def system_prices(
    systems: Iterable[Mapping[str, Any]], overrides: Mapping[str, float | None] | None = None
) -> dict[str, float | None]:
    """Hourly prices by system: the stored fingerprints' config, replaced where ``overrides`` sets one."""
    prices = {s["name"]: SystemFingerprint.from_doc(s.get("fingerprint")).price_per_hour() for s in systems}
    for name, price in (overrides or {}).items():
        if price is not None:
            prices[name] = float(price)
    return prices


# -- one system's history and holdings ------------------------------------------------------


def flatten(doc: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys (``{"python": {"version": v}}`` -> ``{"python.version": v}``)."""
    flat: dict[str, Any] = {}
    for key, value in doc.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = list(value) if isinstance(value, list | tuple) else value
    return flat


@dataclass(frozen=True)
class StackChange:
    field: str
    before: Any
    after: Any

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "before": self.before, "after": self.after}


def stack_changes(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> tuple[StackChange, ...]:
    """Fields of two stack fingerprints that differ (added or removed fields have None on one side)."""
    if before is None:
        return ()
    old, new = flatten(before), flatten(after)
    return tuple(
        StackChange(name, old.get(name), new.get(name))
        for name in sorted(old.keys() | new.keys())
        if old.get(name) != new.get(name)
    )


@dataclass(frozen=True)
class StackHistory:
    """One software stack a system ran, and what changed versus the one before it."""

    stack_id: str
    first_seen: str
    last_seen: str
    versions: Mapping[str, Any]  # the flattened stack fingerprint
    changes: tuple[StackChange, ...]  # versus the previous stack; () for the first
    previous: str | None
    records: int

    @property
    def key_versions(self) -> dict[str, Any]:
        keys = [k for k in KEY_VERSIONS if k in self.versions]
        keys += sorted(k for k in self.versions if ("cuda" in k or "driver" in k or "cudnn" in k) and k not in keys)
        return {k: self.versions[k] for k in keys}

    def to_dict(self) -> dict[str, Any]:
        return {
            "stack_id": self.stack_id,
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
            "key_versions": self.key_versions,
            "versions": dict(self.versions),
            "previous": self.previous,
            "changes": [c.to_dict() for c in self.changes],
            "records": self.records,
        }


@dataclass(frozen=True)
class SlowLayer:
    key: str
    label: str
    batch_size: int
    runtime: str
    variant: str
    ms: float  # median call latency
    kernel_ms: float | None  # median kernel time, where the runtime reports one

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "batch_size": self.batch_size,
            "runtime": self.runtime,
            "variant": self.variant,
            "ms": self.ms,
            "kernel_ms": self.kernel_ms,
        }


@dataclass(frozen=True)
class CorpusCoverage:
    """Share of the corpus's unique layer keys (at one batch size, or each model's smallest: None) with an ok
    result."""

    batch_size: int | None
    models: int
    unique_layers: int
    covered: int

    @property
    def share(self) -> float | None:
        return self.covered / self.unique_layers if self.unique_layers else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_size": self.batch_size,
            "models": self.models,
            "unique_layers": self.unique_layers,
            "covered": self.covered,
            "share": self.share,
        }


@dataclass(frozen=True)
class SystemReport:
    """What one system is, which stacks it ran, what it measured, and how much of the corpus."""

    name: str
    hardware: Mapping[str, Any]
    first_seen: str | None
    last_seen: str | None
    stacks: tuple[StackHistory, ...]  # oldest first
    latest_stack_id: str | None
    counts: Mapping[str, Mapping[str, int]]  # latest stack: kind -> outcome -> records
    counts_all_stacks: Mapping[str, Mapping[str, int]]
    slowest_layers: tuple[SlowLayer, ...]  # latest stack
    coverage: CorpusCoverage | None  # latest stack; None without a stack
    fingerprint: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "system": self.name,
            "hardware": dict(self.hardware),
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
            "latest_stack_id": self.latest_stack_id,
            "stacks": [s.to_dict() for s in self.stacks],
            "counts": {k: dict(v) for k, v in self.counts.items()},
            "counts_all_stacks": {k: dict(v) for k, v in self.counts_all_stacks.items()},
            "slowest_layers": [s.to_dict() for s in self.slowest_layers],
            "coverage": self.coverage.to_dict() if self.coverage else None,
            "fingerprint": dict(self.fingerprint),
            "method": {
                "slowest_layers": f"ok layer records of the latest stack by {LAYER_STATISTIC} call latency",
                "coverage": "unique corpus layer keys at batch_size (null: each model's smallest stored batch size) "
                "with an ok record of the latest stack",
            },
        }


def latest_stack(stacks: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The stack a system runs now: the one registered most recently (last_seen, then first_seen)."""
    return max(stacks, key=lambda s: (s["last_seen"], s["first_seen"]), default=None)


def hardware_summary(fingerprint: SystemFingerprint) -> dict[str, Any]:
    """CPU and GPU model, cores and memory of a system's fingerprint (None where unknown)."""
    config = fingerprint.config or {}
    return {
        "kind": config.get("kind"),
        "cpu_model": fingerprint.cpu_model,
        "physical_cores": fingerprint.physical_cores,
        "logical_cores": fingerprint.logical_cores,
        "memory_bytes": fingerprint.memory_bytes,
        "gpus": fingerprint.gpu_names() or None,
        "threads": config.get("threads"),
        "price_per_hour": fingerprint.price_per_hour(),
    }


def _counts(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for row in rows:
        counts[row["kind"]][row["outcome"]] += int(row["count"])
    return {kind: dict(sorted(c.items())) for kind, c in sorted(counts.items())}


def slowest_layers(records: Iterable[Any], top: int) -> tuple[SlowLayer, ...]:
    """The ``top`` ok layer records with the highest median call latency."""
    layers = []
    for r in records:
        call = r.stats.statistic(LAYER_STATISTIC) if r.stats is not None else None
        if r.kind != "layer" or r.outcome != "ok" or call is None:
            continue
        kernel = r.kernel_stats.statistic(KERNEL_STATISTIC) if r.kernel_stats is not None else None
        layers.append(
            SlowLayer(
                key=r.key,
                label=r.label,
                batch_size=r.batch_size,
                runtime=r.runtime,
                variant=r.variant,
                ms=float(call) * 1e3,
                kernel_ms=None if kernel is None else float(kernel) * 1e3,
            )
        )
    layers.sort(key=lambda s: (-s.ms, s.key, s.variant))
    return tuple(layers[: max(top, 0)])


def system_report(
    system: Mapping[str, Any],
    stacks: Sequence[Mapping[str, Any]],
    summary: Iterable[Mapping[str, Any]],
    layer_records: Iterable[Any],
    *,
    corpus_keys: set[str],
    covered_keys: set[str],
    corpus_models: int,
    batch_size: int | None,
    top: int = 10,
) -> SystemReport:
    """One system's report from what the store holds for it.

    Args:
        system: the store's system document (``name``, ``fingerprint``, ``first_seen``, ``last_seen``).
        stacks: the system's stack documents, oldest first.
        summary: the store's ``summary()`` rows of this system.
        layer_records: ok layer records of the latest stack (ranked for ``slowest_layers``).
        corpus_keys: unique layer keys of the corpus at ``batch_size``.
        covered_keys: keys among them with an ok record of the latest stack.
    """
    rows = [r for r in summary if r["system"] == system["name"]]
    per_stack: Counter[str] = Counter()
    for r in rows:
        per_stack[r["stack_id"]] += int(r["count"])
    history = []
    previous: Mapping[str, Any] | None = None
    for s in stacks:
        history.append(
            StackHistory(
                stack_id=s["stack_id"],
                first_seen=s["first_seen"],
                last_seen=s["last_seen"],
                versions=flatten(s["stack"]),
                changes=stack_changes(previous["stack"] if previous else None, s["stack"]),
                previous=previous["stack_id"] if previous else None,
                records=per_stack[s["stack_id"]],
            )
        )
        previous = s
    latest = latest_stack(stacks)
    latest_id = latest["stack_id"] if latest else None
    fingerprint = system.get("fingerprint") or {}
    return SystemReport(
        name=system["name"],
        hardware=hardware_summary(SystemFingerprint.from_doc(fingerprint)),
        first_seen=system.get("first_seen"),
        last_seen=system.get("last_seen"),
        stacks=tuple(history),
        latest_stack_id=latest_id,
        counts=_counts(r for r in rows if r["stack_id"] == latest_id),
        counts_all_stacks=_counts(rows),
        slowest_layers=slowest_layers(layer_records, top),
        coverage=(
            CorpusCoverage(batch_size, corpus_models, len(corpus_keys), len(covered_keys & corpus_keys))
            if latest is not None
            else None
        ),
        fingerprint=fingerprint,
    )
