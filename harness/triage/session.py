"""One triage session: every source read on its own thread, through its own parser, into one count.

A source blocks on its stream (a pipe, a container's log, a file's next poll), so each
gets a thread; what they share is the `Counts`, which locks. The display's thread calls
`tick` now and then, which finishes a rich record that a stream went quiet after.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from harness.triage.counts import Counts
from harness.triage.parse import LineParser, Rejection
from harness.triage.sources import Source

STALE_SECONDS = 1.0
"""A rich record still unfinished this long after its first line is counted as it stands."""
JOIN_SECONDS = 3.0
"""How long `stop` waits, in all, for the readers (one blocked on a terminal's stdin would never end)."""


class _Reader:
    def __init__(self, source: Source, parser: LineParser) -> None:
        self.source = source
        self.parser = parser
        self.lines = 0
        self.error: str | None = None
        self.thread: threading.Thread | None = None

    def run(self) -> None:
        feed = self.parser.feed
        try:
            for replica, line in self.source.lines():
                feed(line, replica)
                self.lines += 1
        except Exception as exc:  # noqa: BLE001 - reported as the source's failure, the others carry on
            self.error = f"{self.source.name}: {exc.__class__.__name__}: {exc}"
        finally:
            self.parser.flush()


class Session:
    """Reads `sources` into `counts` until they end (read once) or `stop()` (followed)."""

    def __init__(self, sources: Sequence[Source], counts: Counts) -> None:
        self.sources = list(sources)
        self.counts = counts
        self._readers: list[_Reader] = []
        self._running = 0
        self._lock = threading.Lock()
        self._done = threading.Event()
        counts.declare(replica for source in self.sources for replica in source.replicas)

    def start(self) -> None:
        for source in self.sources:
            reader = _Reader(source, LineParser(self._count))
            self.counts.count_lines_with(lambda reader=reader: reader.lines)
            reader.thread = threading.Thread(target=self._run, args=(reader,), daemon=True,
                                             name=f"triage-{source.name}")
            self._readers.append(reader)
        self._running = len(self._readers)
        if not self._readers:
            self._done.set()
        for reader in self._readers:
            assert reader.thread is not None
            reader.thread.start()

    def _count(self, rejection: Rejection) -> None:
        self.counts.add(rejection.replica, rejection.reason)

    def _run(self, reader: _Reader) -> None:
        try:
            reader.run()
        finally:
            with self._lock:
                self._running -= 1
                if self._running == 0:
                    self._done.set()

    @property
    def finite(self) -> bool:
        """True when every source ends by itself."""
        return all(source.finite for source in self.sources)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every source has ended (True) or `timeout` passes (False)."""
        return self._done.wait(timeout)

    def tick(self) -> None:
        for reader in self._readers:
            reader.parser.flush(older_than=STALE_SECONDS)

    def stop(self) -> None:
        """Stop every source (commands by their PID), then finish what the parsers hold."""
        for source in self.sources:
            source.close()
        deadline = time.monotonic() + JOIN_SECONDS
        for reader in self._readers:
            if reader.thread is not None:
                reader.thread.join(max(0.0, deadline - time.monotonic()))
        for reader in self._readers:
            reader.parser.flush()

    @property
    def failures(self) -> list[str]:
        """What went wrong with sources after they opened (an error, a command exiting non-zero)."""
        failures = [reader.error for reader in self._readers if reader.error]
        failures += [source.failure for source in self.sources if source.failure]
        return failures
