"""The numbers the reports show beyond the verdict: spreads per flow and round, and the chaos actions' spans.

Spreads are read through `RunFigures.distribution` and use the thresholds' nearest-rank
percentile, so a p95 in the summary or the HTML is the very number a threshold on it
observed. The series over run time are folded by `harness.folding.over_time.Timeline`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.folding.figures import _NUMBER, FaultWindow, RoundKey, RunFigures
from harness.folding.health import Slope
from harness.folding.over_time import PERCENTILES, Bins, Timeline, ordered_outcomes
from harness.journal.distributions import Counts, Distribution, merged_counts
from harness.journal.distributions import nearest_rank as _nearest_rank
from harness.journal.records import ChaosPhase

__all__ = ["PERCENTILES", "Bins", "ChaosAction", "Timeline", "chaos_actions", "ordered_outcomes", "percentile",
           "replica_health_series", "replica_rss_slopes", "request_state_bytes", "round_latency", "rounds_per_call",
           "spread", "state_size_table"]



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


def request_state_bytes(figures: RunFigures) -> dict[str, dict[str, dict[str, float | int | None]]]:
    """Per flow and round number: the size of the `requestState` the round's answer carried (bytes, exact), for
    the rounds that carried one: what each retry sends back, and what a server's state costs on the wire."""
    return state_size_table(figures.state_bytes)


def state_size_table(sizes: Mapping[RoundKey, Counts]) -> dict[str, dict[str, dict[str, float | int | None]]]:
    """`request_state_bytes` from the sizes by (flow, tool, round) alone (what the live fold sends the web UI)."""
    parts: dict[tuple[str, int], list[Counts]] = {}
    for (flow, _, number), counts in sizes.items():
        if flow != "None":
            parts.setdefault((flow, number), []).append(counts)
    table: dict[str, dict[str, dict[str, float | int | None]]] = {}
    for (flow, number), merged in sorted(parts.items()):
        table.setdefault(flow, {})[str(number)] = spread(merged_counts(merged), with_max=True)
    return table


def rounds_histogram(figures: RunFigures, flow: str, top: int = 10) -> list[int]:
    """Calls per round count 1..top (the last bucket holds `top` and beyond), like `mrtr_rounds_per_call`."""
    buckets = [0] * top
    counts = figures.distribution("rounds_per_call", {"flow": flow})
    assert isinstance(counts, Counts)
    for rounds, n in counts.items():
        buckets[min(int(rounds), top) - 1] += n
    return buckets


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


def _since(t: Any, origin: float) -> float | None:
    return float(t) - origin if isinstance(t, _NUMBER) else None


def replica_health_series(figures: RunFigures) -> dict[str, dict[str, list[tuple[float, float | None]]]]:
    """Per replica, its health over run time (seconds from the load's start): `rss_mb`, `cpu_percent` (of one core,
    between two samples; None across a restart, where its CPU seconds start again), `open_fds` and `threads`."""
    table: dict[str, dict[str, list[tuple[float, float | None]]]] = {}
    for replica, series in sorted(figures.health.replicas.items()):
        origin = figures.started if figures.started is not None else series.points[0][0]
        rows: dict[str, list[tuple[float, float | None]]] = {"rss_mb": [], "cpu_percent": [], "open_fds": [],
                                                              "threads": []}
        previous: tuple[float, float | None] | None = None
        for t, rss, cpu, fds, threads in series.points:
            x = max(0.0, t - origin)
            rows["rss_mb"].append((x, rss))
            rows["open_fds"].append((x, None if fds is None else float(fds)))
            rows["threads"].append((x, None if threads is None else float(threads)))
            if previous is not None and previous[1] is not None and cpu is not None and t > previous[0] \
                    and cpu >= previous[1]:
                rows["cpu_percent"].append((x, 100 * (cpu - previous[1]) / (t - previous[0])))
            else:
                rows["cpu_percent"].append((x, None))
            previous = (t, cpu)
        table[replica] = rows
    return table


def replica_rss_slopes(figures: RunFigures) -> dict[str, Slope | None]:
    """Each sampled replica's resident-memory slope after the warm-up (None: too few samples to fit one)."""
    return {replica: figures.health.rss_growth(replica, figures.started) for replica in sorted(figures.health.replicas)}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _text_or_none(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)
