"""Statistics of timing samples, derived from the raw samples and nothing else.

Pure functions over sequences of floats (seconds per call): the harness stores raw samples
and everything here can be recomputed from them. No numpy or scipy: the definitions follow
``numpy.percentile`` (linear interpolation) and ``scipy.stats.trim_mean`` so that results
agree with those libraries, and the tests check that they do.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

TRIM_PROPORTION = 0.2  # DLBricks' trimmed mean: cut 20% of the samples from each end


@dataclass(frozen=True, slots=True)
class SampleStats:
    """Summary of one benchmark's samples (all values in the samples' unit).

    ``rel_noise`` is the coefficient of variation (stdev / mean); ``rel_stderr`` is the
    relative standard error of the mean (stdev / sqrt(n) / mean), which the harness drives
    below its target before it stops.
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SampleStats:
        values = {f.name: data[f.name] for f in fields(cls)}
        return cls(**{name: int(v) if name == "n" else float(v) for name, v in values.items()})


def describe(samples: Sequence[float]) -> SampleStats:
    """Every statistic of ``samples``; an empty sequence is a ``ValueError``."""
    ordered = sorted(float(x) for x in samples)
    n = len(ordered)
    if n == 0:
        raise ValueError("describe() needs at least one sample")
    mean = math.fsum(ordered) / n
    stdev = math.sqrt(math.fsum((x - mean) ** 2 for x in ordered) / (n - 1)) if n > 1 else 0.0
    rel_noise = _relative(stdev, mean)
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
