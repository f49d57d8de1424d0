"""When the load ends: at the scenario's `duration`, or later while the chaos schedule still runs.

The load runs on while a chaos step runs, at most `chaos_overrun` longer: a step that
starts late (a slow restart before it) must still be seen under load, and stopping the
load mid-rotation would pass a run that never tested it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from harness.chaos.schedule import ChaosRunner
from harness.config.durations import format_duration
from harness.config.scenario import Scenario
from harness.journal.records import LoadExtended, RecordType, RunEvent
from harness.journal.writer import Journal


class LoadEnd:
    """The load's clock, from `started`; `stopped_because` says why it ended when no one stopped it."""

    def __init__(self, scenario: Scenario, started: float, journal: Journal, say: Callable[[str], None]) -> None:
        self.duration, self.overrun = scenario.duration, scenario.chaos_overrun
        self.started, self.journal, self.say = started, journal, say
        self.stopped_because = "duration"
        self._overrun_said = False

    def reached(self, chaos_done: bool, chaos: ChaosRunner | None) -> bool:
        """The load has run its `duration` and the chaos is done, or the overrun is spent."""
        overrun = time.time() - self.started - self.duration
        if overrun < 0 or chaos_done:
            return overrun >= 0
        if not self._overrun_said:
            self._overrun_said = True
            self._say_overrun(chaos)
        if overrun < self.overrun:
            return False
        self.stopped_because = "chaos_overrun reached with a chaos action still running"
        return True

    def _say_overrun(self, chaos: ChaosRunner | None) -> None:
        step = chaos.running if chaos is not None else None
        what = f"{step.action} (due at {format_duration(step.at)})" if step else "the chaos schedule"
        self.say(f"{what} still running at the end of the load: the load goes on until it ends, "
                 f"at most {format_duration(self.overrun)} more")
        self.journal.write(LoadExtended(type=RecordType.RUN, event=RunEvent.LOAD_EXTENDED, t=time.time(),
                                        reason="chaos still running", action=step.action if step else None))

    def seconds_left(self) -> float:
        """Seconds until `reached` can next say yes by the clock: the end of `duration`, then of the overrun."""
        elapsed = time.time() - self.started
        due = self.duration
        if elapsed >= due:
            due += self.overrun
        return max(due - elapsed, 0.001)
