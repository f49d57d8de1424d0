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
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from harness.journal.records import Reconciled, RecordType
from harness.journal.writer import JournalView
from harness.mrtr.outcome import Outcome

SLACK_BEFORE = 1.0
"""Seconds before a round was sent that its line may carry (clocks a little apart)."""
SLACK_AFTER = 2.5
"""Seconds after the answer that its line may carry (a line with no timestamp of its own is stamped when
the collector read it: up to a poll and the collector's settle later)."""
EXAMPLES = 5


@dataclass(frozen=True, slots=True)
class ClientRejection:
    start: float
    end: float
    replica: str
    what: str


@dataclass(frozen=True, slots=True)
class LoggedRejection:
    t: float
    replica: str
    reason: str


@dataclass
class Matching(JournalView):
    """Folds a run's journal into client rejections and logged lines, then matches them."""

    clients: list[ClientRejection] = field(default_factory=list)
    logged: list[LoggedRejection] = field(default_factory=list)

    def add(self, record: Mapping[str, Any]) -> None:
        kind = record.get("type")
        if kind == RecordType.ROUND and record.get("outcome") == Outcome.INVALID_STATE:
            end = float(record["t"])
            latency = float(record.get("latency") or 0.0)
            self.clients.append(ClientRejection(end - latency - SLACK_BEFORE, end + SLACK_AFTER,
                                                str(record.get("replica")),
                                                f"{record.get('flow_id')} round {record.get('round')} on "
                                                f"{record.get('replica')} at {_clock(end)}"))
        elif kind == RecordType.REJECTION:
            self.logged.append(LoggedRejection(float(record["t"]), str(record["replica"]), str(record["reason"])))

    def reconcile(self, replicas: Collection[str]) -> Reconciled:
        """Match on the same replica first (for rounds whose replica is one of `replicas`), then by time alone."""
        same_replica = {label for label in replicas}
        unexplained: list[ClientRejection] = []
        leftover: list[LoggedRejection] = []
        by_replica: dict[str, tuple[list[ClientRejection], list[LoggedRejection]]] = {}
        for client in self.clients:
            if client.replica in same_replica:
                by_replica.setdefault(client.replica, ([], []))[0].append(client)
            else:
                unexplained.append(client)
        for line in self.logged:
            if line.replica in by_replica:
                by_replica[line.replica][1].append(line)
            else:
                leftover.append(line)
        for clients, lines in by_replica.values():
            missed, unused = match(clients, lines)
            unexplained += missed
            leftover += unused
        unexplained, leftover = match(unexplained, leftover)
        matched = len(self.clients) - len(unexplained)
        return Reconciled(type=RecordType.RECONCILIATION, t=time.time(), client_rejections=len(self.clients),
                          logged=len(self.logged), matched=matched, unexplained=len(unexplained),
                          unmatched_logged=len(leftover),
                          examples={"unexplained": [client.what for client in unexplained[:EXAMPLES]],
                                    "unmatched_logged": [f"{line.reason} on {line.replica} at {_clock(line.t)}"
                                                         for line in leftover[:EXAMPLES]]})


def match(clients: Iterable[ClientRejection],
          lines: Iterable[LoggedRejection]) -> tuple[list[ClientRejection], list[LoggedRejection]]:
    """Pair each client rejection with a free line inside its window; returns (unmatched clients, unused lines)."""
    ordered = sorted(lines, key=lambda line: line.t)
    times = [line.t for line in ordered]
    next_free = list(range(len(ordered) + 1))  # union-find: the first free line at or after an index
    used = [False] * len(ordered)

    def free_from(index: int) -> int:
        root = index
        while next_free[root] != root:
            root = next_free[root]
        while next_free[index] != root:  # path compression
            next_free[index], index = root, next_free[index]
        return root

    missed = []
    for client in sorted(clients, key=lambda c: c.end):
        index = free_from(bisect_left(times, client.start))
        if index < len(times) and times[index] <= client.end:
            used[index] = True
            next_free[index] = index + 1
        else:
            missed.append(client)
    return missed, [line for line, taken in zip(ordered, used, strict=True) if not taken]


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S.%f")[:-3] + "Z"
