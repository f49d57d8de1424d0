"""One trial: the scenario with a drawn schedule, run by `run`'s own `Run` in this process, judged by its verdict.

The trial's scenario is the user's file with `[[chaos]]` replaced by the schedule's steps, and
its duration, seed and name set (`[hunt]` dropped): written as TOML, read back by the scenario
model (a drawn step that does not validate is the harness's bug) and handed to `Run` with that
very text, so the trial's results folder holds a `scenario.toml` that `mrtr-harness run` reruns
exactly as drawn. A capacity sweep runs its steps the same way: one `Run` per step, in this
process, its folder under the sweep's. The run's chaos, rollback, Ctrl-C and results are the
run's own.

The verdict is read back from the trial's summary.json (as untrusted data: a typed parse of the
keys it needs; damaged, the hunt stops as a harness error) into the property's failures (`Property`):
each invariant violated, the -32602 rejections no logged line explains, each condition of the steady
state (`[hypothesis]`) that failed during or after the chaos (its window and condition its name: did
the deployment come back?), and each `[expect]` threshold that failed when the hunt counts `[expect]`,
each with its signature (`harness.hunt.signature`); and the rejections by the reason the replicas
logged. A control trial has no chaos, so the run probes no steady state: its `[expect]` holds the
`[hypothesis]` conditions, judged over its whole run.

A trial judges only what was observed: one whose logs lost a replica (a log source failed or
ended during it) or whose chaos did not act (an action that failed, or fewer actions than its
schedule has) is "not judged", whatever else it says. So is one that broke nothing but whose
steady state failed before the chaos began (the chaos had no fair start), or could not be judged
during or after it (no flow ended in the window), or whose run aborted. It is never a finding and
so never shrunk: a schedule that was not tried as drawn, or watched only in part, proves nothing.

Import this module only after Locust's gevent patching (the command imports `locust` first).
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from harness.config.scenario import Scenario, parse_scenario
from harness.config.thresholds import Judged, parse_thresholds
from harness.errors import ExitCode, MrtrHarnessError
from harness.hunt.model import Failure, Schedule, step_table
from harness.hunt.signature import expectation_failure, invariant_failure, unexplained_failure
from harness.hunt.toml_file import document
from harness.report.verdict import RunStatus

ROLLBACK = "rollback"
"""The chaos row of the run's own rollback (`harness.chaos.schedule`), beside the schedule's actions."""
NO_CHAOS = "no chaos"
"""The window of a control trial's steady state: its whole run, which had no chaos."""


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


@dataclass(frozen=True)
class Property:
    """What no trial may show. Always: an invariant violated, an unexplained -32602, the steady state
    (`[hypothesis]`) failed during or after the chaos. `[expect]` only when `expect` (`[hunt] expect`): it is the
    healthy outcome `run` judges, and chaos the hunt draws may cost a healthy deployment some of it (a rejection
    its log explains is no bug)."""

    expect: bool = False
    steady_state: frozenset[tuple[str, str]] = frozenset()
    """Each `[hypothesis]` (key, condition): a control trial's `[expect]` holds them, judged over its whole run."""

    @classmethod
    def of(cls, scenario: Scenario, expect: bool) -> Property:
        conditions = frozenset((threshold.key, str(condition)) for threshold in parse_thresholds(scenario.hypothesis)
                               for condition in threshold.conditions)
        return cls(expect=expect, steady_state=conditions)


def control_expect(scenario: Scenario) -> dict[str, str | list[str]]:
    """A control trial's `[expect]`: the scenario's, with the `[hypothesis]` conditions (the steady state over the
    whole run, which has no chaos for the run to probe it around)."""
    merged = dict(scenario.expect)
    for key, conditions in scenario.hypothesis.items():
        mine = [merged[key]] if isinstance(merged.get(key), str) else list(merged.get(key) or [])
        more = [conditions] if isinstance(conditions, str) else list(conditions)
        both = [*mine, *(text for text in more if text not in mine)]
        merged[key] = both[0] if len(both) == 1 else both
    return merged


def trial_scenario(base: Base, schedule: Schedule, seed: int, name: str, header: str = "",
                   control: bool = False) -> tuple[Scenario, str]:
    """The trial's scenario and its TOML text (a `control` trial's `[expect]` also holds the `[hypothesis]`);
    ValueError when the schedule does not validate (a bug of the drawing or the shrinking: the text, with the
    model's words, says which step)."""
    data = copy.deepcopy(base.data)
    data.pop("hunt", None)
    if control and base.scenario.hypothesis:
        data["expect"] = control_expect(base.scenario)
    data["name"], data["seed"], data["duration"] = name, seed, schedule.duration
    data["chaos"] = [step_table(step) for step in schedule.steps]
    if schedule.arrival_rate is not None:
        data.setdefault("load", {})["arrival_rate"] = schedule.arrival_rate
    text = document(data, header)
    try:
        return parse_scenario(text, f"trial {name}"), text
    except MrtrHarnessError as exc:
        raise ValueError(f"a schedule that does not validate: {exc}") from None


def reuse_said(scenario: Scenario) -> str:
    """What the hunt's trials share, for its start line: with `[hunt] reuse` on an embedded shop, the replicas'
    zygote (`harness.targets.zygote`)."""
    if scenario.target.kind != "embedded":
        return f"reuse: none (a {scenario.target.kind} target is started and stopped by itself)"
    if scenario.hunt is not None and not scenario.hunt.reuse:
        return "reuse: off (each trial starts its own zygote; --reuse: one for the hunt)"
    return ("reuse: the replicas' zygote, started once for the hunt (each trial still starts its own API, replicas, "
            "store and keys; --no-reuse: one per trial)")


@contextmanager
def shared_shop_parts(scenario: Scenario, folder: Path) -> Iterator[None]:
    """The block in which every trial's embedded shop forks its replicas from one zygote, its log under `folder`;
    nothing shared when reuse is off or the target is not embedded. It is stopped by its PID at the end, and dies
    with the hunt like every process the harness starts."""
    if scenario.target.kind != "embedded" or (scenario.hunt is not None and not scenario.hunt.reuse):
        yield
        return
    from harness.targets.zygote import lent_zygote

    with lent_zygote(folder / "zygote.log"):
        yield


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
    """Why the trial is not judged (its logs lost a replica, its chaos did not act, ...); None: judged."""
    uncounted: tuple[str, ...] = ()
    """The `[expect]` keys that failed though the property does not count `[expect]`."""


def judge(folder: Path, steps: int = 0, judged_by: Property = Property(expect=True)) -> Judgement:
    """The trial's failures and reasons, read from its results folder's summary.json; `steps`: how many chaos actions
    its schedule has (fewer in the summary: its chaos did not act); `judged_by`: the hunt's property."""
    summary = read_summary(folder / "summary.json")
    reasons = {reason: sum(replicas.values()) for reason, replicas in sorted(summary.rejections.by_reason.items())}
    unjudged = _unobserved(summary, steps)
    if unjudged is not None:
        return Judgement((), reasons, summary.status.value, (unjudged, *summary.problems), unjudged)
    failures = [invariant_failure(name, row.detail if isinstance(row.detail, list) else [row.detail])
                for name, row in sorted(summary.invariants.items()) if not row.passed]
    if summary.reconciliation is not None and not summary.reconciliation.passed:
        failures.append(unexplained_failure(summary.reconciliation.examples.get("unexplained", [])))
    for failure in [*_thresholds_failed(summary, judged_by), *_deviations(summary)]:
        if failure not in failures:
            failures.append(failure)
    uncounted = tuple(dict.fromkeys(row.threshold for row in summary.thresholds if not row.passed
                                    and (row.threshold, row.condition) not in judged_by.steady_state
                                    and not judged_by.expect))
    unjudged = None if failures else _no_fair_trial(summary)
    problems = (unjudged, *summary.problems) if unjudged is not None else tuple(summary.problems)
    return Judgement(tuple(failures), reasons, summary.status.value, problems, unjudged, uncounted)


def _thresholds_failed(summary: _Summary, judged_by: Property) -> list[Failure]:
    """The failed threshold rows the property counts: a control trial's steady state, and `[expect]` when counted."""
    failures = []
    for row in summary.thresholds:
        if row.passed:
            continue
        if (row.threshold, row.condition) in judged_by.steady_state:
            failures.append(Failure("hypothesis", f"{NO_CHAOS}: {row.threshold} {row.condition}"))
        elif judged_by.expect:
            failures.append(expectation_failure(row.threshold, row.text, row.metric, summary.rejections.by_reason))
    return failures


def _deviations(summary: _Summary) -> list[Failure]:
    """Each steady-state condition judged and failed during or after the chaos: the deployment did not stay or come
    back steady. Its window and condition are its name, so a shrink keeps the same one. None when the steady state
    failed before the chaos began: what followed is not the chaos's doing."""
    if any(not probe.ok and probe.phase == "before" and probe.failed_judged() for probe in summary.hypothesis):
        return []
    return [Failure("hypothesis", f"{probe.phase}: {item.threshold} {item.condition}")
            for probe in summary.hypothesis if not probe.ok and probe.phase != "before"
            for item in probe.items() if item.judged and not item.passed]


def _no_fair_trial(summary: _Summary) -> str | None:
    """Why a trial that broke nothing still proves nothing, in one line: its steady state failed before the chaos
    began, or whether it came back could not be judged, or its run aborted; None: it held.

    A window with nothing to judge (no flow ended in it) is not steady by the run's rule, unless the scenario says
    `hypothesis_unjudged = "pass"`. Here: before the chaos, it proves no unfair start (the control trials showed
    the steady state without chaos); during the chaos, the flows it would have judged end after it, where the
    "after" window judges them; after the chaos, recovery is unknown: not judged."""
    after = [probe for probe in summary.hypothesis if probe.phase == "after"]
    for probe in summary.hypothesis:
        if probe.ok or (not probe.failed_judged() and (probe.phase == "before" or (probe.phase == "during"
                                                                                    and after))):
            continue
        if probe.phase == "before":
            return (f"not judged: the steady state failed before the chaos began ({probe.said()}): the chaos had no "
                    "fair start")
        return f"not judged: the steady state {probe.phase} the chaos could not be judged ({probe.said()})"
    if summary.status is RunStatus.ABORTED and summary.exit_code == ExitCode.FAILED:
        return f"not judged: the run aborted ({summary.problems[0] if summary.problems else 'no reason given'})"
    return None


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
    condition: str = ""
    text: str = ""
    metric: str = ""


class _ProbeItem(_Read):
    """One condition of a steady-state probe (`ThresholdResult.as_dict()`, with `judged`)."""

    threshold: str
    condition: str
    passed: bool
    judged: bool = True
    why: str | None = None


class _Probe(_Read):
    """One probe of the steady state (docs/summary.md, HypothesisRow)."""

    phase: Literal["before", "during", "after"]
    ok: bool
    detail: list[_ProbeItem] | str | None = None

    def items(self) -> list[_ProbeItem]:
        """Its conditions; none when its detail is not a list of them (then it is judged by `ok` alone)."""
        return self.detail if isinstance(self.detail, list) else []

    def failed_judged(self) -> bool:
        """A condition it judged did not hold (or its detail cannot say: counted as one)."""
        return any(item.judged and not item.passed for item in self.items()) or not isinstance(self.detail, list)

    def said(self) -> str:
        """What did not hold, in a few words: each failed or unjudged condition, or the probe's own text."""
        parts = [f"{item.threshold} {item.condition}" + (f": {item.why}" if not item.judged and item.why else "")
                 for item in self.items() if not item.passed]
        return "; ".join(parts) or str(self.detail or "no detail")


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
    hypothesis: list[_Probe] = []


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
