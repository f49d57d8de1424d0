"""Two runs side by side, metric by metric, each with a verdict: the heart of `mrtr-harness compare`.

A sampled metric (round latency, rounds per call, completion) regresses only when it
moved the wrong way by more than its tolerance AND the move is real on the samples (the
one-sided Mann-Whitney test at the table's `significance`), so a noisy night does not
page anyone. A count that must stay put (rejections, client errors, invariant
violations, unexplained rejections) compares exactly: one more is a regression. Figures
a run has once (flows per second, CPU per round) have no samples to test, so their
tolerance alone decides.

It fails closed: what cannot be judged is not a pass. A current run that did not
complete, whose journal has lines that could not be read, that finished fewer flows than
the baseline beyond `flows_finished`, or that lacks a flow, tool or round the baseline has
(or has one the baseline lacks) is a regression; a baseline that cannot serve as one is
refused before (`harness.compare.folders`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from harness.compare.samples import ResultsRun, RunSamples
from harness.compare.stats import UTest, mann_whitney_greater_counted
from harness.config.compare import CompareSettings
from harness.config.metric_table import METRICS, Gate, Metric, gated
from harness.config.scenario import Scenario
from harness.folding.health import Slope
from harness.journal.records import EndStatus

PERCENTILES = ("p50", "p95", "p99")
RUN_COMPLETED = "run_completed"
JOURNAL_UNREADABLE = "journal_unreadable"
IGNORED_SCENARIO_FIELDS = frozenset({"description", "expect", "reproduces", "hypothesis", "compare",
                                     "abort_on_violation"})
"""Scenario fields that judge a run rather than shape its load: two runs differing only there are comparable."""


class ComparisonOutcome(StrEnum):
    PASS = "pass"
    IMPROVED = "improved"
    NOT_SIGNIFICANT = "not significant"  # beyond its tolerance, but within the noise of the samples
    REGRESSION = "regression"


class Direction(StrEnum):
    HIGHER_IS_WORSE = "higher is worse"
    LOWER_IS_WORSE = "lower is worse"


@dataclass(frozen=True)
class MetricResult:
    """One row of the comparison: what each run showed, how far it moved, and what that means."""

    metric: str
    baseline: float | None
    current: float | None
    unit: str
    verdict: ComparisonOutcome
    tolerance: float | None = None
    """The relative change allowed (a fraction); None for counts, which compare exactly."""
    p_value: float | None = None
    samples: tuple[int, int] | None = None
    note: str = ""
    direction: Direction = Direction.HIGHER_IS_WORSE
    """Which way is worse (`mrtr-harness history` judges a trend in that direction)."""

    @property
    def change(self) -> float | None:
        """Relative change from the baseline; infinite when the baseline was 0 and the current is not."""
        if self.baseline is None or self.current is None:
            return None
        if self.baseline == 0:
            return 0.0 if self.current == 0 else math.copysign(math.inf, self.current)
        return (self.current - self.baseline) / abs(self.baseline)

    @property
    def regressed(self) -> bool:
        return self.verdict is ComparisonOutcome.REGRESSION

    def as_dict(self) -> dict[str, Any]:
        change = self.change
        return {"metric": self.metric, "baseline": self.baseline, "current": self.current, "unit": self.unit,
                "change": None if change is None or math.isinf(change) else round(change, 6),
                "tolerance": self.tolerance, "exact": self.tolerance is None, "p_value": self.p_value,
                "samples": list(self.samples) if self.samples else None, "verdict": self.verdict.value,
                "note": self.note}


@dataclass(frozen=True)
class Comparison:
    """Every metric of the current run against the baseline's, and the settings that judged them."""

    baseline: ResultsRun
    current: ResultsRun
    settings: CompareSettings
    results: list[MetricResult]
    scenario_differences: list[str]
    warnings: list[str] = field(default_factory=list)
    """What the comparison could not see for itself but a reader should know (the same run given twice)."""

    @property
    def regressions(self) -> list[MetricResult]:
        return [result for result in self.results if result.regressed]

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions else 0

    def as_dict(self) -> dict[str, Any]:
        return {"baseline": self.baseline.run_id, "current": self.current.run_id,
                "scenario": self.current.scenario.name, "scenario_differences": self.scenario_differences,
                "settings": self.settings.model_dump(), "warnings": self.warnings,
                "regressed": bool(self.regressions),
                "regressions": [result.metric for result in self.regressions], "exit_code": self.exit_code,
                "metrics": [result.as_dict() for result in self.results]}


def scenario_differences(baseline: Scenario, current: Scenario) -> list[str]:
    """The top-level scenario fields that differ in what the load does (name, target, load, flows, ...)."""
    before = baseline.model_dump(mode="json", exclude=set(IGNORED_SCENARIO_FIELDS))
    after = current.model_dump(mode="json", exclude=set(IGNORED_SCENARIO_FIELDS))
    return sorted(key for key in before.keys() | after.keys() if before.get(key) != after.get(key))


def compare_runs(baseline: ResultsRun, current: ResultsRun, settings: CompareSettings) -> Comparison:
    """Judge every metric of `current` against `baseline` (the caller has checked the scenarios match): whether
    it completed and was read whole, then each gated metric of `harness.config.metric_table`, in its order."""
    judge = _Judge(settings)
    before, after = baseline.samples, current.samples
    results = [_run_status(after), _journal_read(after)]
    for metric in gated():
        results += _exact(metric, before, after) if metric.gate is Gate.EXACT \
            else JUDGES[metric.name](judge, before, after)
    return Comparison(baseline, current, settings, results, scenario_differences(baseline.scenario, current.scenario))


Judgement = Callable[["_Judge", RunSamples, RunSamples], list[MetricResult]]
JUDGES: dict[str, Judgement] = {}
"""How compare judges each gated metric that is not an exact count, by name: filled by `@judges`."""


def judges(name: str) -> Callable[[Judgement], Judgement]:
    """Register the function as the judge of `name`, a metric `harness.config.metric_table` gates (not exactly)."""
    def register(function: Judgement) -> Judgement:
        metric = METRICS.get(name)
        if metric is None or metric.gate in (None, Gate.EXACT) or name in JUDGES:
            raise TypeError(f"{function.__name__}: {name!r} is no metric compare judges by a tolerance, or is "
                            "judged twice")
        JUDGES[name] = function
        return function
    return register


def _direction(name: str) -> Direction:
    return Direction.LOWER_IS_WORSE if METRICS[name].lower_is_worse else Direction.HIGHER_IS_WORSE


class _Judge:
    """Turns a baseline figure, a current figure, a tolerance and (for samples) a test into a verdict."""

    def __init__(self, settings: CompareSettings) -> None:
        self.settings = settings

    def sampled(self, metric: str, unit: str, before: Counted, after: Counted, value_before: float,
                value_after: float, tolerance: float, direction: Direction = Direction.HIGHER_IS_WORSE,
                ) -> MetricResult:
        """`before`, `after`: each value with how many samples had it (a sketch's bins, exact counts)."""
        worse, better = (after, before) if direction is Direction.HIGHER_IS_WORSE else (before, after)
        test_worse = mann_whitney_greater_counted(better, worse)
        moved = _worsened(value_before, value_after, direction)
        alpha = self.settings.significance
        count = (_samples(before), _samples(after))
        if moved > tolerance:
            if test_worse.p_value < alpha:
                verdict, note = ComparisonOutcome.REGRESSION, f"worse by more than {_percent(tolerance)}, significant"
            else:
                verdict = ComparisonOutcome.NOT_SIGNIFICANT
                note = (f"worse by more than {_percent(tolerance)}, but not significant on {count[0]} and "
                        f"{count[1]} samples (p {_p(test_worse)} >= {alpha:g})")
            return MetricResult(metric, value_before, value_after, unit, verdict, tolerance, test_worse.p_value,
                                count, note, direction)
        test_better = mann_whitney_greater_counted(worse, better)
        if -moved > tolerance and test_better.p_value < alpha:
            return MetricResult(metric, value_before, value_after, unit, ComparisonOutcome.IMPROVED, tolerance,
                                test_better.p_value, count, f"better by more than {_percent(tolerance)}", direction)
        return MetricResult(metric, value_before, value_after, unit, ComparisonOutcome.PASS, tolerance,
                            test_worse.p_value, count, "", direction)

    def single(self, metric: str, unit: str, value_before: float | None, value_after: float | None,
               tolerance: float, direction: Direction = Direction.HIGHER_IS_WORSE) -> MetricResult:
        if value_before is None or value_after is None:
            missing = "the baseline" if value_before is None else "the current run"
            return MetricResult(metric, value_before, value_after, unit, ComparisonOutcome.REGRESSION, tolerance,
                                note=f"{missing} did not record it, so it cannot be judged", direction=direction)
        moved = _worsened(value_before, value_after, direction)
        if moved > tolerance:
            verdict = ComparisonOutcome.REGRESSION
            note = f"worse by more than {_percent(tolerance)} (one figure per run)"
        elif -moved > tolerance:
            verdict, note = ComparisonOutcome.IMPROVED, f"better by more than {_percent(tolerance)}"
        else:
            verdict, note = ComparisonOutcome.PASS, ""
        return MetricResult(metric, value_before, value_after, unit, verdict, tolerance, note=note, direction=direction)


def _run_status(after: RunSamples) -> MetricResult:
    """Whether the current run completed (the baseline did: `harness.compare.folders` refuses one that did not)."""
    status = after.figures.status
    if status == EndStatus.COMPLETED:
        return MetricResult(RUN_COMPLETED, 1.0, 1.0, "status", ComparisonOutcome.PASS)
    ended = (f"its journal ends with status {status}" if status
             else "its journal has no `run end` record (killed, or cut short)")
    return MetricResult(RUN_COMPLETED, 1.0, 0.0, "status", ComparisonOutcome.REGRESSION,
                        note=f"the current run did not complete: {ended}")


def _journal_read(after: RunSamples) -> MetricResult:
    """Whether every line of the current run's journal could be read: a comparison without some is not trusted."""
    if not after.unreadable:
        return MetricResult(JOURNAL_UNREADABLE, None, 0, "count", ComparisonOutcome.PASS)
    return MetricResult(JOURNAL_UNREADABLE, None, after.unreadable, "count", ComparisonOutcome.REGRESSION,
                        note=f"the current run's journal is damaged: {after.unreadable} line"
                             f"{'s' * (after.unreadable != 1)} could not be read, so its figures are incomplete")


@judges("flows_finished")
def _flows_finished(judge: _Judge, before: RunSamples, after: RunSamples) -> list[MetricResult]:
    """Flows finished (interrupted ones are not): a run cut short finishes fewer at the same flows per second."""
    return [judge.single("flows_finished", "flows", float(before.flows_finished), float(after.flows_finished),
                         judge.settings.flows_finished, _direction("flows_finished"))]


@judges("round_duration")
def _latency(judge: _Judge, before: RunSamples, after: RunSamples) -> list[MetricResult]:
    results = []
    tolerances = judge.settings.round_duration.model_dump()
    for key in sorted(before.latency.keys() | after.latency.keys()):
        flow, tool, number = key
        name = f"round_duration{{flow='{flow}',tool='{tool}',round='{number}'}}"
        old, new = before.latency.get(key), after.latency.get(key)
        for name_p in PERCENTILES:
            metric = f"{name}.{name_p}"
            tolerance = tolerances[name_p]
            if old is None or new is None:
                results.append(_only_one(metric, "s", old.count if old else 0, new.count if new else 0, tolerance))
                continue
            pct = float(name_p.removeprefix("p"))
            value_old, value_new = old.percentile(pct), new.percentile(pct)
            assert value_old is not None and value_new is not None  # both have samples
            results.append(judge.sampled(metric, "s", old.pairs(), new.pairs(), value_old, value_new, tolerance))
    return results


@judges("rounds_per_call")
def _rounds_per_call(judge: _Judge, before: RunSamples, after: RunSamples) -> list[MetricResult]:
    results = []
    tolerance = judge.settings.rounds_per_call.mean
    for flow, tool in sorted(before.rounds_per_call.keys() | after.rounds_per_call.keys()):
        metric = f"rounds_per_call{{flow='{flow}',tool='{tool}'}}.mean"
        old, new = before.rounds_per_call.get((flow, tool)), after.rounds_per_call.get((flow, tool))
        if old is None or new is None or not old.count or not new.count:
            results.append(_only_one(metric, "rounds", old.count if old else 0, new.count if new else 0, tolerance))
            continue
        results.append(judge.sampled(metric, "rounds", old.pairs(), new.pairs(), old.total / old.count,
                                     new.total / new.count, tolerance))
    return results


@judges("completed_ratio")
def _completion(judge: _Judge, before: RunSamples, after: RunSamples) -> list[MetricResult]:
    results = []
    tolerance = judge.settings.completed_ratio
    old_table, new_table = before.completed, after.completed
    for flow in sorted(old_table.keys() | new_table.keys()):
        metric = f"completed_ratio{{flow='{flow}'}}"
        (old_done, old_all), (new_done, new_all) = old_table.get(flow, (0, 0)), new_table.get(flow, (0, 0))
        if not old_all or not new_all:
            results.append(_only_one(metric, "share", old_all, new_all, tolerance))
            continue
        results.append(judge.sampled(metric, "share", _zero_one(old_done, old_all), _zero_one(new_done, new_all),
                                     old_done / old_all, new_done / new_all, tolerance, _direction("completed_ratio")))
    return results


@judges("flows_per_second")
def _flows_per_second(judge: _Judge, before: RunSamples, after: RunSamples) -> list[MetricResult]:
    return [judge.single("flows_per_second", "flows/s", before.flows_per_second, after.flows_per_second,
                         judge.settings.flows_per_second, _direction("flows_per_second"))]


@judges("cpu.harness_per_round_ms")
def _harness_cpu(judge: _Judge, before: RunSamples, after: RunSamples) -> list[MetricResult]:
    """CPU per round, only when both runs measured it: a run without the figure is not a regression."""
    return _cpu(judge, "cpu.harness_per_round_ms", before.harness_per_round_ms, after.harness_per_round_ms,
                judge.settings.cpu.harness_per_round_ms)


@judges("cpu.replica_per_round_ms")
def _replica_cpu(judge: _Judge, before: RunSamples, after: RunSamples) -> list[MetricResult]:
    return _cpu(judge, "cpu.replica_per_round_ms", before.replica_per_round_ms, after.replica_per_round_ms,
                judge.settings.cpu.replica_per_round_ms)


RSS_GROWTH_MARGIN = 1.0
"""MB a minute the current night's interval must clear the baseline's by to regress: a healthy replica's slope
moves by a fraction of that between nights, and a significant change smaller than it is no leak."""


@judges("replica_rss_growth")
def _rss_growth(judge: _Judge, before: RunSamples, after: RunSamples) -> list[MetricResult]:
    """The fastest-growing replica's memory slope (MB per minute), only when both runs fitted one (like CPU per
    round): a regression when the current run's 95% interval lies wholly above the baseline's, by more than
    `RSS_GROWTH_MARGIN`, so noise on a flat line never fails a night."""
    old, new = _worst_slope(before), _worst_slope(after)
    if old is None or new is None:
        return []
    verdict, note = ComparisonOutcome.PASS, ""
    if new.low > max(old.high, 0.0) + RSS_GROWTH_MARGIN:
        verdict = ComparisonOutcome.REGRESSION
        note = (f"memory grows faster: {new.low:.3g} to {new.high:.3g} MB/min against the baseline's "
                f"{old.low:.3g} to {old.high:.3g} (95% intervals, more than {RSS_GROWTH_MARGIN:g} MB/min apart)")
    elif old.low > max(new.high, 0.0) + RSS_GROWTH_MARGIN:
        verdict, note = ComparisonOutcome.IMPROVED, "memory grows slower (95% intervals apart)"
    return [MetricResult("replica_rss_growth", round(old.per_minute, 3), round(new.per_minute, 3), "MB/min", verdict,
                         note=note)]


def _worst_slope(run: RunSamples) -> Slope | None:
    """The replica whose memory grows fastest (replica labels need not match between runs)."""
    fitted = run.figures.slopes("replica_rss_growth", {})
    return max(fitted, key=lambda slope: slope.low) if fitted else None


def _cpu(judge: _Judge, name: str, old: float | None, new: float | None, tolerance: float) -> list[MetricResult]:
    if old is None or new is None:
        return []
    return [judge.single(name, "ms", old, new, tolerance, _direction(name))]


def _exact(metric: Metric, before: RunSamples, after: RunSamples) -> list[MetricResult]:
    """A count that compares exactly, in total and by its `gate_labels`: one more than the baseline regresses."""
    old, new = before.figures.breakdown(metric.name), after.figures.breakdown(metric.name)
    rows: list[tuple[str, int, int]] = [(metric.name, sum(old.values()), sum(new.values()))]
    if metric.gate_labels:
        template = metric.name + "{{" + ",".join(f"{label}='{{}}'" for label in metric.gate_labels) + "}}"
        rows += _by_label(template, old, new)
    return [_exact_row(name, old_n, new_n) for name, old_n, new_n in rows]


def _by_label(template: str, before: Counter[Any], after: Counter[Any]) -> list[tuple[str, int, int]]:
    rows = []
    for label in sorted(before.keys() | after.keys()):
        parts = label if isinstance(label, tuple) else (label,)
        rows.append((template.format(*parts), before.get(label, 0), after.get(label, 0)))
    return rows


def _exact_row(metric: str, before: int, after: int) -> MetricResult:
    if after > before:
        return MetricResult(metric, before, after, "count", ComparisonOutcome.REGRESSION,
                            note=f"{after - before} more than the baseline (counts compare exactly)")
    verdict = ComparisonOutcome.IMPROVED if after < before else ComparisonOutcome.PASS
    return MetricResult(metric, before, after, "count", verdict)


def _only_one(metric: str, unit: str, before: int, after: int, tolerance: float) -> MetricResult:
    """A flow, tool or round only one run has samples of (`before`, `after`: sample counts): a regression, since
    it cannot be judged: the current run lost it (it stopped running) or gained it (its behaviour changed)."""
    note = ("no samples in the current run, and the baseline has them: the run lost this flow, tool or round"
            if before else "no samples in the baseline, and the current run has them: a flow, tool or round the "
                           "baseline never ran")
    return MetricResult(metric, None, None, unit, ComparisonOutcome.REGRESSION, tolerance,
                        samples=(before, after), note=note)


def _worsened(before: float, after: float, direction: Direction) -> float:
    """How much worse, relative to the baseline (negative: better); a change from 0 is infinitely large."""
    delta = after - before if direction is Direction.HIGHER_IS_WORSE else before - after
    if before == 0:
        return 0.0 if delta == 0 else math.copysign(math.inf, delta)
    return delta / abs(before)


Counted = list[tuple[float, int]]
"""A distribution as (value, how many samples) pairs."""


def _samples(pairs: Counted) -> int:
    return sum(n for _, n in pairs)


def _zero_one(completed: int, finished: int) -> Counted:
    """Completion as samples: a 1 per completed flow, a 0 per other finished one."""
    return [(0.0, finished - completed), (1.0, completed)]


def _percent(share: float) -> str:
    return f"{share * 100:g}%"


def _p(test: UTest) -> str:
    return f"{test.p_value:.2g}"


def _unjudged() -> list[str]:
    """The metrics the table gates by a tolerance that have no judge here."""
    return [metric.name for metric in gated() if metric.gate is not Gate.EXACT and metric.name not in JUDGES]


if _unjudged():
    raise TypeError(f"metrics harness.config.metric_table gates without a @judges in harness.compare.comparison: "
                    f"{', '.join(_unjudged())}")
