"""`call` flows against an MRTR server that is not the shop: the garden, in SSE mode, as an external target.

The leads answer whatever the garden asks from its own schemas (an enum, then a date, an
integer and an optional note), and rounds per call come out as the garden defines them:
three for `plan_bed`, two for the resolver-backed `name_bed`, one for `water`.
"""

from __future__ import annotations

import secrets

import pytest

from harness.folding.invariants import LEDGER_INVARIANTS
from tests.harness_run import run_harness
from tests.servers import start_server

SCENARIO = """
name = "garden"
seed = 5
duration = "8s"
time_scale = 60
grace = "8s"

[target]
kind = "external"
urls = {urls}
logs = {logs}

[load]
arrival_rate = 3
routing = "other-replica"

[[flows]]
kind = "call"
tool = "plan_bed"
arguments = [{{ bed_id = "B-1" }}, {{ bed_id = "B-2" }}]
weight = 3

[[flows]]
kind = "call"
tool = "name_bed"
arguments = {{ bed_id = "B-7" }}

[[flows]]
kind = "call"
tool = "water"
arguments = {{ bed_id = "B-3" }}

[leads]
think = {{ dist = "constant", value = "15s" }}

[expect]
completed_ratio = "== 1"
"rounds_per_call{{flow='plan_bed'}}" = ["min == 3", "max == 3"]
"rounds_per_call{{flow='name_bed'}}" = ["min == 2", "max == 2"]
"rounds_per_call{{flow='water'}}" = "max == 1"
rejections = "== 0"
unexplained_rejections = "== 0"
"""


@pytest.fixture(scope="module")
def gardens(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gardens")
    key = secrets.token_hex(32)
    started = []
    for index in range(2):
        log = folder / f"g{index + 1}.log"
        started.append((start_server("tests.servers.garden", "--sse", env={"GARDEN_REQUEST_STATE_KEY": key},
                                     log=log, wait=False), log))
    try:
        for running, _ in started:
            running.wait_ready()
        yield folder, started
    finally:
        for running, _ in started:
            running.stop()


def test_call_flows_drive_another_mrtr_server_with_answers_from_its_schemas(gardens, tmp_path):
    folder, started = gardens
    urls = [running.url for running, _ in started]
    logs = [f"file:{log}@g{index + 1}" for index, (_, log) in enumerate(started)]
    scenario = tmp_path / "garden.toml"
    scenario.write_text(SCENARIO.format(urls=repr(urls).replace("'", '"'), logs=repr(logs).replace("'", '"')))
    finished = run_harness(scenario, tmp_path / "results")
    assert finished.code == 0, finished.output
    flows = finished.summary["flows"]["by_flow"]
    assert set(flows) == {"plan_bed", "name_bed", "water"}
    served = {record["replica"] for record in finished.journal() if record["type"] == "round"}
    assert served == {"r1", "r2"}
    ledger_checks = {name: result for name, result in finished.summary["invariants"].items()
                     if name in LEDGER_INVARIANTS}
    assert all(not result.get("checked", True) for result in ledger_checks.values()), \
        "an external server without the shop's ledger cannot be checked against it"
