"""prometheus_client's counter, gauge and histogram for the metrics a load process updates at every round.

A load process makes about a dozen metric updates per flow. prometheus_client guards each
value with a lock of its own, checks on every call that the metric is not a labelled
parent, and finds a histogram's bucket by walking its bounds, on the load's hot path
(figures in benchmarks/README.md). These subclasses keep each child's values as plain
Python numbers: an update is an addition (a histogram's, a bisection and two additions).
They are safe where every update comes from one thread, as in a load process, whose
greenlets never switch inside an update; a scrape from another thread reads numbers that
are at most one update old, as it may with prometheus_client's own values, whose
histogram buckets are not read under one lock either.

Everything else is prometheus_client's: names, labels, children, registries, the
exposition (the same samples, `_created` included); its per-child hooks are reached
through `harness._compat.prometheus`. Use them only for metrics updated on the load's hot
path, and only with positive increments (no check is made).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterable

from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from harness._compat.prometheus import CustomCounter, CustomGauge, CustomHistogram, created_samples

__all__ = ["LocklessCounter", "LocklessGauge", "LocklessHistogram"]


class LocklessCounter(CustomCounter):
    """A counter whose children hold a float; `inc` adds to it (non-negative amounts only, unchecked)."""

    _total: float

    def start_child(self) -> None:
        self._total = 0.0
        self._created = time.time()

    def inc(self, amount: float = 1, exemplar: dict[str, str] | None = None) -> None:
        self._total += amount

    def child_samples(self) -> Iterable[Sample]:
        return (Sample("_total", {}, self._total, None, None), *created_samples(self._created))


class LocklessGauge(CustomGauge):
    """A gauge whose children hold a float: `inc`, `dec` and `set` change it."""

    _current: float

    def start_child(self) -> None:
        self._current = 0.0

    def inc(self, amount: float = 1) -> None:
        self._current += amount

    def dec(self, amount: float = 1) -> None:
        self._current -= amount

    def set(self, value: float) -> None:
        self._current = float(value)

    def child_samples(self) -> Iterable[Sample]:
        return (Sample("", {}, self._current, None, None),)


class LocklessHistogram(CustomHistogram):
    """A histogram whose children hold a count per bucket and a sum: `observe` bisects the bounds once."""

    _counts: list[float]
    _total: float

    def start_child(self) -> None:
        self._counts = [0.0] * len(self.bounds)
        self._total = 0.0
        self._created = time.time()

    def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None:
        self._counts[bisect_left(self.bounds, amount)] += 1.0  # the last bound is +Inf
        self._total += amount

    def child_samples(self) -> Iterable[Sample]:
        samples, cumulative = [], 0.0
        for bound, count in zip(self.bounds, self._counts, strict=True):
            cumulative += count
            samples.append(Sample("_bucket", {"le": floatToGoString(bound)}, cumulative, None, None))
        samples.append(Sample("_count", {}, cumulative, None, None))
        if self.bounds[0] >= 0:
            samples.append(Sample("_sum", {}, self._total, None, None))
        return (*samples, *created_samples(self._created))

