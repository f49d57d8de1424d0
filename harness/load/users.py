"""Locust user classes for a run: support agents (closed model) and one arrivals process (open model).

Users are built per run as subclasses bound to that run's `LoadPlan`, so nothing global
is mutated and two runs in one process cannot see each other's flows. Locust's own
runners start and stop them; the request events each round fires make Locust's stats,
CSV and failure table useful without any wrapping of Locust.
"""

from __future__ import annotations

import time

from locust import LoadTestShape, User, constant, task

from harness.config.load import Load
from harness.config.scenario import Scenario
from harness.load.plan import LoadPlan


def user_classes(plan: LoadPlan | None, run_started: float | None, *, distributed: bool = False,
                 scenario: Scenario | None = None) -> list[type[User]]:
    """The one user class this scenario's load model needs, bound to `plan`.

    A distributed master passes no plan (its users never run: the workers' do) but the
    same class names, which is how Locust matches them. In the open model each worker
    runs one arrivals user, so distributed runs ask Locust for one per worker. With no
    `run_started`, the arrivals clock starts when Locust starts the user (a worker is set
    up before the master says go).
    """
    source = plan.scenario if plan is not None else scenario
    assert source is not None, "a plan, or the scenario its users stand for"
    if source.load.model == "closed":
        return [_agent(plan)]
    arrivals = _arrivals(plan, run_started)
    arrivals.fixed_count = 0 if distributed else 1
    return [arrivals]


def _agent(plan: LoadPlan | None) -> type[User]:
    class SupportAgent(User):
        """A support agent working flows one after another (the closed model)."""

        wait_time = constant(0)

        @task
        def work(self) -> None:
            assert plan is not None, "only a worker's (or the local runner's) users run"
            if not plan.accepting:
                self.wait_for_stop()
                return
            plan.run_one(scheduled=time.time())

        def wait_for_stop(self) -> None:
            from gevent import sleep

            sleep(0.2)

    return SupportAgent


def _arrivals(plan: LoadPlan | None, run_started: float | None) -> type[User]:
    class Arrivals(User):
        """The open model's clock: starts each flow at its scheduled time (parked as data while its lead thinks)."""

        fixed_count = 1
        wait_time = constant(0)

        @task
        def arrive(self) -> None:
            assert plan is not None, "only a worker's (or the local runner's) users run"
            plan.arrivals(run_started or time.time(), should_stop=lambda: not plan.accepting)
            while True:  # arrivals are over; Locust stops this user with the runner
                from gevent import sleep

                sleep(1.0)

    return Arrivals


class StagesShape(LoadTestShape):
    """The closed model's `[[load.stages]]` through Locust's own seam: each second, the agents the stage wants.

    Locust's runner then starts agents or stops the surplus ones. A stopped agent's flow is
    journaled as interrupted by the flow itself, so every started flow still has one outcome.
    After the last stage its level holds; the run, not Locust, ends the load.
    """

    def __init__(self, load: Load) -> None:
        super().__init__()
        self.load = load

    def tick(self) -> tuple[int, float]:
        agents = round(self.load.level_at(self.get_run_time()))
        return agents, max(1.0, float(agents))  # the whole change within the tick, as k6 moves between stages
