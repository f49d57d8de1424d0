"""Where log lines come from: files, a command's output, standard input, containers. One abstraction for the
run's collector and for triage.

A `Source` is opened (`open`, which fails early with a `SourceError`), read, and closed.
Files are *polled*: `FileSource.read_lines` returns what was added since the last call,
so one poller serves every file (`harness.logs.readers`). Everything else is a
*stream*: `lines()` blocks on a pipe or the engine and runs on its own thread. Each line
comes with the replica its source knows (a container's name, the label given to a file)
or None, in which case the line's own text may name it (`replica=r1`, a JSON `pod`
field, a `kubectl --prefix` prefix), and with the time the source says it was written
when it knows one (the engine's timestamp).

Followed, a file is read from its end as of `open` (like `tail -F`, rotation and
truncation included), a container from `since`; read once (`follow=False`), every
source is read to its end and stops. A command and standard input end when their
stream does. Files are read in bounded chunks, so a huge log never sits in memory whole.
"""

from __future__ import annotations

import contextlib
import io
import queue
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, NamedTuple

from harness.config.logs import (
    COMPOSE_NUMBER,
    COMPOSE_PROJECT,
    COMPOSE_SERVICE,
)
from harness.errors import ExitCode, TargetDown, UsageError
from harness.logs.containers import ContainerFollower, compose_identity, split_lines
from harness.logs.files import FileFollower, sniff
from harness.logs.parse import LINE_CAP
from harness.processes.children import start_child
from harness.secrets import command_env

READ_CHARS = 1 << 20
"""Characters read from a file at a time: the memory a huge file costs, whatever its size."""
STOP_TIMEOUT = 5.0
DOCKER_WATCH_SECONDS = 2.0
"""How often a followed compose service is listed again, to follow containers that (re)started."""


class Line(NamedTuple):
    """One line of a stream: the replica its source knows (or None), the text, and when it was written if the
    source knows (or None)."""

    replica: str | None
    text: str
    t: float | None = None


class SourceError(TargetDown):
    """A source could not be opened or reached: a missing file read once, no engine, no such command. Outside the
    harness, so exit 3 (`TargetDown`), never the harness's own failure."""


class NotALog(SourceError, UsageError):
    """A file that is not a log this can read: a binary file, a damaged gzip, or a gzipped log given to follow.
    The user's input, not an unreachable source: a usage error."""

    exit_code = ExitCode.USAGE


def capped_lines(stream: IO[str], cap: int = LINE_CAP) -> Iterator[str]:
    """A text stream's lines, each at most `cap + 1` characters: the rest of a longer line is read and dropped, so
    one endless line costs bounded memory (the parser cuts it to `cap` and counts it)."""
    while line := stream.readline(cap + 1):
        if len(line) > cap and not line.endswith("\n"):
            while (rest := stream.readline(cap + 1)) and not rest.endswith("\n"):
                pass
        yield line


class Source:
    """One stream of log lines. `open` fails early and clearly; then the source is polled or streamed."""

    name: str = "source"
    finite: bool = True
    """True when the source ends by itself (read once, stdin, a command); False when it follows forever."""
    polled: bool = False
    """True for a file (`read_lines`, on the shared poller); False for a stream (`lines`, on its own thread)."""

    def __init__(self) -> None:
        self.replicas: tuple[str, ...] = ()
        """Replica labels known before any line: shown at zero from the start."""
        self.failure: str | None = None
        """Set when the source ended badly after it opened (a command that exited non-zero)."""
        self.fallback_replica: str | None = None
        """The replica a line counts under when neither its source nor its text names one (triage: a file's
        base name); unlike `replicas`, not shown at zero, since a file may hold every replica's lines."""
        self._stop = threading.Event()

    def open(self) -> str | None:
        """Check the source can be read; raises `SourceError`. Returns a notice for the user, if any."""
        return None

    def lines(self) -> Iterator[Line]:
        """A stream's lines, blocking until each comes; ends with the stream or at `close()`."""
        raise NotImplementedError

    def close(self) -> None:
        self._stop.set()


class FileSource(Source):
    """A log file, followed across rotation and truncation (from its end as of `open`), or read to its end once."""

    polled = True

    def __init__(self, path: Path, replica: str | None = None, *, follow: bool = True) -> None:
        super().__init__()
        self.path = path
        self.replica = replica
        self.finite = not follow
        self.name = f"file {path}" + (f" ({replica})" if replica else "")
        self.replicas = (replica,) if replica else ()
        self._follower: FileFollower | None = None

    def open(self) -> str | None:
        if self.path.is_dir():
            raise SourceError(f"{self.path} is a folder, not a log file")
        existed = self.path.exists()
        if self.finite and not existed:
            raise SourceError(f"no such file: {self.path}")
        kind = "text"
        if existed:
            try:
                kind = sniff(self.path)
            except OSError as exc:
                raise SourceError(f"cannot read {self.path}: {exc.strerror}") from None
        if kind == "binary":
            raise NotALog(f"{self.path} is a binary file, not a log (it holds NUL bytes)")
        if kind == "damaged gzip":
            raise NotALog(f"{self.path} starts like a gzip file but cannot be decompressed")
        if kind == "gzip" and not self.finite:
            raise NotALog(f"{self.path} is gzipped, a rotated log that is never written again: read it once "
                          "(triage --once), not followed")
        # Followed: from the end, as of now (what was logged before is history, not the incident); a file
        # that appears later is new throughout. Opened here, so a line written once reading started counts.
        self._follower = FileFollower(self.path, from_start=self.finite, compressed=kind == "gzip")
        return None if existed else f"waiting for {self.path} to appear"

    def read_lines(self) -> list[str]:
        """The complete lines added since the last call (at most about `READ_CHARS`); [] when none."""
        assert self._follower is not None, "open() first"
        return self._follower.read_lines(READ_CHARS)

    def take_partial(self) -> str:
        """The last line when it has no newline: read once, a file's end is the end of its last line."""
        assert self._follower is not None, "open() first"
        return self._follower.take_partial()

    def close(self) -> None:
        super().close()
        if self._follower is not None:
            self._follower.close()


class CommandSource(Source):
    """A command whose output is a log stream: `kubectl logs -f ...`, `journalctl -f ...`, `docker logs -f ...`.

    Run without a shell (split like a shell would), in its own session, with stderr merged
    into stdout (where most programs log); stopped by its PID on `close()`, and
    killed by the kernel if the harness itself is killed (`harness.processes.children.start_child`). The command
    decides where its stream starts: give it one that starts now (`--since`, `--tail=0`,
    `-n0`), since a line without a timestamp cannot be told apart from history.
    """

    def __init__(self, command: str, replica: str | None = None, *, pass_env: Sequence[str] | None = None) -> None:
        """`pass_env`: a scenario's command, given the commands' environment (`harness.secrets.command_env`: the
        allow-list and these names), never the harness's whole one (its client secret); None (triage's
        `--command`, typed by its user): the caller's environment."""
        super().__init__()
        self.command = command
        self.replica = replica
        self.env = command_env(pass_env) if pass_env is not None else None
        self.name = f"command {command!r}"
        self.argv = shlex.split(command)
        self._process: subprocess.Popen[bytes] | None = None

    def open(self) -> str | None:
        if not self.argv:
            raise SourceError("an empty command")
        try:
            self._process = start_child(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=self.env)
        except OSError as exc:
            raise SourceError(f"cannot start {self.argv[0]!r}: {exc.strerror or exc}") from None
        return None

    def lines(self) -> Iterator[Line]:
        process = self._process
        assert process is not None and process.stdout is not None, "open() first"
        replica = self.replica
        for line in capped_lines(io.TextIOWrapper(process.stdout, encoding="utf-8", errors="replace")):
            yield Line(replica, line)
        code = process.wait()
        if code != 0 and not self._stop.is_set():
            self.failure = f"{self.name} exited with code {code}"

    def close(self) -> None:
        super().close()
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT)


class StdinSource(Source):
    """Standard input, until it ends: `kubectl logs -f ... | mrtr-harness triage --stdin`."""

    name = "stdin"

    def open(self) -> str | None:
        if sys.stdin is None:
            raise SourceError("standard input is closed")
        return None

    def lines(self) -> Iterator[Line]:
        stream = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace") \
            if hasattr(sys.stdin, "buffer") else sys.stdin
        for line in capped_lines(stream):
            yield Line(None, line)


class ContainerSource(Source):
    """The container a set of labels finds (a docker target's replica), followed from `since` across restarts
    and recreations by `ContainerFollower`; each line carries the engine's timestamp."""

    finite = False

    def __init__(self, labels: dict[str, str], replica: str | None = None, *, since: float) -> None:
        super().__init__()
        self.replica = replica
        self.name = "docker " + ",".join(f"{key}={value}" for key, value in labels.items())
        self._follower = ContainerFollower(labels, since=since)

    def lines(self) -> Iterator[Line]:
        replica = self.replica
        for t, text in self._follower.lines():
            yield Line(replica, text, t)

    def close(self) -> None:
        super().close()
        self._follower.close()


class ComposeServiceSource(Source):
    """The containers of one compose service (by its labels), each line labelled with its container's name.

    Followed, every running container is followed from `since` by a `ContainerFollower`
    (which re-attaches when the container restarts or is recreated, without reading a line
    twice), and the service is listed again every few seconds so a container that starts
    later (a scale-up) is followed too. Read once, the whole log of every container of
    the service, stopped ones included, is read and the source ends.
    """

    def __init__(self, service: str, project: str | None = None, *, follow: bool = True, since: float) -> None:
        super().__init__()
        self.service = service
        self.project = project
        self.finite = not follow
        self.name = f"docker service {service}" + (f" (project {project})" if project else "")
        self.since = since
        self._client: Any = None
        self._queue: queue.Queue[Line | None] = queue.Queue(maxsize=256)
        self._readers: dict[str, threading.Thread] = {}
        self._followers: list[ContainerFollower] = []
        self._lock = threading.Lock()

    @property
    def labels(self) -> dict[str, str]:
        labels = {COMPOSE_SERVICE: self.service}
        if self.project:
            labels[COMPOSE_PROJECT] = self.project
        return labels

    def open(self) -> str | None:
        import docker

        try:
            self._client = docker.from_env(timeout=10)
            self._client.ping()
            containers = self._containers()
        except (docker.errors.DockerException, OSError) as exc:
            raise SourceError(f"no Docker engine answers ({exc})") from None
        self.replicas = tuple(sorted(container.name for container in containers))
        if containers:
            return None
        where = " and ".join(f"{key}={value}" for key, value in self.labels.items())
        if self.finite:
            raise SourceError(f"no container has the labels {where}")
        return f"no running container has the labels {where} yet; watching for one"

    def _containers(self) -> list[Any]:
        selector = [f"{key}={value}" for key, value in self.labels.items()]
        return list(self._client.containers.list(all=self.finite, filters={"label": selector}))

    def lines(self) -> Iterator[Line]:
        self._start_readers(self._containers())
        if not self.finite:
            threading.Thread(target=self._watch, daemon=True, name=f"logs-{self.name}").start()
        while True:
            item = self._queue.get()
            if item is None:
                if self._stop.is_set() or (self.finite and not self._busy()):
                    return
                continue
            yield item

    def _busy(self) -> bool:
        with self._lock:
            return bool(self._readers)

    def _watch(self) -> None:
        while not self._stop.wait(DOCKER_WATCH_SECONDS):
            try:
                self._start_readers(self._containers())
            except Exception:  # noqa: BLE001 - an engine hiccup must not end the watch; the next round retries
                continue

    def _start_readers(self, containers: list[Any]) -> None:
        with self._lock:
            for container in containers:
                key = compose_identity(container)
                if key in self._readers or self._stop.is_set():
                    continue
                target = self._read_once if self.finite else self._follow
                thread = threading.Thread(target=target, args=(key, container), daemon=True,
                                          name=f"logs-docker-{container.name}")
                self._readers[key] = thread
                thread.start()
        if self.finite and not containers:
            self._queue.put(None)

    def _follow(self, key: str, container: Any) -> None:
        if key == container.id:  # not a compose container: its own stream, from `since`
            stream = container.logs(stream=True, follow=True, since=self.since)
            self._pump(key, container.name, ((None, text) for text in split_lines(stream)))
            return
        labels = dict(self.labels)
        labels[COMPOSE_PROJECT] = container.labels.get(COMPOSE_PROJECT, "")
        labels[COMPOSE_NUMBER] = container.labels[COMPOSE_NUMBER]
        follower = ContainerFollower(labels, since=self.since)
        with self._lock:
            self._followers.append(follower)
        if self._stop.is_set():
            follower.close()
        self._pump(key, container.name, follower.lines())

    def _read_once(self, key: str, container: Any) -> None:
        stream = container.logs(stream=True, follow=False)
        self._pump(key, container.name, ((None, text) for text in split_lines(stream)))

    def _pump(self, key: str, replica: str, lines: Iterator[tuple[float | None, str]]) -> None:
        try:
            for t, text in lines:
                self._queue.put(Line(replica, text, t))
        except Exception:  # noqa: BLE001 - a container removed or an engine gone: its stream just ends
            pass
        finally:
            with self._lock:
                self._readers.pop(key, None)
            self._queue.put(None)

    def close(self) -> None:
        super().close()
        with self._lock:
            followers = list(self._followers)
        for follower in followers:
            follower.close()
        with contextlib.suppress(queue.Full):  # full: the reader is behind, and sees the stop at its next line
            self._queue.put_nowait(None)
