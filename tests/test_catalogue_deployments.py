"""The on-call catalogue's causes in how a deployment runs: stores in memory, replicas started two ways, resets,
retries, a balancer's timeout, latency (the run itself: `tests.test_catalogue.check_on_call`)."""

from __future__ import annotations

import pytest

from tests.harness_run import SCENARIOS, run_harness
from tests.test_catalogue import DEPLOYMENTS, check_on_call


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_each_deployment_scenario_produces_its_reason(name, tmp_path, monkeypatch):
    check_on_call(name, tmp_path, monkeypatch)


def test_records_in_memory_shows_no_quote_errors_instead_of_rejections(tmp_path):
    finished = run_harness(SCENARIOS / "on-call" / "records-in-memory.toml", tmp_path, "--duration", "6s")
    texts = [record for record in finished.journal() if record["type"] == "round" and record["outcome"] == "tool_error"]
    assert texts, "a retry on the other replica must fail as a tool error"
    assert not [r for r in finished.journal() if r["type"] == "rejection"]
