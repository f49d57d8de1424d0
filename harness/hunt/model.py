"""What a hunt works with: a schedule (chaos steps and a trial's knobs), a trial, a failure, a shrink's path.

Plain data, shared by the search (which draws and runs schedules), the shrinker (which makes them
smaller) and the outputs (the journal, the minimal scenario, the page). A chaos step is its action's
validated model from the chaos registry (`harness.config.chaos`), as a scenario's `[[chaos]]` step is:
the draw and the shrink make one from a table (`chaos_step`), so a step that does not validate is never
held, and every reader asks the model (`step.at` is seconds). A step is written back (each trial's
`scenario.toml`, hunt.jsonl, the minimal scenario) as the keys it was given, no default added
(`step_table`), so a schedule reads back exactly as drawn.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import TypeAdapter

from harness.config.chaos import ChaosStep

FailureKind = Literal["invariant", "unexplained", "expectation", "hypothesis"]
"""invariant: a ledger invariant was violated; unexplained: a logged reason's rejections were not all
explained (matched to a logged line); expectation: an `[expect]` condition failed; hypothesis: the steady state
(`[hypothesis]`) failed during or after the chaos (or, in a control trial, over the whole run without chaos): its
name is the window and the condition, `after: completed_ratio ratio >= 0.6`."""

TrialPurpose = Literal["control", "corpus", "search", "replay", "shrink", "reproduce"]
"""control: a trial with no chaos, run before the search (a deployment that fails one fails without chaos);
corpus: the replay of a corpus entry before the search (`harness.hunt.corpus`); search: drawn; replay: the found
schedule again, fresh seeds, before the shrink; shrink: a smaller candidate; reproduce: the handed-over minimal
scenario, for its rate."""


@dataclass(frozen=True)
class Schedule:
    """One trial's chaos and knobs: what the search draws and the shrinker reduces."""

    steps: tuple[ChaosStep, ...]
    """Each step its action's model, validated."""
    duration: float
    """Seconds of load (real)."""
    arrival_rate: float | None = None
    """The open model's flows per second; None: the scenario's own load."""


SINCE_THE_CHAOS = ("during", "after")
"""The steady-state windows from the chaos's start on (`harness.run.hypothesis` probes them)."""


@dataclass(frozen=True)
class Failure:
    """What broke: its kind and name, and its signature as far as the trial's summary says it
    (`harness.hunt.signature`): where it showed, the reasons behind it, the shape of each break.

    "The same failure" (`same_as`), which the replay, the shrink and the reruns count: the same kind and name, and
    for each part of the signature both failures state, at least one entry in common (each part is a sample: a
    summary keeps a few examples). A steady state that failed during the chaos and one that failed after it, of
    the same condition, are the same failure: both say it broke once the chaos began, and which window a broken
    flow ends in is the machine's timing (a busy machine ends it after)."""

    kind: FailureKind
    name: str
    """The invariant's name, -32602 (unexplained rejections), or the `[expect]` key."""
    replicas: tuple[str, ...] = ()
    """Where it showed: the replicas the clients saw unexplained rejections on, that logged the reasons a
    rejection key counted, or where an invariant's breaks were observed (their flows' last rounds); empty: not
    said."""
    reasons: tuple[str, ...] = ()
    """The logged reasons an `[expect]` key on rejections counted, when the key names none; empty: not said."""
    detail: tuple[str, ...] = ()
    """An invariant's breaks in their shape, ids left out (`released N times`); empty: not said."""

    def same_as(self, other: Failure) -> bool:
        """Whether `other` is this failure again (see the class)."""
        return (self.kind, self._compared_name()) == (other.kind, other._compared_name()) and all(
            not ours or not theirs or bool(set(ours) & set(theirs))
            for ours, theirs in ((self.replicas, other.replicas), (self.reasons, other.reasons),
                                 (self.detail, other.detail)))

    def _compared_name(self) -> str:
        """The name `same_as` compares: a steady state's window during or after the chaos as one."""
        window, _, condition = self.name.partition(": ")
        if self.kind == "hypothesis" and window in SINCE_THE_CHAOS:
            return f"since the chaos: {condition}"
        return self.name

    def __str__(self) -> str:
        said = f"{self.kind} {self.name}"
        if self.detail or self.reasons:
            said += f" ({'; '.join(self.detail or self.reasons)})"
        return said + (f" on {', '.join(self.replicas)}" if self.replicas else "")


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


@dataclass(frozen=True)
class FlakyFind:
    """A search's find whose replays failed the same way too rarely to shrink: set aside while the search went on."""

    trial: Trial
    failure: Failure
    replay: tuple[int, int]
    """(failed the same way, runs) of its replays."""


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
    replay: tuple[int, int] | None = None
    """The found schedule's replays before the shrink (fresh seeds): (failed the same way, runs); None: not replayed."""
    shrink_path: list[ShrinkStep] = field(default_factory=list)
    shrink_stopped_by: str = ""
    """Why the shrink ended: "done" (no smaller candidate failed: 1-minimal), "runs" or "time" (its budget: the
    smallest so far, maybe not minimal), "rounds" (its rounds all made progress: maybe not minimal), "flaky" (never
    started: the found schedule failed again in too few of its replays, and is handed over as found); "": no
    shrink."""
    irrelevant: tuple[str, ...] = ()
    """What did not matter in the minimal schedule, as far as the shrink tried (`ShrinkResult.irrelevant`)."""
    minimal: Schedule | None = None
    minimal_seed: int | None = None
    """The seed the minimal scenario carries: one its schedule failed with (None: the first of them)."""
    flaky: list[FlakyFind] = field(default_factory=list)
    """Finds set aside as flaky while the search went on, in the order found. When nothing else broke, the first is
    `found` again (handed over as found, `shrink_stopped_by` "flaky") and stays listed here."""
    reproduction: tuple[int, int] | None = None
    """The minimal scenario's runs, exactly as handed over (its text, its seed, judged as `run --reproduce` judges
    it): (reproduced, runs)."""
    coverage: dict[tuple[str, str, str], int] = field(default_factory=dict)
    """How often each (action, replica, timing) was tried in the search."""
    stopped_by: str = ""
    """Why the search ended: "found", "trials", "time", "interrupted", "fails without chaos" (a control trial
    failed: nothing was searched), "certified" (the strategy had no schedule left: `certificate` says what), or
    "nothing to draw" (`--from-triage` steered to no action and the controls held)."""
    control: Trial | None = None
    """The control trial (no chaos) that failed the property; None: every control held, or none ran."""
    property_line: str = ""
    """What no trial may show, in one line, as the hunt said it at its start."""
    strategy: str = "random"
    """The strategy the search drew with (`[hunt] strategy`): with the seed, what draws its schedules again."""
    certificate: str | None = None
    """What the strategy certified when it ran out of schedules to try (`harness.hunt.strategy.Exhausted`)."""
    expect_counted: bool = True
    """Whether the property counted the scenario's `[expect]` (`[hunt] expect`); when not, the minimal scenario's
    `[expect]` leaves the scenario's own keys out: the hunt never judged by them."""

    @property
    def shrunk(self) -> bool:
        """Whether the schedule handed over is smaller than the one found (the shrink accepted something, and the
        reproduction did not back off all the way)."""
        return self.found is not None and self.minimal is not None and self.minimal != self.found.schedule


def unshrunk_reason(stopped_by: str) -> str:
    """Why a shrink handed over the schedule found, from how it ended (`HuntResult.shrink_stopped_by`)."""
    if stopped_by in ("", "done"):
        return "no smaller schedule failed the same way"
    if stopped_by in ("runs", "time"):
        return f"the shrink's budget of {stopped_by} ran out before a smaller schedule failed"
    return f"the shrink was cut short: {stopped_by}, before a smaller schedule failed"


_STEP = TypeAdapter(ChaosStep)
_FIRST = ("action", "at", "replica", "replicas", "fault")
"""The keys a step's table starts with, in the order the draw sets them; the action's own keys follow in the order
its model declares them."""


def chaos_step(table: Mapping[str, Any]) -> ChaosStep:
    """A `[[chaos]]` table as its action's model (pydantic's ValidationError when it does not validate)."""
    return _STEP.validate_python(table)


def step_table(step: ChaosStep) -> dict[str, Any]:
    """A step as the `[[chaos]]` table it was made from: the keys it was given (a default is not added), `action`,
    `at`, `replica` and a network step's `fault` first, its values as the model holds them (durations in seconds)."""
    given = step.model_fields_set
    names = [*(name for name in _FIRST if name in given), *(name for name in type(step).model_fields
                                                               if name in given and name not in _FIRST)]
    return {name: getattr(step, name) for name in names}


def describe(schedule: Schedule) -> str:
    """A schedule's steps in a few words: `restart r2 @3.1s, network latency all @5.0s 2.4s` ("" for none)."""
    parts = []
    for step in schedule.steps:
        given = step_table(step)
        whom = f" r{given['replica']}" if given.get("replica") is not None else ""
        whom = f" r{'+r'.join(map(str, given['replicas']))}" if given.get("replicas") else whom
        kind = next((f" {given[key]}" for key in ("fault", "order") if key in given), "")
        lasting = f" {given['duration']:g}s" if given.get("duration") is not None else ""
        parts.append(f"{step.action}{kind}{whom} @{step.at:g}s{lasting}")
    return ", ".join(parts)
