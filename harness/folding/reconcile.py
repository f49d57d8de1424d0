"""Reconciliation by matching: every -32602 a client saw, paired with one line a replica logged.

The client always sees the same `-32602 Invalid or expired requestState`; the reason
exists only in the replica's log. Comparing totals would let lines logged for other
clients (or history) hide client rejections that were never logged, and would never
report logged lines no client of this run explains. So each client rejection is matched
to one logged line: on the same replica where the journal knows which replica served the
round, within a window around the round (the line is logged while the server handles
the request; the window allows for clocks and log lines without a timestamp of their
own); then, for what is left (a balancer in front, or logs labelled another way), by
time alone. What stays unmatched on the client side is `unexplained` (a failure by
default); on the log side `unmatched_logged` (reported, thresholdable).

Matching is greedy by the end of each client rejection's window, taking the earliest
free line inside it: for intervals against points that gives a largest matching, in
O(n log n) for 100,000 rejections.

Memory stays flat under a steady rejection rate: the matching holds at most `HELD` client
rejections and `HELD` logged lines. When either side would hold more, it settles: it
matches what it holds and folds into counts every pair, and every unmatched item, whose
time is more than `SETTLE` seconds before the newest record it has seen (no line or round
comes that late: their writers flush within seconds); if a side still holds more than half
of `HELD`, its oldest items are folded too, each pair as matched and each unmatched item
as unexplained or unmatched logged, though its partner might still have come. That can
only add unexplained rejections, never hide one: past the bound the check fails closed,
and the record's `settled_early` says how many items were counted so.

A log source lost during the run (a `logs-lost` record: a command that exited, a file that
could not be read) leaves its replica unobserved from then on. A client rejection left
unmatched whose window reaches into such a span is `not_judged`, never `unexplained`: the
line that would explain it could not be read. A span covers the rounds of its own replica,
and every round when its label is no replica the rounds name (one command reading every
pod), or when the round's replica is none of them (a balancer in front).
"""

from __future__ import annotations

import math
import re
import time
from bisect import bisect_left
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from harness.journal.records import Reconciled, RecordType, RunEvent
from harness.journal.writer import JournalView
from harness.mrtr.outcome import Outcome

SLACK_BEFORE = 1.0
"""Seconds before a round was sent that its line may carry (clocks a little apart)."""
SLACK_AFTER = 2.5
"""Seconds after the answer that its line may carry (a line with no timestamp of its own is stamped when
the collector read it: up to a poll and the collector's settle later)."""
EXAMPLES = 5
HELD = 20_000
"""Client rejections, and logged lines, a `Matching` holds at most (about 8 MiB for both): docs/figures.md."""
SETTLE = 60.0
"""Seconds before the newest record after which a held item is settled: its partner, if any, has come."""


TRACED = 10_000
"""Matched rejections whose round span ids reconciliation keeps for their reason's span, at most (`TracedReason`)."""

_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_SPAN_ID = re.compile(r"[0-9a-f]{16}")


@dataclass(frozen=True, slots=True)
class ClientRejection:
    start: float
    end: float
    replica: str
    what: str
    trace: tuple[str, str] | None = None
    """The round's client span (trace id, span id), when its flow was traced."""


class TracedReason(NamedTuple):
    """A traced rejected round and the reason a replica logged for it: what its reason's span is made of."""

    trace_id: str
    span_id: str
    reason: str
    replica: str
    t: float
    """When the line was logged."""


def _span_of(record: Mapping[str, Any]) -> tuple[str, str] | None:
    """A round record's (trace id, span id), when both are there and well formed (the journal is input)."""
    trace_id, span_id = record.get("trace_id"), record.get("span_id")
    if isinstance(trace_id, str) and isinstance(span_id, str) and _TRACE_ID.fullmatch(trace_id) \
            and _SPAN_ID.fullmatch(span_id):
        return trace_id, span_id
    return None


@dataclass(frozen=True, slots=True)
class LoggedRejection:
    t: float
    replica: str
    reason: str


@dataclass(frozen=True, slots=True)
class Unobserved:
    """A replica whose log source was lost at `t`: unobserved from then on."""

    t: float
    replica: str
    why: str

    def covers(self, client: ClientRejection, replicas: Collection[str]) -> bool:
        """Whether `client`'s line may have been logged where nobody read it (`replicas`: the replicas rounds name)."""
        if client.end < self.t:
            return False
        return self.replica == client.replica or self.replica not in replicas or client.replica not in replicas

    def as_dict(self) -> dict[str, Any]:
        return {"replica": self.replica, "from": self.t, "why": self.why}


@dataclass
class Matching(JournalView):
    """Folds a run's journal into client rejections and logged lines, then matches them, holding at most `held`
    unmatched of each (the rest already folded into counts)."""

    clients: list[ClientRejection] = field(default_factory=list)
    logged: list[LoggedRejection] = field(default_factory=list)
    held: int = HELD
    """The bound on each side."""
    latest: float = -math.inf
    """The newest time of a held item's record: what `SETTLE` counts back from."""
    settled: Settled = field(default_factory=lambda: Settled())
    unobserved: list[Unobserved] = field(default_factory=list)
    """Replicas whose log source was lost, and from when (`logs-lost` records)."""
    named: set[str] = field(default_factory=set)
    """The replicas rounds have named so far: what a span's label is read against before the target's are known."""
    logging: set[str] = field(default_factory=set)
    """The replicas a rejection line was read from: on any other, an unexplained rejection is "no adapter for this
    server" (its log has no line the run's reason adapter reads, `harness.logs.adapters`)."""

    REFUSED = Outcome.INVALID_STATE
    """The round outcome this matching explains."""
    LINE = RecordType.REJECTION
    """The record of the line that explains it."""

    def add(self, record: Mapping[str, Any]) -> None:
        kind = record.get("type")
        if kind == RecordType.RUN:
            t = record.get("t")
            if record.get("event") == RunEvent.LOGS_LOST and isinstance(t, int | float) and not isinstance(t, bool):
                self.unobserved.append(Unobserved(float(t), str(record.get("replica")), str(record.get("why") or "")))
            return
        if kind == RecordType.ROUND and record.get("outcome") == self.REFUSED:
            end = float(record["t"])
            latency = float(record.get("latency") or 0.0)
            self.clients.append(ClientRejection(end - latency - SLACK_BEFORE, end + SLACK_AFTER,
                                                str(record.get("replica")),
                                                f"{record.get('flow_id')} round {record.get('round')} on "
                                                f"{record.get('replica')} at {_clock(end)}", _span_of(record)))
            self.named.add(str(record.get("replica")))
            self.latest = max(self.latest, end)
        elif kind == self.LINE:
            line = LoggedRejection(float(record["t"]), str(record["replica"]),
                                   str(record.get("reason") or record.get("capability") or self.REFUSED))
            self.logged.append(line)
            self.logging.add(line.replica)
            self.latest = max(self.latest, line.t)
        else:
            return
        if max(len(self.clients), len(self.logged)) > self.held:
            self.settle()

    def settle(self) -> None:
        """Fold into counts what is settled (older than `SETTLE`), then the oldest of a side above half the bound."""
        found = self._pairs({line.replica for line in self.logged})
        keep = self.held // 2
        cutoff = self.latest - SETTLE
        clients = sorted(range(len(self.clients)), key=lambda i: self.clients[i].end)
        lines = sorted(range(len(self.logged)), key=lambda j: self.logged[j].t)
        old_clients = sum(1 for i in clients if self.clients[i].end < cutoff)
        old_lines = sum(1 for j in lines if self.logged[j].t < cutoff)
        gone_clients = set(clients[:max(old_clients, len(clients) - keep)])
        gone_lines = set(lines[:max(old_lines, len(lines) - keep)])
        partner = {line: client for client, line in found.items()}
        for i in sorted(gone_clients, key=lambda i: self.clients[i].end):
            if i in found:
                gone_lines.add(found[i])
                self.settled.trace(self.clients[i], self.logged[found[i]])
            elif self._not_judged(self.clients[i], self.named):
                self.settled.not_judged += 1
            else:
                self.settled.unexplain(self.clients[i], early=self.clients[i].end >= cutoff,
                                       no_adapter=self._no_adapter(self.clients[i], ()))
        for j in sorted(gone_lines, key=lambda j: self.logged[j].t):
            if j in partner:
                gone_clients.add(partner[j])
            else:
                self.settled.leave(self.logged[j], early=self.logged[j].t >= cutoff)
        self.settled.matched += sum(1 for i in gone_clients if i in found)
        self.settled.clients += len(gone_clients)
        self.settled.lines += len(gone_lines)
        self.clients = [client for i, client in enumerate(self.clients) if i not in gone_clients]
        self.logged = [line for j, line in enumerate(self.logged) if j not in gone_lines]

    def reconcile(self, replicas: Collection[str]) -> Reconciled:
        """Match on the same replica first (for rounds whose replica is one of `replicas`), then by time alone;
        with what was settled before."""
        found = self._pairs(set(replicas))
        used = set(found.values())
        unmatched = sorted((client for i, client in enumerate(self.clients) if i not in found), key=lambda c: c.end)
        named = set(replicas) if replicas else self.named
        unjudged = [client for client in unmatched if self._not_judged(client, named)]
        missed = [client for client in unmatched if not self._not_judged(client, named)]
        leftover = sorted((line for j, line in enumerate(self.logged) if j not in used), key=lambda line: line.t)
        settled = self.settled
        return Reconciled(type=RecordType.RECONCILIATION, t=time.time(),
                          client_rejections=settled.clients + len(self.clients),
                          logged=settled.lines + len(self.logged), matched=settled.matched + len(found),
                          unexplained=settled.unexplained + len(missed),
                          no_adapter=settled.no_adapter + sum(1 for client in missed
                                                              if self._no_adapter(client, named)),
                          unmatched_logged=settled.unmatched_logged + len(leftover),
                          examples={"unexplained": (settled.examples["unexplained"]
                                                    + [client.what for client in missed])[:EXAMPLES],
                                    "unmatched_logged": (settled.examples["unmatched_logged"]
                                                         + [_line(line) for line in leftover])[:EXAMPLES]},
                          settled_early=settled.early, not_judged=settled.not_judged + len(unjudged),
                          unobserved=[span.as_dict() for span in self.unobserved])

    def _no_adapter(self, client: ClientRejection, replicas: Collection[str]) -> bool:
        """Whether an unexplained rejection is "no adapter for this server": no line at all was read from its replica
        (one of the target's `replicas`; behind a balancer, whose label no log has, only when no log gave any line)."""
        return client.replica not in self.logging and (not self.logging or client.replica in replicas)

    def _not_judged(self, client: ClientRejection, replicas: Collection[str]) -> bool:
        return any(span.covers(client, replicas) for span in self.unobserved)

    def traced_reasons(self, replicas: Collection[str]) -> list[TracedReason]:
        """Every matched rejection whose round was traced, with its line's reason (at most `TRACED`): the same
        matching as `reconcile`'s."""
        found = self._pairs(set(replicas))
        held = [_traced(self.clients[i], self.logged[j]) for i, j in found.items() if self.clients[i].trace]
        return (self.settled.traced + [reason for reason in held if reason is not None])[:TRACED]

    def _pairs(self, same_replica: set[str]) -> dict[int, int]:
        """The held items' matching, as {client index: line index}: on the same replica first (rounds whose replica
        is in `same_replica`), then what is left by time alone."""
        found: dict[int, int] = {}
        by_replica: dict[str, tuple[list[int], list[int]]] = {}
        for i, client in enumerate(self.clients):
            if client.replica in same_replica:
                by_replica.setdefault(client.replica, ([], []))[0].append(i)
        for j, line in enumerate(self.logged):
            if line.replica in by_replica:
                by_replica[line.replica][1].append(j)
        for clients, lines in by_replica.values():
            self._match(clients, lines, found)
        used = set(found.values())
        self._match([i for i in range(len(self.clients)) if i not in found],
                    [j for j in range(len(self.logged)) if j not in used], found)
        return found

    def _match(self, clients: list[int], lines: list[int], found: dict[int, int]) -> None:
        for a, b in match([self.clients[i] for i in clients], [self.logged[j] for j in lines]):
            found[clients[a]] = lines[b]


@dataclass
class UnaskedMatching(Matching):
    """The same matching for -32021: each refusal a client saw (a round `missing_capability`: the client did not
    declare a capability the call needs) paired with a line a replica logged for it (an `unasked` record)."""

    REFUSED = Outcome.MISSING_CAPABILITY
    LINE = RecordType.UNASKED

    def counts(self, replicas: Collection[str]) -> dict[str, Any] | None:
        """The `unasked` part of the reconciliation record; None when no client saw a -32021 and no line logged one."""
        done = self.reconcile(replicas)
        if not done["client_rejections"] and not done["logged"]:
            return None
        return {"client": done["client_rejections"], "logged": done["logged"], "matched": done["matched"],
                "unexplained": done["unexplained"], "not_judged": done.get("not_judged", 0),
                "examples": done["examples"]["unexplained"]}


@dataclass
class Settled:
    """What a `Matching` has folded into counts: items no longer held."""

    clients: int = 0
    lines: int = 0
    matched: int = 0
    unexplained: int = 0
    no_adapter: int = 0
    """Of `unexplained`: on a replica no rejection line was read from."""
    unmatched_logged: int = 0
    not_judged: int = 0
    """Unmatched client rejections in a span where their replica's log was unobserved."""
    early: int = 0
    """Unmatched items folded before they were settled, because a side held more than its bound."""
    examples: dict[str, list[str]] = field(default_factory=lambda: {"unexplained": [], "unmatched_logged": []})
    traced: list[TracedReason] = field(default_factory=list)
    """Matched pairs whose round was traced (at most `TRACED`)."""

    def trace(self, client: ClientRejection, line: LoggedRejection) -> None:
        reason = _traced(client, line)
        if reason is not None and len(self.traced) < TRACED:
            self.traced.append(reason)

    def unexplain(self, client: ClientRejection, *, early: bool, no_adapter: bool = False) -> None:
        self.unexplained += 1
        self.no_adapter += no_adapter
        self.early += early
        if len(self.examples["unexplained"]) < EXAMPLES:
            self.examples["unexplained"].append(client.what)

    def leave(self, line: LoggedRejection, *, early: bool) -> None:
        self.unmatched_logged += 1
        self.early += early
        if len(self.examples["unmatched_logged"]) < EXAMPLES:
            self.examples["unmatched_logged"].append(_line(line))


def match(clients: Sequence[ClientRejection], lines: Sequence[LoggedRejection]) -> list[tuple[int, int]]:
    """Pair each client rejection with a free line inside its window: (client index, line index) pairs, greedy by
    the end of each window, taking the earliest free line (a largest matching)."""
    order = sorted(range(len(lines)), key=lambda j: lines[j].t)
    times = [lines[j].t for j in order]
    next_free = list(range(len(order) + 1))  # union-find: the first free line at or after an index

    def free_from(index: int) -> int:
        root = index
        while next_free[root] != root:
            root = next_free[root]
        while next_free[index] != root:  # path compression
            next_free[index], index = root, next_free[index]
        return root

    pairs = []
    for i in sorted(range(len(clients)), key=lambda i: clients[i].end):
        index = free_from(bisect_left(times, clients[i].start))
        if index < len(times) and times[index] <= clients[i].end:
            pairs.append((i, order[index]))
            next_free[index] = index + 1
    return pairs


def _traced(client: ClientRejection, line: LoggedRejection) -> TracedReason | None:
    return TracedReason(*client.trace, line.reason, line.replica, line.t) if client.trace is not None else None


def _line(line: LoggedRejection) -> str:
    return f"{line.reason} on {line.replica} at {_clock(line.t)}"


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S.%f")[:-3] + "Z"
