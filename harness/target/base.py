"""What every target offers a run: replicas, their logs, chaos operations and rollback."""

from __future__ import annotations

from typing import Protocol

from harness.config.logs import LogSource
from harness.errors import TargetDown

__all__ = ["ChaosUnsupported", "LogSource", "Target", "TargetError"]


class TargetError(TargetDown):
    """The target could not be started or reached: the run exits 3."""


class ChaosUnsupported(RuntimeError):
    """This target cannot do that chaos action (e.g. restarting a replica of an external deployment)."""


class Target(Protocol):
    """The operations a run and its chaos need; replicas are addressed by 0-based index."""

    labels: list[str]
    urls: list[str]
    api_url: str | None

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def log_sources(self) -> list[LogSource]: ...

    def cpu_seconds(self) -> dict[str, tuple[int, float]]:
        """(pid, CPU seconds so far) of each replica's process (by label) and the API's ("api"), where this
        machine can see them; {} for a target whose processes it cannot see."""
        ...

    def target_pids(self) -> set[int]:
        """The PIDs of every process of the target now running on this machine (replicas, API, helpers such
        as the replicas' zygote), so CPU accounting can tell them from the harness and from other load."""
        ...

    def replicas_up(self) -> int: ...

    def restart(self, index: int, *, kill: bool = False) -> float: ...

    def pause(self, index: int) -> None: ...

    def resume(self, index: int) -> None: ...

    def reconfigure(self, index: int, **changes: object) -> float: ...

    def ring(self, index: int) -> list[str]: ...

    def set_ring(self, index: int, keys: list[str]) -> None: ...

    def rollback(self) -> list[str]: ...
