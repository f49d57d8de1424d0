"""Is a change real or nightly noise? The one-sided Mann-Whitney U test on two runs' samples.

Mann-Whitney U, not a bootstrap of the percentile difference: it is deterministic (no
random resampling, so the same two journals always give the same verdict), costs one
sort of both samples (a bootstrap of a 100,000-round run costs thousands of sorts), makes
no assumption about the latency distribution (long tails, bimodal retries) and handles
ties (rounds per call are small integers, completion is 0 or 1). It answers "are the
current run's values stochastically larger than the baseline's?", so it backs a
percentile verdict rather than testing that percentile alone: a change confined to the
far tail, with the bulk unmoved, can read as not significant.

Written here rather than taken from scipy: the normal approximation with tie and
continuity correction is twenty lines, and scipy would be a 35 MB runtime dependency for
it. The tests check it against `scipy.stats.mannwhitneyu` (a test dependency only).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class UTest:
    """The outcome of a one-sided test that `current` is larger than `baseline`."""

    u: float
    """U of the current sample: how many (baseline, current) pairs the current value wins (a tie counts half)."""
    p_value: float
    """One-sided: the chance of a U at least this large if both samples came from one distribution."""
    n_baseline: int
    n_current: int


def mann_whitney_greater(baseline: Sequence[float], current: Sequence[float]) -> UTest:
    """One-sided Mann-Whitney U test, H1: `current` tends to be larger than `baseline`.

    Normal approximation with the tie correction of the variance and a continuity
    correction, as `scipy.stats.mannwhitneyu(current, baseline, alternative="greater",
    method="asymptotic")` computes it. With no samples on a side, or all values tied,
    there is no evidence either way: p = 1.
    """
    n1, n2 = len(current), len(baseline)
    if n1 == 0 or n2 == 0:
        return UTest(0.0, 1.0, n2, n1)
    ranks, tie_term = _ranks([*current, *baseline])
    u = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    n = n1 + n2
    variance = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1)))
    if variance <= 0:
        return UTest(u, 1.0, n2, n1)
    z = (u - n1 * n2 / 2 - 0.5) / math.sqrt(variance)
    return UTest(u, _upper_tail(z), n2, n1)


def _ranks(values: Sequence[float]) -> tuple[list[float], float]:
    """Mid-ranks (1-based, ties share their mean rank) in input order, and the sum of t^3 - t over tie groups."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    tie_term = 0.0
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        mid_rank = (start + end) / 2 + 1
        for index in order[start:end + 1]:
            ranks[index] = mid_rank
        tied = end - start + 1
        tie_term += tied ** 3 - tied
        start = end + 1
    return ranks, tie_term


def _upper_tail(z: float) -> float:
    """P(Z >= z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2))
