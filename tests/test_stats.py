"""Sample statistics against hand-computed values, then against numpy and scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benanza.bench.stats import SampleStats, describe, geomean, percentile_sorted, trimmed_mean_sorted

ONE_TO_TEN = [float(x) for x in range(1, 11)]
# one slow outlier among five, unsorted on purpose
OUTLIER = [12.0, 1000.0, 10.0, 13.0, 11.0]
# skewed, n=9: int(0.2 * 9) = 1 value is cut from each end (not 2)
SKEWED = [0.0, 30.0, 0.0, 0.0, 20.0, 0.0, 0.0, 10.0, 0.0]


def test_one_to_ten_by_hand() -> None:
    s = describe(ONE_TO_TEN)
    assert s.n == 10
    assert s.mean == pytest.approx(5.5)  # 55 / 10
    assert s.median == pytest.approx(5.5)  # (5 + 6) / 2
    # cut int(0.2 * 10) = 2 from each end: 3..8 -> 33 / 6
    assert s.trimmed_mean == pytest.approx(5.5)
    assert (s.min, s.max) == (1.0, 10.0)
    # position 0.1 * 9 = 0.9 between x[0]=1 and x[1]=2 -> 1.9
    assert s.p10 == pytest.approx(1.9)
    # position 0.9 * 9 = 8.1 between x[8]=9 and x[9]=10 -> 9.1
    assert s.p90 == pytest.approx(9.1)
    # squared deviations from 5.5: 2 * (0.25 + 2.25 + 6.25 + 12.25 + 20.25) = 82.5; / 9
    stdev = math.sqrt(82.5 / 9)  # 3.02765...
    assert s.stdev == pytest.approx(stdev)
    assert s.stdev == pytest.approx(3.0276503540974917)
    assert s.rel_noise == pytest.approx(stdev / 5.5)  # 0.55048...
    assert s.rel_stderr == pytest.approx(stdev / math.sqrt(10) / 5.5)  # 0.17408...
    assert s.rel_stderr == pytest.approx(0.17407765595569785)


def test_outlier_by_hand() -> None:
    s = describe(OUTLIER)  # sorted: 10, 11, 12, 13, 1000
    assert s.n == 5
    assert s.mean == pytest.approx(209.2)  # 1046 / 5
    assert s.median == 12.0
    # cut int(0.2 * 5) = 1 from each end: 11, 12, 13 -> 12; the outlier is gone
    assert s.trimmed_mean == pytest.approx(12.0)
    assert (s.min, s.max) == (10.0, 1000.0)
    assert s.p10 == pytest.approx(10.4)  # position 0.4: 10 + 0.4 * (11 - 10)
    assert s.p90 == pytest.approx(605.2)  # position 3.6: 13 + 0.6 * (1000 - 13)
    # deviations -199.2, -198.2, -197.2, -196.2, 790.8; squares sum to 781710.8; / 4
    stdev = math.sqrt(781710.8 / 4)  # 442.07...
    assert s.stdev == pytest.approx(stdev)
    assert s.rel_noise == pytest.approx(stdev / 209.2)
    assert s.rel_stderr == pytest.approx(stdev / math.sqrt(5) / 209.2)


def test_skewed_trim_cuts_int_of_proportion() -> None:
    # sorted: 0 x6, 10, 20, 30; cut 1 each end -> 0 x5, 10, 20 -> 30 / 7 (cutting 2 would give 2.0)
    assert describe(SKEWED).trimmed_mean == pytest.approx(30 / 7)
    assert trimmed_mean_sorted([1.0, 2.0, 3.0, 100.0], 0.2) == pytest.approx(26.5)  # n=4: nothing cut


@pytest.mark.parametrize(
    "values", [ONE_TO_TEN, OUTLIER, SKEWED, [3.5], [2.0, 7.0], list(np.random.default_rng(0).lognormal(size=37))]
)
def test_agrees_with_numpy(values: list[float]) -> None:
    s = describe(values)
    x = np.asarray(values, dtype=float)
    assert s.mean == pytest.approx(np.mean(x))
    assert s.median == pytest.approx(np.median(x))
    assert s.p10 == pytest.approx(np.percentile(x, 10))
    assert s.p90 == pytest.approx(np.percentile(x, 90))
    assert (s.min, s.max) == (np.min(x), np.max(x))
    assert s.stdev == pytest.approx(np.std(x, ddof=1) if len(x) > 1 else 0.0)
    cut = int(0.2 * len(x))
    assert s.trimmed_mean == pytest.approx(np.mean(np.sort(x)[cut : len(x) - cut]))


@pytest.mark.parametrize("values", [ONE_TO_TEN, OUTLIER, SKEWED, list(np.random.default_rng(1).lognormal(size=23))])
def test_trimmed_mean_agrees_with_scipy(values: list[float]) -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    assert describe(values).trimmed_mean == pytest.approx(scipy_stats.trim_mean(values, 0.2))


def test_single_sample() -> None:
    s = describe([4.0])
    assert s == SampleStats(
        n=1, mean=4.0, median=4.0, trimmed_mean=4.0, min=4.0, max=4.0, p10=4.0, p90=4.0,
        stdev=0.0, rel_noise=0.0, rel_stderr=0.0,
        # one sample: every interval is that sample (its range), never narrower than the data
        trimmed_mean_low=4.0, trimmed_mean_high=4.0, median_low=4.0, median_high=4.0, p10_low=4.0, p10_high=4.0,
    )  # fmt: skip


def test_empty_is_value_error() -> None:
    with pytest.raises(ValueError):
        describe([])
    with pytest.raises(ValueError):
        percentile_sorted([], 50)


def test_percentile_bounds() -> None:
    assert percentile_sorted([1.0, 2.0, 3.0], 0) == 1.0
    assert percentile_sorted([1.0, 2.0, 3.0], 100) == 3.0
    with pytest.raises(ValueError):
        percentile_sorted([1.0], 101)


def test_zero_mean_relative_noise() -> None:
    assert describe([0.0, 0.0]).rel_noise == 0.0
    assert describe([-1.0, 1.0]).rel_noise == math.inf


def test_round_trip_dict() -> None:
    s = describe(OUTLIER)
    assert SampleStats.from_dict(s.to_dict()) == s
    assert set(s.to_dict()) == {
        "n", "mean", "median", "trimmed_mean", "min", "max", "p10", "p90", "stdev", "rel_noise", "rel_stderr",
        "trimmed_mean_low", "trimmed_mean_high", "median_low", "median_high", "p10_low", "p10_high",
    }  # fmt: skip


def test_frozen() -> None:
    s = describe(ONE_TO_TEN)
    with pytest.raises(AttributeError):
        s.mean = 0.0  # type: ignore[misc]


def test_geomean() -> None:
    assert geomean([1.0, 4.0, 16.0]) == pytest.approx(4.0)  # cube root of 64
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean(iter([5.0])) == pytest.approx(5.0)
    for bad in ([], [1.0, 0.0], [2.0, -1.0]):
        with pytest.raises(ValueError):
            geomean(bad)


def test_trimmed_stderr_matches_scipy_and_ignores_stalls() -> None:
    from benanza.bench.stats import trimmed_stderr_sorted

    values = sorted([1.0, 1.1, 0.9, 1.05, 0.95, 1.02, 0.98, 50.0, 1.01, 0.99, 1.03, 0.97])
    mstats = pytest.importorskip("scipy.stats.mstats")
    assert trimmed_stderr_sorted(values, 0.2) == pytest.approx(float(mstats.trimmed_stde(values, limits=(0.2, 0.2))))
    # by hand: n=12, cut 2 each end -> winsorized to [0.97, 1.05]
    wins = [0.97, 0.97, 0.97, 0.98, 0.99, 1.0, 1.01, 1.02, 1.03, 1.05, 1.05, 1.05]
    m = sum(wins) / 12
    sd = (sum((x - m) ** 2 for x in wins) / 11) ** 0.5
    assert trimmed_stderr_sorted(values, 0.2) == pytest.approx(sd / (0.6 * 12**0.5))
    assert trimmed_stderr_sorted(values, 0.2) < 0.02 < describe(values).stdev / 12**0.5  # the stall does not count
    assert trimmed_stderr_sorted([1.0], 0.2) == float("inf")
