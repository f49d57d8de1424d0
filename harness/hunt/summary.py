"""hunt.json: a hunt's outcome in one JSON object, written at its end beside hunt.jsonl and hunt.html.

hunt.jsonl is the hunt's journal, a record per event, for replaying what happened; hunt.html is for a
person. hunt.json is for a script or a CI job that asks one question ("did it find something, and how
sure is it?") without folding the journal: the strategy and seed (with both, `rerun` draws the same
schedules again), the property, the controls, what stopped it, the failure found and its shrink, the
minimal file and its reproduction rate, the coverage line, the residual risk and health checks
(`harness.hunt.coverage.residual_record`), the control trial that failed without chaos, and where
`--from-triage` steered it. It is written atomically (`harness.atomic_files`), so a reader never sees
half of it; docs/hunt.md says every key.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from harness.atomic_files import write_atomically
from harness.hunt import coverage
from harness.hunt.records import failure_data, runs_data, schedule_data

if TYPE_CHECKING:
    from collections.abc import Callable

    from harness.config.hunt import HuntSettings
    from harness.hunt.from_triage import Steering
    from harness.hunt.model import HuntResult, Trial
    from harness.hunt.strategy import Strategy
    from harness.hunt.trial import Base, Property


class Hunt(Protocol):
    """What hunt.json reads of a hunt (`harness.hunt.search.Hunt`), named here so this module imports none of it."""

    result: HuntResult
    folder: Path | None
    base: Base
    strategy: Strategy
    seed: int
    settings: HuntSettings
    property: Property
    found_in_corpus: str | None
    minimal_file: Path | None
    page_file: Path | None
    steering: Steering | None
    clock: Callable[[], float]

    def coverage_line(self) -> str: ...

VERSION = 1
"""hunt.json's format: raised when a key changes meaning or goes."""


def write_summary(path: Path, hunt: Hunt, shrink: dict[str, Any] | None) -> Path:
    """Write hunt.json (`shrink`: the shrink's outcome as the journal's end record holds it)."""
    return write_atomically(path, json.dumps(summary(hunt, shrink), indent=2, sort_keys=False) + "\n")


def summary(hunt: Hunt, shrink: dict[str, Any] | None) -> dict[str, Any]:
    """The hunt's outcome as one object (see the module)."""
    result, folder = hunt.result, hunt.folder
    controls = [trial for trial in result.trials if trial.purpose == "control"]
    return {
        "version": VERSION,
        "scenario": result.scenario,
        "source": hunt.base.source,
        "strategy": hunt.strategy.name,
        "seed": result.seed,
        "rerun": _rerun(hunt),
        "bounds": hunt.settings.model_dump(mode="json"),
        "property": result.property_line,
        "expect_counts": hunt.property.expect,
        "controls": {"trials": len(controls),
                     "held": sum(1 for trial in controls if not trial.failures and trial.unjudged is None),
                     "not_judged": sum(1 for trial in controls if trial.unjudged is not None),
                     "failed": result.control.index if result.control is not None else None},
        "trials": dict(Counter(trial.purpose for trial in result.trials)),
        "stopped_by": result.stopped_by,
        "found": trial_data(result.found),
        "found_in_corpus": hunt.found_in_corpus,
        "failure": failure_data(result.failure) if result.failure is not None else None,
        "flaky": [{"trial": flaky.trial.index, "folder": flaky.trial.folder, "failure": failure_data(flaky.failure),
                   "replay": runs_data(flaky.replay)} for flaky in result.flaky],
        "shrink": shrink,
        "minimal_file": _named(hunt.minimal_file, folder),
        "minimal_seed": result.minimal_seed,
        "reproduction": ({"reproduced": result.reproduction[0], "runs": result.reproduction[1]}
                         if result.reproduction is not None else None),
        "coverage": hunt.coverage_line(),
        "certificate": result.certificate,
        **coverage.residual_record(result),
        "without_chaos": trial_data(result.control),
        "from_triage": hunt.steering.as_data() if hunt.steering is not None else None,
        "page": _named(hunt.page_file, folder),
        "journal": "hunt.jsonl",
        "seconds": _seconds(hunt),
    }


def _seconds(hunt: Hunt) -> float | None:
    """Wall time since the hunt started; None for a hunt handed over without running (`started` unset)."""
    started: float | None = getattr(hunt, "started", None)
    return round(hunt.clock() - started, 3) if started is not None else None


def _rerun(hunt: Hunt) -> str:
    """The command that draws this hunt's schedules again: its scenario, seed and strategy (and triage file); its
    other bounds are `bounds`."""
    words = ["mrtr-harness", "hunt", hunt.base.source, "--seed", str(hunt.seed), "--strategy", hunt.strategy.name]
    if hunt.steering is not None:
        words += ["--from-triage", hunt.steering.source]
    return shlex.join(words)


def trial_data(trial: Trial | None) -> dict[str, Any] | None:
    """A trial in a few keys: which, its seed, its results folder (relative to the hunt's), its schedule, its
    failures."""
    if trial is None:
        return None
    return {"trial": trial.index, "seed": trial.seed, "folder": trial.folder,
            "schedule": schedule_data(trial.schedule),
            "failures": [failure_data(failure) for failure in trial.failures]}


def _named(path: Path | None, folder: Path | None) -> str | None:
    return str(path.relative_to(folder)) if path is not None and folder is not None else None
