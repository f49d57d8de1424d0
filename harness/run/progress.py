"""The one line a run shows while it goes: elapsed time, flows/s, flows in flight, rejections, next chaos.

On a terminal it is redrawn in place every second; in a log (CI) it is a new line every
few seconds, so a nightly job's output stays readable. Messages (`say`) clear the line
first, so they never end up glued to half a progress line, and pass through the harness's
scrubber (`harness.secrets`): a message may quote what a command or a server said.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from harness import foreign_text
from harness.config.durations import format_duration
from harness.config.load import Load
from harness.run.live_fold.client import FoldLost, FoldProcess
from harness.run.live_fold.protocol import ProgressCounts
from harness.secrets import scrub

if TYPE_CHECKING:
    from harness.chaos.schedule import ChaosRunner
    from harness.load.drivers import DistributedLoad, LocalLoad
    from harness.run.failures import Failures

EVERY_ON_A_TERMINAL = 1.0
EVERY_IN_A_LOG = 5.0


@dataclass(frozen=True)
class Progress:
    """What the line shows at one moment."""

    elapsed: float
    duration: float
    finished: int
    in_flight: int
    rejections: list[tuple[str, int]]
    next_chaos: str | None
    intended: str | None = None
    """With stages: the level the load aims at now ("12.0 flows/s", "8 agents")."""


class ProgressLine:
    def __init__(self, stream: IO[str], *, enabled: bool = True) -> None:
        self.stream = stream
        self.enabled = enabled
        self.tty = stream.isatty()
        self.every = EVERY_ON_A_TERMINAL if self.tty else EVERY_IN_A_LOG
        self._finished_before = 0

    def say(self, message: str) -> None:
        if self.enabled and self.tty:
            self.stream.write("\r\033[K")
        self.stream.write(foreign_text.block(scrub(message)) + "\n")  # it may quote a server: shown as text
        self.stream.flush()

    def follow(self, now: Callable[[], Progress], sleep: Callable[[float], object]) -> None:
        """Draw the line every `every` seconds until killed (a greenlet of the run)."""
        if not self.enabled:
            return
        while True:
            sleep(self.every)
            self.draw(now())

    def draw(self, progress: Progress) -> None:
        rate = (progress.finished - self._finished_before) / self.every
        self._finished_before = progress.finished
        rejected = ", ".join(f"{reason} {count}" for reason, count in progress.rejections[:3]) or "none"
        aim = f" (stage: {progress.intended})" if progress.intended else ""
        line = (f"{format_duration(progress.elapsed)}/{format_duration(progress.duration)}  "
                f"flows/s {rate:.1f}{aim}  in flight {progress.in_flight}  finished {progress.finished}  "
                f"rejections: {rejected}  next chaos: {progress.next_chaos or 'none'}")
        self.stream.write(("\r\033[K" + line) if self.tty else (line + "\n"))
        self.stream.flush()

    def end(self) -> None:
        """Leave the terminal on a fresh line once the run stops drawing."""
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


class LiveProgress:
    """What the line shows now, from the fold's counts, the load and the chaos schedule of a run started at `started`.

    Once the fold is lost, the line keeps the counts it last had.
    """

    def __init__(self, load_config: Load, duration: float, started: float, fold: FoldProcess, failures: Failures,
                 load: LocalLoad | DistributedLoad, chaos: ChaosRunner) -> None:
        self.load_config, self.duration, self.started = load_config, duration, started
        self.fold, self.failures, self.load, self.chaos = fold, failures, load, chaos
        self.counts: tuple[int, list[tuple[str, int]]] = (0, [])
        """Flows finished and the top rejection reasons, as the fold last said."""

    def __call__(self) -> Progress:
        if self.fold.lost is None:
            with self.failures.recorded(FoldLost):
                self.counts = self.fold.ask(ProgressCounts())
        finished, rejections = self.counts
        step = self.chaos.next_step()
        return Progress(elapsed=time.time() - self.started, duration=self.duration, finished=finished,
                        in_flight=self.load.active, rejections=rejections,
                        next_chaos=f"{step.action} at {format_duration(step.at)}" if step else None,
                        intended=self._intended_level())

    def _intended_level(self) -> str | None:
        """What the stages aim at now; None without stages."""
        load = self.load_config
        if not load.stages:
            return None
        level = load.level_at(time.time() - self.started)
        return f"{level:.1f} flows/s" if load.model == "open" else f"{round(level)} agents"
