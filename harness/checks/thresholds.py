"""Judging a run's figures against its thresholds (parsed by `harness.config.thresholds`)."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Protocol

from harness.config.thresholds import DISTRIBUTIONS, RATIOS, Condition, Threshold

_OPERATORS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
              "!=": operator.ne}


class Figures(Protocol):
    """What thresholds are evaluated against: the run's numbers, derived from its journal."""

    duration: float

    def count(self, metric: str, selector: dict[str, str]) -> float: ...

    def ratio(self, metric: str, selector: dict[str, str]) -> float | None: ...

    def distribution(self, metric: str, selector: dict[str, str]) -> list[float]: ...


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
            passed = observed is not None and _OPERATORS[condition.op](observed, condition.value)
            verdicts.append(ThresholdResult(threshold, condition, observed, passed))
    return verdicts


def observe(threshold: Threshold, figures: Figures, condition: Condition) -> float | None:
    """The observed value for one condition; None when there is nothing to observe (e.g. no samples)."""
    selector = dict(threshold.selector)
    if threshold.metric in DISTRIBUTIONS:
        return _aggregate(figures.distribution(threshold.metric, selector), condition.aggregate)
    if threshold.metric in RATIOS:
        return figures.ratio(threshold.metric, selector)
    total = figures.count(threshold.metric, selector)
    return total / figures.duration if condition.aggregate == "rate" and figures.duration else total




def _aggregate(values: list[float], aggregate: str) -> float | None:
    if aggregate == "count":
        return float(len(values))
    if not values:
        return None
    ordered = sorted(values)
    if aggregate == "avg":
        return sum(ordered) / len(ordered)
    if aggregate == "min":
        return ordered[0]
    if aggregate == "max":
        return ordered[-1]
    percentile = 50.0 if aggregate == "med" else float(aggregate[2:-1])
    return _percentile(ordered, percentile)


def _percentile(ordered: list[float], percentile: float) -> float:
    """Nearest-rank percentile: the value at or below which `percentile`% of the samples fall."""
    rank = max(1, min(len(ordered), round(percentile / 100 * len(ordered) + 0.4999)))
    return ordered[rank - 1]
