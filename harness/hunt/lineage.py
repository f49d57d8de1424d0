"""A passing trial's lineage: for each completed flow, the hand-overs of state that kept it alive (its support).

In an MRTR call, the replica that answers round n with `input_required` mints a requestState
(seals it with its key, for its name, with its clock and TTL, beside its once-only records);
round n+1 echoes it, and the replica that answers round n+1 verifies it. That hand-over is an
`Edge`: who minted, who verified, whether the state crossed replicas, whether the round was
re-dispatched (its replica could not be reached) or resent (its answer was lost, or a 401
renewed the token), when it was minted and verified (seconds from the load's start) and the
state's age against the TTL. A completed flow's support is the set of its edges: a fault that
cuts any one of them would have cut the flow (lineage-driven fault injection, Alvaro et al.,
SIGMOD 2015). `harness.hunt.strategies.lineage` searches for faults that cut every support of a
flow class.

The journal is untrusted input: records are read as plain data, anything of the wrong shape is
skipped (a damaged line, a round with no replica), and nothing here raises on any content.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.journal.records import ChaosPhase, RecordType, RunEvent
from harness.journal.writer import JournalDamage, UnreadableJournal, read_journal
from harness.vocabulary import FlowOutcome, Outcome

RESENT = {Outcome.ANSWER_LOST.value: "answer-lost", Outcome.UNAUTHORIZED.value: "auth"}
"""A round whose outcome was one of these is sent again with the same state (`harness.mrtr.client`): why."""
CUT_OUTCOMES = frozenset(outcome.value for outcome in Outcome
                         if outcome.is_failure and outcome not in (Outcome.TOOL_ERROR, Outcome.ROUNDS_EXCEEDED))
"""A verifying round that came to one of these did not get its hand-over through: the state was refused, or the
round or its answer was lost (a tool that ran and said no, or a server that kept asking, did get it through)."""


@dataclass(frozen=True)
class Edge:
    """One state handed over within a call: minted by one round's replica, verified by the next round's."""

    tool: str
    round: int
    """The verifying round's number."""
    minter: str
    verifier: str
    minted: float
    """When the minting round's answer arrived, seconds from the load's start."""
    verified: float
    """When the verifying round was sent, seconds from the load's start."""
    answered: float | None = None
    """When the verifying round's answer arrived, seconds from the load's start (None: as it was sent)."""
    redispatched_from: str | None = None
    """The replica the verifying round was routed to, when it could not be reached (a balancer's re-dispatch)."""
    resent: str | None = None
    """The verifying round resends the round before it: `answer-lost` or `auth`; None: a first send."""
    outcome: str | None = None
    """The verifying round's outcome (`harness.vocabulary.Outcome`); None: not said."""

    @property
    def cut(self) -> bool:
        """The hand-over failed: its verifying round's state was refused or its answer never came (`CUT_OUTCOMES`)."""
        return self.outcome in CUT_OUTCOMES

    @property
    def crossed(self) -> bool:
        """The state crossed replicas: the verifier holds the minter's key, name, clock and records."""
        return self.minter != self.verifier

    @property
    def age(self) -> float:
        """The state's age when it was verified, real seconds."""
        return max(self.verified - self.minted, 0.0)

    def ttl_used(self, ttl: float) -> float:
        """The share of a TTL (real seconds) the state had used when it was verified: above 1, it had expired."""
        return self.age / ttl if ttl > 0 else math.inf

    def spans(self, start: float, end: float) -> bool:
        """Whether the hand-over was under way (from the mint to the verifying round's answer) during [start, end]."""
        answered = self.answered if self.answered is not None else self.verified
        return self.minted <= end and start <= answered

    def shape(self) -> Shape:
        """The edge without its times: what a support of a flow class is made of."""
        return Shape(self.minter, self.verifier, self.redispatched_from, self.resent)


@dataclass(frozen=True)
class Shape:
    """An edge as the flows of a class repeat it: who minted, who verified, re-dispatched from whom, resent why."""

    minter: str
    verifier: str
    redispatched_from: str | None = None
    resent: str | None = None

    @property
    def crossed(self) -> bool:
        return self.minter != self.verifier

    def __str__(self) -> str:
        said = f"{self.minter}->{self.verifier}"
        if self.redispatched_from is not None:
            said += f" (re-dispatched from {self.redispatched_from})"
        if self.resent is not None:
            said += f" (resent: {self.resent})"
        return said


@dataclass(frozen=True)
class Support:
    """A completed flow and the edges it needed."""

    flow: str
    """Its class (the flow record's `flow`: refund, return, ...)."""
    flow_id: str
    edges: tuple[Edge, ...]

    def shapes(self) -> frozenset[Shape]:
        return frozenset(edge.shape() for edge in self.edges)


@dataclass(frozen=True)
class Window:
    """A chaos action as the trial's journal says it ran: on whom (a replica's label, `all`, `auth`), from when to when
    (seconds from the load's start; an action that never ended lasts to the end of the journal)."""

    action: str
    whom: str
    start: float
    end: float


@dataclass(frozen=True)
class TrialLineage:
    """What a trial's journal says of its lineage: each completed flow's support, and the chaos that ran."""

    supports: tuple[Support, ...] = ()
    chaos: tuple[Window, ...] = ()
    cut: tuple[Edge, ...] = ()
    """Every hand-over whose verifying round failed (`Edge.cut`), in any flow, completed or not: what a fault that ran
    across it is seen to have cut (`harness.hunt.strategies.lineage` learns from it)."""


@dataclass
class _Call:
    """The rounds of one call read so far: the state in hand and who minted it, when."""

    tool: str
    minter: str | None = None
    minted: float = 0.0
    previous: str | None = None
    """The outcome of the call's previous round."""


def supports(records: Iterable[Any]) -> list[Support]:
    """Every completed flow's support, from a journal's records in file order; records of any other shape skipped."""
    return list(lineage(records).supports)


def lineage(records: Iterable[Any]) -> TrialLineage:
    """A journal's supports and chaos windows, from its records in file order; records of any other shape skipped."""
    zero: float | None = None
    calls: dict[str, _Call] = {}
    edges: dict[str, list[Edge]] = {}
    found: list[Support] = []
    started: dict[tuple[str, str], float] = {}
    windows: list[Window] = []
    cut: list[Edge] = []
    last: float | None = None
    for record in records:
        if not isinstance(record, Mapping):
            continue
        kind, at = record.get("type"), _number(record.get("t"))
        if kind == RecordType.RUN and record.get("event") == RunEvent.LOAD_STARTED and zero is None:
            zero = at
        elif kind == RecordType.ROUND:
            edge = _round(record, zero or 0.0, calls, edges)
            if edge is not None and edge.cut:
                cut.append(edge)
        elif kind == RecordType.CHAOS and at is not None:
            _chaos(record, round(at - (zero or 0.0), 3), started, windows)
        elif kind == RecordType.FLOW:
            flow_id = record.get("flow_id")
            if not isinstance(flow_id, str):
                continue
            calls.pop(flow_id, None)
            kept = edges.pop(flow_id, [])
            flow = record.get("flow")
            if record.get("outcome") == FlowOutcome.COMPLETED and isinstance(flow, str):
                found.append(Support(flow, flow_id, tuple(kept)))
        if at is not None:
            last = at if last is None else max(last, at)
    end = round((last or 0.0) - (zero or 0.0), 3)
    windows.extend(Window(action, whom, start, max(end, start)) for (action, whom), start in started.items())
    return TrialLineage(tuple(found), tuple(windows), tuple(cut))


def _chaos(record: Mapping[str, Any], at: float, started: dict[tuple[str, str], float], windows: list[Window]) -> None:
    """A chaos record: its start opens the action's window on whom it names, its end closes it."""
    action, whom, phase = record.get("action"), record.get("target"), record.get("phase")
    if not (isinstance(action, str) and isinstance(whom, str)):
        return
    if phase == ChaosPhase.START:
        started.setdefault((action, whom), at)
    elif phase == ChaosPhase.END and (action, whom) in started:
        start = started.pop((action, whom))
        windows.append(Window(action, whom, start, max(at, start)))


def _round(record: Mapping[str, Any], zero: float, calls: dict[str, _Call],
           edges: dict[str, list[Edge]]) -> Edge | None:
    """One round into its flow's call: an edge when it carried a state (returned), and the state it minted, if any."""
    flow_id, tool, number, replica = (record.get(key) for key in ("flow_id", "tool", "round", "replica"))
    received, sent = _number(record.get("t")), _number(record.get("sent"))
    if not (isinstance(flow_id, str) and isinstance(tool, str) and isinstance(replica, str)
            and isinstance(number, int) and not isinstance(number, bool) and received is not None
            and sent is not None):
        return None
    call = calls.get(flow_id)
    if call is None or call.tool != tool or number == 1:
        call = calls[flow_id] = _Call(tool)
    outcome = record.get("outcome")
    edge = None
    if call.minter is not None:
        moved = record.get("redispatched_from")
        edge = Edge(tool, number, call.minter, replica, round(call.minted, 3), round(sent - zero, 3),
                    round(max(received, sent) - zero, 3), moved if isinstance(moved, str) else None,
                    RESENT.get(call.previous or ""), outcome if isinstance(outcome, str) else None)
        edges.setdefault(flow_id, []).append(edge)
    call.previous = outcome if isinstance(outcome, str) else None
    if outcome == Outcome.INPUT_REQUIRED:
        call.minter, call.minted = replica, received - zero
    return edge


def _number(value: Any) -> float | None:
    """A finite number, or None (a journal's field may be anything)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def trial_lineage(folder: Path) -> TrialLineage:
    """A results folder's lineage, from its journal (the run's part and every worker's); none from a journal that
    is missing or no journal at all (the strategy then has nothing to learn from that trial)."""
    from harness.journal.segments import part_exists
    from harness.report import journal_parts

    try:
        return lineage(read_journal(*(part for part in journal_parts(folder) if part_exists(part)),
                                    damage=JournalDamage()))
    except (OSError, UnreadableJournal):
        return TrialLineage()


def trial_supports(folder: Path) -> list[Support]:
    """A results folder's supports (`trial_lineage`)."""
    return list(trial_lineage(folder).supports)
