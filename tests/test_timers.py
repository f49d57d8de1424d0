"""Timers that ride on the load process's wake-ups (`harness.runtime.timers`): early within their slack, never earlier.

Real gevent and real short waits, with wide margins: each test asserts an order or a
side of a margin of 50 ms or more, never a duration.
"""

from __future__ import annotations

import time
from typing import Any

import gevent
import pytest

from harness.runtime.timers import Timers

DEADLINE = 3.0


def wait_for(condition: Any) -> None:
    with gevent.Timeout(DEADLINE, False):
        while not condition():
            gevent.sleep(0.005)


def test_a_callback_runs_when_it_is_due_with_nothing_else_to_wake_the_process() -> None:
    timers = Timers(slack=0.02)
    ran: list[float] = []
    start = time.time()
    timers.call_at(start + 0.1, ran.append)
    wait_for(lambda: ran)
    assert len(ran) == 1 and len(timers) == 0
    assert time.time() - start >= 0.08  # not before its slack allows


def test_a_callback_goes_on_early_within_its_slack_on_a_wake_up_the_process_has_anyway() -> None:
    timers = Timers(slack=0.4)
    ran: list[float] = []
    start = time.time()
    timers.call_at(start + 0.5, lambda _: ran.append(time.time() - start))
    gevent.sleep(0.15)  # this greenlet's own timer wakes the process: the callback is inside its slack by then
    wait_for(lambda: ran)
    assert ran and ran[0] < 0.4  # long before the 0.5 s it was due


def test_a_callback_never_goes_on_before_its_slack_allows() -> None:
    timers = Timers(slack=0.05)
    ran: list[float] = []
    start = time.time()
    timers.call_at(start + 0.4, lambda _: ran.append(time.time() - start))
    for _ in range(10):
        gevent.sleep(0.02)  # plenty of wake-ups, all too early
    assert ran == []
    wait_for(lambda: ran)
    assert ran[0] >= 0.35


def test_callbacks_go_on_in_due_order_and_a_failing_one_drops_none_of_the_others(
        capsys: pytest.CaptureFixture[str]) -> None:
    timers = Timers(slack=0.0)
    ran: list[str] = []
    now = time.time()

    def fail(_: object) -> None:
        raise RuntimeError("one bad callback")

    timers.call_at(now + 0.05, ran.append, "second")
    timers.call_at(now + 0.05, fail)
    timers.call_at(now + 0.02, ran.append, "first")
    timers.call_at(now + 0.05, ran.append, "third")
    wait_for(lambda: len(ran) == 3)
    assert ran == ["first", "second", "third"]
    assert "one bad callback" in capsys.readouterr().err


def test_a_sleep_of_zero_yields_and_a_callback_that_keeps_itself_due_starves_nobody() -> None:
    """An arrival behind schedule is due at once, again and again: the rest of the process must still run."""
    timers = Timers(slack=0.02)
    turns = {"behind": 0, "other": 0}

    def behind() -> None:
        while turns["behind"] < 200:
            turns["behind"] += 1
            timers.sleep(0)

    def other() -> None:
        while turns["other"] < 50:
            turns["other"] += 1
            gevent.sleep(0)

    greenlets = [gevent.spawn(behind), gevent.spawn(other)]
    gevent.joinall(greenlets, timeout=DEADLINE)
    assert turns == {"behind": 200, "other": 50}


def test_clearing_returns_what_was_waiting_and_nothing_of_it_runs() -> None:
    timers = Timers(slack=0.0)
    ran: list[str] = []
    now = time.time()
    timers.call_at(now + 0.1, ran.append, "late")
    timers.call_at(now + 0.05, ran.append, "early")
    assert timers.clear() == ["early", "late"]
    gevent.sleep(0.2)
    assert ran == [] and len(timers) == 0
