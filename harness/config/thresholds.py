"""Thresholds that read like k6's: a metric with an optional selector, then conditions.

    "round_duration{flow='refund'}" = "p(95) < 250ms"
    "rejections{reason='unknown key'}" = "> 0"
    completed_ratio = ">= 0.95"
    "rounds_per_call" = ["p(99) <= 2", "max <= 10"]

The key names a metric of the run's figures (declared in `harness.config.metric_table`) and
may select label values; each condition is `[aggregate] operator value`. A count's default aggregate is its
count, a distribution's must be named (p(N), avg, min, max, med, count), and `rate` is
per second of the run. Values may carry a unit (250ms, 2s). Parsed once, at the edge,
so a typo fails the scenario before anything starts. Judging a run against them is
`harness.folding.thresholds`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from harness.config.durations import parse_duration
from harness.config.metric_table import THRESHOLD_METRICS, Kind, of_kind
from harness.config.worded_errors import did_you_mean
from harness.errors import UsageError
from harness.vocabulary import LABEL_VALUES

COUNTS = of_kind(Kind.COUNT)
RATIOS = of_kind(Kind.RATIO)
DISTRIBUTIONS = of_kind(Kind.DISTRIBUTION)
SLOPES = of_kind(Kind.SLOPE)
"""Growth rates fitted with a confidence interval (`replica_rss_growth`, MB per minute): `< 5` fails when the
interval's lower bound is above 5, `> 5` when its upper bound is below 5 (`harness.folding.thresholds`)."""
METRICS = {name: metric.labels for name, metric in THRESHOLD_METRICS.items()}
"""The metrics a threshold may name, with their labels: views of `harness.config.metric_table`, where each is
declared."""

_KEY = re.compile(r"^\s*(?P<metric>[a-z_]+)\s*(?:\{(?P<selector>[^}]*)\})?\s*$")
_LABEL = re.compile(r"\s*(?P<name>[a-z_]+)\s*=\s*(?:'(?P<single>[^']*)'|\"(?P<double>[^\"]*)\")\s*")
_CONDITION = re.compile(r"^\s*(?P<aggregate>p\(\s*\d+(?:\.\d+)?\s*\)|avg|min|max|med|count|rate)?\s*"
                        r"(?P<op><=|>=|==|!=|<|>)\s*(?P<value>[0-9.]+\s*[a-z]*)\s*$")


class ThresholdError(UsageError):
    """A threshold that cannot be read; says which one (`key`) and what is wrong (`problem`)."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"threshold {key!r}: {problem}")
        self.key, self.problem = key, problem


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


def parse_threshold(key: str, conditions: str | list[str]) -> Threshold:
    match = _KEY.match(key)
    if match is None:
        raise ThresholdError(key, "write a metric name, optionally with {label='value'}")
    metric = match["metric"]
    if metric not in METRICS:
        raise ThresholdError(key, f"unknown metric {metric!r}; known: {', '.join(sorted(METRICS))}")
    selector = _parse_selector(key, match["selector"] or "", METRICS[metric])
    texts = [conditions] if isinstance(conditions, str) else list(conditions)
    if not texts:
        raise ThresholdError(key, "no condition")
    parsed = tuple(_parse_condition(key, metric, text) for text in texts)
    return Threshold(key, metric, selector, parsed, "; ".join(texts))


class Judged(StrEnum):
    """Which of a scenario's threshold tables a run is judged by: what summary.json's `judged` says."""

    EXPECT = "expect"  # the healthy outcome: plain `run` (exit 0: it holds, the fix works)
    REPRODUCES = "reproduces"  # the failure: `run --reproduce` (exit 0: it reproduced)


def parse_thresholds(table: dict[str, str | list[str]]) -> list[Threshold]:
    return [parse_threshold(key, value) for key, value in table.items()]


def _parse_selector(key: str, text: str, labels: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for part in filter(None, (p.strip() for p in _split_selector(text))):
        match = _LABEL.fullmatch(part)
        if match is None:
            raise ThresholdError(key, f"cannot read {part!r}; write label='value'")
        if match["name"] not in labels:
            raise ThresholdError(key, f"{match['name']!r} is not a label of this metric "
                                 f"(labels: {', '.join(labels) or 'none'})")
        value = match["single"] if match["single"] is not None else match["double"]
        _check_value(key, match["name"], value)
        pairs.append((match["name"], value))
    return tuple(sorted(pairs))


def _check_value(key: str, label: str, value: str) -> None:
    """A value `label` can never have (an outcome, reason or invariant the harness does not know, a round that is
    no round number) is refused, with a did-you-mean: its threshold would select nothing. The labels only a
    scenario names (flow, action, replica) are checked against the scenario (`harness.config.scenario`)."""
    known = LABEL_VALUES.get(label)
    if known is not None and value not in known:
        raise ThresholdError(key, f"{label}={value!r} is none of the {label}s the harness records (there are: "
                                  f"{', '.join(known)}){did_you_mean(value, known)}")
    if label == "round" and not (value.isdigit() and int(value) >= 1):
        raise ThresholdError(key, f"round={value!r} is not a round number: write round='1' for a call's first "
                                  "round, '2' for the next, ...")


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
        raise ThresholdError(key, f"cannot read condition {text!r}; write e.g. '> 0', "
                             "'p(95) < 250ms', 'rate >= 5'")
    aggregate = (match["aggregate"] or "").replace(" ", "")
    if metric in DISTRIBUTIONS and aggregate in ("", "rate"):
        raise ThresholdError(key, f"{metric} is a distribution; name an aggregate: p(95), avg, "
                             "min, max, med or count")
    if metric not in DISTRIBUTIONS and aggregate not in ("", "count", "rate"):
        raise ThresholdError(key, f"{aggregate} applies to distributions only")
    if metric in RATIOS and aggregate:
        raise ThresholdError(key, f"{metric} is a ratio (0 to 1) and takes no {aggregate}; write "
                             "e.g. '>= 0.95'")
    if metric in SLOPES and (aggregate or match["op"] in ("==", "!=")):
        raise ThresholdError(key, f"{metric} is a slope in MB per minute, judged by its confidence interval: "
                             "write a bound without an aggregate, e.g. '< 5'")
    _check_percentile(key, aggregate)
    try:
        value = parse_duration(match["value"].replace(" ", "")) if re.search(r"[a-z]", match["value"]) \
            else float(match["value"])
    except ValueError as exc:
        raise ThresholdError(key, f"{exc}") from None
    if metric in RATIOS and not 0.0 <= value <= 1.0:
        raise ThresholdError(key, f"{metric} is a ratio from 0 to 1, so {text.strip()!r} could "
                             f"{'never' if _never(match['op'], value) else 'always'} pass; write e.g. '>= 0.95'")
    return Condition("ratio" if metric in RATIOS else "slope" if metric in SLOPES else aggregate or "count",
                     match["op"], value)


def _check_percentile(key: str, aggregate: str) -> None:
    """p(N) takes a percentile in (0, 100]: p(195) is a typo, not the 195th percentile."""
    if aggregate.startswith("p("):
        percentile = float(aggregate[2:-1])
        if not 0.0 < percentile <= 100.0:
            raise ThresholdError(key, f"{aggregate} is not a percentile: write p(N) with N above 0 "
                                 "and at most 100, e.g. p(95) or p(99.9)")


def _never(op: str, value: float) -> bool:
    """Whether a ratio compared with `value` (outside 0..1) by `op` can never hold (else it always does)."""
    above = value > 1.0
    return op in ((">", ">=", "==") if above else ("<", "<=", "=="))
