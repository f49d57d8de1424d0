"""How long a simulated lead thinks before answering: distributions in modelled seconds.

A scenario writes `think = { dist = "lognormal", median = "2m", p95 = "12m" }`. People
describe waiting times by a typical value and a bad-day value, not by mu and sigma, so
the lognormal is given by its median and p95 and the parameters are derived here.

Each distribution can also answer questions about itself (`cdf`, `quantile`, `mean`)
without sampling: capacity planning predicts the share of states that expire under a
TTL as `survival(ttl)` = P(T > ttl), before any load is run.

Everything here is modelled time. The caller sleeps `to_real(seconds, time_scale)`.
"""

from __future__ import annotations

import math
from collections.abc import MutableSequence, Sequence
from statistics import NormalDist
from typing import Annotated, Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationInfo, field_validator

from harness.config.durations import Duration, format_duration

T = TypeVar("T")


class RandomStream(Protocol):
    """What think times, flows, leads and the fuzzer draw from: a `random.Random` or a lead's `FlowStream`
    (`harness.load.seeding`): one protocol for every seeded draw."""

    def random(self) -> float: ...
    def getrandbits(self, k: int, /) -> int: ...
    def choice(self, seq: Sequence[T]) -> T: ...
    def choices(self, population: Sequence[T], weights: Sequence[float] | None = None, *,
                cum_weights: Sequence[float] | None = None, k: int = 1) -> list[T]: ...
    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int: ...
    def randint(self, a: int, b: int) -> int: ...
    def uniform(self, a: float, b: float) -> float: ...
    def expovariate(self, lambd: float) -> float: ...
    def lognormvariate(self, mu: float, sigma: float) -> float: ...
    def gauss(self, mu: float = 0.0, sigma: float = 1.0) -> float: ...
    def randbytes(self, n: int) -> bytes: ...
    def shuffle(self, x: MutableSequence[Any]) -> None: ...
    def sample(self, population: Sequence[T], k: int, *, counts: Sequence[int] | None = None) -> list[T]: ...


Z_95 = 1.6448536269514722
"""The standard normal's 95th percentile: ln(p95) = mu + Z_95 * sigma for a lognormal."""


def _check_probability(p: float) -> None:
    """Reject p outside [0, 1] loudly: a silent clamp would hide a caller's unit mix-up."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"a probability must be in [0, 1], got {p!r}")


class _Think(BaseModel):
    """Shared behaviour of every think-time distribution.

    Frozen, so one profile can be shared by thousands of leads without copies; extra keys
    are forbidden, so a typo such as `p59` in a scenario file is an error, not a default.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    def sample(self, rng: RandomStream) -> float:
        """Draw one think time in modelled seconds (>= 0) from the caller's stream."""
        raise NotImplementedError

    def cdf(self, x: float) -> float:
        """P(T <= x), for predicting how many leads answer within x modelled seconds."""
        raise NotImplementedError

    def quantile(self, p: float) -> float:
        """The smallest x with P(T <= x) >= p; `inf` for p = 1 on unbounded distributions."""
        raise NotImplementedError

    def mean(self) -> float:
        """Expected think time, for Little's-law estimates of how many flows wait at once."""
        raise NotImplementedError

    def survival(self, x: float) -> float:
        """P(T > x): with x = TTL, the share of answers that arrive after their state expired."""
        return 1.0 - self.cdf(x)


class ConstantThink(_Think):
    """Every lead takes exactly `value`: for reproducing a failure at a precise time."""

    dist: Literal["constant"] = "constant"
    value: Duration = Field(description="every lead's time (0: instant answers)")

    def sample(self, rng: RandomStream) -> float:
        return self.value

    def cdf(self, x: float) -> float:
        return 1.0 if x >= self.value else 0.0

    def quantile(self, p: float) -> float:
        _check_probability(p)
        return self.value

    def mean(self) -> float:
        return self.value

    def __str__(self) -> str:
        return f"constant({format_duration(self.value)})"


class UniformThink(_Think):
    """Any time between `low` and `high` equally likely: a bounded, easy-to-reason spread."""

    dist: Literal["uniform"] = "uniform"
    low: Duration = Field(description="the shortest time")
    high: Duration = Field(description="the longest time, not below low")

    @field_validator("high")
    @classmethod
    def _high_not_below_low(cls, high: float, info: ValidationInfo) -> float:
        low = info.data.get("low")
        if low is not None and high < low:
            raise ValueError(f"high ({format_duration(high)}) must not be below low ({format_duration(low)})")
        return high

    def sample(self, rng: RandomStream) -> float:
        return rng.uniform(self.low, self.high)

    def cdf(self, x: float) -> float:
        if x < self.low:
            return 0.0
        if x >= self.high:
            return 1.0
        return (x - self.low) / (self.high - self.low)

    def quantile(self, p: float) -> float:
        _check_probability(p)
        return self.low + p * (self.high - self.low)

    def mean(self) -> float:
        return (self.low + self.high) / 2.0

    def __str__(self) -> str:
        return f"uniform({format_duration(self.low)}..{format_duration(self.high)})"


class ExponentialThink(_Think):
    """Memoryless waiting with the given `mean`: the textbook model, with a long light tail."""

    dist: Literal["exponential"] = "exponential"
    mean_: Duration = Field(alias="mean", gt=0, description="the mean time")

    # `mean` is also the method every distribution has, so the field is stored as `mean_`
    # and read and written as "mean", the name a scenario file uses.
    model_config = ConfigDict(
        frozen=True, extra="forbid", validate_by_name=True, validate_by_alias=True, serialize_by_alias=True
    )

    def sample(self, rng: RandomStream) -> float:
        return rng.expovariate(1.0 / self.mean_)

    def cdf(self, x: float) -> float:
        if x <= 0:
            return 0.0
        return -math.expm1(-x / self.mean_)

    def quantile(self, p: float) -> float:
        _check_probability(p)
        if p == 1.0:
            return math.inf
        return -self.mean_ * math.log1p(-p)

    def mean(self) -> float:
        return self.mean_

    def __str__(self) -> str:
        return f"exponential(mean={format_duration(self.mean_)})"


class LognormalThink(_Think):
    """Right-skewed human response times, given as `median` and `p95` (the bad-day answer).

    mu = ln(median) and sigma = (ln(p95) - mu) / Z_95, so the distribution hits both
    numbers exactly; that is how leads' response times are usually reported.
    """

    dist: Literal["lognormal"] = "lognormal"
    median: Duration = Field(gt=0, description="half the leads answer sooner")
    p95: Duration = Field(description="95 % answer sooner; above the median")

    @field_validator("p95")
    @classmethod
    def _p95_above_median(cls, p95: float, info: ValidationInfo) -> float:
        median = info.data.get("median")
        if median is not None and p95 <= median:
            raise ValueError(
                f"p95 ({format_duration(p95)}) must be greater than median ({format_duration(median)}): "
                "a lognormal needs a spread; use dist = \"constant\" for a fixed time"
            )
        return p95

    @property
    def mu(self) -> float:
        """Mean of ln(T)."""
        return math.log(self.median)

    @property
    def sigma(self) -> float:
        """Standard deviation of ln(T), derived from the p95."""
        return (math.log(self.p95) - self.mu) / Z_95

    def _log_normal(self) -> NormalDist:
        return NormalDist(self.mu, self.sigma)

    def sample(self, rng: RandomStream) -> float:
        return rng.lognormvariate(self.mu, self.sigma)

    def cdf(self, x: float) -> float:
        if x <= 0:
            return 0.0
        return self._log_normal().cdf(math.log(x))

    def quantile(self, p: float) -> float:
        _check_probability(p)
        if p == 0.0:
            return 0.0
        if p == 1.0:
            return math.inf
        return math.exp(self._log_normal().inv_cdf(p))

    def mean(self) -> float:
        return math.exp(self.mu + self.sigma**2 / 2.0)

    def __str__(self) -> str:
        return f"lognormal(median={format_duration(self.median)}, p95={format_duration(self.p95)})"


ThinkTime = Annotated[
    ConstantThink | UniformThink | ExponentialThink | LognormalThink,
    Field(discriminator="dist"),
]
"""Any think-time distribution, chosen by its `dist` field (a pydantic field type)."""

_THINK_ADAPTER: TypeAdapter[ThinkTime] = TypeAdapter(ThinkTime)


def parse_think_time(obj: Any) -> ThinkTime:
    """Validate a dict such as `{"dist": "lognormal", "median": "2m", "p95": "12m"}`.

    For callers that hold one think time outside a scenario model (CLI flags, tests).
    Raises pydantic.ValidationError naming the offending field.
    """
    if isinstance(obj, _Think):
        return obj  # type: ignore[return-value]
    return _THINK_ADAPTER.validate_python(obj)


TimeScale = Annotated[float, Field(ge=1)]
"""A pydantic field type for `time_scale`: 60 runs a modelled minute in one real second."""


def to_real(modelled: float, time_scale: float) -> float:
    """Real seconds to sleep for `modelled` seconds: a 10-minute TTL test must not take 10 minutes."""
    _check_time_scale(time_scale)
    return modelled / time_scale


def to_modelled(real: float, time_scale: float) -> float:
    """Modelled seconds for `real` elapsed seconds, so reports speak the scenario's time."""
    _check_time_scale(time_scale)
    return real * time_scale


def _check_time_scale(time_scale: float) -> None:
    """A scale below 1 would slow the run down, which is never what a load test wants."""
    if not time_scale >= 1:
        raise ValueError(f"time_scale must be >= 1, got {time_scale!r}")
