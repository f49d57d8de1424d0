"""Resident memory of one load process holding 100,000 flows that wait on a lead.

The project's target: one worker process holds 100,000 flows waiting on a lead in under
1 GiB, with no connection held during think time. "Waiting on a lead" is measured as it
really is in a run: each flow has sent round 1 to a real shop replica, got its
`input_required` answer (the question and the sealed requestState), and sits in its
lead's think time (a gevent sleep) holding that round's record, its `Flow` and its
`Lead`. Round 1 is sent for real by a sample of flows; the rest of the 100,000 park on
copies of those real records (one sealed state per flow), because 100,000 real round
trips would take this machine half an hour and say nothing more about memory.

    python -m benchmarks.waiting_flows [--flows 100000] [--real 300]

The baseline is the same process before any flow exists, measured in the same run.
Prints the figures and writes JSON to `results/benchmarks/`.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()  # a load process, like a Locust worker: patch first, once

import argparse
import copy
import json
import os
import platform
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import gevent
from gevent.pool import Group

from harness.journal import Journal
from harness.leads import capabilities, stream
from harness.load.flows import Flow, FlowEnv
from harness.metrics import Measurements
from harness.mrtr import MrtrClient, Outcome, Router, Transport
from harness.scenario import parse_scenario
from harness.shop.catalogue import build_catalogue
from harness.target.local_deployment import LocalDeployment

RESULTS = Path(__file__).resolve().parents[1] / "results" / "benchmarks"
SCENARIO = """
name = "waiting"
duration = "1h"
time_scale = 1
[load]
arrival_rate = 1
[[flows]]
kind = "refund"
amount = "above-limit"
[leads]
think = { dist = "constant", value = "1h" }
"""


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def open_sockets() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flows", type=int, default=100_000, help="flows parked on a lead (default 100000)")
    parser.add_argument("--real", type=int, default=300, help="flows whose round 1 goes to a real replica")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="mrtr-waiting-"))
    with LocalDeployment(workdir, replicas=1) as deployment:
        figures = measure(deployment, args.flows, args.real, workdir)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"waiting_flows-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(figures, indent=2))
    for key, value in figures.items():
        print(f"{key:32} {value}")
    print(f"written to {out}")


def measure(deployment: LocalDeployment, total: int, real: int, workdir: Path) -> dict:
    scenario = parse_scenario(SCENARIO)
    transport = Transport()
    client = MrtrClient(Router(deployment.replica_urls), capabilities=capabilities(scenario.leads),
                        transport=transport)
    journal = Journal(workdir / "journal.jsonl")
    env = FlowEnv(scenario, client, journal, Measurements(flows=["refund"]), build_catalogue(),
                  {deployment.replica_urls[0]: "r1"})
    baseline = rss_bytes()
    records, flows, parked = [], [], Group()
    started = time.perf_counter()
    for number in range(real):  # round 1 for real: quote, then issue_refund asks and returns its state
        flow = Flow(env, scenario.flows[0], f"w0-{number:06d}", stream(1, "flow", number))
        order = flow.rng.choice(env.held_orders)
        quote = flow.call("quote_refund", {"order_id": order}).result["structuredContent"]["quote_id"]
        record = client.send_round("issue_refund", {"quote_id": quote})
        assert record.outcome is Outcome.INPUT_REQUIRED, record.outcome
        records.append(record)
        flows.append(flow)
        parked.spawn(flow.respond, record)
    real_seconds = time.perf_counter() - started
    gevent.sleep(0.1)
    for number in range(real, total):  # the rest park on copies of real records, each its own state
        flow = Flow(env, scenario.flows[0], f"w0-{number:06d}", stream(1, "flow", number))
        record = copy.copy(records[number % real])
        record.request_state = record.request_state[:-6] + f"{number:06d}"  # distinct string per flow
        flows.append(flow)
        parked.spawn(flow.respond, record)
    gevent.sleep(1.0)
    waiting = sum(1 for greenlet in parked if not greenlet.dead)
    held = rss_bytes()
    sockets = open_sockets()
    parked.kill(block=True)
    journal.close()
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}",
        "flows_waiting": waiting,
        "real_round_trips": real,
        "real_round_trip_seconds": round(real_seconds, 2),
        "rss_baseline_mib": round(baseline / 2**20, 1),
        "rss_with_flows_mib": round(held / 2**20, 1),
        "rss_per_1000_flows_mib": round((held - baseline) / 2**20 / total * 1000, 2),
        "open_sockets_while_waiting": sockets,
        "target_mib": 1024,
    }


if __name__ == "__main__":
    main()
