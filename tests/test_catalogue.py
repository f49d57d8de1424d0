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


HOST_SIGNS = {
    "cannot-ask": ("bot", "errors_by_code", "-32021", True),
    "old-client": ("legacy", "errors_by_code", "-32603", True),
    "old-client-dual-era": ("legacy", "by_outcome", "completed", False),
    "endless-url": ("poller", "by_outcome", "rounds_exceeded", True),
    "endless-url-counted": ("poller", "by_outcome", "unfinished", True),
}
"""Each host scenario's sign in summary.json's breakdown by host (the host, the table, the key, and whether no
other host may show it), as an on-call engineer reads it; its own [expect] asserts the same by host."""


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
    if name in HOST_SIGNS:
        host, table, key, alone = HOST_SIGNS[name]
        hosts = summary["hosts"]
        assert hosts[host][table].get(key, 0) > 0, hosts
        assert not alone or not [other for other, row in hosts.items() if other != host and row[table].get(key)]


def test_records_in_memory_shows_no_quote_errors_instead_of_rejections(tmp_path):
    finished = run_harness(SCENARIOS / "on-call" / "records-in-memory.toml", tmp_path, "--duration", "6s")
    texts = [record for record in finished.journal() if record["type"] == "round" and record["outcome"] == "tool_error"]
    assert texts, "a retry on the other replica must fail as a tool error"
    assert not [r for r in finished.journal() if r["type"] == "rejection"]

