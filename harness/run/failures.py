"""The harness's own failures in a run: one line on the terminal, the traceback in a file, the load stopped.

An unexpected error anywhere is the harness's failure (exit 4), never the target's. Only
the first is kept as the cause (later ones are often its consequences); each one's
traceback is appended to the file, and each is journaled while the journal is open.

The run's own greenlets (chaos, watch, progress) are started here so that a failure in one is
the harness's (`background`), and stopped in time (`stop_greenlets`): `gevent.Timeout` is a
BaseException, so left to itself a greenlet that will not stop would escape every handler of the
run (and skip the accounting of the flows in flight); a stop that times out is an ordinary error,
the harness's own.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gevent

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


# --- the run's own greenlets ---------------------------------------------------------------

STOP_TIMEOUT = 30.0
"""Seconds the run's own greenlets get to stop; longer means an overloaded process."""


class OverloadedError(RuntimeError):
    """The load process was too busy to stop its own greenlets: its figures cannot be trusted."""


def background(function: Callable[..., Any], *args: Any,
               failed: Callable[[BaseException | None], None]) -> gevent.Greenlet:
    """`function(*args)` in a greenlet; if it dies of an error, `failed` hears it."""
    greenlet = gevent.spawn(function, *args)
    greenlet.link_exception(lambda dead: failed(dead.exception))
    return greenlet


def stop_greenlets(greenlets: list[gevent.Greenlet], timeout: float = STOP_TIMEOUT) -> None:
    """Kill the run's own greenlets; one that has not stopped after `timeout` is the harness's failure."""
    try:
        gevent.killall(greenlets, block=True, timeout=timeout)
    except gevent.Timeout:
        raise OverloadedError(f"the run's own greenlets did not stop within {timeout:.0f} s: the load process "
                              "was too busy (lower the arrival rate, or spread the load with --workers)") from None
