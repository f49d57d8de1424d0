"""What a hunt works with: a schedule (chaos steps and a trial's knobs), a trial, a failure, a shrink's path.

Plain data, shared by the search (which draws and runs schedules), the shrinker (which makes them
smaller) and the outputs (the journal, the minimal scenario, the page). A chaos step is held as the
`[[chaos]]` table a scenario file would hold (`action`, `at` and the action's own keys, in the units the
file uses), so a schedule can be written back into TOML and read by `validate` exactly as drawn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

FailureKind = Literal["invariant", "unexplained", "expectation"]
"""invariant: a ledger invariant was violated; unexplained: a logged reason's rejections were not all
explained (matched to a logged line); expectation: an `[expect]` condition failed."""

TrialPurpose = Literal["search", "shrink", "reproduce"]


@dataclass(frozen=True)
class Schedule:
    """One trial's chaos and knobs: what the search draws and the shrinker reduces."""

    steps: tuple[dict[str, Any], ...]
    """Each step a `[[chaos]]` table as a scenario file holds it (treat as read-only)."""
    duration: float
    """Seconds of load (real)."""
    arrival_rate: float | None = None
    """The open model's flows per second; None: the scenario's own load."""


@dataclass(frozen=True)
class Failure:
    """What broke, as "the same failure" is judged while shrinking: the kind and its name."""

    kind: FailureKind
    name: str
    """The invariant's name, the logged reason, or the `[expect]` key."""

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


@dataclass
class Trial:
    """One real run of a schedule, judged."""

    index: int
    seed: int
    schedule: Schedule
    purpose: TrialPurpose
    failures: tuple[Failure, ...] = ()
    """Empty: the property held."""
    reasons: dict[str, int] = field(default_factory=dict)
    """Rejections by the reason the replicas logged."""
    exit_code: int = 0
    folder: str = ""
    """The trial's results folder, relative to the hunt's."""
    seconds: float = 0.0
    """Wall time the trial took, start to verdict."""
    unjudged: str | None = None
    """Why it was not judged (its logs lost a replica, its chaos did not act): never a finding; None: judged."""


@dataclass
class ShrinkStep:
    """One candidate the shrinker tried, and whether it kept failing the same way."""

    schedule: Schedule
    what: str
    """What changed from the schedule it came from ("dropped step 2", "rate 4 -> 2/s")."""
    runs: int
    failed: int
    accepted: bool
    """It failed the same way in at least k of n runs, so the shrink went on from it."""


@dataclass
class HuntResult:
    """Everything a hunt found: its trials, the failure, the shrink path and the minimal schedule."""

    scenario: str
    seed: int
    trials: list[Trial] = field(default_factory=list)
    found: Trial | None = None
    """The first failing trial of the search; None: nothing broke within the budget."""
    failure: Failure | None = None
    """The failure the shrink kept (one of `found.failures`)."""
    shrink_path: list[ShrinkStep] = field(default_factory=list)
    shrink_stopped_by: str = ""
    """Why the shrink ended: "done" (no smaller candidate failed: 1-minimal), "runs" or "time" (its budget: the
    smallest so far, maybe not minimal); "": no shrink."""
    minimal: Schedule | None = None
    reproduction: tuple[int, int] | None = None
    """The minimal schedule's reruns: (failed the same way, runs)."""
    coverage: dict[tuple[str, str, str], int] = field(default_factory=dict)
    """How often each (action, replica, timing) was tried in the search."""
    stopped_by: str = ""
    """Why the search ended: "found", "trials", "time" or "interrupted"."""


def describe(schedule: Schedule) -> str:
    """A schedule's steps in a few words: `restart r2 @3.1s, network latency all @5.0s 2.4s` ("" for none)."""
    parts = []
    for step in schedule.steps:
        whom = f" r{step['replica']}" if "replica" in step else ""
        kind = f" {step['fault']}" if "fault" in step else f" {step['order']}" if "order" in step else ""
        lasting = f" {_seconds(step['duration'])}" if "duration" in step else ""
        parts.append(f"{step.get('action', '?')}{kind}{whom} @{_seconds(step.get('at', 0))}{lasting}")
    return ", ".join(parts)


def _seconds(value: object) -> str:
    """A step's time as drawn (seconds: `3.1s`) or as a file wrote it (`"1500ms"`)."""
    return f"{value:g}s" if isinstance(value, int | float) else str(value)
