"""`swarm`: each trial enables a random subset of the allowed actions and draws its steps from those alone.

Swarm testing (Groce et al., ISSTA 2012), as Hypothesis's feature flags and FoundationDB's per-run
BUGGIFY activation do it: a trial that draws from every action at once rarely lets one kind of
fault act alone or two of a kind pile up, and an action's mere presence can suppress a failure
(a restart that clears the state a network fault would have corrupted). Each trial leaves each
action in with even odds (none left: drawn again), from its own stream of the seed, and draws 1 to
`max_steps` steps from the actions left in, each as the random draw does (`draw_step`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from harness.hunt.draw import draw_step
from harness.hunt.model import Schedule
from harness.hunt.strategy import Strategy, Tried, searched
from harness.load.seeding import stream

KEPT = 0.5
"""The odds each action is enabled in a trial."""


class Swarm(Strategy):
    """Each trial from its own random subset of the allowed actions."""

    name = "swarm"

    def next(self, history: Sequence[Tried]) -> Schedule:
        index = searched(history) + 1
        space = replace(self.space, actions=self.enabled(index))
        rng = stream(self.seed, "hunt", "swarm", index, "steps")
        steps = [draw_step(space, rng) for _ in range(rng.randint(1, space.max_steps))]
        return Schedule(steps=tuple(sorted(steps, key=lambda step: step.at)), duration=space.duration)

    def enabled(self, index: int) -> tuple[str, ...]:
        """The actions search trial `index` may draw: each allowed one with even odds, never none."""
        rng = stream(self.seed, "hunt", "swarm", index, "actions")
        while True:
            kept = _subset(self.space.actions, rng)
            if kept:
                return kept


def _subset(actions: tuple[str, ...], rng: random.Random) -> tuple[str, ...]:
    return tuple(action for action in actions if rng.random() < KEPT)
