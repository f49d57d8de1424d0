"""`random`: every trial's schedule drawn independently, each step from every allowed action (the hunt's first draw).

Trial i of the search gets `harness.hunt.draw.draw_schedule(space, seed, i)`: 1 to `max_steps` steps, each an
allowed action, replica, start and parameters drawn uniformly, from trial i's own stream of the seed. This is
Jepsen's random nemesis: no trial learns from another, and `hunt --seed S` draws the same schedules as every
earlier hunt with that seed did.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.hunt.draw import draw_schedule
from harness.hunt.model import Schedule
from harness.hunt.strategy import Strategy, Tried, searched


class RandomDraw(Strategy):
    """Each trial drawn independently from the whole space."""

    name = "random"

    def next(self, history: Sequence[Tried]) -> Schedule:
        return draw_schedule(self.space, self.seed, searched(history) + 1)
