"""Timers that ride on the load process's wake-ups (`processes.timers`): early within their slack, never earlier.

Real gevent. The slack, the order and clearing are judged on a clock the test moves by hand
(`Timers`' injected clock): the callbacks run on the hub's own passes, with no real waiting
and no margin to race. Only the wake-up of the timers' own (libev's timer, when nothing else
wakes the process) is real time by nature: that test waits 0.1 s, on the event, and asserts
one side of a margin.
"""

from __future__ import annotations

import time

import gevent
import pytest
from gevent.hub import Waiter

from harness.processes.timers import Timers

DEADLINE = 3.0


class ManualClock:
    """A clock that moves only when the test moves it: what `Timers` reads as now."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def passes(count: int = 3) -> None:
    """Let the hub's loop go round `count` times (each pass is a wake-up the process has anyway)."""
    for _ in range(count):
        gevent.idle()  # waits for the loop to run out of work: a whole pass, its prepare watchers included


def test_a_callback_runs_when_it_is_due_with_nothing_else_to_wake_the_process() -> None:
    timers = Timers(slack=0.02)
    start = time.time()
    waiter: Waiter[float] = Waiter()
    timers.call_at(start + 0.1, lambda _: waiter.switch(time.time()))
    with gevent.Timeout(DEADLINE):  # the only other wake-up: a failure's
        ran_at = waiter.get()  # the hub sleeps until the timers' own wake-up
    assert len(timers) == 0 and ran_at - start >= 0.08  # not before its slack allows


def test_a_callback_goes_on_early_within_its_slack_on_a_wake_up_the_process_has_anyway() -> None:
    clock = ManualClock()
    timers = Timers(slack=0.4, clock=clock)
    ran: list[float] = []
    timers.call_at(clock() + 0.5, lambda _: ran.append(clock()))
    passes()
    assert ran == []  # 0.5 s ahead: outside its slack
    clock.advance(0.15)  # 0.35 s before it is due: inside the slack, so the next pass runs it
    passes()
    assert ran == [clock()] and len(timers) == 0
    timers.clear()


def test_a_callback_never_goes_on_before_its_slack_allows() -> None:
    clock = ManualClock()
    timers = Timers(slack=0.05, clock=clock)
    ran: list[float] = []
    due = clock() + 0.4
    timers.call_at(due, lambda _: ran.append(clock()))
    for _ in range(35):  # plenty of passes, all too early: up to 1 ms short of the slack
        clock.advance(0.01)
        passes()
    clock.now = due - 0.051
    passes(10)
    assert ran == []
    clock.now = due - 0.05
    passes()
    assert ran == [due - 0.05]


def test_callbacks_go_on_in_due_order_and_a_failing_one_drops_none_of_the_others(
        capsys: pytest.CaptureFixture[str]) -> None:
    clock = ManualClock()
    timers = Timers(slack=0.0, clock=clock)
    ran: list[str] = []
    now = clock()

    def fail(_: object) -> None:
        raise RuntimeError("one bad callback")

    timers.call_at(now + 0.05, ran.append, "second")
    timers.call_at(now + 0.05, fail)
    timers.call_at(now + 0.02, ran.append, "first")
    timers.call_at(now + 0.05, ran.append, "third")
    clock.advance(0.02)
    passes()
    assert ran == ["first"]
    clock.advance(0.03)
    passes()
    assert ran == ["first", "second", "third"] and len(timers) == 0
    assert "one bad callback" in capsys.readouterr().err


def test_a_sleep_ends_when_the_clock_says_so_not_before() -> None:
    clock = ManualClock()
    timers = Timers(slack=0.02, clock=clock)
    woke: list[float] = []
    sleeper = gevent.spawn(lambda: (timers.sleep(30.0), woke.append(clock())))
    passes()
    clock.advance(29.97)  # 30 ms short: outside the slack
    passes(10)
    assert woke == [] and not sleeper.dead
    clock.advance(0.01)
    passes()
    assert woke == [clock()] and sleeper.dead


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
    clock = ManualClock()
    timers = Timers(slack=0.0, clock=clock)
    ran: list[str] = []
    now = clock()
    timers.call_at(now + 0.1, ran.append, "late")
    timers.call_at(now + 0.05, ran.append, "early")
    assert timers.clear() == ["early", "late"]
    clock.advance(1.0)
    passes()
    assert ran == [] and len(timers) == 0
