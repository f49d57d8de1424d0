"""Timers that ride on the wake-ups a load process has anyway, instead of each adding one.

A load process spends most of its CPU on being woken, not on its work: on a 2-core VM a
bare `gevent.sleep` that wakes the process costs 150-200 µs of CPU, more than the Python
work of a whole MRTR round when the caches are warm (benchmarks/README.md). At 16 flows/s
the process woke about 115 times a second, half of them for timers: an arrival, a lead's
answer, a journal batch, each at its own moment between the replies.

A `Timers` runs each callback at its due time or up to `slack` seconds before it, at the
first pass of gevent's loop inside that window: when a reply, another timer or anything
else has woken the process. Only when nothing else does is there a wake-up of its own,
at the due time (libev's timer). This is what Linux's timer slack does for a thread's
sleeps; libev's own `timeout_collect_interval` would fire late instead, and gevent does
not expose it.

Callbacks run in gevent's hub: they must not block (spawn a greenlet, or switch to a
waiting one as `sleep` does). Outside gevent's patching (no load process) nothing here
is used.
"""

from __future__ import annotations

import heapq
import itertools
import math
import sys
import time
from collections.abc import Callable
from typing import Any

from gevent.hub import Waiter, get_hub

SLACK = 0.02
"""Seconds a load process's waits (a lead's think time, the next arrival, a page visit) may end early.

A lead who thinks 20 s answers 20 ms sooner, at most, and the process is not woken once
more for it.
"""


class Timers:
    """Callbacks at their due times, run early by up to `slack` seconds on a wake-up the process has anyway."""

    def __init__(self, slack: float, clock: Callable[[], float] = time.time) -> None:
        self.slack = slack
        self._clock = clock
        self._heap: list[tuple[float, int, Callable[[Any], object], Any]] = []
        self._order = itertools.count()
        """Ties broken by arrival: a heap never compares two callbacks."""
        self._loop: Any = get_hub().loop
        self._timer: Any = None
        self._armed_for = math.inf
        self._every_pass: Any = self._loop.prepare(ref=False)
        """libev's prepare watcher: called on every pass of the loop, just before it polls."""

    def __len__(self) -> int:
        return len(self._heap)

    def call_at(self, due: float, callback: Callable[[Any], object], argument: Any = None) -> None:
        """Call `callback(argument)` in the hub at `due` (the clock's time), or up to `slack` before it.

        One argument, not a closure: a flow waiting on its lead is this heap entry alone.
        """
        heapq.heappush(self._heap, (due, next(self._order), callback, argument))
        if due < self._armed_for:
            self._arm(due)
        if not self._every_pass.active:
            self._every_pass.start(self._run_due)

    def sleep(self, seconds: float) -> None:
        """Block this greenlet for `seconds`, or up to `slack` less; always yields, also for zero."""
        waiter = Waiter()
        self.call_at(self._clock() + seconds, waiter.switch)
        waiter.get()

    def clear(self) -> list[Any]:
        """Forget every callback not run yet; returns their arguments, in due order."""
        pending = [entry[3] for entry in sorted(self._heap, key=lambda entry: entry[:2])]
        self._heap = []
        self._disarm()
        return pending

    def _arm(self, due: float) -> None:
        if self._timer is not None:
            self._timer.close()
        self._timer = self._loop.timer(max(0.0, due - self._clock()))
        self._timer.start(self._run_due)
        self._armed_for = due

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.close()
            self._timer = None
        self._armed_for = math.inf
        if self._every_pass.active:
            self._every_pass.stop()

    def _run_due(self) -> None:
        """Run what is due within the slack; callbacks added meanwhile wait for the next pass.

        Taking the due ones first means a callback that adds another due at once (an
        arrival behind schedule) lets the rest of the loop run before it goes on.
        """
        heap = self._heap
        if not heap:
            self._disarm()
            return
        limit = self._clock() + self.slack
        if heap[0][0] > limit:
            if self._timer is None or not self._timer.active:
                self._arm(heap[0][0])  # our own timer fired early by the clock's rounding: again, for the rest
            return
        due = []
        while heap and heap[0][0] <= limit:
            due.append(heapq.heappop(heap))
        if heap:
            self._arm(heap[0][0])
        else:
            self._disarm()
        for _, _, callback, argument in due:
            try:
                callback(argument)
            except Exception:  # noqa: BLE001 - one callback's error must not drop the others taken with it
                get_hub().handle_error(callback, *sys.exc_info())
