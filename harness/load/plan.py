"""The load plan: which flow starts next, when, with which seed; and the flows still in flight.

Locust has no seed and no open model, so both are ours. Every flow gets its own random
stream derived from (scenario seed, worker, flow number), so one seed reproduces the
same flows, answers and think times in every run, on any number of workers. In the open
model, arrivals are a Poisson process independent of how long flows take, and a start
that comes later than scheduled is counted as late (the generator fell behind) instead
of silently stretching the schedule. A flow runs on a greenlet only while it does a
round: while its lead thinks it is parked as data (`harness.load.parking`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator

import gevent
from gevent.pool import Group

from harness.config.flows import FlowSpec
from harness.config.load import Load
from harness.config.scenario import Scenario
from harness.config.think import RandomStream
from harness.load.flow import Flow, FlowEnv, interrupt
from harness.load.kinds import flow_steps, run_flow
from harness.load.parking import Parking
from harness.load.seeding import FlowStream, FlowStreams, stream
from harness.processes.timers import Timers

ARRIVAL_SLACK = 0.05
"""Seconds an arrival may start early, on a wake-up the process has anyway (a reply) instead of one of its own.

A wake-up of its own costs a load process more than a round's work (figures in
benchmarks/README.md). The arrivals stay a Poisson process at the scenario's rate, each
start shifted by at most this much, and nothing measured counts from before a round was
sent: a round sent before its intended time counts its latency from the send.
"""

LATE_AFTER = 0.1
"""Seconds past its scheduled time after which a flow's start counts as late: well above a sleep's usual lateness
(benchmarks/README.md), so a late start means the generator fell behind."""


class LoadPlan:
    """Picks and starts flows for one load process (the local runner, or one Locust worker)."""

    def __init__(self, scenario: Scenario, env: FlowEnv, *, worker: int = 0, workers: int = 1) -> None:
        self.scenario = scenario
        self.env = env
        self.worker = worker
        self.workers = workers
        self.greenlets = Group()
        """The greenlets of flows doing a round now (and of the closed model's agents' flows)."""
        self.parking = Parking(self.greenlets)
        self.in_flight: dict[str, Flow] = {}
        """Every flow started and not yet ended, by id: what the run accounts for when it stops."""
        self.accepting = True
        self._numbers = itertools.count(1)
        self._pick_rng = stream(scenario.seed, "worker", worker, "pick")
        self._cum_weights = list(itertools.accumulate(flow.weight for flow in scenario.flows))
        """What `choices` makes of the weights at every call, made once (the same draws)."""
        self._flow_streams = FlowStreams(scenario.seed, "worker", worker, "flow")

    def stop_accepting(self) -> None:
        """No new flows from now on; those in flight go on until they end or are killed."""
        self.accepting = False

    def next_flow(self) -> tuple[FlowSpec, str, FlowStream, int]:
        """The next flow's spec, id, random stream and lead: the run's flows numbered across workers in turn
        (w0's 1st, w1's 1st, ..., w0's 2nd), so every worker's leads together take the principals in turn."""
        number = next(self._numbers)
        spec = self._pick_rng.choices(self.scenario.flows, cum_weights=self._cum_weights)[0]
        flow_id = f"w{self.worker}-{number:06d}"
        lead = (number - 1) * self.workers + self.worker
        return spec, flow_id, self._flow_streams.stream(number), lead

    def run_one(self, scheduled: float | None = None) -> None:
        """Run the next flow in the calling greenlet (the closed model's agent does this in turn)."""
        spec, flow_id, rng, lead = self.next_flow()
        run_flow(self.env, spec, flow_id, rng, scheduled, in_flight=self.in_flight, lead=lead)

    def arrivals(self, started: float, should_stop: Callable[[], bool],
                 sleep: Callable[[float], object] | None = None, clock: Callable[[], float] = time.time) -> None:
        """The open model: Poisson arrivals at the scenario's intended rate (this process's share of it).

        Each arrival sleeps on a `Timers`: it may start up to `ARRIVAL_SLACK` early, on a
        wake-up the process has anyway, instead of waking it once more.
        """
        if sleep is None:
            sleep = Timers(ARRIVAL_SLACK, clock).sleep
        gaps = stream(self.scenario.seed, "worker", self.worker, "arrivals")
        for scheduled in arrival_times(self.scenario.load, gaps, started, self.workers):
            if not self.accepting or should_stop():
                return
            # Behind schedule (a busy process) the wait is zero, and the sleep still yields: the
            # flows started so far run, and the journal is written, while the clock catches up.
            sleep(max(0.0, scheduled - clock()))
            if not self.accepting or should_stop():
                return
            self._start_at(scheduled)

    def _start_at(self, scheduled: float) -> None:
        while self.active >= self.scenario.load.max_in_flight and self.accepting:
            gevent.sleep(0.01)  # at the cap: the start slips, and is counted late below
        late = time.time() - scheduled > LATE_AFTER
        if late:
            self.env.run_metrics.late_start()
        spec, flow_id, rng, lead = self.next_flow()
        self.parking.start(flow_steps(self.env, spec, flow_id, rng, scheduled, late, self.in_flight, lead))

    @property
    def active(self) -> int:
        """Flows started and not ended (most of them wait on a lead)."""
        return len(self.in_flight)

    def wait_in_flight(self, timeout: float) -> int:
        """Wait up to `timeout` for flows in flight to end; returns how many are still running."""
        deadline = time.time() + timeout
        while self.active and time.time() < deadline:
            gevent.sleep(0.05)
        return self.active

    def kill_in_flight(self) -> int:
        """End every flow still running: journal each as interrupted, in bulk, then stop them.

        The accounting comes first and depends neither on the greenlets nor on the parked
        flows: each stopped flow finds its end already journaled and writes nothing more.
        Returns how many were interrupted.
        """
        interrupted = interrupt(self.env, list(self.in_flight.values()))
        self.in_flight.clear()
        self.parking.clear()
        self.greenlets.kill(block=False)
        return interrupted


def arrival_times(load: Load, gaps: RandomStream, started: float, workers: int = 1) -> Iterator[float]:
    """When each flow of one load process is due: a Poisson process whose rate follows `load.level_at` exactly.

    Arrivals are drawn at the peak rate and each kept with probability (rate then / peak):
    thinning. Drawing each gap at the rate of the moment instead would hold the first flow
    of a ramp back by a gap drawn at a tenth of the rate, and skip a spike that starts
    during a long gap. Ends after the load's last level when that level is 0.
    """
    peak = load.peak() / workers
    if peak <= 0:
        return
    last = load.stage_bounds()[-1] if load.stages else None
    scheduled = started
    while True:
        scheduled += gaps.expovariate(peak)
        elapsed = scheduled - started
        rate = load.level_at(elapsed) / workers
        if last is not None and rate <= 0 and elapsed >= last[1]:
            return  # the stages ended at 0: no flow comes any more
        if gaps.random() * peak <= rate:
            yield scheduled
