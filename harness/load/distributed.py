"""Locust's own master and workers for one run: `mrtr-harness run --workers N`.

The master (the `run` process) keeps everything that must happen once: the target, the
log collector, chaos, `/metrics`, the verdict. Each worker is a `mrtr-harness worker`
process with its own Locust `WorkerRunner`, its own seeded stream (flow ids `w<i>-…`),
its own journal part (`journal-w<i>.jsonl` in the results folder) and its share of the
arrival rate. Workers ship their metric updates in Locust's `report_to_master`; the
master replays them into its registry, and follows the journal parts for its live
figures. Stopping is two-step, like a single process: a `stop-accepting` message, a grace
period while workers report flows in flight, then Locust's own quit (flows still running
are journaled as interrupted by the worker that ran them).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent

from harness.logs import FileFollower

STOP_ACCEPTING = "mrtr:stop-accepting"
TARGET_FILE = "target.json"


def journal_part(folder: Path, index: int) -> Path:
    return folder / f"journal-w{index}.jsonl"


def write_target_file(folder: Path, urls: list[str], labels: list[str]) -> None:
    """What a worker needs to know of the target, next to the scenario the master wrote."""
    (folder / TARGET_FILE).write_text(json.dumps({"urls": urls, "labels": labels}))


class WorkerProcesses:
    """The worker processes of a local distributed run, started and stopped by PID."""

    def __init__(self, folder: Path, master_port: int, count: int) -> None:
        self.folder = folder
        self.processes: list[subprocess.Popen[bytes]] = []
        self._logs = []
        logs = folder / "workers"
        logs.mkdir(exist_ok=True)
        for index in range(count):
            log = open(logs / f"w{index}.log", "ab")  # noqa: SIM115 - held for the life of the worker
            self._logs.append(log)
            self.processes.append(subprocess.Popen(
                [sys.executable, "-m", "harness", "worker", "--master-port", str(master_port),
                 "--run-folder", str(folder), "--index", str(index), "--workers", str(count)],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True))

    def wait_exit(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for process in self.processes:
            while process.poll() is None and time.monotonic() < deadline:
                gevent.sleep(0.1)
            if process.poll() is None:
                process.kill()
                process.wait(5)
        for log in self._logs:
            log.close()


class JournalTail:
    """Follows the workers' journal parts and hands every record to `on_record` (the master's figures)."""

    def __init__(self, paths: list[Path], on_record: Callable[[dict[str, Any]], None]) -> None:
        self._followers = [FileFollower(path) for path in paths]
        self._on_record = on_record

    def drain(self) -> int:
        count = 0
        for follower in self._followers:
            for line in follower.read_lines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                self._on_record(record)
                count += 1
        return count

    def follow(self, every: float = 0.25) -> None:
        while True:
            self.drain()
            gevent.sleep(every)

    def close(self) -> None:
        for follower in self._followers:
            follower.close()


def run_worker(master_port: int, folder: Path, index: int, workers: int) -> int:
    """A worker's whole life: build its flows from the run folder, serve Locust's master, journal its part."""
    from locust.env import Environment
    from locust.event import Events

    from harness.journal import Journal
    from harness.leads import capabilities, stream
    from harness.load.flows import FlowEnv
    from harness.load.plan import LoadPlan
    from harness.load.users import user_classes
    from harness.metrics import Measurements
    from harness.mrtr import MrtrClient, Router, Transport
    from harness.run import url_labels
    from harness.scenario import Scenario, flow_label
    from harness.shop.catalogue import build_catalogue

    scenario = Scenario.model_validate_json((folder / "scenario.json").read_text())
    target = json.loads((folder / TARGET_FILE).read_text())
    env = Environment(events=Events())
    journal = Journal(journal_part(folder, index))
    measurements = Measurements(flows=[flow_label(flow) for flow in scenario.flows], buffer=True)
    router = Router(target["urls"], scenario.load.routing, rng=stream(scenario.seed, "worker", index, "router"))
    client = MrtrClient(router, capabilities=capabilities(scenario.leads), timeout=scenario.load.timeout,
                        transport=Transport(read_timeout=scenario.load.timeout,
                                            reuse_connections=len(target["urls"]) > 1))
    flow_env = FlowEnv(scenario, client, journal, measurements, build_catalogue(),
                       url_labels(target["urls"], target["labels"]), fire_request=env.events.request.fire)
    plan = LoadPlan(scenario, flow_env, worker=index, workers=workers)
    env.user_classes = user_classes(plan, time.time(), distributed=True)

    def report(client_id: str, data: dict[str, Any]) -> None:
        data["mrtr"] = measurements.drain()
        data["mrtr_active"] = plan.active

    env.events.report_to_master.add_listener(report)
    runner = env.create_worker_runner("127.0.0.1", master_port)
    runner.register_message(STOP_ACCEPTING, lambda environment, msg, **kwargs: plan.stop_accepting())
    try:
        runner.greenlet.join()
    finally:
        plan.kill_in_flight()
        journal.close()
    return 0
