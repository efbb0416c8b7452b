"""Confidence intervals of the statistics (issue 16): against scipy, by coverage, and summed."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps
from scipy.stats import mstats

from benanza.bench.stats import (
    Interval,
    SampleStats,
    describe,
    interval_of,
    mean_interval,
    percentile_interval,
    statistic_interval,
    sum_intervals,
    trimmed_mean_interval,
)


@pytest.mark.parametrize("n", [3, 7, 10, 33, 200])
def test_trimmed_interval_matches_scipy_trimmed_mean_ci(n: int) -> None:
    values = np.random.default_rng(n).lognormal(0.0, 0.4, n)
    got = trimmed_mean_interval(values.tolist())
    # scipy's default inclusive=(True, True) truncates the cut, as trim_mean (and benanza) do
    low, high = mstats.trimmed_mean_ci(values, limits=(0.2, 0.2), alpha=0.05)
    assert got.value == pytest.approx(sps.trim_mean(values, 0.2))
    assert (got.low, got.high) == (pytest.approx(low), pytest.approx(high))


@pytest.mark.parametrize("n", [2, 5, 40])
def test_mean_interval_matches_scipy_t_interval(n: int) -> None:
    values = np.random.default_rng(n).normal(10.0, 2.0, n)
    got = mean_interval(values.tolist())
    low, high = sps.t.interval(0.95, n - 1, loc=values.mean(), scale=sps.sem(values))
    assert (got.value, got.low, got.high) == (pytest.approx(values.mean()), pytest.approx(low), pytest.approx(high))
    assert mean_interval([3.0]) == Interval(3.0, 3.0, 3.0)


def test_trimmed_interval_of_too_few_samples_is_their_range() -> None:
    assert trimmed_mean_interval([2.0]) == Interval(2.0, 2.0, 2.0)
    # two samples: one degree of freedom, t = 12.7; wider than the samples themselves
    two = trimmed_mean_interval([1.0, 3.0])
    assert two.low < 1.0 < 3.0 < two.high


@pytest.mark.parametrize(("n", "q"), [(20, 10.0), (50, 50.0), (101, 10.0), (1000, 10.0), (37, 90.0)])
def test_percentile_interval_ranks_from_the_binomial(n: int, q: float) -> None:
    values = np.random.default_rng(n).exponential(1.0, n)
    ordered = np.sort(values)
    got = percentile_interval(values.tolist(), q)
    lower_rank = int(sps.binom.ppf(0.025, n, q / 100))  # 1-based ranks
    upper_rank = int(sps.binom.ppf(0.975, n, q / 100)) + 1
    low = ordered[lower_rank - 1] if lower_rank >= 1 else ordered[0]
    high = ordered[upper_rank - 1] if upper_rank <= n else ordered[-1]
    assert got.value == pytest.approx(np.percentile(values, q))
    assert got.low == pytest.approx(min(low, got.value))
    assert got.high == pytest.approx(max(high, got.value))
    # the binomial mass between the ranks is the coverage: at least the confidence asked for
    # where the ranks are inside the sample
    if lower_rank >= 1 and upper_rank <= n:
        covered = sps.binom.cdf(upper_rank - 1, n, q / 100) - sps.binom.cdf(lower_rank - 1, n, q / 100)
        assert covered >= 0.95


def test_intervals_cover_the_true_statistic_about_95_percent_of_the_time() -> None:
    # lognormal "latencies": true median exp(0); true 10th percentile exp(0.3 * z_0.1)
    rng = np.random.default_rng(16)
    true_median, true_p10 = 1.0, math.exp(0.3 * sps.norm.ppf(0.1))
    true_trimmed = sps.trim_mean(rng.lognormal(0.0, 0.3, 2_000_000), 0.2)
    hits = {"median": 0, "p10": 0, "trimmed_mean": 0}
    trials = 400
    for _ in range(trials):
        sample = rng.lognormal(0.0, 0.3, 60).tolist()
        for name, truth in (("median", true_median), ("p10", true_p10), ("trimmed_mean", true_trimmed)):
            i = statistic_interval(sample, name)
            hits[name] += i.low <= truth <= i.high
    for name, count in hits.items():
        assert 0.92 <= count / trials <= 0.995, (name, count / trials)


def test_describe_stores_the_intervals_and_old_stats_read_as_unknown() -> None:
    values = [1.0, 1.1, 0.9, 1.05, 1.2, 0.95, 1.0, 3.0, 1.02, 0.98]
    s = describe(values)
    assert s.trimmed_mean_low < s.trimmed_mean < s.trimmed_mean_high
    assert s.median_low <= s.median <= s.median_high
    assert s.p10_low <= s.p10 <= s.p10_high
    assert SampleStats.from_dict(s.to_dict()) == s
    old = {k: v for k, v in s.to_dict().items() if not k.endswith(("_low", "_high"))}
    restored = SampleStats.from_dict(old)
    assert restored.trimmed_mean_low is None and restored.trimmed_mean == s.trimmed_mean


def test_interval_of_reads_stats_else_derives_from_samples_else_a_point() -> None:
    values = [float(x) for x in range(1, 31)]
    stored = describe(values)
    from_stats = interval_of(stored, "trimmed_mean")
    assert from_stats == Interval(stored.trimmed_mean, stored.trimmed_mean_low, stored.trimmed_mean_high)
    old = SampleStats.from_doc({"trimmed_mean": stored.trimmed_mean, "p10": stored.p10})
    assert interval_of(old, "trimmed_mean", values) == from_stats
    assert interval_of(old, "p10", values) == percentile_interval(values, 10.0)
    assert interval_of(old, "trimmed_mean") == Interval.point(stored.trimmed_mean)
    assert interval_of(old, "median") is None
    assert interval_of(stored, "p90") == Interval.point(stored.p90)  # a statistic stored without an interval
    assert interval_of(None, "median") is None


def test_sum_adds_distances_in_quadrature() -> None:
    total = sum_intervals([Interval(10.0, 9.0, 12.0), Interval(5.0, 1.0, 5.0), Interval.point(1.0)])
    assert total.value == 16.0
    assert total.low == pytest.approx(16.0 - math.sqrt(1 + 16))
    assert total.high == pytest.approx(16.0 + math.sqrt(4 + 0))
    assert sum_intervals([]) == Interval.point(0.0)


def test_sum_of_independent_means_covers_like_its_parts() -> None:
    # ten units measured apart; the interval of the sum of their trimmed means covers the true sum
    rng = np.random.default_rng(3)
    truth = sum(sps.trim_mean(rng.normal(mu, 0.1 * mu, 1_000_000), 0.2) for mu in range(1, 11))
    hits, trials = 0, 300
    for _ in range(trials):
        parts = [trimmed_mean_interval(rng.normal(mu, 0.1 * mu, 40).tolist()) for mu in range(1, 11)]
        total = sum_intervals(parts)
        hits += total.low <= truth <= total.high
    assert 0.92 <= hits / trials <= 0.995


def test_above_needs_the_intervals_apart() -> None:
    e2e = Interval(10.0, 9.8, 10.2)
    assert not Interval(10.3, 10.1, 10.5).above(e2e)  # higher, within the noise of both
    assert Interval(10.6, 10.3, 10.9).above(e2e)
    assert Interval(10.6, 10.3, 10.9).half_width == pytest.approx(0.3)
    assert Interval(2.0, 1.0, 3.0).scaled(1e3) == Interval(2000.0, 1000.0, 3000.0)
