"""The harness's own failures in a run: one line on the terminal, the traceback in a file, the load stopped.

An unexpected error anywhere is the harness's failure (exit 4), never the target's. Only
the first is kept as the cause (later ones are often its consequences); each one's
traceback is appended to the file, and each is journaled while the journal is open.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.atomic_files import PlantedLink, open_append
from harness.journal.records import HarnessErrorRecord, RecordType, RunEvent
from harness.journal.writer import Journal
from harness.run.stopping import Stop
from harness.secrets import scrub

logger = logging.getLogger(__name__)

TRACEBACK_FILE = "harness-error.txt"


class Failures:
    """The run's harness errors: `error` is the first, in one line (exit 4)."""

    def __init__(self, folder: Path, journal: Journal, stop: Stop, say: Callable[[str], None]) -> None:
        self.folder, self.journal, self.stop, self.say = folder, journal, stop, say
        self.error: str | None = None

    def record(self, exc: BaseException | None) -> None:
        """One failure: said, its traceback kept, journaled, and (the first) the run stopped."""
        text = scrub(f"{type(exc).__name__}: {exc}") if exc is not None else "unknown error"
        trace = scrub("".join(traceback.format_exception(exc))) if exc is not None else text
        path: Path | None = self.folder / TRACEBACK_FILE
        try:
            with open_append(self.folder / TRACEBACK_FILE) as file:
                file.write(trace + "\n")
        except (OSError, PlantedLink):
            path = None
        if self.error is None:
            self.error = text
            self.stop.reason = self.stop.reason or f"harness error: {text}"
        elif text == self.error:
            return  # the same failure again, seen by a later step (a lost fold is asked again): said once
        if not self.journal.closed:
            self.journal.write(HarnessErrorRecord(type=RecordType.RUN, event=RunEvent.ERROR, t=time.time(), error=text,
                                                  traceback_file=path.name if path else None))
        logger.debug("harness error", exc_info=exc)
        self.say(f"harness error: {text}" + (f" (traceback in {path})" if path else ""))

    @contextmanager
    def recorded(self, *kinds: type[BaseException]) -> Iterator[None]:
        """Errors of these kinds in the block are recorded, and the run goes on."""
        try:
            yield
        except kinds as exc:
            self.record(exc)

    def step(self, step: Callable[..., Any], *args: Any) -> None:
        """One teardown step: a failure is recorded and must not skip the rollback or the teardown."""
        with self.recorded(Exception):
            step(*args)
