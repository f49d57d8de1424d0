"""`[load]`: how flows arrive (open or closed model), and where each round lands."""

from __future__ import annotations

import enum
from typing import Literal

from pydantic import Field, model_validator

from harness.config.base import FieldProblem, Strict
from harness.config.durations import Duration, PositiveDuration


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


class Load(Strict):
    """How flows arrive: an open model (arrivals per second) or a closed one (agents working in turn)."""

    model: Literal["open", "closed"] = Field(
        default="open", description="open: flows arrive at `arrival_rate` whatever is in flight; closed: `users` "
                                    "agents each work one flow after another")
    arrival_rate: float | None = Field(default=None, gt=0, allow_inf_nan=False,
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
    max_in_flight: int = Field(default=100_000, ge=1, description="open model: at this many flows in flight, new "
                                                                  "starts wait (and count as late)")

    @model_validator(mode="after")
    def _rate_or_users(self) -> Load:
        if self.model == "open" and self.arrival_rate is None:
            raise FieldProblem("an open model needs arrival_rate (flows per second)", "model")
        if self.model == "closed" and self.users is None:
            raise FieldProblem("a closed model needs users (how many agents work flows one after another)", "model")
        return self


