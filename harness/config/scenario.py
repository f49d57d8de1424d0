"""Scenario files: TOML, parsed once at the edge into validated pydantic models.

A scenario says what to run (target, load, flows, leads), what to break and when
(chaos), what must hold while it breaks (hypothesis), what the run must show (expect) and,
for a scenario that reproduces a known failure, what that failure looks like (reproduces:
judged instead of expect by `run --reproduce`). A bad file gets one clear error naming the
field and, where it can be found, the line; nothing starts. Durations read like "90s" or
"10m". Lead times and the TTL are modelled: real seconds = modelled / time_scale.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from harness.config.chaos import AUTH_ACTIONS, COMMAND_NAMES, ChaosStep, NetworkAction, commands_needed
from harness.config.compare import CompareSettings
from harness.config.durations import Duration, PositiveDuration
from harness.config.flows import FlowSpec
from harness.config.hosts import DEFAULT_HOST, Host, check_hosts
from harness.config.hunt import HuntSettings, check_hunt
from harness.config.leads import LeadProfile
from harness.config.lines import explain
from harness.config.load import Load
from harness.config.strict import FieldProblem, ScenarioError, Strict
from harness.config.target import STDIO_CHAOS, STDIO_CLIENT_LABEL, STDIO_FLOWS, TargetConfig
from harness.config.thresholds import Judged, ThresholdError, parse_threshold, parse_thresholds
from harness.config.worded_errors import did_you_mean
from harness.errors import UsageError

__all__ = ["Scenario", "ScenarioError", "load_scenario", "parse_scenario", "scenario_from_json"]

MAX_HOSTS = 16
"""Hosts a scenario may name: each is a metric label value."""


class Scenario(Strict):
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
    hosts: list[Host] = Field(default_factory=list, max_length=MAX_HOSTS,
                              description="the hosts the leads sit behind, each lead assigned to one by weight "
                                          "(none: one 2026-07-28 host declaring form and URL)")
    chaos: list[ChaosStep] = Field(default_factory=list, description="what breaks, and when")
    hypothesis: dict[str, str | list[str]] = Field(
        default_factory=dict, description="the steady state, thresholds probed before, during and after the chaos")
    hypothesis_unjudged: Literal["fail", "pass"] = Field(
        default="fail", description="a hypothesis condition a window's last probe cannot judge (no samples, no "
                                    "flow ended in the window): fail makes the window not steady, pass lets "
                                    "it be (docs/running.md)")
    expect: dict[str, str | list[str]] = Field(default_factory=dict,
                                               description="thresholds the run must meet (k6 syntax): the healthy "
                                                           "outcome, judged by `run`")
    reproduces: dict[str, str | list[str]] | None = Field(
        default=None, description="the failure this scenario reproduces, as thresholds (k6 syntax, as [expect]), "
                                  "judged instead of [expect] by `run --reproduce`")
    compare: CompareSettings = Field(default_factory=CompareSettings, description="how far a run may drift from "
                                     "its baseline (`mrtr-harness compare`, `run --baseline`)")
    hunt: HuntSettings | None = Field(default=None, description="the bounds of `mrtr-harness hunt`, which searches "
                                      "for a chaos schedule that breaks this scenario (ignored by `run`)")
    abort_on_violation: bool = Field(default=False, description="stop the load as soon as the ledger shows a "
                                                                "refund released or paid twice")
    grace: Duration = Field(default=10.0, description="how long flows still in flight may finish after the load stops")
    chaos_overrun: Duration = Field(
        default=60.0, description="how long the load may run past `duration` for a chaos schedule still running; "
                                  "an action still running after that is cut short and counts as a chaos failure")

    @field_validator("hypothesis", "expect", "reproduces")
    @classmethod
    def _thresholds_read(cls, table: dict[str, str | list[str]] | None) -> dict[str, str | list[str]] | None:
        """Each threshold parses; one that does not is named with its own key, so its error finds its line."""
        for key, conditions in (table or {}).items():
            try:
                parse_threshold(key, conditions)
            except ThresholdError as exc:
                raise FieldProblem(exc.problem, key) from None
        return table

    @field_validator("hosts")
    @classmethod
    def _hosts_named_once(cls, hosts: list[Host]) -> list[Host]:
        return check_hosts(hosts)

    @property
    def host_list(self) -> list[Host]:
        """The scenario's hosts: its `[[hosts]]`, or the one default host."""
        return list(self.hosts) or [DEFAULT_HOST]

    @model_validator(mode="after")
    def _labels_name_what_exists(self) -> Scenario:
        """A threshold's label value that names no flow, chaos action or replica of this scenario selects nothing,
        so it would pass (or fail) on nothing: a typo such as flow='refnud' is refused with the names there are."""
        known: dict[str, list[str]] = {"flow": sorted({flow.label() for flow in self.flows}),
                                       "action": sorted({step.action for step in self.chaos}),
                                       "host": sorted(host.name for host in self.host_list)}
        kind = self.target.kind
        if kind in ("embedded", "stdio") or (kind == "external" and len(self.target.urls) > 1) or (
                kind == "docker" and self.target.compose_project is None):  # a compose's are its own
            known["replica"] = [f"r{n}" for n in range(1, self.target.replica_count + 1)]
        if self.target.kind == "stdio" and self.target.stdio_processes == "per-client":
            known["replica"] = [STDIO_CLIENT_LABEL]
        for table in ("expect", "reproduces", "hypothesis"):
            for threshold in parse_thresholds(getattr(self, table) or {}):
                for label, value in threshold.selector:
                    names = known.get(label)
                    if names is not None and value not in names:
                        raise FieldProblem(f"{label}={value!r} names no {label} of this scenario (there are: "
                                           f"{', '.join(names) or 'none'}){did_you_mean(value, names)}", table,
                                           threshold.key)
        return self

    @model_validator(mode="after")
    def _shop_options_reach_the_shop(self) -> Scenario:
        """serve_2025 and payment_rounds start the shop's replicas differently: a deployment the harness does not
        start would ignore them, and the run would judge a shop that never had them."""
        target = self.target
        if target.kind == "external" or target.compose_project is not None:
            for name, unset in (("serve_2025", False), ("payment_rounds", None)):
                if getattr(target, name) != unset:
                    raise FieldProblem(f"{name} applies to the shop the harness starts (kind = \"embedded\", or "
                                       f"docker with image = \"...\"): start your own replicas with it instead",
                                       "target", name)
        return self

    @model_validator(mode="after")
    def _flows_can_run(self) -> Scenario:
        """A flow its kind says cannot run against this target (`FlowKind.problem`: a fuzz flow none of whose
        classes can be sent) is refused, saying why."""
        for index, flow in enumerate(self.flows):
            problem = flow.problem(self.target)
            if problem is not None:
                message, key = problem
                raise FieldProblem(message, "flows", index, key)
        return self

    @model_validator(mode="after")
    def _stages_fit(self) -> Scenario:
        total = sum(stage.duration for stage in self.load.stages)
        if total > self.duration + 1e-9:
            raise FieldProblem(f"the stages last {total:g}s, longer than the run's duration ({self.duration:g}s)",
                               "load", "stages")
        return self

    @model_validator(mode="after")
    def _chaos_fits(self) -> Scenario:
        for index, step in enumerate(self.chaos):
            if step.at > self.duration:
                raise FieldProblem(f"a {step.action} at {step.at:g}s falls after the end of the run "
                                   f"({self.duration:g}s)", "chaos", index, "at")
            if step.action in AUTH_ACTIONS and self.target.kind == "embedded" and not self._shop_issues_tokens():
                raise FieldProblem(f"{step.action} acts on the shop's own authorization server, which runs only with "
                                   f"[target.auth] kind = \"client-credentials\" and no token_url", "chaos", index,
                                   "action")
            if step.replica is not None and step.replica > self.target.replica_count:
                raise FieldProblem(f"{step.action} names replica {step.replica}, but there are "
                                   f"{self.target.replica_count}", "chaos", index, "replica")
            beyond = [replica for replica in step.acted_on(0) if replica >= self.target.replica_count]
            if beyond:
                raise FieldProblem(f"{step.action} names replica {beyond[0] + 1} in `replicas`, but there are "
                                   f"{self.target.replica_count}", "chaos", index, "replicas")
            self._by_command_fits(index, step)
        return self

    @model_validator(mode="after")
    def _stdio_fits(self) -> Scenario:
        """What a stdio target cannot do is refused here, in one line saying why: chaos beyond its processes,
        flows that send hand-built rounds on HTTP's wire, and hosts (the SDK's client is the one host)."""
        target = self.target
        if target.kind != "stdio":
            return self
        for index, step in enumerate(self.chaos):
            if target.stdio_processes == "per-client":
                raise FieldProblem(f"{step.action} on stdio_processes = \"per-client\": each process lives one "
                                   f"flow, so no replica stays to act on (use \"per-replica\")", "chaos", index,
                                   "action")
            if step.action not in STDIO_CHAOS:
                raise FieldProblem(f"{step.action} cannot act on a stdio target: it can {', '.join(STDIO_CHAOS)} its "
                                   f"processes, by their PID (there is no HTTP, key ring or authorization server "
                                   f"of the harness's to break)", "chaos", index, "action")
        for index, flow in enumerate(self.flows):
            if flow.kind not in STDIO_FLOWS:
                raise FieldProblem(f"a {flow.kind} flow sends hand-built rounds on HTTP's wire; over stdio the SDK's "
                                   f"client sends every round (flows: {', '.join(STDIO_FLOWS)})", "flows", index,
                                   "kind")
        if self.hosts:
            raise FieldProblem("[[hosts]] do not apply to a stdio target: the MCP SDK's client is its one host "
                               "(2026-07-28, form and URL elicitation)", "hosts")
        return self

    @model_validator(mode="after")
    def _hunt_fits(self) -> Scenario:
        check_hunt(self)
        return self

    def _shop_issues_tokens(self) -> bool:
        auth = self.target.auth
        return auth is not None and auth.kind == "client-credentials" and auth.token_url is None

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
        problem = step.by_command_problem(commands) if commands else None
        if problem is not None:
            raise FieldProblem(problem[0], "chaos", index, problem[1])

    def judged_table(self, judged: Judged) -> dict[str, str | list[str]]:
        """The thresholds a run judges: [expect], or with `run --reproduce` [reproduces] (a usage error when the
        scenario states no failure to reproduce)."""
        if judged is Judged.EXPECT:
            return self.expect
        if self.reproduces is None:
            raise UsageError(f"scenario {self.name!r} has no [reproduces] table (the failure it reproduces): only "
                             f"its [expect] can be judged")
        return self.reproduces

    def real(self, modelled_seconds: float) -> float:
        """Modelled seconds (lead times, TTL) as real seconds in this run."""
        return modelled_seconds / self.time_scale


def load_scenario(path: Path, overrides: dict[str, Any] | None = None) -> Scenario:
    """Read and validate a scenario file; any problem is one ScenarioError naming field and line."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read the scenario: {exc.strerror}") from None
    if raw.startswith(b"\xef\xbb\xbf"):
        raise ScenarioError(f"{path}:1: the file starts with a UTF-8 byte-order mark (BOM), which TOML does not "
                            "allow: save it as UTF-8 without a BOM")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ScenarioError(f"{path}:{line}: the file is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                            f"{exc.start}): save it as UTF-8") from None
    if not text.strip():
        raise ScenarioError(f"{path}: the file is empty: a scenario needs at least name, duration, [load] and "
                            "[[flows]]")
    return anchored(parse_scenario(text, str(path), overrides), path.parent)


def anchored(scenario: Scenario, folder: Path) -> Scenario:
    """The scenario with the paths it gives relative to its file (`[target.auth] file`, `[target] log_adapter`) made
    absolute, so a
    run (and every worker it sends the scenario to) reads the same file wherever it was started."""
    update: dict[str, Any] = {}
    auth = scenario.target.auth
    if auth is not None and auth.file is not None and not Path(auth.file).is_absolute():
        update["auth"] = auth.model_copy(update={"file": str(folder.absolute() / auth.file)})
    adapter = scenario.target.log_adapter
    if adapter.endswith(".toml") and not Path(adapter).is_absolute():
        update["log_adapter"] = str(folder.absolute() / adapter)
    if not update:
        return scenario
    return scenario.model_copy(update={"target": scenario.target.model_copy(update=update)})


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
        raise ScenarioError(explain(exc, text, source, Scenario, overrides)) from None


def scenario_from_json(text: str | bytes, source: str) -> Scenario:
    """A scenario a run wrote as JSON (its scenario.json), read back through the model; a damaged one is one
    ScenarioError line naming `source`, the first problem's field and what is wrong (and how many more)."""
    try:
        return Scenario.model_validate_json(text)
    except ValidationError as exc:
        older = _dumped_before(text)
        if older is not None:
            return older
        first, *rest = explain(exc, "", source, Scenario).splitlines() or [f"{source}: unreadable"]
        more = f" (and {len(rest)} more)" if rest else ""
        raise ScenarioError(f"{first}{more}: not a scenario this harness reads") from None


def _dumped_before(text: str | bytes) -> Scenario | None:
    """A scenario.json written before a network step dumped only its own fault's keys, read as it was meant (the
    other faults' keys at their defaults dropped); None when it is not one, or is still no scenario."""
    try:
        data = json.loads(text)
        steps = data["chaos"]
        rewritten = [NetworkAction.as_dumped_before(step) if step.get("action") == "network" else step
                     for step in steps]
    except (ValueError, RecursionError, TypeError, KeyError, AttributeError):
        return None
    if rewritten == steps:
        return None
    try:
        return Scenario.model_validate_json(json.dumps({**data, "chaos": rewritten}))
    except ValidationError:
        return None


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        data = data.setdefault(key, {})
    data[leaf] = value


