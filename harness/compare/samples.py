"""One run read back from its results folder into the samples a comparison needs.

Read from the journal, never from summary.json: any run can be compared, also one a
SIGKILL cut short (rebuilt or not by `mrtr-harness report`), and the statistics need the
per-round samples a summary no longer holds. The run-level figures (duration, rejections,
invariant violations, reconciliation) come from the `RunFigures` every report folds, so
a comparison never disagrees with the run's own summary about them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config.scenario import Scenario
from harness.journal.figures import RunFigures
from harness.journal.records import FlowOutcome, RecordType, RunEvent, is_run_event
from harness.journal.writer import JournalView, read_journal
from harness.report import journal_parts, results_scenario

RoundKey = tuple[str, str, int]
"""(flow, tool, round number): the finest level latency is compared at."""
CallKey = tuple[str, str]
"""(flow, tool): rounds per call are compared per tool of each flow."""


@dataclass
class RunSamples(JournalView):
    """Per-round latencies, rounds per call, flow outcomes, counts and CPU of one run."""

    figures: RunFigures = field(default_factory=RunFigures)
    latency: dict[RoundKey, list[float]] = field(default_factory=dict)
    """Round latency in seconds, from the intended send time (as the thresholds read it)."""
    rounds_per_call: dict[CallKey, list[int]] = field(default_factory=dict)
    completed: dict[str, list[int]] = field(default_factory=dict)
    """Per flow, one 0/1 per finished flow (1: completed); flows the run interrupted are not finished."""
    client_errors: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Rounds that ended with a JSON-RPC code or failure class, by (flow, code)."""
    harness_per_round_ms: float | None = None
    replica_per_round_ms: float | None = None

    def add(self, record: Mapping[str, Any]) -> None:
        self.figures.add(record)
        kind = record.get("type")
        if kind == RecordType.ROUND:
            self._round(record)
        elif kind == RecordType.FLOW:
            self._flow(record)
        elif is_run_event(record, RunEvent.CPU):
            self.harness_per_round_ms = _number(record.get("harness_per_round_ms"))
            self.replica_per_round_ms = _number(record.get("replica_per_round_ms"))

    def _round(self, record: Mapping[str, Any]) -> None:
        flow, tool = str(record.get("flow")), str(record.get("tool"))
        latency = _number(record.get("latency"))
        if latency is not None and isinstance(record.get("round"), int):
            self.latency.setdefault((flow, tool, record["round"]), []).append(latency)
        if record.get("code") is not None:
            self.client_errors[(flow, str(record["code"]))] += 1

    def _flow(self, record: Mapping[str, Any]) -> None:
        flow = str(record.get("flow"))
        for call in record.get("calls") or []:
            if isinstance(call, dict) and isinstance(call.get("rounds"), int) and call["rounds"] > 0:
                self.rounds_per_call.setdefault((flow, str(call.get("tool"))), []).append(call["rounds"])
        outcome = record.get("outcome")
        if outcome != FlowOutcome.INTERRUPTED:
            self.completed.setdefault(flow, []).append(int(outcome == FlowOutcome.COMPLETED))

    @property
    def flows_per_second(self) -> float | None:
        """Flows finished per second of load (interrupted ones are not finished); None without a duration."""
        finished = sum(len(outcomes) for outcomes in self.completed.values())
        return finished / self.figures.duration if self.figures.duration > 0 else None

    def rejections_by_reason(self) -> Counter[str]:
        """Logged rejections by reason, over every replica (replica labels need not match between runs)."""
        counts: Counter[str] = Counter()
        for (_, reason), count in self.figures.rejections.items():
            counts[reason] += count
        return counts


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
    samples = RunSamples()
    for record in read_journal(*(path for path in journal_parts(folder) if path.is_file())):
        try:
            samples.add(record)
        except (AttributeError, KeyError, TypeError, ValueError):
            continue  # a record the figures cannot take is skipped, as the run's own report skips it
    return ResultsRun(folder, scenario, samples)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
