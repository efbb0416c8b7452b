"""The stored result of one benchmark: a versioned, backend-neutral value.

A ``BenchmarkRecord`` carries everything needed to use a measurement without the run that
made it: where it ran (system, software stack), what was measured (the spec and its
identity), the raw samples and derived statistics, the outcome, and provenance (time, host,
settings). Numbers stay numbers; nothing is a formatted string.

``identity()`` is the unique key in every store: one record per (system, stack, runtime,
kind, key, batch size, dtype, variant). Writing the same identity again replaces the record,
so retried (at-least-once) benchmark calls never duplicate results.

``stats`` is a ``MeasurementStats``: the samples' statistics and how the measurement went
(how sampling ended, what the interference check found, the time it took) plus what a
runtime adds (the GPU runtime's candidate algorithms); ``kernel_stats`` a ``SampleStats``.
Both are stored as the flat documents every store has held, key for key.

Records whose ``schema_version`` differs from ``SCHEMA_VERSION`` come from an outdated
definition and are ignored by every store query, never mixed with current ones.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from benanza.bench.spec import BenchmarkSpec, SpecKind
from benanza.bench.stats import SAMPLE_STATISTICS, SampleStats, assembled
from benanza.errors import StoreError

SCHEMA_VERSION = 1  # bump when a field is added, removed or changes meaning

IDENTITY_FIELDS = ("system", "stack_id", "runtime", "kind", "key", "batch_size", "dtype", "variant")


class Outcome(StrEnum):
    OK = "ok"
    SKIPPED = "skipped"  # the runtime does not support the spec; ``reason`` says why
    FAILED = "failed"  # preparing or running raised; ``reason`` holds the error


# how a measurement went, in the order a stored ``stats`` document holds them after the statistics
PROVENANCE_FIELDS = (
    "stopped_by",
    "iterations",
    "disturbed",
    "disturbed_reason",
    "cpu_share",
    "remeasured",
    "spent_s",
    "other_cores",
)
_NAMED = (*SAMPLE_STATISTICS, *PROVENANCE_FIELDS)
_NAMED_SET = frozenset(_NAMED)
_NO_EXTRAS: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class MeasurementStats(SampleStats):
    """A record's ``stats``: its samples' statistics, how they were taken, and a runtime's extras.

    The stored document (``to_doc``) is flat: the statistics, then the provenance fields, then
    ``extras``. A field that is None is one the record does not hold and is left out, except
    those in ``kept_null``, written as null (the CPU harness always writes ``cpu_share``);
    ``from_doc`` keeps every value as stored, so any document written so far reads back to
    the same document. Older records lack newer fields (``cpu_share``, ``spent_s``...): None.
    """

    stopped_by: str | None = None  # noise, time_cap or max_samples (``harness.StopReason``)
    iterations: int | None = None  # calls per sample
    disturbed: bool | None = None  # the host's speed changed while it was measured, every time it was
    disturbed_reason: str | None = None
    cpu_share: float | None = None  # process CPU time over wall time while sampling
    remeasured: int | None = None  # times it was taken again because it was disturbed
    spent_s: float | None = None  # its own warm-up, calibration and samples (its share of a group's)
    other_cores: float | None = None  # other processes' CPU time over wall time while sampling, in cores
    # a runtime's own keys (the GPU runtime's algorithms, cold, hot_modes), read-only
    extras: Mapping[str, Any] = field(default_factory=lambda: _NO_EXTRAS)
    kept_null: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.extras is not _NO_EXTRAS:
            shadowed = _NAMED_SET.intersection(self.extras)
            if shadowed:
                raise ValueError(f"extras may not hold the named fields {sorted(shadowed)}")
            object.__setattr__(self, "extras", MappingProxyType(dict(self.extras)) if self.extras else _NO_EXTRAS)
        if type(self.kept_null) is not frozenset:
            object.__setattr__(self, "kept_null", frozenset(self.kept_null))

    @classmethod
    def of(cls, sample: SampleStats, **provenance: Any) -> MeasurementStats:
        """``sample``'s statistics with the provenance fields (and ``extras``, ``kept_null``) given."""
        return cls(**{name: getattr(sample, name) for name in SAMPLE_STATISTICS}, **provenance)

    def sample_stats(self) -> SampleStats:
        """The statistics alone."""
        return SampleStats(**{name: getattr(self, name) for name in SAMPLE_STATISTICS})

    def to_doc(self) -> dict[str, Any]:
        """The stored document (see the class docstring); ``extras``' values are shared, not copied."""
        kept = self.kept_null
        doc = {name: value for name in _NAMED if (value := getattr(self, name)) is not None or name in kept}
        doc.update(self.extras)
        return doc

    def to_dict(self) -> dict[str, Any]:
        """The stored document, as JSON output writes it."""
        return self.to_doc()

    def __reduce__(self) -> tuple[Any, ...]:
        # a read-only mapping does not pickle (Ray, process pools); the document does, exactly
        return (MeasurementStats.from_doc, (self.to_doc(),))

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> MeasurementStats:
        """A stored ``stats`` document, any written so far (values as stored; unknown keys are ``extras``)."""
        if _NAMED_SET.issuperset(doc):  # the CPU harness's documents: every key a field
            named, extras = doc, _NO_EXTRAS
        else:
            named = {k: v for k, v in doc.items() if k in _NAMED_SET}
            extras = MappingProxyType({k: v for k, v in doc.items() if k not in _NAMED_SET})
        value = assembled(cls, _NAMED_SETTERS, named)
        _set_extras(value, extras)
        nulls = [k for k, v in named.items() if v is None]
        _set_kept_null(value, frozenset(nulls) if nulls else _NOTHING_NULL)
        return value


_NAMED_SETTERS = tuple((name, getattr(MeasurementStats, name).__set__) for name in _NAMED)
_set_extras = MeasurementStats.extras.__set__  # type: ignore[attr-defined]
_set_kept_null = MeasurementStats.kept_null.__set__  # type: ignore[attr-defined]
_NOTHING_NULL: frozenset[str] = frozenset()


_OUTCOMES: dict[str, Outcome] = {str(o): o for o in Outcome}  # a StrEnum member hashes as its value
_KINDS: dict[str, str] = {str(k): str(k) for k in SpecKind}


def utc_now() -> str:
    """The current time as ISO-8601 UTC, the timestamp format of every store."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True, slots=True)
class BenchmarkRecord:
    """One benchmark result as stored; see the module docstring for the identity rule."""

    system: str
    stack_id: str
    runtime: str
    kind: str  # a SpecKind value
    key: str
    batch_size: int
    dtype: str
    variant: str  # canonical variant string (bench.spec.variant_id)
    spec_id: str
    label: str
    outcome: Outcome
    reason: str | None = None
    samples: tuple[float, ...] = ()  # seconds per call, as measured
    stats: MeasurementStats | None = field(default=None, hash=False)
    kernel_samples: tuple[float, ...] = ()  # seconds per run inside library kernels
    kernel_stats: SampleStats | None = field(default=None, hash=False)
    settings: dict[str, Any] = field(default_factory=dict, hash=False)  # session options + harness settings
    spec: dict[str, Any] = field(default_factory=dict, hash=False)  # BenchmarkSpec.to_dict()
    measured_at: str = field(default_factory=utc_now)
    host: str = field(default_factory=socket.gethostname)
    duration_s: float = 0.0
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        # Normalise what callers may pass loosely (lists, plain strings, numpy floats).
        set_ = object.__setattr__
        # a dict lookup first: the Enum call costs microseconds, and a store reads thousands of records
        set_(self, "outcome", _OUTCOMES.get(self.outcome) or Outcome(self.outcome))
        set_(self, "kind", _KINDS.get(self.kind) or str(SpecKind(self.kind)))
        set_(self, "batch_size", int(self.batch_size))
        set_(self, "samples", tuple(float(s) for s in self.samples))
        set_(self, "kernel_samples", tuple(float(s) for s in self.kernel_samples))
        set_(self, "duration_s", float(self.duration_s))
        if self.outcome is not Outcome.OK and not self.reason:
            raise ValueError(f"a {self.outcome} record needs a reason")
        if self.stats is not None and not isinstance(self.stats, MeasurementStats):
            raise TypeError(f"stats must be MeasurementStats, got {type(self.stats).__name__} (make_record converts)")
        if self.kernel_stats is not None and not isinstance(self.kernel_stats, SampleStats):
            raise TypeError(f"kernel_stats must be SampleStats, got {type(self.kernel_stats).__name__}")

    def identity(self) -> tuple[str, str, str, str, str, int, str, str]:
        """The unique key of this record in a store (``IDENTITY_FIELDS`` in order)."""
        return (
            self.system,
            self.stack_id,
            self.runtime,
            self.kind,
            self.key,
            self.batch_size,
            self.dtype,
            self.variant,
        )

    def to_doc(self) -> dict[str, Any]:
        """A JSON-able document holding every field."""
        return {
            "schema_version": self.schema_version,
            "system": self.system,
            "stack_id": self.stack_id,
            "runtime": self.runtime,
            "kind": self.kind,
            "key": self.key,
            "batch_size": self.batch_size,
            "dtype": self.dtype,
            "variant": self.variant,
            "spec_id": self.spec_id,
            "label": self.label,
            "outcome": str(self.outcome),
            "reason": self.reason,
            "samples": list(self.samples),
            "stats": self.stats.to_doc() if self.stats is not None else None,
            "kernel_samples": list(self.kernel_samples),
            "kernel_stats": self.kernel_stats.to_doc() if self.kernel_stats is not None else None,
            "settings": self.settings,
            "spec": self.spec,
            "measured_at": self.measured_at,
            "host": self.host,
            "duration_s": self.duration_s,
        }

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> BenchmarkRecord:
        """The record of a document written by ``to_doc`` (unknown fields are ignored).

        Raises:
            StoreError: a required field is missing or a value is invalid.
        """
        try:
            stats, kernel_stats = doc.get("stats"), doc.get("kernel_stats")
            return cls(
                schema_version=int(doc["schema_version"]),
                system=doc["system"],
                stack_id=doc["stack_id"],
                runtime=doc["runtime"],
                kind=doc["kind"],
                key=doc["key"],
                batch_size=doc["batch_size"],
                dtype=doc["dtype"],
                variant=doc["variant"],
                spec_id=doc["spec_id"],
                label=doc.get("label", ""),
                outcome=doc["outcome"],
                reason=doc.get("reason"),
                samples=doc.get("samples") or (),
                stats=MeasurementStats.from_doc(stats) if stats is not None else None,
                kernel_samples=doc.get("kernel_samples") or (),
                kernel_stats=SampleStats.from_doc(kernel_stats) if kernel_stats is not None else None,
                settings=dict(doc.get("settings") or {}),
                spec=dict(doc.get("spec") or {}),
                measured_at=doc["measured_at"],
                host=doc.get("host", ""),
                duration_s=doc.get("duration_s", 0.0),
            )
        except KeyError as exc:
            raise StoreError(f"stored record lacks field {exc.args[0]!r}") from None
        except (TypeError, ValueError, AttributeError) as exc:  # AttributeError: stats that are no mapping
            raise StoreError(f"stored record is invalid: {exc}") from None


def make_record(
    spec: BenchmarkSpec,
    *,
    system: str,
    stack_id: str,
    outcome: Outcome | str,
    reason: str | None = None,
    samples: Iterable[float] = (),
    stats: MeasurementStats | Mapping[str, Any] | None = None,
    kernel_samples: Iterable[float] = (),
    kernel_stats: SampleStats | Mapping[str, Any] | None = None,
    settings: Mapping[str, Any] | None = None,
    measured_at: str | None = None,
    host: str | None = None,
    duration_s: float = 0.0,
) -> BenchmarkRecord:
    """The record of one measurement (or skip, or failure) of ``spec`` on a system and stack.

    ``stats`` and ``kernel_stats`` may also be documents (as stored, any subset of the keys:
    tests write a record's statistics by hand); the package itself passes typed values.
    """
    return BenchmarkRecord(
        system=system,
        stack_id=stack_id,
        runtime=spec.runtime,
        kind=str(spec.kind),
        key=spec.key,
        batch_size=spec.batch_size,
        dtype=spec.dtype,
        variant=spec.variant_id,
        spec_id=spec.spec_id,
        label=spec.label,
        outcome=Outcome(outcome),
        reason=reason,
        samples=tuple(samples),
        stats=MeasurementStats.from_doc(stats) if isinstance(stats, Mapping) else stats,
        kernel_samples=tuple(kernel_samples),
        kernel_stats=SampleStats.from_doc(kernel_stats) if isinstance(kernel_stats, Mapping) else kernel_stats,
        settings=dict(settings or {}),
        spec=spec.to_dict(),
        measured_at=measured_at or utc_now(),
        host=host if host is not None else socket.gethostname(),
        duration_s=duration_s,
    )
