"""Scenario files: TOML, parsed once at the edge into validated pydantic models.

A scenario says what to run (target, load, flows, leads), what to break and when
(chaos), what must hold while it breaks (hypothesis) and what the run must show
(expect). A bad file gets one clear error naming the field and, where it can be found,
the line; nothing starts. Durations read like "90s" or "10m". Lead times and the TTL are
modelled: real seconds = modelled / time_scale.
"""

from __future__ import annotations

import re
import tomllib
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from harness.config.durations import Duration, PositiveDuration
from harness.config.logs import parse_log_location
from harness.config.think import ThinkTime
from harness.config.thresholds import parse_thresholds
from harness.leads.lead import LeadProfile
from harness.load.mutations import DEFAULT_MUTATIONS, Mutation, skipped_mutations
from harness.mrtr.routing import Routing


class ScenarioError(ValueError):
    """A scenario that cannot run, with the file, the field and the line when known."""


class FieldProblem(ValueError):
    """A model validator's error that belongs to one field of its table: `where` is that field's path in the table.

    Pydantic places a model validator's error on the whole table (or, at the top level, on
    nothing), so the error could name no line; `_explain` appends `where` to the location.
    """

    def __init__(self, message: str, *where: str | int) -> None:
        super().__init__(message)
        self.where = where


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReplicaOverride(_Strict):
    """How one replica of an embedded target differs from the others (1-based `replica`)."""

    replica: int = Field(ge=1, description="which replica (1-based) these settings apply to")
    name: str | None = Field(default=None, description="its server name, the audience its states are sealed for "
                                                       "(default: the target's name)")
    clock_offset: Duration | None = Field(default=None, description="how far its clock runs ahead (0 or more)")
    clock_behind: bool = Field(default=False, description="the clock_offset runs behind instead of ahead")
    launch: Literal["cli", "module"] = Field(
        default="cli", description="how it is started: the harness command, or `python -m harness.shop.server` "
                                   "(the resolver's answer key then differs)")
    store: Literal["shared", "memory"] = Field(default="shared", description="memory: quotes and refunds only "
                                                                             "this process sees")
    answers_store: Literal["shared", "memory"] = Field(default="shared", description="memory: a once-only record "
                                                                                     "only this process sees")


COMMAND_NAMES: dict[str, frozenset[str]] = {
    "restart": frozenset(), "kill": frozenset(), "pause": frozenset(), "resume": frozenset(),
    "add-key": frozenset({"key_id", "key_file"}), "promote-key": frozenset({"key_id", "key_file"}),
    "retire-key": frozenset({"key_id", "key_file"}), "set-ttl": frozenset({"ttl"}),
    "rename": frozenset({"name"}), "clock-skew": frozenset({"offset"}), "scale": frozenset({"replicas"}),
}
"""The commands `[target.commands]` may name, each with the placeholders it gets beside the replica's own."""

REPLICA_PLACEHOLDERS = frozenset({"replica", "index", "url"})
"""Every command's placeholders for the replica it acts on: `r1`, `0`, its MCP URL. A command that uses none of
them acts on the whole deployment and runs once, not once per replica."""

PLACEHOLDER = re.compile(r"(?<![${])\{([A-Za-z_][A-Za-z0-9_]*)\}(?!\})")
"""`{name}` in a command's argument; `${VAR}` (the shell's) and `{{...}}` (a literal brace) are left alone."""


def placeholders_in(argv: list[str]) -> set[str]:
    """The placeholder names a command's arguments use."""
    return {match.group(1) for arg in argv for match in PLACEHOLDER.finditer(arg)}


def check_command(name: str, argv: list[str], allowed: frozenset[str], where: tuple[str, ...] | None = None) -> None:
    """An empty command, or one with a placeholder this command does not get, is refused (FieldProblem)."""
    if not argv or not argv[0]:
        raise FieldProblem(f"{name} is empty: give an argv list, e.g. [\"kubectl\", \"...\"]",
                           *(where if where is not None else (name,)))
    unknown = sorted(placeholders_in(argv) - allowed)
    if unknown:
        known = ", ".join(f"{{{p}}}" for p in sorted(allowed))
        raise FieldProblem(f"{name} uses unknown placeholder {{{unknown[0]}}} (it gets {known}; write "
                           f"{{{{ and }}}} for a literal brace)", *(where if where is not None else (name,)))


class TargetConfig(_Strict):
    """The deployment under test: embedded (the harness starts the shop), external, or docker."""

    kind: Literal["embedded", "external", "docker"] = Field(
        default="embedded", description="embedded: the harness starts the shop; external: replicas at `urls`; "
                                        "docker: containers through the Docker engine")
    replicas: int = Field(default=3, ge=1, le=32, description="how many MCP replicas (embedded, docker)")
    store: Literal["sqlite", "redis", "memory"] = Field(
        default="sqlite", description="where the shop keeps quotes, refunds and once-only records (embedded); "
                                      "redis needs redis-server")
    keyring: Literal["file", "ephemeral"] = Field(
        default="file", description="sealing keys: a ring file per replica, re-read on change, or per-process "
                                    "keys that die with the process")
    ttl: PositiveDuration = Field(default=600.0, description="how long a requestState lives, modelled")
    name: str = Field(default="shop", description="the replicas' server name, the audience states are sealed for")
    principal_header: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9-]+$",
        description="a request header the replicas bind every requestState to (embedded, docker image: the shop's "
                    "replicas are started binding it; otherwise your deployment must): every round carries it, "
                    "valued `principal`, and the fuzzer's cross-principal mutant goes back under another value")
    principal: str = Field(default="mrtr-harness", min_length=1, pattern=r"^[\x21-\x7e]+$",
                           description="the principal_header's value on every round (printable, no spaces)")
    overrides: list[ReplicaOverride] = Field(default_factory=list, description="replicas that differ from the rest")
    urls: list[str] = Field(default_factory=list, description="external: the replicas' (or the balancer's) MCP URLs")
    api: str | None = Field(default=None, description="external: the shop API's base URL, whose `GET /ledger` "
                                                      "the invariants read; none: ledger invariants unchecked")
    logs: list[str] = Field(default_factory=list)
    image: str | None = Field(default=None, description="docker: the image the harness starts the shop from")
    compose_project: str | None = Field(default=None, description="docker: a running compose deployment's project")
    compose_service: str | None = Field(default=None, description="docker: the replicas' compose service")
    commands: dict[str, list[str]] = Field(
        default_factory=dict,
        description="external, docker: chaos by command, an argv list per name (no shell unless you write "
                    "`sh -c`): restart, kill, pause, resume, add-key, promote-key, retire-key, set-ttl, rename, "
                    "clock-skew, scale. Placeholders: {replica} (r1, ...), {index} (0-based), {url}; the key steps "
                    "{key_id} (a fingerprint) and {key_file} (the new key, a 0600 file deleted after the run); "
                    "set-ttl {ttl} (real seconds), rename {name}, clock-skew {offset} (signed seconds), scale "
                    "{replicas}. `MRTR_RUN_ID` is in its environment")
    command_timeout: PositiveDuration = Field(default=120.0, description="how long one command may run, real")
    ready_timeout: PositiveDuration = Field(default=60.0, description="after a command, how long the replica's "
                                                                      "URL may take to accept connections again")

    @field_validator("commands")
    @classmethod
    def _known_commands(cls, commands: dict[str, list[str]]) -> dict[str, list[str]]:
        """Unknown names and placeholders are refused here, with their line, not when the action runs."""
        for name, argv in commands.items():
            if name not in COMMAND_NAMES:
                raise FieldProblem(f"unknown command name {name!r}: the names are {', '.join(COMMAND_NAMES)}", name)
            extra = COMMAND_NAMES[name] if name == "scale" else COMMAND_NAMES[name] | REPLICA_PLACEHOLDERS
            check_command(name, argv, extra)
        return commands

    @property
    def replica_count(self) -> int:
        """How many replicas chaos can name: the URLs of an external target, else `replicas`."""
        return len(self.urls) if self.kind == "external" else self.replicas

    @field_validator("logs")
    @classmethod
    def _known_log_sources(cls, logs: list[str]) -> list[str]:
        """Each entry must be a log source the run can follow: refused here, not when the run starts."""
        for index, entry in enumerate(logs):
            parse_log_location(entry, index)
        return logs

    @model_validator(mode="after")
    def _fits_kind(self) -> TargetConfig:
        if self.kind == "external" and not self.urls:
            raise FieldProblem("an external target needs urls = [the replicas' or the balancer's MCP URLs]", "kind")
        if self.kind == "docker" and (self.image is None) == (self.compose_project is None):
            raise FieldProblem("a docker target needs either image = \"...\" (the harness starts the shop from it, "
                               "e.g. \"mrtr-harness/host-python:test\") or compose_project = \"...\" (a running "
                               "compose deployment), not both", "image" if self.image else "kind")
        docker_only = [name for name in ("image", "compose_project", "compose_service") if getattr(self, name)]
        if self.kind != "docker" and docker_only:
            raise FieldProblem("image, compose_project and compose_service apply to kind = \"docker\" only",
                               docker_only[0])
        if self.kind == "embedded" and self.commands:
            raise FieldProblem("[target.commands] applies to external and docker targets: the harness runs an "
                               "embedded target's chaos itself", "commands")
        for override in self.overrides:
            if override.replica > self.replicas:
                raise FieldProblem(f"overrides names replica {override.replica}, but there are {self.replicas}",
                                   "overrides")
        return self


class Load(_Strict):
    """How flows arrive: an open model (arrivals per second) or a closed one (agents working in turn)."""

    model: Literal["open", "closed"] = Field(
        default="open", description="open: flows arrive at `arrival_rate` whatever is in flight; closed: `users` "
                                    "agents each work one flow after another")
    arrival_rate: float | None = Field(default=None, gt=0, allow_inf_nan=False,
                                       description="flows per second, open model (Poisson arrivals; each may "
                                                   "start up to 50 ms early, on a wake-up the process has anyway)")
    users: int | None = Field(default=None, ge=1, description="support agents, closed model")
    ramp: Duration = Field(default=0.0, description="time to reach the full arrival rate (from a tenth "
                                                     "of it) or all users (0: at once)")
    routing: Routing = Field(
        default=Routing.ROUND_ROBIN, description="where each round lands: round-robin and random spread them; "
                                                "other-replica sends every retry to another replica; same-replica "
                                                "keeps a call on one (what stickiness does)")
    timeout: PositiveDuration = Field(default=30.0, description="the client's limit for one POST round, real")
    max_in_flight: int = Field(default=100_000, ge=1, description="open model: at this many flows in flight, new "
                                                                  "starts wait (and count as late)")

    @model_validator(mode="after")
    def _rate_or_users(self) -> Load:
        if self.model == "open" and self.arrival_rate is None:
            raise FieldProblem("an open model needs arrival_rate (flows per second)", "model")
        if self.model == "closed" and self.users is None:
            raise FieldProblem("a closed model needs users (how many agents work flows one after another)", "model")
        return self


class _Flow(_Strict):
    weight: float = Field(default=1.0, gt=0, allow_inf_nan=False,
                          description="its share of the flows started, relative to the other flows' weights")


class RefundFlow(_Flow):
    """quote_refund then issue_refund: one round at or under the limit, two above it."""

    kind: Literal["refund"]
    amount: Literal["any", "above-limit", "below-limit"] = Field(
        default="any", description="which orders: above the policy limit (held, a lead must confirm), below it "
                                   "(released at once), or any")


class ReturnFlow(_Flow):
    """record_return through its resolver form."""

    kind: Literal["return"]


class PayoutFlow(_Flow):
    """A refund under the limit, then pay_refund in URL mode with the lead finishing on the page."""

    kind: Literal["payout"]


class AdversarialFlow(_Flow):
    """A refund whose retry is sent wrong on purpose, for the on-call catalogue."""

    kind: Literal["replay", "tamper", "change-args"]


def _no_arguments() -> list[dict[str, Any]]:
    """One call with no arguments: a tool that takes none."""
    return [{}]


class CallFlow(_Flow):
    """Any tool of any MRTR server: the leads answer whatever it asks, from its schema."""

    kind: Literal["call"]
    tool: str = Field(min_length=1, description="the tool to call")
    arguments: list[dict[str, Any]] = Field(default_factory=_no_arguments,
                                            description="its arguments: one table, or a list to pick from at random")
    name: str | None = Field(default=None, description="label for metrics (default: the tool name)")
    answers: dict[str, Any] = Field(
        default_factory=dict,
        description="what the lead answers for a requested-schema property, in any question that has it: a value, "
                    "or a list of values the lead picks one from (seeded); a multi-select answer is a list inside "
                    "the list. Properties not named are answered from the schema")

    @field_validator("arguments", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

    @field_validator("answers")
    @classmethod
    def _choices_not_empty(cls, answers: dict[str, Any]) -> dict[str, Any]:
        for name, value in answers.items():
            if isinstance(value, list) and not value:
                raise ValueError(f"answers.{name} is an empty list: give at least one value to pick from")
        return answers


class FuzzFlow(_Flow):
    """A real first round, then a retry with a mutated requestState: every mutant must get -32602.

    Against the shop (no `tool`): a held refund's `issue_refund`. Against any other server:
    `tool` and `arguments`, as a `call` flow takes them.
    """

    kind: Literal["fuzz"]
    tool: str | None = Field(default=None, min_length=1,
                             description="the tool whose state is mutated (default: the shop's issue_refund on a "
                                         "held refund)")
    arguments: list[dict[str, Any]] = Field(default_factory=_no_arguments,
                                            description="its arguments (with `tool`): one table, or a list to pick "
                                                        "from; swap-flow and swap-arguments need two or more")
    name: str = Field(default="fuzz", min_length=1, description="label for metrics")
    mutations: list[Mutation] = Field(default_factory=lambda: list(DEFAULT_MUTATIONS), min_length=1,
                                      description="the mutation classes to send, one per flow, picked at random "
                                                  "(seeded); default: all but expired")
    swap_tool: str | None = Field(default=None, min_length=1,
                                  description="with `tool`: another tool whose first-round state swap-tool sends "
                                              "(the shop: record_return)")
    swap_tool_arguments: dict[str, Any] = Field(default_factory=dict, description="swap_tool's arguments")
    answers: dict[str, Any] = Field(default_factory=dict,
                                    description="what the lead answers on the retry, as a `call` flow's `answers` "
                                                "(the lead always answers: it never declines, cancels or abandons)")

    @field_validator("arguments", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

    @field_validator("mutations")
    @classmethod
    def _each_once(cls, mutations: list[Mutation]) -> list[Mutation]:
        if len(set(mutations)) != len(mutations):
            raise ValueError("mutations names a class twice")
        return mutations

    def skipped(self, principal: bool) -> dict[Mutation, str]:
        """The chosen classes this flow cannot send, with why: the shop's flow has other quotes and tools to hand.

        `principal`: whether the target names a `principal_header` (cross-principal needs one).
        """
        shop = self.tool is None
        return skipped_mutations(self.mutations, several_arguments=shop or len(self.arguments) > 1,
                                 other_tool=shop or self.swap_tool is not None, principal=principal)

    def runnable(self, principal: bool) -> list[Mutation]:
        """The classes the flow picks from: its `mutations` less those it cannot send, in their given order."""
        skipped = self.skipped(principal)
        return [mutation for mutation in self.mutations if mutation not in skipped]


FlowSpec = Annotated[RefundFlow | ReturnFlow | PayoutFlow | AdversarialFlow | CallFlow | FuzzFlow,
                     Field(discriminator="kind")]


def flow_label(flow: FlowSpec) -> str:
    """The flow's bounded metric label."""
    if isinstance(flow, CallFlow):
        return flow.name or flow.tool
    if isinstance(flow, FuzzFlow):
        return flow.name
    return flow.kind


class _Chaos(_Strict):
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


# --- [compare]: how far a run may drift from its baseline (read by `mrtr-harness compare`) ------------


def parse_share(value: Any) -> Any:
    """A tolerance is written as a percentage ("20%"); scenario.json keeps it as the fraction (0.2)."""
    if isinstance(value, str):
        if not re.fullmatch(r"\s*\d+(\.\d+)?\s*%\s*", value):
            raise ValueError(f"a tolerance is a percentage such as \"20%\", not {value!r}")
        return float(value.strip().rstrip("%")) / 100
    return value


Share = Annotated[float, BeforeValidator(parse_share), Field(ge=0)]
"""A relative change as a fraction of the baseline, written "20%" in a scenario or on the command line."""


class LatencyTolerance(_Strict):
    """`[compare.round_duration]`: latency percentiles; the tail is noisier than the median, so it gets more room."""

    p50: Share = Field(default=0.20, description="how much slower the median round may get, e.g. \"20%\"")
    p95: Share = Field(default=0.25, description="how much slower the 95th percentile may get")
    p99: Share = Field(default=0.50, description="how much slower the 99th percentile may get")


class MeanTolerance(_Strict):
    """`[compare.rounds_per_call]`: a tool that asks once more per call is a regression however fast it is."""

    mean: Share = Field(default=0.10, description="how much the mean rounds per call of a tool may grow")


class CpuTolerance(_Strict):
    """`[compare.cpu]`: CPU per round, compared only when both runs measured it (one figure per run: no test)."""

    harness_per_round_ms: Share = Field(default=0.30, description="how much the harness's CPU per round may grow")
    replica_per_round_ms: Share = Field(default=0.30, description="how much the replicas' CPU per round may grow")


class CompareSettings(_Strict):
    """`[compare]`: what `mrtr-harness compare` (and `run --baseline`) calls a regression.

    A change is a regression only when it is larger than its tolerance and, for samples
    (round latency, rounds per call, completion), real at `significance` (a one-sided
    Mann-Whitney U test); counts (rejections, client errors, invariant violations) compare
    exactly. Tolerances are relative to the baseline, written "20%"; keys read like the
    command line's `--tolerance round_duration.p95=20%`.
    """

    significance: float = Field(default=0.01, gt=0, lt=0.5,
                                description="the p-value under which a change counts as real, not noise")
    round_duration: LatencyTolerance = Field(default_factory=LatencyTolerance,
                                             description="round latency p50/p95/p99, per flow, tool and round")
    rounds_per_call: MeanTolerance = Field(default_factory=MeanTolerance, description="rounds per call, per tool")
    completed_ratio: Share = Field(default=0.05, description="relative drop in the share of flows completed")
    flows_per_second: Share = Field(default=0.10, description="relative drop in flows finished per second "
                                                               "(one figure per run: no significance test)")
    cpu: CpuTolerance = Field(default_factory=CpuTolerance, description="CPU per round, harness and replicas")


class Scenario(_Strict):
    """One scenario file: the top-level keys, then its tables."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$", description="names the results folder")
    description: str = Field(default="", description="free text, shown in summary.json and report.html")
    seed: int = Field(default=1, description="same seed, same flows, answers and think times")
    duration: PositiveDuration = Field(description="how long the load runs, real")
    time_scale: float = Field(default=1.0, ge=1.0, allow_inf_nan=False,
                              description="lead times and the TTL are modelled: real = modelled / time_scale")
    target: TargetConfig = Field(default_factory=TargetConfig, description="the deployment under test")
    load: Load = Field(description="how flows arrive")
    flows: list[FlowSpec] = Field(min_length=1, description="what each flow does, by weight")
    leads: LeadProfile = Field(default_factory=LeadProfile, description="how the simulated leads answer")
    chaos: list[ChaosStep] = Field(default_factory=list, description="what breaks, and when")
    hypothesis: dict[str, str | list[str]] = Field(
        default_factory=dict, description="the steady state, thresholds probed before, during and after the chaos")
    expect: dict[str, str | list[str]] = Field(default_factory=dict,
                                               description="thresholds the run must meet (k6 syntax)")
    compare: CompareSettings = Field(default_factory=CompareSettings, description="how far a run may drift from "
                                     "its baseline (`mrtr-harness compare`, `run --baseline`)")
    abort_on_violation: bool = Field(default=False, description="stop the load as soon as the ledger shows a "
                                                                "refund released or paid twice")
    grace: Duration = Field(default=10.0, description="how long flows still in flight may finish after the load stops")
    chaos_overrun: Duration = Field(
        default=60.0, description="how long the load may run past `duration` for a chaos schedule still running; "
                                  "an action still running after that is cut short and counts as a chaos failure")

    @field_validator("hypothesis", "expect")
    @classmethod
    def _thresholds_read(cls, table: dict[str, str | list[str]]) -> dict[str, str | list[str]]:
        parse_thresholds(table)  # raises ThresholdError (a ValueError) naming the threshold
        return table

    @model_validator(mode="after")
    def _fuzz_can_send(self) -> Scenario:
        """A fuzz flow none of whose classes can be sent against this target is refused, saying why for each."""
        principal = self.target.principal_header is not None
        for index, flow in enumerate(self.flows):
            if isinstance(flow, FuzzFlow) and not flow.runnable(principal):
                raise FieldProblem("none of these mutations can be sent: " + "; ".join(
                    f"{mutation.value}: {why}" for mutation, why in flow.skipped(principal).items()),
                    "flows", index, "mutations")
        return self

    @model_validator(mode="after")
    def _chaos_fits(self) -> Scenario:
        for index, step in enumerate(self.chaos):
            if step.at > self.duration:
                raise FieldProblem(f"a {step.action} at {step.at:g}s falls after the end of the run "
                                   f"({self.duration:g}s)", "chaos", index, "at")
            if step.replica is not None and step.replica > self.target.replica_count:
                raise FieldProblem(f"{step.action} names replica {step.replica}, but there are "
                                   f"{self.target.replica_count}", "chaos", index, "replica")
            self._by_command_fits(index, step)
        return self

    def _by_command_fits(self, index: int, step: ChaosStep) -> None:
        """On an external target every action is a command: one not configured is refused here, with its line."""
        commands = self.target.commands
        if self.target.kind == "external":
            needed = commands_needed(step)
            if any(name not in COMMAND_NAMES for name in needed):
                raise FieldProblem(f"{step.action} has no command form: an external target cannot do it "
                                   f"(use action = \"command\" with your own command)", "chaos", index, "action")
            missing = [name for name in needed if name not in commands]
            if missing:
                raise FieldProblem(f"{step.action} on an external target needs [target.commands] "
                                   f"{' and '.join(missing)} = [...]: the harness reaches that deployment only "
                                   f"through commands", "chaos", index, "action")
        if isinstance(step, RotateKeys) and step.order == "minter-first" and commands:
            wide = [name for name in ("add-key", "promote-key")
                    if name in commands and not placeholders_in(commands[name]) & REPLICA_PLACEHOLDERS]
            if wide:
                raise FieldProblem(f"minter-first promotes the new key on one replica before the others: "
                                   f"{wide[0]} must act on one replica ({{replica}}, {{index}} or {{url}})",
                                   "chaos", index, "order")

    def real(self, modelled_seconds: float) -> float:
        """Modelled seconds (lead times, TTL) as real seconds in this run."""
        return modelled_seconds / self.time_scale


def load_scenario(path: Path, overrides: dict[str, Any] | None = None) -> Scenario:
    """Read and validate a scenario file; any problem is one ScenarioError naming field and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read the scenario: {exc.strerror}") from None
    return parse_scenario(text, str(path), overrides)


def parse_scenario(text: str, source: str = "<scenario>", overrides: dict[str, Any] | None = None) -> Scenario:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{source}: not valid TOML: {exc}") from None
    for dotted, value in (overrides or {}).items():
        _set_dotted(data, dotted, value)
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_explain(exc, text, source)) from None


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        data = data.setdefault(key, {})
    data[leaf] = value


def _explain(exc: ValidationError, text: str, source: str) -> str:
    """The first error, as `file:line: field: message`, plus how many more there are."""
    error = exc.errors()[0]
    problem = (error.get("ctx") or {}).get("error")
    loc = [*error["loc"], *(problem.where if isinstance(problem, FieldProblem) else ())]
    location = [part for n, part in enumerate(loc) if not _is_union_tag(loc, n)]
    field = _dotted(location) or "(top level)"
    line = _find_line(text, location)
    where = f"{source}:{line}" if line else source
    message = error["msg"].removeprefix("Value error, ")
    more = len(exc.errors()) - 1
    return f"{where}: {field}: {message}" + (f" (and {more} more problem{'s' * (more > 1)})" if more else "")


def _union_tags(*unions: Any) -> frozenset[str]:
    """Every tag of the discriminated unions (flow kinds, chaos actions, think-time distributions).

    pydantic puts the chosen member's tag in an error's location (`chaos.1.rotate-keys.order`);
    the message names the field without it. Read from the unions themselves, so a new action
    or flow kind needs no second list here.
    """
    tags: set[str] = set()
    for union in unions:
        members, field = typing.get_args(union)
        for member in typing.get_args(members):
            tags.update(typing.get_args(member.model_fields[field.discriminator].annotation))
    return frozenset(tags)


_UNION_TAGS = _union_tags(FlowSpec, ChaosStep, ThinkTime)
_UNION_FIELDS = frozenset(name for name, info in LeadProfile.model_fields.items()
                          if info.annotation == typing.get_args(ThinkTime)[0])
"""Fields holding one union value (not a list of them): pydantic puts the tag right after their name."""


def _is_union_tag(loc: list[Any], n: int) -> bool:
    """Whether `loc[n]` is a tag pydantic put in (right after a list index or a union field), not a key of the file.

    By position, not by name alone: `restart` is a chaos action's tag in `chaos.1.restart.at`
    and a key of the file in `target.commands.restart`.
    """
    part = loc[n]
    if not isinstance(part, str) or n == 0:
        return False
    if part.endswith("Flow"):
        return True
    return part in _UNION_TAGS and (isinstance(loc[n - 1], int) or loc[n - 1] in _UNION_FIELDS)


def _dotted(location: list[Any]) -> str:
    text = ""
    for part in location:
        text += f"[{part + 1}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _find_line(text: str, location: list[Any]) -> int | None:
    """Best effort: the line of the failing key inside its table (or array-of-tables entry)."""
    lines = text.splitlines()
    start, end = 0, len(lines)
    keys = [part for part in location if isinstance(part, str)]
    if not keys:
        return None
    depth = _header_depth(lines, keys)
    table, rest = ".".join(keys[:depth]), keys[depth:]
    index = next((part for part in location[1:2] if isinstance(part, int)), None)
    headers = [n for n, line in enumerate(lines) if re.match(rf"^\s*\[\[?\s*{re.escape(table)}\s*\]\]?", line)]
    if headers:
        pick = headers[index] if index is not None and index < len(headers) else headers[0]
        start = pick
        end = next((n for n in range(pick + 1, len(lines)) if re.match(r"^\s*\[", lines[n])), len(lines))
        if not rest:
            return start + 1
    wanted = rest[-1] if rest else table
    for n in range(start, end):
        if re.match(rf"^\s*{re.escape(wanted)}\s*=", lines[n]) or re.match(rf'^\s*"{re.escape(wanted)}"\s*=', lines[n]):
            return n + 1
    return start + 1 if headers else None


def _header_depth(lines: list[str], keys: list[str]) -> int:
    """How many leading keys name the deepest table header the file has (`[target.commands]`: 2), at least 1."""
    for depth in range(len(keys), 1, -1):
        dotted = re.escape(".".join(keys[:depth]))
        if any(re.match(rf"^\s*\[\[?\s*{dotted}\s*\]\]?", line) for line in lines):
            return depth
    return 1
