"""One triage session: every source read through its own parser into one count.

The reading itself is the log pipeline's (`harness.logs.readers`, as a run's collector
reads): files on one shared poller, each stream (a pipe, a container's log) on its own
thread. What they share is the `LiveCounts`, which locks. The display's thread calls `tick`
now and then, which finishes a rich record that a stream went quiet after.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from harness.logs.adapters import Adapter
from harness.logs.parse import LineParser, Rejection
from harness.logs.readers import Readers
from harness.logs.sources import Source
from harness.triage.counts import LiveCounts

STALE_SECONDS = 1.0
"""A rich record still unfinished this long after its first line is counted as it stands."""
JOIN_SECONDS = 3.0
"""How long `stop` waits, in all, for the readers (one blocked on a terminal's stdin would never end)."""


class Session:
    """Reads `sources` (opened) into `counts` until they end (read once) or `stop()` (followed)."""

    def __init__(self, sources: Sequence[Source], counts: LiveCounts, adapter: Adapter | None = None) -> None:
        """`adapter`: the server implementation the logs are of; None: told from each source's own lines, and
        said once per format in `formats`."""
        self.sources = list(sources)
        self.counts = counts
        self.adapter = adapter
        self.formats: list[str] = []
        """How each source's lines were read, when told from them: one line each, the same line said once."""
        self._readers = Readers(settle=STALE_SECONDS)
        counts.declare(replica for source in self.sources for replica in source.replicas)

    def start(self) -> None:
        self.counts.count_lines_with(lambda: self._readers.lines)
        self.counts.count_sources_with(self.read_by_source)
        for source in self.sources:
            parser = LineParser(self._counter(source.fallback_replica), adapter=self.adapter,
                                detect=self._say_format if self.adapter is None else None)
            self._readers.read(source, parser)

    def _say_format(self, line: str) -> None:
        if line not in self.formats:
            self.formats.append(line)

    def _counter(self, fallback: str | None) -> Callable[[Rejection], None]:
        """Counts a source's rejections, under `fallback` where neither the source nor the line names a replica."""
        counts = self.counts
        add = counts.add

        def count(rejection: Rejection) -> None:
            if rejection.unasked:  # a -32021 line (an adapter's [unasked]): no refused requestState, counted apart
                counts.add_unasked(rejection.replica or fallback)
                return
            add(rejection.replica or fallback, rejection.reason, rejection.logged_at, rejection.logged,
                rejection.trace_id)

        return count

    def read_by_source(self) -> dict[str, dict[str, int]]:
        """Per source: the lines read, those its parser could not read (`bad`, skipped) and those cut (`cut`)."""
        return {reader.source.name: {"lines": reader.lines, "bad": reader.bad, "cut": reader.cut}
                for reader in self._readers.readers}

    @property
    def finite(self) -> bool:
        """True when every source ends by itself."""
        return all(source.finite for source in self.sources)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every source has ended (True) or `timeout` passes (False)."""
        return self._readers.wait(timeout)

    def tick(self) -> None:
        self._readers.tick(older_than=STALE_SECONDS)

    def stop(self) -> None:
        """Stop every source (commands by their PID), then finish what the parsers hold."""
        self._readers.stop(timeout=JOIN_SECONDS)

    @property
    def failures(self) -> list[str]:
        """What went wrong with sources after they opened (an error, a command exiting non-zero)."""
        return self._readers.failures
