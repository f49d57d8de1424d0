"""`[hunt]`: the bounds of `mrtr-harness hunt`: budget, each trial's length, the schedules' size, what may break.

A hunt draws chaos schedules and runs each as a trial (a real run of the scenario with its
`[[chaos]]` replaced by the drawn steps). This table bounds the search; every key can also be
given on the command line (`hunt --trials 50 ...`), which wins. Which actions a target can
take is said here once (`action_problem`), for `validate` and for the drawing alike: an
action on the authorization server needs `[target.auth]` (on the embedded shop: its own
authorization server), a network fault needs plain-http replica URLs (the harness's proxy
sits in front of them), an external target needs the action's `[target.commands]`, and
`command` is never drawn (it runs a user's own argv, which a hunt cannot invent).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import Field, field_validator, model_validator

from harness.config.chaos import AUTH_ACTIONS, CHAOS_ACTIONS, NetworkAction
from harness.config.durations import PositiveDuration
from harness.config.strict import FieldProblem, Strict
from harness.config.target import STDIO_CHAOS
from harness.config.thresholds import parse_thresholds
from harness.config.worded_errors import did_you_mean

if TYPE_CHECKING:
    from harness.config.load import Load
    from harness.config.target import TargetConfig


class HuntedScenario(Protocol):
    """What the hunt's checks read of a scenario: a protocol, because the scenario's model holds `[hunt]` and
    so imports this module (a `Scenario` is one)."""

    @property
    def target(self) -> TargetConfig: ...

    @property
    def load(self) -> Load: ...

    @property
    def hunt(self) -> HuntSettings | None: ...

    @property
    def expect(self) -> dict[str, str | list[str]]: ...

    @property
    def hypothesis(self) -> dict[str, str | list[str]]: ...

StrategyName = Literal["random", "swarm", "cover", "lineage"]
"""The strategies a hunt's search can draw its schedules with, by name: each is one module of `harness.hunt.strategies`
(which says what it does), named here so that `validate` refuses any other; the two must agree (checked when the
strategies are imported)."""

BOUND_FLAGS = ("trials", "controls", "expect", "reuse", "budget", "trial_duration", "strategy", "max_steps", "seed",
               "reruns", "must_fail", "shrink_budget", "shrink_runs", "reproduce", "reproduce_at_least")
"""The flags that are `[hunt]` keys as they stand: each flag's dest is its key's name, its flag the name with
dashes (`expect` and `reuse` also take `--no-`)."""

NEVER_DRAWN = frozenset({"command"})
"""Actions a hunt never draws: `command` runs an argv only its user can write."""


class HuntSettings(Strict):
    """`[hunt]`: how far `mrtr-harness hunt` searches for a chaos schedule that breaks the scenario's property.

    The property is what a deployment must never do: violate an invariant, answer a -32602 the
    replicas' logs do not explain, or leave its steady state (`[hypothesis]`) during or after the
    chaos; the scenario's `[expect]` counts too only with `expect = true`. The search starts with
    `controls` trials without chaos: a deployment that fails one fails without chaos, and is not
    searched. Its schedules come from `strategy` (default random; with any of them the same seed
    draws the same schedules). The search stops at the first failing trial, or when `trials` or `budget` runs
    out (the controls count against it). The shrink of that trial's
    schedule follows: a smaller schedule still fails when it fails the same way in at least
    `must_fail` of `reruns` runs, and the shrink stops at `shrink_budget` or `shrink_runs`,
    whichever comes first; the minimal schedule then runs `reproduce` times for its rate.
    """

    trials: int = Field(default=20, ge=1, le=10_000, description="the most trials the search runs")
    controls: int = Field(default=2, ge=0, le=100, description="trials without chaos run before the search (within "
                                                               "its budget): a deployment that fails one fails "
                                                               "without chaos, and is not searched (0: none)")
    expect: bool = Field(default=False, description="whether the scenario's [expect] is part of the property (by "
                                                    "default it is not: it is the healthy outcome `run` judges, "
                                                    "and drawn chaos may cost a healthy deployment some of it)")
    budget: PositiveDuration = Field(default=900.0, description="the most wall time the search takes (a trial "
                                                                "under way finishes), real")
    trial_duration: PositiveDuration = Field(default=10.0, description="how long each trial's load runs (it "
                                                                       "replaces the scenario's duration), real")
    strategy: StrategyName = Field(default="random", description="how the search draws each trial's schedule: "
                                   "random (every step independently from every allowed action), swarm (each trial "
                                   "from a random subset of the allowed actions), cover (each step in the coverage "
                                   "cell tried least so far: every cell before any twice), lineage (the smallest "
                                   "untried set of faults that cuts every support seen so far of a flow class, "
                                   "timed on the hand-overs the passing trials' journals show; stops with a "
                                   "certificate when none is left)")
    max_steps: int = Field(default=2, ge=1, le=20, description="the most chaos steps a drawn schedule has (each "
                                                               "has 1 to max_steps)")
    actions: list[str] | None = Field(default=None, description="the chaos actions drawn, by name as [[chaos]] "
                                      "action gives it (default: every action this target can take; never "
                                      "`command`)")
    replicas: list[int] | None = Field(default=None, description="the replicas (1-based) chaos may name (default: "
                                                                  "every replica)")
    reuse: bool = Field(default=True, description="whether the trials of an embedded shop share the replicas' "
                        "zygote, started once per hunt (each trial still starts its own API, replicas, store and "
                        "keys: nothing of one trial reaches the next)")
    seed: int | None = Field(default=None, description="the seed the schedules are drawn from: the same seed draws "
                                                       "the same schedules (default: the scenario's seed)")
    reruns: int = Field(default=3, ge=1, le=100, description="while shrinking: how many times each smaller "
                                                             "schedule is run")
    must_fail: int = Field(default=2, ge=1, le=100, description="while shrinking: in how many of its reruns a "
                                                                "schedule must fail the same way to count as "
                                                                "still failing")
    shrink_budget: PositiveDuration = Field(default=900.0, description="the most wall time the shrink of a failing "
                                            "schedule takes (a candidate under way finishes), real")
    shrink_runs: int = Field(default=60, ge=1, le=10_000, description="the most runs the shrink of a failing "
                                                                      "schedule makes, in all")
    reproduce: int = Field(default=10, ge=0, le=1000, description="runs of the minimal schedule that measure its "
                                                                  "reproduction rate (0: not measured)")
    reproduce_at_least: float = Field(default=0.8, ge=0.0, le=1.0,
                                      description="the share of those runs the minimal schedule must fail the same "
                                                  "way; below it the hunt backs off along the shrink path to a "
                                                  "larger schedule that does (at most three of them tried)")

    @field_validator("actions")
    @classmethod
    def _known_actions(cls, actions: list[str] | None) -> list[str] | None:
        if actions is None:
            return None
        if not actions:
            raise ValueError("names no action: leave it out to draw every action the target can take")
        drawable = [name for name in CHAOS_ACTIONS if name not in NEVER_DRAWN]
        for index, name in enumerate(actions):
            if name in NEVER_DRAWN:
                raise FieldProblem(f"{name!r} runs a command only you can write: a hunt cannot draw it (the "
                                   f"actions: {', '.join(drawable)})", index)
            if name not in CHAOS_ACTIONS:
                raise FieldProblem(f"{name!r} is no chaos action (they are: {', '.join(drawable)})"
                                   f"{did_you_mean(name, drawable)}", index)
            if name in actions[:index]:
                raise FieldProblem(f"{name!r} is named twice", index)
        return actions

    @field_validator("replicas")
    @classmethod
    def _replicas_once(cls, replicas: list[int] | None) -> list[int] | None:
        if replicas is None:
            return None
        if not replicas:
            raise ValueError("names no replica: leave it out to let chaos name every replica")
        for index, replica in enumerate(replicas):
            if replica < 1:
                raise FieldProblem(f"replicas are numbered from 1, not {replica}", index)
            if replica in replicas[:index]:
                raise FieldProblem(f"replica {replica} is named twice", index)
        return replicas

    @model_validator(mode="after")
    def _bounds_fit(self) -> HuntSettings:
        if self.trial_duration > self.budget:
            raise FieldProblem(f"a trial of {self.trial_duration:g}s does not fit in the budget of "
                               f"{self.budget:g}s", "trial_duration")
        if self.must_fail > self.reruns:
            raise FieldProblem(f"must_fail ({self.must_fail}) is more than reruns ({self.reruns}): no schedule "
                               "could count as still failing", "must_fail")
        if self.shrink_runs < self.reruns:
            raise FieldProblem(f"shrink_runs ({self.shrink_runs}) is less than reruns ({self.reruns}): no smaller "
                               "schedule could be tried", "shrink_runs")
        return self


def action_problem(name: str, scenario: HuntedScenario) -> str | None:
    """Why this scenario's target cannot take the action (in the user's words), or None when it can."""
    target = scenario.target
    if name in NEVER_DRAWN:
        return "it runs a command only you can write"
    if name in AUTH_ACTIONS:
        if target.auth is None:
            return "it acts on the authorization server, and the target has no [target.auth]"
        if target.kind == "embedded" and (target.auth.kind != "client-credentials" or target.auth.token_url):
            return "it acts on the shop's own authorization server, which runs only with [target.auth] kind = " \
                   "\"client-credentials\" and no token_url"
    if target.kind == "stdio" and (target.stdio_processes == "per-client" or name not in STDIO_CHAOS):
        return "a stdio target's chaos is its processes' (restart, kill, rolling-restart, pause), per replica only"
    if name == "rotate-keys" and target.kind == "embedded" and target.keyring == "ephemeral":
        return "the shop's replicas keep ephemeral keys (keyring = \"ephemeral\"): there is no ring to rotate"
    if CHAOS_ACTIONS[name] is NetworkAction and any(not url.startswith("http://") for url in target.urls):
        return "the harness's fault proxy forwards plain http only, and the target's URLs are not all http://"
    if target.kind == "external":
        probe = CHAOS_ACTIONS[name].model_construct(action=name, at=0.0)  # its defaults: what it needs by command
        missing = [command for command in probe.commands_needed() if command not in target.commands]
        if missing:
            return f"an external target takes it only through [target.commands] {' and '.join(missing)}"
    return None


def drawable_actions(scenario: HuntedScenario) -> list[str]:
    """The actions a hunt of this scenario draws: `[hunt] actions`, else every one its target can take."""
    hunt = scenario.hunt or HuntSettings()
    if hunt.actions is not None:
        return list(hunt.actions)
    return [name for name in CHAOS_ACTIONS if action_problem(name, scenario) is None]


def drawable_replicas(scenario: HuntedScenario) -> list[int]:
    """The replicas (1-based) chaos may name: `[hunt] replicas`, else every one."""
    hunt = scenario.hunt or HuntSettings()
    return list(hunt.replicas) if hunt.replicas is not None else list(range(1, scenario.target.replica_count + 1))


def check_hunt(scenario: HuntedScenario) -> None:
    """The `[hunt]` bounds against the rest of the scenario (its target, its replicas): FieldProblem on a misfit."""
    hunt = scenario.hunt
    if hunt is None:
        return
    for index, name in enumerate(hunt.actions or ()):
        problem = action_problem(name, scenario)
        if problem is not None:
            raise FieldProblem(f"{name} cannot be drawn against this target: {problem}", "hunt", "actions", index)
    for index, replica in enumerate(hunt.replicas or ()):
        if replica > scenario.target.replica_count:
            raise FieldProblem(f"replica {replica} is not there: the target has {scenario.target.replica_count}",
                               "hunt", "replicas", index)
    stages = sum(stage.duration for stage in scenario.load.stages)
    if stages > hunt.trial_duration + 1e-9:
        raise FieldProblem(f"the load's stages last {stages:g}s, longer than a trial ({hunt.trial_duration:g}s): "
                           "a trial runs the scenario for trial_duration", "hunt", "trial_duration")
    for table in ("expect", "hypothesis"):
        for threshold in parse_thresholds(getattr(scenario, table)):
            if any(label == "action" for label, _ in threshold.selector):
                raise FieldProblem(f"a hunt draws its own chaos, so a threshold on one action ({threshold.key}) "
                                   "names what a trial may not have: select no action", table, threshold.key)
