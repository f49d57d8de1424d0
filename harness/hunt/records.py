"""hunt.jsonl's record types: the one contract between a hunt and whatever reads its journal back.

A hunt writes one JSON object per line (`harness.hunt.search.HuntJournal`): a `start` record, a
`control` record after the control trials, one `trial` record per trial, a `flaky` record for each find set
aside as flaky, an `end` record. Each
is defined here, once, as a `TypedDict` with a constant for its `type`, as a run's records are
(`harness.journal.records`): the search builds them (so a type checker holds it to the schema),
and a strategy reads the trials so far as these records (`harness.hunt.strategy.Tried`), so a
reader never spells a key by hand. docs/hunt.md ("What it leaves") says what each key means.

Every record has `t` (wall-clock seconds since the epoch), added by the journal as it writes it.
"""

from __future__ import annotations

from dataclasses import asdict
from enum import StrEnum
from typing import Any, Literal, NotRequired, TypedDict, cast

from harness.hunt.model import Failure, FailureKind, Schedule, TrialPurpose, step_table

Outcome = Literal["failed", "held", "interrupted", "not judged", "error"]
"""A trial's outcome in a word (`harness.hunt.search.outcome`)."""


class HuntRecordType(StrEnum):
    """The `type` field of every record of hunt.jsonl."""

    START = "start"
    CONTROL = "control"
    CORPUS = "corpus"
    CORPUS_SAVED = "corpus-saved"
    TRIAL = "trial"
    FLAKY = "flaky"
    END = "end"


class ScheduleData(TypedDict):
    """A schedule as plain data: each step the `[[chaos]]` table it was drawn with (durations in seconds)."""

    steps: list[dict[str, Any]]
    duration: float
    arrival_rate: float | None


class FailureData(TypedDict):
    """A failure of the property: its kind and its name (`harness.hunt.model.Failure`)."""

    kind: FailureKind
    name: str


def runs_data(counts: tuple[int, int]) -> dict[str, int]:
    """Runs that failed the same way, of those run (a replay's, a reproduction's), as the records hold them."""
    return {"failed": counts[0], "runs": counts[1]}


def failure_data(failure: Failure) -> FailureData:
    """A failure as its record holds it: every field `Failure` has (its kind and name at least)."""
    return cast(FailureData, asdict(failure))


class StartRecord(TypedDict):
    """The first record: what is hunted, with which seed and strategy, within which bounds, by which property."""

    type: Literal[HuntRecordType.START]
    t: NotRequired[float]
    scenario: str
    source: str
    seed: int
    strategy: str
    """The strategy the search trials' schedules come from (`[hunt] strategy`, `--strategy`)."""
    bounds: dict[str, Any]
    """The `[hunt]` table as the hunt ran it (flags applied)."""
    actions: list[str]
    replicas: list[int]
    property: str
    expect_counts: bool
    left_out: dict[str, str]
    most_runs: int
    trial_range: NotRequired[list[int] | None]
    """`--trial-range A:B`: the search trials this hunt ran of the whole search (1-based, inclusive); None: all."""
    merged_from: NotRequired[list[str]]
    """`hunt merge`: the hunts' folders (their names) this journal joins."""


class ControlRecord(TypedDict):
    """After the control trials: which ran, how many held or were not judged, the one that failed."""

    type: Literal[HuntRecordType.CONTROL]
    t: NotRequired[float]
    trials: list[int]
    held: int
    not_judged: int
    failed: int | None
    failures: list[FailureData]


class CorpusRecord(TypedDict):
    """Before the first search trial, with `--corpus`: the folders read, the entries replayed, those skipped and why."""

    type: Literal[HuntRecordType.CORPUS]
    t: NotRequired[float]
    folders: list[str]
    replayed: list[str]
    skipped: list[dict[str, str]]


class CorpusSavedRecord(TypedDict):
    """Where the minimal scenario was kept in the corpus, and whether it was new there."""

    type: Literal[HuntRecordType.CORPUS_SAVED]
    t: NotRequired[float]
    path: str
    new: bool


class FlakyRecord(TypedDict):
    """A search's find set aside: its replays failed the same way too rarely to shrink it, and the search went on."""

    type: Literal[HuntRecordType.FLAKY]
    t: NotRequired[float]
    trial: int
    failure: FailureData
    replay: dict[str, int]
    """`failed` the same way of `runs` replays."""


class ReproduceRecord(TypedDict):
    """A run of the handed-over minimal scenario's own text, for its rate: judged as the file says it reproduces
    (`judged`: the table, `expect` or `reproduces`); `outcome` "reproduced", "not reproduced" or why not judged."""

    type: Literal[HuntRecordType.TRIAL]
    t: NotRequired[float]
    index: int
    seed: int
    purpose: Literal["reproduce"]
    schedule: ScheduleData
    outcome: str
    judged: str
    failures: list[FailureData]
    exit_code: int
    folder: str
    seconds: float


class Residual(TypedDict):
    """What "nothing broke" is worth (`harness.hunt.coverage.residual_record`): the judged search trials, the upper
    bound of the per-trial failure rate at `confidence` (None after a find or with none judged), the health checks."""

    judged: int
    residual_risk: float | None
    confidence: float
    health: list[str]


class TrialRecord(TypedDict):
    """One trial (a control, a search trial, a shrink candidate's run, a reproduction run), judged."""

    type: Literal[HuntRecordType.TRIAL]
    t: NotRequired[float]
    index: int
    seed: int
    purpose: TrialPurpose
    schedule: ScheduleData
    outcome: Outcome
    failures: list[FailureData]
    reasons: dict[str, int]
    exit_code: int
    status: str
    problems: list[str]
    folder: str
    """The trial's results folder, relative to the hunt's."""
    uncounted_expect: list[str]
    seconds: float


class EndRecord(TypedDict):
    """The last record: what stopped the hunt, what it found, its coverage, its shrink, what it handed over."""

    type: Literal[HuntRecordType.END]
    t: NotRequired[float]
    stopped_by: str
    trials: int
    without_chaos: dict[str, Any] | None
    found: int | None
    failure: FailureData | None
    coverage: list[dict[str, Any]]
    judged: int
    residual_risk: float | None
    confidence: float
    health: list[str]
    shrink: dict[str, Any] | None
    minimal_file: str | None
    page: str | None
    certificate: str | None
    """What the strategy certified when it ran out of schedules to try (`lineage`'s); None: it did not."""
    seconds: float


HuntRecord = (StartRecord | ControlRecord | CorpusRecord | CorpusSavedRecord | TrialRecord | FlakyRecord
              | ReproduceRecord | EndRecord)
"""Any record of hunt.jsonl."""

def schedule_data(schedule: Schedule) -> ScheduleData:
    """A schedule as plain data: its steps as `[[chaos]]` tables, its duration and rate."""
    return {"steps": [step_table(step) for step in schedule.steps], "duration": schedule.duration,
            "arrival_rate": schedule.arrival_rate}
