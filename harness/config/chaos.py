"""`[[chaos]]`: what breaks and when, one model per action."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from harness.config.base import Strict
from harness.config.commands import REPLICA_PLACEHOLDERS, check_command
from harness.config.durations import Duration, PositiveDuration, parse_duration


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


NetworkFaultKind = Literal["latency", "bandwidth", "reset", "blackhole", "truncate", "down", "cut-slow"]

_FAULT_KEYS: dict[str, frozenset[str]] = {
    "latency": frozenset({"delay", "jitter", "direction"}),
    "bandwidth": frozenset({"rate"}),
    "reset": frozenset({"when"}),
    "blackhole": frozenset(),
    "truncate": frozenset({"after"}),
    "down": frozenset(),
    "cut-slow": frozenset({"after"}),
}
"""The keys of each fault of its own: any other fault's key is a mistake in the scenario."""


class NetworkAction(_Chaos):
    """A network fault between the harness and a replica, for `duration`, done by the harness's own proxy.

    Every replica gets a proxy on 127.0.0.1 when the scenario has a network fault; the load
    talks to the proxies, which forward to the replicas' URLs. `toxicity` is the share of
    exchanges (one request and its answer) the fault hits, drawn from the scenario's seed.
    """

    action: Literal["network"]
    replica: int | None = Field(default=None, ge=1, description="1-based; default: every replica")
    duration: PositiveDuration = Field(description="how long the fault lasts, real")
    fault: NetworkFaultKind = Field(
        description="latency: delays each exchange (`delay`, `jitter`, `direction`); bandwidth: at most `rate` "
                    "bytes/s each way; reset: resets the connection (`when`); blackhole: forwards nothing while "
                    "it lasts, dropping requests and holding answers under way (the client's timeout decides); "
                    "truncate: closes the answer after `after` bytes; down: refuses connections on a port it "
                    "keeps (toxicity 1 only); cut-slow: closes a connection "
                    "that moved no byte for `after` seconds while a request waits for its answer, like a "
                    "balancer's idle timeout")
    toxicity: float = Field(default=1.0, ge=0.0, le=1.0,
                            description="the share of exchanges the fault hits, 0-1, drawn from the seed")
    delay: Duration = Field(default=1.0, description="latency: added each way the fault applies, real")
    jitter: Duration = Field(default=0.0, description="latency: up to this much more, drawn per exchange, real")
    direction: Literal["both", "to-server", "to-client"] = Field(
        default="both", description="latency: delay the request (to-server), the answer (to-client) or both")
    rate: int = Field(default=1024, ge=1, description="bandwidth: bytes per second, each way")
    when: Literal["on-connect", "before-answer", "mid-answer"] = Field(
        default="before-answer", description="reset: as the connection opens (the request never reaches the "
                                             "server), as the answer begins (the request reached it, no answer "
                                             "arrives) or halfway through the answer's next part (it arrives cut)")
    after: float | None = Field(default=None, ge=0,
                                description="truncate: bytes of the answer let through; cut-slow: idle seconds "
                                            "(a duration) before the cut, real")

    @field_validator("after", mode="before")
    @classmethod
    def _after(cls, value: object) -> object:
        return parse_duration(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _keys_of_the_fault(self) -> NetworkAction:
        own = _FAULT_KEYS[self.fault]
        foreign = sorted(key for key in self.model_fields_set & set().union(*_FAULT_KEYS.values()) if key not in own)
        if foreign:
            raise ValueError(f"fault {self.fault!r} takes no {', '.join(foreign)} (its keys: "
                             f"{', '.join(sorted(own)) or 'none'})")
        if self.fault in ("truncate", "cut-slow") and self.after is None:
            raise ValueError(f"fault {self.fault!r} needs `after`")
        if self.fault == "truncate" and self.after is not None and self.after != int(self.after):
            raise ValueError("truncate: `after` is a whole number of bytes")
        if self.fault == "down" and self.toxicity != 1.0:
            raise ValueError("down refuses every connection: toxicity must be 1")
        return self

    def parameters(self) -> dict[str, object]:
        """The fault and its own keys, as the journal records them."""
        return {"fault": self.fault, "toxicity": self.toxicity,
                **{key: getattr(self, key) for key in sorted(_FAULT_KEYS[self.fault])}}


class _AuthChaos(Strict):
    """An action on the deployment's authorization server (or its commands), not on a replica."""

    at: Duration = Field(description="when it starts, from the start of the load (0: at once), real")

    @property
    def replica(self) -> None:
        """No replica: the action is the authorization server's."""
        return None


Share = Annotated[float, Field(gt=0.0, le=1.0)]


class TokenExpiry(_AuthChaos):
    """From `at`, tokens are issued with a short `lifetime`, so leads' tokens expire while they think."""

    action: Literal["token-expiry"]
    lifetime: PositiveDuration = Field(default=5.0, description="the lifetime of tokens issued from `at`, real")
    duration: PositiveDuration | None = Field(default=None, description="how long tokens are issued short, real "
                                                                        "(default: until the run ends)")


class Revoke(_AuthChaos):
    """A `share` of the leads' tokens is revoked (the tokens they hold now; a refreshed token is good again)."""

    action: Literal["revoke"]
    share: Share = Field(default=0.5, description="the share of the leads holding tokens whose tokens are "
                                                  "revoked, more than 0 up to 1 (at least one lead)")


class ScopeLoss(_AuthChaos):
    """A `share` of the leads lose `scope` (refunds:write): their issue_refund calls answer 403 from then on."""

    action: Literal["scope-loss"]
    share: Share = Field(default=0.5, description="the share of the leads holding tokens who lose the scope, more "
                                                  "than 0 up to 1 (at least one lead)")
    scope: str = Field(default="refunds:write", min_length=1, description="the scope they lose")


class AuthDown(_AuthChaos):
    """The authorization server refuses every request for `duration`: refreshes fail, valid tokens still work."""

    action: Literal["auth-down"]
    duration: PositiveDuration = Field(default=30.0, description="how long it refuses, real")


class SubjectDrift(_AuthChaos):
    """For `duration`, a `share` of the replicas' token verifications drop the token's subject."""

    action: Literal["subject-drift"]
    share: Share = Field(default=0.5, description="the share of verifications that drop the subject, more than "
                                                  "0 up to 1")
    duration: PositiveDuration = Field(default=10.0, description="how long the verifier drops subjects, real")


AuthChaosStep = TokenExpiry | Revoke | ScopeLoss | AuthDown | SubjectDrift
AUTH_ACTIONS = frozenset({"token-expiry", "revoke", "scope-loss", "auth-down", "subject-drift"})
"""The actions on the authorization server, which name no replica."""

ChaosStep = Annotated[
    ReplicaAction | PauseAction | RollingRestart | RotateKeys | SetTtl | Rename | ClockSkew | MemoryRecords
    | CommandAction | NetworkAction | TokenExpiry | Revoke | ScopeLoss | AuthDown | SubjectDrift,
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
    if isinstance(step, CommandAction | NetworkAction):  # a network fault is the harness's own proxy's
        return ()
    if isinstance(step, AuthDown):
        return ("auth-down", "auth-up")
    if isinstance(step, TokenExpiry):
        return ("token-expiry", "token-expiry-end")
    return (step.action,)


