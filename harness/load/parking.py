"""Flows waiting on their leads, parked as data: a timer heap, not a sleeping greenlet each.

At 100 flows/s with leads who take five minutes, 30,000 flows wait at once; a parked
greenlet keeps its saved C stack (several KiB) for the whole wait. A flow here is a
generator of steps (`harness.load.kinds.flow_steps`) that yields each wait instead of
sleeping it. A waiting flow is one entry on a `harness.processes.timers.Timers` heap and the
generator's frames, which hold only what its next round needs. When it is due the flow
is resumed on a worker greenlet of the load's group, which runs it until its next wait
(or its end): greenlets exist only for flows doing a round, plus a few idle workers.

Workers are kept (up to `IDLE_WORKERS`) rather than spawned per round: a new greenlet
costs an allocation and release of its own frame stack (an mmap and a munmap, and the
page faults between them, on Python 3.11) and the group's bookkeeping, every round.

A flow goes on up to `harness.processes.timers.SLACK` before its lead's answer is due when the
process is awake anyway (a reply came in), instead of being woken once more for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gevent import get_hub, getcurrent
from gevent.hub import Waiter
from gevent.pool import Group

from harness.mrtr.client import Steps
from harness.processes.timers import SLACK, Timers

IDLE_WORKERS = 32
"""Idle worker greenlets kept for the next due flow; more than this many idle at once end."""


class Parking:
    """Resumes parked steps when they are due, each on a greenlet of `group`."""

    def __init__(self, group: Group, clock: Callable[[], float] = time.time) -> None:
        self._group = group
        self._clock = clock
        self._timers = Timers(SLACK, clock)
        self._hub = get_hub()
        self._resume = self.start
        """One bound method for every heap entry: `self.start` would make a new one per waiting flow."""
        self._idle: list[Waiter[Steps[Any]]] = []
        """One waiter per idle worker: switching into it hands that worker its next steps."""

    def __len__(self) -> int:
        """Steps parked now (flows waiting on a lead or a backoff)."""
        return len(self._timers)

    def start(self, steps: Steps[Any]) -> None:
        """Run steps on a worker of the group until their next wait: an idle worker, or a new one."""
        if not self._idle:
            self._group.spawn(self._work, steps)
        elif getcurrent() is self._hub:
            self._idle.pop().switch(steps)
        else:
            self._hub.loop.run_callback(self._idle.pop().switch, steps)

    def _work(self, steps: Steps[Any]) -> None:
        """A worker: advance the steps it is handed, then wait idle for more (or end, when enough wait)."""
        while True:
            self.advance(steps)
            if len(self._idle) >= IDLE_WORKERS:
                return
            waiter: Waiter[Steps[Any]] = Waiter()
            self._idle.append(waiter)
            try:
                steps = waiter.get()
            except BaseException:  # killed while idle (the load stopping): never to be handed steps again
                if waiter in self._idle:
                    self._idle.remove(waiter)
                raise

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
        self._timers.call_at(self._clock() + wait, self._resume, steps)

    def clear(self) -> int:
        """Drop every parked step; returns how many were dropped.

        Dropping a generator closes it: its flow's `finally` runs (and writes nothing when
        the run has already journaled the flow's end).
        """
        dropped = self._timers.clear()
        for steps in dropped:
            steps.close()
        return len(dropped)
