"""How a run stops early: an abort, a signal or a harness error sets the reason, and whatever waits wakes at once.

Ctrl-C and SIGTERM (and the web UI's STOP) stop the load (the rollback, the teardown and the results still happen);
the handlers the caller had are back once the run is over, so a caller running several
runs (a capacity sweep) keeps its own.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gevent.event import Event

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stop:
    """Why the run stops early (None while it does not); `interrupted` when a signal said so."""

    def __init__(self) -> None:
        self._reason: str | None = None
        self.interrupted = False
        self.event = Event()
        """Set with the reason: whatever waits for the load's end (or a chaos step's time) wakes at once."""

    @property
    def reason(self) -> str | None:
        return self._reason

    @reason.setter
    def reason(self, reason: str | None) -> None:
        self._reason = reason
        if reason is not None:
            self.event.set()

    def interrupt(self, reason: str) -> None:
        """Stop the run as Ctrl-C does: no grace for the flows in flight, status interrupted, exit 130."""
        self.interrupted = True
        self.reason = reason

    def wait_until(self, when: float) -> None:
        """Sleep until the clock reads `when`, or the run stops early."""
        while time.time() < when and self.reason is None:
            self.event.wait(when - time.time())

    @contextmanager
    def on_signals(self) -> Iterator[None]:
        """Ctrl-C and SIGTERM stop the run until the block ends; then the handlers it replaced are back."""

        def stop(signum: int, frame: object) -> None:
            self.interrupt(f"interrupted by {signal.Signals(signum).name}")

        previous: dict[signal.Signals, Any] = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                if handler is not None:  # None: installed outside Python, nothing this process can put back
                    signal.signal(sig, handler)
