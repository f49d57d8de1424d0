"""The run's log collector: this run's rejection lines from every replica's log, as events.

The reason a `requestState` was refused exists only in the replica's log, so the
collector is how a run explains its `-32602`s. It counts only this run's lines: files
are read from their end as of when they are followed, containers from `since`, and a
rejection line whose own timestamp predates `since` (a command that replays history, a
line shipped late) is dropped. A line is attributed to the replica its `replica=` field
(or stream prefix, or JSON field) names, else to its source's label.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from harness.config.logs import LogSource
from harness.logs.parse import LineParser, Rejection
from harness.logs.readers import Readers
from harness.logs.sources import source_for

STAMP_SLACK = 1.0
"""Seconds a line's own timestamp may read before `since` and still count: a log that stamps whole seconds
(or a clock a little behind) must not lose the run's first lines."""


@dataclass(frozen=True, slots=True)
class RejectionEvent:
    """One rejection a replica logged during the run.

    `t` is when the line says it was written (its own timestamp, else the engine's for a
    container), else when it was read: reconciliation matches client rejections by time.
    """

    t: float
    replica: str
    reason: str
    method: str
    trace_id: str | None = None
    """The trace id of the request refused, when the line carries one."""


OnRejection = Callable[[RejectionEvent], None]
OnLine = Callable[[str, str], None]
"""Called as (replica label of the source, line) for every line read, whatever it holds."""


class Collector:
    """Follows a target's log sources (files on one poller, streams on their own threads) until stopped."""

    def __init__(self, on_rejection: OnRejection, *, since: float, on_line: OnLine | None = None) -> None:
        self.since = since
        self._on_rejection = on_rejection
        self._on_line = on_line
        self._readers = Readers()
        self.dropped = 0
        """Rejection lines left out because their own timestamp predates `since` (history)."""
        self.stopped = False

    @property
    def lines_read(self) -> int:
        return self._readers.lines

    def follow(self, source: LogSource) -> None:
        """Follow one `LogSource` of a target from now on, whatever its kind; raises `SourceError` when it
        cannot be opened (a command that cannot start, a folder given as a file)."""
        reading = source_for(source, since=self.since, label_lines=False)
        reading.open()
        parser = _Parser(self._emitter(source.replica), source.replica, self._on_line)
        self._readers.read(reading, parser)

    def _emitter(self, replica: str) -> Callable[[Rejection], None]:
        def emit(rejection: Rejection) -> None:
            logged_at = rejection.logged_at
            if logged_at is not None and logged_at < self.since - STAMP_SLACK:
                self.dropped += 1
                return
            t = logged_at if logged_at is not None else time.time()
            self._on_rejection(RejectionEvent(t, rejection.replica or replica, rejection.reason, rejection.method,
                                              rejection.trace_id))

        return emit

    def stop(self, settle: float = 0.3) -> None:
        """Read what the sources still hold (after `settle` seconds for in-flight writes), then stop; once stopped,
        stopping again does not wait again (a run stops it before its reconciliation, and on the way down)."""
        if self.stopped:
            return
        self.stopped = True
        time.sleep(settle)
        self._readers.stop()


class _Parser(LineParser):
    """The line parser, also showing every line to an `on_line` observer when there is one."""

    def __init__(self, emit: Callable[[Rejection], None], label: str, on_line: OnLine | None) -> None:
        super().__init__(emit, wall=time.time)
        self._label = label
        self._on_line = on_line

    def feed(self, line: str, replica: str | None = None, t: float | None = None) -> None:
        if self._on_line is not None:
            self._on_line(self._label, line.rstrip("\r\n"))
        super().feed(line, replica, t)
