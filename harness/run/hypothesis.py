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

The windows are the fold's (`HypothesisWindows`): "before" is the whole run until the chaos
starts, "during" is fed from the chaos's start until its end, "after" from there until the
load's last flow ended. Where a probe asks the fold, a lost fold is the run's harness error
(said once), and the probe goes on without it.
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
from harness.run.failures import Failures
from harness.run.live_fold.client import FoldLost, FoldProcess
from harness.run.live_fold.protocol import Figures, OpenWindow, WindowFigures

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


class HypothesisWindows:
    """The steady state probed over the fold's windows: before the chaos, during it, after it."""

    def __init__(self, table: Mapping[str, str | list[str]], unjudged: str, journal: Journal, fold: FoldProcess,
                 failures: Failures) -> None:
        self.steady_state = SteadyState(table, journal, unjudged)
        self.fold, self.failures = fold, failures
        self.started = 0.0
        """Time zero: when the load started."""
        self.chaos: tuple[float | None, float | None] = (None, None)
        """When the chaos began and ended: the "during" window, then the "after" one from its end."""
        self._chaos_end_probed = False

    @property
    def wanted(self) -> bool:
        """Only a scenario with a hypothesis has windows to probe."""
        return bool(self.steady_state.thresholds)

    def probe_before(self) -> None:
        """Judge the hypothesis over the whole run so far, before the chaos starts."""
        if self.wanted:
            with self.failures.recorded(FoldLost):
                until = time.time() - self.started  # what the fold holds when asked: the flows ended by now
                self.steady_state.probe("before", self.fold.ask(Figures()), Window(0.0, until))

    def chaos_began(self) -> None:
        since = time.time()
        self.chaos = (since, None)
        self._open("during", since)

    def chaos_ended(self) -> None:
        """The "during" window closes (fed no more), the "after" one opens; nothing when the chaos never began."""
        since = self.chaos[0]
        if since is not None:
            until = time.time()
            self.chaos = (since, until)
            self._open("after", until, closing="during")

    def probe_during(self) -> None:
        """An earlier probe of the "during" window, while the chaos runs."""
        since, until = self.chaos
        if since is not None and until is None:
            self._probe("during", since)

    def probe_chaos_end(self) -> None:
        """The "during" window's last probe, once the chaos ended and its window is closed (fed no more); marked done
        after it, so a greenlet killed while asking leaves it to the wind-down."""
        since, until = self.chaos
        if since is not None and until is not None and not self._chaos_end_probed:
            self._probe("during", since, until)
            self._chaos_end_probed = True

    def probe_after(self, load_ended: float | None) -> None:
        """The "during" window's last probe if the chaos was cut short, then the "after" window's, which ends when
        the last flow did (the load's flows ended or journaled as interrupted)."""
        self.probe_chaos_end()
        until = self.chaos[1]
        if until is not None:
            self._probe("after", until, load_ended or time.time())

    def _open(self, name: str, since: float, closing: str | None = None) -> None:
        """A window in the fold, fed from `since` on."""
        if self.wanted:
            with self.failures.recorded(FoldLost):
                self.fold.tell(OpenWindow(name, since, closing))

    def _probe(self, phase: str, since: float, until: float | None = None) -> None:
        """Judge the hypothesis over a window's flows (`phase` names the window: during, after), from `since` to
        `until` (the window's end: its last probe) or to now (an earlier probe of a window still open)."""
        if not self.wanted:
            return
        with self.failures.recorded(FoldLost):
            end = time.time() if until is None else until  # taken before asking: the fold holds the flows ended by now
            figures = self.fold.ask(WindowFigures(phase))
            if phase == "during" and until is None and self.chaos[1] is not None:
                return  # the chaos ended while the fold was asked: its last probe judges the whole window
            if figures is not None:
                self.steady_state.probe(phase, figures, Window(since - self.started, end - self.started,
                                                               last=until is not None))
