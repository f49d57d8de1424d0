"""Distributions in a size that does not grow with the run: DDSketch for times, exact counts for small integers.

A run of hours finishes millions of rounds; keeping each latency would make the load
process's memory grow with the run's length. A `Sketch` keeps a DDSketch (the `ddsketch`
package, chosen by `benchmarks/histograms.py`): each percentile it returns lies within
`RELATIVE_ERROR` of the exact nearest-rank value, count, minimum and maximum stay exact,
the sum (so the mean) is kept in whole nanoseconds (so merging is exact in any order), and
two sketches merge into the sketch of both runs' samples (the workers' figures merge on the
master). `Counts` keeps small integers (rounds per call) exactly, one counter per value seen.

`band(pct)` is the range the exact percentile lies in; thresholds judge against it
(docs/figures.md states the rule).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

from harness._compat.ddsketch import OpenSketch
from harness.journal.plain import NotPlain

RELATIVE_ERROR = 0.01
"""Every percentile a `Sketch` gives is within 1% of the exact nearest-rank value."""

FLOOR = 1e-6
"""Values below a microsecond count as zero: it bounds a sketch's bins (1 µs to an hour is about 1,100)."""


_SKETCH = frozenset({"count", "zero", "sum", "min", "max", "key", "bins"})
"""The plain form of a `Sketch`: its exact figures, and the counts of its bins from the first key in use on."""


def nearest_rank(count: int, pct: float) -> int:
    """The 1-based rank of the nearest-rank percentile: the sample at or below which `pct`% of `count` fall."""
    return max(1, min(count, round(pct / 100 * count + 0.4999)))


class Distribution(Protocol):
    """What thresholds and reports read of a distribution."""

    @property
    def count(self) -> int: ...
    @property
    def total(self) -> float: ...
    @property
    def minimum(self) -> float | None: ...
    @property
    def maximum(self) -> float | None: ...
    def percentile(self, pct: float) -> float | None: ...
    def band(self, pct: float) -> tuple[float, float] | None: ...


class Sketch:
    """Non-negative times (seconds): exact count, sum, min and max; percentiles within `RELATIVE_ERROR`."""

    __slots__ = ("_sketch", "add")

    def __init__(self) -> None:
        self._sketch = OpenSketch(RELATIVE_ERROR, FLOOR)
        self.add: Callable[[float], None] = self._sketch.add_floored
        """`add(value)`: `DDSketch.add(value)` (a value under `FLOOR` as 0), without its checks for weights and
        negative values (`OpenSketch.add_floored`, bound: a fold adds several values per flow, each one call).

        The library's generic `add` checks what a time never is. The bin comes from the sketch's own
        mapping and store, so the sketch is the one `add` builds."""

    def merge(self, other: Sketch) -> None:
        self._sketch.merge(other._sketch)

    def as_plain(self) -> dict[str, Any]:
        """The sketch as plain data (`harness.journal.plain`): exact count, zero bin, sum (whole nanoseconds), min,
        max, and the bins."""
        sketch = self._sketch
        key, kept = sketch.bins_in_use()
        return {"count": sketch.count, "zero": sketch.zero_count, "sum": sketch.nanoseconds,
                "min": sketch.minimum if sketch.count else None, "max": sketch.maximum if sketch.count else None,
                "key": key, "bins": [int(n) if n.is_integer() else n for n in kept]}

    @classmethod
    def from_plain(cls, data: Any) -> Sketch:
        """The sketch `as_plain` gave, checked: counts that add up, bins within the mapping's keys, min <= max."""
        if type(data) is not dict or data.keys() != _SKETCH:
            raise NotPlain("not a sketch's fields")
        count, zero, total, bins, key = data["count"], data["zero"], data["sum"], data["bins"], data["key"]
        if type(bins) is not list or not all(map(_count_like, [count, zero, total, *bins])) or type(key) is not int \
                or type(total) is not int:
            raise NotPlain("a sketch's counts are not numbers of at least zero")
        if count != zero + sum(bins) or (bins and not _KEYS[0] <= key <= key + len(bins) - 1 <= _KEYS[1]):
            raise NotPlain("a sketch whose bins do not add up to its count, or lie outside its keys")
        low, high = data["min"], data["max"]
        fits = _count_like(low) and _count_like(high) and low <= high if count else low is None and high is None
        if not fits:
            raise NotPlain("a sketch's minimum and maximum do not fit its count")
        built = cls()
        built._sketch.restore(count=count, zero=zero, total=total, low=low, high=high, key=key, bins=bins)
        return built

    @property
    def count(self) -> int:
        return int(self._sketch.count)

    @property
    def total(self) -> float:
        return self._sketch.sum

    @property
    def minimum(self) -> float | None:
        return float(self._sketch.minimum) if self.count else None

    @property
    def maximum(self) -> float | None:
        return float(self._sketch.maximum) if self.count else None

    def percentile(self, pct: float) -> float | None:
        """The nearest-rank percentile's estimate: the value of the bin that holds that rank, kept within min..max."""
        if not self.count:
            return None
        rank = nearest_rank(self.count, pct)
        sketch = self._sketch
        if rank <= sketch.zero_count:
            return 0.0
        key = sketch.key_at_rank(rank - sketch.zero_count - 0.5)  # first bin whose running count reaches rank
        return min(max(float(sketch.mapping.value(key)), sketch.minimum), sketch.maximum)

    def pairs(self) -> list[tuple[float, int]]:
        """(bin value, how many samples) in value order: the samples as the sketch keeps them."""
        sketch = self._sketch
        found = [(0.0, int(sketch.zero_count))] if sketch.zero_count else []
        first, bins = sketch.bins_in_use()
        found += [(float(sketch.mapping.value(first + index)), int(n)) for index, n in enumerate(bins) if n]
        return found

    def band(self, pct: float) -> tuple[float, float] | None:
        """Where the exact nearest-rank percentile lies: within `RELATIVE_ERROR` of the estimate and min..max."""
        estimate = self.percentile(pct)
        if estimate is None:
            return None
        if estimate == 0.0 and self._sketch.zero_count >= nearest_rank(self.count, pct):
            return (0.0, min(FLOOR, self._sketch.maximum))
        low = max(estimate / (1 + RELATIVE_ERROR), self._sketch.minimum)
        high = min(estimate / (1 - RELATIVE_ERROR), self._sketch.maximum)
        return (low, high)


class Counts:
    """Small integers (rounds per call), each value counted exactly: percentiles are exact."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: Counter[int] = Counter()

    def add(self, value: int) -> None:
        self._counts[value] += 1

    def merge(self, other: Counts) -> None:
        self._counts.update(other._counts)

    def as_plain(self) -> list[list[int]]:
        """[value, how many] pairs, in value order (`harness.journal.plain`)."""
        return [[int(value), n] for value, n in self.items()]

    @classmethod
    def from_plain(cls, data: Any) -> Counts:
        """The counts `as_plain` gave, checked: whole values, each once, each counted at least once."""
        built = cls()
        if type(data) is not list:
            raise NotPlain("counts are not a list of pairs")
        for pair in data:
            if type(pair) is not list or len(pair) != 2 or type(pair[0]) is not int or type(pair[1]) is not int \
                    or pair[1] < 1 or pair[0] in built._counts:
                raise NotPlain("counts are not [value, how many] pairs of whole numbers, each value once")
            built._counts[pair[0]] = pair[1]
        return built

    @property
    def count(self) -> int:
        return self._counts.total()

    @property
    def total(self) -> float:
        return float(sum(value * n for value, n in self._counts.items()))

    @property
    def minimum(self) -> float | None:
        return float(min(self._counts)) if self._counts else None

    @property
    def maximum(self) -> float | None:
        return float(max(self._counts)) if self._counts else None

    def percentile(self, pct: float) -> float | None:
        if not self._counts:
            return None
        rank, running = nearest_rank(self.count, pct), 0
        for value in sorted(self._counts):
            running += self._counts[value]
            if running >= rank:
                return float(value)
        raise AssertionError("unreachable: the ranks add up to the count")

    def band(self, pct: float) -> tuple[float, float] | None:
        value = self.percentile(pct)
        return None if value is None else (value, value)

    def items(self) -> list[tuple[int, int]]:
        """(value, how many) in value order."""
        return sorted(self._counts.items())

    def pairs(self) -> list[tuple[float, int]]:
        return [(float(value), n) for value, n in self.items()]


def _count_like(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and value >= 0


_KEYS = (OpenSketch(RELATIVE_ERROR).mapping.key(FLOOR), OpenSketch(RELATIVE_ERROR).mapping.key(1e300))
"""The bins a sketch of times can use: from `FLOOR` to far beyond any time (a key's value must stay a float)."""


def merged_sketch(parts: list[Sketch]) -> Sketch:
    whole = Sketch()
    for part in parts:
        whole.merge(part)
    return whole


def merged_counts(parts: list[Counts]) -> Counts:
    whole = Counts()
    for part in parts:
        whole.merge(part)
    return whole
