"""What every target offers a run: replicas, their logs, chaos operations and rollback.

Chaos actions (`harness.chaos.schedule`) are written once, against `Target`. Each kind of
deployment implements it: the embedded shop and containers by acting on processes and ring
files, a deployment the harness did not start by the user's commands
(`harness.targets.by_command.CommandTarget`, which falls back to the target it wraps).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal, Protocol

from harness.config.chaos import AUTH_ACTIONS
from harness.config.logs import LogSource
from harness.errors import TargetDown
from harness.targets.health import ReplicaHealth
from harness.targets.ledger_check import LedgerCheck

__all__ = ["AuthChange", "ChaosUnsupported", "LogSource", "NoAuthServer", "ReplicaChange", "RingKeys", "Target",
           "TargetError"]


class TargetError(TargetDown):
    """The target could not be started or reached: the run exits 3."""


class ChaosUnsupported(RuntimeError):
    """This target cannot do that chaos action (e.g. restarting a replica of an external deployment)."""


@dataclass(frozen=True)
class ReplicaChange:
    """How a replica is restarted differently: every field left None stays as it is. The fields are the replica
    knobs (`harness.config.replica_knobs`), one each."""

    ttl: float | None = None
    """requestState lifetime, real seconds."""
    name: str | None = None
    """server name: the audience its states are sealed for."""
    clock_offset: float | None = None
    """seconds its clock runs ahead (negative: behind)."""
    store: Literal["memory"] | None = None
    """quotes and once-only records in the replica's own memory."""
    leak: float | None = None
    """MB a minute its memory grows while it serves (a planted leak; no chaos action sets it)."""

    def changed(self) -> dict[str, float | str]:
        """The fields this change sets, by name."""
        return {name: value for name, value in asdict(self).items() if value is not None}


@dataclass(frozen=True)
class AuthChange:
    """A chaos change to the deployment's authorization server, or (`on` False) its undoing at the action's end."""

    action: str
    """one of `harness.config.chaos.AUTH_ACTIONS`."""
    on: bool = True
    lifetime: float | None = None
    """token-expiry: the short lifetime of tokens issued from now, real seconds."""
    share: float | None = None
    """revoke, scope-loss: the share of the leads hit; subject-drift: the share of verifications."""
    scope: str | None = None
    """scope-loss: the scope the leads lose."""
    seed: int = 0
    """which leads a share picks, from the scenario's seed."""

    def __post_init__(self) -> None:
        if self.action not in AUTH_ACTIONS:
            raise ValueError(f"{self.action!r} is not an action on the authorization server")


class Target(Protocol):
    """The operations a run and its chaos need; replicas are addressed by 0-based index."""

    @property
    def labels(self) -> list[str]:
        """Each replica's label (r1, r2, ...), by index."""
        ...

    @property
    def urls(self) -> list[str]:
        """Each replica's MCP URL, by index."""
        ...

    def ledger_check(self) -> LedgerCheck | None:
        """The shop's ledger, which the invariants read; None: the target declares no ledger."""
        ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def log_sources(self) -> list[LogSource]: ...

    def cpu_seconds(self) -> dict[str, tuple[int, float]]:
        """(pid, CPU seconds so far) of each replica's process (by label) and the API's ("api"), where this
        machine can see them; {} for a target whose processes it cannot see."""
        ...

    def replica_health(self) -> dict[str, ReplicaHealth]:
        """Each replica's resident memory, CPU, descriptors and threads now, by label (`harness.targets.health`);
        a replica that cannot be read now is left out (the health sampler journals a gap, not a zero)."""
        ...

    def target_pids(self) -> set[int]:
        """The PIDs of every process of the target now running on this machine (replicas, API, helpers such
        as the replicas' zygote), so CPU accounting can tell them from the harness and from other load."""
        ...

    def replicas_up(self) -> int: ...

    def restart(self, index: int, *, kill: bool = False) -> float: ...

    def pause(self, index: int) -> None: ...

    def resume(self, index: int) -> None: ...

    def reconfigure(self, replicas: Sequence[int], change: ReplicaChange) -> list[float]:
        """Restart each replica with `change`; the seconds until each served again."""
        ...

    def add_key(self, replicas: Sequence[int], key: str) -> None:
        """A rotation's first phase: the replicas open states sealed with `key` too ([old] -> [old,new])."""
        ...

    def promote_key(self, replicas: Sequence[int], key: str) -> None:
        """The second: the replicas seal with `key`, and still open the others ([old,new] -> [new,old])."""
        ...

    def retire_old_keys(self, replicas: Sequence[int], key: str) -> None:
        """The last: the replicas hold `key` only ([new,old] -> [new])."""
        ...

    def sealing_key(self, index: int) -> str | None:
        """The key the replica seals with now, where the harness can know it (None: a deployment's own secret)."""
        ...

    def auth_change(self, change: AuthChange) -> dict[str, object]:
        """Change what the deployment's authorization server does (token lifetime, revocation, scopes, refusing,
        the verifier's subject); what it did, in counts and lead numbers (never a token)."""
        ...

    def rollback(self) -> list[str]:
        """Put back whatever chaos changed (replicas up, original options and rings); what had to be undone."""
        ...


class NoAuthServer:
    """For a target whose authorization server the harness does not hold: auth chaos needs `[target.commands]`."""

    def auth_change(self, change: AuthChange) -> dict[str, object]:
        raise ChaosUnsupported(f"{change.action} needs the harness's own authorization server (an embedded shop "
                               f"with [target.auth] and no token_url) or a [target.commands] {change.action} "
                               f"command")


class RingKeys:
    """A rotation's phases for a target that holds each replica's ring (`ring` / `set_ring`): written once."""

    def ring(self, index: int) -> list[str]:
        raise NotImplementedError

    def set_ring(self, index: int, keys: list[str]) -> None:
        raise NotImplementedError

    def add_key(self, replicas: Sequence[int], key: str) -> None:
        for index in replicas:
            ring = self.ring(index)
            if key not in ring:
                self.set_ring(index, [*ring, key])

    def promote_key(self, replicas: Sequence[int], key: str) -> None:
        for index in replicas:
            self.set_ring(index, [key, *(other for other in self.ring(index) if other != key)])

    def retire_old_keys(self, replicas: Sequence[int], key: str) -> None:
        for index in replicas:
            self.set_ring(index, [key])

    def sealing_key(self, index: int) -> str | None:
        return self.ring(index)[0]

    def _ring_or_empty(self, index: int) -> list[str]:
        """The replica's ring, or [] where it has none to read (ephemeral keys, a file gone): what rollback compares."""
        try:
            return self.ring(index)
        except (ChaosUnsupported, OSError, ValueError):
            return []
