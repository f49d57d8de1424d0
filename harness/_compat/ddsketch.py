"""DDSketch's private fields the harness reads and writes (pinned by tests/test_compat.py).

`harness.journal.distributions` keeps times in a DDSketch and needs what the library keeps
to itself: the exact minimum, maximum and zero count (`_min`, `_max`, `_zero_count`), the
mapping from values to bin keys (`_mapping`) and the dense store of positive values
(`_store`, with its `bins` from `offset`, `min_key`, `max_key` and `count`). Its sum (`_sum`) is
kept in whole nanoseconds, an int: sums of ints do not depend on the order they are taken in,
so sketches folded apart and merged (`report DIR` over several processes) equal one folded
whole, to the last bit. It adds a value
without the library's generic `add` (no weight, no negative store, and the logarithmic
mapping's key computed in place: `_multiplier` and `_offset`), writes the bins back when a
sketch is read from the journal, and reads the bins a sketch uses. `OpenSketch` is a
DDSketch that does these through names of its own, so no other module touches a field.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import ceil, inf, log

from ddsketch import DDSketch
from ddsketch.mapping import KeyMapping, LogarithmicMapping

__all__ = ["OpenSketch"]

NANOSECONDS = 1_000_000_000


def _nanoseconds(value: float) -> int:
    """`value` seconds (0 or more, finite) in whole nanoseconds, rounded: what a sketch's sum adds (`add_floored`
    does it in line for every value whose nanoseconds are a finite float, and calls this for a larger one)."""
    scaled = value * 1e9
    return round(scaled) if scaled < inf else round(value) * NANOSECONDS


class OpenSketch(DDSketch):
    """A `DDSketch` of values of 0 or more, each of weight 1, with its fields read and written by name."""

    def __init__(self, relative_accuracy: float, floor: float = 0.0) -> None:
        super().__init__(relative_accuracy)
        self._floor = floor
        """`add_floored` adds a value under it as 0."""
        mapping = self._mapping
        if type(mapping) is not LogarithmicMapping:
            raise TypeError(f"DDSketch maps values with {type(mapping).__name__}, not LogarithmicMapping")
        self._scale, self._shift = mapping._multiplier, mapping._offset
        """`LogarithmicMapping.key(value)` is `int(ceil(log(value, 2) * _multiplier) + _offset)`."""
        self._sum: int = 0  # nanoseconds (the module says why)

    @property
    def sum(self) -> float:
        """The values' sum in seconds (kept in whole nanoseconds)."""
        return self._sum / NANOSECONDS

    @property
    def nanoseconds(self) -> int:
        """The values' sum in whole nanoseconds, exactly as kept."""
        return self._sum

    @property
    def mapping(self) -> KeyMapping:
        """Values to bin keys (`key`) and back (`value`)."""
        return self._mapping

    @property
    def zero_count(self) -> float:
        return self._zero_count

    @property
    def minimum(self) -> float:
        """The exact smallest value added (+inf for an empty sketch)."""
        return self._min

    @property
    def maximum(self) -> float:
        """The exact largest value added (-inf for an empty sketch)."""
        return self._max

    def add_floored(self, value: float) -> None:
        """`add(value)` for a value of 0 or more, without the checks for weights and negative values; a value under
        the sketch's `floor` is added as 0 (the zero bin, the sum, the minimum and maximum).

        The bin's key is the mapping's `key(value)`, computed here, and a key within the store's range is counted in
        place (`DenseStore.add` for one outside it, which grows the range): a fold adds several values per flow."""
        if value >= self._floor:
            key = int(ceil(log(value, 2) * self._scale) + self._shift)
            store = self._store
            if store.min_key <= key <= store.max_key:
                store.bins[key - store.offset] += 1.0
                store.count += 1.0
            else:
                store.add(key)
        else:
            value = 0.0
            self._zero_count += 1.0
        self._count += 1.0
        scaled = value * 1e9
        self._sum += round(scaled) if scaled < inf else _nanoseconds(value)
        if value < self._min:
            self._min = value
        if value > self._max:
            self._max = value

    def key_at_rank(self, rank: float) -> int:
        """The key of the first positive bin whose running count reaches `rank` (0-based, not counting zeros)."""
        return self._store.key_at_rank(rank)

    def bins_in_use(self) -> tuple[int, list[float]]:
        """The key of the first positive bin in use and the counts from it to the last in use; (0, []) if none."""
        store = self._store
        if not store.count:
            return 0, []
        return store.min_key, store.bins[store.min_key - store.offset:store.max_key - store.offset + 1]

    def restore(self, *, count: float, zero: float, total: int, low: float | None, high: float | None, key: int,
                bins: Sequence[float]) -> None:
        """Set an empty sketch to the figures `bins_in_use` and the properties gave (checked by the caller: counts
        that add up, keys within the mapping's); `total` is the sum in nanoseconds; `low` and `high` are None for an
        empty one."""
        store = self._store
        if bins:
            store.bins, store.count = [float(n) for n in bins], float(sum(bins))
            store.offset, store.min_key, store.max_key = key, key, key + len(bins) - 1
        self._count, self._zero_count, self._sum = float(count), float(zero), total
        if low is not None and high is not None:
            self._min, self._max = float(low), float(high)
