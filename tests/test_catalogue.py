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
