"""`[[chaos]]`: what breaks and when, one model per action, and the registry of actions.

A chaos action is declared once, in two halves that share its model:

- here, its config half: the model (its `action` name(s) and keys), whom it acts on
  (`acts_on`, which also gives the journal's target label), the `[target.commands]` it runs
  with their placeholders (`commands`), the ones a target reached only by command must have
  (`needs`), how it is undone (`undone`) and the replica knob it turns, if any (`turns`: a row of
  `harness.config.replica_knobs`; the command target's reconfigure commands are read off these);
  where the defaults do not fit, the model overrides
  `commands_needed`, `asked` (its start record), `command_argvs` or `by_command_problem`. Defining
  a `ChaosAction` subclass with a literal `action` registers it in `CHAOS_ACTIONS`; the scenario's
  union (`ChaosStep`), `AUTH_ACTIONS` and the command table (`COMMAND_NAMES`,
  `DEPLOYMENT_COMMANDS`) are read off that registry. An action on the authorization server also
  says which of its commands make, end and put it back (`by_command`, an `AuthCommands`).
- in `harness.chaos.schedule`, its handler half: a `ChaosRunner` method registered with
  `@handles(Model, uses=...)`, naming the `Target` methods it calls. An action without a
  handler is refused when `harness.chaos.schedule` is imported.

The configuration stays a leaf (it imports no runtime), so the handler cannot live here; adding an
action is one model here and one handler there. docs/scenario.md's table of actions is generated
from both halves (`python -m harness.cli.reference`).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union

from pydantic import (
    BeforeValidator,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from harness.config.commands import OTHER_COMMANDS, REPLICA_PLACEHOLDERS, check_command, placeholders_in
from harness.config.durations import Duration, PositiveDuration, parse_duration_text
from harness.config.replica_knobs import KNOBS
from harness.config.strict import Strict

ActsOn = Literal["replica", "replicas", "auth"]
"""replica: one replica (the first by default); replicas: every replica unless one is named; auth: the
deployment's authorization server."""

_NONE: frozenset[str] = frozenset()

EdgeKind = Literal["answer", "key", "age", "audience", "record", "token"]
"""What a hand-over of state between two rounds of a call depends on (`harness.hunt.lineage`: the replica that
answered round n minted it, round n+1's verified it), which a chaos action can cut."""
EDGE_KINDS: dict[EdgeKind, str] = {
    "answer": "the round's request and answer in flight between the harness and its replica",
    "key": "the verifier holds the key the minter sealed the state with",
    "age": "the state's age, by the verifier's clock, within the verifier's TTL",
    "audience": "the verifier's name is the one the state was sealed for",
    "record": "the verifier reads the once-only records the minter wrote",
    "token": "the lead's token is accepted on the verifying round",
}
"""Every edge kind, with what the edge depends on: a chaos action's `cuts` names some of these."""
_EVERY_EDGE: frozenset[EdgeKind] = frozenset(EDGE_KINDS)

SERVER_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
"""A name `rename` gives a replica: one word no shell or command line reads as more than text."""


@dataclass(frozen=True)
class AuthCommands:
    """The `[target.commands]` that make an authorization server action, end it, and put it back at rollback."""

    on: str
    off: str | None = None
    """what ends it when its duration is over (None: it has no end)."""
    restore: str | None = None
    """what the rollback runs when the action never reached its end (None: nothing to put back)."""
    off_values: Mapping[str, str] = field(default_factory=dict)
    """placeholders fixed when it ends or is put back (subject-drift's share is 0 then)."""


CHAOS_ACTIONS: dict[str, type[ChaosAction]] = {}
"""Every chaos action by name, in declaration order: filled as each model is defined."""


class ChaosAction(Strict):
    """A chaos action's model, with its declaration (the class variables) beside its keys."""

    acts_on: ClassVar[ActsOn] = "replica"
    commands: ClassVar[Mapping[str, frozenset[str]]] = {}
    """the `[target.commands]` entries this action runs, each with its placeholders beside the replica's own."""
    needs: ClassVar[tuple[str, ...] | None] = None
    """the commands a target reached only by command must have for it (None: one named like the action)."""
    undone: ClassVar[str] = ""
    """how the action is put back, for the reference."""
    turns: ClassVar[str | None] = None
    """the replica knob (`harness.config.replica_knobs`) the action restarts replicas with a new value of; its
    command, when it has one, takes that value as its one placeholder."""
    several: ClassVar[bool] = False
    """the action can act on a set of replicas at once, named by `replicas` (a minority, all but one)."""
    cuts: ClassVar[frozenset[EdgeKind]] = frozenset()
    """the support edges (`EDGE_KINDS`) the action can cut, which lineage-driven search reads
    (`harness.hunt.strategies.lineage`); every action names at least one."""
    freezes: ClassVar[bool] = False
    """the action freezes a replica's process for its window and lets it go on: what lineage's probes of a process's
    memory give at its longest (`harness.hunt.strategies.lineage`)."""
    provokes: ClassVar[frozenset[str]] = _NONE
    """the rejection reasons (`harness.vocabulary.REASONS`) the action can make replicas log, as a production log
    names them: what `hunt --from-triage` steers toward (`harness.hunt.from_triage`)."""

    at: Duration = Field(description="when it starts, from the start of the load (0: at once), real")

    if TYPE_CHECKING:
        action: str

        @property
        def replica(self) -> int | None: ...

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        action = cls.model_fields.get("action")
        if action is not None and typing.get_origin(action.annotation) is Literal:
            _check_knob(cls)
            for name in typing.get_args(action.annotation):
                CHAOS_ACTIONS[name] = cls

    def commands_needed(self) -> tuple[str, ...]:
        """The `[target.commands]` names this step needs on a target whose chaos is all by command."""
        return self.needs if self.needs is not None else (self.action,)

    def asked(self) -> dict[str, Any]:
        """What the step asks, as its start record shows it."""
        return self.model_dump(mode="json", exclude={"action", "at"})

    def command_argvs(self, commands: Mapping[str, list[str]]) -> list[list[str]]:
        """The argument lists the step runs on a target with these `[target.commands]`."""
        return [commands[name] for name in self.commands_needed() if name in commands]

    def by_command_problem(self, commands: Mapping[str, list[str]]) -> tuple[str, str] | None:
        """What makes this step impossible with these `[target.commands]`, and the key at fault; None: nothing."""
        return None

    def journal_target(self, labels: Sequence[str]) -> str:
        """Whom the journal says the step acts on: `auth`, `all` (every replica), a replica's label or several
        joined by `+` (`r1+r3`)."""
        return self.whom(self.named(), labels)

    def named(self) -> int | tuple[int, ...] | None:
        """The replica or replicas the step names (1-based): `replicas` as a tuple, else `replica` (None: none)."""
        subset: list[int] | None = getattr(self, "replicas", None)
        return tuple(subset) if subset else self.replica

    def acted_on(self, count: int) -> list[int]:
        """The replicas (0-based) a step acts on among `count`: those it names, else every one for an action on
        all of them, else the first; none for the authorization server's."""
        named = self.named()
        if self.acts_on == "auth":
            return []
        if isinstance(named, tuple):
            return [replica - 1 for replica in named]
        if named is None and self.acts_on == "replicas":
            return list(range(count))
        return [(named or 1) - 1]

    @classmethod
    def whom(cls, replica: int | tuple[int, ...] | None, labels: Sequence[str]) -> str:
        """Whom a step of this action naming `replica` (1-based; a tuple: several; None: none named) acts on:
        `auth`, `all` (every replica), a replica's label or several joined by `+`. The journal and the hunt's
        coverage both say it so."""
        if cls.acts_on == "auth":
            return "auth"
        if isinstance(replica, tuple):
            return "+".join(labels[index - 1] for index in replica)
        if cls.acts_on == "replicas" and replica is None:
            return "all"
        return labels[(replica or 1) - 1]


def touches(whom: str, label: str) -> bool:
    """Whether a step the journal says acts on `whom` (`all`, a label, several joined by `+`) acts on replica
    `label`."""
    return whom == "all" or label in whom.split("+")


def _check_knob(model: type[ChaosAction]) -> None:
    """An action that turns a replica knob names one the table has, and its command takes the new value alone."""
    if model.turns is None:
        return
    if model.turns not in KNOBS:
        raise TypeError(f"{model.__name__}.turns: {model.turns!r} is no replica knob ({', '.join(KNOBS)})")
    for name, placeholders in model.commands.items():
        if len(placeholders) != 1:
            raise TypeError(f"{model.__name__}: command {name!r} sets knob {model.turns!r}, so it takes one "
                            f"placeholder (its new value), not {sorted(placeholders)}")


def knob_commands() -> dict[str, tuple[str, str]]:
    """Each replica knob an action turns by a `[target.commands]` entry: that command, and the placeholder its new
    value fills (ttl: set-ttl {ttl}, clock_offset: clock-skew {offset}), read off the registry."""
    return {model.turns: (name, next(iter(model.commands[name])))
            for name, model in CHAOS_ACTIONS.items() if model.turns is not None and name in model.commands}


class _Chaos(ChaosAction):
    replica: int | None = Field(default=None, ge=1,
                                description="1-based; default: the first (set-ttl: every replica in turn)")


class _Several(_Chaos):
    """An action that can act on several replicas at once: `replicas` names them (`replica` names one)."""

    several: ClassVar[bool] = True
    replicas: list[Annotated[int, Field(ge=1)]] | None = Field(
        default=None, min_length=2, description="1-based, at least two, each once (e.g. [1, 3]: a minority, or all "
                                                "but one); instead of `replica`")

    @field_validator("replicas")
    @classmethod
    def _each_once(cls, replicas: list[int] | None) -> list[int] | None:
        """Each replica once, in order: `[3, 1]` is `[1, 3]`."""
        if replicas is not None and len(set(replicas)) != len(replicas):
            raise ValueError(f"names a replica twice: {replicas}")
        return sorted(replicas) if replicas is not None else None

    @model_validator(mode="after")
    def _one_way_to_name(self) -> _Several:
        if self.replicas is not None and self.replica is not None:
            raise ValueError("name one replica (`replica`) or several (`replicas`), not both")
        return self


class ReplicaAction(_Several):
    """restart: graceful stop and start; kill: kill -9 and start."""

    action: Literal["restart", "kill"]
    commands: ClassVar[Mapping[str, frozenset[str]]] = {"restart": _NONE, "kill": _NONE}
    undone: ClassVar[str] = "the rollback starts a replica found down"
    # cuts: what the process held: connections, keys, records in memory
    cuts: ClassVar[frozenset[EdgeKind]] = frozenset({"answer", "key", "record"})
    provokes: ClassVar[frozenset[str]] = frozenset({"unknown key"})  # a replica on per-process keys loses its own


class PauseAction(_Several):
    """Freeze a replica (SIGSTOP, or the engine's pause) for `duration`, then resume it."""

    action: Literal["pause"]
    commands: ClassVar[Mapping[str, frozenset[str]]] = {"pause": _NONE, "resume": _NONE}
    needs: ClassVar[tuple[str, ...] | None] = ("pause", "resume")
    undone: ClassVar[str] = "resumed at its end; one the run cut short is resumed by the rollback"
    freezes: ClassVar[bool] = True
    # cuts: rounds in flight time out; states age while it is frozen
    cuts: ClassVar[frozenset[EdgeKind]] = frozenset({"answer", "age"})
    provokes: ClassVar[frozenset[str]] = frozenset({"expired"})  # a frozen replica's states age while leads wait
    duration: PositiveDuration = Field(default=5.0, description="how long the replica stays paused, real")


class RollingRestart(_Chaos):
    """Restart every replica, one after another."""

    action: Literal["rolling-restart"]
    acts_on: ClassVar[ActsOn] = "replicas"
    needs: ClassVar[tuple[str, ...] | None] = ("restart",)
    undone: ClassVar[str] = "the rollback starts a replica found down"
    cuts: ClassVar[frozenset[EdgeKind]] = frozenset({"answer", "key", "record"})
    provokes: ClassVar[frozenset[str]] = frozenset({"unknown key"})  # a replica on per-process keys loses its own
    interval: Duration = Field(default=2.0, description="wait between one replica serving again and the next "
                                                        "restart (0: none), real")


class RotateKeys(_Chaos):
    """Key rotation: `correct` waits one (real) TTL before retiring the old key; the others are the mistakes."""

    action: Literal["rotate-keys"]
    acts_on: ClassVar[ActsOn] = "replicas"
    commands: ClassVar[Mapping[str, frozenset[str]]] = dict.fromkeys(("add-key", "promote-key", "retire-key"),
                                                                     frozenset({"key_id", "key_file"}))
    undone: ClassVar[str] = ("the rollback restores each replica's ring; by command, a rotation cut short is "
                             "finished forward (the new key added and promoted everywhere)")
    # cuts: minter-first seals with a key others lack; retire-early retires one in use
    cuts: ClassVar[frozenset[EdgeKind]] = frozenset({"key"})
    provokes: ClassVar[frozenset[str]] = frozenset({"unknown key"})  # minter-first, retire-early
    order: Literal["correct", "minter-first", "retire-early"] = Field(
        default="correct", description="correct: every replica accepts the new key, then seals with it, and the "
                                       "old key is retired one TTL later; minter-first: one replica seals with it "
                                       "before the others accept it; retire-early: the old key is retired one "
                                       "phase_gap later")
    phase_gap: Duration = Field(default=2.0, description="wait between the rotation's phases (0: none), real")

    def commands_needed(self) -> tuple[str, ...]:
        """minter-first never retires the old key."""
        return tuple(name for name in self.commands if self.order != "minter-first" or name != "retire-key")

    def by_command_problem(self, commands: Mapping[str, list[str]]) -> tuple[str, str] | None:
        """minter-first promotes the new key on one replica first: its key commands must name one replica."""
        if self.order != "minter-first":
            return None
        wide = [name for name in ("add-key", "promote-key")
                if name in commands and not placeholders_in(commands[name]) & REPLICA_PLACEHOLDERS]
        if not wide:
            return None
        return (f"minter-first promotes the new key on one replica before the others: {wide[0]} must act on one "
                f"replica ({{replica}}, {{index}} or {{url}})", "order")


class SetTtl(_Several):
    """Restart replicas with another TTL: only `replica` when given, else every one in turn."""

    action: Literal["set-ttl"]
    acts_on: ClassVar[ActsOn] = "replicas"
    commands: ClassVar[Mapping[str, frozenset[str]]] = {"set-ttl": frozenset({"ttl"})}
    turns: ClassVar[str | None] = "ttl"
    undone: ClassVar[str] = "the rollback restarts the replicas with the target's own TTL"
    # cuts: states older than the new TTL; a restart besides
    cuts: ClassVar[frozenset[EdgeKind]] = frozenset({"age", "answer", "key"})
    provokes: ClassVar[frozenset[str]] = frozenset({"expired"})
    ttl: PositiveDuration = Field(description="the new requestState lifetime, modelled")


class Rename(_Several):
    """Restart a replica with another server name: states sealed for the old name fail `audience`."""

    action: Literal["rename"]
    commands: ClassVar[Mapping[str, frozenset[str]]] = {"rename": frozenset({"name"})}
    turns: ClassVar[str | None] = "name"
    undone: ClassVar[str] = "the rollback restarts the replica with the target's own name"
    cuts: ClassVar[frozenset[EdgeKind]] = frozenset({"audience", "answer", "key"})
    provokes: ClassVar[frozenset[str]] = frozenset({"audience"})
    name: str = Field(min_length=1, max_length=128, pattern=SERVER_NAME,
                      description="the replica's new server name: letters, digits, _, . and -, starting with a letter "
                                  "or digit (it reaches `rename`'s command as {name})")


class ClockSkew(_Several):
    """Restart a replica with its clock off by `offset`."""

    action: Literal["clock-skew"]
    commands: ClassVar[Mapping[str, frozenset[str]]] = {"clock-skew": frozenset({"offset"})}
    turns: ClassVar[str | None] = "clock_offset"
    undone: ClassVar[str] = "the rollback restarts the replica with no skew"
    # cuts: a state's age as the other replica's clock reads it; a restart besides
    cuts: ClassVar[frozenset[EdgeKind]] = frozenset({"age", "answer", "key"})
    provokes: ClassVar[frozenset[str]] = frozenset({"minted in the future", "expired"})  # ahead; behind
    offset: PositiveDuration = Field(default=120.0, description="how far its clock is off, real")
    behind: bool = Field(default=False, description="the clock runs behind instead of ahead")


class MemoryRecords(_Several):
    """Restart a replica with its quotes and once-only records in its own memory."""

    action: Literal["memory-records"]
    turns: ClassVar[str | None] = "store"
    undone: ClassVar[str] = "the rollback restarts the replica with its original options"
    # cuts: records the other replicas cannot read; a restart besides
    cuts: ClassVar[frozenset[EdgeKind]] = frozenset({"record", "answer", "key"})


class CommandAction(_Chaos):
    """Run any command at its time (a network fault, a config push); `rollback` runs when the run ends."""

    action: Literal["command"]
    needs: ClassVar[tuple[str, ...] | None] = ()
    undone: ClassVar[str] = "its own `rollback` command, if it ran"
    # cuts: a command only its user wrote may cut anything
    cuts: ClassVar[frozenset[EdgeKind]] = _EVERY_EDGE
    command: list[str] = Field(description="an argv list (no shell unless you write `sh -c`); placeholders "
                                           "{replica}, {index}, {url} of `replica` (default: the first)")
    rollback: list[str] | None = Field(default=None, description="run when the run ends, if the command ran: "
                                                                 "what puts the deployment back")

    def command_argvs(self, commands: Mapping[str, list[str]]) -> list[list[str]]:
        """Its own command."""
        return [self.command]

    @field_validator("command", "rollback")
    @classmethod
    def _placeholders(cls, argv: list[str] | None, info: ValidationInfo) -> list[str] | None:
        if argv is not None:
            check_command(str(info.field_name), argv, REPLICA_PLACEHOLDERS, where=())
        return argv


NetworkFaultKind = Literal["latency", "bandwidth", "reset", "blackhole", "truncate", "down", "cut-slow"]

FAULT_KEYS: dict[str, frozenset[str]] = {
    "latency": frozenset({"delay", "jitter", "direction"}),
    "bandwidth": frozenset({"rate"}),
    "reset": frozenset({"when"}),
    "blackhole": frozenset(),
    "truncate": frozenset({"after"}),
    "down": frozenset(),
    "cut-slow": frozenset({"after"}),
}
"""The keys of each fault of its own: any other fault's key is a mistake in the scenario."""
_FAULT_ONLY_KEYS: frozenset[str] = frozenset().union(*FAULT_KEYS.values())
"""Every key that belongs to some fault: a network step holds only its own fault's."""


class NetworkAction(_Several):
    """A network fault between the harness and a replica, for `duration`, done by the harness's own proxy.

    Every replica gets a proxy on 127.0.0.1 when the scenario has a network fault; the load
    talks to the proxies, which forward to the replicas' URLs. `toxicity` is the share of
    exchanges (one request and its answer) the fault hits, drawn from the scenario's seed.
    """

    action: Literal["network"]
    acts_on: ClassVar[ActsOn] = "replicas"
    needs: ClassVar[tuple[str, ...] | None] = ()  # the harness's own proxy's
    undone: ClassVar[str] = "the fault is off at its end, however the step ends"
    cuts: ClassVar[frozenset[EdgeKind]] = frozenset({"answer"})
    provokes: ClassVar[frozenset[str]] = frozenset({"expired"})  # a delayed or held answer ages its state
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
    after: Annotated[float | None, BeforeValidator(parse_duration_text)] = Field(default=None, ge=0,
                                description="truncate: bytes of the answer let through; cut-slow: idle seconds "
                                            "(a duration) before the cut, real")

    @model_validator(mode="after")
    def _keys_of_the_fault(self) -> NetworkAction:
        own = FAULT_KEYS[self.fault]
        foreign = sorted(key for key in self.model_fields_set & _FAULT_ONLY_KEYS if key not in own)
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

    @model_serializer(mode="wrap")
    def _without_other_faults_keys(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Dumped without the keys of the other faults (their defaults), so scenario.json reads back as written:
        the model refuses another fault's key however it got there."""
        data: dict[str, Any] = handler(self)
        for key in _FAULT_ONLY_KEYS - FAULT_KEYS[self.fault]:
            data.pop(key, None)
        return data

    @classmethod
    def as_dumped_before(cls, step: dict[str, Any]) -> dict[str, Any]:
        """A network step of a scenario.json written before a step dumped only its own fault's keys (every other
        fault's key at its default, which the fault never reads): those keys dropped; any other left as it is."""
        own = FAULT_KEYS.get(str(step.get("fault")), _FAULT_ONLY_KEYS)
        return {key: value for key, value in step.items()
                if key in own or key not in _FAULT_ONLY_KEYS or value != cls.model_fields[key].default}

    def asked(self) -> dict[str, Any]:
        """Its duration, replica, fault and the fault's own keys (not the others' defaults)."""
        return {"duration": self.duration, "replica": self.replica, **self.parameters()}

    def parameters(self) -> dict[str, object]:
        """The fault and its own keys, as the journal records them."""
        return {"fault": self.fault, "toxicity": self.toxicity,
                **{key: getattr(self, key) for key in sorted(FAULT_KEYS[self.fault])}}


class _AuthChaos(ChaosAction):
    """An action on the deployment's authorization server (or its commands), not on a replica."""

    acts_on: ClassVar[ActsOn] = "auth"
    by_command: ClassVar[AuthCommands]
    """which of its `commands` make it, end it and put it back."""

    @property
    def replica(self) -> None:
        """No replica: the action is the authorization server's."""
        return None


Share = Annotated[float, Field(gt=0.0, le=1.0)]


class TokenExpiry(_AuthChaos):
    """From `at`, tokens are issued with a short `lifetime`, so leads' tokens expire while they think."""

    action: Literal["token-expiry"]
    commands: ClassVar[Mapping[str, frozenset[str]]] = {"token-expiry": frozenset({"lifetime"}),
                                                        "token-expiry-end": _NONE}
    needs: ClassVar[tuple[str, ...] | None] = ("token-expiry", "token-expiry-end")
    by_command: ClassVar[AuthCommands] = AuthCommands("token-expiry", off="token-expiry-end",
                                                      restore="token-expiry-end")
    undone: ClassVar[str] = "tokens are issued with their usual lifetime again at its end, or by the rollback"
    cuts: ClassVar[frozenset[EdgeKind]] = frozenset({"token"})
    lifetime: PositiveDuration = Field(default=5.0, description="the lifetime of tokens issued from `at`, real")
    duration: PositiveDuration | None = Field(default=None, description="how long tokens are issued short, real "
                                                                        "(default: until the run ends)")


class Revoke(_AuthChaos):
    """A `share` of the leads' tokens is revoked (the tokens they hold now; a refreshed token is good again)."""

    action: Literal["revoke"]
    commands: ClassVar[Mapping[str, frozenset[str]]] = {"revoke": frozenset({"share"})}
    by_command: ClassVar[AuthCommands] = AuthCommands("revoke")
    undone: ClassVar[str] = ("not at its end (a refreshed token is good again); the rollback clears the "
                             "revocations of the harness's own authorization server")
    cuts: ClassVar[frozenset[EdgeKind]] = frozenset({"token"})
    share: Share = Field(default=0.5, description="the share of the leads holding tokens whose tokens are "
                                                  "revoked, more than 0 up to 1 (at least one lead)")


class ScopeLoss(_AuthChaos):
    """A `share` of the leads lose `scope` (refunds:write): their issue_refund calls answer 403 from then on."""

    action: Literal["scope-loss"]
    commands: ClassVar[Mapping[str, frozenset[str]]] = {"scope-loss": frozenset({"share", "scope"}),
                                                        "scope-restore": frozenset({"scope"})}
    needs: ClassVar[tuple[str, ...] | None] = ("scope-loss",)
    by_command: ClassVar[AuthCommands] = AuthCommands("scope-loss", restore="scope-restore")
    undone: ClassVar[str] = "the rollback gives the scope back (by command: `scope-restore`, if there is one)"
    cuts: ClassVar[frozenset[EdgeKind]] = frozenset({"token"})
    share: Share = Field(default=0.5, description="the share of the leads holding tokens who lose the scope, more "
                                                  "than 0 up to 1 (at least one lead)")
    scope: str = Field(default="refunds:write", min_length=1, description="the scope they lose")


class AuthDown(_AuthChaos):
    """The authorization server refuses every request for `duration`: refreshes fail, valid tokens still work."""

    action: Literal["auth-down"]
    commands: ClassVar[Mapping[str, frozenset[str]]] = {"auth-down": _NONE, "auth-up": _NONE}
    needs: ClassVar[tuple[str, ...] | None] = ("auth-down", "auth-up")
    by_command: ClassVar[AuthCommands] = AuthCommands("auth-down", off="auth-up", restore="auth-up")
    undone: ClassVar[str] = "up again at its end, or by the rollback"
    # cuts: a token that needs renewing is not renewed
    cuts: ClassVar[frozenset[EdgeKind]] = frozenset({"token"})
    duration: PositiveDuration = Field(default=30.0, description="how long it refuses, real")


class SubjectDrift(_AuthChaos):
    """For `duration`, a `share` of the replicas' token verifications drop the token's subject."""

    action: Literal["subject-drift"]
    commands: ClassVar[Mapping[str, frozenset[str]]] = {"subject-drift": frozenset({"share"})}
    by_command: ClassVar[AuthCommands] = AuthCommands("subject-drift", off="subject-drift",
                                                      restore="subject-drift", off_values={"share": "0"})
    undone: ClassVar[str] = "the verifier keeps subjects again at its end (share 0), or by the rollback"
    cuts: ClassVar[frozenset[EdgeKind]] = frozenset({"token"})
    provokes: ClassVar[frozenset[str]] = frozenset({"principal drift"})
    share: Share = Field(default=0.5, description="the share of verifications that drop the subject, more than "
                                                  "0 up to 1")
    duration: PositiveDuration = Field(default=10.0, description="how long the verifier drops subjects, real")


AUTH_ACTIONS = frozenset(name for name, model in CHAOS_ACTIONS.items() if model.acts_on == "auth")
"""The actions on the authorization server, which name no replica."""

COMMAND_NAMES: dict[str, frozenset[str]] = {
    **{name: placeholders for model in CHAOS_ACTIONS.values() for name, placeholders in model.commands.items()},
    **OTHER_COMMANDS}
"""The commands `[target.commands]` may name, each with the placeholders it gets beside the replica's own."""

DEPLOYMENT_COMMANDS = frozenset({*OTHER_COMMANDS, *(name for model in CHAOS_ACTIONS.values() if model.acts_on == "auth"
                                                   for name in model.commands)})
"""Commands that act on the whole deployment (its size, its authorization server): they get no replica
placeholders and run once."""

if TYPE_CHECKING:
    ChaosStep = ChaosAction
else:
    ChaosStep = Annotated[Union[tuple(dict.fromkeys(CHAOS_ACTIONS.values()))],  # noqa: UP007 - built at run time
                          Field(discriminator="action")]
"""One `[[chaos]]` step: the union of every registered action, told apart by `action`."""


def auth_commands(action: str) -> AuthCommands:
    """The commands that make, end and put back an authorization server action."""
    model = CHAOS_ACTIONS[action]
    if not issubclass(model, _AuthChaos):
        raise ValueError(f"{action} is not an action on the authorization server")
    return model.by_command


def commands_needed(step: ChaosStep) -> tuple[str, ...]:
    """The `[target.commands]` names an action needs on a target whose chaos is all by command."""
    return step.commands_needed()
