"""Replica logs, followed while the run goes, turned into rejection events by the SDK's reason.

The reason a `requestState` was refused exists only in the replica's log, so the
collector is how a run explains its `-32602`s. Sources: files followed like `tail -F`
(the process backend's replica logs survive restarts by appending to the same file; an
external deployment's files may be rotated under us) and commands whose output is a log
stream (`kubectl logs -f ...`, `journalctl -f ...`). A line is attributed to the replica
its `replica=` field names, else to the source's label.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.reasons import parse_rejection

POLL_SECONDS = 0.1
_REPLICA_FIELD = re.compile(r"\breplica=(?P<replica>[^\s]+)")


@dataclass(frozen=True, slots=True)
class RejectionEvent:
    t: float
    replica: str
    reason: str
    method: str


OnRejection = Callable[[RejectionEvent], None]


def rejection_from_line(line: str, default_replica: str) -> RejectionEvent | None:
    """A rejection event from one log line, or None for every other line (cheap for those)."""
    parsed = parse_rejection(line)
    if parsed is None:
        return None
    match = _REPLICA_FIELD.search(line)
    replica = match["replica"] if match else default_replica
    return RejectionEvent(time.time(), replica, parsed[1], parsed[0])


class FileFollower:
    """Reads whole lines appended to a file, following it across truncation and replacement (tail -F)."""

    def __init__(self, path: Path, *, from_start: bool = True) -> None:
        self.path = path
        self._file = None
        self._inode: int | None = None
        self._partial = ""
        self._from_start = from_start

    def read_lines(self) -> list[str]:
        """Every complete line added since the last call; [] when there is nothing new."""
        self._reopen_if_replaced()
        if self._file is None:
            return []
        chunk = self._file.read()
        if not chunk:
            return []
        text = self._partial + chunk
        lines = text.split("\n")
        self._partial = lines.pop()
        return lines

    def _reopen_if_replaced(self) -> None:
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return
        if self._file is not None and stat.st_ino == self._inode and stat.st_size >= self._file.tell():
            return
        if self._file is not None:
            self._file.close()
        self._file = open(self.path, encoding="utf-8", errors="replace")  # noqa: SIM115 - kept open while following
        if not self._from_start and self._inode is None:
            self._file.seek(0, os.SEEK_END)
        self._inode = stat.st_ino
        self._partial = ""

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class Collector:
    """Follows every log source on its own thread (a greenlet under Locust) until stopped."""

    def __init__(self, on_rejection: OnRejection) -> None:
        self._on_rejection = on_rejection
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._processes: list[subprocess.Popen[str]] = []
        self.lines_read = 0

    def follow_file(self, path: Path, replica: str, *, from_start: bool = True) -> None:
        follower = FileFollower(path, from_start=from_start)
        self._start(self._poll_file, follower, replica)

    def follow_command(self, command: str, replica: str) -> None:
        process = subprocess.Popen(shlex.split(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        self._processes.append(process)
        self._start(self._read_stream, process, replica)

    def _start(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name="log-collector")
        thread.start()
        self._threads.append(thread)

    def _poll_file(self, follower: FileFollower, replica: str) -> None:
        try:
            while True:
                self._consume(follower.read_lines(), replica)
                if self._stop.is_set():
                    self._consume(follower.read_lines(), replica)  # what was written before the stop
                    return
                self._stop.wait(POLL_SECONDS)
        finally:
            follower.close()

    def _read_stream(self, process: subprocess.Popen[str], replica: str) -> None:
        assert process.stdout is not None
        for line in _lines(process):
            self._consume([line], replica)
            if self._stop.is_set():
                return

    def _consume(self, lines: list[str], replica: str) -> None:
        self.lines_read += len(lines)
        for line in lines:
            event = rejection_from_line(line, replica)
            if event is not None:
                self._on_rejection(event)

    def stop(self, settle: float = 0.3) -> None:
        """Read what the sources still hold (after `settle` seconds for in-flight writes), then stop."""
        time.sleep(settle)
        self._stop.set()
        for process in self._processes:
            if process.poll() is None:
                process.terminate()
        for thread in self._threads:
            thread.join(timeout=5)
        for process in self._processes:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()


def _lines(process: subprocess.Popen[str]) -> Iterator[str]:
    assert process.stdout is not None
    yield from process.stdout
