"""A container's log through the Docker engine's API: found by its labels, followed across restarts.

Used by the docker target's replicas (a run) and by triage's compose-service source
alike. The docker SDK is imported only when a container is looked for, so importing
`harness.logs` costs nothing on a machine without it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from harness.config.logs import COMPOSE_NUMBER, COMPOSE_PROJECT, COMPOSE_SERVICE
from harness.logs.parse import LINE_CAP

_CAP_BYTES = 4 * (LINE_CAP + 1)
"""Bytes of an unfinished line kept: at least `LINE_CAP + 1` characters in any UTF-8, however long the line."""

FIND_AGAIN_SECONDS = 0.1
"""How soon a follower whose container's stream ended (a stop, a restart) looks for the container again."""

Stamp = tuple[int, int]
"""The engine's timestamp of a line: whole seconds and nanoseconds, so no precision is lost when comparing."""


def split_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """The lines of a byte stream that arrives in arbitrary chunks (a container's log), decoded; the last
    unfinished line too, when the stream ends."""
    partial = b""
    for chunk in chunks:
        partial += chunk
        *complete, partial = partial.split(b"\n")
        partial = partial[:_CAP_BYTES]  # an endless line costs bounded memory; the parser cuts and counts it
        for raw in complete:
            yield raw.decode("utf-8", errors="replace")
    if partial:
        yield partial.decode("utf-8", errors="replace")


def compose_identity(container: Any) -> str:
    """One compose replica across restarts and recreations: project, service and number; else the id."""
    labels = container.labels or {}
    number = labels.get(COMPOSE_NUMBER)
    if number is None:
        return str(container.id)
    return "/".join((labels.get(COMPOSE_PROJECT, ""), labels.get(COMPOSE_SERVICE, ""), number))


class ContainerFollower:
    """Reads a container's log through the engine, following the container its labels find across restarts
    and recreations.

    A stream ends when its container stops; the follower then finds the container again by
    its labels (the running one, else the newest) and re-attaches from the last line it
    read, using the engine's timestamps so no line is read twice. Lines the engine
    received before `since` are skipped.
    """

    def __init__(self, labels: dict[str, str], *, since: float) -> None:
        self.labels = [f"{key}={value}" for key, value in labels.items()]
        self.since = since
        self._since_stamp: Stamp = (int(since), round((since % 1) * 1e9))
        self._last: dict[str, Stamp] = {}
        self._client: Any = None
        self._stream: Any = None
        self._closed = threading.Event()

    def lines(self) -> Iterator[tuple[float | None, str]]:
        """(the engine's time of the line, the line) for every new line, until `close()`; blocks while the
        container logs nothing."""
        while not self._closed.is_set():
            container = self._find()
            if container is not None:
                yield from self._read(container)
            self._closed.wait(FIND_AGAIN_SECONDS)

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
        return max(running or found, key=lambda container: split_stamp(container.attrs.get("Created", "") + " ")[0]
                   or (0, 0))

    def _read(self, container: Any) -> Iterator[tuple[float | None, str]]:
        last = self._last.get(container.id)
        floor = last or self._since_stamp
        since = floor[0] + floor[1] / 1e9
        try:
            self._stream = container.logs(stream=True, follow=True, timestamps=True, since=max(since, 1e-9))
        except Exception:  # noqa: BLE001 - gone meanwhile, or the engine is restarting: find it again
            return
        if self._closed.is_set():  # closed while attaching: close() did not see this stream
            self.close()
            return
        try:
            for line in split_lines(self._stream):
                stamp, text = split_stamp(line)
                if stamp is None:
                    yield None, text
                    continue
                if stamp < floor or (last is not None and stamp <= last):
                    continue
                self._last[container.id] = last = stamp
                yield stamp[0] + stamp[1] / 1e9, text
        except Exception:  # noqa: BLE001 - a closed or broken stream: re-attach (or stop, when closed)
            pass
        finally:
            self._stream = None

    def close(self) -> None:
        """Stop following: the open stream is closed (which ends `lines()`), and the engine client with it."""
        self._closed.set()
        for closable in (self._stream, self._client):
            if closable is not None:
                with contextlib.suppress(Exception):  # already closed, or the engine gone: nothing left to close
                    closable.close()


def split_stamp(line: str) -> tuple[Stamp | None, str]:
    """(seconds, nanoseconds) of the engine's RFC 3339 timestamp in front of a log line, and the line."""
    head, _, text = line.partition(" ")
    try:
        date, _, fraction = head.rstrip("Z").partition(".")
        seconds = int(datetime.strptime(date, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp())
        return (seconds, int((fraction + "000000000")[:9])), text
    except ValueError:
        return None, line
