"""The run's verdict: one status and one exit code, decided from the journal's figures and checks.

Every output (summary.json, junit.xml, report.html, the terminal table) shows this one
verdict rather than deciding for itself, so CI, people and the exit code never disagree.
The statuses are Chaos Toolkit's journal statuses, plus `errored` for the harness's own
failure; the exit codes are listed in docs/exit-codes.md. Everything is read from the
journal (the run's `end` and `error` records included), so `mrtr-harness report` reaches
the same verdict after the fact as the run did.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from harness.config.thresholds import DISTRIBUTIONS, RATIOS, Judged, Threshold
from harness.errors import ExitCode
from harness.folding.checks import HypothesisResult, Reconciliation, RunChecks
from harness.folding.figures import RunFigures
from harness.folding.invariants import InvariantResult
from harness.folding.thresholds import ThresholdResult, evaluate
from harness.folding.top_errors import ErrorGroup
from harness.journal.records import EndStatus
from harness.report.series import ChaosAction, chaos_actions
from harness.report.wording import format_number, probe_item, window_text
from harness.report.wording import format_seconds as format_seconds  # where compare and html import it from

if TYPE_CHECKING:
    from harness.folding.fuzz import FuzzTable



class RunStatus(StrEnum):
    """How the run ended, as Chaos Toolkit names it (a typed enum, so no one compares strings)."""

    COMPLETED = "completed"  # everything held
    FAILED = "failed"  # a threshold, an invariant, reconciliation, or the hypothesis before chaos failed
    DEVIATED = "deviated"  # the steady-state hypothesis failed during or after chaos
    ABORTED = "aborted"  # the run stopped itself early, or the target failed
    INTERRUPTED = "interrupted"  # Ctrl-C / SIGTERM, or a journal cut off without a `run end`
    ERRORED = "errored"  # the harness itself failed: its numbers are not to be trusted either way


@dataclass(frozen=True)
class RunVerdict:
    """Everything that decided the run, and the decision: what every report renders."""

    status: RunStatus
    exit_code: ExitCode
    thresholds: list[ThresholdResult]
    invariants: dict[str, InvariantResult]
    reconciliation: Reconciliation | None
    hypothesis: list[HypothesisResult]
    problems: list[str]
    reason: str | None = None
    run_id: str | None = None
    started: float | None = None
    duration: float = 0.0
    chaos: list[ChaosAction] = field(default_factory=list)
    top_errors: list[ErrorGroup] = field(default_factory=list)
    expected_answers: list[ErrorGroup] = field(default_factory=list)
    """Tool errors that answered a person's decline or cancel: expected outcomes, shown apart from errors."""
    """What the servers said most often when rounds failed: shown beside the decision, never part of it."""
    fuzz: FuzzTable | None = None
    """The fuzzer's table (mutants sent and answered, by class): shown beside the decision; the decision
    reads its findings through the `no_mutant_accepted` invariant."""
    output_contracts: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per tool whose results broke the outputSchema it declared: how many, and the first way (`mismatches`,
    `example`); shown beside the decision, which reads it through the `output_schema_mismatches` threshold."""
    reached: bool = True
    """False when the target failed before the load began: nothing was measured, so the reason is the one problem
    and the terminal shows no table of empty checks."""
    unreadable: int = 0
    """Journal lines the verdict was decided without (not a record, or a record the figures could not take):
    above 0, the journal is damaged and `report` does not trust the verdict it rebuilt (exit 4 unless --lenient)."""
    forged: str | None = None
    """Records in a worker's journal part that no worker writes, in one line (`JournalRead.foreign_line`): the
    verdict is not trusted (exit 4, --lenient or not)."""
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Flows by outcome and failed rounds by code, per host (`RunFigures.hosts`): shown beside the decision."""
    cold_start: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per replica label: its processes' cold starts (`RunFigures.cold_starts`), a stdio target's: beside the
    decision, which reads them through the `cold_start` threshold."""
    judged: Judged = Judged.EXPECT
    """Which table the thresholds are: [expect] (the healthy outcome) or, `run --reproduce`, [reproduces]."""
    log_sources: list[dict[str, Any]] = field(default_factory=list)
    """What each log source read (lines, bad lines skipped, cut lines, when it was lost): beside the decision."""

    @property
    def passed(self) -> bool:
        return self.exit_code is ExitCode.PASSED

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "exit_code": int(self.exit_code),
            "passed": self.passed,
            "judged": self.judged.value,
            "reason": self.reason,
            "problems": list(self.problems),
            "thresholds": [threshold_dict(verdict) for verdict in self.thresholds],
            "invariants": {name: result.as_dict() for name, result in sorted(self.invariants.items())},
            "reconciliation": self.reconciliation.as_dict() if self.reconciliation else None,
            "hypothesis": [result.as_dict() for result in self.hypothesis],
        }


def decide(figures: RunFigures, thresholds: list[Threshold], checks: RunChecks | None = None) -> RunVerdict:
    """Decide the run's status and exit code from what its journal says.

    Precedence, most telling first: the harness's own failure (exit 4) means its numbers
    prove nothing either way; a target that could not be reached (exit 3) says the numbers
    are meaningless; an interrupted or cut-off run (exit 130, as shells give for Ctrl-C, so CI
    tells it from a failed verdict) and an aborted one (exit 1) did not finish, so passing
    thresholds prove nothing; a started flow without exactly one end
    record is the harness's bookkeeping failing (exit 4), never the target's; then
    failures (thresholds, invariants, unexplained rejections, a hypothesis that failed
    before chaos, a chaos action that did not happen unless a `chaos_failures` threshold
    allows it); then a deviation (the hypothesis failed during or after chaos).
    Thresholds are still evaluated in every case, so the reports show them.
    """
    checks = checks if checks is not None else RunChecks.from_figures(figures)
    verdicts = evaluate(thresholds, figures)
    failures = _failures(verdicts, checks) + _chaos_not_done(figures, thresholds)
    deviations = [probe_failure(probe, figures.started) for probe in checks.hypothesis
                  if not probe.ok and probe.phase != "before"]
    status, reason = _status(figures, checks, failures, deviations, verdicts)
    exit_code = {RunStatus.COMPLETED: ExitCode.PASSED, RunStatus.ERRORED: ExitCode.HARNESS,
                 RunStatus.INTERRUPTED: ExitCode.INTERRUPTED}.get(status)
    if exit_code is None:
        unobserved = reason is not None and reason == not_judged_reason(checks, verdicts)  # a log source lost
        exit_code = ExitCode.TARGET if checks.target_error or unobserved else ExitCode.FAILED
    reached = not (checks.target_error and not checks.load_started)
    if not reached:  # the one cause: every threshold lacks samples and every check is empty because of it
        failures, deviations = [], []
    return RunVerdict(status=status, exit_code=exit_code, thresholds=verdicts, invariants=dict(checks.invariants),
                      reconciliation=_with_redispatched(checks.reconciliation, figures),
                      hypothesis=list(checks.hypothesis), reached=reached,
                      problems=[*([reason] if reason else []), *failures, *deviations], reason=reason,
                      run_id=checks.run_id, started=figures.started, duration=figures.duration,
                      chaos=chaos_actions(figures.chaos, figures.started, figures.faults),
                      log_sources=list(checks.log_sources))


def _with_redispatched(reconciliation: Reconciliation | None, figures: RunFigures) -> Reconciliation | None:
    """The reconciliation, with how many of its client rejections came from re-dispatched rounds."""
    if reconciliation is None:
        return None
    return replace(reconciliation, from_redispatched_rounds=figures.redispatched["rejections"])


def judged_text(verdict: RunVerdict) -> str:
    """Which table the verdict judged, and for [reproduces] what its verdict means: the status line's words."""
    if verdict.judged is Judged.EXPECT:
        return "judged by [expect]"
    meaning = {RunStatus.COMPLETED: ": the failure reproduced",
               RunStatus.FAILED: ": the failure did not reproduce"}.get(verdict.status, "")
    return f"judged by [reproduces]{meaning}"


LOST_TRACK = "one_outcome_per_flow"
"""The invariant that checks the harness's own bookkeeping: a break is the harness's failure, not the target's."""


def _chaos_not_done(figures: RunFigures, thresholds: list[Threshold]) -> list[str]:
    """A chaos action that failed, was cut short or never ran fails the run, unless a `chaos_failures` threshold
    of the scenario's own says how many may: a run whose chaos did not happen has not tested what it says."""
    if any(threshold.metric == "chaos_failures" for threshold in thresholds):
        return []
    failed = [row for row in figures.chaos if row.get("phase") == "end" and not row.get("ok", True)]
    if not failed:
        return []
    named = "; ".join(f"{row.get('action')} {row.get('target')}: {row.get('error') or 'failed'}" for row in failed[:3])
    more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
    return [f"chaos: {len(failed)} action{'s' * (len(failed) != 1)} did not happen as scheduled ({named}{more}); "
            "set a chaos_failures threshold to allow it"]


def _failures(verdicts: list[ThresholdResult], checks: RunChecks) -> list[str]:
    """One line per thing that failed, naming it, for the summary and the status line."""
    failures = [f"threshold {verdict.threshold.key}: {condition_text(verdict)} "
                f"(observed {observed_text(verdict)})" for verdict in verdicts
                if not verdict.passed and not _unobserved_threshold(verdict, checks)]
    failures += [f"invariant {result.name}: {result.violations} violation{'s' * (result.violations != 1)}"
                 for result in checks.invariants.values() if not result.passed]
    if checks.reconciliation is not None and not checks.reconciliation.passed:
        failures.append(f"reconciliation: {checks.reconciliation.unexplained} unexplained rejection"
                        f"{'s' * (checks.reconciliation.unexplained != 1)} of "
                        f"{checks.reconciliation.client_rejections} the clients saw")
    failures += [probe_failure(probe) for probe in checks.hypothesis if not probe.ok and probe.phase == "before"]
    return failures


def _status(figures: RunFigures, checks: RunChecks, failures: list[str], deviations: list[str],
            verdicts: list[ThresholdResult]) -> tuple[RunStatus, str | None]:
    if checks.harness_error or checks.end_status == EndStatus.ERRORED:
        return RunStatus.ERRORED, f"harness error: {checks.harness_error or checks.end_reason}"
    if checks.target_error:
        return RunStatus.ABORTED, f"target error: {checks.target_error}"
    if checks.end_status == EndStatus.INTERRUPTED:
        reason = checks.end_reason or "interrupted"
        signalled = reason == "interrupted" or reason.startswith("interrupted by SIG")
        return RunStatus.INTERRUPTED, f"{reason} (Ctrl-C or SIGTERM)" if signalled else reason
    if not checks.ended and figures.status is None:
        return RunStatus.INTERRUPTED, "the journal has no `run end` record: the run was cut off"
    if checks.end_status == EndStatus.ABORTED:
        return RunStatus.ABORTED, f"aborted: {checks.end_reason or 'the run stopped early'}"
    lost = checks.invariants.get(LOST_TRACK)
    if lost is not None and not lost.passed:
        return RunStatus.ERRORED, (f"harness error: {lost.violations} started flows do not have exactly one end "
                                   "record; the harness lost track of them (its bookkeeping, not the target)")
    if failures:
        return RunStatus.FAILED, None
    if deviations:
        return RunStatus.DEVIATED, None
    unobserved = not_judged_reason(checks, verdicts)
    if unobserved is not None:
        return RunStatus.ABORTED, unobserved
    return RunStatus.COMPLETED, None


LOGGED_METRICS = frozenset({"rejections", "unmatched_logged_rejections"})
"""Threshold metrics counted from the replicas' log lines: not judged where a log was lost (its lines were not read)."""


def _lost_logs(checks: RunChecks) -> list[dict[str, Any]]:
    """Each log source lost during the run (`replica`, `from`, `why`), from the reconciliation or the `logs` record."""
    if checks.reconciliation is not None and checks.reconciliation.unobserved:
        return checks.reconciliation.unobserved
    return [{"replica": source.get("replica"), "from": source.get("unobserved_from"), "why": source.get("why")}
            for source in checks.log_sources if source.get("unobserved_from") is not None]


def _unobserved_threshold(verdict: ThresholdResult, checks: RunChecks) -> bool:
    """A failed threshold on what the logs said, in a run that lost a log: not judged, never the target's failure."""
    return not verdict.passed and verdict.threshold.metric in LOGGED_METRICS and bool(_lost_logs(checks))


def not_judged_reason(checks: RunChecks, verdicts: Sequence[ThresholdResult] = ()) -> str | None:
    """Why the run cannot pass though nothing it judged failed: client rejections fell where a replica's log was
    unobserved (a log source lost), or a threshold on the logged rejections failed in a run that lost a log, so
    what the logs would have said is not known (exit 3, never a pass or 1)."""
    lost = _lost_logs(checks)
    reconciliation = checks.reconciliation
    unjudged = reconciliation.not_judged if reconciliation is not None else 0
    thresholds = [verdict.threshold.key for verdict in verdicts if _unobserved_threshold(verdict, checks)]
    if not unjudged and not thresholds:
        return None
    spans = "; ".join(f"{span.get('replica')} from {_utc(span.get('from'))} ({span.get('why') or 'its log ended'})"
                      for span in lost[:3]) or "a replica's log"
    what = [f"{unjudged} client rejection{'s' * (unjudged != 1)}"] if unjudged else []
    what += [f"threshold {key}" for key in thresholds]
    return f"not judged: {', '.join(what)}, where a replica's log was unobserved: {spans}"


def _utc(t: Any) -> str:
    if not isinstance(t, int | float):
        return "?"
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S") + "Z"


# --- how a threshold verdict reads, shared by every output ------------------------------------


def threshold_dict(verdict: ThresholdResult) -> dict[str, Any]:
    """`ThresholdResult.as_dict()` plus the same numbers as people read them (250ms rather than 0.25)."""
    return {**verdict.as_dict(), "metric": verdict.threshold.metric, "aggregate": verdict.condition.aggregate,
            "op": verdict.condition.op, "expected": verdict.condition.value, "text": condition_text(verdict),
            "observed_text": observed_text(verdict)}


def condition_text(verdict: ThresholdResult) -> str:
    """The condition as written in a scenario: `p(95) < 250ms`, `>= 0.95`, `== 0`."""
    condition = verdict.condition
    shown = "" if condition.aggregate in ("count", "ratio", "slope") and verdict.threshold.metric not in DISTRIBUTIONS \
        else f"{condition.aggregate} "
    return f"{shown}{condition.op} {format_value(verdict, condition.value)}"


def observed_text(verdict: ThresholdResult) -> str:
    """The observed value, labelled like k6 does (`p(95)=183ms`); `no samples` when there were none."""
    if verdict.observed is None:
        return "no samples"
    label = verdict.condition.aggregate
    if verdict.threshold.metric in RATIOS:
        label = "ratio"
    return f"{label}={format_value(verdict, verdict.observed)}"


def format_value(verdict: ThresholdResult, value: float) -> str:
    return format_number(verdict.threshold.metric, verdict.condition.aggregate, value)


def describe_detail(detail: Any, limit: int = 160) -> str:
    """A record's `detail` on one line: the failed thresholds of a hypothesis probe, else the text, cut short.

    A hypothesis probe's detail is a list of `ThresholdResult.as_dict()`s; printing the list raw would
    bury the one threshold that broke among the ones that held.
    """
    if isinstance(detail, list) and detail and all(isinstance(item, dict) and "passed" in item for item in detail):
        shown = [item for item in detail if not item["passed"]] or detail
        text = "; ".join(probe_item(item) for item in shown)
    elif isinstance(detail, list | tuple):
        text = "; ".join(str(item) for item in detail)
    else:
        text = "" if detail is None else str(detail)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def probe_title(probe: HypothesisResult, started: float | None = None) -> str:
    """`steady state during chaos (flows that ended 30.0s–35.0s)`: which probe, over which window."""
    at = probe.t - started if probe.t is not None and started is not None else None
    window = window_text(probe.window, at)
    return f"steady state {probe.phase} chaos" + (f" ({window})" if window else "")


def probe_failure(probe: HypothesisResult, started: float | None = None) -> str:
    """A probe that did not hold, in one line: what failed, or what it could not judge and why that fails it."""
    if probe.judged or probe.failed_judged:
        return f"{probe_title(probe, started)} failed: {describe_detail(probe.detail)}"
    return (f"{probe_title(probe, started)} not steady: {describe_detail(probe.detail)}; a condition not judged is not "
            'steady unless hypothesis_unjudged = "pass"')


def damaged(verdict: RunVerdict, unreadable: int, forged: str | None = None) -> RunVerdict:
    """`verdict` as a harness error (exit 4) when it was decided without `unreadable` journal lines: neither a pass
    nor the target's failure can be trusted. An interrupted run keeps its exit 130 (it did not finish either way).
    `forged`: a worker's part holds records no worker writes (`JournalRead.foreign_line`), said first."""
    verdict = replace(verdict, forged=forged)
    if verdict.exit_code not in (ExitCode.PASSED, ExitCode.FAILED, ExitCode.TARGET):
        return verdict
    reason = (f"the journal is damaged: {unreadable} line{'s' * (unreadable != 1)} could not be read, and the "
              f"verdict was decided without them (exit 4; it would have been {int(verdict.exit_code)})")
    if forged is not None:
        reason = f"{forged}: {reason}"
    return replace(verdict, status=RunStatus.ERRORED, exit_code=ExitCode.HARNESS, reason=reason,
                   problems=[reason, *verdict.problems])
