"""The run's live fold, in a process of its own: every journal record into the figures, the checks and the windows.

A run's results come from folding its journal record by record (`harness.report.JournalRead`,
the flow checks, reconciliation's matching, the hypothesis windows). Done in the load
process, that fold costs the load a share of every flow; here it runs beside it, on another
core, reading the journal parts from the files the run writes. The run tells it, over a
pipe, each time a part grew and to what size (after the bytes are in the file), so this
process folds the parts in exactly the order the run wrote them, whatever the parts: once
a second, in one batch, or at once when a request needs it. The run asks it for figures
(the hypothesis probes, the progress line), for reconciliation and the invariants at the
end, and finally for the whole fold, which it also saves as `figures.json`
(`harness.report.snapshot`), as it does every `--save-figures-every`.

Reading the JSON lines from the file, as `report DIR` does, means the live results and a
later rebuild fold the same bytes the same way. `harness.run.fold_process` is the run's
side of the pipe. Started as `python -m harness.run.fold FOLDER SAVE_EVERY`.

Its cyclic garbage collector runs at each save, not on allocation counts: every record is a
fresh dict freed by its reference count (no cycles), and collections triggered by those
allocations would cost the fold much of its CPU for nothing.
"""

from __future__ import annotations

import gc
import os
import pickle
import select
import struct
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, NamedTuple

import orjson

from harness.checks.invariants import FlowChecks, InvariantTally
from harness.checks.reconcile import Matching
from harness.journal.figures import RunFigures
from harness.journal.records import Reconciled, RecordType
from harness.journal.writer import JournalDamage
from harness.report import JournalRead
from harness.report.snapshot import write_snapshot

GROWN = b"G"
"""A part grew: the payload is its new size (`SIZE`) and its file name."""
ASK = b"A"
"""A `Request`; one reply frame, carrying the request's id, answers it."""
TELL = b"T"
"""A `Request` with no reply (a hypothesis window opened): it takes effect exactly where it stands among the
batches, since the run sends it without waiting; if it fails, every later request is answered with that failure."""
HEAD = struct.Struct("<cI")
"""A frame to the fold: its kind and the payload's length."""
SIZE = struct.Struct("<Q")
REQUEST_ID = struct.Struct("<Q")
"""A request's id, first in its payload (before the pickle, so even a request that cannot be read is answered)."""
REPLY_HEAD = struct.Struct("<QI")
"""A reply: the id of the request it answers, and the pickled (ok, value or error text)'s length."""


class Request(NamedTuple):
    """One request to the fold, as the pipe carries it: `id` comes back on its reply, so the run hands each
    reply to its own asker (an asker stopped before its reply came leaves that reply to nobody, never to the next).

    The pickle is between the run and the child it started, never read from anywhere else.
    """

    id: int
    name: str
    """One of `LiveFold.requests`."""
    arguments: tuple[Any, ...] = ()

    def frame(self, kind: bytes) -> bytes:
        """The whole frame (`ASK` or `TELL`) that carries it."""
        payload = REQUEST_ID.pack(self.id) + pickle.dumps((self.name, self.arguments), protocol=pickle.HIGHEST_PROTOCOL)
        return HEAD.pack(kind, len(payload)) + payload


class Reply(NamedTuple):
    """The fold's answer to request `id`: its value when `ok`, else what went wrong, in one line."""

    id: int
    ok: bool
    value: Any

    def frame(self) -> bytes:
        data = pickle.dumps((self.ok, self.value), protocol=pickle.HIGHEST_PROTOCOL)
        return REPLY_HEAD.pack(self.id, len(data)) + data

_FLOW_CHECKED = frozenset({RecordType.START, RecordType.FLOW})
"""The records `FlowChecks` reads."""
_MATCHED = frozenset({RecordType.ROUND, RecordType.REJECTION})
"""The records reconciliation's `Matching` reads."""
_READ_CHUNK = 1 << 20
FOLD_EVERY = 1.0
"""Seconds the journal's growth gathers before the fold reads it (a request has it read at once): the fold works
in a few large batches rather than waking with every write, which costs it less CPU per record."""


class LiveFold:
    """Everything a run folds from its journal while it runs, fed part by part in the order the run wrote them."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.read = JournalRead()
        self.flow_checks = FlowChecks()
        self.matching = Matching()
        self.windows: dict[str, RunFigures] = {}
        self.folded: dict[str, int] = {}
        """Bytes of each part folded so far: the sizes a snapshot is saved with."""
        self._files: dict[str, IO[bytes]] = {}
        self._partial: dict[str, bytes] = {}
        """A part's bytes after its last newline (a writer always ends a batch on one; kept to be safe)."""
        self._told: list[tuple[str, int]] = []
        """Parts grown and not read yet, in the order their writers wrote them (a part's last size only)."""
        self.due: float | None = None
        """When what was told must be read (`FOLD_EVERY` after the first of it)."""
        self.changed = False
        self.finished = False
        self.failed: str | None = None
        """What a told request failed with: the answer to every request after it."""
        self.requests: dict[str, Callable[..., Any]] = {
            "figures": self.figures, "open_window": self.open_window, "window": self.window,
            "progress": self.progress, "replica_rounds": self.replica_rounds, "reconcile": self.reconcile,
            "invariants": self.invariants, "finish": self.finish, "echo": self.echo}

    # --- the journal ---------------------------------------------------------------------------

    def told(self, name: str, size: int) -> None:
        """Part `name` now holds `size` bytes: read by `catch_up`, with what else grew, within `FOLD_EVERY`."""
        if self._told and self._told[-1][0] == name:
            self._told[-1] = (name, size)
        else:
            self._told.append((name, size))
        if self.due is None:
            self.due = time.monotonic() + FOLD_EVERY

    def catch_up(self) -> None:
        """Fold everything told so far, part by part in the order it was written."""
        for name, size in self._told:
            self.grown(name, size)
        self._told.clear()
        self.due = None

    def grown(self, name: str, size: int) -> None:
        """Fold part `name` up to byte `size` (its writer has written and flushed that much)."""
        file = self._files.get(name)
        if file is None:
            file = self._files[name] = open(self.folder / name, "rb")  # noqa: SIM115 - closed in close()
        offset = self.folded.get(name, 0)
        file.seek(offset)
        while offset < size:
            chunk = file.read(min(size - offset, _READ_CHUNK))
            if not chunk:
                break  # shorter than told (a file replaced under the run): the rest is the journal's damage
            offset += len(chunk)
            self._lines(name, chunk)
        self.folded[name] = offset
        self.changed = True

    def _lines(self, name: str, chunk: bytes) -> None:
        lines = (self._partial.pop(name, b"") + chunk).split(b"\n")
        if lines[-1]:
            self._partial[name] = lines[-1]
        for line in lines[:-1]:
            self.add_line(line)

    def add_line(self, line: bytes) -> None:
        """One journal line into every fold, as `report DIR` reads it (a line that is no record is counted)."""
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            if line.strip():
                self._count_damage(line + b"\n")
            return
        self.read.add(record)
        kind = record.get("type") if isinstance(record, dict) else None
        if kind in _FLOW_CHECKED:
            self.flow_checks.add(record)
        if kind in _MATCHED:
            self.matching.add(record)

    def _count_damage(self, line: bytes) -> None:
        damage = JournalDamage()
        damage.count(line)
        self.read.count_damage(damage)

    # --- requests ------------------------------------------------------------------------------

    def figures(self) -> RunFigures:
        """The whole run's figures so far (the probe before the chaos)."""
        return self.read.figures

    def open_window(self, name: str, since: float, closing: str | None = None) -> None:
        """A hypothesis window's figures, fed from now on with the rounds and flows that end at or after `since`;
        the window `closing` stops being fed at the same record (the chaos's window ends as the one after it opens)."""
        for done in {name, closing} - {None}:
            window = self.windows.get(str(done))
            if window is not None:
                self.read.figures.close(window)
        self.windows[name] = self.read.figures.window(since)

    def window(self, name: str) -> RunFigures | None:
        return self.windows.get(name)

    def progress(self) -> tuple[int, list[tuple[str, int]]]:
        """Flows finished, and the three most frequent rejection reasons with their counts."""
        reasons: Counter[str] = Counter()
        for (_, reason), n in self.read.figures.rejections.items():
            reasons[reason] += n
        return self.read.figures.flows, reasons.most_common(3)

    def replica_rounds(self) -> dict[str, int]:
        return dict(self.read.figures.replica_rounds)

    def reconcile(self, replicas: list[str]) -> Reconciled:
        return self.matching.reconcile(replicas)

    def invariants(self, ledger: list[dict[str, Any]] | None, ledger_error: str | None) -> list[InvariantTally]:
        return self.flow_checks.results(ledger, ledger_error=ledger_error)

    def echo(self, value: Any) -> Any:
        """`value` back: an answer that can only be its own request's (how the pipe's dispatch is checked)."""
        return value

    def save(self) -> None:
        """Save the fold beside the journal, with the sizes folded: a run killed later is reported from it."""
        parts = [self.folder / name for name in self.folded]
        write_snapshot(self.folder, self.read, parts, sizes=dict(self.folded))
        self.changed = False

    def finish(self, parts: list[str]) -> JournalRead:
        """The whole fold, the journal's writers done: torn last lines counted, saved, and given to the run."""
        for rest in self._partial.values():
            if rest.strip():
                self._count_damage(rest)  # no newline after it: a torn last line
        self._partial.clear()
        self.read.name_parts([self.folder / name for name in parts])
        self.save()
        self.finished = True
        return self.read

    def answer(self, payload: bytes) -> bytes:
        """A request's reply frame, with its id: its value, or what went wrong when it, or a told request, failed."""
        (request_id,) = REQUEST_ID.unpack_from(payload)
        try:
            if self.failed is not None:
                raise RuntimeError(self.failed)
            name, arguments = pickle.loads(payload[REQUEST_ID.size:])
            reply = Reply(request_id, True, self.requests[name](*arguments))
        except Exception as exc:  # noqa: BLE001 - the run hears what failed, as one line, and decides
            reply = Reply(request_id, False, f"{type(exc).__name__}: {exc}")
        return reply.frame()

    def take(self, payload: bytes) -> None:
        """A told request: carried out now, its failure kept for the next request's answer."""
        try:
            name, arguments = pickle.loads(payload[REQUEST_ID.size:])
            self.requests[name](*arguments)
        except Exception as exc:  # noqa: BLE001 - answered with the next request
            self.failed = self.failed or f"{type(exc).__name__}: {exc}"

    def close(self) -> None:
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
                if kind == GROWN:
                    (size,) = SIZE.unpack_from(payload)
                    fold.told(payload[SIZE.size:].decode(), size)
                elif kind == ASK:
                    fold.catch_up()
                    replies.write(fold.answer(payload))
                    replies.flush()
                elif kind == TELL:
                    fold.catch_up()
                    fold.take(payload)
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
    fold = LiveFold(folder)
    gc.disable()
    gc.freeze()  # what start-up made is never walked again
    return serve(fold, Frames(0), replies, save_every)


if __name__ == "__main__":
    raise SystemExit(main())
