"""The run's live fold, in a process of its own: every journal record into the figures, the checks and the windows.

A run's results come from folding its journal record by record (`harness.folding.read.JournalRead`,
the flow checks, reconciliation's matching, the hypothesis windows). Done in the load
process, that fold costs the load a share of every flow; here it runs beside it, on another
core, reading the journal parts from the files the run writes. The run tells it, over a
pipe, each time a part grew and to what size (after the bytes are in the file), so this
process folds the parts in exactly the order the run wrote them, whatever the parts: once
a second, in one batch, or at once when a request needs it. The run asks it for figures
(the hypothesis probes, the progress line), for reconciliation and the invariants at the
end, and finally for the whole fold, which it also saves as `figures.json`
(`harness.folding.snapshot`), as it does every `--save-figures-every`. What it can be asked
is `harness.run.live_fold.protocol`'s queries, one case each in `LiveFold.reply_to`.

With OpenTelemetry's export on (`harness.telemetry.switch`), it is also where the flows' spans and
`mcp.client.operation.duration` are made and sent (`harness.folding.flow_traces`), from the ids and
times the load wrote into the journal: the load process does no more per round than draw a span id.
They are flushed before the finished fold is answered. With Locust workers, this fold (the master's)
reads every worker's part, so every flow's spans go out from here.

Reading the JSON lines from the file, as `report DIR` does, means the live results and a
later rebuild fold the same bytes the same way. `harness.run.live_fold.client` is the run's
side of the pipe. Started as `python -m harness.run.live_fold.worker FOLDER SAVE_EVERY`.

Its cyclic garbage collector runs at each save, not on allocation counts: every record is a
fresh dict freed by its reference count (no cycles), and collections triggered by those
allocations would cost the fold much of its CPU for nothing.
"""

from __future__ import annotations

import gc
import os
import select
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import orjson

from harness.folding.figures import RunFigures
from harness.folding.flow_traces import FlowTelemetry, fold_telemetry
from harness.folding.invariants import FlowChecks
from harness.folding.read import JournalRead
from harness.folding.reconcile import Matching, UnaskedMatching
from harness.folding.snapshot import write_snapshot
from harness.journal.records import RecordType
from harness.journal.segments import PartReader
from harness.journal.writer import JournalDamage
from harness.run.live_fold.protocol import (
    ASK,
    GROWTH,
    HEAD,
    TELL,
    Ask,
    Echo,
    Figures,
    Finish,
    Growth,
    Invariants,
    OpenWindow,
    Progress,
    ProgressCounts,
    Reconcile,
    ReplicaRounds,
    Reply,
    Request,
    SoFar,
    StateSizes,
    Tell,
    TracedReasons,
    WindowFigures,
)

_FLOW_CHECKED = frozenset({RecordType.START, RecordType.ROUND, RecordType.FLOW})
"""The records `FlowChecks` reads."""
_MATCHED = frozenset({RecordType.ROUND, RecordType.REJECTION, RecordType.RUN})
"""The records reconciliation's `Matching` reads."""
_UNASKED_MATCHED = frozenset({RecordType.ROUND, RecordType.UNASKED, RecordType.RUN})
"""The records the -32021 matching (`UnaskedMatching`) reads."""
_READ_CHUNK = 1 << 20
FOLD_EVERY = 1.0
"""Seconds the journal's growth gathers before the fold reads it (a request has it read at once): the fold works
in a few large batches rather than waking with every write, which costs it less CPU per record."""


class LiveFold:
    """Everything a run folds from its journal while it runs, fed part by part in the order the run wrote them."""

    def __init__(self, folder: Path, telemetry: FlowTelemetry | None = None) -> None:
        self.folder = folder
        self.telemetry = telemetry
        """The flows' spans and durations over OTLP (the live fold of a run with export on only); None: off."""
        self._telemetry_routes = telemetry.routes if telemetry is not None else {}
        """The record kinds the telemetry reads, each to its method (none when export is off)."""
        self.read = JournalRead()
        self.flow_checks = FlowChecks()
        self.matching = Matching()
        self.unasked = UnaskedMatching()
        self.windows: dict[str, RunFigures] = {}
        self.folded: dict[str, int] = {}
        """Bytes of each part folded so far: the sizes a snapshot is saved with."""
        self._files: dict[str, PartReader] = {}
        self._partial: dict[str, bytes] = {}
        self._adders: dict[str, Callable[[Any], None]] = {}
        """Each part's fold of a record (`JournalRead.fold_for`)."""
        """A part's bytes after its last newline (a writer always ends a batch on one; kept to be safe)."""
        self._noted: list[Growth] = []
        """Parts grown and not read yet, in the order their writers wrote them (a part's last size only)."""
        self.due: float | None = None
        """When what was noted must be read (`FOLD_EVERY` after the first of it)."""
        self.changed = False
        self.finished = False
        self.failed: str | None = None
        """What a `Tell` query failed with: the answer to every request after it."""

    # --- the journal ---------------------------------------------------------------------------

    def note(self, growth: Growth) -> None:
        """A part grew: read by `catch_up`, with what else grew, within `FOLD_EVERY`."""
        if self._noted and self._noted[-1].part == growth.part:
            self._noted[-1] = growth
        else:
            self._noted.append(growth)
        if self.due is None:
            self.due = time.monotonic() + FOLD_EVERY

    def catch_up(self) -> None:
        """Fold every growth noted so far, part by part in the order it was written."""
        for part, size in self._noted:
            self.read_part(part, size)
        self._noted.clear()
        self.due = None

    def read_part(self, name: str, size: int) -> None:
        """Fold part `name` up to byte `size` of its stream (its writer has written and flushed that much)."""
        reader = self._files.get(name)
        if reader is None:
            reader = self._files[name] = PartReader(self.folder / name, self.folded.get(name, 0), self.read)
        while reader.offset < size:
            chunk = reader.read(min(size - reader.offset, _READ_CHUNK))
            if reader.broken:  # the segment before ended short: its cut line was counted with it
                reader.broken = False
                self._partial.pop(name, None)
            if not chunk:
                break  # shorter than noted (a file replaced under the run): the rest is the journal's damage
            self._lines(name, chunk)
        self.folded[name] = reader.offset
        if self.telemetry is not None:
            self.telemetry.batch_done()
        self.changed = True

    def _lines(self, name: str, chunk: bytes) -> None:
        lines = (self._partial.pop(name, b"") + chunk).split(b"\n")
        if lines[-1]:
            self._partial[name] = lines[-1]
        add = self._adders.get(name)
        if add is None:
            add = self._adders[name] = self.read.fold_for(name)
        for line in lines[:-1]:
            self.add_line(line, add)

    def add_line(self, line: bytes, add: Callable[[Any], None] | None = None) -> None:
        """One journal line into every fold, as `report DIR` reads it with `add` (the part's: a worker's part takes
        only a worker's records): a line that is no record, or a record a fold cannot take, is counted, never
        fatal."""
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            if line.strip():
                self._count_damage(line + b"\n")
            return
        taken = self.read.records
        (add or self.read.add)(record)
        if self.read.records == taken:  # not taken by the figures: no other fold reads it either
            return
        kind = record.get("type") if type(record) is dict else None
        if type(kind) is not str:  # no record the folds below read (and no hashable kind to look up)
            return
        try:
            if kind in _FLOW_CHECKED:
                self.flow_checks.add(record)
            if kind in _MATCHED:
                self.matching.add(record)
            if kind in _UNASKED_MATCHED:
                self.unasked.add(record)
            route = self._telemetry_routes.get(kind)
            if route is not None:
                route(record)
        except (KeyError, TypeError, ValueError, AttributeError):  # the figures took it, another fold cannot
            self.read.unreadable += 1

    def _count_damage(self, line: bytes) -> None:
        damage = JournalDamage()
        damage.count(line)
        self.read.count_damage(damage)

    # --- the queries (`harness.run.live_fold.protocol`) -------------------------------------------

    def reply_to(self, query: Ask[Any]) -> Any:
        """The answer to `query`, of the reply type its class names."""
        match query:
            case Figures():
                return self.read.figures
            case WindowFigures(name):
                return self.windows.get(name)
            case ProgressCounts():
                return self._progress()
            case ReplicaRounds():
                return dict(self.read.figures.replica_rounds)
            case StateSizes():
                return dict(self.read.figures.state_bytes)
            case SoFar():
                return self.read.figures, self.read.timeline
            case Reconcile(replicas):
                reconciled = self.matching.reconcile(replicas)
                unasked = self.unasked.counts(replicas)
                if unasked is not None:
                    reconciled["unasked"] = unasked
                return reconciled
            case TracedReasons(replicas):
                return self.matching.traced_reasons(replicas)
            case Invariants(ledger, ledger_error):
                return self.flow_checks.results(ledger, ledger_error=ledger_error)
            case Finish(parts):
                return self._finish(parts)
            case Echo(value):
                return value
        raise TypeError(f"no answer to {type(query).__name__}")

    def _carry_out(self, query: Tell) -> None:
        """A query with no reply, carried out where it stands among the growths."""
        match query:
            case OpenWindow(name, since, closing):
                self._open_window(name, since, closing)
            case _:
                raise TypeError(f"nothing to carry out for {type(query).__name__}")

    def _open_window(self, name: str, since: float, closing: str | None) -> None:
        for done in {name, closing} - {None}:
            window = self.windows.get(str(done))
            if window is not None:
                self.read.figures.close(window)
        self.windows[name] = self.read.figures.window(since)

    def _progress(self) -> Progress:
        reasons: Counter[str] = Counter()
        for (_, reason), n in self.read.figures.rejections.items():
            reasons[reason] += n
        return self.read.figures.flows, reasons.most_common(3)

    def save(self) -> None:
        """Save the fold beside the journal, with the sizes folded: a run killed later is reported from it."""
        parts = [self.folder / name for name in self.folded]
        write_snapshot(self.folder, self.read, parts, sizes=dict(self.folded))
        self.changed = False

    def _finish(self, parts: tuple[str, ...]) -> JournalRead:
        for rest in self._partial.values():
            if rest.strip():
                self._count_damage(rest)  # no newline after it: a torn last line
        self._partial.clear()
        self.read.name_parts([self.folder / name for name in parts])
        self.save()
        self._close_telemetry()  # the last spans sent before the run hears the fold is done
        self.finished = True
        return self.read

    def answer(self, payload: bytes) -> Reply:
        """An `Ask` request's reply, with its id: its answer, or what went wrong when it, or an earlier `Tell`,
        failed."""
        request_id = Request.id_of(payload)
        try:
            if self.failed is not None:
                raise RuntimeError(self.failed)
            query = Request.read(payload).query
            if not isinstance(query, Ask):
                raise TypeError(f"{type(query).__name__} is not a query with an answer")
            return Reply(request_id, True, self.reply_to(query))
        except Exception as exc:  # noqa: BLE001 - the run hears what failed, as one line, and decides
            return Reply(request_id, False, f"{type(exc).__name__}: {exc}")

    def carry_out(self, payload: bytes) -> None:
        """A `Tell` request, carried out now: its failure is kept for the next request's reply."""
        try:
            query = Request.read(payload).query
            if not isinstance(query, Tell):
                raise TypeError(f"{type(query).__name__} is a query with an answer, sent as a Tell")
            self._carry_out(query)
        except Exception as exc:  # noqa: BLE001 - answered with the next request
            self.failed = self.failed or f"{type(exc).__name__}: {exc}"

    def _close_telemetry(self) -> None:
        telemetry, self.telemetry = self.telemetry, None
        if telemetry is not None:
            telemetry.close()

    def close(self) -> None:
        try:
            self._close_telemetry()
        finally:
            for file in self._files.values():
                file.close()


class Frames:
    """Frames read off a pipe: its bytes gathered until a whole frame is there."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = bytearray()
        self.closed = False

    def next(self, timeout: float | None) -> tuple[bytes, bytes] | None:
        """The next whole frame (kind, payload), waiting at most `timeout` seconds for it; None when none came."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            frame = self._take()
            if frame is not None or self.closed:
                return frame
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self.fd], [], [], wait)[0]:
                return None
            data = os.read(self.fd, _READ_CHUNK)
            if not data:
                self.closed = True
            self.buffer += data

    def _take(self) -> tuple[bytes, bytes] | None:
        if len(self.buffer) < HEAD.size:
            return None
        kind, length = HEAD.unpack_from(self.buffer)
        end = HEAD.size + length
        if len(self.buffer) < end:
            return None
        payload = bytes(self.buffer[HEAD.size:end])
        del self.buffer[:end]
        return kind, payload


def serve(fold: LiveFold, frames: Frames, replies: IO[bytes], save_every: float) -> int:
    """The fold's whole life: fold what the run says grew, answer what it asks, save every `save_every` seconds.

    It ends when the run asks for the finished fold, or when the run's end of the pipe closes
    (a run that died: the journal and the last saved fold are what is left, as `report DIR` reads them).
    """
    next_save = time.monotonic() + save_every
    try:
        while not fold.finished:
            frame = frames.next(max(0.0, min(next_save, fold.due or next_save) - time.monotonic()))
            if frame is not None:
                kind, payload = frame
                if kind == GROWTH:
                    fold.note(Growth.read(payload))
                elif kind == ASK:
                    fold.catch_up()
                    replies.write(fold.answer(payload).frame())
                    replies.flush()
                elif kind == TELL:
                    fold.catch_up()
                    fold.carry_out(payload)
            elif frames.closed:
                return 0
            if fold.due is not None and time.monotonic() >= fold.due:
                fold.catch_up()
            if time.monotonic() >= next_save:
                fold.catch_up()
                if fold.changed:
                    fold.save()
                gc.collect()
                next_save = time.monotonic() + save_every
    finally:
        fold.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """The process's entry: requests on standard input, replies on standard output (nothing else is written there)."""
    args = sys.argv[1:] if argv is None else argv
    folder, save_every = Path(args[0]), float(args[1])
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print goes to the error file, never into the replies
    fold = LiveFold(folder, fold_telemetry(folder.name))
    gc.disable()
    gc.freeze()  # what start-up made is never walked again
    return serve(fold, Frames(0), replies, save_every)


if __name__ == "__main__":
    raise SystemExit(main())
