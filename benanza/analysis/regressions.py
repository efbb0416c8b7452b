"""Regressions: which layers, units and models got slower (or faster) on a system, and why.

Pure: records (the current one and the stored repeats of each identity), the stacks'
fingerprints and the models' units in; frozen values out. Two questions are answered:

- **Stacks** (``compare_stacks``): one system's base stack against its head stack (by
  default the stack before the latest and the latest): per benchmark identity measured on
  both, the ratio of medians head / base with its interval, and whether it is a change.
- **History** (``history_changes``): one stack's own runs over time (the repeats a run on an
  unchanged stack leaves, see ``Store.repeats``): where a step happened, by change-point
  detection, and the change across it.

Statistics, from maintained libraries:

- The interval of a change is a bootstrap interval (``scipy.stats.bootstrap``, percentile
  method) of log(median(head samples) / median(base samples)), from the stored raw samples
  of both sides (every run of a side pooled). A noisy layer has a wide interval and needs a
  bigger change to be flagged.
- Samples of one run do not show how much a figure moves *between* runs (another process,
  frequency, placement). That run-to-run noise is learned from the repeats: the standard
  deviation of the log medians of a benchmark's runs on one stack (both sides pooled),
  never less than the median of the same figure over every benchmark of the system that has
  repeats. The bootstrap interval is widened by ``q * noise * sqrt(1/runs_base + 1/runs_head)``
  (the standard error of a difference of run means), ``q`` being Student's t quantile for the
  degrees of freedom of the benchmark's own runs when they set the noise (a few runs estimate
  it poorly), the normal one when the system-wide floor does. Without any repeats only the within-run
  interval is used, and the report says so.
- A change is flagged when its interval excludes no change *and* its size is at least
  ``threshold``: the interval guards against noise, the threshold against changes too small
  to matter.
- Change points in a benchmark's history: ``ruptures`` (``Pelt``, cost ``l2`` on the log
  medians, penalty ``2 * log(n) * sigma^2``, BIC's for a Gaussian mean shift, sigma from the
  median absolute first difference). Chosen over E-Divisive (MongoDB's signal-processing
  package, Apache Otava) and asv's step detection because ruptures is a maintained, general
  library on PyPI with an exact search (Pelt: optimal segmentation for a penalty, in linear
  expected time, Killick et al. 2012) and documented costs, usable on the short series a
  bounded history holds (10 runs); E-Divisive's permutation test needs longer series to be
  significant, and asv's detector is internal to asv, not a published API.

A model's change is attributed to its units: each unit's change in milliseconds times how
often the model runs it, as a share of the model's change (end to end where measured, else
the sum of its units, where a unit that is not flagged counts as unchanged: summing the
point estimates of changes within the noise of dozens of units would add their noise up).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist, median
from typing import Any

import numpy as np

from benanza.bench.records import BenchmarkRecord, Outcome
from benanza.bench.spec import SpecKind
from benanza.model.keys import stable_id

REGRESSION, IMPROVEMENT, UNCHANGED = "regression", "improvement", "unchanged"
UNIT_KINDS = (str(SpecKind.LAYER), str(SpecKind.GROUP))


@dataclass(frozen=True, slots=True)
class RegressionSettings:
    """What counts as a change.

    Attributes:
        threshold: smallest relative change flagged (0.05: 5% slower or faster).
        confidence: of the intervals (0.99).
        resamples: bootstrap resamples per interval.
        min_samples: a run with fewer samples is left out (a time-capped run of one or two
            samples, one of which the process spent descheduled, is no figure to compare).
        min_noise: floor of the run-to-run noise in change-point detection (relative), so that
            a benchmark whose runs agree to the microsecond does not break on any wobble.
    """

    threshold: float = 0.05
    confidence: float = 0.99
    resamples: int = 999
    min_noise: float = 0.01
    min_samples: int = 5

    def to_dict(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "confidence": self.confidence,
            "resamples": self.resamples,
            "min_noise": self.min_noise,
            "min_samples": self.min_samples,
        }


DEFAULT_SETTINGS = RegressionSettings()


@dataclass(frozen=True, slots=True, order=True)
class Subject:
    """What one series measures on a system: a record's identity without system and stack."""

    runtime: str
    kind: str
    key: str
    batch_size: int
    dtype: str
    variant: str

    @classmethod
    def of(cls, record: BenchmarkRecord) -> Subject:
        return cls(record.runtime, record.kind, record.key, record.batch_size, record.dtype, record.variant)


@dataclass(frozen=True, slots=True)
class Run:
    """One measurement of a subject: the current record or a stored repeat."""

    stack_id: str
    measured_at: str
    samples: tuple[float, ...]  # seconds per call
    disturbed: bool = False  # the harness saw the host's speed change while it measured (stats.disturbed)

    @property
    def median_s(self) -> float:
        return median(self.samples)


@dataclass(frozen=True, slots=True)
class Series:
    """Every ok run of one subject on one system, oldest first, with the label people read."""

    subject: Subject
    label: str
    runs: tuple[Run, ...]

    def on(self, stack_id: str) -> tuple[Run, ...]:
        return tuple(r for r in self.runs if r.stack_id == stack_id)


def series_of(records: Iterable[BenchmarkRecord], min_samples: int = 1) -> dict[Subject, Series]:
    """Current records and repeats as series: ok records of ``min_samples`` or more, by (subject, stack, time)."""
    runs: dict[Subject, dict[tuple[str, str], Run]] = {}
    labels: dict[Subject, str] = {}
    for r in records:
        if r.outcome != Outcome.OK or len(r.samples) < max(min_samples, 1):
            continue
        subject = Subject.of(r)
        labels.setdefault(subject, r.label)
        disturbed = bool(r.stats is not None and r.stats.disturbed)
        runs.setdefault(subject, {})[(r.stack_id, r.measured_at)] = Run(r.stack_id, r.measured_at, r.samples, disturbed)
    return {
        s: Series(s, labels[s], tuple(sorted(found.values(), key=lambda run: run.measured_at)))
        for s, found in sorted(runs.items())
    }


@dataclass(frozen=True, slots=True)
class Change:
    """One subject's change from base to head: ratio of medians (above 1 is slower) and its interval."""

    subject: Subject
    label: str
    base: str  # stack id, or "runs 1-3" in a history
    head: str
    base_ms: float
    head_ms: float
    ratio: float
    low: float
    high: float
    base_runs: int
    head_runs: int
    noise: float | None  # run-to-run relative noise used (None: no repeats anywhere, within-run only)
    significant: bool
    direction: str  # REGRESSION, IMPROVEMENT or UNCHANGED
    disturbed: bool = False  # a run on either side was disturbed: the change is not flagged, only reported

    @property
    def delta_ms(self) -> float:
        return self.head_ms - self.base_ms

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.subject.kind,
            "key": self.subject.key,
            "label": self.label,
            "runtime": self.subject.runtime,
            "batch_size": self.subject.batch_size,
            "dtype": self.subject.dtype,
            "variant": self.subject.variant,
            "base": self.base,
            "head": self.head,
            "base_ms": self.base_ms,
            "head_ms": self.head_ms,
            "change": self.ratio - 1,
            "ratio": self.ratio,
            "low": self.low,
            "high": self.high,
            "base_runs": self.base_runs,
            "head_runs": self.head_runs,
            "noise": self.noise,
            "significant": self.significant,
            "direction": self.direction,
            "disturbed": self.disturbed,
        }


@dataclass(frozen=True, slots=True)
class ModelUnits:
    """A model's execution units (unit key -> how often the model runs it), as its plan says."""

    model: str
    model_key: str
    batch_size: int
    units: tuple[tuple[str, int], ...]  # (unit key, count), plan order of first use


@dataclass(frozen=True, slots=True)
class UnitShare:
    """One unit's part of a model's change."""

    key: str
    label: str
    count: int
    delta_ms: float  # count * (head - base)
    share: float  # of the model's change
    significant: bool
    direction: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "count": self.count,
            "delta_ms": self.delta_ms,
            "share": self.share,
            "significant": self.significant,
            "direction": self.direction,
        }


@dataclass(frozen=True, slots=True)
class ModelChange:
    """A model's change (end to end where both sides measured it, else the sum of its units) and its causes."""

    model: str
    model_key: str
    batch_size: int
    runtime: str
    variant: str
    figure: str  # "e2e" or "sum of units"
    base_ms: float
    head_ms: float
    change: Change | None  # the end-to-end record's change, with its interval
    units: tuple[UnitShare, ...]  # largest contribution in the model's direction first
    missing_units: int  # units without a figure on both sides
    threshold: float = 0.0  # smallest change flagged (``RegressionSettings.threshold``)

    @property
    def ratio(self) -> float:
        return self.head_ms / self.base_ms if self.base_ms else math.nan

    @property
    def causes(self) -> tuple[UnitShare, ...]:
        """The flagged units that moved the way the model did."""
        direction = REGRESSION if self.head_ms >= self.base_ms else IMPROVEMENT
        return tuple(u for u in self.units if u.significant and u.direction == direction)

    @property
    def explained(self) -> float:
        """The share of the model's change that its flagged units account for."""
        return sum(u.share for u in self.causes)

    @property
    def significant(self) -> bool:
        """End to end: its own test; a sum of units: flagged units moved it by at least the threshold."""
        if self.change is not None:
            return self.change.significant
        return bool(self.causes) and abs(self.ratio - 1) >= self.threshold

    @property
    def units_change(self) -> float | None:
        """The change of the model's units together (relative to its base), None without units."""
        if not self.units or not self.base_ms:
            return None
        return sum(u.delta_ms for u in self.units) / self.base_ms

    def summary(self, top: int = 3) -> str:
        """``+12.0% end to end; 80% of it from 3 units: Conv 1x64x56x56, ...``.

        A significant end-to-end change that no flagged unit accounts for says how much its
        units moved together: far less than the model means the change is outside the units
        (the framework between kernels, or the machine while the model ran).
        """
        what = "end to end" if self.figure == "e2e" else "sum of units"
        text = f"{self.ratio - 1:+.1%} {what}"
        causes = self.causes
        if causes:
            names = ", ".join(u.label or u.key[:12] for u in causes[:top])
            more = f" and {len(causes) - top} more" if len(causes) > top else ""
            count = "1 unit" if len(causes) == 1 else f"{len(causes)} units"
            text += f"; {self.explained:.0%} of it from {count}: {names}{more}"
        elif self.figure == "e2e" and self.units_change is not None:
            text += f"; no flagged unit accounts for it (its units together {self.units_change:+.1%})"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "model_key": self.model_key,
            "batch_size": self.batch_size,
            "runtime": self.runtime,
            "variant": self.variant,
            "figure": self.figure,
            "base_ms": self.base_ms,
            "head_ms": self.head_ms,
            "change": self.ratio - 1,
            "interval": [self.change.low - 1, self.change.high - 1] if self.change else None,
            "significant": self.significant,
            "explained": self.explained,
            "units_change": self.units_change,
            "summary": self.summary(),
            "units": [u.to_dict() for u in self.units],
            "missing_units": self.missing_units,
        }


@dataclass(frozen=True, slots=True)
class StackDelta:
    """One entry of a stack fingerprint that differs between two stacks (dotted path; None: absent)."""

    path: str
    before: Any
    after: Any

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "before": self.before, "after": self.after}


@dataclass(frozen=True, slots=True)
class RegressionReport:
    """What changed on one system between two stacks, or along one stack's history."""

    system: str
    mode: str  # "stacks" or "history"
    base: str
    head: str
    stack_diff: tuple[StackDelta, ...]
    changes: tuple[Change, ...]  # flagged first, largest change first
    models: tuple[ModelChange, ...]
    settings: RegressionSettings
    notes: tuple[str, ...] = ()
    change_points: Mapping[str, int] = field(default_factory=dict)  # history: subject key -> run index

    @property
    def regressions(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.significant and c.direction == REGRESSION)

    @property
    def improvements(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.significant and c.direction == IMPROVEMENT)

    def to_dict(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "mode": self.mode,
            "base": self.base,
            "head": self.head,
            "settings": self.settings.to_dict(),
            "stack_diff": [d.to_dict() for d in self.stack_diff],
            "regressions": len(self.regressions),
            "improvements": len(self.improvements),
            "compared": len(self.changes),
            "changes": [c.to_dict() for c in self.changes],
            "models": [m.to_dict() for m in self.models],
            "notes": list(self.notes),
            "method": (
                "ratio of medians head/base; bootstrap percentile interval (scipy) of the log ratio over the raw "
                "samples, widened by the run-to-run noise learned from repeats; flagged when the interval excludes 1 "
                "and |change| >= threshold; history change points by ruptures Pelt"
            ),
        }


# -- statistics ------------------------------------------------------------------------------


def _log_median_ratio(base: np.ndarray, head: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.log(np.median(head, axis=axis)) - np.log(np.median(base, axis=axis))


def bootstrap_log_ratio(
    base: Sequence[float], head: Sequence[float], confidence: float, resamples: int, seed: int
) -> tuple[float, float, float]:
    """log(median(head) / median(base)) and its bootstrap percentile interval (scipy).

    A side with fewer than two samples has no within-run interval: the estimate's bounds are
    the estimate itself (the run-to-run noise then makes the whole interval).
    """
    b, h = np.asarray(base, dtype=float), np.asarray(head, dtype=float)
    estimate = float(_log_median_ratio(b, h))
    if len(b) < 2 or len(h) < 2:
        return estimate, estimate, estimate
    from scipy import stats as scipy_stats  # imported when used: scipy.stats costs every command ~1 s to import

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a side whose samples are all equal: a degenerate, zero-width interval
        result = scipy_stats.bootstrap(
            (b, h),
            _log_median_ratio,
            vectorized=True,
            paired=False,
            confidence_level=confidence,
            n_resamples=resamples,
            method="percentile",
            rng=np.random.default_rng(seed),
        )
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    if not (math.isfinite(low) and math.isfinite(high)):
        return estimate, estimate, estimate
    return estimate, min(low, estimate), max(high, estimate)


def run_noise(runs: Sequence[Run]) -> float | None:
    """Standard deviation of the log medians of runs (None with fewer than two)."""
    if len(runs) < 2:
        return None
    return float(np.std(np.log([r.median_s for r in runs]), ddof=1))


def system_noise(series: Iterable[Series], stacks: Iterable[str]) -> float | None:
    """The median run-to-run noise over every subject with repeats on one of ``stacks``."""
    found = []
    for s in series:
        for stack in stacks:
            noise = run_noise(s.on(stack))
            if noise is not None:
                found.append(noise)
    return float(np.median(found)) if found else None


def _pooled_noise(sides: Sequence[Sequence[Run]]) -> tuple[float, int] | None:
    """Run-to-run noise of a subject from the spread within each side (pooled variance), and its degrees of freedom."""
    num = 0.0
    den = 0
    for runs in sides:
        if len(runs) >= 2:
            logs = np.log([r.median_s for r in runs])
            num += float(np.sum((logs - logs.mean()) ** 2))
            den += len(runs) - 1
    return (math.sqrt(num / den), den) if den else None


def _quantile(confidence: float, dof: int | None) -> float:
    """The two-sided quantile for ``confidence``: Student's t with ``dof`` degrees of freedom, else normal.

    A subject's own run-to-run noise estimated from a few runs is itself uncertain (from 3 runs
    split 1 | 2 it has one degree of freedom): its interval takes t's wider quantile, as a
    t-test would; the system-wide floor pools every benchmark's repeats and counts as known.
    """
    if dof is None:
        return NormalDist().inv_cdf(0.5 + confidence / 2)
    from scipy import stats  # imported when used: it adds about a second to every command's start

    return float(stats.t.ppf(0.5 + confidence / 2, dof))


def compare_runs(
    series: Series,
    base_runs: Sequence[Run],
    head_runs: Sequence[Run],
    *,
    base: str,
    head: str,
    settings: RegressionSettings,
    floor: float | None,
) -> Change:
    """The change of one subject from ``base_runs`` to ``head_runs`` (see the module docstring)."""
    base_samples = [x for r in base_runs for x in r.samples]
    head_samples = [x for r in head_runs for x in r.samples]
    seed = (
        int(stable_id({"key": series.subject.key, "variant": series.subject.variant, "base": base, "head": head}), 16)
        % 2**32
    )
    estimate, low, high = bootstrap_log_ratio(base_samples, head_samples, settings.confidence, settings.resamples, seed)
    pooled = _pooled_noise([base_runs, head_runs])
    own, dof = pooled if pooled is not None else (None, None)
    noise = max(x for x in (own, floor) if x is not None) if own is not None or floor is not None else None
    if noise:
        estimated = own is not None and (floor is None or own >= floor)  # the subject's own few runs decide
        z = _quantile(settings.confidence, dof if estimated else None)
        widen = z * noise * math.sqrt(1 / len(base_runs) + 1 / len(head_runs))
        low, high = low - widen, high + widen
    ratio = math.exp(estimate)
    # A run the harness flagged as disturbed (the host's speed changed under it) is no evidence
    # of a change in the software: such a change is reported, never flagged, until measured again.
    disturbed = any(r.disturbed for r in (*base_runs, *head_runs))
    significant = (low > 0 or high < 0) and abs(ratio - 1) >= settings.threshold and not disturbed
    direction = UNCHANGED if not significant else (REGRESSION if ratio > 1 else IMPROVEMENT)
    return Change(
        subject=series.subject,
        label=series.label,
        base=base,
        head=head,
        base_ms=median(base_samples) * 1e3,
        head_ms=median(head_samples) * 1e3,
        ratio=ratio,
        low=math.exp(low),
        high=math.exp(high),
        base_runs=len(base_runs),
        head_runs=len(head_runs),
        noise=noise,
        significant=significant,
        direction=direction,
        disturbed=disturbed,
    )


def _ordered(changes: Iterable[Change]) -> tuple[Change, ...]:
    return tuple(sorted(changes, key=lambda c: (not c.significant, -abs(math.log(c.ratio)), c.subject)))


# -- stacks ----------------------------------------------------------------------------------


def stack_diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[StackDelta, ...]:
    """The entries of two stack fingerprints that differ, nested mappings as dotted paths."""

    def flat(doc: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in doc.items():
            if isinstance(v, Mapping):
                out.update(flat(v, f"{prefix}{k}."))
            else:
                out[f"{prefix}{k}"] = v
        return out

    a, b = flat(before or {}), flat(after or {})
    return tuple(StackDelta(p, a.get(p), b.get(p)) for p in sorted(set(a) | set(b)) if a.get(p) != b.get(p))


def compare_stacks(
    system: str,
    records: Iterable[BenchmarkRecord],
    *,
    base: str,
    head: str,
    stacks: Mapping[str, Mapping[str, Any]],
    models: Sequence[ModelUnits] = (),
    settings: RegressionSettings = DEFAULT_SETTINGS,
) -> RegressionReport:
    """One system's ``head`` stack against its ``base`` stack.

    Args:
        records: the system's current records and repeats of both stacks (others are ignored).
        stacks: stack id -> its fingerprint (``Store.stacks``), for the stack diff.
        models: the models whose changes are attributed to their units.
    """
    records = [r for r in records if r.system == system and r.stack_id in (base, head)]
    series = series_of(records, settings.min_samples)
    floor = system_noise(series.values(), (base, head))
    changes = []
    for s in series.values():
        before, after = s.on(base), s.on(head)
        if before and after:
            changes.append(compare_runs(s, before, after, base=base, head=head, settings=settings, floor=floor))
    notes = _short_runs(records, settings.min_samples) + _disturbed(changes, settings.threshold)
    if floor is None:
        notes.append("no repeats on either stack: intervals hold the within-run noise only (run again to learn more)")
    ordered = _ordered(changes)
    return RegressionReport(
        system=system,
        mode="stacks",
        base=base,
        head=head,
        stack_diff=stack_diff(stacks.get(base, {}), stacks.get(head, {})),
        changes=ordered,
        models=attribute(ordered, models, settings.threshold),
        settings=settings,
        notes=tuple(notes),
    )


# -- history ---------------------------------------------------------------------------------


def change_point(log_medians: Sequence[float], min_noise: float) -> int | None:
    """The last change point of a series (index of the first run after it), or None; ruptures' Pelt."""
    import ruptures  # imported when used, like scipy.stats (it imports scipy)

    n = len(log_medians)
    if n < 3:
        return None
    signal = np.asarray(log_medians, dtype=float).reshape(-1, 1)
    sigma = float(np.median(np.abs(np.diff(signal[:, 0])))) / (math.sqrt(2) * 0.6745)
    sigma = max(sigma, min_noise)
    breaks = ruptures.Pelt(model="l2", min_size=1, jump=1).fit(signal).predict(pen=2 * math.log(n) * sigma**2)
    inner = [b for b in breaks if b < n]
    return inner[-1] if inner else None


CONFIRMING_RUNS = 2  # runs after a step in a history before it is flagged


def history_changes(
    system: str,
    stack_id: str,
    records: Iterable[BenchmarkRecord],
    *,
    models: Sequence[ModelUnits] = (),
    settings: RegressionSettings = DEFAULT_SETTINGS,
) -> RegressionReport:
    """One stack's runs over time: per subject, the change across its last change point.

    A subject without a change point (or with fewer than three runs) is compared last run
    against the runs before it, and is flagged only if that passes the same test. A step
    needs ``CONFIRMING_RUNS`` runs after it to be flagged: one run alone after a step cannot be
    told from one disturbed run (on an unchanged stack, most flags were such a last run), so it
    is reported as waiting for the next run, which confirms or dismisses it.
    """
    records = [r for r in records if r.system == system and r.stack_id == stack_id]
    series = series_of(records, settings.min_samples)
    floor = system_noise(series.values(), (stack_id,))
    changes, points = [], {}
    unconfirmed = 0
    for s in series.values():
        runs = s.runs
        if len(runs) < 2:
            continue
        cut = change_point([math.log(r.median_s) for r in runs], settings.min_noise)
        found = cut is not None
        waiting = found and len(runs) - cut < CONFIRMING_RUNS
        found = found and not waiting
        cut = cut if found else len(runs) - 1
        change = compare_runs(
            s,
            runs[:cut],
            runs[cut:],
            base=f"runs 1-{cut}",
            head=f"runs {cut + 1}-{len(runs)}",
            settings=settings,
            floor=floor,
        )
        if found:
            points[s.subject.key] = cut
        elif change.significant and (waiting or len(runs) >= 3):  # a lone outlier run is not a step
            change = _unflagged(change)
            unconfirmed += waiting
        changes.append(change)
    ordered = _ordered(changes)
    notes = _short_runs(records, settings.min_samples) + _disturbed(changes, settings.threshold)
    if unconfirmed:
        notes.append(
            f"{unconfirmed} step(s) at the latest run wait for one more run to confirm them "
            "(benanza bench run --repeat)"
        )
    if floor is None:
        notes.append("no subject has two runs on this stack: no history to compare")
    return RegressionReport(
        system=system,
        mode="history",
        base=stack_id,
        head=stack_id,
        stack_diff=(),
        changes=ordered,
        models=attribute(ordered, models, settings.threshold),
        settings=settings,
        notes=tuple(notes),
        change_points=points,
    )


def _disturbed(changes: Sequence[Change], threshold: float) -> list[str]:
    """The note saying how many changes past the threshold were not flagged for a disturbed run."""
    held = sum(1 for c in changes if c.disturbed and abs(c.ratio - 1) >= threshold)
    if not held:
        return []
    return [
        f"{held} change(s) past the threshold were measured while the host was disturbed and are not flagged: "
        "measure them again (benanza bench run --repeat)"
    ]


def _short_runs(records: Sequence[BenchmarkRecord], min_samples: int) -> list[str]:
    """The note saying how many ok runs were left out for having too few samples."""
    short = sum(1 for r in records if r.outcome == Outcome.OK and r.samples and len(r.samples) < min_samples)
    return [f"{short} runs with fewer than {min_samples} samples left out"] if short else []


def _unflagged(change: Change) -> Change:
    return replace(change, significant=False, direction=UNCHANGED)


# -- attribution -----------------------------------------------------------------------------


def attribute(
    changes: Sequence[Change], models: Sequence[ModelUnits], threshold: float = DEFAULT_SETTINGS.threshold
) -> tuple[ModelChange, ...]:
    """Each model's change with its units' shares; models with no figure on both sides are left out."""
    by_subject: dict[tuple[str, str, int, str], Change] = {}
    for c in changes:
        by_subject[(c.subject.runtime, c.subject.variant, c.subject.batch_size, c.subject.key)] = c
    variants = sorted({(c.subject.runtime, c.subject.variant) for c in changes})
    out = []
    for m in models:
        for runtime, variant in variants:
            e2e = by_subject.get((runtime, variant, m.batch_size, m.model_key))
            unit_changes = [
                (key, count, by_subject.get((runtime, variant, m.batch_size, key))) for key, count in m.units
            ]
            known = [(key, count, c) for key, count, c in unit_changes if c is not None]
            if e2e is None and not known:
                continue
            missing = len(unit_changes) - len(known)
            if e2e is not None:
                figure, base_ms, head_ms = "e2e", e2e.base_ms, e2e.head_ms
            else:  # a unit's change within its noise is taken as no change: its point estimate is noise
                figure = "sum of units"
                base_ms = sum(count * c.base_ms for _, count, c in known)
                head_ms = base_ms + sum(count * c.delta_ms for _, count, c in known if c.significant)
            total = head_ms - base_ms
            shares = [
                UnitShare(
                    key=key,
                    label=c.label,
                    count=count,
                    delta_ms=count * c.delta_ms,
                    share=(count * c.delta_ms / total) if total else 0.0,
                    significant=c.significant,
                    direction=c.direction,
                )
                for key, count, c in known
            ]
            sign = 1 if total >= 0 else -1
            shares.sort(key=lambda u: (-sign * u.delta_ms, u.key))
            out.append(
                ModelChange(
                    model=m.model,
                    model_key=m.model_key,
                    batch_size=m.batch_size,
                    runtime=runtime,
                    variant=variant,
                    figure=figure,
                    base_ms=base_ms,
                    head_ms=head_ms,
                    change=e2e,
                    units=tuple(shares),
                    missing_units=missing,
                    threshold=threshold,
                )
            )
    return tuple(sorted(out, key=lambda m: (not m.significant, -abs(m.ratio - 1), m.model)))
