"""The run's figures, derived from its journal alone: what thresholds, reports and verdicts read.

Reading the journal (not live counters) means a summary can be rebuilt after the fact
from any results folder, including one a killed run left behind, and that every report
agrees with every other.

Their size does not depend on the run's length: counts are counters keyed by the labels
thresholds select on, distributions are `Sketch`es (times, within 1%) or `Counts` (rounds
per call, exact) per flow, tool and round, and a hypothesis window is a second
`RunFigures` fed from the moment it opens (`window`). docs/figures.md states the error
bound and how a threshold at the band's edge is judged.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.config.chaos import touches
from harness.config.metric_table import METRICS, Gate, Kind, gated
from harness.folding.health import HealthFigures, Slope
from harness.folding.races import RaceFigures
from harness.journal.distributions import Counts, Sketch, merged_counts, merged_sketch
from harness.journal.plain import TRANSIENT
from harness.journal.records import FlowOutcome, RecordType, RunEvent, advance_time_zero
from harness.journal.writer import JournalView
from harness.vocabulary import AUTH_OUTCOMES

_NOT_FINISHED = {FlowOutcome.INTERRUPTED.value}
_START, _ROUND, _FLOW = RecordType.START.value, RecordType.ROUND.value, RecordType.FLOW.value
"""The most frequent records' types, as plain strings: a plain comparison costs less than an enum member's.
Rounds and flows are the records a window keeps only from its start on (the rest, rejections and checks, are
the run's)."""

_NUMBER = (int, float)
"""`isinstance`'s tuple: a union (`int | float`) is built again at every call of the fold."""
RoundKey = tuple[str, str, int]
"""(flow, tool, round number): the finest level round latency is kept at."""
CallKey = tuple[str, str]
"""(flow, tool): rounds per call are kept per tool of each flow."""


@dataclass
class FaultWindow:
    """A network fault's window and the rounds sent into it on the replicas it named, by outcome.

    The proxy counts the exchanges a fault hit; which rounds those were, and how they ended,
    only the rounds' own records say: a round counts here when it was sent to a faulted
    replica while the fault was on (its answer may come after the fault ended).
    """

    start: float
    target: str
    end: float | None = None
    rounds: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(replica, outcome) -> rounds."""

    def add(self, record: Mapping[str, Any]) -> None:
        sent, replica = record.get("sent"), str(record.get("replica"))
        if not isinstance(sent, _NUMBER) or sent < self.start or (self.end is not None and sent > self.end):
            return
        if touches(self.target, replica):
            self.rounds[(replica, str(record.get("outcome")))] += 1

    def by_replica(self) -> dict[str, dict[str, int]]:
        table: dict[str, dict[str, int]] = {}
        for (replica, outcome), n in sorted(self.rounds.items()):
            table.setdefault(replica, {})[outcome] = n
        return table


@dataclass
class RunFigures(JournalView):
    """Flows, rounds, rejections and checks of one run, with the lookups thresholds need."""

    duration: float = 0.0
    since: float | None = None
    """A window's start: rounds and flows that ended before it are not this window's."""
    started_by_flow: Counter[str] = field(default_factory=Counter)
    finished: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Finished flows by (flow, outcome)."""
    late: int = 0
    rounds: int = 0
    client_errors: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Rounds that ended with a JSON-RPC code or failure class, by (flow, code)."""
    crossed: Counter[str] = field(default_factory=Counter)
    continuations: Counter[str] = field(default_factory=Counter)
    """Per flow: continuation rounds (round 2 and later), and those another replica than the previous one served."""
    latency: dict[RoundKey, Sketch] = field(default_factory=dict)
    rounds_per_call: dict[CallKey, Counts] = field(default_factory=dict)
    state_bytes: dict[RoundKey, Counts] = field(default_factory=dict)
    """The `requestState` sizes the rounds' answers carried, in bytes, exactly (a server's states take few sizes)."""
    flow_duration: dict[str, Sketch] = field(default_factory=dict)
    think_time: Sketch = field(default_factory=Sketch)
    rejections: Counter[tuple[str, str]] = field(default_factory=Counter)
    replica_rounds: Counter[str] = field(default_factory=Counter)
    """Rounds each replica served (CPU per round is accounted per replica)."""
    violations: Counter[str] = field(default_factory=Counter)
    chaos: list[dict[str, Any]] = field(default_factory=list)
    started: float | None = None
    unexplained: int = 0
    unmatched_logged: int = 0
    client_rejections: int = 0
    redispatched: Counter[str] = field(default_factory=Counter)
    """Re-dispatched rounds (their replica was down, so they went to another): `rounds`, and `rejections`
    among them (-32602)."""
    auth_refusals: Counter[tuple[str, str, int, str]] = field(default_factory=Counter)
    """Rounds the resource server refused for their token (401) or scope (403), by (flow, tool, round, outcome)."""
    auth_retries: Counter[str] = field(default_factory=Counter)
    """Per flow: rounds resent once after a 401 `invalid_token` renewed the lead's token."""
    envelope_mutants: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Envelope mutants sent by fuzz flows, by class and answer (`harness.load.envelope.EnvelopeAnswer`)."""
    output_mismatches: Counter[str] = field(default_factory=Counter)
    """Per tool: completed results that break its declared outputSchema (`harness.load.output_contracts`)."""
    output_mismatch_examples: dict[str, str] = field(default_factory=dict)
    """Per tool: the first such mismatch, as the round record said it (where, and which keyword)."""
    status: str | None = None
    windows: list[RunFigures] = field(default_factory=list, metadata=TRANSIENT)
    """The hypothesis windows fed from this fold: the live run's probes, not figures of its results (never saved)."""
    faults: list[FaultWindow] = field(default_factory=list)
    """Each network fault's window, in the order they started, with the rounds sent into it."""
    by_host: HostFigures = field(default_factory=lambda: HostFigures())
    """Finished flows, failed rounds and rounds per call again, by host (`[[hosts]]`)."""
    health: HealthFigures = field(default_factory=HealthFigures)
    """Each replica's resident memory, CPU, descriptors and threads over the run (`health` records)."""
    races: RaceFigures = field(default_factory=RaceFigures)
    """The race probes: each `race` flow's race, its answers and its calls' watchdog (`harness.folding.races`)."""
    cold_start: dict[str, Sketch] = field(default_factory=dict)
    """Per replica label: its processes' cold starts, spawn to first answer, in seconds (`cold_start` records)."""

    def __getstate__(self) -> dict[str, Any]:
        """Sent over the fold's pipe (`harness.run.live_fold`) without the hypothesis windows: the live run's probes."""
        return {**self.__dict__, "windows": []}

    def add(self, record: Mapping[str, Any]) -> None:
        if add_by_kind(self, record):
            return
        kind = record.get("type")
        if kind == RecordType.REJECTION:
            self.rejections[(record["replica"], record["reason"])] += 1
        elif kind == RecordType.INVARIANT:
            self.violations[record["invariant"]] += int(record.get("violations", 0))
        elif kind == RecordType.RECONCILIATION:
            self.unexplained = int(record["unexplained"])
            self.unmatched_logged = int(record.get("unmatched_logged") or 0)
            self.client_rejections = int(record["client_rejections"])
        elif kind == RecordType.CHAOS:
            self.chaos.append(dict(record))
            if record.get("action") == "network":
                self._fault(record)
        elif kind == RecordType.RUN:
            self._run_event(record)
        elif kind == RecordType.HEALTH:
            self.health.add(record)
        elif kind == RecordType.COLD_START:
            seconds = record.get("seconds")
            if isinstance(seconds, _NUMBER) and not isinstance(seconds, bool) and 0 <= seconds < float("inf"):
                self.cold_start.setdefault(str(record.get("replica")), Sketch()).add(float(seconds))

    def add_start(self, record: Mapping[str, Any]) -> None:
        """`add` for a flow's `start` record (`harness.folding.read` routes each kind straight to its own)."""
        self.started_by_flow[str(record.get("flow"))] += 1

    def add_round(self, record: Mapping[str, Any]) -> None:
        """`add` for a `round` record: the most frequent one, so every lookup in it counts."""
        for window in self.windows:
            window.add_round(record)
        get = record.get
        if self.since is not None and (get("t") or 0) < self.since:
            return
        flow = str(get("flow"))
        self.rounds += 1
        self.replica_rounds[str(get("replica"))] += 1
        latency, number = get("latency"), get("round")
        if not isinstance(number, int):
            number = 0
        if isinstance(latency, _NUMBER) and not isinstance(latency, bool):
            key = (flow, str(get("tool")), number)
            sketch = self.latency.get(key)
            if sketch is None:
                sketch = self.latency[key] = Sketch()
            sketch.add(float(latency))
        size = get("state_bytes")
        if type(size) is int:
            self._state_size((flow, str(get("tool")), number), size)
        code = get("code")
        if code is not None:
            self.client_errors[(flow, str(code))] += 1
            self.by_host.errors[(str(get("host", DEFAULT_HOST_NAME)), flow, str(code))] += 1
        outcome = get("outcome")
        if outcome in AUTH_OUTCOMES:
            self.auth_refusals[(flow, str(get("tool")), number, str(outcome))] += 1
        if get("auth_retry"):
            self.auth_retries[flow] += 1
        mismatch = get("output_mismatch")
        if mismatch is not None:
            tool = str(get("tool"))
            self.output_mismatches[tool] += 1
            self.output_mismatch_examples.setdefault(tool, str(mismatch))
        crossed = get("crossed")
        if crossed is not None:
            self.continuations[flow] += 1
            self.crossed[flow] += bool(crossed)
        for fault in self.faults:
            fault.add(record)
        if get("redispatched_from"):
            self.redispatched["rounds"] += 1
            self.redispatched["rejections"] += outcome == "invalid_state"  # Outcome.INVALID_STATE

    def _state_size(self, key: RoundKey, size: int) -> None:
        counts = self.state_bytes.get(key)
        if counts is None:
            counts = self.state_bytes[key] = Counts()
        counts.add(size)

    def add_flow(self, record: Mapping[str, Any]) -> None:
        """`add` for a flow's outcome (`flow` record)."""
        for window in self.windows:
            window.add_flow(record)
        get = record.get
        if self.since is not None and (get("t") or 0) < self.since:
            return
        flow, outcome, host = str(get("flow")), str(get("outcome")), str(get("host", DEFAULT_HOST_NAME))
        self.finished[(flow, outcome)] += 1
        by_host = self.by_host
        by_host.finished[(host, flow, outcome)] += 1
        for call in get("calls") or []:  # first, as before: `calls` that is no list leaves the rest of the flow out
            rounds = call.get("rounds") if is_mapping(call) else None
            if isinstance(rounds, int) and rounds > 0:
                key = (flow, str(call.get("tool")))
                counts = self.rounds_per_call.get(key)
                if counts is None:
                    counts = self.rounds_per_call[key] = Counts()
                counts.add(rounds)
                counts = by_host.rounds_per_call.get((host, flow))
                if counts is None:
                    counts = by_host.rounds_per_call[(host, flow)] = Counts()
                counts.add(rounds)
        if get("late"):
            self.late += 1
        if get("race") is not None:
            self.races.add(record)
        if get("envelope_mutation") is not None:
            self.envelope_mutants[(str(get("envelope_mutation")), str(get("envelope_answer")))] += 1
        duration, think = get("duration"), get("think_time")
        if isinstance(duration, _NUMBER):
            sketch = self.flow_duration.get(flow)
            if sketch is None:
                sketch = self.flow_duration[flow] = Sketch()
            sketch.add(float(duration))
        if isinstance(think, _NUMBER):
            self.think_time.add(float(think))

    def _fault(self, record: Mapping[str, Any]) -> None:
        """A network fault's start opens its window; its end closes the oldest open one of the same target."""
        t, target = float(record.get("t") or 0.0), str(record.get("target"))
        if record.get("phase") == "start":
            self.faults.append(FaultWindow(start=t, target=target))
            return
        window = next((fault for fault in self.faults if fault.end is None and fault.target == target), None)
        if window is not None:
            window.end = t

    def _run_event(self, record: Mapping[str, Any]) -> None:
        self.started = advance_time_zero(self.started, record)
        event = record.get("event")
        if event == RunEvent.LOAD_STOPPED and self.started is not None:
            self.duration = record["t"] - self.started
        elif event == RunEvent.END:
            self.status = record.get("status")
            if self.started is not None and not self.duration:
                self.duration = record["t"] - self.started

    def window(self, t: float) -> RunFigures:
        """A window's figures (a hypothesis probe's), fed from now on: rounds and flows that end at or after `t`.

        Starts, rejections, checks and chaos are the whole run's (shared, not copied), as before.
        """
        view = RunFigures(duration=self.duration, since=t, rejections=self.rejections, violations=self.violations,
                          chaos=self.chaos, started=self.started, unexplained=self.unexplained,
                          unmatched_logged=self.unmatched_logged, client_rejections=self.client_rejections,
                          status=self.status)
        view.started_by_flow = self.started_by_flow
        self.windows.append(view)
        return view

    def close(self, window: RunFigures) -> None:
        """Stop feeding a window (its probe is over)."""
        self.windows = [view for view in self.windows if view is not window]

    @classmethod
    def from_records_since(cls, records: Iterable[Mapping[str, Any]], t: float) -> RunFigures:
        """The figures of the rounds and flows that ended at or after `t`; the rest as is (a capacity step's window)."""
        figures = cls(since=t)
        for record in records:
            figures.add(record)
        return figures

    # --- lookups for thresholds --------------------------------------------------------------

    @property
    def flows(self) -> int:
        """Flows that ended (interrupted ones included)."""
        return self.finished.total()

    def count(self, metric: str, selector: dict[str, str]) -> float:
        """A count metric's value over what `selector` picks (`KeyError`: no count of that name)."""
        return float(_computation(metric, Kind.COUNT)(self, selector))

    def ratio(self, metric: str, selector: dict[str, str]) -> float | None:
        """A ratio metric's value (0 to 1), None when it has nothing to divide by."""
        value: float | None = _computation(metric, Kind.RATIO)(self, selector)
        return value

    def distribution(self, metric: str, selector: dict[str, str]) -> Sketch | Counts:
        """The samples of a distribution metric that `selector` picks, merged into one sketch (or exact counts)."""
        values: Sketch | Counts = _computation(metric, Kind.DISTRIBUTION)(self, selector)
        return values

    def output_contracts(self) -> dict[str, dict[str, Any]]:
        """Per tool with a mismatch: how many of its results broke its declared outputSchema, and the first way."""
        return {tool: {"mismatches": count, "example": self.output_mismatch_examples.get(tool, "")}
                for tool, count in sorted(self.output_mismatches.items())}

    def cold_starts(self) -> dict[str, dict[str, float | int | None]]:
        """Per replica label with a `cold_start` record: how many processes, and their spawn-to-first-answer seconds
        (p50, p95, p99, max), as every report shows them."""
        return {replica: {"count": sketch.count,
                          **{f"p{pct}": _rounded(sketch.percentile(pct)) for pct in (50, 95, 99)},
                          "max": _rounded(sketch.maximum)}
                for replica, sketch in sorted(self.cold_start.items())}

    def slopes(self, metric: str, selector: dict[str, str]) -> list[Slope]:
        """A slope metric's fit for each replica `selector` picks that has one (none fitted: an empty list)."""
        fitted: list[Slope] = _computation(metric, Kind.SLOPE)(self, selector)
        return fitted

    def breakdown(self, metric: str) -> Counter[tuple[str, ...]]:
        """An exactly gated count by its `gate_labels` values (compare's rows): every key seen, zeros included."""
        return BREAKDOWNS[metric](self)

    def crossings(self, selector: dict[str, str] | None = None) -> tuple[int, int]:
        """(continuation rounds a replica other than the previous round's served, continuation rounds)."""
        flows = [flow for flow in self.continuations if not selector or _matches({"flow": flow}, selector)]
        return sum(self.crossed[flow] for flow in flows), sum(self.continuations[flow] for flow in flows)

    # --- the summary's figures ------------------------------------------------------------------

    def flow_names(self) -> list[str]:
        """Every flow kind that finished a flow or a round."""
        return sorted({flow for flow, _ in self.finished} | {flow for flow, _, _ in self.latency}
                      | {flow for flow, _ in self.rounds_per_call})

    def round_numbers(self, flow: str) -> list[int]:
        return sorted({number for name, _, number in self.latency if name == flow})

    def outcomes(self) -> dict[str, dict[str, int]]:
        table: dict[str, dict[str, int]] = {}
        for (flow, outcome), n in self.finished.items():
            table.setdefault(flow, {})[outcome] = n
        return table

    def hosts(self) -> dict[str, dict[str, Any]]:
        """The summary's breakdown by host: each host's flows by outcome and failed rounds by code."""
        return self.by_host.table()

    def rejections_by_reason(self) -> dict[str, dict[str, int]]:
        table: dict[str, dict[str, int]] = {}
        for (replica, reason), count in sorted(self.rejections.items()):
            table.setdefault(reason, {})[replica] = count
        return table


DEFAULT_HOST_NAME = "default"
"""The host of a round or flow whose record names none (one journaled before hosts were; `DEFAULT_HOST`'s name)."""


@dataclass
class HostFigures:
    """The by-host side of a run's figures: what `[[hosts]]` breaks down (outcomes, error codes, rounds per call)."""

    finished: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    """Finished flows by (host, flow, outcome)."""
    errors: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    """Failed rounds by (host, flow, code)."""
    rounds_per_call: dict[tuple[str, str], Counts] = field(default_factory=dict)
    """Rounds per call by (host, flow). `RunFigures.add_flow` fills both tables, in the pass over a flow's calls that
    counts its rounds per call."""

    def count(self, metric: str, selector: dict[str, str]) -> float:
        if metric == "flows_finished":
            return float(sum(n for (host, flow, outcome), n in self.finished.items()
                             if _matches({"host": host, "flow": flow, "outcome": outcome}, selector)))
        return float(sum(n for (host, flow, code), n in self.errors.items()
                         if _matches({"host": host, "flow": flow, "code": code}, selector)))

    def finished_of(self, selector: dict[str, str]) -> dict[tuple[str, str], int]:
        """Finished flows (interrupted ones aside) that `selector` picks, by (flow, outcome)."""
        picked: Counter[tuple[str, str]] = Counter()
        for (host, flow, outcome), n in self.finished.items():
            if outcome not in _NOT_FINISHED and _matches({"host": host, "flow": flow}, selector):
                picked[(flow, outcome)] += n
        return dict(picked)

    def table(self) -> dict[str, dict[str, Any]]:
        """{host: {"outcomes": {outcome: n}, "errors": {code: n}, "flows": n}}, hosts by name."""
        table: dict[str, dict[str, Any]] = {}
        for (host, _, outcome), n in sorted(self.finished.items()):
            row = table.setdefault(host, {"flows": 0, "outcomes": {}, "errors": {}})
            row["flows"] += n
            row["outcomes"][outcome] = row["outcomes"].get(outcome, 0) + n
        for (host, _, code), n in sorted(self.errors.items()):
            row = table.setdefault(host, {"flows": 0, "outcomes": {}, "errors": {}})
            row["errors"][code] = row["errors"].get(code, 0) + n
        return table


class FlowRecordFolds(Protocol):
    """A fold with a method of its own for each of a flow's records, which a reader may call straight."""

    def add_start(self, record: Mapping[str, Any]) -> None: ...
    def add_round(self, record: Mapping[str, Any]) -> None: ...
    def add_flow(self, record: Mapping[str, Any]) -> None: ...


def add_by_kind(fold: FlowRecordFolds, record: Mapping[str, Any]) -> bool:
    """A flow's own record (start, round, flow) into `fold`'s method for its kind; False for any other record."""
    kind = record.get("type")
    if kind == _ROUND:
        fold.add_round(record)
    elif kind == _FLOW:
        fold.add_flow(record)
    elif kind == _START:
        fold.add_start(record)
    else:
        return False
    return True


def is_mapping(value: object) -> bool:
    """`isinstance(value, Mapping)`, with JSON's own dict first: the ABC's check costs more than the rest of a fold."""
    return type(value) is dict or isinstance(value, Mapping)


def _matches(labels: Mapping[str, Any], selector: dict[str, str]) -> bool:
    return all(str(labels.get(name)) == value for name, value in selector.items())


# --- each metric's computation: the figures' half of its declaration (`harness.config.metric_table`) ----------

Computation = Callable[[RunFigures, dict[str, str]], Any]
"""A metric's value over what a selector picks: a count, a ratio (None: nothing to divide by) or a distribution."""
Breakdown = Callable[[RunFigures], Counter[tuple[str, ...]]]

COMPUTATIONS: dict[str, Computation] = {}
"""Every threshold metric's computation, by name: filled by `@computes`."""
BREAKDOWNS: dict[str, Breakdown] = {}
"""Every exactly gated count by its `gate_labels` values, by name: filled by `@breaks_down`."""


def computes(name: str) -> Callable[[Computation], Computation]:
    """Register the function as the computation of the declared metric `name`."""
    def register(function: Computation) -> Computation:
        _register(COMPUTATIONS, name, function)
        return function
    return register


def breaks_down(name: str) -> Callable[[Breakdown], Breakdown]:
    """Register the function as the declared exact gate `name`'s counts by its `gate_labels` (compare's rows)."""
    def register(function: Breakdown) -> Breakdown:
        _register(BREAKDOWNS, name, function)
        return function
    return register


def _register(table: dict[str, Any], name: str, function: Any) -> None:
    if name not in METRICS or name in table:
        raise TypeError(f"{function.__name__}: metric {name!r} is "
                        f"{'computed twice' if name in table else 'not declared in harness.config.metric_table'}")
    table[name] = function


def _computation(metric: str, kind: Kind) -> Computation:
    declared = METRICS.get(metric)
    if declared is None or declared.kind is not kind:
        raise KeyError(metric)
    return COMPUTATIONS[metric]


@computes("flows_started")
def _flows_started(figures: RunFigures, selector: dict[str, str]) -> int:
    return sum(n for flow, n in figures.started_by_flow.items() if _matches({"flow": flow}, selector))


@computes("flows_finished")
def _flows_finished(figures: RunFigures, selector: dict[str, str]) -> float:
    if "host" in selector:
        return figures.by_host.count("flows_finished", selector)
    return sum(n for (flow, outcome), n in figures.finished.items()
               if _matches({"flow": flow, "outcome": outcome}, selector))


@computes("rejections")
def _rejections(figures: RunFigures, selector: dict[str, str]) -> int:
    return sum(n for (replica, reason), n in figures.rejections.items()
               if _matches({"replica": replica, "reason": reason}, selector))


@breaks_down("rejections")
def _rejections_by_reason(figures: RunFigures) -> Counter[tuple[str, ...]]:
    """Over every replica: replica labels need not match between runs."""
    counts: Counter[tuple[str, ...]] = Counter()
    for (_, reason), count in figures.rejections.items():
        counts[(reason,)] += count
    return counts


@computes("unexplained_rejections")
def _unexplained(figures: RunFigures, selector: dict[str, str]) -> int:
    return figures.unexplained


@breaks_down("unexplained_rejections")
def _unexplained_total(figures: RunFigures) -> Counter[tuple[str, ...]]:
    return Counter({(): figures.unexplained})


@computes("unmatched_logged_rejections")
def _unmatched_logged(figures: RunFigures, selector: dict[str, str]) -> int:
    return figures.unmatched_logged


@computes("invariant_violations")
def _violations(figures: RunFigures, selector: dict[str, str]) -> int:
    return sum(n for name, n in figures.violations.items() if _matches({"invariant": name}, selector))


@breaks_down("invariant_violations")
def _violations_by_invariant(figures: RunFigures) -> Counter[tuple[str, ...]]:
    return Counter({(name,): n for name, n in figures.violations.items()})


@computes("client_errors")
def _client_errors(figures: RunFigures, selector: dict[str, str]) -> float:
    if "host" in selector:
        return figures.by_host.count("client_errors", selector)
    return sum(n for (flow, code), n in figures.client_errors.items()
               if _matches({"flow": flow, "code": code}, selector))


@breaks_down("client_errors")
def _client_errors_by_code(figures: RunFigures) -> Counter[tuple[str, ...]]:
    return Counter({key: n for key, n in figures.client_errors.items()})


@computes("late_starts")
def _late_starts(figures: RunFigures, selector: dict[str, str]) -> int:
    return figures.late


@computes("envelope_mutants")
def _envelope_mutants(figures: RunFigures, selector: dict[str, str]) -> int:
    return sum(n for (mutation, answer), n in figures.envelope_mutants.items()
               if _matches({"mutation": mutation, "answer": answer}, selector))


@computes("watchdog_calls")
def _watchdog_calls(figures: RunFigures, selector: dict[str, str]) -> int:
    return sum(n for (probe, state), n in figures.races.watch.items()
               if _matches({"probe": probe, "state": state}, selector))


@computes("output_schema_mismatches")
def _output_schema_mismatches(figures: RunFigures, selector: dict[str, str]) -> int:
    return sum(n for tool, n in figures.output_mismatches.items() if _matches({"tool": tool}, selector))


@computes("chaos_failures")
def _chaos_failures(figures: RunFigures, selector: dict[str, str]) -> int:
    return sum(1 for row in figures.chaos if row.get("phase") == "end" and not row.get("ok", True)
               and _matches({"action": row.get("action")}, selector))


@computes("crossed_replica_share")
def _crossed_share(figures: RunFigures, selector: dict[str, str]) -> float | None:
    crossed, continuations = figures.crossings(selector)
    return crossed / continuations if continuations else None


@computes("rejection_share")
def _rejection_share(figures: RunFigures, selector: dict[str, str]) -> float:
    total = sum(figures.rejections.values())
    return figures.count("rejections", selector) / total if total else 0.0


@computes("completed_ratio")
def _completed_ratio(figures: RunFigures, selector: dict[str, str]) -> float | None:
    return _finished_share(figures, selector, FlowOutcome.COMPLETED.value)


@computes("outcome_share")
def _outcome_share(figures: RunFigures, selector: dict[str, str]) -> float | None:
    return _finished_share(figures, selector, selector.get("outcome"))


def _finished_share(figures: RunFigures, selector: dict[str, str], outcome: str | None) -> float | None:
    """The share of the finished flows `selector` picks (interrupted ones aside) that ended `outcome` (any: None)."""
    flow_selector = {k: v for k, v in selector.items() if k in ("flow", "host")}
    finished = {key: n for key, n in figures.finished.items()
                if key[1] not in _NOT_FINISHED and _matches({"flow": key[0]}, flow_selector)} \
        if "host" not in selector else figures.by_host.finished_of(flow_selector)
    total = sum(finished.values())
    if not total:
        return None
    return sum(n for (_, ended), n in finished.items() if outcome is None or ended == outcome) / total


@computes("round_duration")
def _round_duration(figures: RunFigures, selector: dict[str, str]) -> Sketch:
    return merged_sketch([sketch for (flow, _, number), sketch in figures.latency.items()
                          if _matches({"flow": flow, "round": str(number)}, selector)])


@computes("rounds_per_call")
def _rounds_per_call(figures: RunFigures, selector: dict[str, str]) -> Counts:
    if "host" in selector:
        return merged_counts([counts for (host, flow), counts in figures.by_host.rounds_per_call.items()
                              if _matches({"flow": flow, "host": host}, selector)])
    return merged_counts([counts for (flow, _), counts in figures.rounds_per_call.items()
                          if _matches({"flow": flow}, selector)])


@computes("flow_duration")
def _flow_duration(figures: RunFigures, selector: dict[str, str]) -> Sketch:
    return merged_sketch([sketch for flow, sketch in figures.flow_duration.items()
                          if _matches({"flow": flow}, selector)])


@computes("think_time")
def _think_time(figures: RunFigures, selector: dict[str, str]) -> Sketch:
    return merged_sketch([figures.think_time] if _matches({}, selector) else [])


def _rounded(seconds: float | None) -> float | None:
    return round(seconds, 4) if seconds is not None else None


@computes("cold_start")
def _cold_start(figures: RunFigures, selector: dict[str, str]) -> Sketch:
    """The cold starts of the picked replicas' processes (spawn to first answer), in seconds."""
    return merged_sketch([sketch for replica, sketch in figures.cold_start.items()
                          if _matches({"replica": replica}, selector)])


@computes("replica_rss_growth")
def _rss_growth(figures: RunFigures, selector: dict[str, str]) -> list[Slope]:
    """Each picked replica's resident-memory slope after the warm-up, in MB per minute (`harness.folding.health`)."""
    return [slope for replica in sorted(figures.health.replicas) if _matches({"replica": replica}, selector)
            and (slope := figures.health.rss_growth(replica, figures.started)) is not None]


def _uncomputed() -> list[str]:
    """The declared metrics missing their computation here (a threshold metric's, an exact gate's breakdown)."""
    missing = [f"{name} (@computes)" for name, metric in METRICS.items()
               if metric.threshold and name not in COMPUTATIONS]
    return missing + [f"{metric.name} (@breaks_down)" for metric in gated(Gate.EXACT) if metric.name not in BREAKDOWNS]


if _uncomputed():
    raise TypeError(f"metrics declared in harness.config.metric_table without their computation in "
                    f"harness.folding.figures: {', '.join(_uncomputed())}")
