"""Where triage reads log lines from: files, a command's output, standard input, a compose service.

Each source yields `(replica, line)`: `replica` is the label the source itself knows
(a container's name, the label given to a file) or None, in which case the line's own
text may name it (`replica=r1`, a JSON `pod` field, a `kubectl --prefix` prefix).

In live mode a file is followed from its end like `tail -F` (rotation and truncation
included, by `harness.logs.FileFollower`), a container from now on; with `once`, every
source is read to its end and stops. A command and standard input end when their
stream does. Files are read in bounded chunks, so a huge log never sits in memory whole.
"""

from __future__ import annotations

import io
import queue
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.logs import COMPOSE_NUMBER, COMPOSE_PROJECT, COMPOSE_SERVICE, POLL_SECONDS, FileFollower
from harness.processes import start_child

Line = tuple[str | None, str]

READ_CHARS = 1 << 20
"""Characters read from a file at a time: the memory a huge file costs, whatever its size."""
STOP_TIMEOUT = 5.0
DOCKER_WATCH_SECONDS = 2.0
"""How often a followed compose service is listed again, to follow containers that (re)started."""


class SourceError(Exception):
    """A source could not be opened or reached (exit 3): a missing file with --once, no engine, no command."""


class Source:
    """One stream of log lines. `open` fails early and clearly; `lines` runs on its own thread."""

    name: str = "source"
    finite: bool = True
    """True when the source ends by itself (read once, stdin, a command); False when it follows forever."""

    def __init__(self) -> None:
        self.replicas: tuple[str, ...] = ()
        """Replica labels known before any line: shown at zero from the start."""
        self.failure: str | None = None
        """Set when the source ended badly after it opened (a command that exited non-zero)."""
        self._stop = threading.Event()

    def open(self) -> str | None:
        """Check the source can be read; raises `SourceError`. Returns a notice for the user, if any."""
        return None

    def lines(self) -> Iterator[Line]:
        raise NotImplementedError

    def close(self) -> None:
        self._stop.set()


class FileSource(Source):
    """A log file, followed across rotation and truncation (live), or read to its end once."""

    def __init__(self, path: Path, replica: str | None = None, *, follow: bool = True) -> None:
        super().__init__()
        self.path = path
        self.replica = replica
        self.finite = not follow
        self.name = f"file {path}" + (f" ({replica})" if replica else "")
        self.replicas = (replica,) if replica else ()
        self._follower: FileFollower | None = None
        self._first: list[str] = []

    def open(self) -> str | None:
        if self.path.is_dir():
            raise SourceError(f"{self.path} is a folder, not a log file")
        existed = self.path.exists()
        if self.finite and not existed:
            raise SourceError(f"no such file: {self.path}")
        if existed:
            try:
                self.path.open("rb").close()
            except OSError as exc:
                raise SourceError(f"cannot read {self.path}: {exc.strerror}") from None
        # Live: from the end, as of now (what was logged before is history, not the incident); a file
        # that appears later is new throughout. Opened here, so a line written once triage started counts.
        self._follower = FileFollower(self.path, from_start=self.finite or not existed)
        if not self.finite:
            self._first = self._follower.read_lines(READ_CHARS)
        return None if existed else f"waiting for {self.path} to appear"

    def lines(self) -> Iterator[Line]:
        follower = self._follower
        assert follower is not None, "open() first"
        replica = self.replica
        try:
            for line in self._first:
                yield replica, line
            while True:
                batch = follower.read_lines(READ_CHARS)
                if batch:
                    for line in batch:
                        yield replica, line
                    if self._stop.is_set():
                        return
                    continue
                if self.finite:
                    rest = follower.take_partial()
                    if rest:
                        yield replica, rest
                    return
                if self._stop.wait(POLL_SECONDS):
                    return
        finally:
            follower.close()


class CommandSource(Source):
    """A command whose output is a log stream: `kubectl logs -f ...`, `journalctl -f ...`, `docker logs -f ...`.

    Run without a shell (split like a shell would), in its own session, with stderr merged
    into stdout (where most programs log); stopped by its PID when triage stops, and
    killed by the kernel if triage itself is killed (`harness.processes.start_child`).
    """

    def __init__(self, command: str) -> None:
        super().__init__()
        self.command = command
        self.name = f"command {command!r}"
        self.argv = shlex.split(command)
        self._process: subprocess.Popen[bytes] | None = None

    def open(self) -> str | None:
        try:
            self._process = start_child(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL)
        except OSError as exc:
            raise SourceError(f"cannot start {self.argv[0]!r}: {exc.strerror or exc}") from None
        return None

    def lines(self) -> Iterator[Line]:
        process = self._process
        assert process is not None and process.stdout is not None, "open() first"
        for line in io.TextIOWrapper(process.stdout, encoding="utf-8", errors="replace"):
            yield None, line
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
        for line in stream:
            yield None, line


class DockerSource(Source):
    """The containers of one compose service (by its labels), each line labelled with its container's name.

    Live, every running container is followed from now on by `harness.logs.ContainerFollower`
    (which re-attaches when the container restarts or is recreated, without reading a line
    twice), and the service is listed again every few seconds so a container that starts
    later (a scale-up) is followed too. With `once`, the whole log of every container of the
    service, stopped ones included, is read and the source ends.
    """

    def __init__(self, service: str, project: str | None = None, *, follow: bool = True) -> None:
        super().__init__()
        self.service = service
        self.project = project
        self.finite = not follow
        self.name = f"docker service {service}" + (f" (project {project})" if project else "")
        self._client: Any = None
        self._queue: queue.Queue[tuple[str, str] | None] = queue.Queue(maxsize=256)
        self._readers: dict[str, threading.Thread] = {}
        self._followers: list[Any] = []
        self._lock = threading.Lock()
        self._started = time.time()

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
        return self._client.containers.list(all=self.finite, filters={"label": selector})

    def lines(self) -> Iterator[Line]:
        self._start_readers(self._containers())
        if not self.finite:
            threading.Thread(target=self._watch, daemon=True, name=f"triage-{self.name}").start()
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
                key = self._identity(container)
                if key in self._readers or self._stop.is_set():
                    continue
                target = self._read_once if self.finite else self._follow
                thread = threading.Thread(target=target, args=(key, container), daemon=True,
                                          name=f"triage-docker-{container.name}")
                self._readers[key] = thread
                thread.start()
        if self.finite and not containers:
            self._queue.put(None)

    @staticmethod
    def _identity(container: Any) -> str:
        """One compose replica across restarts and recreations: project, service and number; else the id."""
        labels = container.labels or {}
        number = labels.get(COMPOSE_NUMBER)
        if number is None:
            return container.id
        return "/".join((labels.get(COMPOSE_PROJECT, ""), labels.get(COMPOSE_SERVICE, ""), number))

    def _follow(self, key: str, container: Any) -> None:
        from harness.logs import ContainerFollower

        labels = dict(self.labels)
        if key != container.id:
            labels[COMPOSE_PROJECT] = container.labels.get(COMPOSE_PROJECT, "")
            labels[COMPOSE_NUMBER] = container.labels[COMPOSE_NUMBER]
            follower = ContainerFollower(labels, since=self._started)
            with self._lock:
                self._followers.append(follower)
            if self._stop.is_set():
                follower.close()
            self._pump(key, container.name, follower.lines())
        else:  # not a compose container: its own stream, from now on
            self._pump(key, container.name, self._stream(container, follow=True, since=self._started))

    def _read_once(self, key: str, container: Any) -> None:
        self._pump(key, container.name, self._stream(container, follow=False))

    def _stream(self, container: Any, **options: Any) -> Iterator[str]:
        partial = b""
        for chunk in container.logs(stream=True, **options):
            lines = (partial + chunk).split(b"\n")
            partial = lines.pop()
            yield from (line.decode("utf-8", "replace") for line in lines)
        if partial:
            yield partial.decode("utf-8", "replace")

    def _pump(self, key: str, replica: str, lines: Iterator[str]) -> None:
        try:
            for line in lines:
                self._queue.put((replica, line))
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
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass
