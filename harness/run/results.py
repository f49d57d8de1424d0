"""A run's results, once its journal is closed: Locust's stats, the final metrics, summary.json and the report.

The figures are the live fold's, finished and saved by its process; when that process is
gone (which the run's end already recorded as its error), they are read from the journal,
as `mrtr-harness report DIR` reads them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

from locust.env import Environment
from prometheus_client import generate_latest

from harness.atomic_files import write_atomically
from harness.config.scenario import Scenario
from harness.config.thresholds import Judged, parse_thresholds
from harness.metrics.registry import RunMetrics
from harness.run.live_fold.client import FoldLost, FoldProcess

if TYPE_CHECKING:
    from harness.folding.read import JournalRead


def write_run_results(folder: Path, scenario: Scenario, *, env: Environment | None, run_metrics: RunMetrics,
                      fold: FoldProcess, parts: Sequence[Path], failed: bool, stream: IO[str],
                      say: Callable[[str], None], judged: Judged = Judged.EXPECT) -> int:
    """Write every result file, show the verdict, and return the run's exit code (judged by `judged`'s table)."""
    from harness.report import write_results
    from harness.report.terminal import render_thresholds

    if env is not None:
        write_atomically(folder / "locust_stats.json", json.dumps(env.stats.serialize_stats(), indent=4))
    write_atomically(folder / "metrics.prom", generate_latest(run_metrics.registry))
    live = finished_fold(fold, parts, failed=failed, say=say)
    verdict = write_results(folder, scenario, list(parts), parse_thresholds(scenario.judged_table(judged)),
                            live=live, save=live is None, judged=judged, distrust_damage=True)
    stream.write(render_thresholds(verdict) + "\n")
    say(f"results in {folder}")
    return verdict.exit_code


def finished_fold(fold: FoldProcess, parts: Sequence[Path], *, failed: bool,
                  say: Callable[[str], None]) -> JournalRead | None:
    """The live fold, finished and saved by its process; None when the process is gone."""
    try:
        return fold.finish(parts)
    except FoldLost as exc:
        if not failed:
            say(f"the live figures are lost ({exc}): the results are read from the journal")
        return None
