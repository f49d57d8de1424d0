"""Where a replica's log can be read: the one description targets give and scenarios write.

A target names its log sources (`LogSource`): the process backend its replicas' files,
the docker backend its containers by their labels, an external target whatever its
scenario lists. A scenario writes them as `logs = ["file:PATH[@replica]",
"command:COMMAND", "docker:LABEL=VALUE[,...]"]`; `parse_log_location` reads one entry,
at validation time and again when the target is built, so a bad entry is refused before
anything starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

LogKind = Literal["file", "command", "docker"]
KINDS: Final[tuple[str, ...]] = ("file", "command", "docker")

DOCKER_PREFIX: Final = "docker:"
"""A docker-kind `LogSource`'s location: this prefix and the labels that find the container (`docker:k=v,...`)."""
COMPOSE_PROJECT: Final = "com.docker.compose.project"
COMPOSE_SERVICE: Final = "com.docker.compose.service"
COMPOSE_NUMBER: Final = "com.docker.compose.container-number"
"""The labels compose gives a service's containers: how the docker target and triage find a compose replica."""

_FORMS: Final = 'write "file:PATH[@replica]", "command:COMMAND" or "docker:LABEL=VALUE[,LABEL=VALUE...]"'


@dataclass(frozen=True)
class LogSource:
    """Where one replica's log can be read: a file followed like tail -F, a command's output, or a container's
    log through the Docker engine (location: `docker:` and the labels that find the container, comma-separated)."""

    kind: LogKind
    location: str
    replica: str

    @property
    def path(self) -> Path:
        return Path(self.location)

    @property
    def labels(self) -> dict[str, str]:
        """A docker source's labels (`docker:k=v,...` -> {k: v}); {} for the other kinds."""
        if self.kind != "docker":
            return {}
        return docker_labels(self.location)


def docker_labels(location: str) -> dict[str, str]:
    """The labels of a `docker:k=v,...` location; raises ValueError when it names none."""
    selector = location.removeprefix(DOCKER_PREFIX)
    labels = dict(part.split("=", 1) for part in selector.split(",") if "=" in part)
    if not labels or any(not key for key in labels):
        raise ValueError(f"docker log source {location!r}: write docker:LABEL=VALUE[,LABEL=VALUE...]")
    return labels


def parse_log_location(entry: str, index: int) -> LogSource:
    """One scenario `logs` entry as a `LogSource`; its replica label is `@replica` or `log<index + 1>`.

    Raises ValueError naming the entry and the forms it may take (an unknown kind such
    as `sytem:/var/log/x`, or a kind with nothing after its colon).
    """
    kind, colon, rest = entry.partition(":")
    default = f"log{index + 1}"
    if not colon or kind not in KINDS:
        raise ValueError(f"log source {entry!r}: unknown kind {kind!r}; {_FORMS}")
    if not rest.strip():
        raise ValueError(f"log source {entry!r}: nothing after {kind + ':'!r}; {_FORMS}")
    if kind == "file":
        path, _, replica = rest.partition("@")
        if not path:
            raise ValueError(f"log source {entry!r}: no path; {_FORMS}")
        return LogSource("file", path, replica or default)
    if kind == "docker":
        docker_labels(entry)
        return LogSource("docker", entry, default)
    return LogSource("command", rest, default)
