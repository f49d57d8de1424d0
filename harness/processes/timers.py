"""Timers that ride on the wake-ups a load process has anyway, instead of each adding one.

On a small VM a load process spends more CPU on being woken than on a round's work, and
many of its wake-ups were timers (figures in benchmarks/README.md): an arrival, a lead's
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
"""Seconds a load process's waits (a lead's think time, a page visit, an agent's wait) may end early.

A lead who thinks 20 s answers 20 ms sooner, at most, and the process is not woken once
more for it.
"""


class _EveryPass:
    """One libev prepare watcher for every `Timers` of a hub that holds callbacks: one Python call per pass.

    A load process has a few (flows, arrivals, the journal, sleeps), and its loop makes a
    pass or two per round; a watcher each would call into Python once per `Timers` per pass.
    """

    _of_loop: dict[int, _EveryPass] = {}

    def __init__(self, loop: Any) -> None:
        self._loop = loop
        self._waiting: list[Timers] = []
        self._watcher: Any = loop.prepare(ref=False)
        """Called on every pass of the loop, just before it polls."""

    @classmethod
    def of(cls, loop: Any) -> _EveryPass:
        every_pass = cls._of_loop.get(id(loop))
        if every_pass is None or every_pass._loop is not loop:
            every_pass = cls._of_loop[id(loop)] = cls(loop)
        return every_pass

    def add(self, timers: Timers) -> None:
        if timers not in self._waiting:
            self._waiting.append(timers)
            if not self._watcher.active:
                self._watcher.start(self._run)

    def remove(self, timers: Timers) -> None:
        if timers in self._waiting:
            self._waiting.remove(timers)
            if not self._waiting:
                self._watcher.stop()

    def _run(self) -> None:
        for timers in tuple(self._waiting):
            heap = timers._heap
            if heap and heap[0][0] <= timers._clock() + timers.slack:
                timers._run_due()


class Timers:
    """Callbacks at their due times, run early by up to `slack` seconds on a wake-up the process has anyway."""

    def __init__(self, slack: float, clock: Callable[[], float] = time.time) -> None:
        """`clock`: what "now" is for every due time (`time.time`; a test injects a clock it moves by hand, and
        judges the slack without real waiting). Each pass of the loop reads it; the timers' own wake-up is armed
        for the clock's distance to the next due time, in real seconds, and checks the clock again when it fires.
        """
        self.slack = slack
        self._clock = clock
        self._heap: list[tuple[float, int, Callable[[Any], object], Any]] = []
        self._order = itertools.count()
        """Ties broken by arrival: a heap never compares two callbacks."""
        self._loop: Any = get_hub().loop
        self._timer: Any = None
        self._armed_for = math.inf
        self._every_pass = _EveryPass.of(self._loop)

    def __len__(self) -> int:
        return len(self._heap)

    def call_at(self, due: float, callback: Callable[[Any], object], argument: Any = None) -> None:
        """Call `callback(argument)` in the hub at `due` (the clock's time), or up to `slack` before it.

        One argument, not a closure: a flow waiting on its lead is this heap entry alone.
        """
        heapq.heappush(self._heap, (due, next(self._order), callback, argument))
        if due < self._armed_for:
            self._arm(due)
            self._every_pass.add(self)

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
        self._every_pass.remove(self)

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
