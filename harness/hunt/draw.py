"""Drawing chaos schedules: each step from the one declaration of its action (the registry), its parameters seeded.

A step is drawn from its action's model in `CHAOS_ACTIONS`, field by field, by what the field is
(`harness.config.fields`, which the shrink, the schema and the reference read too): a literal is
one of its choices (which rotation order, which network fault), a flag either, a number within
its `ge`/`gt`/`le` bounds, or, unbounded, log-uniform around its default (a quarter to twice
it); a step's window (`duration`, `interval`, `phase_gap`) never outlasts the trial; the new TTL
of `set-ttl` is drawn below the target's own. `replica` is one the hunt allows (an action on
every replica may also name none: all of them); an action that can act on several at once
(`several`) may also name `replicas`: a minority of two or more, or all but one, of those allowed
(none with two replicas, where either is one); an action on the authorization server names
none. A network step sets only its fault's own keys. A field the drawing cannot read raises
TypeError: a new action whose field needs a rule here is caught by the tests, which draw every
action over many seeds and validate each drawn scenario. The drawn table is validated into the
action's model (`harness.hunt.model.chaos_step`): a step is held only as a model.

The same (seed, trial index) draws the same schedule in any process (`harness.load.seeding`).
"""

from __future__ import annotations

import itertools
import math
import random
import re
from dataclasses import dataclass
from typing import Any, Literal

from harness.config.chaos import CHAOS_ACTIONS, FAULT_KEYS, ChaosAction, ChaosStep, NetworkAction
from harness.config.fields import FieldFacts, model_facts
from harness.config.hunt import HuntSettings, drawable_actions, drawable_replicas
from harness.config.scenario import Scenario
from harness.hunt.model import Schedule, chaos_step
from harness.load.seeding import derive_seed, stream

Named = int | tuple[int, ...] | None
"""Whom a step names: one replica (1-based), several, or none (its action's default)."""
Timing = Literal["early", "middle", "late"]
TIMINGS: tuple[Timing, ...] = ("early", "middle", "late")
"""A step's `at` in the first, middle or last third of the trial: the coverage's timing buckets."""

LATEST = 0.8
"""Steps start within the first 80% of the trial, so each has time to act before the load stops."""
SHORTEST = 0.1
"""The shortest duration drawn, real seconds."""
_OWN = frozenset({"action", "at", "replica", "replicas"})
_FAULT_ONLY = frozenset().union(*FAULT_KEYS.values())


@dataclass(frozen=True)
class Space:
    """What a hunt may draw: the actions and replicas allowed, each trial's length and the most steps."""

    actions: tuple[str, ...]
    replicas: tuple[int, ...]
    replica_count: int
    duration: float
    """A trial's load, real seconds."""
    max_steps: int
    ttl: float
    """The target's requestState lifetime, modelled (set-ttl draws below it)."""
    name: str
    """The replicas' server name (rename draws another)."""

    @classmethod
    def of(cls, scenario: Scenario) -> Space:
        hunt = scenario.hunt or HuntSettings()
        actions = tuple(drawable_actions(scenario))
        if not actions:
            raise ValueError("this target can take no chaos action a hunt draws")
        return cls(actions=actions, replicas=tuple(drawable_replicas(scenario)),
                   replica_count=scenario.target.replica_count, duration=hunt.trial_duration,
                   max_steps=hunt.max_steps, ttl=scenario.target.ttl, name=scenario.target.name)

    def replica_choices(self, action: str) -> list[Named]:
        """The replicas a step of this action may name: none for the authorization server's, and none (every
        replica) also for an action on all of them when every replica is allowed; then, for an action that can
        act on several, each subset of the allowed replicas that is a minority of two or more, or all but one."""
        model = CHAOS_ACTIONS[action]
        if model.acts_on == "auth":
            return [None]
        choices: list[Named] = list(self.replicas)
        if model.acts_on == "replicas" and len(self.replicas) == self.replica_count:
            choices.append(None)
        if model.several:
            choices += [subset for size in subset_sizes(self.replica_count)
                        for subset in itertools.combinations(self.replicas, size)]
        return choices


def subset_sizes(count: int) -> list[int]:
    """How many replicas a subset drawn among `count` names: a minority of two or more (fewer than half), and
    all but one; none below three replicas (one of two is a single replica)."""
    return sorted({size for size in range(2, count) if 2 * size < count} | ({count - 1} if count >= 3 else set()))


def trial_seed(seed: int, index: int) -> int:
    """The seed trial `index` runs with (its flows, leads and fault draws), from the hunt's seed."""
    return derive_seed(seed, "hunt", "trial", index) % (1 << 31)


def draw_schedule(space: Space, seed: int, index: int) -> Schedule:
    """Trial `index`'s schedule: 1 to `max_steps` steps, in order of `at`; the same arguments draw the same one."""
    rng = stream(seed, "hunt", "schedule", index)
    steps = [draw_step(space, rng) for _ in range(rng.randint(1, space.max_steps))]
    return Schedule(steps=tuple(sorted(steps, key=lambda step: step.at)), duration=space.duration)


def draw_step(space: Space, rng: random.Random) -> ChaosStep:
    """One chaos step: an allowed action, when it starts, whom it acts on and its own keys, drawn as a `[[chaos]]`
    table and validated into the action's model."""
    action = rng.choice(space.actions)
    model = CHAOS_ACTIONS[action]
    at = _tenths(rng.uniform(0.0, space.duration * LATEST))
    table: dict[str, Any] = {"action": action, "at": at}
    replica = rng.choice(space.replica_choices(action))
    if isinstance(replica, tuple):
        table["replicas"] = list(replica)
    elif replica is not None:
        table["replica"] = replica
    left = max(space.duration - at, SHORTEST)
    fields = dict(model_facts(model))
    if model is NetworkAction:
        table["fault"] = fault = rng.choice(fields.pop("fault").choices)
        skipped = _FAULT_ONLY - FAULT_KEYS[fault]
        fields = {name: facts for name, facts in fields.items() if name not in skipped}
    for name, facts in fields.items():
        if name in _OWN:
            continue
        value = _draw_field(model, facts, table, space, left, rng)
        if value is not None:
            table[name] = value
    return chaos_step(table)


def _draw_field(model: type[ChaosAction], field: FieldFacts, table: dict[str, Any], space: Space, left: float,
                rng: random.Random) -> Any:
    """One key's value, read from what its declaration says it is (`harness.config.fields`); None leaves it out (its
    default). `table`: the step's keys drawn so far."""
    if model is NetworkAction and field.name == "toxicity" and table["fault"] == "down":
        return None  # down refuses every connection: toxicity 1, its default
    if model is NetworkAction and field.name == "after":
        return float(rng.randint(0, 4096)) if table["fault"] == "truncate" else _tenths(rng.uniform(0.2, 3.0))
    if field.optional and not field.required and rng.random() < 0.5:
        return None
    if field.kind == "literal":
        return rng.choice(field.choices)
    if field.kind == "flag":
        return rng.random() < 0.5
    if field.kind == "text":
        return None if not field.required else f"{_word(space.name)}-{field.name}-{rng.randint(1, 99)}"
    if field.kind == "duration":
        return _draw_duration(field, space, left, rng)
    if field.kind in ("share", "number") and field.lower is not None and field.upper is not None:
        value = round(rng.uniform(field.lower, field.upper), 2)
        return max(value, round(field.lower + 0.05, 2)) if field.lower_strict else value
    if field.kind == "count" and isinstance(field.default, int):
        low = max(field.lower or 1, field.default // 8)
        return max(int(_log_uniform(rng, low, field.default * 8)), field.lower or 0)
    raise TypeError(f"cannot draw {model.__name__}.{field.name} ({field.kind}, {field.held}): give it a rule in "
                    f"harness.hunt.draw")


def _word(name: str) -> str:
    """The target's server name as a name `rename` takes: letters, digits, _, . and - (others made -)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name).lstrip("_.-") or "shop"


def _draw_duration(field: FieldFacts, space: Space, left: float, rng: random.Random) -> float:
    """A duration in seconds: a new TTL below the target's (modelled); a length the step must be given within what
    is left of the trial; else around its default (0 to 1 s for a default of 0). A window ends within the trial."""
    default = field.default
    if field.name == "ttl":
        return _tenths(_log_uniform(rng, space.ttl / 10, space.ttl))
    low, high = _drawn_between(field, left)
    value = rng.uniform(low, high) if default == 0 else _log_uniform(rng, low, high)
    if field.window:
        value = min(value, left)
    return max(_tenths(value), SHORTEST if field.lower_strict or default != 0 else 0.0)


def _drawn_between(field: FieldFacts, left: float) -> tuple[float, float]:
    """The range a duration other than a TTL is drawn in: up to what is left of the trial with no default; 0 to 1 s
    for a default of 0 (uniform); else a quarter to twice its default (log-uniform)."""
    default = field.default
    if not isinstance(default, int | float):
        return 0.5, left
    return (0.0, 1.0) if default == 0 else (default / 4, default * 2)


def window_at_longest(field: FieldFacts, left: float) -> float:
    """The longest a step's window (`FieldFacts.window`) is drawn, within `left` seconds of the trial: what lineage's
    probes give a freeze."""
    return max(_tenths(min(_drawn_between(field, left)[1], left)), SHORTEST)


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    low, high = max(low, 1e-6), max(high, low)
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def _tenths(seconds: float) -> float:
    return round(seconds, 1)


def timing(at: float, duration: float) -> Timing:
    """Which third of the trial a step starts in."""
    share = at / duration if duration > 0 else 0.0
    return TIMINGS[min(int(share * 3), 2)]

