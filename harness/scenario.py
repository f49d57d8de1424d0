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

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.durations import Duration, PositiveDuration
from harness.leads import LeadProfile, ThinkTime
from harness.load.mutations import DEFAULT_MUTATIONS, Mutation, skipped_mutations
from harness.logs.spec import parse_log_location
from harness.mrtr.routing import Routing
from harness.thresholds import parse_thresholds


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


class Target(_Strict):
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
    overrides: list[ReplicaOverride] = Field(default_factory=list, description="replicas that differ from the rest")
    urls: list[str] = Field(default_factory=list, description="external: the replicas' (or the balancer's) MCP URLs")
    api: str | None = Field(default=None, description="external: the shop API's base URL, whose `GET /ledger` "
                                                      "the invariants read; none: ledger invariants unchecked")
    logs: list[str] = Field(default_factory=list)
    image: str | None = Field(default=None, description="docker: the image the harness starts the shop from")
    compose_project: str | None = Field(default=None, description="docker: a running compose deployment's project")
    compose_service: str | None = Field(default=None, description="docker: the replicas' compose service")

    @field_validator("logs")
    @classmethod
    def _known_log_sources(cls, logs: list[str]) -> list[str]:
        """Each entry must be a log source the run can follow: refused here, not when the run starts."""
        for index, entry in enumerate(logs):
            parse_log_location(entry, index)
        return logs

    @model_validator(mode="after")
    def _fits_kind(self) -> Target:
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
                                       description="flows per second, open model (Poisson arrivals)")
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

    def skipped(self) -> dict[Mutation, str]:
        """The chosen classes this flow cannot send, with why: the shop's flow has other quotes and tools to hand."""
        shop = self.tool is None
        return skipped_mutations(self.mutations, several_arguments=shop or len(self.arguments) > 1,
                                 other_tool=shop or self.swap_tool is not None)

    def runnable(self) -> list[Mutation]:
        """The classes the flow picks from: its `mutations` less those it cannot send, in their given order."""
        skipped = self.skipped()
        return [mutation for mutation in self.mutations if mutation not in skipped]

    @model_validator(mode="after")
    def _something_to_send(self) -> FuzzFlow:
        skipped = self.skipped()
        if all(mutation in skipped for mutation in self.mutations):
            raise FieldProblem("none of these mutations can be sent: " + "; ".join(
                f"{mutation.value}: {why}" for mutation, why in skipped.items()), "mutations")
        return self


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


ChaosStep = Annotated[
    ReplicaAction | PauseAction | RollingRestart | RotateKeys | SetTtl | Rename | ClockSkew | MemoryRecords,
    Field(discriminator="action"),
]


class Scenario(_Strict):
    """One scenario file: the top-level keys, then its tables."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$", description="names the results folder")
    description: str = Field(default="", description="free text, shown in summary.json and report.html")
    seed: int = Field(default=1, description="same seed, same flows, answers and think times")
    duration: PositiveDuration = Field(description="how long the load runs, real")
    time_scale: float = Field(default=1.0, ge=1.0, allow_inf_nan=False,
                              description="lead times and the TTL are modelled: real = modelled / time_scale")
    target: Target = Field(default_factory=Target, description="the deployment under test")
    load: Load = Field(description="how flows arrive")
    flows: list[FlowSpec] = Field(min_length=1, description="what each flow does, by weight")
    leads: LeadProfile = Field(default_factory=LeadProfile, description="how the simulated leads answer")
    chaos: list[ChaosStep] = Field(default_factory=list, description="what breaks, and when")
    hypothesis: dict[str, str | list[str]] = Field(
        default_factory=dict, description="the steady state, thresholds probed before, during and after the chaos")
    expect: dict[str, str | list[str]] = Field(default_factory=dict,
                                               description="thresholds the run must meet (k6 syntax)")
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
    def _chaos_fits(self) -> Scenario:
        for index, step in enumerate(self.chaos):
            if step.at > self.duration:
                raise FieldProblem(f"a {step.action} at {step.at:g}s falls after the end of the run "
                                   f"({self.duration:g}s)", "chaos", index, "at")
            if step.replica is not None and step.replica > self.target.replicas:
                raise FieldProblem(f"{step.action} names replica {step.replica}, but there are {self.target.replicas}",
                                   "chaos", index, "replica")
        return self

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
    location = [part for part in loc if not (isinstance(part, str) and part.endswith("Flow") or
                                             isinstance(part, str) and part in _UNION_TAGS)]
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
    table, rest = keys[0], keys[1:]
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
