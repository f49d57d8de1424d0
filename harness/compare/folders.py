"""Two results folders in, one `Comparison` out: the entry points `compare` and `run --baseline` call.

    comparison = compare_folders(Path("results/base"), Path("results/new"), tolerances=["round_duration.p95=20%"])
    write_outputs(comparison, Path("results/new"))   # compare.json, compare-junit.xml, compare.html
    comparison.exit_code                             # 0 no regression, 1 regression
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness.compare.comparison import Comparison, compare_runs, scenario_differences
from harness.compare.outputs import COMPARE_HTML, COMPARE_JSON, COMPARE_JUNIT, write_json, write_junit
from harness.compare.page import write_page
from harness.compare.samples import read_results
from harness.compare.tolerances import ToleranceError, settle
from harness.config.scenario import Scenario
from harness.errors import UsageError
from harness.report import NotResults

__all__ = ["NotComparable", "check_comparable", "compare_folders", "write_outputs"]


class NotComparable(UsageError):
    """Bad input for a comparison (exit 2): not a results folder, different scenarios, a bad tolerance."""


def check_comparable(baseline: Scenario, current: Scenario, *, force: bool = False) -> list[str]:
    """The scenario fields that differ; `NotComparable` when any does and `force` is not given."""
    differences = scenario_differences(baseline, current)
    if differences and not force:
        raise NotComparable(f"the runs ran different scenarios ({baseline.name} and {current.name} differ in "
                            f"{', '.join(differences)}); --force compares them anyway")
    return differences


def compare_folders(baseline: Path, current: Path, *, tolerances: Sequence[str] = (),
                    significance: float | None = None, force: bool = False) -> Comparison:
    """Read both results folders and judge the current run by its `[compare]` table and the overrides."""
    try:
        before, after = read_results(baseline), read_results(current)
    except NotResults as exc:
        raise NotComparable(str(exc)) from None
    check_comparable(before.scenario, after.scenario, force=force)
    try:
        settings = settle(after.scenario.compare, tolerances, significance)
    except ToleranceError as exc:
        raise NotComparable(str(exc)) from None
    return compare_runs(before, after, settings)


def write_outputs(comparison: Comparison, folder: Path) -> list[Path]:
    """compare.json, compare-junit.xml and compare.html into `folder` (made if missing)."""
    folder.mkdir(parents=True, exist_ok=True)
    return [write_json(folder / COMPARE_JSON, comparison), write_junit(folder / COMPARE_JUNIT, comparison),
            write_page(folder / COMPARE_HTML, comparison)]
