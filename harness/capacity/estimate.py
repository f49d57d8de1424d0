"""How long a sweep takes: the most steps its plan can run, each its load plus the time to start, drain and report.

Printed before the first step, so a user knows whether to wait or come back; each step's
progress line then says what is left at the pace measured so far. A list of rates stops after
its first break and a search after its bisections, so most plans give a bound ("at most"),
not a count. The overheads are rough: a fixed allowance per step, not a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.capacity.search import most_steps
from harness.capacity.sweep_plan import CapacityPlan
from harness.config.durations import format_duration

STEP_OVERHEAD = 5.0
"""Seconds per step beyond its load and grace: start the target, fold the journal, write the step's reports."""

WORKER_OVERHEAD = 3.0
"""Seconds more per step with local workers: start their processes (side by side) and hand each its setup."""


@dataclass(frozen=True)
class Estimate:
    """A sweep's duration before it starts: `steps` steps (at most, unless `exact`) of `per_step` seconds each."""

    steps: int
    exact: bool
    load: float  # each step's load (`--step`)
    grace: float  # the most a step waits for its flows in flight after the load
    overhead: float  # start, fold and report, per step

    @property
    def per_step(self) -> float:
        return self.load + self.grace + self.overhead

    @property
    def seconds(self) -> float:
        return self.steps * self.per_step

    def line(self) -> str:
        """`estimated duration: at most 2m12s (at most 4 steps × (20s load + up to 8s grace + about 5s ...))`."""
        bound = "about" if self.exact else "at most"
        count = f"{'' if self.exact else 'at most '}{self.steps} step{'s' * (self.steps != 1)}"
        each = (f"{format_duration(self.load)} load + up to {format_duration(self.grace)} grace + about "
                f"{format_duration(self.overhead)} to start and report")
        return f"estimated duration: {bound} {format_duration(round(self.seconds))} ({count} × ({each}))"

    def left(self, done: int, spent: float) -> str:
        """What is left after `done` steps that took `spent` seconds: at their pace, for the steps still possible."""
        remaining = max(self.steps - done, 0)
        if not remaining or not done:
            return ""
        bound = "about" if self.exact else "at most"
        return f"{bound} {format_duration(round(remaining * spent / done))} left"


def estimate(plan: CapacityPlan, replica_counts: int, grace: float, *, local_workers: int = 0) -> Estimate:
    """The most steps `plan` runs over `replica_counts` counts, each lasting its load, `grace` and the overheads."""
    if plan.rates is not None:
        per_count, exact = len(plan.rates), len(plan.rates) == 1
    else:
        assert plan.search is not None, "a plan has rates or a search (see CapacityPlan.with_default_search)"
        per_count, exact = most_steps(plan.search), False
    overhead = STEP_OVERHEAD + (WORKER_OVERHEAD if local_workers else 0.0)
    return Estimate(per_count * replica_counts, exact, plan.step, grace, overhead)
