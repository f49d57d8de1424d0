"""Two results folders in, one `Comparison` out: the entry points `compare` and `run --baseline` call.

    comparison = compare_folders(Path("results/base"), Path("results/new"), tolerances=["round_duration.p95=20%"])
    write_outputs(comparison, Path("results/new"))   # compare.json, compare-junit.xml, compare.html
    comparison.exit_code                             # 0 no regression, 1 regression
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from harness.compare.comparison import Comparison, compare_runs, scenario_differences
from harness.compare.outputs import COMPARE_HTML, COMPARE_JSON, COMPARE_JUNIT, write_json, write_junit
from harness.compare.page import write_page
from harness.compare.samples import ResultsRun, read_results
from harness.compare.tolerances import ToleranceError, settle
from harness.config.scenario import Scenario
from harness.errors import UsageError
from harness.journal.records import EndStatus
from harness.journal.segments import PartReader, part_exists, part_size
from harness.report import NotResults, journal_parts

__all__ = ["FORCE_HINT", "RUN_HINT", "NotComparable",
           "OutputNotWritable", "check_comparable", "compare_folders", "output_folder", "same_run",
           "write_outputs"]


class NotComparable(UsageError):
    """Bad input for a comparison (exit 2): not a results folder, different scenarios, a bad tolerance."""


FORCE_HINT = "--force compares them anyway"
RUN_HINT = ("`run --baseline` takes a baseline of this scenario; `mrtr-harness compare --force BASELINE RESULTS` "
            "compares runs of two scenarios after the run")
"""What to do about two scenarios: `compare` has `--force`; `run` has not (a gate must compare like with like)."""


def check_comparable(baseline: Scenario, current: Scenario, *, force: bool = False,
                     hint: str = FORCE_HINT) -> list[str]:
    """The scenario fields that differ; `NotComparable` (ending in `hint`) when any does and `force` is not given."""
    differences = scenario_differences(baseline, current)
    if differences and not force:
        raise NotComparable(f"the runs ran different scenarios ({baseline.name} and {current.name} differ in "
                            f"{', '.join(differences)}); {hint}")
    return differences


def compare_folders(baseline: Path, current: Path, *, tolerances: Sequence[str] = (),
                    significance: float | None = None, force: bool = False) -> Comparison:
    """Read both results folders and judge the current run by its `[compare]` table and the overrides."""
    try:
        before, after = read_results(baseline), read_results(current)
    except NotResults as exc:
        raise NotComparable(str(exc)) from None
    check_comparable(before.scenario, after.scenario, force=force)
    check_baseline_run(before)
    try:
        settings = settle(after.scenario.compare, tolerances, significance)
    except ToleranceError as exc:
        raise NotComparable(str(exc)) from None
    comparison = compare_runs(before, after, settings)
    warnings = [same_run(baseline, current), _damaged_baseline(before)]
    return replace(comparison, warnings=[warning for warning in warnings if warning])


def check_baseline_run(baseline: ResultsRun) -> None:
    """`NotComparable` when the baseline cannot judge anything: a run that did not complete, or finished no flows.

    A usage error (exit 2), not a regression: nothing is known about the current run yet,
    and the fix is to pick another baseline.
    """
    status = baseline.samples.figures.status
    if status != EndStatus.COMPLETED:
        ended = f"status {status}" if status else "its journal has no `run end` record: killed, or cut short"
        raise NotComparable(f"the baseline {baseline.folder} did not complete ({ended}): compare with a run that "
                            "completed")
    if not baseline.samples.flows_finished:
        raise NotComparable(f"the baseline {baseline.folder} finished no flows: there is nothing to compare with")


def _damaged_baseline(baseline: ResultsRun) -> str | None:
    unreadable = baseline.samples.unreadable
    if not unreadable:
        return None
    return (f"the baseline {baseline.folder}'s journal is damaged: {unreadable} line{'s' * (unreadable != 1)} could "
            "not be read, so it is judged by what could")


def same_run(baseline: Path, current: Path) -> str | None:
    """A warning when both folders are one run (the same folder, or journals byte for byte the same), else None:
    every metric then passes, whatever the build does."""
    if baseline.resolve() == current.resolve():
        return f"the baseline and the current run are the same folder ({current}): nothing can regress"
    before, after = journal_parts(baseline), journal_parts(current)
    if _sizes(before) == _sizes(after) and all(_digest(old) == _digest(new)
                                               for old, new in zip(before, after, strict=True)):
        return (f"the baseline {baseline} and the current run {current} have the same journal: one run, "
                "compared with itself, cannot regress")
    return None


def _sizes(parts: list[Path]) -> list[tuple[str, int]]:
    return [(path.name, part_size(path) if part_exists(path) else -1) for path in parts]


def _digest(path: Path) -> str | None:
    """The digest of a part's stream (its segments, plain or compressed, as one)."""
    if not part_exists(path):
        return None
    digest, reader = hashlib.sha256(), PartReader(path)
    while chunk := reader.read():
        digest.update(chunk)
    reader.close()
    return digest.hexdigest()


class OutputNotWritable(UsageError):
    """`--output` names a folder the comparison cannot be written into (bad input: exit 2)."""


def output_folder(folder: Path) -> Path:
    """`folder`, made if missing; `OutputNotWritable` when it cannot be (checked before the journals are read)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputNotWritable(f"cannot write the comparison into {folder}: {_reason(exc)}") from None
    return folder


def write_outputs(comparison: Comparison, folder: Path) -> list[Path]:
    """compare.json, compare-junit.xml and compare.html into `folder` (made if missing)."""
    output_folder(folder)
    try:
        return [write_json(folder / COMPARE_JSON, comparison), write_junit(folder / COMPARE_JUNIT, comparison),
                write_page(folder / COMPARE_HTML, comparison)]
    except OSError as exc:
        raise OutputNotWritable(f"cannot write the comparison into {folder}: {_reason(exc)}") from None


def _reason(exc: OSError) -> str:
    """An OS error in words, without its Python repr: a path through (or at) a file reads as such."""
    if isinstance(exc, FileExistsError | NotADirectoryError):
        return "a part of that path is a file, not a folder"
    return (exc.strerror or str(exc)).lower()
