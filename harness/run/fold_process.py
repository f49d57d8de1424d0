"""The run's side of its live fold (`harness.run.fold`): start it, tell it what the journal gained, ask it.

The load process pays one small write per journal batch for the whole fold: the part's
name and new size, sent after the batch is in the file. Requests (figures for a probe,
the progress line, reconciliation, the invariants, the finished fold) go down the same
pipe, so the fold answers each one after folding every batch written before it, as a fold
in this process would. The pipe is never waited on from gevent's hub: what does not fit
is kept in order and written by a greenlet when the pipe drains. Replies are waited for
cooperatively.

The fold process is started with the lifeline (`harness.runtime.processes`): it dies with
the run, also after SIGKILL. If it exits or stops answering, the run's figures are gone:
that is `FoldLost`, a harness error (exit 4), and the results are rebuilt from the journal.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import gevent
from gevent.lock import Semaphore
from gevent.socket import wait_read, wait_write

from harness.checks.invariants import InvariantTally
from harness.journal.figures import RunFigures
from harness.journal.records import Reconciled
from harness.report import JournalRead
from harness.run.fold import ASK, GROWN, HEAD, REPLY_HEAD, SIZE, TELL
from harness.runtime.processes import process_cpu_seconds, start_child

ANSWER_TIMEOUT = 300.0
"""Seconds a request waits for its answer: the fold first catches up with every batch written before it."""
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
        self._asking = Semaphore()
        self._errors: IO[bytes] | None = None

    # --- life ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the fold process (from the main thread, as the lifeline needs)."""
        commands, self._to_fold = os.pipe()
        self._replies, answers = os.pipe()
        self._errors = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        try:
            self.process = start_child([sys.executable, "-m", "harness.run.fold", str(self.folder),
                                        repr(self.save_every)], stdin=commands, stdout=answers, stderr=self._errors)
        finally:
            os.close(commands)
            os.close(answers)
        os.set_blocking(self._to_fold, False)
        os.set_blocking(self._replies, False)

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
        if self.lost is None and self.process is not None and (self._broken or self.process.poll() is not None):
            self._lose(self._gone(wait=EXIT_TIMEOUT))
        if self.lost is not None:
            raise self._lost_error()

    def close(self) -> None:
        """Stop the fold process if it still runs (by its PID), and let go of its pipes."""
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
        payload = SIZE.pack(size) + part.encode()
        self._send(HEAD.pack(GROWN, len(payload)) + payload)

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

    def figures(self) -> RunFigures:
        """The whole run's figures so far."""
        return self._ask("figures")

    def open_window(self, name: str, since: float, closing: str | None = None) -> None:
        """A hypothesis window fed from here on with what ends at or after `since` (and `closing` fed no more).

        Told, not asked: it reaches the fold right after the batch the journal writes now, with no
        wait in between in which other greenlets could journal records that ended after `since`.
        """
        self.check()
        self.flush()
        payload = pickle.dumps(("open_window", (name, since, closing)), protocol=pickle.HIGHEST_PROTOCOL)
        self._send(HEAD.pack(TELL, len(payload)) + payload)

    def window(self, name: str) -> RunFigures | None:
        return self._ask("window", name)

    def progress(self) -> tuple[int, list[tuple[str, int]]]:
        """Flows finished, and the three most frequent rejection reasons."""
        return self._ask("progress")

    def replica_rounds(self) -> dict[str, int]:
        return self._ask("replica_rounds")

    def reconcile(self, replicas: Sequence[str]) -> Reconciled:
        return self._ask("reconcile", list(replicas))

    def invariants(self, ledger: list[dict[str, Any]] | None, ledger_error: str | None) -> list[InvariantTally]:
        return self._ask("invariants", ledger, ledger_error)

    def finish(self, parts: Sequence[Path]) -> JournalRead:
        """The whole fold, saved beside the journal; the journal's writers must be done. The process then exits."""
        read: JournalRead = self._ask("finish", [part.name for part in parts])
        deadline = time.monotonic() + EXIT_TIMEOUT
        while self.process.poll() is None and time.monotonic() < deadline:
            gevent.sleep(0.01)
        return read

    def _ask(self, name: str, *arguments: Any) -> Any:
        self.check()
        with self._asking:
            self.flush()
            payload = pickle.dumps((name, arguments), protocol=pickle.HIGHEST_PROTOCOL)
            self._send(HEAD.pack(ASK, len(payload)) + payload)
            deadline = time.monotonic() + ANSWER_TIMEOUT
            (length,) = REPLY_HEAD.unpack(self._read(REPLY_HEAD.size, deadline))
            ok, value = pickle.loads(self._read(length, deadline))
        if not ok:
            raise FoldLost(f"the live fold could not answer '{name}': {value}")
        return value

    def _read(self, size: int, deadline: float) -> bytes:
        data = bytearray()
        while len(data) < size:
            if self.lost is not None:
                raise self._lost_error()
            try:
                chunk = os.read(self._replies, min(size - len(data), READ_CHUNK))
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._lose(f"the live fold process did not answer within {ANSWER_TIMEOUT:g} s")
                    continue
                try:
                    wait_read(self._replies, timeout=min(left, 1.0))
                except TimeoutError:
                    self.check()
                continue
            if not chunk:
                self._lose(self._gone(wait=EXIT_TIMEOUT))
                continue
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
        if self.lost is None:
            last = self.errors().strip().splitlines()
            self.lost = why + (f": {last[-1]}" if last else "")

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
