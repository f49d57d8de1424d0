"""What a hunt's search tried, counted where it acted: cells of (a step's variant, whom it acts on, its timing).

A step's variant is its action and the value of each parameter that chooses what the action
does, read off the action's declaration (`harness.config.fields`: its literal and flag fields,
never named here): a rotation's `order`, a clock's `behind`, a network fault's kind and that
fault's own literals (`reset when=mid-answer`, `latency direction=to-client`). A value the step
leaves out is its default, so a step counts in the cell of the value it acted with. Whom is a
replica's label, `all` (every replica) or `auth`; the timing is the third of the trial the step
starts in. So "a reset mid-answer on r2, late" is one cell, and the cells a hunt's bounds allow
(`cells`) are what its coverage is out of.

A judged trial's step counts only where it acted on rounds in flight, as the trial's
summary.json says (`acted`): a network fault when some round was sent into its window on a
replica it named (its chaos row's `rounds`); any other action when it succeeded and started while
the load ran and sent rounds (summary.json counts rounds by window for network faults only). A
step whose chaos row is missing or failed counts nowhere; an unreadable summary counts nothing.

What 0 failures is worth (`residual_risk`): after 0 failures in n judged trials, the exact
one-sided 95% upper bound on the per-trial failure rate is 1 - 0.05^(1/n) (Clopper-Pearson; about
3/n, the "rule of three"). It bounds the rate for schedules drawn as these were, on this target,
at this trial length: nothing more. The health checks (`health`) say, in Hypothesis's spirit,
when the search's own numbers make its verdict weak.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from harness.config.chaos import CHAOS_ACTIONS, FAULT_KEYS, ChaosAction, ChaosStep, NetworkAction
from harness.config.fields import FieldFacts, model_facts
from harness.hunt.draw import TIMINGS, Space, timing
from harness.hunt.model import HuntResult, Schedule, Trial
from harness.hunt.records import Residual

Cell = tuple[str, str, str]
"""(variant, whom, timing): `rotate-keys order=minter-first`, `r2`, `late`."""

CONFIDENCE = 0.95
"""The residual-risk bound's one-sided confidence."""
_CHOSEN_BY = ("literal", "flag")
"""The field kinds that choose what an action does (one of a few words, true or false): a cell's parameters."""


def parameters(model: type[ChaosAction], fault: str | None = None) -> list[FieldFacts]:
    """The fields that choose what a step of `model` does: its literals and flags (not `action`); a network fault's
    kind, then that fault's own (`fault` given: only its keys)."""
    chosen = [facts for name, facts in model_facts(model).items() if facts.kind in _CHOSEN_BY and name != "action"]
    if model is NetworkAction and fault is not None:
        chosen = [facts for facts in chosen if facts.name == "fault" or facts.name in FAULT_KEYS[fault]]
    return chosen


def variant(step: ChaosStep) -> str:
    """A step's action and the values of its parameters: `network fault=reset when=mid-answer`, `restart`."""
    model = type(step)
    fault = getattr(step, "fault", None) if model is NetworkAction else None
    chosen = [f"{facts.name}={_word(getattr(step, facts.name))}" for facts in parameters(model, fault)]
    return " ".join([step.action, *chosen])


def variants(action: str) -> list[str]:
    """Every variant of an action: each combination of its parameters' values (a network fault's own only)."""
    model = CHAOS_ACTIONS[action]
    if model is NetworkAction:
        kinds = model_facts(model)["fault"].choices
        return [name for fault in kinds for name in _combinations(
            f"{action} fault={fault}", [facts for facts in parameters(model, fault) if facts.name != "fault"])]
    return _combinations(action, parameters(model))


def _combinations(action: str, facts: list[FieldFacts]) -> list[str]:
    choices = [[f"{field.name}={_word(value)}" for value in _values(field)] for field in facts]
    return [" ".join([action, *chosen]) for chosen in itertools.product(*choices)]


def _values(field: FieldFacts) -> tuple[Any, ...]:
    return (False, True) if field.kind == "flag" else field.choices


def _word(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def step_cell(step: ChaosStep, labels: Sequence[str], duration: float) -> Cell:
    """The cell a step of a schedule of `duration` seconds is in."""
    return variant(step), step.journal_target(labels), timing(step.at, duration)


def cells(space: Space, labels: Sequence[str]) -> list[Cell]:
    """Every cell the space can draw: what coverage is out of."""
    return [(name, CHAOS_ACTIONS[action].whom(replica, labels), when)
            for action in space.actions for name in variants(action) for replica in space.replica_choices(action)
            for when in TIMINGS]


# --- what acted, from the trial's summary.json ---------------------------------------------------


class _Read(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Row(_Read):
    action: str
    target: str | None = None
    start: float | None = None
    ok: bool | None = None
    rounds: dict[str, dict[str, int]] | None = None


class _Flows(_Read):
    total: int


class _Summary(_Read):
    """The keys of summary.json (docs/summary.md) that say whether chaos met rounds; the rest is not read."""

    duration: float
    flows: _Flows
    chaos: list[_Row] = []


def acted(folder: Path, schedule: Schedule, labels: Sequence[str]) -> list[bool]:
    """For each step of the schedule, whether it acted on rounds in flight, from the trial's summary.json (in
    `folder`): its chaos row, matched in order by action and whom, succeeded and met rounds (see the module's
    docstring). An unreadable summary: no step did (the coverage fails closed: it never counts what it cannot see)."""
    try:
        summary = _Summary.model_validate_json((folder / "summary.json").read_bytes())
    except (OSError, ValidationError):
        return [False] * len(schedule.steps)
    rows = list(summary.chaos)
    found = []
    for step in schedule.steps:
        whom = step.journal_target(labels)
        row = next((row for row in rows if row.action == step.action and row.target == whom), None)
        if row is not None:
            rows.remove(row)
        found.append(row is not None and _met_rounds(row, summary))
    return found


def _met_rounds(row: _Row, summary: _Summary) -> bool:
    if row.ok is not True:
        return False
    if row.rounds is not None:  # a network fault: the rounds sent into its window, on the replicas it named
        return any(count > 0 for outcomes in row.rounds.values() for count in outcomes.values())
    return row.start is not None and 0 <= row.start < summary.duration and summary.flows.total > 0


def count(coverage: dict[Cell, int], trial: Trial, folder: Path, labels: Sequence[str]) -> None:
    """Add a search trial's steps to `coverage`: only a judged trial's (not judged: it proves nothing), and only the
    steps that acted on rounds in flight (`acted`, read from `folder`, the trial's results folder)."""
    if trial.unjudged is not None or not trial.folder:
        return
    duration = trial.schedule.duration
    for step, met in zip(trial.schedule.steps, acted(folder, trial.schedule, labels), strict=True):
        if met:
            key = step_cell(step, labels, duration)
            coverage[key] = coverage.get(key, 0) + 1


# --- what "nothing broke" is worth -----------------------------------------------------------------


def judged(trials: Iterable[Trial]) -> list[Trial]:
    """The search's trials that were judged: the property failed, or held in a run that passed (not an interrupted
    run, a harness or target error, or a trial not judged)."""
    return [trial for trial in trials if trial.purpose == "search"
            and (trial.failures or (trial.unjudged is None and trial.exit_code == 0))]


def residual_risk(trials: int, confidence: float = CONFIDENCE) -> float | None:
    """The exact one-sided upper bound on the per-trial failure rate after 0 failures in `trials` judged trials
    (Clopper-Pearson: the rate p at which (1 - p)^n = 1 - confidence); None when none was judged."""
    if trials <= 0:
        return None
    return 1.0 - (1.0 - confidence) ** (1.0 / trials)


def residual_line(result: HuntResult) -> str | None:
    """"0 failures in 20 judged trials: the per-trial failure rate is below 13.9% (95% upper bound)"; None when a
    trial failed (a failure found is no bound)."""
    if result.found is not None:
        return None
    n = len(judged(result.trials))
    bound = residual_risk(n)
    if bound is None:
        return "no trial was judged: nothing bounds the failure rate"
    return (f"0 failures in {n} judged trial{'s' * (n != 1)}: the per-trial failure rate of schedules drawn so is "
            f"below {100 * bound:.1f}% ({100 * CONFIDENCE:g}% upper bound)")


def coverage_rows(counted: Mapping[Cell, int]) -> list[dict[str, Any]]:
    """The counted cells as the journal's `end` record and hunt.json hold them, one row each, in cell order."""
    return [{"action": variant.split()[0], "variant": variant, "target": whom, "timing": when, "trials": count}
            for (variant, whom, when), count in sorted(counted.items())]


def residual_record(result: HuntResult) -> Residual:
    """The residual risk and health checks as plain data, for the hunt's journal's end record."""
    n = len(judged(result.trials))
    bound = residual_risk(n) if result.found is None else None
    return {"judged": n, "residual_risk": round(bound, 6) if bound is not None else None,
            "confidence": CONFIDENCE, "health": health(result)}


def health(result: HuntResult) -> list[str]:
    """What makes the search's verdict weak, one line each (none: nothing to say): most search trials not judged;
    trials judged but no step acting on a round in flight."""
    search = [trial for trial in result.trials if trial.purpose == "search"]
    unjudged = [trial for trial in search if trial.unjudged is not None]
    lines = []
    if search and 2 * len(unjudged) > len(search):
        lines.append(f"most trials not judged ({len(unjudged)} of {len(search)}): the coverage and the bound count "
                     "only judged ones")
    if judged(search) and not any(count > 0 for count in result.coverage.values()):
        lines.append("no fault touched a round in flight: the trials held without chaos meeting the load")
    return lines


def tried(coverage: Mapping[Cell, int], allowed: Sequence[Cell]) -> set[Cell]:
    """The allowed cells counted at least once."""
    within = set(allowed)
    return {key for key, times in coverage.items() if times > 0 and key in within}
