"""The journal: one JSON line per flow round, flow outcome, chaos action and rejection, as it happens.

It is the single output contract of a run (as in Chaos Toolkit): the summary, the
verdict, the HTML report and the JUnit file are all derived from it, never from a
second bookkeeping, and `mrtr-harness report` rebuilds them from it after the fact.
Its record types live in `harness.journal.records` (documented in docs/journal.md).

A load process writes two or three records per MRTR round, so a record costs one
`orjson` encode and a queue append; the queue is written out in one write at most
`FLUSH_DELAY` seconds after the first record of a batch arrived, also when no record
follows it (leads thinking for minutes). So a run killed with SIGKILL loses only its
last fraction of a second, and an idle journal costs no wake-ups at all.

Who writes the batch out depends on the process. In a load process (gevent's patching
on, as Locust does it) it is a `harness.processes.timers.Timers` callback in gevent's hub: the
batch is written on the first wake-up the process has anyway (a reply, a lead's answer)
once `FLUSH_DELAY - FLUSH_SLACK` has passed, and only a quiet process is woken for it.
Anywhere else it is a flusher thread.

A run's journal rolls into segments (`harness.journal.segments`): the file keeps the
journal's name and stays plain, and each full segment is renamed and compressed on a
native thread, never in the hub; readers here read the segments and the file as one stream.

No secret the process holds reaches the file: each batch passes through `harness.secrets.scrub_bytes`,
which replaces every registered value (client secret, tokens, sealing keys) by its fingerprint.
"""

from __future__ import annotations

import codecs
import itertools
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import orjson

from harness.errors import UsageError
from harness.journal.records import FlowOutcome, Record
from harness.journal.segments import SegmentedFile, part_batches
from harness.secrets import scrub_bytes

if TYPE_CHECKING:
    from harness.processes.timers import Timers

__all__ = ["FLUSH_DELAY", "FlowOutcome", "Journal", "JournalDamage", "JournalView", "UnreadableJournal", "read_journal"]

FLUSH_DELAY = 0.1
"""Seconds a record may wait in memory before it is written: a batch of records costs one write.

Writing every line costs a system call per record; every other way a run ends
(results, Ctrl-C, SIGTERM, an error) closes the journal and loses nothing. A killed run
may lose at most 0.2 s: this leaves the rest for a core so busy that the flusher wakes
late (benchmarks/README.md has the delays measured on a loaded machine).
"""

FLUSH_SLACK = 0.09
"""Seconds before `FLUSH_DELAY` a batch may be written: in a load process on a wake-up it has anyway, which
at a few rounds a second comes long before `FLUSH_DELAY`; a flusher thread always waits the shorter time."""

_ENCODE_OPTIONS = orjson.OPT_NON_STR_KEYS
"""Keys that are not strings are written as strings, as `json.dumps` does; anything else unknown goes through `str`."""


class Journal:
    """Append-only JSON-lines writer, safe to share between greenlets (or, without gevent, threads).

    `write` encodes the record and queues its line (a `deque` append, atomic between
    threads) and, for the first line of a batch, starts the batch's timer (gevent's loop)
    or wakes the flusher thread, which waits `FLUSH_DELAY` for more to gather. The queue
    is written out under the lock, so lines keep their order and are never torn or lost.
    `on_flush(file name, size)` is called after each batch is in the file: the run's live
    fold (`harness.run.live_fold`) reads the file up to there. With `segment_bytes`, the file rolls
    into segments, each closed one compressed on a thread (`harness.journal.segments`); `size`
    and the sizes told are of the whole stream; `compress=False` leaves closed segments plain (a worker's spool).
    """

    def __init__(self, path: Path, on_flush: Callable[[str, int], None] | None = None,
                 *, flush_delay: float = FLUSH_DELAY, segment_bytes: int | None = None, compress: bool = True) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._on_flush = on_flush
        self._file: SegmentedFile | None = SegmentedFile(path, segment_bytes, compress=compress)
        self._size = 0
        self._pending: deque[bytes] = deque()
        self._lock = threading.Lock()
        self._dirty = threading.Event()
        self._closing = False
        self._flush_delay = flush_delay
        self.records = 0
        """Records written to the file so far (queued ones count once flushed)."""
        self._timers = _gevent_timers()
        """A load process's: it holds this journal's next batch write, when one is due."""
        if self._timers is None:
            self._flusher = threading.Thread(target=self._flush_when_dirty, name="journal-flush", daemon=True)
            self._flusher.start()

    def write(self, record: Record) -> None:
        line = orjson.dumps(record, default=str, option=_ENCODE_OPTIONS) + b"\n"
        if self._file is None:
            return
        self._pending.append(line)
        if self._timers is not None:
            if not self._timers:
                self._timers.call_at(time.time() + self._flush_delay, self._flush_due)
        elif not self._dirty.is_set():
            self._dirty.set()

    @property
    def closed(self) -> bool:
        return self._file is None

    @property
    def size(self) -> int:
        """Bytes in the journal's stream (`harness.journal.segments`), every written batch included."""
        return self._size if self._file is None else self._file.size

    def write_many(self, records: Iterable[Record]) -> int:
        """Queue many records at once (a run journaling every flow it interrupted); returns how many."""
        count = 0
        for record in records:
            self.write(record)
            count += 1
        return count

    def _flush_due(self, _: object = None) -> None:
        """The batch's timer, called in gevent's hub: write the queue out (the lock is only ever held around a
        write, which never yields to the loop, so it is free here; if not, the batch waits for the next timer)."""
        if self._timers is None:
            return
        if not self._lock.acquire(blocking=False):
            if self._pending and self._file is not None:
                self._timers.call_at(time.time() + self._flush_delay, self._flush_due)
            return
        try:
            self._write_pending()
        finally:
            self._lock.release()

    def _flush_when_dirty(self) -> None:
        while True:
            self._dirty.wait()
            if self._closing:
                return
            # let the rest of the batch arrive: one write for all of it
            time.sleep(max(0.0, self._flush_delay - FLUSH_SLACK))
            self._dirty.clear()
            self.flush()

    def flush(self) -> None:
        """Write the queued lines out now (the flusher does this within `FLUSH_DELAY`, and close does)."""
        with self._lock:
            self._write_pending()

    def close(self) -> None:
        self._closing = True
        self._dirty.set()
        timers, self._timers = self._timers, None
        if timers is not None:
            timers.clear()
        with self._lock:
            if self._file is not None:
                self._write_pending()
                self._size = self._file.size
                self._file.close()  # waits for the last closed segment's compression
                self._file = None

    def _write_pending(self) -> None:
        """With the lock held: one write for every queued line, in order."""
        if self._file is None or not self._pending:
            return
        pending, lines = self._pending, []
        while pending:
            lines.append(pending.popleft())
        batch = scrub_bytes(b"".join(lines))
        self._file.write(batch)
        self.records += len(lines)
        if self._on_flush is not None:
            self._on_flush(self.path.name, self.size)

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _gevent_timers() -> Timers | None:
    """A `Timers` on gevent's hub when this process runs under gevent's patching (a load process), else None."""
    if "gevent.monkey" not in sys.modules:
        return None
    from gevent import monkey

    if not monkey.is_module_patched("threading"):
        return None
    from harness.processes.timers import Timers

    return Timers(FLUSH_SLACK)


class JournalView:
    """A view of a run built by folding its journal records in order, one `add` at a time.

    Every report reads the run this way, so each can be rebuilt from any results folder,
    including a killed run's, and none keeps a bookkeeping of its own.
    """

    def add(self, record: Mapping[str, Any]) -> None:
        raise NotImplementedError

    @classmethod
    def from_records(cls, records: Iterable[dict[str, Any]]) -> Self:
        view = cls()
        for record in records:
            view.add(record)
        return view


def read_journal(*paths: Path, damage: JournalDamage | None = None) -> Iterator[dict[str, Any]]:
    """Every record of one or more journal parts, in file order.

    A line that is not JSON is skipped and counted in `damage`: a torn last line (no
    newline after it, what a SIGKILL mid-write leaves) as `torn`, any other as
    `unreadable`. A part that is not a journal at all (binary, not UTF-8) is
    `UnreadableJournal` (exit 2), before any of its records.
    """
    for path in paths:
        yield from read_journal_from(path, 0, damage)


def read_journal_from(path: Path, offset: int, damage: JournalDamage | None = None) -> Iterator[dict[str, Any]]:
    """The records of one part from byte `offset` of its stream (a line's start; `harness.journal.segments`: its
    segments, plain or compressed, as one), in order; lines that are not JSON skipped and counted in `damage`.
    From the start (`offset` 0), a part that is no journal is `UnreadableJournal`."""
    for lines, whole in journal_batches(path, offset, damage):
        for line in lines:
            try:
                yield orjson.loads(line)
            except orjson.JSONDecodeError:
                if damage is not None and line.strip():
                    damage.count(line, whole)


def fold_journal_from(path: Path, offset: int, fold: Callable[[Any], None], damage: JournalDamage,
                      stop: int | None = None) -> None:
    """`read_journal_from`'s records into `fold`, in order: the same records and damage, without a generator's step
    per record (`report DIR` folds millions); with `stop`, those up to there (`part_batches`)."""
    loads = orjson.loads
    for lines, whole in journal_batches(path, offset, damage, stop):
        for line in lines:
            try:
                record = loads(line)
            except orjson.JSONDecodeError:
                if line.strip():
                    damage.count(line, whole)
                continue
            fold(record)


def journal_batches(path: Path, offset: int, damage: JournalDamage | None,
                    stop: int | None = None) -> Iterator[tuple[list[bytes], bool]]:
    """The lines of one part from byte `offset` (up to `stop` if given) in batches
    (`harness.journal.segments.part_batches`); from the start (`offset` 0), a part that is no journal is
    `UnreadableJournal`, before any of its lines."""
    batches = part_batches(path, offset, damage, stop)
    if offset == 0:
        first = next(batches, None)
        if first is None:
            return
        _refuse_binary(path, first[0][0][:_SNIFF_BYTES])
        batches = itertools.chain((first,), batches)
    yield from batches


@dataclass
class JournalDamage:
    """What a read of journal parts skipped: lines that are not a JSON record, and torn last lines."""

    unreadable: int = 0
    torn: int = 0

    def count(self, line: bytes, whole: bool | None = None) -> None:
        """One line that is no record: torn when no newline follows it (`whole` says, for a line split from it)."""
        if line.endswith(b"\n") if whole is None else whole:
            self.unreadable += 1
        else:
            self.torn += 1


class UnreadableJournal(UsageError):
    """A journal part that is no journal: binary or not UTF-8 text (bad input, exit 2)."""


_SNIFF_BYTES = 8192
"""How much of a part's first line is read to tell a journal from a binary file: a journal's first line is
always the short `run start` record, so a NUL byte or a byte that is not UTF-8 there means another kind of file."""


def _refuse_binary(path: Path, head: bytes) -> None:
    """`UnreadableJournal` when `head` (the start of a part's first line) is not UTF-8 text; a zeroed or damaged
    tail further on is the journal's own damage, counted line by line instead."""
    if b"\0" in head:
        raise UnreadableJournal(f"{path} is not a journal: it is a binary file (NUL bytes in its first line)")
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)  # a character cut at the end is fine
    except UnicodeDecodeError as exc:
        raise UnreadableJournal(f"{path} is not a journal: it is not UTF-8 text (byte 0x{head[exc.start]:02x} at "
                                f"offset {exc.start})") from None
