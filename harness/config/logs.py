"""Where a replica's log can be read: the one description targets give and scenarios write.

A target names its log sources (`LogSource`): the process backend its replicas' files,
the docker backend its containers by their labels, an external target whatever its
scenario lists. A scenario writes them as `logs = ["file:PATH[@replica]",
"command:COMMAND", "docker:LABEL=VALUE[,...]", "kubernetes:[NAMESPACE:]SELECTOR"]`
(`harness.logs.kubernetes`: pods followed as they are replaced); `parse_log_location` reads one entry,
at validation time and again when the target is built, so a bad entry is refused before
anything starts.

A file names its replica one way everywhere, `PATH@LABEL`: in a scenario's `file:` entry
and in `triage --file` (`parse_labelled_file`), read by `split_label`. The scenario's
form won because it is the one that also carries the other kinds (`command:`, `docker:`),
so a user copies one spelling between a scenario and triage. Triage's older `LABEL=PATH`
is still read, as a deprecated alias, so scripts written for it keep working.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

LogKind = Literal["file", "command", "docker", "kubernetes"]
KINDS: Final[tuple[str, ...]] = ("file", "command", "docker", "kubernetes")

DOCKER_PREFIX: Final = "docker:"
"""A docker-kind `LogSource`'s location: this prefix and the labels that find the container (`docker:k=v,...`)."""
COMPOSE_PROJECT: Final = "com.docker.compose.project"
COMPOSE_SERVICE: Final = "com.docker.compose.service"
COMPOSE_NUMBER: Final = "com.docker.compose.container-number"
"""The labels compose gives a service's containers: how the docker target and triage find a compose replica."""

BUILT_IN_ADAPTERS: Final[tuple[str, ...]] = ("python-sdk", "typescript-sdk")
"""The reason adapters the harness ships (`harness.logs.adapters` declares them; tests/test_log_adapters.py holds the
two lists equal): what `[target] log_adapter` may name, besides the path of a user's adapter in TOML."""


def check_log_adapter(value: str) -> str:
    """A `log_adapter` value: a built-in adapter's name, or a `.toml` file's path (read when the run starts)."""
    if value in BUILT_IN_ADAPTERS or value.endswith(".toml"):
        return value
    raise ValueError(f"unknown log adapter {value!r}: use one of {', '.join(BUILT_IN_ADAPTERS)}, or the path of a "
                     "user's adapter in TOML (ending .toml; docs/your-deployment.md)")


LABEL: Final = re.compile(r"[\w.-]+")
"""A replica label a log source may give: letters, digits, '_', '.' and '-' (r1, shop-eu, replica.2)."""
_LABEL_EXAMPLE: Final = "write PATH@LABEL, e.g. logs/r1.log@r1"

_FORMS: Final = ('write "file:PATH[@replica]", "command:COMMAND", "docker:LABEL=VALUE[,LABEL=VALUE...]" or '
                  '"kubernetes:[NAMESPACE:]SELECTOR"')
_NAMESPACE: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SELECTOR: Final = re.compile(r"[A-Za-z0-9][\w.\-/=!, ()]*")
"""A label selector as kubectl reads it (`app.kubernetes.io/name=mcp,tier!=cache`, `env in (a, b)`): given to
kubectl as one argument, never to a shell, and never starting with `-` (it would read as an option)."""


@dataclass(frozen=True)
class LogSource:
    """Where one replica's log can be read: a file followed like tail -F, a command's output, or a container's
    log through the Docker engine (location: `docker:` and the labels that find the container, comma-separated)."""

    kind: LogKind
    location: str
    replica: str
    pass_env: tuple[str, ...] = ()
    """The environment variables a `command:` or `kubernetes:` source's programs are given beside the allow-list
    (`[target] command_env`): never the harness's whole environment."""

    @property
    def path(self) -> Path:
        return Path(self.location)

    @property
    def kubernetes(self) -> tuple[str | None, str]:
        """A kubernetes source's (namespace or None, selector)."""
        return kubernetes_selector(self.location)

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


def kubernetes_selector(location: str) -> tuple[str | None, str]:
    """`[NAMESPACE:]SELECTOR` as (namespace or None, selector); raises ValueError for a bad one."""
    namespace, colon, selector = location.partition(":")
    if not colon:
        namespace, selector = "", location
    if colon and not _NAMESPACE.fullmatch(namespace):
        raise ValueError(f"{namespace!r} is no Kubernetes namespace (lowercase letters, digits and '-')")
    if not _SELECTOR.fullmatch(selector.strip()):
        raise ValueError(f"{selector!r} is no label selector (e.g. app.kubernetes.io/name=mcp)")
    return namespace or None, selector.strip()


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
        try:
            path, replica = split_label(rest)
        except ValueError as exc:
            raise ValueError(f"log source {entry!r}: {exc}") from None
        return LogSource("file", path, replica or default)
    if kind == "docker":
        docker_labels(entry)
        return LogSource("docker", entry, default)
    if kind == "kubernetes":
        try:
            kubernetes_selector(rest)
        except ValueError as exc:
            raise ValueError(f"log source {entry!r}: {exc}") from None
        return LogSource("kubernetes", rest, default)
    return LogSource("command", rest, default)


def split_label(text: str) -> tuple[str, str | None]:
    """`PATH@LABEL` as (PATH, LABEL); (text, None) when it gives no label.

    The label is what follows the last `@`. Text after it holding a `/` is part of the
    path (a folder named user@host), and so is the whole text when it names a file that
    exists (logs/app@2026-11-30.log). Raises ValueError, worded for the person who typed
    it, for an `@` with no path before it or with a label that is empty or holds other
    characters than `LABEL` allows.
    """
    path, at, label = text.rpartition("@")
    if not at or "/" in label or Path(text).exists():
        return text, None
    if not path:
        raise ValueError(f"no path before '@' in {text!r}; {_LABEL_EXAMPLE}")
    if not label:
        raise ValueError(f"nothing after '@' in {text!r}: '@' is followed by the replica's label; {_LABEL_EXAMPLE}")
    if not LABEL.fullmatch(label):
        raise ValueError(f"the replica label {label!r} in {text!r} holds characters a label cannot (it may hold "
                         f"letters, digits, '.', '_' and '-'); {_LABEL_EXAMPLE}")
    return path, label


@dataclass(frozen=True)
class LabelledFile:
    """A log file given on a command line (`triage --file`), with the replica label it was given, if any."""

    path: Path
    label: str | None
    old_form: bool = False
    """Given as LABEL=PATH, triage's form before PATH@LABEL: still read, deprecated."""

    @property
    def new_form(self) -> str:
        """How the same file and label are written now."""
        return f"{self.path}@{self.label}" if self.label else str(self.path)


def parse_labelled_file(text: str) -> LabelledFile:
    """`PATH`, `PATH@LABEL`, or the deprecated `LABEL=PATH` (when that is not a file that exists) as a
    `LabelledFile`; raises ValueError as `split_label` does, or for an empty path."""
    if not text:
        raise ValueError("an empty path")
    path, label = split_label(text)
    if label is None:
        old_label, equals, old_path = text.partition("=")
        if equals and old_path and LABEL.fullmatch(old_label) and not Path(text).exists():
            return LabelledFile(Path(old_path), old_label, old_form=True)
    return LabelledFile(Path(path), label)
