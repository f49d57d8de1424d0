"""Rejections counted per reason and replica: the whole window, and a sliding recent one.

The on-call question is "what is failing now, and since when": so every (reason,
replica) pair keeps its count since triage started and its count in the last `window`
seconds (one bucket per second, so memory stays bounded by the window whatever the rate),
every reason the first and last time a line of it says it was written, and the trace ids of its latest
traced rejections (a few: enough to paste one into a tracing backend, bounded whatever the rate).
Every reason is known in advance and so are the replicas a source names (a container, a
labelled file): both appear at zero before the first rejection, in the table, the JSON
and the metrics alike.

Which window is "recent" depends on what is read. Followed live, it is the last `window`
seconds of reading (a backlog a command replays lands now, where the engineer sees it).
Read once (`by_line_time`), it is the last `window` seconds of the logs themselves, by
the lines' own time: yesterday's logs read today still show what was failing at their
end. `since`/`until` keep only the lines written in between, by the lines' own time; a
rejection whose line carries no time cannot be placed, so it is left out and counted as
`undated` (a window by the lines' time leaves it out likewise).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from harness.mrtr.reasons import OTHER_REASON, REASONS, TAMPERING_OR_CLIENT_BUG

OTHER_TEXTS_KEPT = 20
"""How many distinct texts of unknown reasons are kept (each clipped to `OTHER_TEXT_CHARS`): bounded memory."""
OTHER_TEXT_CHARS = 160
TRACE_IDS_KEPT = 3
"""How many trace ids each reason keeps: its latest traced rejections'."""

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
    first_seen: dict[str, float] = field(default_factory=dict)
    """reason -> the earliest time (epoch seconds) a line of it says it was written; dated lines only."""
    last_seen: dict[str, float] = field(default_factory=dict)
    """reason -> the latest such time."""
    other_texts: dict[str, int] = field(default_factory=dict)
    """The unknown reasons (`other`) as logged -> how often."""
    trace_ids: dict[str, list[str]] = field(default_factory=dict)
    """reason -> the trace ids of its latest rejections whose line carried one, newest first (a few)."""
    undated: int = 0
    """Rejections whose line carries no time: left out of `since`/`until` and of a window by the lines' time."""
    outside: int = 0
    """Rejections written before `since` or after `until`: read and left out."""
    window_end: float | None = None
    """Read once: the time of the latest line, where the last window ends; None when followed live."""
    bounded: bool = False
    """Whether `since`/`until` bounded what counted."""
    sources: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per source: `lines` read, `bad` lines its parser could not read (skipped), `cut` lines longer than the cap."""
    unasked: dict[str, int] = field(default_factory=dict)
    """replica -> the -32021 refusals it logged (a reason adapter's `[unasked]` line): no -32602, counted apart."""

    @property
    def bad_lines(self) -> int:
        return sum(source.get("bad", 0) for source in self.sources.values())

    @property
    def cut_lines(self) -> int:
        return sum(source.get("cut", 0) for source in self.sources.values())

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


class LiveCounts:
    """Thread-safe counts, fed by every source's reader thread and read by the display.

    `clock` is the reading time (wall seconds); `by_line_time` places the recent window by
    the lines' own time instead (read once); `since`/`until` (epoch seconds) bound what counts.
    """

    def __init__(self, window: float = 60.0, *, clock: Callable[[], float] = time.time,
                 on_count: OnCount | None = None, on_replica: OnReplica | None = None,
                 by_line_time: bool = False, since: float | None = None, until: float | None = None) -> None:
        if window <= 0:
            raise ValueError("the window must be positive")
        self.window = window
        self.by_line_time = by_line_time
        self.since, self.until = since, until
        self._clock = clock
        self._started = clock()
        self._on_count = on_count
        self._on_replica = on_replica
        self._lock = threading.Lock()
        self._replicas: dict[str, None] = {}
        self._total: dict[tuple[str, str], int] = {}
        self._seconds: dict[tuple[str, str], dict[int, int]] = {}
        self._latest: int | None = None
        self._first: dict[str, float] = {}
        self._last: dict[str, float] = {}
        self._other: dict[str, int] = {}
        self._traces: dict[str, deque[str]] = {}
        self._undated = 0
        self._outside = 0
        self._unasked: dict[str, int] = {}
        self._line_counters: list[Callable[[], int]] = []
        self._source_counters: list[Callable[[], dict[str, dict[str, int]]]] = []

    def declare(self, replicas: Iterable[str]) -> None:
        """Replicas known before they log anything (containers, labelled files): shown at zero."""
        with self._lock:
            for replica in replicas:
                self._know(replica)

    def count_lines_with(self, counter: Callable[[], int]) -> None:
        """Add a source's line counter to the `lines` every snapshot reports."""
        self._line_counters.append(counter)

    def count_sources_with(self, counter: Callable[[], dict[str, dict[str, int]]]) -> None:
        """Add what sources read (per source: lines, bad, cut) to every snapshot."""
        self._source_counters.append(counter)

    def add(self, replica: str | None, reason: str, at: float | None = None, logged: str = "",
            trace_id: str | None = None) -> None:
        """Count one rejection; `at`: when its line says it was written, `logged`: an unknown reason's text,
        `trace_id`: the trace id its line carried."""
        bounded = self.since is not None or self.until is not None
        with self._lock:
            if at is None and (bounded or self.by_line_time):
                self._undated += 1
                if bounded:
                    return
            elif at is not None and ((self.since is not None and at < self.since)
                                     or (self.until is not None and at > self.until)):
                self._outside += 1
                return
            replica = replica or UNKNOWN_REPLICA
            key = (reason, replica)
            self._know(replica)
            self._total[key] = self._total.get(key, 0) + 1
            if at is not None:
                self._first[reason] = min(at, self._first.get(reason, at))
                self._last[reason] = max(at, self._last.get(reason, at))
            if reason == OTHER_REASON and logged:
                self._note_other(logged)
            if trace_id is not None:
                self._traces.setdefault(reason, deque(maxlen=TRACE_IDS_KEPT)).append(trace_id)
            moment = at if self.by_line_time else self._clock()
            if moment is not None:
                self._place(key, int(moment))
        if self._on_count is not None:
            self._on_count(replica, reason)

    def add_unasked(self, replica: str | None) -> None:
        """Count one -32021 refusal a replica logged (apart from the -32602 rejections)."""
        with self._lock:
            replica = replica or UNKNOWN_REPLICA
            self._know(replica)
            self._unasked[replica] = self._unasked.get(replica, 0) + 1

    def _note_other(self, logged: str) -> None:
        text = logged[:OTHER_TEXT_CHARS]
        if text in self._other or len(self._other) < OTHER_TEXTS_KEPT:
            self._other[text] = self._other.get(text, 0) + 1

    def _place(self, key: tuple[str, str], second: int) -> None:
        """Add one to `key`'s bucket for `second`, if it is still inside the window; drop buckets out of it."""
        if self._latest is None or second > self._latest:
            self._latest = second
        end = self._end()
        if second <= end - self.window:
            return  # read once, an older line than the window that the later lines set
        buckets = self._seconds.setdefault(key, {})
        buckets[second] = buckets.get(second, 0) + 1
        if len(buckets) > 2 * self.window:  # bounded memory, whatever span the logs cover
            _drop_before(buckets, end - self.window)

    def _end(self) -> int:
        """The second the recent window ends at: now (followed live) or the latest line's (read once)."""
        if self.by_line_time:
            return self._latest if self._latest is not None else 0
        return int(self._clock())

    def _know(self, replica: str) -> None:
        if replica not in self._replicas:
            self._replicas[replica] = None
            if self._on_replica is not None:
                self._on_replica(replica)

    def snapshot(self) -> Snapshot:
        elapsed = self._clock() - self._started
        total: dict[str, dict[str, int]] = {}
        recent: dict[str, dict[str, int]] = {}
        with self._lock:
            oldest = self._end() - self.window
            for (reason, replica), count in self._total.items():
                total.setdefault(reason, {})[replica] = count
                buckets = self._seconds.get((reason, replica), {})
                _drop_before(buckets, oldest)
                in_window = sum(buckets.values())
                if in_window:
                    recent.setdefault(reason, {})[replica] = in_window
            replicas = tuple(sorted(self._replicas))
            seen = (dict(self._first), dict(self._last), dict(self._other), self._undated, self._outside)
            traces = {reason: list(reversed(kept)) for reason, kept in self._traces.items()}
            window_end = float(self._latest + 1) if self.by_line_time and self._latest is not None else None
            unasked = dict(sorted(self._unasked.items()))
        lines = sum(counter() for counter in self._line_counters)
        sources = {name: read for counter in self._source_counters for name, read in counter().items()}
        return Snapshot(elapsed=elapsed, window=self.window, lines=lines, replicas=replicas, total=total,
                        sources=sources, recent=recent, first_seen=seen[0], last_seen=seen[1], other_texts=seen[2],
                        trace_ids=traces,
                        undated=seen[3], outside=seen[4], window_end=window_end,
                        bounded=self.since is not None or self.until is not None, unasked=unasked)


def _drop_before(buckets: dict[int, int], oldest: float) -> None:
    """Forget the seconds at or before `oldest`: they left the window."""
    for second in [second for second in buckets if second <= oldest]:
        del buckets[second]
