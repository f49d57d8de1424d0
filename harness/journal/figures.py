"""The run's figures, derived from its journal alone: what thresholds, reports and verdicts read.

Reading the journal (not live counters) means a summary can be rebuilt after the fact
from any results folder, including one a killed run left behind, and that every report
agrees with every other.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, Self, TypeVar

from harness.journal.records import FlowOutcome, RecordType, RunEvent, advance_time_zero
from harness.journal.writer import JournalView

_NOT_FINISHED = {FlowOutcome.INTERRUPTED.value}


class Fields(Protocol):
    """What reads a row by column name: a journal record (a dict) or a `Row`."""

    def __getitem__(self, key: str, /) -> Any: ...
    def get(self, key: str, default: Any = None, /) -> Any: ...


class Row(tuple[Any, ...]):
    """A figure's row: a tuple that reads like the dict it stands for (`row["latency"]`, `row.get("t")`).

    A live run keeps one row per start, round, call and flow; at 100,000 flows waiting on
    leads a dict per row was a tenth of the load process's memory, a tuple of the same
    values a third of that. Each subclass names its columns once, in `columns`.
    """

    __slots__ = ()
    columns: ClassVar[tuple[str, ...]] = ()
    _index: ClassVar[dict[str, int]] = {}

    def __init_subclass__(cls) -> None:
        cls._index = {name: i for i, name in enumerate(cls.columns)}

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> Self:
        return cls(map(record.get, cls.columns))

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        index = self._index.get(key)
        return default if index is None else tuple.__getitem__(self, index)

    def as_dict(self) -> dict[str, Any]:
        return dict(zip(self.columns, self, strict=True))


class StartRow(Row):
    __slots__ = ()
    columns = ("flow", "flow_id")


class RoundRow(Row):
    __slots__ = ()
    columns = ("t", "flow", "round", "latency", "outcome", "code", "replica", "crossed")


class FlowRow(Row):
    __slots__ = ()
    columns = ("t", "flow_id", "flow", "outcome", "rounds", "duration", "think_time", "late", "quote_id", "held",
               "answers", "refund_id", "mutation", "mutant_answer", "mutant_detail", "mutant_length")


class CallRow(Row):
    __slots__ = ()
    columns = ("t", "flow", "rounds")


R = TypeVar("R", bound=Row)


@dataclass
class RunFigures(JournalView):
    """Flows, rounds, rejections and checks of one run, with the lookups thresholds need."""

    duration: float = 0.0
    flows: list[FlowRow] = field(default_factory=list)
    rounds: list[RoundRow] = field(default_factory=list)
    starts: list[StartRow] = field(default_factory=list)
    calls: list[CallRow] = field(default_factory=list)
    rejections: Counter[tuple[str, str]] = field(default_factory=Counter)
    replica_rounds: Counter[str] = field(default_factory=Counter)
    """Rounds each replica served (CPU per round is accounted per replica)."""
    violations: Counter[str] = field(default_factory=Counter)
    chaos: list[dict[str, Any]] = field(default_factory=list)
    started: float | None = None
    unexplained: int = 0
    unmatched_logged: int = 0
    client_rejections: int = 0
    status: str | None = None

    def add(self, record: Mapping[str, Any]) -> None:
        kind = record.get("type")
        if kind == RecordType.START:
            self.starts.append(StartRow.of(record))
        elif kind == RecordType.ROUND:
            self.rounds.append(RoundRow.of(record))
            self.replica_rounds[str(record.get("replica"))] += 1
        elif kind == RecordType.FLOW:
            self.flows.append(FlowRow.of(record))
            self.calls.extend(CallRow((record.get("t"), record.get("flow"), call.get("rounds")))
                              for call in record.get("calls") or [])
        elif kind == RecordType.REJECTION:
            self.rejections[(record["replica"], record["reason"])] += 1
        elif kind == RecordType.INVARIANT:
            self.violations[record["invariant"]] += int(record.get("violations", 0))
        elif kind == RecordType.RECONCILIATION:
            self.unexplained = int(record["unexplained"])
            self.unmatched_logged = int(record.get("unmatched_logged") or 0)
            self.client_rejections = int(record["client_rejections"])
        elif kind == RecordType.CHAOS:
            self.chaos.append(dict(record))
        elif kind == RecordType.RUN:
            self._run_event(record)

    def _run_event(self, record: Mapping[str, Any]) -> None:
        self.started = advance_time_zero(self.started, record)
        event = record.get("event")
        if event == RunEvent.LOAD_STOPPED and self.started is not None:
            self.duration = record["t"] - self.started
        elif event == RunEvent.END:
            self.status = record.get("status")
            if self.started is not None and not self.duration:
                self.duration = record["t"] - self.started

    def since(self, t: float) -> RunFigures:
        """The flows, rounds and calls that ended at or after `t` (a hypothesis window); the rest as is."""
        view = RunFigures(duration=self.duration, rejections=self.rejections, violations=self.violations,
                          chaos=self.chaos, started=self.started, unexplained=self.unexplained,
                          unmatched_logged=self.unmatched_logged,
                          client_rejections=self.client_rejections, status=self.status)
        view.flows = [row for row in self.flows if (row.get("t") or 0) >= t]
        view.rounds = [row for row in self.rounds if (row.get("t") or 0) >= t]
        view.calls = [row for row in self.calls if (row.get("t") or 0) >= t]
        view.starts = self.starts
        return view

    # --- lookups for thresholds --------------------------------------------------------------

    def count(self, metric: str, selector: dict[str, str]) -> float:
        if metric == "flows_started":
            return float(len(_select(self.starts, selector)))
        if metric == "flows_finished":
            return float(len(_select(self.flows, selector)))
        if metric == "rejections":
            return float(sum(n for (replica, reason), n in self.rejections.items()
                             if _matches({"replica": replica, "reason": reason}, selector)))
        if metric == "unexplained_rejections":
            return float(self.unexplained)
        if metric == "unmatched_logged_rejections":
            return float(self.unmatched_logged)
        if metric == "invariant_violations":
            return float(sum(n for name, n in self.violations.items() if _matches({"invariant": name}, selector)))
        if metric == "client_errors":
            return float(sum(1 for row in self.rounds if row["code"] is not None and
                             _matches({"flow": row["flow"], "code": str(row["code"])}, selector)))
        if metric == "late_starts":
            return float(sum(1 for row in self.flows if row.get("late")))
        if metric == "chaos_failures":
            return float(sum(1 for row in self.chaos if row.get("phase") == "end" and not row.get("ok", True)
                             and _matches({"action": row.get("action")}, selector)))
        raise KeyError(metric)

    def ratio(self, metric: str, selector: dict[str, str]) -> float | None:
        if metric == "crossed_replica_share":
            crossed, continuations = self.crossings(selector)
            return crossed / continuations if continuations else None
        if metric == "rejection_share":
            total = sum(self.rejections.values())
            return self.count("rejections", selector) / total if total else 0.0
        flow_selector = {k: v for k, v in selector.items() if k == "flow"}
        finished = [row for row in _select(self.flows, flow_selector) if row["outcome"] not in _NOT_FINISHED]
        if not finished:
            return None
        outcome = FlowOutcome.COMPLETED.value if metric == "completed_ratio" else selector.get("outcome")
        return sum(1 for row in finished if outcome is None or row["outcome"] == outcome) / len(finished)

    def distribution(self, metric: str, selector: dict[str, str]) -> list[float]:
        if metric == "round_duration":
            return [row["latency"] for row in self.rounds if row["latency"] is not None and
                    _matches({"flow": row["flow"], "round": str(row["round"])}, selector)]
        if metric == "rounds_per_call":
            return [row["rounds"] for row in _select(self.calls, selector) if row["rounds"]]
        column = {"flow_duration": "duration", "think_time": "think_time"}[metric]
        return [row[column] for row in _select(self.flows, selector) if row.get(column) is not None]

    def crossings(self, selector: dict[str, str] | None = None) -> tuple[int, int]:
        """(continuation rounds a replica other than the previous round's served, continuation rounds)."""
        marks = [row["crossed"] for row in self.rounds if row["crossed"] is not None
                 and (not selector or _matches(row, selector))]
        return sum(marks), len(marks)

    # --- the summary's figures ------------------------------------------------------------------

    def outcomes(self) -> dict[str, dict[str, int]]:
        table: dict[str, dict[str, int]] = {}
        for row in self.flows:
            table.setdefault(row["flow"], {}).setdefault(row["outcome"], 0)
            table[row["flow"]][row["outcome"]] += 1
        return table

    def rejections_by_reason(self) -> dict[str, dict[str, int]]:
        table: dict[str, dict[str, int]] = {}
        for (replica, reason), count in sorted(self.rejections.items()):
            table.setdefault(reason, {})[replica] = count
        return table


def _matches(labels: Fields, selector: dict[str, str]) -> bool:
    return all(str(labels.get(name)) == value for name, value in selector.items())


def _select(rows: list[R], selector: dict[str, str]) -> list[R]:
    return [row for row in rows if _matches(row, selector)]
