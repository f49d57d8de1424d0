"""Flows waiting on their leads are parked as data (`harness.load.parking`): resumed when due, no greenlet each.

Real gevent, real (short) waits: every test is bounded by a deadline of a second or two,
which only a broken timer would reach.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import gevent
import pytest
from gevent.pool import Group

from harness.load.parking import IDLE_WORKERS, Parking

DEADLINE = 3.0


def waits(name: str, seconds: list[float], log: list[str]) -> Generator[float, None, None]:
    """Steps that wait each of `seconds` in turn and log when they go on."""
    for wait in seconds:
        yield wait
        log.append(name)


def settle(group: Group, parking: Parking, log: list[str], expected: int) -> None:
    """Until nothing is parked and `expected` steps went on, or the deadline."""
    with gevent.Timeout(DEADLINE, False):
        while len(parking) or len(log) < expected:
            gevent.sleep(0.01)


@pytest.fixture
def parked() -> Any:
    group = Group()
    parking = Parking(group)
    yield group, parking
    parking.clear()
    group.kill()


def test_parked_steps_go_on_in_the_order_they_are_due_not_the_order_they_were_parked(parked):
    group, parking = parked
    log: list[str] = []
    for name, wait in (("slow", 0.3), ("fast", 0.05), ("middle", 0.15)):
        parking.start(waits(name, [wait], log))
    settle(group, parking, log, 3)
    assert log == ["fast", "middle", "slow"]


def test_a_step_due_before_everything_parked_wakes_the_timer(parked):
    group, parking = parked
    log: list[str] = []
    parking.start(waits("an hour", [3600.0], log))
    gevent.sleep(0.05)  # the timer now sleeps until the hour is up
    parking.start(waits("soon", [0.05], log))
    with gevent.Timeout(DEADLINE, False):
        while not log:
            gevent.sleep(0.01)
    assert log == ["soon"]
    assert len(parking) == 1


def test_a_waiting_flow_holds_no_greenlet_only_a_heap_entry(parked):
    group, parking = parked
    log: list[str] = []
    for number in range(500):
        parking.start(waits(f"f{number}", [60.0, 60.0], log))
    with gevent.Timeout(DEADLINE, False):  # a worker that ended leaves the group on a later loop pass
        while len(parking) < 500 or len(group) > IDLE_WORKERS:
            gevent.sleep(0.01)
    assert len(parking) == 500
    assert len(group) <= IDLE_WORKERS  # what is left is a few idle workers, not a greenlet per waiting flow
    assert log == []


def test_a_flow_that_waits_several_times_is_resumed_each_time_and_ends(parked):
    group, parking = parked
    log: list[str] = []
    parking.start(waits("thrice", [0.02, 0.02, 0.02], log))
    settle(group, parking, log, 3)
    assert log == ["thrice"] * 3
    assert len(parking) == 0 and len(group) <= 1  # the one worker that ran it, idle


def test_a_wait_of_zero_goes_on_at_once_without_parking(parked):
    group, parking = parked
    log: list[str] = []
    parking.advance(waits("instant", [0.0, 0.0], log))
    assert log == ["instant", "instant"]
    assert len(parking) == 0


def test_clearing_closes_every_parked_flow_and_runs_its_finally(parked):
    group, parking = parked
    closed: list[int] = []

    def flow(number: int) -> Generator[float, None, None]:
        try:
            yield 3600.0
        finally:
            closed.append(number)

    for number in range(50):
        parking.start(flow(number))
    with gevent.Timeout(DEADLINE, False):
        while len(parking) < 50:
            gevent.sleep(0.01)
    assert parking.clear() == 50
    assert sorted(closed) == list(range(50))
    assert len(parking) == 0


def test_workers_killed_while_idle_are_never_handed_a_flow_again(parked):
    """A flow handed to a dead worker would never run, and never end: the worst loss a run can have."""
    group, parking = parked
    log: list[str] = []
    parking.start(waits("first", [0.01], log))
    settle(group, parking, log, 1)
    assert len(group) == 1  # the worker that ran it, idle
    group.kill()
    parking.start(waits("after", [0.01], log))
    settle(group, parking, log, 2)
    assert log == ["first", "after"]
