"""Replica logs, followed while the run goes, turned into rejection events by the SDK's reason.

The reason a `requestState` was refused exists only in the replica's log, so the
collector is how a run explains its `-32602`s. Sources: files followed like `tail -F`
(the process backend's replica logs survive restarts by appending to the same file; an
external deployment's files may be rotated under us) and commands whose output is a log
stream (`kubectl logs -f ...`, `journalctl -f ...`), and containers followed through the
Docker engine's API, found by their labels, so a restarted or recreated container is
picked up again. A line is attributed to the replica its `replica=` field names, else to
the source's label.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.processes import start_child
from harness.triage.parse import LineParser, Rejection

POLL_SECONDS = 0.1
DOCKER_PREFIX = "docker:"
"""A docker-kind `LogSource`'s location: this prefix and the labels that find the container (`docker:k=v,...`)."""
COMPOSE_PROJECT = "com.docker.compose.project"
COMPOSE_SERVICE = "com.docker.compose.service"
COMPOSE_NUMBER = "com.docker.compose.container-number"
"""The labels compose gives a service's containers: how the docker target and triage find a compose replica."""


@dataclass(frozen=True, slots=True)
class RejectionEvent:
    t: float
    replica: str
    reason: str
    method: str


OnRejection = Callable[[RejectionEvent], None]


RICH_SETTLE = 0.5
"""Seconds a rich record may wait for its continuation lines before it is counted as it stands."""


def line_parser(on_rejection: OnRejection, replica: str) -> LineParser:
    """Triage's parser for one source (plain, the SDK's rich console, JSON; stream prefixes), as run events.

    A line's own `replica=` field or stream prefix names the replica; else the source's label does.
    """
    def emit(rejection: Rejection) -> None:
        on_rejection(RejectionEvent(time.time(), rejection.replica or replica, rejection.reason, rejection.method))

    return LineParser(emit)


class FileFollower:
    """Reads whole lines appended to a file, following it across truncation and replacement (tail -F)."""

    def __init__(self, path: Path, *, from_start: bool = True) -> None:
        self.path = path
        self._file = None
        self._inode: int | None = None
        self._partial = ""
        self._from_start = from_start

    def read_lines(self, max_chars: int | None = None) -> list[str]:
        """Every complete line added since the last call; [] when there is nothing new.

        `max_chars` bounds one read (a reader that must keep its memory flat over a huge
        file calls again until it gets []); by default the whole rest is read at once.
        """
        lines = self._reopen_if_replaced()
        if self._file is None:
            return lines
        size = -1 if max_chars is None else max_chars
        text = self._partial
        while chunk := self._file.read(size):
            text += chunk
            if size < 0 or "\n" in chunk:
                break  # [] keeps meaning "nothing new": a line longer than max_chars is read on
        new = text.split("\n")
        self._partial = new.pop()
        return lines + new if lines else new

    def take_partial(self) -> str:
        """The unfinished last line read so far, now taken: a file read once may not end with a newline."""
        partial, self._partial = self._partial, ""
        return partial

    def _reopen_if_replaced(self) -> list[str]:
        """Switch to a file that replaced ours; returns the old file's unfinished last line, if any.

        A renamed file is read to its end before the switch (as `tail -F` does), so lines
        written just before a rotation are not lost.
        """
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return []
        if self._file is not None and stat.st_ino == self._inode and stat.st_size >= self._file.tell():
            return []
        tail: list[str] = []
        if self._file is not None:
            if stat.st_ino != self._inode:
                if os.fstat(self._file.fileno()).st_size > self._file.tell():
                    return []  # replaced, but the old file still holds unread lines: those first
                if self._partial:
                    tail = [self._partial]
            self._file.close()
        self._file = open(self.path, encoding="utf-8", errors="replace")  # noqa: SIM115 - kept open while following
        if not self._from_start and self._inode is None:
            self._file.seek(0, os.SEEK_END)
        self._inode = stat.st_ino
        self._partial = ""
        return tail

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


Stamp = tuple[int, int]


class ContainerFollower:
    """Reads a container's log through the engine, following the container its labels find across restarts
    and recreations.

    A stream ends when its container stops; the follower then finds the container again by
    its labels (the running one, else the newest) and re-attaches from the last line it
    read, using the engine's timestamps so no line is read twice. Lines logged before the
    follower started are skipped.
    """

    def __init__(self, labels: dict[str, str], *, since: float | None = None) -> None:
        self.labels = [f"{key}={value}" for key, value in labels.items()]
        self.since = time.time() if since is None else since
        self._since_stamp: Stamp = (int(self.since), int(round((self.since % 1) * 1e9)))
        self._last: dict[str, Stamp] = {}
        self._client: Any = None
        self._stream: Any = None
        self._closed = threading.Event()

    @classmethod
    def from_location(cls, location: str) -> ContainerFollower:
        selector = location.removeprefix(DOCKER_PREFIX)
        labels = dict(part.split("=", 1) for part in selector.split(",") if "=" in part)
        if not labels:
            raise ValueError(f"docker log source {location!r}: write docker:LABEL=VALUE[,LABEL=VALUE...]")
        return cls(labels)

    def lines(self) -> Iterator[str]:
        """Every new log line, until `close()`; blocks while the container logs nothing."""
        while not self._closed.is_set():
            container = self._find()
            if container is not None:
                yield from self._read(container)
            self._closed.wait(POLL_SECONDS)

    def _find(self) -> Any:
        import docker

        try:
            if self._client is None:
                self._client = docker.from_env()
            found = self._client.containers.list(all=True, filters={"label": self.labels})
        except (docker.errors.DockerException, OSError):
            return None
        if not found:
            return None
        running = [container for container in found if container.status == "running"]
        return max(running or found, key=lambda container: _split_stamp(container.attrs.get("Created", "") + " ")[0]
                   or (0, 0))

    def _read(self, container: Any) -> Iterator[str]:
        last = self._last.get(container.id)
        floor = last or self._since_stamp
        since = floor[0] + floor[1] / 1e9
        try:
            self._stream = container.logs(stream=True, follow=True, timestamps=True, since=max(since, 1e-9))
        except Exception:  # gone meanwhile, or the engine is restarting: find it again
            return
        if self._closed.is_set():  # closed while attaching: close() did not see this stream
            self.close()
            return
        partial = b""
        try:
            for chunk in self._stream:
                partial += chunk
                *complete, partial = partial.split(b"\n")
                for raw in complete:
                    stamp, text = _split_stamp(raw.decode("utf-8", errors="replace"))
                    if stamp is not None:
                        if stamp < floor or (last is not None and stamp <= last):
                            continue
                        self._last[container.id] = last = stamp
                    yield text
        except Exception:  # a closed or broken stream: re-attach (or stop, when closed)
            pass
        finally:
            self._stream = None

    def close(self) -> None:
        self._closed.set()
        stream = self._stream
        if stream is not None:
            try:
                stream.close()
            except Exception:
                pass
        if self._client is not None:
            try:
                self._client.close()
            except Exception:
                pass


def _split_stamp(line: str) -> tuple[Stamp | None, str]:
    """(seconds, nanoseconds) of the engine's RFC 3339 timestamp in front of a log line, and the line."""
    head, _, text = line.partition(" ")
    try:
        date, _, fraction = head.rstrip("Z").partition(".")
        seconds = int(datetime.strptime(date, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp())
        return (seconds, int((fraction + "000000000")[:9])), text
    except ValueError:
        return None, line


class Collector:
    """Follows every log source on its own thread (a greenlet under Locust) until stopped."""

    def __init__(self, on_rejection: OnRejection) -> None:
        self._on_rejection = on_rejection
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._processes: list[subprocess.Popen[str]] = []
        self._containers: list[ContainerFollower] = []
        self.lines_read = 0

    def follow(self, source: Any) -> None:
        """Follow one `LogSource` of a target, whatever its kind."""
        if source.kind == "file":
            self.follow_file(source.path, source.replica)
        elif source.kind == "docker":
            self.follow_container(source.location, source.replica)
        else:
            self.follow_command(source.location, source.replica)

    def follow_container(self, location: str, replica: str) -> None:
        """Follow the log of the container a location's labels find (`docker:k=v,...`), from now on."""
        follower = ContainerFollower.from_location(location)
        self._containers.append(follower)
        self._start(self._read_container, follower, replica)

    def follow_file(self, path: Path, replica: str, *, from_start: bool = True) -> None:
        follower = FileFollower(path, from_start=from_start)
        self._start(self._poll_file, follower, replica)

    def follow_command(self, command: str, replica: str) -> None:
        process = start_child(shlex.split(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              stdin=subprocess.DEVNULL)
        self._processes.append(process)
        self._start(self._read_stream, process, replica)

    def _start(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name="log-collector")
        thread.start()
        self._threads.append(thread)

    def _poll_file(self, follower: FileFollower, replica: str) -> None:
        parser = line_parser(self._on_rejection, replica)
        try:
            while True:
                self._consume(follower.read_lines(), replica, parser)
                if self._stop.is_set():
                    self._consume(follower.read_lines(), replica, parser)  # what was written before the stop
                    return
                parser.flush(older_than=RICH_SETTLE)
                self._stop.wait(POLL_SECONDS)
        finally:
            parser.flush()
            follower.close()

    def _read_stream(self, process: subprocess.Popen[str], replica: str) -> None:
        assert process.stdout is not None
        parser = line_parser(self._on_rejection, replica)
        try:
            for line in _lines(process):
                self._consume([line], replica, parser)
                if self._stop.is_set():
                    return
        finally:
            parser.flush()

    def _read_container(self, follower: ContainerFollower, replica: str) -> None:
        parser = line_parser(self._on_rejection, replica)
        try:
            for line in follower.lines():
                self._consume([line], replica, parser)
        finally:
            parser.flush()

    def _consume(self, lines: list[str], replica: str, parser: LineParser) -> None:
        """Every line of one source (labelled `replica`) through its parser."""
        self.lines_read += len(lines)
        for line in lines:
            parser.feed(line)

    def stop(self, settle: float = 0.3) -> None:
        """Read what the sources still hold (after `settle` seconds for in-flight writes), then stop."""
        time.sleep(settle)
        self._stop.set()
        for follower in self._containers:
            follower.close()
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
