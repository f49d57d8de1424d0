"""The open model's arrival clock: Poisson at the scenario's rate, ramped, shared out between workers.

Run on a simulated clock (no real waiting): every flow start is recorded at its scheduled time.
"""

from __future__ import annotations

from collections import Counter

import pytest

from harness.config.scenario import parse_scenario
from harness.load.plan import LoadPlan

SCENARIO = """
name = "arrivals"
seed = {seed}
duration = "10m"

[load]
arrival_rate = {rate}
ramp = "10s"

[[flows]]
kind = "refund"
"""


def scheduled_starts(seed: int, seconds: float, *, rate: float = 20, worker: int = 0, workers: int = 1) -> list[float]:
    """Seconds after the start at which each flow was due, over `seconds` of simulated time."""
    scenario = parse_scenario(SCENARIO.format(seed=seed, rate=rate))
    plan = LoadPlan(scenario, None, worker=worker, workers=workers)  # type: ignore[arg-type]
    now = [0.0]
    starts: list[float] = []
    plan._start_at = starts.append  # type: ignore[method-assign] - record instead of running a flow

    def sleep(wait: float) -> None:
        now[0] += wait

    plan.arrivals(0.0, should_stop=lambda: now[0] >= seconds, sleep=sleep, clock=lambda: now[0])
    return starts


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_arrivals_follow_the_ramp_then_hold_the_rate(seed):
    starts = scheduled_starts(seed, 200.0)
    per_second = Counter(int(t) for t in starts)
    ramp = sum(per_second[s] for s in range(10))
    steady = [per_second[s] for s in range(10, 200)]
    assert 70 <= ramp <= 135, ramp  # the integral of max(2, 2t) per second over the 10 s ramp: 101
    assert 19.0 <= sum(steady) / len(steady) <= 21.0
    assert sum(per_second[s] for s in range(5)) < sum(per_second[s] for s in range(5, 10))  # it rises
    assert starts == sorted(starts)


def test_a_slow_ramp_does_not_hold_the_first_flows_back():
    """At 2 flows/s the ramp starts at 0.2/s; a gap drawn at that rate would hold the first flow ~5 s back."""
    runs = [scheduled_starts(seed, 10.0, rate=2) for seed in range(40)]
    first = [starts[0] if starts else 10.0 for starts in runs]
    during_ramp = [len(starts) for starts in runs]
    assert sum(first) / len(first) < 4.5  # about 2.8 s; drawing each gap at the rate of the moment gives 15
    assert 8.0 <= sum(during_ramp) / len(during_ramp) <= 12.0  # the ramp's integral: 10.1 flows


def test_workers_share_the_rate_and_each_keeps_its_own_stream():
    one = scheduled_starts(4, 100.0, worker=0, workers=2)
    other = scheduled_starts(4, 100.0, worker=1, workers=2)
    assert one != other
    assert one == scheduled_starts(4, 100.0, worker=0, workers=2)  # the seed reproduces it
    both = len(one) + len(other)
    alone = len(scheduled_starts(4, 100.0))
    assert 0.85 <= both / alone <= 1.15, (both, alone)


def test_arrivals_behind_schedule_still_yield_at_every_start():
    """A busy process falls behind its schedule; each start must still yield to the hub (a sleep of 0), or
    the flows already started, and the journal's writer, wait until the clock has caught up."""
    scenario = parse_scenario(SCENARIO.format(seed=5, rate=50))
    plan = LoadPlan(scenario, None)  # type: ignore[arg-type]
    starts: list[float] = []
    plan._start_at = starts.append  # type: ignore[method-assign] - record instead of running a flow
    slept: list[float] = []
    plan.arrivals(0.0, should_stop=lambda: len(starts) >= 200, sleep=slept.append, clock=lambda: 1e6)
    assert len(starts) == 200
    assert len(slept) >= len(starts) and set(slept) == {0.0}
