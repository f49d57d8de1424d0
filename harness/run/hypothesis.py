"""The steady-state hypothesis: probed before the chaos, during it, and after it (as in Chaos Toolkit).

`[hypothesis]` holds thresholds in the same language as `[expect]`; each probe evaluates
them over the flows that ended in its window and journals the result. A failed probe
before the chaos means the system was not steady to begin with (the run fails); during
or after it, the run deviated.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from harness.checks.thresholds import evaluate
from harness.config.thresholds import parse_thresholds
from harness.journal.figures import RunFigures
from harness.journal.records import HypothesisProbed, RecordType
from harness.journal.writer import Journal

MIN_FLOWS = 10
"""A window with fewer finished flows is not judged: two seconds into a chaos action, one unlucky flow
would otherwise read as a deviation."""

EVERY = 5.0
"""Seconds between probes during the chaos."""


class SteadyState:
    def __init__(self, table: Mapping[str, str | list[str]], journal: Journal) -> None:
        self.thresholds = parse_thresholds(dict(table))  # parsed once; probed every few seconds
        self.journal = journal

    def probe(self, phase: str, figures: RunFigures, elapsed: float, since: float = 0.0) -> bool | None:
        """Judge the flows of one window (those that ended from `since` to `elapsed`, seconds into the run);
        None when there is nothing to judge (no hypothesis, too few flows)."""
        if not self.thresholds or figures.flows < MIN_FLOWS:
            return None
        figures.duration = max(elapsed, 1e-9)
        verdicts = evaluate(self.thresholds, figures)
        ok = all(verdict.passed or verdict.observed is None for verdict in verdicts)
        self.journal.write(HypothesisProbed(type=RecordType.HYPOTHESIS, t=time.time(), phase=phase, ok=ok,
                                            detail=[verdict.as_dict() for verdict in verdicts],
                                            window={"from": round(max(since, 0.0), 3), "to": round(elapsed, 3)}))
        return ok
