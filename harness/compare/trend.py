"""Is a metric drifting over the nights, or only noisy? The Mann-Kendall trend test and Sen's slope.

Mann-Kendall rather than a least-squares slope with its t-test: it ranks, so one odd night
(a noisy neighbour, a slow disk) moves it as much as any other night and no more, it assumes
no distribution of the nightly figures, and it handles ties (counts that stay at 0 for a
week). Its statistic S counts, over every pair of nights, the later night higher (+1) or
lower (-1); under "no trend" S is near 0 with the variance n(n-1)(2n+5)/18, less a term for
each group of tied values. The p-value is one-sided, in the direction that is worse for the
metric, from the normal approximation with a continuity correction, as the references
compute it (Kendall 1975; Gilbert 1987, section 16.4). Sen's slope, the median of the slopes
between every pair of nights, sizes the drift the test found real, again unmoved by one odd
night.

Written here rather than taken from scipy, as `harness.compare.stats` is: a few lines of
arithmetic, and scipy stays a test dependency (the tests check S and the p-value against
`scipy.stats.kendalltau`, of which Mann-Kendall is the test of a series against its order).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

MIN_NIGHTS = 6
"""The fewest nights `mrtr-harness history` judges: with fewer, even a rise every night is not significant at 0.01
(the smallest one-sided p of five values is 0.014)."""


@dataclass(frozen=True)
class Trend:
    """A series' trend: the Mann-Kendall statistic and one-sided p-value, and the Sen line fitted to it."""

    s: int
    """Pairs of nights where the later one is higher, less those where it is lower."""
    variance: float
    """The variance of S under "no trend", tie-corrected."""
    p_value: float
    """One-sided: the chance of an S at least this far in the asked direction if there were no trend."""
    slope: float
    """Sen's slope: the median change per night."""
    start: float
    """The Sen line's value at the first night (the median of each night's value less its slope times its index)."""


def mann_kendall(values: Sequence[float], *, increasing: bool = True) -> Trend:
    """The trend of `values` (one per night, oldest first); `increasing`: the p-value of an upward trend, else of a
    downward one. Fewer than 3 values, or all tied, show no trend: p = 1."""
    n = len(values)
    s = sum(_sign(values[j] - values[i]) for i in range(n) for j in range(i + 1, n))
    ties = sum(t * (t - 1) * (2 * t + 5) for t in Counter(values).values())
    variance = (n * (n - 1) * (2 * n + 5) - ties) / 18
    slope = sen_slope(values)
    start = statistics.median(value - slope * index for index, value in enumerate(values)) if n else 0.0
    if n < 3 or variance <= 0:
        return Trend(s, max(variance, 0.0), 1.0, slope, start)
    directed = s if increasing else -s
    z = (directed - 1) / math.sqrt(variance) if directed > 0 else (directed + 1) / math.sqrt(variance) \
        if directed < 0 else 0.0
    return Trend(s, variance, 0.5 * math.erfc(z / math.sqrt(2)), slope, start)


def sen_slope(values: Sequence[float]) -> float:
    """The median of (later - earlier) / (nights apart) over every pair of nights; 0 for fewer than two."""
    slopes = [(values[j] - values[i]) / (j - i) for i in range(len(values)) for j in range(i + 1, len(values))]
    return statistics.median(slopes) if slopes else 0.0


def _sign(difference: float) -> int:
    return (difference > 0) - (difference < 0)
