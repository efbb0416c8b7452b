"""Statistics of timing samples, derived from the raw samples and nothing else.

Pure functions over sequences of floats (seconds per call): the harness stores raw samples
and everything here can be recomputed from them. The point statistics follow
``numpy.percentile`` (linear interpolation) and ``scipy.stats.trim_mean`` and the tests
check that they agree with those libraries.

Every statistic a figure is made of carries a 95% confidence interval (``Interval``):

- the trimmed mean: Tukey and McLaughlin's, ``trimmed mean +- t(n - 2g - 1) * se`` with the
  standard error from the winsorized samples, as ``scipy.stats.mstats.trimmed_mean_ci``
  (truncating the cut, like ``trim_mean``);
- a percentile (the median, the 10th percentile): distribution-free, from the order
  statistics whose ranks the binomial distribution gives (the count of samples below the
  true percentile is Binomial(n, q)); where the samples are too few for a rank on a side,
  that side is the sample's extreme (an honest figure cannot be narrower than the data);
- a sum of figures measured apart (a lower bound, a composition): ``sum_intervals``, the
  distances to each side added in quadrature (independent errors).

The quantiles come from ``scipy.special`` (``stdtrit``, ``bdtr``): ``scipy.stats`` costs half
a second to import, and every command imports this module.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, TypeVar

import numpy as np
from scipy.special import bdtr, stdtrit

T = TypeVar("T")

TRIM_PROPORTION = 0.2  # DLBricks' trimmed mean: cut 20% of the samples from each end
CONFIDENCE = 0.95  # of every interval benanza stores and prints
# the statistics whose interval ``describe`` stores, as ``<name>_low`` and ``<name>_high``
INTERVAL_STATISTICS = ("trimmed_mean", "median", "p10")


@dataclass(frozen=True, slots=True)
class SampleStats:
    """Summary of one benchmark's samples (all values in the samples' unit).

    ``rel_noise`` is the coefficient of variation (stdev / mean); ``rel_stderr`` is the
    relative standard error of the mean (stdev / sqrt(n) / mean), which the harness drives
    below its target before it stops. ``<statistic>_low`` and ``<statistic>_high`` bound the
    ``CONFIDENCE`` interval of each statistic in ``INTERVAL_STATISTICS``; statistics stored
    before intervals existed have ``None`` there (unknown, see ``interval_of``).
    """

    n: int
    mean: float
    median: float
    trimmed_mean: float
    min: float
    max: float
    p10: float
    p90: float
    stdev: float
    rel_noise: float
    rel_stderr: float
    trimmed_mean_low: float | None = None
    trimmed_mean_high: float | None = None
    median_low: float | None = None
    median_high: float | None = None
    p10_low: float | None = None
    p10_high: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SampleStats:
        values = {f.name: data.get(f.name) for f in fields(cls)}
        return cls(**{name: v if v is None else int(v) if name == "n" else float(v) for name, v in values.items()})

    def statistic(self, name: str) -> float | None:
        """The statistic called ``name`` (``"median"``, ``"p10"``, ``"p10_low"``...); None where none is held.

        Raises:
            ValueError: ``name`` is no statistic of ``SampleStats``.
        """
        if name not in SAMPLE_STATISTICS:
            raise ValueError(f"unknown statistic {name!r}; known: {', '.join(SAMPLE_STATISTICS)}")
        return getattr(self, name)

    def to_doc(self) -> dict[str, Any]:
        """The stored document: every statistic held, in field order (one not held is left out, not null)."""
        return {name: value for name in SAMPLE_STATISTICS if (value := getattr(self, name)) is not None}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> SampleStats:
        """A stored document (any written so far): values as stored, so ``to_doc`` gives the same document.

        A statistic the document lacks is None: statistics stored before intervals existed
        have no ``<statistic>_low``; a hand-written record may hold only a few.
        """
        return assembled(cls, _SAMPLE_SETTERS if cls is SampleStats else slot_setters(cls), doc)


SAMPLE_STATISTICS = tuple(f.name for f in fields(SampleStats))  # in the order documents hold them


def slot_setters(cls: type) -> tuple[tuple[str, Callable[[Any, Any], None]], ...]:
    """Each field of a frozen slots dataclass with the setter of its slot (see ``assembled``)."""
    return tuple((f.name, getattr(cls, f.name).__set__) for f in fields(cls))


def assembled(cls: type[T], setters: Iterable[tuple[str, Callable[[Any, Any], None]]], values: Mapping[str, Any]) -> T:
    """A value of ``cls`` holding ``values`` (None where one is missing), built slot by slot.

    Equal to ``cls(**values)`` where that would not fail, and a third of its time: a frozen
    dataclass's ``__init__`` makes a call per field, and a store reads every record's
    statistics (tens of thousands). Only for documents read back, never to skip a check.
    """
    value = object.__new__(cls)
    get = values.get
    for name, set_slot in setters:
        set_slot(value, get(name))
    return value


_SAMPLE_SETTERS = slot_setters(SampleStats)


@dataclass(frozen=True, slots=True)
class Interval:
    """A statistic's value and its ``CONFIDENCE`` interval, ``low <= value <= high``."""

    value: float
    low: float
    high: float

    @classmethod
    def point(cls, value: float) -> Interval:
        """A figure whose uncertainty is not known: an interval of no width."""
        return cls(value, value, value)

    @property
    def half_width(self) -> float:
        """The ``+-`` a table prints: half the interval's width."""
        return (self.high - self.low) / 2

    def scaled(self, factor: float) -> Interval:
        """The same interval in another unit, or times a count; a negative ``factor`` swaps its ends."""
        if factor < 0:
            return Interval(self.value * factor, self.high * factor, self.low * factor)
        return Interval(self.value * factor, self.low * factor, self.high * factor)

    def above(self, other: Interval) -> bool:
        """Whether this figure is larger than ``other`` beyond the noise of both: the intervals are apart."""
        return self.low > other.high

    def to_dict(self) -> dict[str, float]:
        return {"value": self.value, "low": self.low, "high": self.high}


def trimmed_mean_interval(
    samples: Sequence[float], proportion: float = TRIM_PROPORTION, confidence: float = CONFIDENCE
) -> Interval:
    """The trimmed mean and its Tukey-McLaughlin interval (``scipy.stats.mstats.trimmed_mean_ci``).

    Fewer than three samples leave no degree of freedom: the interval is the samples' range.
    """
    ordered = sorted(float(x) for x in samples)
    return _trimmed_interval_sorted(ordered, proportion, confidence)


def _trimmed_interval_sorted(ordered: Sequence[float], proportion: float, confidence: float) -> Interval:
    n = len(ordered)
    value = trimmed_mean_sorted(ordered, proportion)
    df = n - 2 * int(proportion * n) - 1
    if df < 1:
        return Interval(value, ordered[0], ordered[-1])
    half = float(stdtrit(df, 1 - (1 - confidence) / 2)) * trimmed_stderr_sorted(ordered, proportion)
    return Interval(value, value - half, value + half)


def mean_interval(samples: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The mean and its Student-t interval, ``mean +- t(n - 1) * stdev / sqrt(n)``.

    Fewer than two samples: the interval is the samples' range.
    """
    values = [float(x) for x in samples]
    n = len(values)
    if n == 0:
        raise ValueError("mean of no values")
    mean = math.fsum(values) / n
    if n < 2:
        return Interval(mean, mean, mean)
    stdev = math.sqrt(math.fsum((x - mean) ** 2 for x in values) / (n - 1))
    half = float(stdtrit(n - 1, 1 - (1 - confidence) / 2)) * stdev / math.sqrt(n)
    return Interval(mean, mean - half, mean + half)


def percentile_interval(samples: Sequence[float], q: float, confidence: float = CONFIDENCE) -> Interval:
    """The ``q``-th percentile (0-100) and its distribution-free order-statistic interval.

    The number of samples below the true percentile is Binomial(n, q/100): the interval runs
    from the order statistic of rank ``l`` to that of rank ``u`` (1-based) where ``l`` is the
    binomial's ``(1 - confidence) / 2`` quantile and ``u - 1`` its ``(1 + confidence) / 2``
    quantile, as ``scipy.stats.binom.ppf`` gives them. A rank outside 1..n is clipped to
    the sample's extreme.
    """
    ordered = sorted(float(x) for x in samples)
    return _percentile_interval_sorted(ordered, q, confidence)


def _percentile_interval_sorted(ordered: Sequence[float], q: float, confidence: float) -> Interval:
    n = len(ordered)
    value = percentile_sorted(ordered, q)
    tail = (1 - confidence) / 2
    cdf = bdtr(np.arange(n + 1), n, q / 100.0)  # P(B <= k), k = 0..n
    lower_rank = int(np.searchsorted(cdf, tail * (1 - 1e-12)))  # the smallest k with cdf >= tail
    upper_rank = int(np.searchsorted(cdf, (1 - tail) * (1 - 1e-12))) + 1
    low = ordered[lower_rank - 1] if lower_rank >= 1 else ordered[0]
    high = ordered[upper_rank - 1] if upper_rank <= n else ordered[-1]
    return Interval(value, min(low, value), max(high, value))


def sum_intervals(intervals: Iterable[Interval]) -> Interval:
    """The sum of independently measured figures: distances to each side added in quadrature."""
    value = below = above = 0.0
    for i in intervals:
        value += i.value
        below += (i.value - i.low) ** 2
        above += (i.high - i.value) ** 2
    return Interval(value, value - math.sqrt(below), value + math.sqrt(above))


def interval_of(stats: SampleStats | None, statistic: str, samples: Sequence[float] = ()) -> Interval | None:
    """A stored statistic with its interval: from ``stats``, else derived from the raw ``samples``.

    Records stored before intervals existed hold no ``<statistic>_low``; their samples give
    it. With neither, the figure is a point (unknown uncertainty); without the statistic, None.
    """
    stored = stats.statistic(statistic) if stats is not None else None
    if stored is None:
        return None
    value = float(stored)
    low = high = None
    if statistic in INTERVAL_STATISTICS:
        low, high = stats.statistic(f"{statistic}_low"), stats.statistic(f"{statistic}_high")
    if low is not None and high is not None:
        return Interval(value, float(low), float(high))
    if samples:
        derived = statistic_interval(samples, statistic)
        if derived is not None:
            return Interval(value, min(derived.low, value), max(derived.high, value))
    return Interval.point(value)


def statistic_interval(samples: Sequence[float], statistic: str, confidence: float = CONFIDENCE) -> Interval | None:
    """The interval of one named statistic of ``samples`` (None for one without an interval)."""
    ordered = sorted(float(x) for x in samples)
    if not ordered:
        return None
    if statistic == "trimmed_mean":
        return _trimmed_interval_sorted(ordered, TRIM_PROPORTION, confidence)
    percentiles = {"median": 50.0, "p10": 10.0, "p90": 90.0}
    if statistic in percentiles:
        return _percentile_interval_sorted(ordered, percentiles[statistic], confidence)
    return None


def describe(samples: Sequence[float]) -> SampleStats:
    """Every statistic of ``samples``; an empty sequence is a ``ValueError``."""
    ordered = sorted(float(x) for x in samples)
    n = len(ordered)
    if n == 0:
        raise ValueError("describe() needs at least one sample")
    mean = math.fsum(ordered) / n
    stdev = math.sqrt(math.fsum((x - mean) ** 2 for x in ordered) / (n - 1)) if n > 1 else 0.0
    rel_noise = _relative(stdev, mean)
    trimmed = _trimmed_interval_sorted(ordered, TRIM_PROPORTION, CONFIDENCE)
    median = _percentile_interval_sorted(ordered, 50.0, CONFIDENCE)
    p10 = _percentile_interval_sorted(ordered, 10.0, CONFIDENCE)
    return SampleStats(
        n=n,
        mean=mean,
        median=percentile_sorted(ordered, 50.0),
        trimmed_mean=trimmed_mean_sorted(ordered, TRIM_PROPORTION),
        min=ordered[0],
        max=ordered[-1],
        p10=percentile_sorted(ordered, 10.0),
        p90=percentile_sorted(ordered, 90.0),
        stdev=stdev,
        rel_noise=rel_noise,
        rel_stderr=rel_noise / math.sqrt(n),
        trimmed_mean_low=trimmed.low,
        trimmed_mean_high=trimmed.high,
        median_low=median.low,
        median_high=median.high,
        p10_low=p10.low,
        p10_high=p10.high,
    )


def percentile_sorted(ordered: Sequence[float], q: float) -> float:
    """The ``q``-th percentile of sorted values, interpolated like ``numpy.percentile``."""
    if not ordered:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile {q} is outside [0, 100]")
    position = q / 100.0 * (len(ordered) - 1)
    lo = math.floor(position)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (position - lo)


def trimmed_mean_sorted(ordered: Sequence[float], proportion: float) -> float:
    """Mean after cutting ``int(proportion * n)`` values from each end, as ``scipy.stats.trim_mean``."""
    if not ordered:
        raise ValueError("trimmed mean of no values")
    if not 0.0 <= proportion < 0.5:
        raise ValueError(f"trim proportion {proportion} is outside [0, 0.5)")
    cut = int(proportion * len(ordered))
    kept = ordered[cut : len(ordered) - cut]
    return math.fsum(kept) / len(kept)


def trimmed_stderr_sorted(ordered: Sequence[float], proportion: float = TRIM_PROPORTION) -> float:
    """Standard error of the trimmed mean (Tukey-McLaughlin), as ``scipy.stats.mstats.trimmed_stde``.

    The winsorized sample's standard deviation over ``(1 - 2 * proportion) * sqrt(n)``:
    robust to the rare long stalls of a shared machine that inflate the plain standard error.
    """
    n = len(ordered)
    if n < 2:
        return math.inf
    cut = int(proportion * n)
    low, high = ordered[cut], ordered[n - cut - 1]
    wins = [min(max(x, low), high) for x in ordered]
    mean = math.fsum(wins) / n
    var = math.fsum((x - mean) ** 2 for x in wins) / (n - 1)
    return math.sqrt(var) / ((1 - 2 * proportion) * math.sqrt(n))


def geomean(values: Iterable[float]) -> float:
    """Geometric mean of positive values: the right average of speed-ups and ratios."""
    logs = []
    for v in values:
        if not v > 0:
            raise ValueError(f"geomean needs positive values, got {v!r}")
        logs.append(math.log(v))
    if not logs:
        raise ValueError("geomean of no values")
    return math.exp(math.fsum(logs) / len(logs))


def _relative(spread: float, center: float) -> float:
    # a zero mean with spread has no finite relative noise; a constant zero has none at all
    if center == 0.0:
        return 0.0 if spread == 0.0 else math.inf
    return spread / abs(center)
