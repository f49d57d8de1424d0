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
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.durations import Duration
from harness.leads import LeadProfile
from harness.mrtr.routing import Routing
from harness.thresholds import parse_thresholds


class ScenarioError(ValueError):
    """A scenario that cannot run, with the file, the field and the line when known."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReplicaOverride(_Strict):
    """How one replica of an embedded target differs from the others (1-based `replica`)."""

    replica: int = Field(ge=1)
    name: str | None = None
    clock_offset: Duration | None = None
    clock_behind: bool = False
    launch: Literal["cli", "module"] = "cli"
    store: Literal["shared", "memory"] = "shared"
    answers_store: Literal["shared", "memory"] = "shared"


class Target(_Strict):
    """The deployment under test: embedded (the harness starts the shop), external, or docker."""

    kind: Literal["embedded", "external", "docker"] = "embedded"
    replicas: int = Field(default=3, ge=1, le=32)
    store: Literal["sqlite", "redis", "memory"] = "sqlite"
    keyring: Literal["file", "ephemeral"] = "file"
    ttl: Duration = 600.0
    name: str = "shop"
    overrides: list[ReplicaOverride] = Field(default_factory=list)
    urls: list[str] = Field(default_factory=list)
    api: str | None = None
    logs: list[str] = Field(default_factory=list)
    image: str | None = Field(default=None, description="docker: the image the harness starts the shop from")
    compose_project: str | None = Field(default=None, description="docker: a running compose deployment's project")
    compose_service: str | None = Field(default=None, description="docker: the replicas' compose service")

    @model_validator(mode="after")
    def _fits_kind(self) -> Target:
        if self.kind == "external" and not self.urls:
            raise ValueError("an external target needs urls = [the replicas' or the balancer's MCP URLs]")
        if self.kind == "docker" and (self.image is None) == (self.compose_project is None):
            raise ValueError("a docker target needs either image = \"...\" (the harness starts the shop from it, "
                             "e.g. \"mrtr-harness/host-python:test\") or compose_project = \"...\" (a running "
                             "compose deployment), not both")
        if self.kind != "docker" and (self.image or self.compose_project or self.compose_service):
            raise ValueError("image, compose_project and compose_service apply to kind = \"docker\" only")
        for override in self.overrides:
            if override.replica > self.replicas:
                raise ValueError(f"overrides names replica {override.replica}, but there are {self.replicas}")
        return self


class Load(_Strict):
    """How flows arrive: an open model (arrivals per second) or a closed one (agents working in turn)."""

    model: Literal["open", "closed"] = "open"
    arrival_rate: float | None = Field(default=None, gt=0, description="flows per second, open model")
    users: int | None = Field(default=None, ge=1, description="support agents, closed model")
    ramp: Duration = 0.0
    routing: Routing = Routing.ROUND_ROBIN
    timeout: Duration = 30.0
    max_in_flight: int = Field(default=100_000, ge=1)

    @model_validator(mode="after")
    def _rate_or_users(self) -> Load:
        if self.model == "open" and self.arrival_rate is None:
            raise ValueError("an open model needs arrival_rate (flows per second)")
        if self.model == "closed" and self.users is None:
            raise ValueError("a closed model needs users (how many agents work flows one after another)")
        return self


class _Flow(_Strict):
    weight: float = Field(default=1.0, gt=0)


class RefundFlow(_Flow):
    """quote_refund then issue_refund: one round at or under the limit, two above it."""

    kind: Literal["refund"]
    amount: Literal["any", "above-limit", "below-limit"] = "any"


class ReturnFlow(_Flow):
    """record_return through its resolver form."""

    kind: Literal["return"]


class PayoutFlow(_Flow):
    """A refund under the limit, then pay_refund in URL mode with the lead finishing on the page."""

    kind: Literal["payout"]


class AdversarialFlow(_Flow):
    """A refund whose retry is sent wrong on purpose, for the on-call catalogue."""

    kind: Literal["replay", "tamper", "change-args"]


class CallFlow(_Flow):
    """Any tool of any MRTR server: the leads answer whatever it asks, from its schema."""

    kind: Literal["call"]
    tool: str = Field(min_length=1)
    arguments: list[dict[str, Any]] = Field(default_factory=lambda: [{}])
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


FlowSpec = Annotated[RefundFlow | ReturnFlow | PayoutFlow | AdversarialFlow | CallFlow, Field(discriminator="kind")]


def flow_label(flow: FlowSpec) -> str:
    """The flow's bounded metric label."""
    if isinstance(flow, CallFlow):
        return flow.name or flow.tool
    return flow.kind


class _Chaos(_Strict):
    at: Duration
    replica: int | None = Field(default=None, ge=1, description="1-based; default: the first replica")


class ReplicaAction(_Chaos):
    """restart: graceful stop and start; kill: kill -9 and start."""

    action: Literal["restart", "kill"]


class PauseAction(_Chaos):
    action: Literal["pause"]
    duration: Duration = 5.0


class RollingRestart(_Chaos):
    action: Literal["rolling-restart"]
    interval: Duration = 2.0


class RotateKeys(_Chaos):
    """Key rotation: `correct` waits one (real) TTL before retiring the old key; the others are the mistakes."""

    action: Literal["rotate-keys"]
    order: Literal["correct", "minter-first", "retire-early"] = "correct"
    phase_gap: Duration = 2.0


class SetTtl(_Chaos):
    action: Literal["set-ttl"]
    ttl: Duration


class Rename(_Chaos):
    action: Literal["rename"]
    name: str = Field(min_length=1)


class ClockSkew(_Chaos):
    action: Literal["clock-skew"]
    offset: Duration = 120.0
    behind: bool = False


class MemoryRecords(_Chaos):
    action: Literal["memory-records"]


ChaosStep = Annotated[
    ReplicaAction | PauseAction | RollingRestart | RotateKeys | SetTtl | Rename | ClockSkew | MemoryRecords,
    Field(discriminator="action"),
]


class Scenario(_Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    seed: int = 1
    duration: Duration
    time_scale: float = Field(default=1.0, ge=1.0)
    target: Target = Field(default_factory=Target)
    load: Load
    flows: list[FlowSpec] = Field(min_length=1)
    leads: LeadProfile = Field(default_factory=LeadProfile)
    chaos: list[ChaosStep] = Field(default_factory=list)
    hypothesis: dict[str, str | list[str]] = Field(default_factory=dict)
    expect: dict[str, str | list[str]] = Field(default_factory=dict)
    abort_on_violation: bool = False
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
        for step in self.chaos:
            if step.at > self.duration:
                raise ValueError(f"a {step.action} at {step.at:g}s falls after the end of the run ({self.duration:g}s)")
            if step.replica is not None and step.replica > self.target.replicas:
                raise ValueError(f"{step.action} names replica {step.replica}, but there are {self.target.replicas}")
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
    location = [part for part in error["loc"] if not (isinstance(part, str) and part.endswith("Flow") or
                                                     isinstance(part, str) and part in _CHAOS_TAGS)]
    field = _dotted(location) or "(top level)"
    line = _find_line(text, location)
    where = f"{source}:{line}" if line else source
    message = error["msg"].removeprefix("Value error, ")
    more = len(exc.errors()) - 1
    return f"{where}: {field}: {message}" + (f" (and {more} more problem{'s' * (more > 1)})" if more else "")


_CHAOS_TAGS = {"restart", "kill", "pause", "rolling-restart", "rotate-keys", "set-ttl", "rename", "clock-skew",
               "memory-records", "refund", "return", "payout", "replay", "tamper", "change-args", "call",
               "constant", "uniform", "exponential", "lognormal"}


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
