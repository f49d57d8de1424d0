"""The one line a run shows while it goes: elapsed time, flows/s, flows in flight, rejections, next chaos.

On a terminal it is redrawn in place every second; in a log (CI) it is a new line every
few seconds, so a nightly job's output stays readable. Messages (`say`) clear the line
first, so they never end up glued to half a progress line, and pass through the harness's
scrubber (`harness.secrets`): a message may quote what a command or a server said.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from harness.config.durations import format_duration
from harness.secrets import scrub

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
        self.stream.write(scrub(message) + "\n")
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
