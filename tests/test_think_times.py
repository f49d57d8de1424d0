"""Think-time distributions: samples match the theory, and cdf/quantile agree with each other."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from pydantic import BaseModel, ValidationError

from harness.config.think import (
    ConstantThink,
    ExponentialThink,
    LognormalThink,
    ThinkTime,
    TimeScale,
    UniformThink,
    parse_think_time,
    to_modelled,
    to_real,
)

SAMPLES = 20_000
TOLERANCE = 0.05


def _samples(think: ThinkTime, seed: int = 20260728) -> list[float]:
    rng = random.Random(seed)
    return [think.sample(rng) for _ in range(SAMPLES)]


def _p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]


CONTINUOUS = [
    parse_think_time({"dist": "uniform", "low": "30s", "high": "5m"}),
    parse_think_time({"dist": "exponential", "mean": "2m"}),
    parse_think_time({"dist": "lognormal", "median": "2m", "p95": "12m"}),
]


@pytest.mark.parametrize("think", CONTINUOUS, ids=str)
def test_sample_median_mean_and_p95_match_theory(think: ThinkTime) -> None:
    values = _samples(think)
    assert min(values) >= 0
    assert statistics.median(values) == pytest.approx(think.quantile(0.5), rel=TOLERANCE)
    assert statistics.fmean(values) == pytest.approx(think.mean(), rel=TOLERANCE)
    assert _p95(values) == pytest.approx(think.quantile(0.95), rel=TOLERANCE)


@pytest.mark.parametrize("think", CONTINUOUS, ids=str)
@pytest.mark.parametrize("p", [0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99])
def test_cdf_inverts_quantile(think: ThinkTime, p: float) -> None:
    assert think.cdf(think.quantile(p)) == pytest.approx(p, abs=1e-9)


@pytest.mark.parametrize("think", CONTINUOUS, ids=str)
def test_empirical_cdf_matches_cdf(think: ThinkTime) -> None:
    values = _samples(think, seed=5)
    for x in (think.quantile(0.2), think.mean(), think.quantile(0.9)):
        share = sum(v <= x for v in values) / len(values)
        assert share == pytest.approx(think.cdf(x), abs=0.01)


def test_lognormal_is_given_by_median_and_p95() -> None:
    think = LognormalThink(median="2m", p95="12m")
    assert think.mu == pytest.approx(math.log(120))
    assert think.sigma == pytest.approx((math.log(720) - math.log(120)) / 1.6448536269514722)
    assert think.quantile(0.5) == pytest.approx(120)
    assert think.quantile(0.95) == pytest.approx(720)
    values = _samples(think)
    assert _p95(values) == pytest.approx(720, rel=TOLERANCE)
    assert statistics.median(values) == pytest.approx(120, rel=TOLERANCE)


def test_survival_predicts_share_of_answers_after_the_ttl() -> None:
    think = LognormalThink(median="2m", p95="12m")
    assert think.survival(720) == pytest.approx(0.05)
    values = _samples(think)
    late = sum(v > 600 for v in values) / len(values)
    assert late == pytest.approx(think.survival(600), abs=0.01)


def test_constant_always_gives_its_value() -> None:
    think = parse_think_time({"dist": "constant", "value": "90s"})
    assert isinstance(think, ConstantThink)
    rng = random.Random(1)
    assert {think.sample(rng) for _ in range(100)} == {90.0}
    assert think.mean() == think.quantile(0.3) == 90.0
    assert think.cdf(89.9) == 0.0
    assert think.cdf(90.0) == 1.0


def test_unbounded_quantiles_at_the_ends() -> None:
    assert ExponentialThink(mean=60).quantile(1.0) == math.inf
    assert LognormalThink(median=60, p95=600).quantile(1.0) == math.inf
    assert LognormalThink(median=60, p95=600).quantile(0.0) == 0.0
    assert UniformThink(low=10, high=20).quantile(1.0) == 20
    with pytest.raises(ValueError, match="probability"):
        UniformThink(low=10, high=20).quantile(1.5)


def test_cdf_is_zero_at_and_below_zero() -> None:
    for think in CONTINUOUS:
        assert think.cdf(-1.0) == 0.0
    assert LognormalThink(median=60, p95=600).cdf(0.0) == 0.0


def test_durations_accept_text_and_numbers() -> None:
    think = parse_think_time({"dist": "uniform", "low": 30, "high": "1m30s"})
    assert (think.low, think.high) == (30.0, 90.0)


def test_exponential_reads_and_writes_mean() -> None:
    think = parse_think_time({"dist": "exponential", "mean": "1m"})
    assert think.mean() == 60.0
    assert think.model_dump() == {"dist": "exponential", "mean": 60.0}
    assert parse_think_time(think.model_dump()) == think


def _error_locations(error: ValidationError) -> list[tuple[str | int, ...]]:
    return [e["loc"] for e in error.errors()]


def test_lognormal_rejects_p95_not_above_median() -> None:
    with pytest.raises(ValidationError, match="p95 .* must be greater than median") as caught:
        parse_think_time({"dist": "lognormal", "median": "2m", "p95": "2m"})
    assert _error_locations(caught.value) == [("lognormal", "p95")]


def test_bad_duration_names_the_field() -> None:
    with pytest.raises(ValidationError, match="not a duration") as caught:
        parse_think_time({"dist": "lognormal", "median": "two minutes", "p95": "12m"})
    assert _error_locations(caught.value) == [("lognormal", "median")]


def test_uniform_rejects_high_below_low() -> None:
    with pytest.raises(ValidationError) as caught:
        parse_think_time({"dist": "uniform", "low": "5m", "high": "1m"})
    assert _error_locations(caught.value) == [("uniform", "high")]


def test_unknown_distribution_and_typo_fields_are_rejected() -> None:
    with pytest.raises(ValidationError, match="dist"):
        parse_think_time({"dist": "gamma", "mean": "1m"})
    with pytest.raises(ValidationError) as caught:
        parse_think_time({"dist": "lognormal", "median": "2m", "p59": "12m"})
    assert ("lognormal", "p59") in _error_locations(caught.value)


def test_exponential_and_lognormal_need_a_positive_scale() -> None:
    with pytest.raises(ValidationError) as caught:
        parse_think_time({"dist": "exponential", "mean": 0})
    assert _error_locations(caught.value) == [("exponential", "mean")]
    with pytest.raises(ValidationError) as caught:
        parse_think_time({"dist": "lognormal", "median": 0, "p95": 10})
    assert ("lognormal", "median") in _error_locations(caught.value)


def test_think_time_works_as_a_scenario_field() -> None:
    class Leads(BaseModel):
        think: ThinkTime
        time_scale: TimeScale = 1

    leads = Leads.model_validate({"think": {"dist": "lognormal", "median": "2m", "p95": "12m"}, "time_scale": 60})
    assert isinstance(leads.think, LognormalThink)
    with pytest.raises(ValidationError) as caught:
        Leads.model_validate({"think": {"dist": "constant", "value": 1}, "time_scale": 0.5})
    assert _error_locations(caught.value) == [("time_scale",)]


def test_time_scale_converts_modelled_to_real_seconds() -> None:
    assert to_real(120.0, 60) == 2.0
    assert to_real(90.0, 1) == 90.0
    assert to_modelled(2.0, 60) == 120.0
    with pytest.raises(ValueError, match="time_scale"):
        to_real(60.0, 0)
