"""Flows waiting on their leads, parked as data: a timer heap, not a sleeping greenlet each.

At 100 flows/s with leads who take five minutes, 30,000 flows wait at once; a parked
greenlet keeps its saved C stack (several KiB) for the whole wait. A flow here is a
generator of steps (`harness.load.flows.flow_steps`) that yields each wait instead of
sleeping it. A waiting flow is one heap entry and the generator's frames, which hold only
what its next round needs. One timer greenlet pops the flows that are due and resumes
each on a greenlet of the load's group, which runs it until its next wait (or its end)
and then returns: greenlets exist only for flows doing a round.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any

import gevent
from gevent.event import Event
from gevent.pool import Group

from harness.mrtr import Steps


class Parking:
    """Resumes parked steps when they are due, each on a greenlet of `group`."""

    def __init__(self, group: Group, clock: Callable[[], float] = time.time) -> None:
        self._group = group
        self._clock = clock
        self._heap: list[tuple[float, int, Steps[Any]]] = []
        self._order = itertools.count()
        """Ties broken by parking order: a heap never compares two generators."""
        self._changed = Event()
        self._timer: gevent.Greenlet[Any, Any] | None = None

    def __len__(self) -> int:
        """Steps parked now (flows waiting on a lead or a backoff)."""
        return len(self._heap)

    def start(self, steps: Steps[Any]) -> None:
        """Run new steps on a greenlet of the group until their first wait."""
        self._group.spawn(self.advance, steps)

    def advance(self, steps: Steps[Any]) -> None:
        """Run steps in this greenlet until they wait (then park them) or end.

        A wait of zero (a lead who answers at once) goes on here, without a trip through
        the heap.
        """
        try:
            wait = next(steps)
            while wait <= 0:
                wait = next(steps)
        except StopIteration:
            return
        self._park(steps, self._clock() + wait)

    def _park(self, steps: Steps[Any], due: float) -> None:
        heapq.heappush(self._heap, (due, next(self._order), steps))
        if self._timer is None:
            self._timer = gevent.spawn(self._resume_due)
        elif self._heap[0][2] is steps:
            self._changed.set()  # due before everything else: the timer sleeps too long

    def _resume_due(self) -> None:
        """The one timer: sleep until the earliest step is due, resume it, repeat."""
        heap = self._heap
        while True:
            if not heap:
                self._changed.clear()
                self._changed.wait()
                continue
            delay = heap[0][0] - self._clock()
            if delay > 0:
                self._changed.clear()
                self._changed.wait(delay)
                continue
            _, _, steps = heapq.heappop(heap)
            self._group.spawn(self.advance, steps)

    def clear(self) -> int:
        """Stop the timer and drop every parked step; returns how many were dropped.

        Dropping a generator closes it: its flow's `finally` runs (and writes nothing when
        the run has already journaled the flow's end).
        """
        if self._timer is not None:
            self._timer.kill(block=False)
            self._timer = None
        dropped = len(self._heap)
        heap, self._heap = self._heap, []
        for _, _, steps in heap:
            steps.close()
        return dropped
