"""Judging a run's figures against its thresholds (parsed by `harness.config.thresholds`).

Counts, ratios, a distribution's count, mean, min and max are exact. A percentile comes
from a sketch whose estimate lies within 1% of the exact nearest-rank value; the condition
passes only when it holds for every value in that band (docs/figures.md), so a pass is
never false, and a percentile within the band of its threshold fails.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Protocol

from harness.config.thresholds import DISTRIBUTIONS, RATIOS, SLOPES, Condition, Threshold
from harness.folding.health import Slope
from harness.journal.distributions import Distribution

_OPERATORS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
              "!=": operator.ne}


class Figures(Protocol):
    """What thresholds are evaluated against: the run's numbers, derived from its journal."""

    duration: float

    def count(self, metric: str, selector: dict[str, str]) -> float: ...

    def ratio(self, metric: str, selector: dict[str, str]) -> float | None: ...

    def distribution(self, metric: str, selector: dict[str, str]) -> Distribution: ...

    def slopes(self, metric: str, selector: dict[str, str]) -> list[Slope]: ...


@dataclass(frozen=True)
class ThresholdResult:
    threshold: Threshold
    condition: Condition
    observed: float | None
    passed: bool

    def as_dict(self) -> dict[str, object]:
        return {"threshold": self.threshold.key, "condition": str(self.condition), "observed": self.observed,
                "passed": self.passed}


def evaluate(thresholds: list[Threshold], figures: Figures) -> list[ThresholdResult]:
    verdicts = []
    for threshold in thresholds:
        for condition in threshold.conditions:
            observed = observe(threshold, figures, condition)
            passed = observed is not None and _holds(threshold, figures, condition, observed)
            verdicts.append(ThresholdResult(threshold, condition, observed, passed))
    return verdicts


def observe(threshold: Threshold, figures: Figures, condition: Condition) -> float | None:
    """The observed value for one condition; None when there is nothing to observe (e.g. no samples)."""
    selector = dict(threshold.selector)
    if threshold.metric in SLOPES:
        fitted = figures.slopes(threshold.metric, selector)
        return max(slope.per_minute for slope in fitted) if fitted else None
    if threshold.metric in DISTRIBUTIONS:
        return _aggregate(figures.distribution(threshold.metric, selector), condition.aggregate)
    if threshold.metric in RATIOS:
        return figures.ratio(threshold.metric, selector)
    total = figures.count(threshold.metric, selector)
    return total / figures.duration if condition.aggregate == "rate" and figures.duration else total


def _holds(threshold: Threshold, figures: Figures, condition: Condition, observed: float) -> bool:
    """The condition on the observed value; for a percentile, on every value of the band the exact one lies in."""
    compare, pct = _OPERATORS[condition.op], _percentile_of(condition.aggregate)
    if threshold.metric in SLOPES:  # fails only when the whole interval lies beyond: a lower bound above "< N"
        bound = "low" if condition.op in ("<", "<=") else "high"
        return all(compare(getattr(slope, bound), condition.value)
                   for slope in figures.slopes(threshold.metric, dict(threshold.selector)))
    if threshold.metric not in DISTRIBUTIONS or pct is None:
        return bool(compare(observed, condition.value))
    band = figures.distribution(threshold.metric, dict(threshold.selector)).band(pct)
    if band is None:
        return False
    low, high = band
    if condition.op in ("<", "<="):
        return bool(compare(high, condition.value))
    if condition.op in (">", ">="):
        return bool(compare(low, condition.value))
    if condition.op == "==":
        return low == high == condition.value
    return not low <= condition.value <= high


def _percentile_of(aggregate: str) -> float | None:
    """p(95) -> 95.0, med -> 50.0; None for count, avg, min, max (exact aggregates)."""
    if aggregate == "med":
        return 50.0
    if aggregate.startswith("p("):
        return float(aggregate[2:-1])
    return None


def _aggregate(values: Distribution, aggregate: str) -> float | None:
    if aggregate == "count":
        return float(values.count)
    if not values.count:
        return None
    if aggregate == "avg":
        return values.total / values.count
    if aggregate == "min":
        return values.minimum
    if aggregate == "max":
        return values.maximum
    pct = _percentile_of(aggregate)
    return values.percentile(pct) if pct is not None else None
