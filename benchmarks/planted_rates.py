"""How often the `random` strategy's drawer draws a schedule that triggers each planted fault: exactly, no runs.

A planted fault (`harness.shop.planted`) takes hold only after a specific chaos schedule. Each is
written here as (1) which category each drawn step falls in (`A`, `B` or other), and (2) a rule
on the categories of a schedule's steps in the order they run. The drawer (`harness.hunt.draw`)
draws 1 to `max_steps` steps (uniform), each independently: an action uniform over the space's,
a replica uniform over the action's choices, `at` = a uniform start in the first 80% of the
trial rounded to tenths, a pause's `duration` log-uniform from a quarter to twice its default,
cut at what is left of the trial and rounded to tenths. A step's (start, category) depends only
on its own draws, so the steps' pairs are independent and identically distributed; the schedule
puts them in order of `at` (ties in draw order). A category can depend on the start (a long
pause needs the trial left after it), so the steps in running order are not i.i.d. by category
alone: the per-trial rate is a finite sum over sequences of (start, category) pairs, each
ordered as the schedule runs them (`trigger_rate`);
`schedule_triggers` says whether one drawn schedule does, for the Monte-Carlo check.

The rate is of the schedule: the fault needs it. Whether the load then puts a state in its way
(a round crossing to the replica after it took hold) is the run's; the rate bounds the find.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.config.chaos import CHAOS_ACTIONS, ChaosStep
from harness.config.fields import model_facts
from harness.hunt.draw import LATEST, Space
from harness.hunt.model import Schedule
from harness.shop.planted import LONG_PAUSE, PARTNER_PAUSE

Category = str
"""`A`, `B` or `-` (neither)."""


@dataclass(frozen=True)
class Cell:
    """One kind of step: an action on a replica (pause: for at least `pause` seconds)."""

    action: str
    replica: int
    pause: float = 0.0

    def holds(self, step: ChaosStep) -> bool:
        """Whether a drawn step is one (a pause of every replica, or of a subset holding this one, counts on it)."""
        if step.action != self.action or not self.on(getattr(step, "replica", None) or getattr(step, "replicas", None)):
            return False
        return self.pause <= 0 or float(getattr(step, "duration", 0.0)) >= self.pause - 1e-9

    def on(self, named: object) -> bool:
        """Whether a step naming `named` (a replica, a subset of them, or None: every one) acts on this cell's."""
        if named is None:
            return True
        return self.replica in named if isinstance(named, tuple | list) else named == self.replica


@dataclass(frozen=True)
class Trigger:
    """A planted fault's schedule: its cells and the rule on the categories of the steps in running order."""

    fault: str
    a: Cell
    b: Cell | None
    rule: Callable[[Sequence[Category]], bool]


def _any_a(seq: Sequence[Category]) -> bool:
    return "A" in seq


def _two_a(seq: Sequence[Category]) -> bool:
    return seq.count("A") >= 2


def _a_then_b(seq: Sequence[Category]) -> bool:
    return "A" in seq and "B" in seq[seq.index("A") + 1:]


def _a_and_b(seq: Sequence[Category]) -> bool:
    return "A" in seq and "B" in seq


TRIGGERS: dict[str, Trigger] = {
    "pause-amnesia-r1": Trigger("pause-amnesia-r1", Cell("pause", 1, LONG_PAUSE + 0.1), None, _any_a),
    "kill-twice-r3": Trigger("kill-twice-r3", Cell("kill", 3), None, _two_a),
    "restart-then-kill-r2": Trigger("restart-then-kill-r2", Cell("restart", 2), Cell("kill", 2), _a_then_b),
    "kill-r1-with-pause-r2": Trigger("kill-r1-with-pause-r2", Cell("kill", 1), Cell("pause", 2, PARTNER_PAUSE + 0.1),
                                     _a_and_b),
    "pause-then-kill-r2": Trigger("pause-then-kill-r2", Cell("pause", 2, PARTNER_PAUSE + 0.1), Cell("kill", 2),
                                  _a_then_b),
}
"""Each planted fault's schedule, by fault name. The cells' pauses are the drawn tenths the replica's gap needs.
`pause-then-kill-r2` also needs its kill to come after the pause has ended (a process killed while paused never
notices its gap), which the rule on categories cannot say: its rate is an upper bound, so random's median drawn from
it is a lower bound, which only makes the comparison harder for any other strategy."""


def _tenth_starts(space: Space) -> list[tuple[float, float]]:
    """The starts `at` takes (tenths) with their probabilities: round(uniform(0, 80% of the trial), 1)."""
    span = space.duration * LATEST
    starts = []
    for k in range(int(math.floor(span * 10 + 0.5)) + 1):
        low, high = max(k / 10 - 0.05, 0.0), min(k / 10 + 0.05, span)
        if high > low:
            starts.append((k / 10, (high - low) / span))
    return starts


def _value_share(seconds: float) -> float:
    """P(a pause's drawn value, before the cut, is at least `seconds` once rounded to tenths): log-uniform from a
    quarter to twice its default."""
    default = float(dict(model_facts(CHAOS_ACTIONS["pause"]))["duration"].default)
    low, high = default / 4, default * 2
    edge = seconds - 0.05  # round(x, 1) >= seconds exactly when x >= seconds - 0.05 (ties have measure zero)
    return min(max((math.log(high) - math.log(max(edge, low))) / (math.log(high) - math.log(low)), 0.0), 1.0)


def _time_left(space: Space, at: float, seconds: float) -> bool:
    """Whether a pause starting at `at` can last `seconds`: it is cut at what is left of the trial."""
    return round(max(space.duration - at, 0.1), 1) >= seconds - 1e-9


def _chance_at(space: Space, cell: Cell | None, at: float) -> float:
    """P(one drawn step is in `cell`, given its start `at`): a pause that must last `cell.pause` needs that much of the
    trial left after it, then its drawn value long enough."""
    if cell is None or cell.action not in space.actions:
        return 0.0
    choices = space.replica_choices(cell.action)
    chance = sum(1 for choice in choices if cell.on(choice)) / len(choices) / len(space.actions)
    if cell.pause <= 0:
        return chance
    return chance * _value_share(cell.pause) if _time_left(space, at, cell.pause) else 0.0


def trigger_rate(space: Space, trigger: Trigger) -> float:
    """The exact per-trial probability that the drawer's schedule triggers the fault: a sum over every sequence of
    (start, category) per step, each step's steps independent as drawn, put in running order as the drawer does (by
    `at`, ties in draw order), so a category that depends on the start (a long pause needs the trial left after it)
    is ordered as it runs."""
    per_step: list[tuple[float, Category, float]] = []
    for at, chance in _tenth_starts(space):
        a, b = chance * _chance_at(space, trigger.a, at), chance * _chance_at(space, trigger.b, at)
        per_step += [(at, "A", a), (at, "B", b), (at, "-", chance - a - b)]
    per_step = [step for step in per_step if step[2] > 0]
    rate = 0.0
    for count in range(1, space.max_steps + 1):
        for steps in itertools.product(per_step, repeat=count):
            if trigger.rule([category for _, category, _ in sorted(steps, key=lambda step: step[0])]):
                rate += math.prod(chance for _, _, chance in steps) / space.max_steps
    return rate


def schedule_triggers(schedule: Schedule, trigger: Trigger) -> bool:
    """Whether one drawn schedule (steps in running order) triggers the fault."""
    seq = ["A" if trigger.a.holds(step) else "B" if trigger.b and trigger.b.holds(step) else "-"
           for step in schedule.steps]
    return trigger.rule(seq)
