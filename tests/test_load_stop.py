"""The open model's stop: a flow handed over just before the load stops is in flight from that moment.

An arrival hands its flow to a greenlet of its own, which first runs a little later. A load
that stopped in between used to see no flow in flight, skip the grace period, and then
find the flow started after its stop and journal it `interrupted` with no round sent.
Nothing here sends a round: the flow is handed over and the load stops before any greenlet
runs, which is the moment that race opened.
"""

from __future__ import annotations

import time
from pathlib import Path

from harness.config.scenario import parse_scenario
from harness.journal.writer import Journal, read_journal
from harness.load.client_stack import build_flow_env
from harness.load.plan import LoadPlan
from harness.metrics.registry import RunMetrics

SCENARIO = """
name = "stop"
seed = 3
duration = "10s"

[target]
kind = "external"
urls = ["http://127.0.0.1:9/mcp"]

[load]
arrival_rate = 5

[[flows]]
kind = "refund"
"""


def _plan(folder: Path) -> tuple[LoadPlan, Journal]:
    scenario = parse_scenario(SCENARIO)
    journal = Journal(folder / "journal.jsonl")
    metrics = RunMetrics(flows=[flow.label() for flow in scenario.flows])
    env = build_flow_env(scenario, ["http://127.0.0.1:9/mcp"], ["r1"], journal, metrics)
    return LoadPlan(scenario, env), journal


def test_a_flow_handed_over_is_journaled_and_in_flight_before_its_greenlet_runs(tmp_path):
    plan, journal = _plan(tmp_path)
    plan._start_at(time.time())  # an arrival, due now: its steps go to a greenlet not yet run
    assert plan.active == 1  # what the load's stop waits on through its grace period
    plan.stop_accepting()
    assert plan.kill_in_flight() == 1
    journal.close()
    records = list(read_journal(tmp_path / "journal.jsonl"))
    assert [record["type"] for record in records] == ["start", "flow"]
    start, end = records
    assert start["t"] <= end["t"] and end["flow_id"] == start["flow_id"]
    assert end["outcome"] == "interrupted" and end["interrupted_by_run"] and end["rounds"] == 0
