"""The run's side of its live fold (`harness.run.live_fold.worker`): start it, tell it what the journal gained, ask it.

The load process pays one small write per journal batch for the whole fold: the part's
name and new size, sent after the batch is in the file. Requests (figures for a probe,
the progress line, reconciliation, the invariants, the finished fold) go down the same
pipe, so the fold answers each one after folding every batch written before it, as a fold
in this process would. The pipe is never waited on from gevent's hub: what does not fit
is kept in order and written by a greenlet when the pipe drains.

The run asks with the queries of `harness.run.live_fold.protocol` (`fold.ask(ProgressCounts())`
returns the query's own reply type). Each request carries an id, and its reply carries it back. One
greenlet reads the replies, each frame whole, and hands each to the asker waiting on its id;
a reply no one waits for any more is dropped. So an asker stopped anywhere (the progress,
watch or chaos greenlet killed at the run's end) abandons only its own slot: the next
asker still gets its own answer, and the pipe never holds half a frame for someone else.

The fold process is started with the lifeline (`harness.processes.children`): it dies with
the run, also after SIGKILL. If it exits or stops answering, the run's figures are gone:
that is `FoldLost`, a harness error (exit 4), and the results are rebuilt from the journal.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar, cast

import gevent
from gevent.event import AsyncResult
from gevent.socket import wait_read, wait_write

from harness.folding.read import JournalRead
from harness.journal.segments import segment_bytes
from harness.journal.writer import Journal
from harness.processes.children import process_cpu_seconds, start_child
from harness.run.live_fold.protocol import REPLY_HEAD, Ask, Finish, Growth, Reply, Request, Tell

R = TypeVar("R")

ANSWER_TIMEOUT = 300.0
"""Seconds a request waits for its answer: the fold first catches up with every batch written before it."""
CHECK_EVERY = 1.0
"""Seconds between looks at the fold process while a request waits (it may have exited without a word)."""
EXIT_TIMEOUT = 10.0
READ_CHUNK = 1 << 20
"""Bytes asked of the pipe at a time: a whole finished fold is read in pieces, not one buffer of its size."""


class FoldLost(RuntimeError):
    """The live fold process exited or stopped answering: the run's live figures are gone (a harness error)."""


class FoldProcess:
    """The live fold's process, seen from the run: one per run, started by `start`, ended by `finish` or `close`."""

    def __init__(self, folder: Path, save_every: float) -> None:
        self.folder, self.save_every = folder, save_every
        self.flush: Callable[[], None] = lambda: None
        """Writes the journal's pending records out (and so tells the fold): called before every request."""
        self.process: Any = None
        self.lost: str | None = None
        """Why the fold is gone, once it is."""
        self._broken = False
        """The pipe to the fold broke (where the journal writes, which cannot wait to learn why)."""
        self._to_fold = self._replies = -1
        self._pending = bytearray()
        """Frames the pipe did not take yet, in order; a greenlet writes them when it drains."""
        self._errors: IO[bytes] | None = None
        self._ids = itertools.count(1)
        self._waiting: dict[int, AsyncResult] = {}
        """The askers waiting, by their request's id: the reader sets each one's (ok, value)."""
        self._reader: gevent.Greenlet | None = None
        self._ended = False
        """The fold closed its end of the replies (it exited, or finished)."""
        self.dropped = 0
        """Replies no asker waited for any more (it was stopped while it waited): read whole, and dropped."""

    # --- life ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the fold process (from the main thread, as the lifeline needs)."""
        commands, self._to_fold = os.pipe()
        self._replies, answers = os.pipe()
        self._errors = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        try:
            self.process = start_child([sys.executable, "-m", "harness.run.live_fold.worker", str(self.folder),
                                        repr(self.save_every)], stdin=commands, stdout=answers, stderr=self._errors)
        finally:
            os.close(commands)
            os.close(answers)
        os.set_blocking(self._to_fold, False)
        os.set_blocking(self._replies, False)
        self._reader = gevent.spawn(self._read_replies)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def cpu_seconds(self) -> float:
        """The fold process's CPU so far (the harness's, beside the load process's own)."""
        return process_cpu_seconds(self.pid) or 0.0

    def check(self) -> None:
        """`FoldLost` when the fold process has gone (it never exits before it is asked to finish)."""
        if self.lost is None and self.process is None:
            self.lost = "the live fold process was not started"
        if self.lost is None and self.process is not None and (self._broken or self._ended
                                                               or self.process.poll() is not None):
            self._lose(self._gone(wait=EXIT_TIMEOUT))
        if self.lost is not None:
            raise self._lost_error()

    def close(self) -> None:
        """Stop the fold process if it still runs (by its PID), and let go of its pipes."""
        if self._reader is not None:
            self._reader.kill()  # before its pipe closes under it
            self._reader = None
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(EXIT_TIMEOUT)
        for fd in (self._to_fold, self._replies):
            if fd >= 0:
                os.close(fd)
        self._to_fold = self._replies = -1
        if self._errors is not None:
            self._errors.close()
            self._errors = None

    # --- telling -------------------------------------------------------------------------------

    def grown(self, part: str, size: int) -> None:
        """A journal part (its file name) now holds `size` bytes, all written: the fold reads up to there.

        Called where the journal writes, gevent's hub included: it never waits.
        """
        self._send(Growth(part, size).frame())

    def _send(self, frame: bytes) -> None:
        if self._broken or self._to_fold < 0:
            return
        if self._pending:
            self._pending += frame
            return
        try:
            written = os.write(self._to_fold, frame)
        except BlockingIOError:
            written = 0
        except OSError:  # the fold process is gone (EPIPE): `check` says why
            self._broken = True
            return
        if written < len(frame):
            self._pending += frame[written:]
            gevent.spawn(self._drain)

    def _drain(self) -> None:
        while self._pending and not self._broken and self._to_fold >= 0:
            wait_write(self._to_fold)
            try:
                written = os.write(self._to_fold, self._pending)
            except BlockingIOError:
                continue
            except OSError:
                self._broken = True
                return
            del self._pending[:written]

    # --- asking --------------------------------------------------------------------------------

    def tell(self, query: Tell) -> None:
        """`query`, carried out by the fold where it stands among the growths, with no reply (a failure is the next
        request's answer): it reaches the fold right after the batch the journal writes now, with no wait in
        between in which other greenlets could journal records."""
        self.check()
        self.flush()
        self._send(Request(next(self._ids), query).frame())

    def ask(self, query: Ask[R]) -> R:
        """`query`'s answer, after every batch written before it. Stopped while it waits, the asker leaves only its
        slot behind: its reply, when it comes, is dropped."""
        self.check()
        self.flush()
        request = Request(next(self._ids), query)
        slot = self._waiting[request.id] = AsyncResult()
        try:
            self._send(request.frame())
            ok, value = self._answer(slot)
        finally:
            self._waiting.pop(request.id, None)
        if not ok:
            raise FoldLost(f"the live fold could not answer {type(query).__name__}: {value}")
        return cast(R, value)  # the worker answers `query` with its reply type

    def finish(self, parts: Sequence[Path]) -> JournalRead:
        """The whole fold (`Finish`), saved beside the journal; the journal's writers must be done. The process
        then exits."""
        read = self.ask(Finish(tuple(part.name for part in parts)))
        deadline = time.monotonic() + EXIT_TIMEOUT
        while self.process.poll() is None and time.monotonic() < deadline:
            gevent.sleep(0.01)
        return read

    def _answer(self, slot: AsyncResult) -> tuple[bool, Any]:
        """The (ok, value) the reader puts in `slot`, looking at the fold process every `CHECK_EVERY` meanwhile."""
        deadline = time.monotonic() + ANSWER_TIMEOUT
        while True:
            if self.lost is not None:
                raise self._lost_error()
            left = deadline - time.monotonic()
            if left <= 0:
                self._lose(f"the live fold process did not answer within {ANSWER_TIMEOUT:g} s")
                continue
            try:
                answer: tuple[bool, Any] = slot.get(timeout=min(left, CHECK_EVERY))
            except gevent.Timeout:
                self.check()
                continue
            return answer

    # --- the replies ---------------------------------------------------------------------------

    def _read_replies(self) -> None:
        """The replies' only reader: every frame read whole and handed to the asker waiting on its id, until the
        fold closes its end (then whoever still waits hears why)."""
        while (head := self._read(REPLY_HEAD.size)) is not None:
            request_id, length = REPLY_HEAD.unpack(head)
            body = self._read(length)
            if body is None:
                break
            self._deliver(request_id, body)
        self._ended = True
        if self._waiting:
            self._lose(self._gone(wait=EXIT_TIMEOUT))

    def _deliver(self, request_id: int, body: bytes) -> None:
        slot = self._waiting.pop(request_id, None)
        if slot is None:
            self.dropped += 1
            return
        try:
            reply = Reply.read(request_id, body)
            slot.set((reply.ok, reply.value))
        except Exception as exc:  # noqa: BLE001 - that asker hears it as a failed answer, in one line
            slot.set((False, f"its reply could not be read: {type(exc).__name__}: {exc}"))

    def _read(self, size: int) -> bytes | None:
        """Exactly `size` bytes of the replies, waited for cooperatively; None once the pipe ends (or breaks)."""
        data = bytearray()
        while len(data) < size:
            try:
                chunk = os.read(self._replies, min(size - len(data), READ_CHUNK))
            except BlockingIOError:
                wait_read(self._replies)
                continue
            except OSError:
                return None
            if not chunk:
                return None
            data += chunk
        return bytes(data)

    # --- losing it -----------------------------------------------------------------------------

    def _gone(self, wait: float) -> str:
        """Why the pipe broke: the process's exit code, waited for a moment (a pipe closes just before the exit is
        seen); called from greenlets only (never from gevent's hub, where the journal may write)."""
        try:
            return f"the live fold process exited with code {self.process.wait(wait)}"
        except subprocess.TimeoutExpired:
            return "the live fold process stopped reading or answering"

    def _lose(self, why: str) -> None:
        """The fold is gone, for `why`: every asker still waiting hears it now."""
        if self.lost is None:
            last = self.errors().strip().splitlines()
            self.lost = why + (f": {last[-1]}" if last else "")
        waiting, self._waiting = self._waiting, {}
        for slot in waiting.values():
            slot.set_exception(self._lost_error())

    def errors(self) -> str:
        """What the fold process wrote to its standard error (its traceback, if it failed)."""
        if self._errors is None:
            return ""
        self._errors.seek(0)
        return self._errors.read().decode("utf-8", "replace")

    def _lost_error(self) -> FoldLost:
        error = FoldLost(self.lost or "the live fold is gone")
        if text := self.errors().strip():
            error.add_note(f"the live fold process's standard error:\n{text}")
        return error


JOURNAL_FILE = "journal.jsonl"


def journal_and_fold(folder: Path, save_every: float) -> tuple[Journal, FoldProcess]:
    """The journal in `folder` (rolled into segments, `harness.journal.segments`) and the fold of it (not started),
    made together because each needs the other: the journal tells the fold each batch it wrote (`FoldProcess.grown`),
    and the fold has the journal write out what it still holds before every request (`FoldProcess.flush`), so the
    fold answers after folding every record written before the question."""
    fold = FoldProcess(folder, save_every)
    journal = Journal(folder / JOURNAL_FILE, on_flush=fold.grown, segment_bytes=segment_bytes())
    fold.flush = journal.flush
    return journal, fold
