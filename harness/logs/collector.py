"""The run's log collector: this run's rejection lines from every replica's log, as events.

The reason a `requestState` was refused exists only in the replica's log, so the
collector is how a run explains its `-32602`s. It counts only this run's lines: files
are read from their end as of when they are followed, containers from `since`, and a
rejection line whose own timestamp predates `since` (a command that replays history, a
line shipped late) is dropped. A line is attributed to the replica its `replica=` field
(or stream prefix, or JSON field) names, else to its source's label.

A source that fails or ends before the collector is stopped (a command that exits, a file
that cannot be read any more) is lost: from then on its replica is unobserved, and the
collector says so once (`on_lost`), so the run can judge that span as not observed rather
than read the silence as "no line was logged". `sources()` says what each source read:
its lines, the lines it could not parse (skipped) and those it cut.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from harness.config.logs import LogSource
from harness.logs.adapters import Adapter
from harness.logs.kubernetes import KubernetesSource
from harness.logs.parse import INVALID_PARAMS, LineParser, Rejection
from harness.logs.readers import Reader, Readers
from harness.logs.sources import CommandSource, ContainerSource, FileSource, Source

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
    code: str = INVALID_PARAMS
    """-32602 (a refused `requestState`) or -32021 (`reason` then `UNASKED`, the capability in `capability`)."""
    capability: str = ""


@dataclass(frozen=True, slots=True)
class LostSource:
    """A log source that failed or ended while the run still followed it: `replica` unobserved from `t`."""

    t: float
    replica: str
    source: str
    why: str


@dataclass(frozen=True, slots=True)
class SourceRead:
    """What one source read: its lines, the lines it could not parse (skipped) and the lines it cut, and when it
    was lost (None: followed to the end)."""

    source: str
    replica: str
    lines: int
    bad: int
    cut: int
    unobserved_from: float | None = None
    why: str | None = None


OnRejection = Callable[[RejectionEvent], None]
OnLost = Callable[[LostSource], None]
OnLine = Callable[[str, str], None]
"""Called as (replica label of the source, line) for every line read, whatever it holds."""


class Collector:
    """Follows a target's log sources (files on one poller, streams on their own threads) until stopped."""

    def __init__(self, on_rejection: OnRejection, *, since: float, on_line: OnLine | None = None,
                 on_lost: OnLost | None = None, adapter: Adapter | None = None) -> None:
        """`adapter`: how the target's replicas log a rejection (`harness.logs.adapters`); the Python SDK's if None."""
        self.since = since
        self.adapter = adapter
        self._on_rejection = on_rejection
        self._on_line = on_line
        self._on_lost = on_lost
        self._readers = Readers(on_end=self._ended)
        self._replica: dict[int, str] = {}
        """The replica label of each reader's source, by the reader's id."""
        self.lost: list[LostSource] = []
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
        parser = _Parser(self._emitter(source.replica), source.replica, self._on_line, self.adapter)
        self._replica[id(parser)] = source.replica
        self._readers.read(reading, parser)

    def _ended(self, reader: Reader) -> None:
        """A source ended: lost, unless the collector stopped it."""
        if reader.stopped or self.stopped:
            return
        lost = LostSource(reader.ended_at or time.time(), self._replica.get(id(reader.parser), reader.source.name),
                          reader.source.name, reader.why)
        self.lost.append(lost)
        if self._on_lost is not None:
            self._on_lost(lost)

    def sources(self) -> list[SourceRead]:
        """What each source read so far, in the order they were followed."""
        lost = {(item.source, item.replica): item for item in self.lost}
        reads = []
        for reader in self._readers.readers:
            replica = self._replica.get(id(reader.parser), reader.source.name)
            gone = lost.get((reader.source.name, replica))
            reads.append(SourceRead(reader.source.name, replica, reader.lines, reader.bad, reader.cut,
                                    gone.t if gone else None, gone.why if gone else None))
        return reads

    def _emitter(self, replica: str) -> Callable[[Rejection], None]:
        def emit(rejection: Rejection) -> None:
            logged_at = rejection.logged_at
            if logged_at is not None and logged_at < self.since - STAMP_SLACK:
                self.dropped += 1
                return
            t = logged_at if logged_at is not None else time.time()
            self._on_rejection(RejectionEvent(t, rejection.replica or replica, rejection.reason, rejection.method,
                                              rejection.trace_id, rejection.code,
                                              rejection.logged if rejection.unasked else ""))

        return emit

    def stop(self, settle: float = 0.3) -> None:
        """Read what the sources still hold (after `settle` seconds for in-flight writes), then stop; once stopped,
        stopping again does not wait again (a run stops it before its reconciliation, and on the way down)."""
        if self.stopped:
            return
        self.stopped = True
        time.sleep(settle)
        self._readers.stop()


def source_for(spec: LogSource, *, since: float, label_lines: bool = True) -> Source:
    """The source that reads a target's `LogSource`, followed: a file from its end, a container from `since`.

    `label_lines=False` leaves the spec's replica out of the lines, so a line's own
    `replica=` field (or prefix) names its replica and the caller falls back on the spec's.
    """
    replica = spec.replica if label_lines else None
    if spec.kind == "file":
        return FileSource(spec.path, replica, follow=True)
    if spec.kind == "docker":
        return ContainerSource(spec.labels, replica, since=since)
    if spec.kind == "kubernetes":
        namespace, selector = spec.kubernetes
        return KubernetesSource(selector, namespace, since=since, pass_env=spec.pass_env)
    return CommandSource(spec.location, replica, pass_env=spec.pass_env)


class _Parser(LineParser):
    """The line parser, also showing every line to an `on_line` observer when there is one."""

    def __init__(self, emit: Callable[[Rejection], None], label: str, on_line: OnLine | None,
                 adapter: Adapter | None = None) -> None:
        super().__init__(emit, wall=time.time, adapter=adapter)
        self._label = label
        self._on_line = on_line

    def feed(self, line: str, replica: str | None = None, t: float | None = None) -> None:
        if self._on_line is not None:
            self._on_line(self._label, line.rstrip("\r\n"))
        super().feed(line, replica, t)
