"""The numbers the reports show beyond the verdict: spreads per flow and round, and series over run time.

Spreads are read through `RunFigures.distribution` and use the thresholds' nearest-rank
percentile, so a p95 in the summary or the HTML is the very number a threshold on it
observed. Time series need the `t` of each record, which `RunFigures` does not keep, so
`Timeline` reads it from the same journal records in the same pass.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.journal.figures import RunFigures
from harness.journal.records import ChaosPhase, FlowOutcome, RecordType, advance_time_zero
from harness.journal.writer import JournalView

PERCENTILES = (50.0, 95.0, 99.0)
_BIN_WIDTHS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)
_MAX_BINS = 120
_OUTCOME_ORDER = {outcome.value: index for index, outcome in enumerate(FlowOutcome)}


def percentile(ordered: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of sorted values: the same definition as `harness.config.thresholds`, on purpose."""
    rank = max(1, min(len(ordered), round(pct / 100 * len(ordered) + 0.4999)))
    return ordered[rank - 1]


def spread(values: Iterable[float], *, with_max: bool = False) -> dict[str, float | int | None]:
    """count, p50, p95, p99 (and max): None where there are no samples, never a made-up zero."""
    ordered = sorted(values)
    figures: dict[str, float | int | None] = {"count": len(ordered)}
    for pct in PERCENTILES:
        figures[f"p{pct:g}"] = percentile(ordered, pct) if ordered else None
    if with_max:
        figures["max"] = ordered[-1] if ordered else None
    return figures


def flow_names(figures: RunFigures) -> list[str]:
    return sorted({str(row["flow"]) for row in [*figures.flows, *figures.rounds] if row.get("flow") is not None})


def rounds_per_call(figures: RunFigures) -> dict[str, dict[str, float | int | None]]:
    """Per flow: how many rounds a call took (p50/p95/p99/max); 10 means the server never stopped asking."""
    return {flow: spread(figures.distribution("rounds_per_call", {"flow": flow}), with_max=True)
            for flow in flow_names(figures)}


def round_latency(figures: RunFigures) -> dict[str, dict[str, dict[str, float | int | None]]]:
    """Per flow and round number: round latency p50/p95/p99 in seconds, as the thresholds see it."""
    table: dict[str, dict[str, dict[str, float | int | None]]] = {}
    for flow in flow_names(figures):
        numbers = sorted({int(row["round"]) for row in figures.rounds
                          if row.get("flow") == flow and row.get("round") is not None})
        table[flow] = {str(number): spread(figures.distribution("round_duration",
                                                                {"flow": flow, "round": str(number)}))
                       for number in numbers}
    return table


def rounds_histogram(figures: RunFigures, flow: str, top: int = 10) -> list[int]:
    """Calls per round count 1..top (the last bucket holds `top` and beyond), like `mrtr_rounds_per_call`."""
    buckets = [0] * top
    for rounds in figures.distribution("rounds_per_call", {"flow": flow}):
        buckets[min(int(rounds), top) - 1] += 1
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

    def label(self) -> str:
        where = f" {self.target}" if self.target else ""
        failed = " (failed)" if self.ok is False else ""
        return f"{self.action}{where}{failed}"

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "target": self.target, "start": _round(self.start), "end": _round(self.end),
                "ok": self.ok, "error": self.error, "detail": self.detail}


def chaos_actions(records: Iterable[dict[str, Any]], started: float | None) -> list[ChaosAction]:
    """Pair each `end` with the oldest open `start` of the same action and target.

    An action still open when the journal stops has no end (the run was cut off while it
    ran); an end with no start (a journal part lost) starts where it ended.
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
    return [_action(start, end, origin) for start, end in actions]


def _same_action(start: dict[str, Any], end: dict[str, Any]) -> bool:
    return start.get("action") == end.get("action") and start.get("target") == end.get("target")


def _action(start: dict[str, Any], end: dict[str, Any] | None, origin: float) -> ChaosAction:
    finish = end or {}
    return ChaosAction(action=str(start.get("action")), target=_text_or_none(start.get("target")),
                       start=_since(start.get("t"), origin), end=_since(finish.get("t"), origin),
                       ok=finish.get("ok") if end is not None else None,
                       detail=finish.get("detail", start.get("detail")), error=finish.get("error"))


# --- the timeline -------------------------------------------------------------------------------


@dataclass
class Timeline(JournalView):
    """The timed records reports plot: when rounds, flows and rejections happened, relative to the run start."""

    started: float | None = None
    last: float | None = None
    rounds: list[tuple[float, float]] = field(default_factory=list)  # (t, latency)
    flows: list[tuple[float, str]] = field(default_factory=list)  # (t, outcome)
    rejections: list[tuple[float, str, str]] = field(default_factory=list)  # (t, replica, reason)

    @classmethod
    def from_figures(cls, figures: RunFigures) -> Timeline:
        """A best effort without the records: rows keep `t` only if `RunFigures` one day keeps it."""
        timeline = cls(started=figures.started)
        for row in figures.rounds:
            timeline.add({"type": RecordType.ROUND, **row.as_dict()})
        for flow in figures.flows:
            timeline.add({"type": RecordType.FLOW, **flow.as_dict()})
        return timeline

    def add(self, record: Mapping[str, Any]) -> None:
        t = record.get("t")
        if not isinstance(t, int | float):
            return
        kind = record.get("type")
        self.started = advance_time_zero(self.started, record)
        self.last = t if self.last is None else max(self.last, t)
        if kind == RecordType.ROUND and isinstance(record.get("latency"), int | float):
            self.rounds.append((t, float(record["latency"])))
        elif kind == RecordType.FLOW:
            self.flows.append((t, str(record.get("outcome"))))
        elif kind == RecordType.REJECTION:
            self.rejections.append((t, str(record.get("replica")), str(record.get("reason"))))

    @property
    def origin(self) -> float:
        """Zero on the x axis: the run start, or the first timed record of a journal that lost it."""
        if self.started is not None:
            return self.started
        times = [row[0] for row in self.rounds] + [row[0] for row in self.flows] + [row[0] for row in self.rejections]
        return min(times) if times else 0.0

    def span(self, duration: float = 0.0) -> float:
        """Seconds the plots cover: the run's duration, or longer if records came later (the grace period)."""
        last = (self.last - self.origin) if self.last is not None else 0.0
        return max(duration, last, 1.0)

    def bins(self, duration: float = 0.0) -> Bins:
        span = self.span(duration)
        width = next((w for w in _BIN_WIDTHS if span / w <= _MAX_BINS), _BIN_WIDTHS[-1])
        return Bins(width=float(width), count=max(1, math.ceil(span / width)), origin=self.origin)

    def flow_rates(self, bins: Bins) -> dict[str, list[float]]:
        """Flows finished per second, by outcome, per bin."""
        counts: dict[str, list[float]] = {}
        for t, outcome in self.flows:
            counts.setdefault(outcome, [0.0] * bins.count)[bins.index(t)] += 1
        return {outcome: [n / bins.width for n in counts[outcome]] for outcome in ordered_outcomes(counts)}

    def latency_percentiles(self, bins: Bins) -> dict[str, list[float | None]]:
        """Round latency p50/p95/p99 per bin, in seconds; None where no round finished."""
        samples: list[list[float]] = [[] for _ in range(bins.count)]
        for t, latency in self.rounds:
            samples[bins.index(t)].append(latency)
        ordered = [sorted(values) for values in samples]
        return {f"p{pct:g}": [percentile(values, pct) if values else None for values in ordered]
                for pct in PERCENTILES}

    def rejection_counts(self, bins: Bins) -> dict[str, dict[str, list[float]]]:
        """Per replica, rejections per bin by reason: counts, not rates, since rejections are few and each matters."""
        table: dict[str, dict[str, list[float]]] = {}
        for t, replica, reason in sorted(self.rejections):
            table.setdefault(replica, {}).setdefault(reason, [0.0] * bins.count)[bins.index(t)] += 1
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
    return float(t) - origin if isinstance(t, int | float) else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _text_or_none(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)
