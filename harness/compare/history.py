"""Many nights of one scenario, each gated metric as a series, each series judged for a trend: `mrtr-harness history`.

A nightly compare with a baseline judges one night at a time: a p95 that creeps up 3% a
night passes every comparison of a night with the one before. Here every metric `compare`
gates (the same names, read the same way, from the same figures) is a series over the
nights, and a series fails when it drifts the wrong way:

- its Mann-Kendall trend (`harness.compare.trend`) is significant at the `[compare]`
  table's `significance` (0.01 by default), one-sided in the direction that is worse, and
- the drift, Sen's slope times the nights it spans (nights - 1), relative to the Sen line's
  value at the first night, is beyond the metric's `[compare]` tolerance (counts, which
  `compare` judges exactly, drift when they grow at all).

Both at once: noise with no trend is not significant, and a trend too small to matter stays
within its tolerance. The nights are ordered by when their load started (their journal's,
which summary.json's `started` must agree with), never by the order the folders are given in,
and counted one apart whatever the days between them. A night whose summary.json disagrees
with its journal (another run id, another start) is named and left out, in one line: a
summary is no witness of when its night ran. At least `MIN_NIGHTS` are needed: fewer cannot show a trend at the
default significance (`harness.compare.trend.MIN_NIGHTS`).

It fails closed, as `compare` does: a night that did not complete, whose journal has lines
that could not be read, or that lacks a flow, tool or round another night has, fails the
history (it cannot be judged); a folder of another scenario (the fields `compare` checks),
the same run twice, or too few nights is bad input (exit 2); a results folder whose
summary.json is missing or damaged is a data error (exit 4, `DamagedNight`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.compare.comparison import RUN_COMPLETED, Direction, MetricResult, compare_runs
from harness.compare.folders import NotComparable, check_comparable
from harness.compare.samples import ResultsRun, read_results
from harness.compare.tolerances import ToleranceError, settle
from harness.compare.trend import MIN_NIGHTS, Trend, mann_kendall
from harness.config.compare import CompareSettings
from harness.errors import MrtrHarnessError, UsageError
from harness.report import SUMMARY_JSON, NotResults
from harness.report.summary_schema import Summary


class NotAHistory(UsageError):
    """Folders that are not one scenario's nights, or too few of them (bad input: exit 2)."""


class DamagedNight(MrtrHarnessError):
    """A night whose summary.json (or the rest of its results) is missing or damaged: a data error, exit 4."""


class TrendOutcome(StrEnum):
    PASS = "pass"
    DRIFT = "drift"  # a significant trend the worse way, beyond the tolerance: the gate fails
    NOT_SIGNIFICANT = "not significant"  # beyond the tolerance, but no real trend on these nights
    UNJUDGED = "cannot be judged"  # a night did not complete, is damaged, or lacks the metric: fails closed
    NOT_MEASURED = "not measured every night"  # CPU per round: `compare` too judges it only where both measured it


@dataclass(frozen=True)
class Night:
    """One results folder of the history: when its load started, and its run as `compare` reads it."""

    started: float
    run: ResultsRun

    @property
    def run_id(self) -> str:
        return self.run.run_id


@dataclass(frozen=True)
class LeftOut:
    """A night not judged: its folder, and why (in words)."""

    folder: Path
    reason: str

    def line(self) -> str:
        return f"{self.folder} left out: {self.reason}"


@dataclass(frozen=True)
class MetricTrend:
    """One metric over the nights (oldest first; None where a night has no value) and what its trend means."""

    metric: str
    unit: str
    values: tuple[float | None, ...]
    verdict: TrendOutcome
    tolerance: float | None = None
    """The drift allowed, relative to the first night's fitted value; None: a count, judged exactly."""
    direction: Direction = Direction.HIGHER_IS_WORSE
    trend: Trend | None = None
    drift: float | None = None
    """How much worse over the nights (Sen's slope times nights - 1), relative to the first night's fitted value."""
    note: str = ""

    @property
    def failed(self) -> bool:
        return self.verdict in (TrendOutcome.DRIFT, TrendOutcome.UNJUDGED)

    def as_dict(self) -> dict[str, Any]:
        trend = self.trend
        return {"metric": self.metric, "unit": self.unit, "values": list(self.values), "verdict": self.verdict.value,
                "tolerance": self.tolerance, "exact": self.tolerance is None, "direction": self.direction.value,
                "mann_kendall_s": trend.s if trend else None, "p_value": trend.p_value if trend else None,
                "sen_slope": trend.slope if trend else None, "sen_start": trend.start if trend else None,
                "drift": None if self.drift is None or math.isinf(self.drift) else round(self.drift, 6),
                "note": self.note}


@dataclass(frozen=True)
class History:
    """Every gated metric of one scenario's nights, judged for a trend by the newest night's settings."""

    nights: list[Night]
    settings: CompareSettings
    metrics: list[MetricTrend]
    left_out: tuple[LeftOut, ...] = ()
    """Folders given that are not judged (their summary.json disagrees with their journal)."""

    @property
    def failures(self) -> list[MetricTrend]:
        return [metric for metric in self.metrics if metric.failed]

    @property
    def exit_code(self) -> int:
        return 1 if self.failures else 0

    @property
    def scenario(self) -> str:
        return self.nights[-1].run.scenario.name

    def as_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "min_nights": MIN_NIGHTS,
                "nights": [{"run_id": night.run_id, "folder": str(night.run.folder), "started": night.started}
                           for night in self.nights],
                "settings": self.settings.model_dump(), "failed": bool(self.failures),
                "failures": [metric.metric for metric in self.failures], "exit_code": self.exit_code,
                "metrics": [metric.as_dict() for metric in self.metrics],
                "left_out": [{"folder": str(each.folder), "reason": each.reason} for each in self.left_out]}


def history_of(folders: Sequence[Path], *, tolerances: Sequence[str] = (), significance: float | None = None
               ) -> History:
    """Read the nights, check they are one scenario's, and judge every gated metric's trend."""
    if len(folders) < MIN_NIGHTS:
        raise NotAHistory(f"{len(folders)} results folder{'s' * (len(folders) != 1)} given: a trend needs at least "
                          f"{MIN_NIGHTS} nights")
    nights, left_out = read_nights(folders)
    try:
        settings = settle(nights[-1].run.scenario.compare, tolerances, significance)
    except ToleranceError as exc:
        raise NotAHistory(str(exc)) from None
    return History(nights, settings, judge_nights(nights, settings), tuple(left_out))


def read_nights(folders: Sequence[Path]) -> tuple[list[Night], list[LeftOut]]:
    """Each folder read as `compare` reads it, with its summary.json checked against its journal; the nights oldest
    first, one scenario's, and the folders left out. Too few nights once those are left out: `NotAHistory`."""
    read = [read_night(folder) for folder in folders]
    left_out = [night for night in read if isinstance(night, LeftOut)]
    nights = sorted((night for night in read if isinstance(night, Night)),
                    key=lambda night: (night.started, night.run_id))
    if len(nights) < MIN_NIGHTS:
        raise NotAHistory(f"{len(nights)} nights left once {len(left_out)} left out "
                          f"({'; '.join(each.line() for each in left_out)}): a trend needs at least {MIN_NIGHTS}")
    seen: dict[str, Path] = {}
    for night in nights:
        if night.run_id in seen:
            raise NotAHistory(f"{seen[night.run_id]} and {night.run.folder} are the same run ({night.run_id}): "
                              "give each night once")
        seen[night.run_id] = night.run.folder
    _check_one_scenario(nights)
    return nights, left_out


def _check_one_scenario(nights: Sequence[Night]) -> None:
    """`NotAHistory` naming a night of another scenario than the others (the fields `compare` checks): the first
    night unlike the newest, or the newest itself when it is unlike every other."""
    newest = nights[-1].run
    odd: list[tuple[ResultsRun, str]] = []
    for night in nights[:-1]:
        try:
            check_comparable(night.run.scenario, newest.scenario, hint="a history is the nights of one scenario")
        except NotComparable as exc:
            odd.append((night.run, str(exc)))
    if not odd:
        return
    run, reason = odd[0]
    if len(odd) == len(nights) - 1 and len(nights) > 2:  # every other night agrees: the newest is the odd one
        run, others = newest, nights[0].run
        raise NotAHistory(f"{run.folder} is not a night of {others.scenario.name} like the {len(nights) - 1} others: "
                          f"{reason}")
    raise NotAHistory(f"{run.folder} is not a night of {newest.scenario.name} like {newest.folder}: {reason}")


def read_night(folder: Path) -> Night | LeftOut:
    """One results folder: its summary.json (checked against the schema, then against its journal: the same run
    id and start, or the night is left out) and its figures, placed by its journal's start."""
    if not folder.is_dir():
        raise NotAHistory(f"{folder} is not a folder: give the results folders of the nights")
    summary = read_summary(folder)
    try:
        run = read_results(folder)
    except NotResults as exc:
        raise DamagedNight(f"{exc}: the night is damaged") from None
    if summary.scenario.name != run.scenario.name:
        raise DamagedNight(f"{folder / SUMMARY_JSON} is of the scenario {summary.scenario.name!r}, its scenario.json "
                           f"of {run.scenario.name!r}: the folder is damaged")
    journal_id, journal_started = run.samples.run_id, run.samples.figures.started
    if summary.run_id != journal_id:
        return LeftOut(folder, f"its {SUMMARY_JSON} is of run {summary.run_id}, its journal of run {journal_id}")
    if summary.started != journal_started:
        return LeftOut(folder, f"its {SUMMARY_JSON} says its load started at {summary.started}, its journal at "
                               f"{journal_started}")
    if journal_started is None:
        raise DamagedNight(f"{folder / SUMMARY_JSON} has no start time (`started` is null: its load never started), "
                           "so the night cannot be placed in the history")
    return Night(journal_started, run)


def read_summary(folder: Path) -> Summary:
    """summary.json, validated against its schema; `DamagedNight` naming the file when it is missing or damaged."""
    path = folder / SUMMARY_JSON
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = "missing" if isinstance(exc, FileNotFoundError) else "unreadable"
        raise DamagedNight(f"{path} is {reason}: the night cannot be judged (`mrtr-harness report "
                           f"{folder}` rebuilds it from the journal)") from None
    try:
        return Summary.model_validate_json(text)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "the file"
        raise DamagedNight(f"{path} is damaged ({where}: {error['msg']}): the night cannot be judged "
                           f"(`mrtr-harness report {folder}` rebuilds it from the journal)") from None


def judge_nights(nights: Sequence[Night], settings: CompareSettings) -> list[MetricTrend]:
    """Every metric `compare` gates, as a series over the nights, judged."""
    series: dict[str, list[MetricResult | None]] = {}
    newest = nights[-1].run
    for index, night in enumerate(nights):  # each night's figures, named and read as `compare` reads them
        for result in compare_runs(newest, night.run, settings).results:
            series.setdefault(result.metric, [None] * len(nights))[index] = result
    return [_judge(metric, rows, nights, settings.significance) for metric, rows in series.items()]


def _judge(metric: str, rows: list[MetricResult | None], nights: Sequence[Night], alpha: float) -> MetricTrend:
    known = next(row for row in rows if row is not None)
    values = tuple(row.current if row is not None else None for row in rows)
    if known.unit == "count" and known.tolerance is None:  # a count no night showed a label of is 0 that night
        values = tuple(0 if value is None else value for value in values)
        rows = [row or known for row in rows]
    base = MetricTrend(metric, known.unit, values, TrendOutcome.PASS, known.tolerance, known.direction)
    if known.unit == "status" or metric.startswith("journal_"):  # run_completed, journal_unreadable
        bad = [night.run_id for night, value in zip(nights, values, strict=True)
               if value is None or (value == 0 if metric == RUN_COMPLETED else value > 0)]
        what = "did not complete" if metric == RUN_COMPLETED else "have journal lines that could not be read"
        return base if not bad else _unjudged(base, f"night{'s' * (len(bad) != 1)} that {what}: {', '.join(bad)}")
    lacking = [night.run_id for night, row in zip(nights, rows, strict=True) if row is None
               or (row.current is None and not (row.samples and row.samples[1]))]
    if (lacking or None in values) and metric.startswith("cpu."):
        return MetricTrend(metric, known.unit, values, TrendOutcome.NOT_MEASURED, known.tolerance, known.direction,
                           note="CPU per round is judged only when every night measured it, as `compare` judges it")
    if lacking or None in values:
        return _unjudged(base, "not every night has it, so its trend cannot be judged (none in: "
                               f"{', '.join(lacking) or 'the newest night'})")
    return _trend(base, [float(value) for value in values if value is not None], alpha)


def _trend(base: MetricTrend, values: list[float], alpha: float) -> MetricTrend:
    worse_up = base.direction is Direction.HIGHER_IS_WORSE
    trend = mann_kendall(values, increasing=worse_up)
    worse = trend.slope * (len(values) - 1) * (1 if worse_up else -1)
    drift = 0.0 if worse == 0 else math.copysign(math.inf, worse) if trend.start == 0 else worse / abs(trend.start)
    allowed = base.tolerance if base.tolerance is not None else 0.0
    allowed_text = f"{allowed * 100:g}%" if base.tolerance is not None else "none (a count)"
    verdict, note = TrendOutcome.PASS, ""
    if drift > allowed:
        worse_by = "from 0" if math.isinf(drift) else f"by {drift * 100:.1f}%"
        if trend.p_value < alpha:
            verdict = TrendOutcome.DRIFT
            note = (f"worse {worse_by} over {len(values)} nights, beyond its tolerance ({allowed_text}), and the "
                    f"trend is significant (Mann-Kendall p {trend.p_value:.2g} < {alpha:g})")
        else:
            verdict = TrendOutcome.NOT_SIGNIFICANT
            note = (f"worse {worse_by} over {len(values)} nights, but no significant trend (Mann-Kendall p "
                    f"{trend.p_value:.2g} >= {alpha:g})")
    return MetricTrend(base.metric, base.unit, base.values, verdict, base.tolerance, base.direction, trend, drift,
                       note)


def _unjudged(base: MetricTrend, note: str) -> MetricTrend:
    return MetricTrend(base.metric, base.unit, base.values, TrendOutcome.UNJUDGED, base.tolerance, base.direction,
                       note=note)
