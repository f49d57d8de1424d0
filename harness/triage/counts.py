"""Rejections counted per reason and replica: the whole window, and a sliding recent one.

The on-call question is "what is failing now, and since when": so every (reason,
replica) pair keeps its count since triage started and its count in the last `window`
seconds (one bucket per second, so memory stays bounded by the window whatever the rate).
Every reason is known in advance and so are the replicas a source names (a container, a
labelled file): both appear at zero before the first rejection, in the table, the JSON
and the metrics alike.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from harness.mrtr.reasons import OTHER_REASON, REASONS, TAMPERING_OR_CLIENT_BUG

ALL_REASONS: tuple[str, ...] = (*REASONS, OTHER_REASON)

UNKNOWN_REPLICA = "unknown"
"""The replica label of a line whose source and text name none (a bare stdin or command stream)."""

OnCount = Callable[[str, str], None]
"""Called as (replica, reason) for each rejection counted, e.g. to increment a metric."""
OnReplica = Callable[[str], None]
"""Called once per replica the first time it is known, e.g. to pre-set its metrics to zero."""


@dataclass(frozen=True)
class Snapshot:
    """The counts at one instant: what every display, the JSON and the exit code are derived from."""

    elapsed: float
    window: float
    lines: int
    replicas: tuple[str, ...]
    total: dict[str, dict[str, int]] = field(default_factory=dict)
    """reason -> replica -> count since the start (non-zero entries only)."""
    recent: dict[str, dict[str, int]] = field(default_factory=dict)
    """reason -> replica -> count in the last `window` seconds (non-zero entries only)."""

    def by_reason(self, *, recent: bool = False) -> dict[str, int]:
        """Every reason, zeros included, in the SDK's order."""
        counts = self.recent if recent else self.total
        return {reason: sum(counts.get(reason, {}).values()) for reason in ALL_REASONS}

    @property
    def rejections(self) -> int:
        return sum(sum(replicas.values()) for replicas in self.total.values())

    def seen(self) -> list[str]:
        """Reasons seen at all, busiest now first, then busiest overall."""
        recent, total = self.by_reason(recent=True), self.by_reason()
        return sorted((reason for reason in ALL_REASONS if total[reason]),
                      key=lambda reason: (-recent[reason], -total[reason], ALL_REASONS.index(reason)))

    def replicas_with(self, reason: str) -> list[str]:
        return sorted(self.total.get(reason, {}))

    def tampering_or_client_bug(self) -> list[str]:
        """Reasons seen that mean a changed token or a misbehaving client, never a slow person."""
        return [reason for reason in ALL_REASONS if reason in TAMPERING_OR_CLIENT_BUG and self.total.get(reason)]

    def rate(self, count: int, *, recent: bool = False) -> float:
        """Per second, over the window (or the time elapsed, if shorter) or over the whole run."""
        span = min(self.window, self.elapsed) if recent else self.elapsed
        return count / span if span > 0 else 0.0


class Counts:
    """Thread-safe counts, fed by every source's reader thread and read by the display."""

    def __init__(self, window: float = 60.0, *, clock: Callable[[], float] = time.monotonic,
                 on_count: OnCount | None = None, on_replica: OnReplica | None = None) -> None:
        if window <= 0:
            raise ValueError("the window must be positive")
        self.window = window
        self._clock = clock
        self._started = clock()
        self._on_count = on_count
        self._on_replica = on_replica
        self._lock = threading.Lock()
        self._replicas: dict[str, None] = {}
        self._total: dict[tuple[str, str], int] = {}
        self._seconds: dict[tuple[str, str], deque[list[int]]] = {}
        self._line_counters: list[Callable[[], int]] = []

    def declare(self, replicas: Iterable[str]) -> None:
        """Replicas known before they log anything (containers, labelled files): shown at zero."""
        with self._lock:
            for replica in replicas:
                self._know(replica)

    def count_lines_with(self, counter: Callable[[], int]) -> None:
        """Add a source's line counter to the `lines` every snapshot reports."""
        self._line_counters.append(counter)

    def add(self, replica: str | None, reason: str) -> None:
        replica = replica or UNKNOWN_REPLICA
        key = (reason, replica)
        second = int(self._clock() - self._started)
        with self._lock:
            self._know(replica)
            self._total[key] = self._total.get(key, 0) + 1
            buckets = self._seconds.setdefault(key, deque())
            if buckets and buckets[-1][0] == second:
                buckets[-1][1] += 1
            else:
                buckets.append([second, 1])
                self._expire(buckets, second)
        if self._on_count is not None:
            self._on_count(replica, reason)

    def _know(self, replica: str) -> None:
        if replica not in self._replicas:
            self._replicas[replica] = None
            if self._on_replica is not None:
                self._on_replica(replica)

    def _expire(self, buckets: deque[list[int]], second: int) -> None:
        oldest = second - self.window
        while buckets and buckets[0][0] <= oldest:
            buckets.popleft()

    def snapshot(self) -> Snapshot:
        elapsed = self._clock() - self._started
        second = int(elapsed)
        total: dict[str, dict[str, int]] = {}
        recent: dict[str, dict[str, int]] = {}
        with self._lock:
            for (reason, replica), count in self._total.items():
                total.setdefault(reason, {})[replica] = count
                buckets = self._seconds[(reason, replica)]
                self._expire(buckets, second)
                in_window = sum(n for _, n in buckets)
                if in_window:
                    recent.setdefault(reason, {})[replica] = in_window
            replicas = tuple(sorted(self._replicas))
        lines = sum(counter() for counter in self._line_counters)
        return Snapshot(elapsed=elapsed, window=self.window, lines=lines, replicas=replicas, total=total,
                        recent=recent)
