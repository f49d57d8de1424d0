"""`[load]`: how flows arrive (open or closed model), and where each round lands."""

from __future__ import annotations

import enum
from typing import Literal

from pydantic import Field, model_validator

from harness.config.durations import Duration, PositiveDuration
from harness.config.strict import FieldProblem, Strict


class Routing(enum.StrEnum):
    """How the replica of each round is chosen."""

    ROUND_ROBIN = "round-robin"
    """Every round takes the next replica, across all calls in the process."""
    RANDOM = "random"
    """Every round picks a replica with the router's seeded generator."""
    OTHER_REPLICA = "other-replica"
    """A retry always lands on a different replica than the round before (the harshest case)."""
    SAME_REPLICA = "same-replica"
    """All rounds of a call on the replica of round 1 (what keep-alive or stickiness does)."""


MAX_RATE = 1_000_000.0
"""The highest arrival rate a scenario may ask (flows per second): beyond, it is a typo, not a test."""


class Stage(Strict):
    """One stage of the load (k6's `stages`): where the load goes, and how, over `duration`."""

    duration: PositiveDuration = Field(description="how long the stage lasts, real")
    target: float | None = Field(default=None, ge=0, le=MAX_RATE, allow_inf_nan=False,
                                 description="the level the stage reaches: flows per second (open model) or agents "
                                             "(closed model); not with shape = \"hold\"")
    shape: Literal["linear", "step", "hold"] = Field(
        default="linear", description="linear: from the previous level to `target` over the stage (k6's semantics); "
                                      "step: `target` from the stage's start; hold: the previous level stays")

    @model_validator(mode="after")
    def _target_fits_shape(self) -> Stage:
        if self.shape == "hold" and self.target is not None:
            raise FieldProblem("a hold stage keeps the previous level: leave out target", "target")
        if self.shape != "hold" and self.target is None:
            raise FieldProblem(f"a {self.shape} stage needs target (flows per second, or agents)", "shape")
        return self


class Load(Strict):
    """How flows arrive: an open model (arrivals per second) or a closed one (agents working in turn)."""

    model: Literal["open", "closed"] = Field(
        default="open", description="open: flows arrive at `arrival_rate` whatever is in flight; closed: `users` "
                                    "agents each work one flow after another")
    arrival_rate: float | None = Field(default=None, gt=0, le=MAX_RATE, allow_inf_nan=False,
                                       description="flows per second, open model (Poisson arrivals; each may "
                                                   "start up to 50 ms early, on a wake-up the process has anyway)")
    users: int | None = Field(default=None, ge=1, description="support agents, closed model")
    ramp: Duration = Field(default=0.0, description="time to reach the full arrival rate (from a tenth "
                                                     "of it) or all users (0: at once)")
    routing: Routing = Field(
        default=Routing.ROUND_ROBIN, description="where each round lands: round-robin and random spread them; "
                                                "other-replica sends every retry to another replica; same-replica "
                                                "keeps a call on one (what stickiness does)")
    timeout: PositiveDuration = Field(default=30.0, description="the client's limit for one POST round, real")
    retry_lost_answers: int = Field(default=0, ge=0, le=10, description="how many times a flow resends a round "
                                                                       "whose answer was lost (`answer_lost`) "
                                                                       "with the same state and answers, as a "
                                                                       "host that retries does (0: never)")
    max_in_flight: int = Field(default=100_000, ge=1, description="open model: at this many flows in flight, new "
                                                                  "starts wait (and count as late)")
    stages: list[Stage] = Field(
        default_factory=list, description="the load over time, stage after stage (k6's `stages`, Locust's load "
                                          "shapes): it starts at `arrival_rate` or `users` (0 when not given) and "
                                          "holds the last stage's level to the end of `duration`")

    @model_validator(mode="after")
    def _rate_or_users(self) -> Load:
        if self.model == "open" and self.arrival_rate is None and not self.stages:
            raise FieldProblem("an open model needs arrival_rate (flows per second) or stages", "model")
        if self.model == "closed" and self.users is None and not self.stages:
            raise FieldProblem("a closed model needs users (how many agents work flows one after another) or "
                               "stages", "model")
        if self.stages and self.ramp:
            raise FieldProblem("ramp and stages do not go together: make the ramp the first stage", "ramp")
        if self.stages and self.peak() <= 0:
            raise FieldProblem("every stage's target is 0: the load would never start a flow", "stages")
        return self

    def start_level(self) -> float:
        """Where the load starts: the rate or the agents given, else 0 (k6's start at 0)."""
        return float((self.arrival_rate if self.model == "open" else self.users) or 0)

    def peak(self) -> float:
        """The highest level the load reaches (the rate arrivals are drawn at before thinning)."""
        return max([self.start_level(), *(stage.target for stage in self.stages if stage.target is not None)])

    def level_at(self, elapsed: float) -> float:
        """The intended level `elapsed` seconds into the load: flows per second, or agents.

        Without stages: the full level, after a linear `ramp` from a tenth of it. With
        stages: each moves from the previous level as its shape says; after the last, its
        level holds.
        """
        if not self.stages:
            full = self.start_level()
            if self.ramp <= 0 or elapsed >= self.ramp:
                return full
            return max(full * 0.1, full * elapsed / self.ramp)
        level, begins = self.start_level(), 0.0
        for stage in self.stages:
            ends = begins + stage.duration
            target = level if stage.target is None else stage.target
            if elapsed < ends:
                if stage.shape == "linear":
                    return level + (target - level) * max(0.0, elapsed - begins) / stage.duration
                return target if stage.shape == "step" else level
            level, begins = target, ends
        return level

    def stage_bounds(self) -> list[tuple[float, float, float]]:
        """Each stage as (start, end, target level), seconds into the load: what the reports mark."""
        bounds, level, begins = [], self.start_level(), 0.0
        for stage in self.stages:
            level = level if stage.target is None else stage.target
            bounds.append((begins, begins + stage.duration, level))
            begins += stage.duration
        return bounds


