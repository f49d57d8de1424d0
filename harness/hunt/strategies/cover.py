"""`cover`: a seeded walk over the coverage cells, each step in a cell tried least so far.

The random draw reaches a rare cell (an action on one replica late in the trial) only by luck:
with a dozen actions, three replicas and three thirds of the trial, some cells come up once in
a hundred trials. This walk counts the cells the search's schedules have drawn so far (judged or
not, so a cell whose trials are never judged does not hold the walk), and puts each step of the
next schedule in one of the cells drawn least, picked from its own stream of the seed: every
cell is drawn once before any is drawn twice. A schedule has 1 to `max_steps` steps, as the
random draw's, each in a distinct cell; within its cell a step's start and parameters are drawn
as the random draw draws them (`draw_step`, narrowed to the cell's action and replica).

The cells are the hunt's coverage cells (`harness.hunt.coverage`: an action with the parameters that
choose what it does, whom it acts on, the third of the trial), read in the section at the end of this
module alone.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from harness.config.chaos import CHAOS_ACTIONS, ChaosStep
from harness.hunt import coverage
from harness.hunt.draw import Space, draw_step
from harness.hunt.model import Schedule
from harness.hunt.strategy import Strategy, Tried, searched
from harness.load.seeding import stream

TRIES = 1000
"""Steps drawn within a cell's action and replica until one falls in the cell (its timing third); a cell of
one in 18 draws misses it in all of them about once in 10^25."""


class Cover(Strategy):
    """Each step in a coverage cell drawn least so far: every cell once before any twice."""

    name = "cover"

    def next(self, history: Sequence[Tried]) -> Schedule:
        index = searched(history) + 1
        rng = stream(self.seed, "hunt", "cover", index)
        drawn = self.drawn(history)
        steps = []
        for _ in range(rng.randint(1, self.space.max_steps)):
            fewest = min(drawn.values())
            cell = rng.choice([cell for cell, count in drawn.items() if count == fewest])
            step = _step_in(cell, self.space, self.labels, rng)
            drawn[_cell_of(step, self.space, self.labels)] += 1  # the next step goes elsewhere
            steps.append(step)
        return Schedule(steps=tuple(sorted(steps, key=lambda step: step.at)), duration=self.space.duration)

    def drawn(self, history: Sequence[Tried]) -> Counter[Cell]:
        """How often the search trials so far drew each cell (every cell the space has, 0 for one never drawn)."""
        drawn: Counter[Cell] = Counter(dict.fromkeys(_cells(self.space, self.labels), 0))
        for tried in history:
            if tried.trial.purpose == "search":
                drawn.update(_cells_drawn(tried.trial.schedule, self.labels))
        return drawn


# --- the coverage this walk reads: its one use of the coverage's definition ---------------------------------------

Cell = coverage.Cell


def _cells(space: Space, labels: list[str]) -> list[Cell]:
    return coverage.cells(space, labels)


def _cells_drawn(schedule: Schedule, labels: list[str]) -> list[Cell]:
    return [coverage.step_cell(step, labels, schedule.duration) for step in schedule.steps]


def _cell_of(step: ChaosStep, space: Space, labels: list[str]) -> Cell:
    return coverage.step_cell(step, labels, space.duration)


def _step_in(cell: Cell, space: Space, labels: list[str], rng: random.Random) -> ChaosStep:
    """A step drawn in the cell: from the cell's action and, when it names one replica or several, among those, until
    its start falls in the cell's third (at most `TRIES` draws; the last is kept if none does)."""
    action, whom = cell[0].split()[0], cell[1]  # the variant starts with its action's name
    named = {member for replica in space.replica_choices(action) if replica is not None
             and CHAOS_ACTIONS[action].whom(replica, labels) == whom
             for member in (replica if isinstance(replica, tuple) else (replica,))}
    narrowed = replace(space, actions=(action,), replicas=tuple(sorted(named)) if named else space.replicas)
    step = draw_step(narrowed, rng)
    for _ in range(TRIES - 1):
        if _cell_of(step, space, labels) == cell:
            break
        step = draw_step(narrowed, rng)
    return step
