"""Everything a run writes for people and CI, derived from its journal alone.

`write_results` reads the journal parts once, decides the verdict, and writes
summary.json, junit.xml and report.html into the results folder. It runs at the end of
every run, including an interrupted one, and can be re-run on any results folder later
(a killed run's journal included: no `run end`, a torn last line) to rebuild the same files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.config.scenario import Scenario
from harness.config.thresholds import Threshold
from harness.errors import UsageError
from harness.journal.figures import RunFigures, is_mapping
from harness.journal.plain import TRANSIENT
from harness.journal.records import RecordType
from harness.journal.writer import JournalDamage, JournalView, read_journal
from harness.report.fuzz import FuzzFold, FuzzTable
from harness.report.html import write_html
from harness.report.junit import write_junit
from harness.report.series import Timeline
from harness.report.snapshot import read_snapshot, write_snapshot
from harness.report.summary_json import write_summary
from harness.report.terminal import render_thresholds
from harness.report.top_errors import ErrorGroup, ErrorTable
from harness.report.verdict import (
    HypothesisResult,
    InvariantResult,
    Reconciliation,
    RunChecks,
    RunStatus,
    RunVerdict,
    decide,
)

__all__ = [
    "ErrorGroup",
    "ErrorTable",
    "FuzzTable",
    "HypothesisResult",
    "InvariantResult",
    "JournalRead",
    "Reconciliation",
    "RunChecks",
    "RunStatus",
    "RunVerdict",
    "Timeline",
    "decide",
    "read_run",
    "read_saved",
    "rebuild_results",
    "results_scenario",
    "journal_parts",
    "NotResults",
    "render_thresholds",
    "write_html",
    "write_junit",
    "write_results",
    "write_summary",
]

SUMMARY_JSON, JUNIT_XML, REPORT_HTML = "summary.json", "junit.xml", "report.html"
SCENARIO_JSON = "scenario.json"


class NotResults(UsageError):
    """A folder that is not a run's results folder (no scenario.json, no journal)."""


def journal_parts(folder: Path) -> list[Path]:
    """A results folder's journal: the run's own part, then every worker's part, in worker order."""
    workers = sorted(folder.glob("journal-w*.jsonl"), key=lambda path: int(path.stem.removeprefix("journal-w") or 0)
                     if path.stem.removeprefix("journal-w").isdigit() else 0)
    return [folder / "journal.jsonl", *workers]


def rebuild_results(folder: Path) -> RunVerdict:
    """summary.json, junit.xml and report.html of any results folder, rebuilt from its journal alone.

    From the figures the run saved (`harness.report.snapshot`) when they match the journal
    part for part, else from one streaming pass over the journal (then saved for next time).

    A run killed with SIGKILL left a journal with no `run end`: the verdict is
    `interrupted`, with every figure up to its last record. The thresholds are the
    scenario's own, from the scenario.json the run wrote first thing.
    """
    from harness.config.thresholds import parse_thresholds

    scenario = results_scenario(folder)
    parts = journal_parts(folder)
    saved = read_saved(folder, parts)
    return write_results(folder, scenario, parts, parse_thresholds(scenario.expect), live=saved,
                         save=saved is None)


def results_scenario(folder: Path) -> Scenario:
    """The scenario a results folder's run ran (its scenario.json); `NotResults` when the folder is not one."""
    from harness.config.scenario import Scenario

    if not (folder / SCENARIO_JSON).is_file() or not (folder / "journal.jsonl").is_file():
        raise NotResults(f"{folder} is not a results folder: it has no {SCENARIO_JSON} and journal.jsonl")
    try:
        return Scenario.model_validate_json((folder / SCENARIO_JSON).read_text(encoding="utf-8"))
    except ValueError as exc:
        raise NotResults(f"{folder / SCENARIO_JSON} is not a scenario this harness reads: {exc}") from None


Fold = Callable[[Mapping[str, Any]], None]


@dataclass
class JournalRead(JournalView):
    """One pass over the journal parts, into everything the reports need; what could not be read is counted.

    A run folds its records into one as it writes them (every part's, the workers' too), so
    its end writes the results without reading the journal again; `report DIR` reads the
    journal into a fresh one, the same records in the same order.
    """

    figures: RunFigures = field(default_factory=RunFigures)
    checks: RunChecks = field(default_factory=RunChecks)
    timeline: Timeline = field(default_factory=Timeline)
    errors: ErrorTable = field(default_factory=ErrorTable)
    fuzz: FuzzFold = field(default_factory=FuzzFold)
    parts: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    records: int = 0
    unreadable: int = 0
    """Lines that are not a record, or records the figures could not take: the verdict was decided without them."""
    torn: int = 0
    """Torn last lines (a part cut mid-write, as a SIGKILL leaves it): the normal end of a killed run's journal."""
    _by_kind: dict[Any, list[Fold]] = field(default_factory=dict, repr=False, compare=False, metadata=TRANSIENT)

    def as_dict(self) -> dict[str, Any]:
        return {"parts": self.parts, "missing": self.missing, "records": self.records, "unreadable": self.unreadable,
                "torn": self.torn}

    def __getstate__(self) -> dict[str, Any]:
        """Sent to the run without the table of bound folds (`harness.run.fold`); rebuilt on use."""
        return {**self.__dict__, "_by_kind": {}}

    def add(self, record: Any) -> None:
        if not is_mapping(record):
            self.unreadable += 1
            return
        try:
            for fold in self._folds(record.get("type")):
                fold(record)
        except (KeyError, TypeError, ValueError):
            self.unreadable += 1
            return
        self.records += 1

    def _folds(self, kind: Any) -> list[Fold]:
        """The folds that read records of `kind`: a flow's own records skip those that would only drop them."""
        found = self._by_kind.get(kind)
        if found is None:
            everything: list[Fold] = [self.figures.add, self.timeline.add, self.checks.add, self.errors.add,
                                      self.fuzz.add]
            routes: dict[Any, list[Fold]] = {
                RecordType.START: [self.figures.add, self.timeline.add],
                RecordType.ROUND: [self.figures.add, self.timeline.add, self.errors.add, self.fuzz.add],
                RecordType.FLOW: [self.figures.add, self.timeline.add, self.fuzz.add]}
            found = self._by_kind[kind] = routes.get(kind, everything)
        return found

    def count_damage(self, damage: JournalDamage) -> None:
        """Add the lines a read of the journal skipped (not JSON, torn) to the records it could not take."""
        self.unreadable += damage.unreadable
        self.torn += damage.torn

    def name_parts(self, paths: Iterable[Path]) -> None:
        """For a read folded live: the parts as `read_run` would list them (present ones, missing ones)."""
        self.parts, self.missing = [], []
        for path in paths:
            (self.parts if path.is_file() else self.missing).append(str(path))


def read_saved(folder: Path, parts: Sequence[Path]) -> JournalRead | None:
    """The fold the run saved (`harness.report.snapshot`), brought up to the journal's end, with the lines after it
    that are not a record counted; None when there is none that matches the journal."""
    damage = JournalDamage()
    saved = read_snapshot(folder, parts, JournalRead, damage)
    if saved is not None:
        saved.count_damage(damage)
    return saved


def read_run(journal_paths: Iterable[Path]) -> JournalRead:
    """Read every part once. A missing part, a line that is not a record or a record the figures cannot take is
    counted, never fatal: results are written in every case, and a half-written journal is the normal case after
    a kill. A part that is no journal at all (binary) is `UnreadableJournal` (exit 2)."""
    read = JournalRead()
    damage = JournalDamage()
    for path in journal_paths:
        if not path.is_file():
            read.missing.append(str(path))
            continue
        read.parts.append(str(path))
        for record in read_journal(path, damage=damage):
            read.add(record)
    read.count_damage(damage)
    return read


def write_results(folder: Path, scenario: Scenario, journal_paths: Sequence[Path], thresholds: list[Threshold], *,
                  extra: dict[str, Any] | None = None, live: JournalRead | None = None,
                  save: bool = False) -> RunVerdict:
    """Decide the run's verdict from its journal and write summary.json, junit.xml and report.html.

    The journal alone decides: the caller writes the `run end` record before calling this,
    and a journal without one is taken for a run that was cut off (interrupted). `live`:
    the journal's records as the run folded them while writing them (no second read).
    `save`: write the fold beside the journal for `report` and `compare` (the journal's
    writers are done).
    """
    folder.mkdir(parents=True, exist_ok=True)
    if live is not None:
        live.name_parts(journal_paths)
    read = live if live is not None else read_run(journal_paths)
    verdict = replace(decide(read.figures, thresholds, read.checks), top_errors=read.errors.top(),
                      expected_answers=read.errors.top_expected(),
                      fuzz=read.fuzz.table(scenario), unreadable=read.unreadable, hosts=read.figures.hosts())
    extra = {"cpu": read.checks.cpu, **(extra or {})}
    write_summary(folder / SUMMARY_JSON, scenario, read.figures, verdict, extra, journal=read.as_dict())
    write_junit(folder / JUNIT_XML, scenario.name, verdict)
    write_html(folder / REPORT_HTML, scenario, read.figures, verdict, timeline=read.timeline)
    if save:
        write_snapshot(folder, read, journal_paths)
    return verdict
