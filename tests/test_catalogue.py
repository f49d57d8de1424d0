"""The on-call catalogue: every scenario produces the reason (or symptom) its cause must produce.

Each runs for real against the embedded shop (a few seconds each) and must pass its own
`[expect]`, where the expected reason is asserted dominant over every other.
"""

from __future__ import annotations

import pytest

from tests.harness_run import SCENARIOS, run_harness

EXPECTED = {
    "ephemeral-keys": "unknown key",
    "rotation-minter-first": "unknown key",
    "rotation-retire-early": "unknown key",
    "slow-leads": "expired",
    "clock-ahead": "minted in the future",
    "different-names": "audience",
    "changed-arguments": "request binding",
    "tampered-state": "seal",
    "records-in-memory": None,
    "started-two-ways": None,
    "reset-after-question": None,
    "lost-answer-retry": None,
    "balancer-timeout": None,
    "latency-expiry": "expired",
    "cannot-ask": None,
    "old-client": None,
    "old-client-dual-era": None,
    "endless-url": None,
    "endless-url-counted": None,
}


def test_the_catalogue_has_one_scenario_per_known_cause():
    assert {path.stem for path in (SCENARIOS / "on-call").glob("*.toml")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_on_call_scenario_produces_its_reason(name, tmp_path):
    finished = run_harness(SCENARIOS / "on-call" / f"{name}.toml", tmp_path)
    summary = finished.summary
    assert finished.code == 0, finished.output
    assert summary["status"] == "completed"
    rejections = {reason: sum(by_replica.values())
                  for reason, by_replica in summary["rejections"]["by_reason"].items()}
    reason = EXPECTED[name]
    if reason is None:
        assert not any(rejections.values()), rejections
    else:
        assert rejections.get(reason, 0) > 0, rejections
        assert rejections[reason] == max(rejections.values())
    assert summary["reconciliation"]["unexplained"] == 0


def test_records_in_memory_shows_no_quote_errors_instead_of_rejections(tmp_path):
    finished = run_harness(SCENARIOS / "on-call" / "records-in-memory.toml", tmp_path, "--duration", "6s")
    texts = [record for record in finished.journal() if record["type"] == "round" and record["outcome"] == "tool_error"]
    assert texts, "a retry on the other replica must fail as a tool error"
    assert not [r for r in finished.journal() if r["type"] == "rejection"]


HOST_SIGNS = {
    "cannot-ask": ("bot", "errors_by_code", "-32021"),
    "old-client": ("legacy", "errors_by_code", "-32603"),
    "old-client-dual-era": ("legacy", "by_outcome", "completed"),
    "endless-url": ("poller", "by_outcome", "rounds_exceeded"),
    "endless-url-counted": ("poller", "by_outcome", "unfinished"),
}
"""Each host scenario's sign, in summary.json's breakdown by host: (the host, the table, the key it shows)."""


@pytest.mark.parametrize("name", sorted(HOST_SIGNS))
def test_each_host_scenario_shows_its_sign_on_its_host_alone(name, tmp_path):
    """The scenario's own [expect] asserts it by host; this reads the breakdown an on-call engineer reads."""
    finished = run_harness(SCENARIOS / "on-call" / f"{name}.toml", tmp_path, "--duration", "5s")
    assert finished.code == 0, finished.output
    hosts = finished.summary["hosts"]
    host, table, key = HOST_SIGNS[name]
    assert hosts[host][table].get(key, 0) > 0, hosts
    if table == "errors_by_code":
        assert all(not row["errors_by_code"] for other, row in hosts.items() if other != host), hosts
    elif name == "endless-url":
        assert all("rounds_exceeded" not in row["by_outcome"] for other, row in hosts.items() if other != host)
    elif name == "old-client-dual-era":
        assert all(set(row["by_outcome"]) <= {"completed", "interrupted"} for row in hosts.values()), hosts
