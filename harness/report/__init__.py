"""Everything a run writes for people and CI, derived from its journal alone.

`write_results` reads the journal parts once, decides the verdict, and writes
summary.json, junit.xml and report.html into the results folder. It runs at the end of
every run, including an interrupted one, and can be re-run on any results folder later
(a killed run's journal included: no `run end`, a torn last line) to rebuild the same files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.config.scenario import Scenario
from harness.config.thresholds import Judged, Threshold
from harness.errors import UsageError
from harness.folding.parallel import read_parallel, workers_available
from harness.folding.read import JournalRead, read_run, read_saved
from harness.folding.snapshot import write_snapshot
from harness.journal.segments import part_exists, part_names
from harness.report.html import write_html
from harness.report.junit import write_junit
from harness.report.summary_json import write_summary
from harness.report.terminal import render_thresholds
from harness.report.verdict import RunStatus, RunVerdict, damaged, decide

__all__ = [
    "NotResults",
    "RunStatus",
    "RunVerdict",
    "decide",
    "is_results",
    "journal_parts",
    "rebuild_results",
    "render_thresholds",
    "results_scenario",
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
    """A results folder's journal: the run's own part, then every worker's part, in worker order (a part is there
    when any of its segments is: `harness.journal.segments`)."""
    workers = sorted(part_names(folder, r"journal-w\d+"), key=lambda name: int(name[len("journal-w"):-len(".jsonl")]))
    return [folder / "journal.jsonl", *(folder / name for name in workers)]


def rebuild_results(folder: Path, judged: Judged | None = None) -> RunVerdict:
    """summary.json, junit.xml and report.html of any results folder, rebuilt from its journal alone.

    From the figures the run saved (`harness.folding.snapshot`) when they match the journal
    part for part, else from the journal (then saved for next time): a journal of many
    segments folded by one process per CPU and merged (`harness.folding.parallel`), any
    other in one streaming pass.

    A run killed with SIGKILL left a journal with no `run end`: the verdict is
    `interrupted`, with every figure up to its last record. The thresholds are the
    scenario's own, from the scenario.json the run wrote first thing: the table `judged` names,
    by default the one the run judged (its journal's start record says; [expect] when it does not).
    """
    from harness.config.thresholds import parse_thresholds

    scenario = results_scenario(folder)
    parts = journal_parts(folder)
    saved = read_saved(folder, parts)
    read = saved or read_parallel(parts, workers_available()) or read_run(parts)
    if judged is None:
        judged = Judged(read.checks.judged) if read.checks.judged in set(Judged) else Judged.EXPECT
    thresholds = parse_thresholds(scenario.judged_table(judged))
    return write_results(folder, scenario, parts, thresholds, live=read, save=saved is None, judged=judged)


def is_results(folder: Path) -> bool:
    """Whether `folder` is a run's results folder: its scenario.json and (any segment of) its journal are there."""
    return (folder / SCENARIO_JSON).is_file() and part_exists(folder / "journal.jsonl")


def results_scenario(folder: Path) -> Scenario:
    """The scenario a results folder's run ran (its scenario.json); `NotResults` when the folder is not one."""
    from harness.config.scenario import ScenarioError, scenario_from_json

    if not is_results(folder):
        raise NotResults(f"{folder} is not a results folder: it has no {SCENARIO_JSON} and journal.jsonl")
    path = folder / SCENARIO_JSON
    try:
        return scenario_from_json(path.read_bytes(), str(path))
    except OSError as exc:
        raise NotResults(f"{path}: cannot be read: {exc.strerror}") from None
    except ScenarioError as exc:
        raise NotResults(str(exc)) from None


def write_results(folder: Path, scenario: Scenario, journal_paths: Sequence[Path], thresholds: list[Threshold], *,
                  extra: dict[str, Any] | None = None, live: JournalRead | None = None,
                  save: bool = False, judged: Judged = Judged.EXPECT, distrust_damage: bool = False) -> RunVerdict:
    """Decide the run's verdict from its journal and write summary.json, junit.xml and report.html.

    The journal alone decides: the caller writes the `run end` record before calling this,
    and a journal without one is taken for a run that was cut off (interrupted). `live`:
    the journal's records as the run folded them while writing them (no second read).
    `save`: write the fold beside the journal for `report` and `compare` (the journal's
    writers are done). `judged`: which table `thresholds` are, said in every output. `distrust_damage`: a
    journal with lines that could not be read makes the verdict a harness error (exit 4), as `report` treats it
    without --lenient: a run's own verdict, decided without those lines, is not trusted either way.
    """
    folder.mkdir(parents=True, exist_ok=True)
    if live is not None:
        live.name_parts(journal_paths)
    read = live if live is not None else read_run(journal_paths)
    verdict = replace(decide(read.figures, thresholds, read.checks), top_errors=read.errors.top(),
                      expected_answers=read.errors.top_expected(),
                      fuzz=read.fuzz.table(scenario), output_contracts=read.figures.output_contracts(),
                      unreadable=read.unreadable, hosts=read.figures.hosts(),
                      cold_start=read.figures.cold_starts(),
                      judged=judged)
    forged = read.foreign_line()
    if forged is not None or (distrust_damage and read.unreadable):
        verdict = damaged(verdict, read.unreadable, forged)
    extra = {"cpu": read.checks.cpu, **(extra or {})}
    write_summary(folder / SUMMARY_JSON, scenario, read.figures, verdict, extra, journal=read.as_dict())
    write_junit(folder / JUNIT_XML, scenario.name, verdict)
    write_html(folder / REPORT_HTML, scenario, read.figures, verdict, timeline=read.timeline)
    if save:
        write_snapshot(folder, read, journal_paths)
    return verdict
