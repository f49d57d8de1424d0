"""One run read back from its results folder into the samples a comparison needs.

Read from the journal, never from summary.json: any run can be compared, also one a
SIGKILL cut short (rebuilt or not by `mrtr-harness report`), and the statistics need the
per-round distributions a summary does not hold. Everything comes from the `RunFigures`
every report folds, in one pass and a size that does not grow with the run (latency
sketches per flow, tool and round; rounds per call and outcomes counted), so a comparison
never disagrees with the run's own summary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config.scenario import Scenario
from harness.folding.figures import CallKey, RoundKey, RunFigures
from harness.folding.read import read_saved
from harness.journal.distributions import Counts, Sketch
from harness.journal.records import WORKER_RECORDS, FlowOutcome, RunEvent, is_run_event, is_worker_part
from harness.journal.segments import part_exists
from harness.journal.writer import JournalDamage, JournalView, read_journal
from harness.report import journal_parts, results_scenario


@dataclass
class RunSamples(JournalView):
    """Per-round latencies, rounds per call, flow outcomes, counts and CPU of one run: its figures, and CPU."""

    figures: RunFigures = field(default_factory=RunFigures)
    harness_per_round_ms: float | None = None
    replica_per_round_ms: float | None = None
    unreadable: int = 0
    """Journal lines that could not be read (not a record, or a record the figures could not take)."""
    run_id: str | None = None
    """The run id its journal's start record gives (the folder may have been renamed since)."""

    def add(self, record: Mapping[str, Any]) -> None:
        self.figures.add(record)
        if is_run_event(record, RunEvent.START) and self.run_id is None:
            run_id = record.get("run_id")
            self.run_id = run_id if isinstance(run_id, str) else None
        if is_run_event(record, RunEvent.CPU):
            self.harness_per_round_ms = _number(record.get("harness_per_round_ms"))
            self.replica_per_round_ms = _number(record.get("replica_per_round_ms"))

    @property
    def latency(self) -> dict[RoundKey, Sketch]:
        """Round latency in seconds, from the intended send time (as the thresholds read it), per round of a tool."""
        return {key: sketch for key, sketch in self.figures.latency.items() if key[2] and sketch.count}

    @property
    def rounds_per_call(self) -> dict[CallKey, Counts]:
        return self.figures.rounds_per_call

    @property
    def completed(self) -> dict[str, tuple[int, int]]:
        """Per flow, (completed, finished); flows the run interrupted are not finished."""
        table: dict[str, tuple[int, int]] = {}
        for (flow, outcome), n in self.figures.finished.items():
            if outcome == FlowOutcome.INTERRUPTED:
                continue
            completed, finished = table.get(flow, (0, 0))
            table[flow] = (completed + (n if outcome == FlowOutcome.COMPLETED else 0), finished + n)
        return table

    @property
    def flows_finished(self) -> int:
        """Flows that finished (interrupted ones did not)."""
        return sum(finished for _, finished in self.completed.values())

    @property
    def flows_per_second(self) -> float | None:
        """Flows finished per second of load; None without a duration."""
        return self.flows_finished / self.figures.duration if self.figures.duration > 0 else None


@dataclass(frozen=True)
class ResultsRun:
    """A results folder: its scenario as run, its samples, and its run id (the folder's name)."""

    folder: Path
    scenario: Scenario
    samples: RunSamples

    @property
    def run_id(self) -> str:
        return self.folder.name


def read_results(folder: Path) -> ResultsRun:
    """Read a run's results folder; `NotResults` when it is not one (no scenario.json or journal.jsonl)."""
    scenario = results_scenario(folder)
    parts = journal_parts(folder)
    saved = read_saved(folder, parts)
    if saved is not None:  # the figures the run saved, still matching its journal
        cpu = saved.checks.cpu or {}
        samples = RunSamples(saved.figures, _number(cpu.get("harness_per_round_ms")),
                             _number(cpu.get("replica_per_round_ms")), saved.unreadable, saved.checks.run_id)
        return ResultsRun(folder, scenario, samples)
    samples = RunSamples()
    damage = JournalDamage()
    for path in parts:
        if part_exists(path):
            _read_part(samples, path, damage)
    samples.unreadable += damage.unreadable
    return ResultsRun(folder, scenario, samples)


def _read_part(samples: RunSamples, path: Path, damage: JournalDamage) -> None:
    """Add one journal part's records; in a worker's part only the records a worker writes (`WORKER_RECORDS`), any
    other counted unreadable, as the run's own report counts it: a forged `run end` there decides nothing."""
    from_worker = is_worker_part(path.name)
    for record in read_journal(path, damage=damage):
        kind = record.get("type") if isinstance(record, Mapping) else None
        if from_worker and not (type(kind) is str and kind in WORKER_RECORDS):
            samples.unreadable += 1
            continue
        try:
            samples.add(record)
        except (AttributeError, KeyError, TypeError, ValueError):
            samples.unreadable += 1  # a record the figures cannot take is skipped, as the run's own report skips it


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
