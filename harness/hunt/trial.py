"""One trial: the scenario with a drawn schedule, run by `run`'s own `Run` in this process, judged by its verdict.

The trial's scenario is the user's file with `[[chaos]]` replaced by the schedule's steps, and
its duration, seed and name set (`[hunt]` dropped): written as TOML, read back by the scenario
model (a drawn step that does not validate is the harness's bug) and handed to `Run` with that
very text, so the trial's results folder holds a `scenario.toml` that `mrtr-harness run` reruns
exactly as drawn. A capacity sweep runs its steps the same way: one `Run` per step, in this
process, its folder under the sweep's. The run's chaos, rollback, Ctrl-C and results are the
run's own.

The verdict is read back from the trial's summary.json (as untrusted data: a typed parse of the
keys it needs; damaged, the hunt stops as a harness error) into the property's failures:
each invariant violated, the -32602 rejections no logged line explains, each `[expect]`
threshold that failed, each with its signature (`harness.hunt.signature`); and the rejections
by the reason the replicas logged.

A trial judges only what was observed: one whose logs lost a replica (a log source failed or
ended during it) or whose chaos did not act (an action that failed, or fewer actions than its
schedule has) is "not judged", whatever else it says. It is never a finding and so never
shrunk: a schedule that was not tried as drawn, or watched only in part, proves nothing.

Import this module only after Locust's gevent patching (the command imports `locust` first).
"""

from __future__ import annotations

import copy
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from harness.config.scenario import Scenario, parse_scenario
from harness.config.thresholds import Judged
from harness.errors import MrtrHarnessError
from harness.hunt.model import Failure, Schedule, step_table
from harness.hunt.signature import expectation_failure, invariant_failure, unexplained_failure
from harness.hunt.toml_file import document
from harness.report.verdict import RunStatus

ROLLBACK = "rollback"
"""The chaos row of the run's own rollback (`harness.chaos.schedule`), beside the schedule's actions."""


class TrialDamaged(MrtrHarnessError):
    """A trial's summary.json could not be read: the hunt cannot judge it (exit 4)."""


@dataclass(frozen=True)
class Base:
    """The user's scenario, read once: its data (for each trial's file), its model and where it came from."""

    data: dict[str, Any]
    scenario: Scenario
    source: str
    text: str = ""
    """The file's own text, which the minimal failing scenario is written from (its keys in the user's order)."""

    @classmethod
    def read(cls, path: Path, overrides: dict[str, Any] | None = None) -> Base:
        """The file and the command line's overrides (dotted keys), validated as `run` validates; a path the file
        gives relative to itself (`[target.auth] file`) made absolute, as `run` reads it."""
        from harness.config.scenario import load_scenario

        scenario = load_scenario(path, overrides)  # ScenarioError: exit 2, nothing started
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text)
        for dotted, item in (overrides or {}).items():
            *parents, leaf = dotted.split(".")
            table = data
            for part in parents:
                table = table.setdefault(part, {})
            table[leaf] = item
        auth = scenario.target.auth
        if auth is not None and auth.file is not None:
            data["target"]["auth"]["file"] = auth.file  # anchored by load_scenario
        return cls(data, scenario, str(path), text)


def trial_scenario(base: Base, schedule: Schedule, seed: int, name: str, header: str = "") -> tuple[Scenario, str]:
    """The trial's scenario and its TOML text; ValueError when the schedule does not validate (a bug of the
    drawing or the shrinking: the text, with the model's words, says which step)."""
    data = copy.deepcopy(base.data)
    data.pop("hunt", None)
    data["name"], data["seed"], data["duration"] = name, seed, schedule.duration
    data["chaos"] = [step_table(step) for step in schedule.steps]
    if schedule.arrival_rate is not None:
        data.setdefault("load", {})["arrival_rate"] = schedule.arrival_rate
    text = document(data, header)
    try:
        return parse_scenario(text, f"trial {name}"), text
    except MrtrHarnessError as exc:
        raise ValueError(f"a schedule that does not validate: {exc}") from None


def run_trial(scenario: Scenario, text: str, root: Path, log: IO[str],
              judged: Judged = Judged.EXPECT) -> tuple[int, Path, bool]:
    """Run the trial as `run` does (results under `root`, what the run says into `log`; `judged`: the table it is
    judged by, [reproduces] as `run --reproduce` judges it): (exit code, its results folder, whether it was
    interrupted)."""
    from harness.run.run import Run, RunOptions

    run = Run(scenario, text, RunOptions(results_root=root, progress=False, stream=log, judged=judged))
    code = run.execute()  # Ctrl-C stops the trial (chaos rolled back, results written); the hunt's handlers after
    return code, run.folder, run.interrupted


@dataclass(frozen=True)
class Judgement:
    """What a trial's verdict says, as the hunt reads it."""

    failures: tuple[Failure, ...]
    """The property's failures: empty when it held."""
    reasons: dict[str, int]
    """Rejections by the reason the replicas logged."""
    status: str
    """The run's status (completed, failed, ...)."""
    problems: tuple[str, ...]
    """The run's own lines for what failed (a chaos action that did not happen is one, and no failure of the
    property: that schedule was not tried as drawn)."""
    unjudged: str | None = None
    """Why the trial is not judged (its logs lost a replica, or its chaos did not act); None: judged."""


def judge(folder: Path, steps: int = 0) -> Judgement:
    """The trial's failures and reasons, read from its results folder's summary.json; `steps`: how many chaos actions
    its schedule has (fewer in the summary: its chaos did not act)."""
    summary = read_summary(folder / "summary.json")
    reasons = {reason: sum(replicas.values()) for reason, replicas in sorted(summary.rejections.by_reason.items())}
    unjudged = _unobserved(summary, steps)
    if unjudged is not None:
        return Judgement((), reasons, summary.status.value, (unjudged, *summary.problems), unjudged)
    failures = [invariant_failure(name, row.detail if isinstance(row.detail, list) else [row.detail])
                for name, row in sorted(summary.invariants.items()) if not row.passed]
    if summary.reconciliation is not None and not summary.reconciliation.passed:
        failures.append(unexplained_failure(summary.reconciliation.examples.get("unexplained", [])))
    for row in summary.thresholds:
        failure = expectation_failure(row.threshold, row.text, row.metric, summary.rejections.by_reason)
        if not row.passed and failure not in failures:
            failures.append(failure)
    return Judgement(tuple(failures), reasons, summary.status.value, tuple(summary.problems))


def _unobserved(summary: _Summary, steps: int) -> str | None:
    """Why a trial cannot be judged, in one line: a replica's log lost, or chaos that did not act; None: it can."""
    lost = sorted({source.replica for source in summary.rejections.log_sources if source.unobserved_from is not None}
                  | {span.replica for span in (summary.reconciliation.unobserved if summary.reconciliation else ())})
    if lost:
        return f"not judged: the log of {', '.join(lost)} was lost during the trial"
    acted = [row for row in summary.chaos if row.action != ROLLBACK]  # the rollback is the run's, not the schedule's
    failed = [row.action for row in acted if row.ok is not True]
    if failed or len(acted) < steps:
        what = f"{', '.join(failed)} did not succeed" if failed else f"{steps - len(acted)} of {steps} never ran"
        return f"not judged: its chaos did not act as drawn ({what})"
    return None


class _Read(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Passed(_Read):
    passed: bool


class _Span(_Read):
    replica: str


class _Invariant(_Passed):
    detail: Any = None
    """Its examples (a list of lines), or null."""


class _Reconciliation(_Passed):
    unobserved: list[_Span] = []
    examples: dict[str, list[Any]] = {}


class _LogSource(_Read):
    replica: str
    unobserved_from: float | None = None


class _Chaos(_Read):
    action: str
    ok: bool | None = None


class _Threshold(_Passed):
    threshold: str
    text: str = ""
    metric: str = ""


class _Rejections(_Read):
    by_reason: dict[str, dict[str, int]]
    log_sources: list[_LogSource] = []


class _Summary(_Read):
    """The keys of summary.json a trial is judged by (docs/summary.md), typed; the rest is not read."""

    status: RunStatus
    exit_code: int
    problems: list[str]
    thresholds: list[_Threshold]
    invariants: dict[str, _Invariant]
    reconciliation: _Reconciliation | None
    rejections: _Rejections
    chaos: list[_Chaos] = []


def read_summary(path: Path) -> _Summary:
    """summary.json, parsed as data into the keys a trial needs; TrialDamaged (exit 4) when it is not that."""
    try:
        return _Summary.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise TrialDamaged(f"{path}: cannot read the trial's summary: {exc.strerror}") from None
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in error["loc"]) or "(top level)"
        raise TrialDamaged(f"{path}: not a summary this harness wrote ({where}: {error['msg']})") from None
