"""The replicas' health over the run, folded from its `health` records: the report's series and the leak slope.

Per replica, the samples (time, resident MB, CPU seconds, descriptors, threads) for the report's charts, kept to
at most `MAX_POINTS` by dropping every other one when full (the series stays even in time, its size bounded
whatever the run's length); and `replica_rss_growth`: the slope of resident memory in MB per minute, fitted by
least squares over the samples after the warm-up, with its 95% confidence interval (Student's t on n - 2 degrees
of freedom).

The warm-up is the first `WARM_UP_SECONDS` of the load, or its first fifth when the samples span less than five
times that: a replica's memory rises while its caches, pools and imports settle, and that is no leak. A fit needs
`MIN_FIT_SAMPLES` samples after the warm-up; with fewer there is no slope, and a threshold on it fails closed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

MAX_POINTS = 1024
"""Samples kept per replica at most (a sample every 2 s: 34 minutes before the first thinning)."""
WARM_UP_SECONDS = 60.0
MIN_FIT_SAMPLES = 5
CONFIDENCE = 0.95
_NUMBER = (int, float)


@dataclass(frozen=True)
class Slope:
    """A least-squares slope with its confidence interval, in MB per minute, and the samples it was fitted on."""

    per_minute: float
    low: float
    high: float
    samples: int
    warm_up: float
    """Seconds of the load's start left out of the fit."""

    def as_dict(self) -> dict[str, float | int]:
        return {"mb_per_minute": round(self.per_minute, 3), "low": round(self.low, 3), "high": round(self.high, 3),
                "samples": self.samples, "warm_up_seconds": round(self.warm_up, 1)}


@dataclass
class HealthSeries:
    """One replica's samples: (t, rss MB, cpu seconds, open fds, threads), each figure None where not read."""

    points: list[tuple[float, float, float | None, int | None, int | None]] = field(default_factory=list)
    source: str | None = None
    """where the last sample was read (proc, docker-stats, prometheus)."""

    def add(self, point: tuple[float, float, float | None, int | None, int | None]) -> None:
        self.points.append(point)
        if len(self.points) > MAX_POINTS:
            self.points = self.points[::2]


@dataclass
class HealthFigures:
    """Every replica's health series, by label."""

    replicas: dict[str, HealthSeries] = field(default_factory=dict)

    def add(self, record: Mapping[str, Any]) -> None:
        """One `health` record; a damaged one (no time, no replica, no memory figure) is left out."""
        t, replica, rss = record.get("t"), record.get("replica"), record.get("rss_mb")
        if not isinstance(t, _NUMBER) or not isinstance(replica, str) or not isinstance(rss, _NUMBER) \
                or isinstance(rss, bool) or not math.isfinite(rss) or not math.isfinite(t):
            return
        cpu, fds, threads = record.get("cpu_seconds"), record.get("open_fds"), record.get("threads")
        series = self.replicas.setdefault(replica, HealthSeries())
        series.add((float(t), float(rss), float(cpu) if isinstance(cpu, _NUMBER) else None,
                    fds if type(fds) is int else None, threads if type(threads) is int else None))
        source = record.get("source")
        series.source = source[:40] if isinstance(source, str) else None

    def rss_growth(self, replica: str, zero: float | None) -> Slope | None:
        """The replica's resident-memory slope after the warm-up (counted from `zero`, the load's start, else its
        first sample); None: too few samples after the warm-up to fit one."""
        series = self.replicas.get(replica)
        if series is None or not series.points:
            return None
        start = zero if zero is not None else series.points[0][0]
        span = series.points[-1][0] - start
        warm_up = min(WARM_UP_SECONDS, max(span, 0.0) / 5)
        fitted = [(t - start, rss) for t, rss, *_ in series.points if t - start >= warm_up]
        return fit_slope(fitted, warm_up)


def fit_slope(points: list[tuple[float, float]], warm_up: float = 0.0) -> Slope | None:
    """The least-squares slope of (seconds, MB) points, in MB per minute, with its confidence interval; None with
    fewer than `MIN_FIT_SAMPLES` points or no spread in time."""
    n = len(points)
    if n < MIN_FIT_SAMPLES:
        return None
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    if sxx <= 0:
        return None
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    slope = sxy / sxx
    residual = sum((y - mean_y - slope * (x - mean_x)) ** 2 for x, y in points)
    error = math.sqrt(residual / (n - 2) / sxx)
    margin = t_quantile(0.5 + CONFIDENCE / 2, n - 2) * error
    return Slope(per_minute=slope * 60, low=(slope - margin) * 60, high=(slope + margin) * 60, samples=n,
                 warm_up=warm_up)


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile, from the normal's by its Cornish-Fisher expansion (within 0.5% from 3 degrees of
    freedom on; the standard library has no t distribution and the harness no scipy)."""
    z = NormalDist().inv_cdf(p)
    if df <= 2:  # the exact closed forms
        return math.tan(math.pi * (p - 0.5)) if df == 1 else (2 * p - 1) * math.sqrt(2 / (4 * p * (1 - p)))
    g1 = (z ** 3 + z) / 4
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    g4 = (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160
    return z + g1 / df + g2 / df ** 2 + g3 / df ** 3 + g4 / df ** 4
