"""The steady-state hypothesis: probed before the chaos, during it, and after it (as in Chaos Toolkit).

`[hypothesis]` holds thresholds in the same language as `[expect]`; each probe evaluates
them over the flows that ended in its window, with rates taken over the window's own
seconds, and journals the result. A failed probe before the chaos means the system was
not steady to begin with (the run fails); during or after it, the run deviated.

A condition with nothing to observe (no samples, no flow ended in the window, a window with
no time in it) is not judged. A window's last probe fails closed on it: the window is not
steady unless the scenario says `hypothesis_unjudged = "pass"`. An earlier probe of a window
that is still open judges what it can, and nothing while few flows ended in it: the window's
last probe covers the same flows and more, and judges them all.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from harness.config.thresholds import parse_thresholds
from harness.folding.figures import RunFigures
from harness.folding.thresholds import ThresholdResult, evaluate
from harness.journal.records import HypothesisProbed, RecordType
from harness.journal.writer import Journal

MIN_FLOWS = 10
"""An earlier probe of a window still open says nothing with fewer finished flows (its last probe judges them):
two seconds into a chaos action, one unlucky flow would otherwise read as a deviation."""

EVERY = 5.0
"""Seconds between probes during the chaos."""


@dataclass(frozen=True)
class Window:
    """The span a probe judges, in seconds into the run; `last` when no later probe of it will come."""

    since: float
    until: float
    last: bool = True

    @property
    def seconds(self) -> float:
        return self.until - self.since


class SteadyState:
    def __init__(self, table: Mapping[str, str | list[str]], journal: Journal, unjudged: str = "fail") -> None:
        self.thresholds = parse_thresholds(dict(table))  # parsed once; probed every few seconds
        self.journal = journal
        self.unjudged_passes = unjudged == "pass"

    def probe(self, phase: str, figures: RunFigures, window: Window) -> bool | None:
        """Judge the flows of one window (those that ended in it), its rates over its own seconds; None when
        nothing was journaled (no hypothesis, or an earlier probe of an open window with nothing to judge yet)."""
        if not self.thresholds:
            return None
        why = _window_unjudged(figures, window)
        if not window.last and (why is not None or figures.flows < MIN_FLOWS):
            return None
        if window.seconds > 0:
            figures.duration = window.seconds
        items = [_item(verdict, why) for verdict in evaluate(self.thresholds, figures)]
        if not window.last and not any(item["judged"] for item in items):
            return None
        failed = any(item["judged"] and not item["passed"] for item in items)
        unjudged = any(not item["judged"] for item in items)
        ok = not failed and (not unjudged or not window.last or self.unjudged_passes)
        self.journal.write(HypothesisProbed(type=RecordType.HYPOTHESIS, t=time.time(), phase=phase, ok=ok,
                                            detail=items, window={"from": round(max(window.since, 0.0), 3),
                                                                  "to": round(window.until, 3)}))
        return ok


def _window_unjudged(figures: RunFigures, window: Window) -> str | None:
    """Why no condition of this window can be judged, or None when they can."""
    if window.seconds <= 0:
        return "the window has no time in it"
    if not figures.flows:
        return "no flow ended in the window"
    return None


def _item(verdict: ThresholdResult, why: str | None) -> dict[str, object]:
    """One condition's result as journaled: judged, or not and why (then it did not pass either)."""
    if why is None and verdict.observed is None:
        why = "no samples"
    item = verdict.as_dict()
    if why is None:
        return {**item, "judged": True}
    return {**item, "passed": False, "judged": False, "why": why}
