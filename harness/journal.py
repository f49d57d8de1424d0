"""The journal: one JSON line per flow round, flow outcome, chaos action and rejection, as it happens.

It is the single output contract of a run (as in Chaos Toolkit): the summary, the
verdict, the HTML report and the JUnit file are all derived from it, never from a
second bookkeeping. Lines are written as the run goes, so a run killed at any point
leaves a journal that ends (within a fraction of a second) at the last thing that
happened; nothing is held in memory whole.

A load process writes two or three records per MRTR round, so a record costs one
`orjson` encode and a queue append; the queued lines go to the file in one write at
least every `FLUSH_EVERY` seconds (checked on each record) and on close.

Record types (field `type`), each with `t` (wall-clock seconds since the epoch):
- `run`: `event` = start | end; start carries run_id, scenario, seed; end carries status.
- `start`: flow_id, flow, scheduled (the intended start time), late (bool).
- `round`: flow_id, flow, tool, round, replica, intended, sent, latency, server_time,
  outcome (a `harness.mrtr.Outcome` value), http_status, code (JSON-RPC code or failure
  class, null on success).
- `flow`: flow_id, flow, outcome (a `FlowOutcome` value), rounds, duration, server_time,
  think_time, and for refunds refund_id and answer (the lead's last action).
- `chaos`: action, phase = start | end, target, ok, detail.
- `rejection`: replica, reason, method (from the replicas' logs).
- `hypothesis`: phase = before | during | after, ok, detail.
- `invariant`: invariant, violations (count), detail (a few examples).
- `reconciliation`: client_rejections (-32602 the clients saw), logged (reasons the
  replicas logged), unexplained.
- `run` events in between: load-stopped (arrivals and users stopped), progress snapshots.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import IO, Any, Self

import orjson

FLUSH_EVERY = 0.2
"""Seconds between flushes: a run killed with SIGKILL loses at most this much of its journal.

Writing every line costs a system call per record; every other way a run ends
(results, Ctrl-C, SIGTERM, an error) closes the journal and loses nothing.
"""

_ENCODE_OPTIONS = orjson.OPT_NON_STR_KEYS
"""Keys that are not strings are written as strings, as `json.dumps` does; anything else unknown goes through `str`."""


class FlowOutcome(StrEnum):
    """How one flow ended: a bounded set, so it can be a metric label and a report column."""

    COMPLETED = "completed"  # the tool finished and did what was asked
    DECLINED = "declined"  # the lead said no; the server's safe default stands
    CANCELLED = "cancelled"  # the lead dismissed the question
    ABANDONED = "abandoned"  # the lead never answered
    UNFINISHED = "unfinished"  # the server gave up (e.g. a payment nobody finished)
    TOOL_ERROR = "tool_error"  # the tool reported an error (no quote, already confirmed, ...)
    REJECTED = "rejected"  # -32602: the server refused the requestState
    ROUNDS_EXCEEDED = "rounds_exceeded"  # still asking after 10 rounds
    ERROR = "error"  # any other protocol or transport failure
    INTERRUPTED = "interrupted"  # still running when the run stopped


class Journal:
    """Append-only JSON-lines writer, safe to share between greenlets and threads.

    `write` encodes the record and queues its line (a `deque` append, atomic between
    threads); whoever finds the last flush older than `FLUSH_EVERY` writes the queue
    out under the lock, so lines keep their order and are never torn or lost.
    """

    def __init__(self, path: Path, on_record: Callable[[dict[str, Any]], None] | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._on_record = on_record
        self._file: IO[bytes] | None = open(path, "ab")  # noqa: SIM115 - closed in close()
        self._pending: deque[bytes] = deque()
        self._lock = threading.Lock()
        self._flushed = time.monotonic()
        self.records = 0
        """Records written to the file so far (queued ones count once flushed)."""

    def write(self, record_type: str, **fields: Any) -> None:
        record = {"type": record_type, "t": fields.pop("t", None) or time.time(), **fields}
        line = orjson.dumps(record, default=str, option=_ENCODE_OPTIONS) + b"\n"
        if self._on_record is not None:
            self._on_record(record)
        if self._file is None:
            return
        self._pending.append(line)
        if time.monotonic() - self._flushed >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        """Write the queued lines out now (also done every `FLUSH_EVERY` seconds and on close)."""
        with self._lock:
            self._write_pending()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._write_pending()
                self._file.close()
                self._file = None

    def _write_pending(self) -> None:
        """With the lock held: one write for every queued line, in order."""
        self._flushed = time.monotonic()
        if self._file is None or not self._pending:
            return
        pending, lines = self._pending, []
        while pending:
            lines.append(pending.popleft())
        self._file.write(b"".join(lines))
        self._file.flush()
        self.records += len(lines)

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class JournalView:
    """A view of a run built by folding its journal records in order, one `add` at a time.

    Every report reads the run this way, so each can be rebuilt from any results folder,
    including a killed run's, and none keeps a bookkeeping of its own.
    """

    def add(self, record: dict[str, Any]) -> None:
        raise NotImplementedError

    @classmethod
    def from_records(cls, records: Iterable[dict[str, Any]]) -> Self:
        view = cls()
        for record in records:
            view.add(record)
        return view


def read_journal(*paths: Path) -> Iterator[dict[str, Any]]:
    """Every record of one or more journal parts, in file order; a torn last line is skipped."""
    for path in paths:
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                try:
                    yield json.loads(line)
                except ValueError:
                    continue
