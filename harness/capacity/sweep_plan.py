"""What a capacity sweep runs: arrival rates (a list, or a search), replica counts, how long each step lasts.

The scenario file's models forbid unknown tables, so a plan comes from the command
line (`--rates 2,4,8` or `--search 2:64`, `--replicas 1,2`, `--step 20s`, ...) and is
validated here once, before anything starts.
"""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.config.durations import Duration
from harness.errors import UsageError

DEFAULT_SEARCH_SPAN = 16.0
"""With neither rates nor a search given: search from the scenario's rate up to this many times it."""


Refine = Annotated[int, Field(ge=0, le=10)]
"""Bisection steps after a search's first break."""


class PlanError(UsageError):
    """A plan that cannot run; says which option and why."""


class RateSearch(BaseModel):
    """Ramp from `start` by `factor` until a step breaks the SLO (or `max` is reached), then bisect `refine` times."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    start: float = Field(gt=0)
    max: float = Field(gt=0)
    factor: float = Field(default=2.0, gt=1.0)
    refine: Refine = 2

    @model_validator(mode="after")
    def _max_not_below_start(self) -> RateSearch:
        if self.max < self.start:
            raise ValueError(f"the search's max ({self.max:g}) is below its start ({self.start:g})")
        return self


class CapacityPlan(BaseModel):
    """The whole sweep: every replica count is tried at the rates (or by the search) given."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rates: list[float] | None = Field(default=None, description="flows/s, tried in rising order")
    search: RateSearch | None = None
    replicas: list[int] | None = Field(default=None, description="replica counts; None = the scenario's own")
    step: Duration = Field(default=20.0, gt=0, description="how long each step's load runs")
    warmup: Duration | None = Field(default=None, description="discarded from the start of each step; "
                                                              "default: the scenario's ramp or a quarter step")
    peak: float | None = Field(default=None, gt=0, description="the planned peak rate, for the headroom statement")
    headroom: float = Field(default=0.25, ge=0, description="margin above the peak a replica count must hold")
    expiry_target: float = Field(default=0.01, gt=0, lt=1, description="share of states allowed to expire")
    saturation_cpu: float = Field(default=0.8, gt=0, description="harness CPU, in cores, that flags a step")
    saturation_late: float = Field(default=0.1, gt=0, le=1, description="share of late flow starts that flags a step")
    from_previous: bool = Field(default=True, description="each replica count after the first starts at the "
                                                          "highest rate the previous count held")
    workers: int = Field(default=0, ge=0, description="local Locust workers each step's load is spread over "
                                                      "(0: the sweep's own process)")
    remote_workers: int = Field(default=0, ge=0, description="workers elsewhere each step's master waits for "
                                                             "(`--master --expect-workers N`)")
    refine: Refine | None = Field(default=None, exclude=True,
                                  description="the default search's bisection steps (None: RateSearch's default); "
                                              "shown in `search` once the default search is made")

    @field_validator("rates")
    @classmethod
    def _rates_positive(cls, rates: list[float] | None) -> list[float] | None:
        if rates is None:
            return None
        if not rates:
            raise ValueError("give at least one rate")
        if any(not math.isfinite(rate) or rate <= 0 for rate in rates):
            raise ValueError("every rate must be a positive number of flows per second")
        return sorted(set(rates))

    @field_validator("replicas")
    @classmethod
    def _replicas_positive(cls, replicas: list[int] | None) -> list[int] | None:
        if replicas is None:
            return None
        if not replicas or any(n < 1 or n > 32 for n in replicas):
            raise ValueError("replica counts must be between 1 and 32")
        return sorted(set(replicas))

    @model_validator(mode="after")
    def _one_way_to_pick_rates(self) -> CapacityPlan:
        if self.rates is not None and self.search is not None:
            raise ValueError("give either rates or a search, not both")
        if self.refine is not None and (self.rates is not None or self.search is not None):
            raise ValueError("refine is for the default search only: a search given carries its own")
        if self.warmup is not None and self.warmup >= self.step:
            raise ValueError(f"the warm-up ({self.warmup:g}s) must be shorter than the step ({self.step:g}s)")
        return self

    def warmup_for(self, ramp: float) -> float:
        """Seconds discarded at the start of a step: as given, else the ramp or a quarter step, whichever is longer."""
        if self.warmup is not None:
            return self.warmup
        return min(max(ramp, self.step / 4), self.step / 2)

    def with_default_search(self, scenario_rate: float) -> CapacityPlan:
        """Without rates or a search: search upward from the scenario's own arrival rate."""
        if self.rates is not None or self.search is not None:
            return self
        search = RateSearch(start=scenario_rate, max=scenario_rate * DEFAULT_SEARCH_SPAN,
                            **({"refine": self.refine} if self.refine is not None else {}))
        return self.model_copy(update={"search": search})


def parse_rates(text: str) -> list[float]:
    """`2,4,8` or `2 4 8`: flows per second."""
    parts = [part for part in re.split(r"[,\s]+", text.strip()) if part]
    try:
        return [float(part) for part in parts]
    except ValueError:
        raise PlanError(f"--rates: cannot read {text!r}; write e.g. 2,4,8 (flows per second)") from None


def parse_search(text: str) -> tuple[float, float, float | None]:
    """`START:MAX` or `START:MAX:FACTOR`, e.g. 2:64 (double from 2 flows/s until a break, up to 64)."""
    parts = text.split(":")
    try:
        numbers = [float(part) for part in parts]
    except ValueError:
        numbers = []
    if len(numbers) not in (2, 3):
        raise PlanError(f"--search: cannot read {text!r}; write START:MAX or START:MAX:FACTOR, e.g. 2:64")
    return numbers[0], numbers[1], numbers[2] if len(numbers) == 3 else None


def parse_replicas(text: str) -> list[int]:
    """`1,2,4` or a range `1-4`."""
    counts: list[int] = []
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            low, _, high = part.partition("-")
            counts.extend(range(int(low), int(high) + 1) if high else [int(low)])
    except ValueError:
        raise PlanError(f"--replicas: cannot read {text!r}; write e.g. 1,2 or 1-4") from None
    return counts
