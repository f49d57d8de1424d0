"""Sources read into their parsers: every file on one shared poller, every stream on its own thread.

A followed file has no way to say it grew except being looked at again, and the old way
(a thread per file, each waking ten times a second) cost a wake-up per file per tenth of
a second. Here one poller looks at every file of a reader set in turn, and reads on at
once while any file still has lines (in bounded chunks, one file after another, so a
huge file does not starve the others). Between looks it sleeps until the kernel says a
followed file changed (`harness.logs.changes`, inotify), at most ten looks a second
while lines keep coming, and one look every `FALLBACK_SECONDS` anyway: a quiet log
costs almost no wake-ups. Without inotify it looks ten times a second, as before.
Streams (a command's pipe, a container's log, standard input) block in the kernel or the
engine until a line comes, so each gets a thread (a greenlet under Locust) that costs
nothing while it waits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from harness.logs.changes import FileChanges
from harness.logs.parse import LineParser
from harness.logs.sources import FileSource, Source

POLL_SECONDS = 0.1
"""The shortest time between two looks at the files after one found nothing new (a burst of writes is read in
one look, not one per write); the time between looks when the kernel cannot report changes."""
FALLBACK_SECONDS = 2.0
"""The longest time between two looks while the kernel reports changes: a file it cannot watch for another
machine's writes (a network file system), or lines a rotated file got after its rename, wait at most this."""
RICH_SETTLE = 0.5
"""Seconds a rich record may wait for its continuation lines before it is counted as it stands."""
DRAIN_SECONDS = 5.0
"""At `stop`, how long the poller may go on reading what the files still hold (a file written without pause
would otherwise never be finished)."""


class Reader:
    """One source and its parser, with what reading it came to."""

    def __init__(self, source: Source, parser: LineParser) -> None:
        self.source = source
        self.parser = parser
        self.lines = 0
        self.error: str | None = None
        self.ended = False
        self.ended_at: float | None = None
        """When it ended (wall clock), if it did."""
        self.stopped = False
        """It ended because `Readers.stop` was called (not by itself)."""

    @property
    def bad(self) -> int:
        """Lines its parser could not read, skipped."""
        return self.parser.bad

    @property
    def cut(self) -> int:
        """Lines longer than the cap, read cut."""
        return self.parser.cut

    @property
    def why(self) -> str:
        """Why it ended: its error, its source's failure, or that its stream ended."""
        return self.error or self.source.failure or f"{self.source.name}: its stream ended"


class Readers:
    """Reads every source added (`read`) into its parser until each ends (read once) or `stop()` (followed)."""

    def __init__(self, *, settle: float = RICH_SETTLE, on_end: Callable[[Reader], None] | None = None) -> None:
        """`on_end`: called once per source when it ends, from its reading thread (`Reader.stopped` tells whether
        `stop()` ended it)."""
        self.settle = settle
        self._on_end = on_end
        self._readers: list[Reader] = []
        self._files: list[Reader] = []
        self._threads: list[threading.Thread] = []
        self._poller: threading.Thread | None = None
        self._changes: FileChanges | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._active = 0
        self._idle = threading.Event()
        self._idle.set()

    def read(self, source: Source, parser: LineParser) -> Reader:
        """Start reading an opened source now: a file joins the poller, a stream gets its thread."""
        reader = Reader(source, parser)
        with self._lock:
            self._readers.append(reader)
            self._active += 1
            self._idle.clear()
            if isinstance(source, FileSource):
                self._files.append(reader)
                if self._poller is None or not self._poller.is_alive():
                    self._changes = FileChanges()
                    self._poller = threading.Thread(target=self._poll, args=(self._changes,), daemon=True,
                                                    name="logs-file-poller")
                    self._poller.start()
                return reader
        thread = threading.Thread(target=self._stream, args=(reader,), daemon=True, name=f"logs-{source.name}")
        self._threads.append(thread)
        thread.start()
        return reader

    @property
    def readers(self) -> Sequence[Reader]:
        return tuple(self._readers)

    @property
    def lines(self) -> int:
        return sum(reader.lines for reader in self._readers)

    @property
    def failures(self) -> list[str]:
        """What went wrong with sources after they opened (an error, a command exiting non-zero)."""
        failures = [reader.error for reader in self._readers if reader.error]
        failures += [reader.source.failure for reader in self._readers if reader.source.failure]
        return failures

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every source has ended (True) or `timeout` passes (False)."""
        return self._idle.wait(timeout)

    def tick(self, older_than: float) -> None:
        """Finish rich records a quiet stream left unfinished for `older_than` seconds."""
        for reader in self.readers:
            reader.parser.flush(older_than=older_than)

    def stop(self, timeout: float = 5.0) -> None:
        """Close every source (commands by their PID), read what the files still hold, finish the parsers."""
        self._stop.set()
        changes = self._changes
        if changes is not None:
            changes.wake()
        for reader in self.readers:
            if not reader.source.polled:
                reader.source.close()
        deadline = time.monotonic() + timeout
        threads = [*self._threads, *([self._poller] if self._poller is not None else [])]
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        for reader in self.readers:
            reader.parser.flush()

    # --- the threads -----------------------------------------------------------------------------

    def _end(self, reader: Reader) -> None:
        try:
            reader.parser.flush()
        finally:
            self._mark_ended(reader)

    def _mark_ended(self, reader: Reader) -> None:
        with self._lock:
            if reader.ended:
                return
            reader.ended, reader.ended_at, reader.stopped = True, time.time(), self._stop.is_set()
            self._active -= 1
            if self._active == 0:
                self._idle.set()
        if self._on_end is not None:
            self._on_end(reader)

    def _stream(self, reader: Reader) -> None:
        feed = reader.parser.feed
        try:
            for replica, text, t in reader.source.lines():
                feed(text, replica, t)
                reader.lines += 1
        except Exception as exc:  # noqa: BLE001 - reported as the source's failure, the others carry on
            reader.error = f"{reader.source.name}: {exc.__class__.__name__}: {exc}"
        finally:
            self._end(reader)

    def _poll(self, changes: FileChanges) -> None:
        """Look at every file in turn; wait for a change only when none had anything new. Ends when no file is
        left to read, or after the last reading once `stop()` was called."""
        drain_until: float | None = None
        changed = False
        try:
            while True:
                stopping = self._stop.is_set()
                if stopping and drain_until is None:
                    drain_until = time.monotonic() + DRAIN_SECONDS
                with self._lock:
                    files = [reader for reader in self._files if not reader.ended]
                    if not files:
                        self._poller = None
                        return
                busy = False
                for reader in files:
                    busy |= self._read_file(reader)
                if stopping and (not busy or time.monotonic() > (drain_until or 0.0)):
                    return
                if not busy:
                    for reader in files:
                        reader.parser.flush(older_than=self.settle)
                    changed = self._wait_for_change(changes, files, after_change=changed)
        finally:
            changes.close()
            with self._lock:
                files = [reader for reader in self._files if not reader.ended]
            for reader in files:
                reader.source.close()
                self._end(reader)

    def _wait_for_change(self, changes: FileChanges, files: list[Reader], *, after_change: bool) -> bool:
        """Sleep until a file may have grown (True when the kernel said so), a timeout, or `stop()`.

        After a look the kernel woke, first `POLL_SECONDS` of quiet, so a file written without
        pause is looked at ten times a second, not once per write. While a rich record waits
        for its continuation lines, or a folder cannot be watched, the timeout is the old poll.
        """
        if after_change and self._stop.wait(POLL_SECONDS):
            return False
        paths = [reader.source.path for reader in files if isinstance(reader.source, FileSource)]
        watched = changes.watch(paths)
        settling = any(reader.parser.waiting for reader in files)
        return changes.wait(FALLBACK_SECONDS if watched and not settling else POLL_SECONDS)

    def _read_file(self, reader: Reader) -> bool:
        """One bounded read of one file into its parser; True if it had lines."""
        source = reader.source
        assert isinstance(source, FileSource)
        replica = source.replica
        try:
            batch = source.read_lines()
            if not batch and source.finite:
                rest = source.take_partial()
                batch = [rest] if rest else []
                self._feed(reader, batch, replica)
                source.close()
                self._end(reader)
                return False
        except (OSError, EOFError) as exc:  # EOFError: a gzipped log cut short
            reader.error = f"{source.name}: {exc.__class__.__name__}: {exc}"
            source.close()
            self._end(reader)
            return False
        self._feed(reader, batch, replica)
        return bool(batch)

    @staticmethod
    def _feed(reader: Reader, lines: list[str], replica: str | None) -> None:
        feed = reader.parser.feed
        for line in lines:
            feed(line, replica)
        reader.lines += len(lines)
