"""`hunt merge DIR...`: the shares of one search, run on several machines (`hunt --trial-range`), as one hunt.

Each share is a hunt's folder: its hunt.jsonl is read (JSON only, a line at a time, each record
validated into the few keys the merge needs; a symbolic link where a file or folder is expected is
refused, never followed). The shares must be of one search: the same scenario, seed, strategy,
actions, replicas, trial length and steps, and no search trial run twice. The merged hunt is a new
folder under `--results` with hunt.jsonl (a `start` record naming the shares, every trial record,
its folder made relative to the merged folder's parent's shares, an `end` record), hunt.json and
hunt.html:

- found: the lowest search trial index that failed, in whichever share (its share's minimal.toml, when
  it shrank it, is named); a share whose control trial failed makes the merge "fails without chaos";
- coverage: the shares' coverage summed, cell by cell (each counted where it acted on rounds in flight,
  as each share counted it);
- residual risk: over every judged search trial of every share, as one hunt's (`harness.hunt.coverage`).

A folder that is no hunt's, a damaged journal or shares of different searches: `MergeRefused` (exit 2) in
one line, nothing written.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness import foreign_text
from harness.atomic_files import refuse_link, write_atomically
from harness.errors import ExitCode, UsageError
from harness.hunt import coverage
from harness.hunt.model import (
    Failure,
    FailureKind,
    FlakyFind,
    HuntResult,
    Schedule,
    Trial,
    TrialPurpose,
    chaos_step,
)
from harness.hunt.page import coverage_line, flaky_lines, render_page
from harness.hunt.records import runs_data
from harness.hunt.summary import VERSION, trial_data
from harness.run.results_folder import results_folder

JOURNAL_LIMIT = 64 * 1024 * 1024
"""The most bytes of a share's hunt.jsonl the merge reads: a larger one is refused, not read."""
SAME_SEARCH = ("scenario", "seed", "strategy", "actions", "replicas")
"""What the shares' start records must agree on (and `[hunt]` trial_duration, max_steps and trials)."""
SAME_BOUNDS = ("trial_duration", "max_steps", "trials", "controls")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
"""A scenario name the merged folder is named after (else `merged`)."""


class MergeRefused(UsageError):
    """Folders that cannot be merged as shares of one search (exit 2): the text says which and why, in one line."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str


class _Start(BaseModel):
    model_config = ConfigDict(extra="ignore")
    scenario: str
    seed: int
    strategy: str
    actions: list[str]
    replicas: list[int]
    bounds: dict[str, Any]
    property: str = ""
    trial_range: list[int] | None = None


class _FailureRow(BaseModel):
    model_config = ConfigDict(extra="ignore")
    kind: FailureKind
    name: str
    replicas: list[str] = Field(default_factory=list)
    reasons: list[str] = Field(default_factory=list)
    detail: list[str] = Field(default_factory=list)


class _ScheduleRow(BaseModel):
    model_config = ConfigDict(extra="ignore")
    steps: list[dict[str, Any]]
    duration: float
    arrival_rate: float | None = None


class _TrialRow(BaseModel):
    model_config = ConfigDict(extra="ignore")
    index: int
    seed: int
    purpose: TrialPurpose
    schedule: _ScheduleRow
    outcome: str
    failures: list[_FailureRow] = Field(default_factory=list)
    reasons: dict[str, int] = Field(default_factory=dict)
    exit_code: int
    folder: str
    seconds: float = 0.0


class _Cell(BaseModel):
    model_config = ConfigDict(extra="ignore")
    variant: str
    target: str
    timing: str
    trials: int = Field(ge=0)


class _Replay(BaseModel):
    model_config = ConfigDict(extra="ignore")
    failed: int = Field(ge=0)
    runs: int = Field(ge=0)


class _Flaky(BaseModel):
    model_config = ConfigDict(extra="ignore")
    trial: int
    replay: _Replay


class _End(BaseModel):
    model_config = ConfigDict(extra="ignore")
    stopped_by: str
    coverage: list[_Cell] = Field(default_factory=list)
    minimal_file: str | None = None


@dataclass
class Share:
    """One hunt's folder as the merge read it."""

    name: str
    start: _Start
    trials: list[dict[str, Any]]
    """Its trial records, as written (validated as `_TrialRow`)."""
    rows: list[_TrialRow]
    end: _End | None
    flaky: list[_Flaky] = field(default_factory=list)
    """Its finds set aside as flaky (their `flaky` records): the search went on past them."""

    def searched(self) -> set[int]:
        """The search trials it ran, by their index within the search (1-based)."""
        given = self.start.bounds.get("controls")
        controls = given if isinstance(given, int) else 0
        return {row.index - controls for row in self.rows if row.purpose == "search"}


@dataclass
class Merged:
    """What the merge made: the merged hunt's folder and outcome."""

    folder: Path
    result: HuntResult
    shares: list[Share]
    found_in: str | None = None
    minimal: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return int(ExitCode.FAILED if self.result.found is not None or self.result.control is not None
                   else ExitCode.PASSED)

    def lines(self) -> list[str]:
        """What the merge says on the terminal."""
        result = self.result
        searched = sum(trial.purpose == "search" for trial in result.trials)
        said = [foreign_text.line(f"merged {len(self.shares)} hunts of {result.scenario} (seed {result.seed}, "
                                  f"strategy {result.strategy}): {searched} search trials")]
        if result.control is not None:
            said.append(foreign_text.line(f"fails without chaos: a control trial failed in {self.found_in}"))
        elif result.found is not None:
            said.append(foreign_text.line(f"found: trial {result.found.index} failed "
                                          f"({', '.join(map(str, result.found.failures))}) in {self.found_in}"
                                          + (f"; minimal: {self.minimal}" if self.minimal else "")))
        else:
            said.append(foreign_text.line(f"nothing broke in {searched} trials; coverage: "
                                          f"{coverage_line(result, None)}"))
        said += [foreign_text.line(line) for line in (*flaky_lines(result), *self.notes)]
        residual = coverage.residual_line(result)
        if residual:
            said.append(residual)
        said += [f"page: {self.folder / 'hunt.html'}", f"journal: {self.folder / 'hunt.jsonl'}",
                 f"summary: {self.folder / 'hunt.json'}"]
        return said


def merge_hunts(folders: Sequence[Path], results_root: Path) -> Merged:
    """Merge the hunts' folders into a new folder under `results_root` (see the module)."""
    shares = [read_share(folder) for folder in folders]
    _name_apart(shares, folders)
    _same_search(shares)
    result = _result(shares)
    name = result.scenario if _NAME.fullmatch(result.scenario) else "merged"
    merged = Merged(results_folder(results_root, f"hunt-{name}-merged"), result, shares)
    _found(merged)
    _write(merged)
    return merged


def read_share(folder: Path) -> Share:
    """One hunt's folder: its hunt.jsonl, read as untrusted JSON (see the module)."""
    shown = foreign_text.line(str(folder))
    for path in (folder, folder / "hunt.jsonl"):
        refuse_link(path)
    journal = folder / "hunt.jsonl"
    try:
        mode = os.stat(journal, follow_symlinks=False).st_mode
    except OSError:
        raise MergeRefused(f"hunt merge: {shown} holds no hunt.jsonl: not a hunt's folder") from None
    if not stat.S_ISREG(mode) or os.stat(journal).st_size > JOURNAL_LIMIT:
        raise MergeRefused(f"hunt merge: {shown}/hunt.jsonl is not a hunt's journal (not a file, or over "
                           f"{JOURNAL_LIMIT >> 20} MiB)")
    try:
        return _read_journal(journal, shown, folder)
    except OSError as exc:
        raise MergeRefused(foreign_text.line(f"hunt merge: {shown}/hunt.jsonl cannot be read: {exc.strerror}")) \
            from None


def _read_journal(journal: Path, shown: str, folder: Path) -> Share:
    """The share a hunt.jsonl holds: its start, trial and end records, each line JSON validated into its keys."""
    start: _Start | None = None
    end: _End | None = None
    trials: list[dict[str, Any]] = []
    rows: list[_TrialRow] = []
    flaky: list[_Flaky] = []
    with open(journal, "rb") as file:
        for number, line in enumerate(file, 1):
            try:
                data = json.loads(line)
                kind = _Record.model_validate(data).type
                if kind == "start":
                    start = _Start.model_validate(data)
                elif kind == "trial":
                    rows.append(_TrialRow.model_validate(data))
                    trials.append(data)
                elif kind == "flaky":
                    flaky.append(_Flaky.model_validate(data))
                elif kind == "end":
                    end = _End.model_validate(data)
            except (ValueError, ValidationError, RecursionError) as exc:
                first = (str(exc).splitlines() or [type(exc).__name__])[0]
                raise MergeRefused(foreign_text.line(f"hunt merge: {shown}/hunt.jsonl line {number} is damaged: "
                                                     f"{first}")) from None
    if start is None:
        raise MergeRefused(f"hunt merge: {shown}/hunt.jsonl has no start record: not a hunt's journal")
    return Share(name=folder.resolve().name, start=start, trials=trials, rows=rows, end=end, flaky=flaky)


def _name_apart(shares: list[Share], folders: Sequence[Path]) -> None:
    """Each share named by its folder's path below the folders' common parent (`0/<utc>-hunt-shop` when each pod
    wrote under its own index, `<utc>-hunt-shop` when they are side by side): the trials' folders the merged journal
    names are then found from that parent."""
    paths = [folder.resolve() for folder in folders]
    if len({path.parent for path in paths}) == 1 or len(paths) < 2:
        return
    parent = Path(os.path.commonpath(paths))
    for share, path in zip(shares, paths, strict=True):
        share.name = path.relative_to(parent).as_posix()


def _same_search(shares: list[Share]) -> None:
    """The shares are of one search, each search trial run once; else `MergeRefused`."""
    first = shares[0]
    for share in shares[1:]:
        for key in SAME_SEARCH:
            if getattr(share.start, key) != getattr(first.start, key):
                raise MergeRefused(foreign_text.line(
                    f"hunt merge: {share.name} is not a share of {first.name}'s search: its {key} is "
                    f"{getattr(share.start, key)!r}, not {getattr(first.start, key)!r}"))
        for key in SAME_BOUNDS:
            if share.start.bounds.get(key) != first.start.bounds.get(key):
                raise MergeRefused(foreign_text.line(
                    f"hunt merge: {share.name} is not a share of {first.name}'s search: its [hunt] {key} is "
                    f"{share.start.bounds.get(key)!r}, not {first.start.bounds.get(key)!r}"))
    names = [share.name for share in shares]
    if len(set(names)) != len(names):
        raise MergeRefused(foreign_text.line(f"hunt merge: a folder is named twice ({', '.join(names)})"))
    seen: dict[int, str] = {}
    for share in shares:
        for index in sorted(share.searched()):
            if index in seen:
                raise MergeRefused(foreign_text.line(f"hunt merge: search trial {index} ran in both {seen[index]} and "
                                                     f"{share.name}: their --trial-range overlap"))
            seen[index] = share.name


def _trial(row: _TrialRow, share: Share) -> Trial:
    """A trial record as a judged trial, its folder under its share's name. A schedule whose steps do not validate:
    `MergeRefused`."""
    try:
        steps = tuple(chaos_step(step) for step in row.schedule.steps)
    except ValidationError as exc:
        raise MergeRefused(foreign_text.line(f"hunt merge: {share.name}: trial {row.index}'s schedule does not "
                                             f"validate: {str(exc).splitlines()[0]}")) from None
    failures = tuple(Failure(kind=failure.kind, name=failure.name, replicas=tuple(failure.replicas),
                             reasons=tuple(failure.reasons), detail=tuple(failure.detail)) for failure in row.failures)
    return Trial(index=row.index, seed=row.seed, schedule=Schedule(steps, row.schedule.duration,
                                                                   row.schedule.arrival_rate),
                 purpose=row.purpose, failures=failures, reasons=row.reasons,
                 exit_code=row.exit_code, folder=f"{share.name}/{row.folder}", seconds=row.seconds,
                 unjudged="not judged" if row.outcome == "not judged" else None)


def _result(shares: list[Share]) -> HuntResult:
    first = shares[0].start
    result = HuntResult(scenario=first.scenario, seed=first.seed, property_line=first.property,
                        strategy=first.strategy)
    for share in shares:
        result.trials += [_trial(row, share) for row in share.rows]
        for cell in share.end.coverage if share.end is not None else ():
            key = (cell.variant, cell.target, cell.timing)
            result.coverage[key] = result.coverage.get(key, 0) + cell.trials
    result.trials.sort(key=lambda trial: (trial.purpose != "control", trial.index))
    return result


def _found(merged: Merged) -> None:
    """The merged outcome: a failed control in any share, else the lowest search trial that failed and was not set
    aside as flaky (the lowest flaky one when every find was), and what stopped it ("found", "fails without chaos",
    else each share's own reason when one did not end by its trials or time)."""
    result = merged.result
    controls = [trial for trial in result.trials if trial.purpose == "control" and trial.failures]
    failed = [trial for trial in result.trials if trial.purpose == "search" and trial.failures]
    if controls:
        result.control, result.stopped_by = controls[0], "fails without chaos"
        merged.found_in = _share_of(controls[0], merged.shares).name
        return
    # a search trial's index is the whole search's, run in one share only (`_same_search`), so it names the find
    replays = {flaky.trial: (flaky.replay.failed, flaky.replay.runs)
               for share in merged.shares for flaky in share.flaky}
    set_aside = {trial.index: replays[trial.index] for trial in failed if trial.index in replays}
    result.flaky = [FlakyFind(trial, trial.failures[0], set_aside[trial.index]) for trial in failed
                    if trial.index in set_aside]
    failed = [trial for trial in failed if trial.index not in set_aside] or failed
    if failed:
        result.found = min(failed, key=lambda trial: trial.index)
        if result.found.index in set_aside:
            result.replay, result.shrink_stopped_by = set_aside[result.found.index], "flaky"
        result.failure, result.stopped_by = result.found.failures[0], "found"
        share = _share_of(result.found, merged.shares)
        merged.found_in = share.name
        if share.end is not None and share.end.minimal_file:
            merged.minimal = f"{share.name}/{share.end.minimal_file}"
        return
    stops = {share.end.stopped_by if share.end is not None else "no end record" for share in merged.shares}
    odd = sorted(stops - {"trials", "time", "certified"})
    result.stopped_by = odd[0] if odd else "trials"
    if odd:
        merged.notes.append(f"a share stopped by {', '.join(odd)}: its trials count as far as they ran")


def _share_of(trial: Trial, shares: list[Share]) -> Share:
    """The share a merged trial came from (its folder starts with the share's name)."""
    return next(share for share in shares if trial.folder.startswith(f"{share.name}/"))


def _write(merged: Merged) -> None:
    """hunt.jsonl, hunt.html and hunt.json in the merged folder (each written atomically, never through a link)."""
    result, folder, shares = merged.result, merged.folder, merged.shares
    first = shares[0].start
    ranges = [share.start.trial_range for share in shares]
    start = {"type": "start", **first.model_dump(mode="json"), "merged_from": [share.name for share in shares],
             "trial_range": [min(r[0] for r in ranges if r), max(r[1] for r in ranges if r)] if all(ranges) else None}
    records: list[dict[str, Any]] = [start]
    for share in shares:
        records += [{**row, "folder": f"{share.name}/{row.get('folder', '')}", "share": share.name}
                    for row in share.trials]
    end = {"type": "end", "stopped_by": result.stopped_by, "trials": len(result.trials),
           "found": result.found.index if result.found is not None else None,
           "found_in": merged.found_in,
           "coverage": coverage.coverage_rows(result.coverage),
           **coverage.residual_record(result)}
    records.append(end)
    write_atomically(folder / "hunt.jsonl", "".join(json.dumps(record, sort_keys=True) + "\n" for record in records))
    write_atomically(folder / "hunt.html", render_page(result, None))
    summary = {"version": VERSION, "scenario": result.scenario, "strategy": result.strategy, "seed": result.seed,
               "merged_from": [share.name for share in shares], "trial_range": start["trial_range"],
               "property": result.property_line, "trials": dict(Counter(trial.purpose for trial in result.trials)),
               "stopped_by": result.stopped_by, "found": trial_data(result.found),
               "found_in": merged.found_in, "minimal_file": merged.minimal,
               "flaky": [{"trial": flaky.trial.index, "folder": flaky.trial.folder,
                          "replay": runs_data(flaky.replay)} for flaky in result.flaky],
               "without_chaos": trial_data(result.control),
               "coverage": "coverage: " + coverage_line(result, None),
               "coverage_cells": end["coverage"], **coverage.residual_record(result),
               "page": "hunt.html", "journal": "hunt.jsonl"}
    write_atomically(folder / "hunt.json", json.dumps(summary, indent=2) + "\n")
