"""How a run drives its load: in this process, or through Locust's master and local workers.

Both give the run the same few operations (start, stop accepting, wait for flows in
flight, quit), so the run's timeline (duration, grace, interruption) is written once.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import gevent
from locust.env import Environment

from harness.load.distributed import STOP_ACCEPTING, JournalTail, WorkerProcesses, journal_part, write_target_file
from harness.load.plan import LoadPlan
from harness.load.users import user_classes
from harness.metrics import Measurements
from harness.scenario import Scenario
from harness.shop.deployment import free_port
from harness.target.base import TargetError

WORKERS_READY_TIMEOUT = 60.0


def _users(scenario: Scenario, per_worker_arrivals: int) -> tuple[int, float]:
    """(user count, spawn rate) for Locust: agents in the closed model, arrival clocks in the open one."""
    load = scenario.load
    if load.model == "closed":
        users = load.users or 1
        return users, (users / load.ramp if load.ramp else users)
    return per_worker_arrivals, per_worker_arrivals


class LocalLoad:
    """Locust's local runner in this process, flows as greenlets beside the run's own."""

    def __init__(self, env: Environment, plan: LoadPlan, started: float) -> None:
        self.env, self.plan = env, plan
        env.user_classes = user_classes(plan, started)
        self.runner = env.create_local_runner()

    def start(self) -> None:
        users, rate = _users(self.plan.scenario, 1)
        self.runner.start(users, spawn_rate=rate)

    @property
    def active(self) -> int:
        return self.plan.active

    def stop_accepting(self) -> None:
        self.plan.stop_accepting()

    def wait_in_flight(self, timeout: float) -> int:
        return self.plan.wait_in_flight(timeout)

    def quit(self) -> None:
        self.runner.quit()
        self.plan.kill_in_flight()

    def journal_parts(self) -> list[Path]:
        return []


class DistributedLoad:
    """Locust's master runner here, N `mrtr-harness worker` processes doing the flows."""

    def __init__(self, env: Environment, scenario: Scenario, measurements: Measurements, folder: Path,
                 urls: list[str], labels: list[str], workers: int, on_record: Any) -> None:
        self.env, self.scenario, self.measurements = env, scenario, measurements
        self.count = workers
        self._active: dict[str, int] = {}
        env.user_classes = user_classes(None, time.time(), distributed=True, scenario=scenario)
        env.events.worker_report.add_listener(self._on_report)
        port = free_port()
        self.runner = env.create_master_runner("127.0.0.1", port)
        write_target_file(folder, urls, labels)
        self.parts = [journal_part(folder, index) for index in range(workers)]
        self.processes = WorkerProcesses(folder, port, workers)
        self.tail = JournalTail(self.parts, on_record)
        self._follower: gevent.Greenlet | None = None

    def _on_report(self, client_id: str, data: dict[str, Any]) -> None:
        self.measurements.apply(data.get("mrtr", []))
        self._active[client_id] = int(data.get("mrtr_active", 0))

    def start(self) -> None:
        deadline = time.monotonic() + WORKERS_READY_TIMEOUT
        while self.runner.worker_count < self.count:
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.processes.processes):
                raise TargetError(f"only {self.runner.worker_count} of {self.count} Locust workers connected; "
                                  "see workers/*.log in the results folder")
            gevent.sleep(0.1)
        users, rate = _users(self.scenario, self.count)
        self.runner.start(users, spawn_rate=rate)
        self._follower = gevent.spawn(self.tail.follow)

    @property
    def active(self) -> int:
        return sum(self._active.values())

    def stop_accepting(self) -> None:
        self.runner.send_message(STOP_ACCEPTING)

    def wait_in_flight(self, timeout: float) -> int:
        """Wait for the workers' reports (every few seconds) to show no flow in flight."""
        deadline = time.time() + timeout
        gevent.sleep(min(timeout, 0.5))
        while self.active and time.time() < deadline:
            gevent.sleep(0.25)
        return self.active

    def quit(self) -> None:
        self.runner.quit()
        self.processes.wait_exit(timeout=30)
        if self._follower is not None:
            self._follower.kill()
        self.tail.drain()  # the last records the workers wrote before they exited
        self.tail.close()

    def journal_parts(self) -> list[Path]:
        return self.parts
