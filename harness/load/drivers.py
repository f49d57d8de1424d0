"""How a run drives its load: in this process, or through Locust's master and its workers (here or elsewhere).

Both give the run the same few operations (start, stop accepting, wait for flows in
flight, quit), so the run's timeline (duration, grace, interruption) is written once.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import gevent
from locust.env import Environment

from harness._compat.locust import missing_workers, release_master_port, wait_for_heartbeats
from harness.config.scenario import Scenario
from harness.load import DEFAULT_MASTER_PORT
from harness.load.distributed import (
    STOP_ACCEPTING,
    JournalParts,
    MasterLink,
    WorkerProcesses,
    setup_message,
)
from harness.load.handshake import cluster_secret
from harness.load.plan import LoadPlan
from harness.load.users import StagesShape, user_classes
from harness.metrics.registry import RunMetrics
from harness.processes.children import free_port
from harness.targets.interface import TargetError

WORKERS_READY_TIMEOUT = 60.0
WORKER_SILENCE_LIMIT = 10
"""Seconds without a heartbeat before a worker counts as lost (Locust's own 3 loses workers that are only
starved of the CPU on a busy machine); a local worker whose process exits is lost at once, whatever this says."""
FINISH_TIMEOUT = 30.0


def _users(scenario: Scenario, per_worker_arrivals: int) -> tuple[int, float]:
    """(user count, spawn rate) for Locust: agents in the closed model, arrival clocks in the open one."""
    load = scenario.load
    if load.model == "closed":
        users = load.users or 1
        return users, (users / load.ramp if load.ramp else users)
    return per_worker_arrivals, per_worker_arrivals


def _start_stages(env: Environment, runner: Any, scenario: Scenario) -> bool:
    """The closed model's stages go through Locust's shape seam; True when they did (the open model's arrivals
    follow the stages themselves, in `LoadPlan.arrivals`)."""
    if scenario.load.model != "closed" or not scenario.load.stages:
        return False
    env.shape_class = StagesShape(scenario.load)
    env.shape_class.runner = runner
    runner.start_shape()
    return True


class WorkerLost(RuntimeError):
    """A Locust worker of the run was lost before it finished: the harness's own failure (exit 4), never the
    target's."""


class LocalLoad:
    """Locust's local runner in this process, its flows beside the run's own greenlets."""

    def __init__(self, env: Environment, plan: LoadPlan, started: float) -> None:
        self.env, self.plan = env, plan
        env.user_classes = user_classes(plan, started)
        self.runner = env.create_local_runner()

    def start(self) -> None:
        if not _start_stages(self.env, self.runner, self.plan.scenario):
            users, rate = _users(self.plan.scenario, 1)
            self.runner.start(users, spawn_rate=rate)

    @property
    def active(self) -> int:
        return self.plan.active

    def stop_accepting(self) -> None:
        self.plan.stop_accepting()

    def wait_in_flight(self, timeout: float) -> int:
        return self.plan.wait_in_flight(timeout)

    def quit(self) -> int:
        """Journal the flows still in flight as interrupted (in bulk), then stop Locust; returns how many."""
        interrupted = self.plan.kill_in_flight()
        self.runner.quit()
        if self.plan.env.tokens is not None:
            self.plan.env.tokens.stop()
        return interrupted

    def check(self) -> None:
        """Nothing to lose: the load runs in this process."""

    def journal_parts(self) -> list[Path]:
        return []


class DistributedLoad:
    """Locust's master runner here; the flows run on workers started here (`local`) or elsewhere (`remote`)."""

    def __init__(self, env: Environment, scenario: Scenario, run_metrics: RunMetrics, folder: Path,
                 urls: list[str], labels: list[str], on_grown: Any, *, before_append: Any = None,
                 local: int = 0, remote: int = 0,
                 bind_host: str = "127.0.0.1", bind_port: int | None = None, wait: float = WORKERS_READY_TIMEOUT,
                 say: Any = print, auth_url: str | None = None) -> None:
        self.env, self.scenario, self.run_metrics = env, scenario, run_metrics
        self.count = local + remote
        self.wait, self.say = wait, say
        env.user_classes = user_classes(None, time.time(), distributed=True, scenario=scenario)
        env.events.worker_report.add_listener(self._on_report)
        self.port = bind_port or (free_port() if not remote else DEFAULT_MASTER_PORT)
        wait_for_heartbeats(WORKER_SILENCE_LIMIT)
        self.runner = env.create_master_runner(bind_host, self.port)
        self.parts = JournalParts(folder, on_grown, before_append)
        secret = cluster_secret(throwaway=not remote)
        scenario_json = scenario.model_dump_json()
        self.link = MasterLink(self.runner, lambda index: setup_message(scenario_json, urls, labels, index,
                                                                        self.count, auth_url),
                               self.count, self.parts, run_metrics.apply, say, secret)
        self.processes = WorkerProcesses(folder, self.port, local, secret) if local else None
        if remote:
            say(f"waiting for {remote} worker{'s' * (remote != 1)} on {bind_host}:{self.port}: "
                f"mrtr-harness worker --master-host <this host> --master-port {self.port}")

    def _on_report(self, client_id: str, data: dict[str, Any]) -> None:
        self.link.report(client_id, data)

    def start(self) -> None:
        deadline = time.monotonic() + self.wait
        # Ready, and no refused worker still counted by Locust (it would be given users it never runs).
        while len(self.link.ready) < self.count or self.runner.worker_count > self.count:
            if self.link.failed:
                index, error = next(iter(self.link.failed.items()))
                raise TargetError(f"worker w{index} could not set up: {error}")
            self.check()
            if time.monotonic() > deadline:
                raise TargetError(f"only {len(self.link.ready)} of {self.count} Locust workers were ready after "
                                  f"{self.wait:g}s; see workers/*.log in the results folder for local ones")
            gevent.sleep(0.1)
        if not _start_stages(self.env, self.runner, self.scenario):
            users, rate = _users(self.scenario, self.count)
            self.runner.start(users, spawn_rate=rate)

    def check(self) -> None:
        """`WorkerLost` (the harness's failure, exit 4) naming the first worker lost before it finished: a process
        of this run's that exited, or a worker that quit or whose heartbeats stopped."""
        exited = self.processes.exited() if self.processes is not None else []
        if exited:
            number, code = exited[0]
            raise WorkerLost(f"worker process {number} exited ({code}) before it finished; see "
                             f"workers/process-{number}.log in the results folder")
        for node in missing_workers(self.runner, self.link.index):
            self.link.lost(node, "its heartbeats stopped")
        if self.link.gone:
            index, why = next(iter(self.link.gone.items()))
            raise WorkerLost(f"worker w{index} was lost before it finished ({why}): its flows in flight and its "
                             "journal since its last batch are missing")

    @property
    def active(self) -> int:
        return sum(self.link.active.values())

    def stop_accepting(self) -> None:
        self.runner.send_message(STOP_ACCEPTING)

    def wait_in_flight(self, timeout: float) -> int:
        """Wait for the workers' counts (with each journal batch, a few times a second) to show no flow in flight."""
        deadline = time.time() + timeout
        gevent.sleep(min(timeout, 0.5))
        while self.active and time.time() < deadline:
            gevent.sleep(0.25)
        return self.active

    def quit(self) -> int:
        """Each worker journals its own flows still in flight; returns 0 (their counts are in their parts)."""
        silent = self.link.finish(timeout=FINISH_TIMEOUT)
        if silent:
            self.say(f"worker{'s' * (len(silent) != 1)} {', '.join(f'w{i}' for i in silent)} did not finish "
                     f"within {FINISH_TIMEOUT:g}s: {'their' if len(silent) != 1 else 'its'} journal part may lack "
                     "the last records (the worker keeps its spool)")
        if (dropped := self.link.strangers.line()) is not None:
            self.say(dropped)
        self.runner.quit()
        release_master_port(self.runner)  # a sweep's next step binds the same port (`capacity --master`)
        if self.processes is not None:
            self.processes.wait_exit(timeout=30)
        self.parts.close()
        return 0

    def journal_parts(self) -> list[Path]:
        return list(self.parts.paths)
