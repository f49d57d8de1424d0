"""The numbers the reports show beyond the verdict: spreads per flow and round, and series over run time.

Spreads are read through `RunFigures.distribution` and use the thresholds' nearest-rank
percentile, so a p95 in the summary or the HTML is the very number a threshold on it
observed. Time series need the `t` of each record, which `RunFigures` does not keep, so
`Timeline` reads it from the same journal records in the same pass, into time bins (flow
counts by outcome, a latency sketch, rejection counts per bin) whose number stays under
`_MAX_BINS`: when a run outgrows them, neighbouring bins merge into the next width.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.journal.distributions import Counts, Distribution, Sketch, merged_sketch
from harness.journal.distributions import nearest_rank as _nearest_rank
from harness.journal.figures import _NUMBER, FaultWindow, RunFigures
from harness.journal.records import ChaosPhase, FlowOutcome, RecordType, advance_time_zero
from harness.journal.writer import JournalView

PERCENTILES = (50.0, 95.0, 99.0)
_BIN_WIDTHS = (1, 2, 6, 12, 60, 120, 600, 1200, 3600, 7200)
"""Seconds per time bin; each divides the next, so a run's bins merge into the next width exactly."""
_MAX_BINS = 120
_OUTCOME_ORDER = {outcome.value: index for index, outcome in enumerate(FlowOutcome)}


def percentile(ordered: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of sorted values: the same definition as `harness.config.thresholds`, on purpose."""
    return ordered[_nearest_rank(len(ordered), pct) - 1]


def spread(values: Distribution, *, with_max: bool = False) -> dict[str, float | int | None]:
    """count, p50, p95, p99 (and max): None where there are no samples, never a made-up zero."""
    figures: dict[str, float | int | None] = {"count": values.count}
    for pct in PERCENTILES:
        figures[f"p{pct:g}"] = values.percentile(pct)
    if with_max:
        figures["max"] = values.maximum
    return figures


def flow_names(figures: RunFigures) -> list[str]:
    return [flow for flow in figures.flow_names() if flow != "None"]


def rounds_per_call(figures: RunFigures) -> dict[str, dict[str, float | int | None]]:
    """Per flow: how many rounds a call took (p50/p95/p99/max); 10 means the server never stopped asking."""
    return {flow: spread(figures.distribution("rounds_per_call", {"flow": flow}), with_max=True)
            for flow in flow_names(figures)}


def round_latency(figures: RunFigures) -> dict[str, dict[str, dict[str, float | int | None]]]:
    """Per flow and round number: round latency p50/p95/p99 in seconds, as the thresholds see it."""
    table: dict[str, dict[str, dict[str, float | int | None]]] = {}
    for flow in flow_names(figures):
        numbers = [number for number in figures.round_numbers(flow) if number]
        table[flow] = {str(number): spread(figures.distribution("round_duration",
                                                                {"flow": flow, "round": str(number)}))
                       for number in numbers}
    return table


def rounds_histogram(figures: RunFigures, flow: str, top: int = 10) -> list[int]:
    """Calls per round count 1..top (the last bucket holds `top` and beyond), like `mrtr_rounds_per_call`."""
    buckets = [0] * top
    counts = figures.distribution("rounds_per_call", {"flow": flow})
    assert isinstance(counts, Counts)
    for rounds, n in counts.items():
        buckets[min(int(rounds), top) - 1] += n
    return buckets


def ordered_outcomes(outcomes: Iterable[str]) -> list[str]:
    """Outcomes in `FlowOutcome` order (completed first), unknown ones after: the same column order everywhere."""
    return sorted(set(outcomes), key=lambda outcome: (_OUTCOME_ORDER.get(outcome, len(_OUTCOME_ORDER)), outcome))


# --- chaos actions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChaosAction:
    """One chaos action, its start and end paired, in seconds since the run started."""

    action: str
    target: str | None
    start: float | None
    end: float | None
    ok: bool | None
    detail: Any = None
    error: str | None = None
    rounds: dict[str, dict[str, int]] | None = None
    """A network fault's: the rounds sent into its window on each replica it named, by outcome."""

    def label(self) -> str:
        where = f" {self.target}" if self.target else ""
        failed = " (failed)" if self.ok is False else ""
        return f"{self.action}{where}{failed}"

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "target": self.target, "start": _round(self.start), "end": _round(self.end),
                "ok": self.ok, "error": self.error, "detail": self.detail,
                **({"rounds": self.rounds} if self.rounds is not None else {})}


def chaos_actions(records: Iterable[dict[str, Any]], started: float | None,
                  faults: Iterable[FaultWindow] = ()) -> list[ChaosAction]:
    """Pair each `end` with the oldest open `start` of the same action and target.

    An action still open when the journal stops has no end (the run was cut off while it
    ran); an end with no start (a journal part lost) starts where it ended. A network
    fault gets the rounds of its window from `faults` (the figures' `FaultWindow`s).
    """
    ordered = sorted(records, key=lambda record: record.get("t") or 0.0)
    origin = started if started is not None else ((ordered[0].get("t") or 0.0) if ordered else 0.0)
    opened: list[dict[str, Any]] = []
    actions: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
    for record in ordered:
        if record.get("phase") == ChaosPhase.START:
            opened.append(record)
            continue
        match = next((start for start in opened if _same_action(start, record)), None)
        if match is not None:
            opened.remove(match)
        actions.append((match or record, record))
    actions += [(start, None) for start in opened]
    actions.sort(key=lambda pair: pair[0].get("t") or 0.0)
    windows: dict[tuple[Any, Any], FaultWindow] = {(fault.start, fault.target): fault for fault in faults}
    return [_action(start, end, origin, windows.get((start.get("t"), start.get("target"))))
            for start, end in actions]


def _same_action(start: dict[str, Any], end: dict[str, Any]) -> bool:
    return start.get("action") == end.get("action") and start.get("target") == end.get("target")


def _action(start: dict[str, Any], end: dict[str, Any] | None, origin: float,
            fault: FaultWindow | None) -> ChaosAction:
    finish = end or {}
    return ChaosAction(action=str(start.get("action")), target=_text_or_none(start.get("target")),
                       start=_since(start.get("t"), origin), end=_since(finish.get("t"), origin),
                       ok=finish.get("ok") if end is not None else None,
                       detail=finish.get("detail", start.get("detail")), error=finish.get("error"),
                       rounds=fault.by_replica() if fault is not None else None)


# --- the timeline -------------------------------------------------------------------------------


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
        t = record.get("t")
        if not isinstance(t, (int, float)):  # the tuple is the faster check, once per record
            return
        kind = record.get("type")
        if kind == RecordType.RUN:
            self.started = advance_time_zero(self.started, record)
        if self.first is None or t < self.first:
            self.first = t
        if self.last is None or t > self.last:
            self.last = t
        if kind == RecordType.ROUND and isinstance(record.get("latency"), _NUMBER):
            self._bin(t).latency.add(float(record["latency"]))
        elif kind == RecordType.FLOW:
            self._bin(t).flows[str(record.get("outcome"))] += 1
        elif kind == RecordType.START:
            self._bin(t).starts += 1
        elif kind == RecordType.REJECTION:
            self._bin(t).rejections[(str(record.get("replica")), str(record.get("reason")))] += 1

    def _bin(self, t: float) -> _Bin:
        if self.anchor is None:
            self.anchor = self.started if self.started is not None else t
        index = math.floor((t - self.anchor) / self.width)
        found = self.stored.get(index)
        if found is not None:
            return found
        if not self.stored:
            self.low = self.high = index
        while max(self.high, index) - min(self.low, index) >= _MAX_BINS and self.width < _BIN_WIDTHS[-1]:
            self._widen()
            index = math.floor((t - self.anchor) / self.width)
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
        self.low, self.high = min(merged), max(merged)

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


def _since(t: Any, origin: float) -> float | None:
    return float(t) - origin if isinstance(t, _NUMBER) else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _text_or_none(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)
