"""Is a change real or nightly noise? The one-sided Mann-Whitney U test on two runs' samples.

Mann-Whitney U, not a bootstrap of the percentile difference: it is deterministic (no
random resampling, so the same two journals always give the same verdict), costs one
sort of both samples (a bootstrap of a 100,000-round run costs thousands of sorts), makes
no assumption about the latency distribution (long tails, bimodal retries) and handles
ties (rounds per call are small integers, completion is 0 or 1). It answers "are the
current run's values stochastically larger than the baseline's?", so it backs a
percentile verdict rather than testing that percentile alone: a change confined to the
far tail, with the bulk unmoved, can read as not significant.

`compare` runs it over the runs' figures, not their raw samples: each value with how
many samples had it (`mann_whitney_greater_counted`). Rounds per call and completion are
counted exactly, so the test is the exact one; round latencies come from sketches, whose
bins are 2% wide, so samples in one bin count as tied (docs/figures.md): the test is exact
over the bins, ties included, and its cost is one pass over the distinct bins, whatever
the number of rounds.

Written here rather than taken from scipy: the normal approximation with tie and
continuity correction is twenty lines, and scipy would be a 35 MB runtime dependency for
it. The tests check it against `scipy.stats.mannwhitneyu` (a test dependency only).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
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
    """One-sided Mann-Whitney U test on raw samples, H1: `current` tends to be larger than `baseline`."""
    return mann_whitney_greater_counted(sorted(Counter(baseline).items()), sorted(Counter(current).items()))


def mann_whitney_greater_counted(baseline: Iterable[tuple[float, int]], current: Iterable[tuple[float, int]]
                                 ) -> UTest:
    """One-sided Mann-Whitney U test on (value, how many) pairs, H1: `current` tends to be larger.

    Normal approximation with the tie correction of the variance and a continuity
    correction, as `scipy.stats.mannwhitneyu(current, baseline, alternative="greater",
    method="asymptotic")` computes it on the samples the pairs stand for. With no samples
    on a side, or all values tied, there is no evidence either way: p = 1.
    """
    counts: dict[float, list[int]] = {}
    for side, pairs in ((0, current), (1, baseline)):
        for value, n in pairs:
            if n > 0:
                counts.setdefault(value, [0, 0])[side] += n
    n1 = sum(pair[0] for pair in counts.values())
    n2 = sum(pair[1] for pair in counts.values())
    if n1 == 0 or n2 == 0:
        return UTest(0.0, 1.0, n2, n1)
    below, rank_sum, tie_term = 0, 0.0, 0.0
    for value in sorted(counts):
        in_current, in_baseline = counts[value]
        tied = in_current + in_baseline
        rank_sum += in_current * (below + (tied + 1) / 2)  # each of the tied shares their mean rank
        tie_term += tied ** 3 - tied
        below += tied
    u = rank_sum - n1 * (n1 + 1) / 2
    n = n1 + n2
    variance = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1)))
    if variance <= 0:
        return UTest(u, 1.0, n2, n1)
    z = (u - n1 * n2 / 2 - 0.5) / math.sqrt(variance)
    return UTest(u, _upper_tail(z), n2, n1)


def _upper_tail(z: float) -> float:
    """P(Z >= z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2))
