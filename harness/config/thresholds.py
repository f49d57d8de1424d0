"""Thresholds that read like k6's: a metric with an optional selector, then conditions.

    "round_duration{flow='refund'}" = "p(95) < 250ms"
    "rejections{reason='unknown key'}" = "> 0"
    completed_ratio = ">= 0.95"
    "rounds_per_call" = ["p(99) <= 2", "max <= 10"]

The key names a metric of the run's figures (see `METRICS`) and may select label values;
each condition is `[aggregate] operator value`. A count's default aggregate is its
count, a distribution's must be named (p(N), avg, min, max, med, count), and `rate` is
per second of the run. Values may carry a unit (250ms, 2s). Parsed once, at the edge,
so a typo fails the scenario before anything starts.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import Protocol

from harness.config.durations import parse_duration

COUNTS = {
    "flows_started": ("flow",),
    "flows_finished": ("flow", "outcome"),
    "rejections": ("reason", "replica"),
    "unexplained_rejections": (),
    "unmatched_logged_rejections": (),
    "invariant_violations": ("invariant",),
    "client_errors": ("flow", "code"),
    "late_starts": (),
    "chaos_failures": ("action",),
}
RATIOS = {
    "completed_ratio": ("flow",),
    "outcome_share": ("flow", "outcome"),
    "rejection_share": ("reason", "replica"),
    "crossed_replica_share": ("flow",),
}
DISTRIBUTIONS = {
    "round_duration": ("flow", "round"),
    "rounds_per_call": ("flow",),
    "flow_duration": ("flow",),
    "think_time": (),
}
METRICS = {**COUNTS, **RATIOS, **DISTRIBUTIONS}

_OPERATORS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
              "!=": operator.ne}
_KEY = re.compile(r"^\s*(?P<metric>[a-z_]+)\s*(?:\{(?P<selector>[^}]*)\})?\s*$")
_LABEL = re.compile(r"\s*(?P<name>[a-z_]+)\s*=\s*(?:'(?P<single>[^']*)'|\"(?P<double>[^\"]*)\")\s*")
_CONDITION = re.compile(r"^\s*(?P<aggregate>p\(\s*\d+(?:\.\d+)?\s*\)|avg|min|max|med|count|rate)?\s*"
                        r"(?P<op><=|>=|==|!=|<|>)\s*(?P<value>[0-9.]+\s*[a-z]*)\s*$")


class ThresholdError(ValueError):
    """A threshold that cannot be read; says which one and what is wrong."""


class Figures(Protocol):
    """What thresholds are evaluated against: the run's numbers, derived from its journal."""

    duration: float

    def count(self, metric: str, selector: dict[str, str]) -> float: ...

    def ratio(self, metric: str, selector: dict[str, str]) -> float | None: ...

    def distribution(self, metric: str, selector: dict[str, str]) -> list[float]: ...


@dataclass(frozen=True)
class Condition:
    aggregate: str
    op: str
    value: float

    def __str__(self) -> str:
        return f"{self.aggregate} {self.op} {self.value:g}"


@dataclass(frozen=True)
class Threshold:
    key: str
    metric: str
    selector: tuple[tuple[str, str], ...]
    conditions: tuple[Condition, ...]
    text: str

    def observe(self, figures: Figures, condition: Condition) -> float | None:
        """The observed value for one condition; None when there is nothing to observe (e.g. no samples)."""
        selector = dict(self.selector)
        if self.metric in DISTRIBUTIONS:
            return _aggregate(figures.distribution(self.metric, selector), condition.aggregate)
        if self.metric in RATIOS:
            return figures.ratio(self.metric, selector)
        total = figures.count(self.metric, selector)
        return total / figures.duration if condition.aggregate == "rate" and figures.duration else total


@dataclass(frozen=True)
class Verdict:
    threshold: Threshold
    condition: Condition
    observed: float | None
    passed: bool

    def as_dict(self) -> dict[str, object]:
        return {"threshold": self.threshold.key, "condition": str(self.condition), "observed": self.observed,
                "passed": self.passed}


def parse_threshold(key: str, conditions: str | list[str]) -> Threshold:
    match = _KEY.match(key)
    if match is None:
        raise ThresholdError(f"threshold {key!r}: write a metric name, optionally with {{label='value'}}")
    metric = match["metric"]
    if metric not in METRICS:
        raise ThresholdError(f"threshold {key!r}: unknown metric {metric!r}; known: {', '.join(sorted(METRICS))}")
    selector = _parse_selector(key, match["selector"] or "", METRICS[metric])
    texts = [conditions] if isinstance(conditions, str) else list(conditions)
    if not texts:
        raise ThresholdError(f"threshold {key!r}: no condition")
    parsed = tuple(_parse_condition(key, metric, text) for text in texts)
    return Threshold(key, metric, selector, parsed, "; ".join(texts))


def parse_thresholds(table: dict[str, str | list[str]]) -> list[Threshold]:
    return [parse_threshold(key, value) for key, value in table.items()]


def evaluate(thresholds: list[Threshold], figures: Figures) -> list[Verdict]:
    verdicts = []
    for threshold in thresholds:
        for condition in threshold.conditions:
            observed = threshold.observe(figures, condition)
            passed = observed is not None and _OPERATORS[condition.op](observed, condition.value)
            verdicts.append(Verdict(threshold, condition, observed, passed))
    return verdicts


def _parse_selector(key: str, text: str, labels: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for part in filter(None, (p.strip() for p in _split_selector(text))):
        match = _LABEL.fullmatch(part)
        if match is None:
            raise ThresholdError(f"threshold {key!r}: cannot read {part!r}; write label='value'")
        if match["name"] not in labels:
            raise ThresholdError(f"threshold {key!r}: {match['name']!r} is not a label of this metric "
                                 f"(labels: {', '.join(labels) or 'none'})")
        pairs.append((match["name"], match["single"] if match["single"] is not None else match["double"]))
    return tuple(sorted(pairs))


def _split_selector(text: str) -> list[str]:
    parts, current, quote = [], "", None
    for char in text:
        if char in "'\"" and quote in (None, char):
            quote = None if quote else char
        if char == "," and quote is None:
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current]


def _parse_condition(key: str, metric: str, text: str) -> Condition:
    match = _CONDITION.match(text)
    if match is None:
        raise ThresholdError(f"threshold {key!r}: cannot read condition {text!r}; write e.g. '> 0', "
                             "'p(95) < 250ms', 'rate >= 5'")
    aggregate = (match["aggregate"] or "").replace(" ", "")
    if metric in DISTRIBUTIONS and aggregate in ("", "rate"):
        raise ThresholdError(f"threshold {key!r}: {metric} is a distribution; name an aggregate: p(95), avg, "
                             "min, max, med or count")
    if metric not in DISTRIBUTIONS and aggregate not in ("", "count", "rate"):
        raise ThresholdError(f"threshold {key!r}: {aggregate} applies to distributions only")
    try:
        value = parse_duration(match["value"].replace(" ", "")) if re.search(r"[a-z]", match["value"]) \
            else float(match["value"])
    except ValueError as exc:
        raise ThresholdError(f"threshold {key!r}: {exc}") from None
    return Condition(aggregate or "count", match["op"], value)


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
