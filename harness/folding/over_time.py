"""Series over run time, folded from the journal: what the reports plot against the run's seconds.

Time series need the `t` of each record, which `RunFigures` does not keep, so `Timeline`
reads it from the same journal records in the same pass, into time bins (flow counts by
outcome, a latency sketch, rejection counts per bin) whose number stays under `_MAX_BINS`:
when a run outgrows them, neighbouring bins merge into the next width. A record's bin is a floor
division of its time since `anchor` by the width (`//`, exact for whole widths), so whether it was
binned at a narrower width first and regrouped, or at the final width at once, it lands in the same
bin: timelines of a journal's stretches merge into the timeline of the whole (`merge`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.folding.figures import _NUMBER, add_by_kind
from harness.journal.distributions import Sketch, merged_sketch
from harness.journal.records import FlowOutcome, RecordType, advance_time_zero
from harness.journal.writer import JournalView

PERCENTILES = (50.0, 95.0, 99.0)
_BIN_WIDTHS = (1, 2, 6, 12, 60, 120, 600, 1200, 3600, 7200)
"""Seconds per time bin; each divides the next, so a run's bins merge into the next width exactly."""
_MAX_BINS = 120
_OUTCOME_ORDER = {outcome.value: index for index, outcome in enumerate(FlowOutcome)}


def ordered_outcomes(outcomes: Iterable[str]) -> list[str]:
    """Outcomes in `FlowOutcome` order (completed first), unknown ones after: the same column order everywhere."""
    return sorted(set(outcomes), key=lambda outcome: (_OUTCOME_ORDER.get(outcome, len(_OUTCOME_ORDER)), outcome))


@dataclass
class _Bin:
    """What happened in one time bin: flows by outcome, round latencies, rejections by (replica, reason)."""

    flows: Counter[str] = field(default_factory=Counter)
    latency: Sketch = field(default_factory=Sketch)
    rejections: Counter[tuple[str, str]] = field(default_factory=Counter)
    starts: int = 0

    def merge(self, other: _Bin) -> None:
        self.starts += other.starts
        self.flows.update(other.flows)
        self.latency.merge(other.latency)
        self.rejections.update(other.rejections)


@dataclass
class Timeline(JournalView):
    """The timed records reports plot: when rounds, flows and rejections happened, relative to the run start.

    Kept in at most `_MAX_BINS` bins of `width` seconds from `anchor` (the run's time zero
    when the first timed record came); a record past the last bin widens every bin to the
    next width of `_BIN_WIDTHS`, merging neighbours, so its size does not grow with the run.
    """

    started: float | None = None
    first: float | None = None
    last: float | None = None
    anchor: float | None = None
    width: float = float(_BIN_WIDTHS[0])
    stored: dict[int, _Bin] = field(default_factory=dict)
    low: int = 0
    high: int = 0

    def add(self, record: Mapping[str, Any]) -> None:
        if add_by_kind(self, record):
            return
        t = record.get("t")
        if not isinstance(t, _NUMBER):
            return
        self._bin_of(record, binned=False)
        kind = record.get("type")
        if kind == RecordType.RUN:
            self.started = advance_time_zero(self.started, record)
        elif kind == RecordType.REJECTION:
            self._bin(t).rejections[(str(record.get("replica")), str(record.get("reason")))] += 1

    def add_round(self, record: Mapping[str, Any]) -> None:
        """`add` for a `round` record (`harness.folding.read` routes each kind straight to its own)."""
        latency = record.get("latency")
        if not isinstance(latency, _NUMBER):
            self._bin_of(record, binned=False)
            return
        found = self._bin_of(record)
        if found is not None:
            found.latency.add(float(latency))

    def add_flow(self, record: Mapping[str, Any]) -> None:
        """`add` for a flow's outcome (`flow` record)."""
        found = self._bin_of(record)
        if found is not None:
            found.flows[str(record.get("outcome"))] += 1

    def add_start(self, record: Mapping[str, Any]) -> None:
        """`add` for a flow's `start` record."""
        found = self._bin_of(record)
        if found is not None:
            found.starts += 1

    def _bin_of(self, record: Mapping[str, Any], binned: bool = True) -> _Bin | None:
        """The record's time taken into the first and last seen, then, when `binned`, the bin it falls in (the one a
        run's records mostly fall in found without a call more: `_bin` makes the others); None when the record has
        no time (it is not plotted) or is not `binned`."""
        t = record.get("t")
        if not isinstance(t, _NUMBER):
            return None
        if self.first is None or t < self.first:
            self.first = t
        if self.last is None or t > self.last:
            self.last = t
        if not binned:
            return None
        anchor = self.anchor
        if anchor is not None:
            found = self.stored.get(int((t - anchor) // self.width))
            if found is not None:
                return found
        return self._bin(t)

    def _bin(self, t: float) -> _Bin:
        if self.anchor is None:
            self.anchor = self.started if self.started is not None else t
        index = int((t - self.anchor) // self.width)
        found = self.stored.get(index)
        if found is not None:
            return found
        if not self.stored:
            self.low = self.high = index
        while max(self.high, index) - min(self.low, index) >= _MAX_BINS and self.width < _BIN_WIDTHS[-1]:
            self._widen()
            index = int((t - self.anchor) // self.width)
        self.low, self.high = min(self.low, index), max(self.high, index)
        found = self.stored.get(index)
        if found is None:
            found = self.stored[index] = _Bin()
        return found

    def _widen(self) -> None:
        wider = float(next(w for w in _BIN_WIDTHS if w > self.width))
        factor = round(wider / self.width)
        merged: dict[int, _Bin] = {}
        for index, content in sorted(self.stored.items()):
            merged.setdefault(index // factor, _Bin()).merge(content)
        self.stored, self.width = merged, wider
        if merged:
            self.low, self.high = min(merged), max(merged)

    def merge(self, other: Timeline) -> None:
        """Add the timeline of the records after this one's (`harness.folding.merging`), folded from the same time
        zero (`anchor`): both widened to the wider width, bins merged, then widened until they fit as one fold's
        would. A record's bin is a floor division, which regrouping by whole factors keeps: the bins are the same."""
        if self.anchor is None:
            self.anchor = other.anchor
        elif other.anchor is not None and other.anchor != self.anchor:
            raise ValueError("timelines of different time zeros do not merge")
        if other.started is not None:
            self.started = other.started
        if other.first is not None:
            self.first = other.first if self.first is None else min(self.first, other.first)
        if other.last is not None:
            self.last = other.last if self.last is None else max(self.last, other.last)
        while self.width < other.width:
            self._widen()
        while other.width < self.width:
            other._widen()
        for index, content in other.stored.items():
            self.stored.setdefault(index, _Bin()).merge(content)
        if self.stored:
            self.low, self.high = min(self.stored), max(self.stored)
        while self.high - self.low >= _MAX_BINS and self.width < _BIN_WIDTHS[-1]:
            self._widen()

    @property
    def origin(self) -> float:
        """Zero on the x axis: the run start, or the first timed record of a journal that lost it."""
        if self.started is not None:
            return self.started
        return self.first if self.first is not None else 0.0

    def span(self, duration: float = 0.0) -> float:
        """Seconds the plots cover: the run's duration, or longer if records came later (the grace period)."""
        last = (self.last - self.origin) if self.last is not None else 0.0
        return max(duration, last, 1.0)

    def bins(self, duration: float = 0.0) -> Bins:
        span = self.span(duration)
        width = next((w for w in _BIN_WIDTHS if span / w <= _MAX_BINS and w >= self.width), _BIN_WIDTHS[-1])
        return Bins(width=float(width), count=max(1, math.ceil(span / width)), origin=self.origin)

    def _regrouped(self, bins: Bins) -> dict[int, _Bin]:
        """The stored bins in `bins`: each goes whole to the plot bin its middle falls in."""
        anchor = self.anchor if self.anchor is not None else self.origin
        grouped: dict[int, _Bin] = {}
        for index, content in self.stored.items():
            grouped.setdefault(bins.index(anchor + (index + 0.5) * self.width), _Bin()).merge(content)
        return grouped

    def flow_rates(self, bins: Bins) -> dict[str, list[float]]:
        """Flows finished per second, by outcome, per bin."""
        counts: dict[str, list[float]] = {}
        for index, content in self._regrouped(bins).items():
            for outcome, n in content.flows.items():
                counts.setdefault(outcome, [0.0] * bins.count)[index] += n
        return {outcome: [n / bins.width for n in counts[outcome]] for outcome in ordered_outcomes(counts)}

    def start_rates(self, bins: Bins) -> list[float]:
        """Flows started per second, per bin: what the load achieved, beside what its stages intended."""
        rates = [0.0] * bins.count
        for index, content in self._regrouped(bins).items():
            rates[index] += content.starts / bins.width
        return rates

    def in_flight(self, bins: Bins) -> list[float]:
        """Flows started and not yet ended at each bin's end (most wait on a lead): the web UI's live charts."""
        grouped = self._regrouped(bins)
        level, levels = 0.0, []
        for index in range(bins.count):
            content = grouped.get(index)
            if content is not None:
                level += content.starts - content.flows.total()
            levels.append(level)
        return levels

    def latency_percentiles(self, bins: Bins) -> dict[str, list[float | None]]:
        """Round latency p50/p95/p99 per bin, in seconds (within 1%); None where no round finished."""
        grouped = self._regrouped(bins)
        sketches = [grouped[i].latency if i in grouped else merged_sketch([]) for i in range(bins.count)]
        return {f"p{pct:g}": [sketch.percentile(pct) for sketch in sketches] for pct in PERCENTILES}

    def rejection_counts(self, bins: Bins) -> dict[str, dict[str, list[float]]]:
        """Per replica, rejections per bin by reason: counts, not rates, since rejections are few and each matters."""
        table: dict[str, dict[str, list[float]]] = {}
        for index, content in self._regrouped(bins).items():
            for (replica, reason), n in content.rejections.items():
                table.setdefault(replica, {}).setdefault(reason, [0.0] * bins.count)[index] += n
        return {replica: dict(sorted(reasons.items())) for replica, reasons in sorted(table.items())}


@dataclass(frozen=True)
class Bins:
    """Equal time bins from the run start; a record after the last bin counts in the last one."""

    width: float
    count: int
    origin: float

    def index(self, t: float) -> int:
        return max(0, min(self.count - 1, int((t - self.origin) // self.width)))

    def centres(self) -> list[float]:
        return [(i + 0.5) * self.width for i in range(self.count)]
