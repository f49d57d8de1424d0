"""`[[chaos]]`: what breaks and when, one model per action."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator

from harness.config.base import Strict
from harness.config.commands import REPLICA_PLACEHOLDERS, check_command
from harness.config.durations import Duration, PositiveDuration


class _Chaos(Strict):
    at: Duration = Field(description="when it starts, from the start of the load (0: at once), real")
    replica: int | None = Field(default=None, ge=1,
                                description="1-based; default: the first (set-ttl: every replica in turn)")


class ReplicaAction(_Chaos):
    """restart: graceful stop and start; kill: kill -9 and start."""

    action: Literal["restart", "kill"]


class PauseAction(_Chaos):
    """Freeze a replica (SIGSTOP, or the engine's pause) for `duration`, then resume it."""

    action: Literal["pause"]
    duration: PositiveDuration = Field(default=5.0, description="how long the replica stays paused, real")


class RollingRestart(_Chaos):
    """Restart every replica, one after another."""

    action: Literal["rolling-restart"]
    interval: Duration = Field(default=2.0, description="wait between one replica serving again and the next "
                                                        "restart (0: none), real")


class RotateKeys(_Chaos):
    """Key rotation: `correct` waits one (real) TTL before retiring the old key; the others are the mistakes."""

    action: Literal["rotate-keys"]
    order: Literal["correct", "minter-first", "retire-early"] = Field(
        default="correct", description="correct: every replica accepts the new key, then seals with it, and the "
                                       "old key is retired one TTL later; minter-first: one replica seals with it "
                                       "before the others accept it; retire-early: the old key is retired one "
                                       "phase_gap later")
    phase_gap: Duration = Field(default=2.0, description="wait between the rotation's phases (0: none), real")


class SetTtl(_Chaos):
    """Restart replicas with another TTL: only `replica` when given, else every one in turn."""

    action: Literal["set-ttl"]
    ttl: PositiveDuration = Field(description="the new requestState lifetime, modelled")


class Rename(_Chaos):
    """Restart a replica with another server name: states sealed for the old name fail `audience`."""

    action: Literal["rename"]
    name: str = Field(min_length=1, description="the replica's new server name")


class ClockSkew(_Chaos):
    """Restart a replica with its clock off by `offset`."""

    action: Literal["clock-skew"]
    offset: PositiveDuration = Field(default=120.0, description="how far its clock is off, real")
    behind: bool = Field(default=False, description="the clock runs behind instead of ahead")


class MemoryRecords(_Chaos):
    """Restart a replica with its quotes and once-only records in its own memory."""

    action: Literal["memory-records"]


class CommandAction(_Chaos):
    """Run any command at its time (a network fault, a config push); `rollback` runs when the run ends."""

    action: Literal["command"]
    command: list[str] = Field(description="an argv list (no shell unless you write `sh -c`); placeholders "
                                           "{replica}, {index}, {url} of `replica` (default: the first)")
    rollback: list[str] | None = Field(default=None, description="run when the run ends, if the command ran: "
                                                                 "what puts the deployment back")

    @field_validator("command", "rollback")
    @classmethod
    def _placeholders(cls, argv: list[str] | None, info: ValidationInfo) -> list[str] | None:
        if argv is not None:
            check_command(str(info.field_name), argv, REPLICA_PLACEHOLDERS, where=())
        return argv


ChaosStep = Annotated[
    ReplicaAction | PauseAction | RollingRestart | RotateKeys | SetTtl | Rename | ClockSkew | MemoryRecords
    | CommandAction,
    Field(discriminator="action"),
]


def commands_needed(step: ChaosStep) -> tuple[str, ...]:
    """The `[target.commands]` names an action needs on a target whose chaos is all by command."""
    if isinstance(step, RotateKeys):
        return ("add-key", "promote-key") if step.order == "minter-first" else ("add-key", "promote-key",
                                                                                 "retire-key")
    if isinstance(step, PauseAction):
        return ("pause", "resume")
    if isinstance(step, RollingRestart):
        return ("restart",)
    if isinstance(step, CommandAction):
        return ()
    return (step.action,)


