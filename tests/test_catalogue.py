"""The on-call catalogue: every scenario produces the reason (or symptom) its cause must produce.

Each runs for real against the embedded shop (a few seconds each) and must pass its own
`[expect]`, where the expected reason is asserted dominant over every other. The auth
scenarios name MCP_CLIENT_SECRET for the client secret: each run gets one in its environment.
"""

from __future__ import annotations

import re

import pytest

from tests.harness_run import SCENARIOS, Finished, leaks, run_harness

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
    "token-expired-mid-flow": None,
    "not-a-lead": None,
    "principal-drift": "principal drift",
    "auth-outage": None,
}

SECRET_ENV = "MCP_CLIENT_SECRET"
"""The variable the auth scenarios name for the client secret; the embedded shop's authorization server takes
whatever it holds, so the catalogue sets one for each run (a scenario file never holds a secret)."""


HOST_SIGNS = {
    "cannot-ask": ("bot", "errors_by_code", "-32021", True),
    "old-client": ("legacy", "errors_by_code", "-32603", True),
    "old-client-dual-era": ("legacy", "by_outcome", "completed", False),
    "endless-url": ("poller", "by_outcome", "rounds_exceeded", True),
    "endless-url-counted": ("poller", "by_outcome", "unfinished", True),
}
"""Each host scenario's sign in summary.json's breakdown by host (the host, the table, the key, and whether no
other host may show it), as an on-call engineer reads it; its own [expect] asserts the same by host."""


AUTH_SIGNS = {
    "token-expired-mid-flow": ("unauthorized", "quote_refund"),
    "not-a-lead": ("forbidden", "issue_refund"),
    "principal-drift": None,
    "auth-outage": ("unauthorized", "quote_refund"),
}
"""Each auth scenario's sign in summary.json's `auth`: which refusal it counts and on which tool (None: none at
all). A 401 is renewed and its round resent once; a 403 is not (a new token brings no scope back)."""


def test_the_catalogue_has_one_scenario_per_known_cause():
    assert {path.stem for path in (SCENARIOS / "on-call").glob("*.toml")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_on_call_scenario_produces_its_reason(name, tmp_path, monkeypatch):
    monkeypatch.setenv(SECRET_ENV, "catalogue-secret")
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
    if name in AUTH_SIGNS:
        _check_auth(finished, AUTH_SIGNS[name])
    if name in AUTH_CHECKS:
        AUTH_CHECKS[name](finished)


def test_records_in_memory_shows_no_quote_errors_instead_of_rejections(tmp_path):
    finished = run_harness(SCENARIOS / "on-call" / "records-in-memory.toml", tmp_path, "--duration", "6s")
    texts = [record for record in finished.journal() if record["type"] == "round" and record["outcome"] == "tool_error"]
    assert texts, "a retry on the other replica must fail as a tool error"
    assert not [r for r in finished.journal() if r["type"] == "rejection"]


def _check_auth(finished: Finished, sign: tuple[str, str] | None) -> None:
    """The run's `auth` counts as its scenario says (AUTH_SIGNS), and neither the secret nor any token (a JWT) in
    any file of its results or its output."""
    auth = finished.summary["auth"]
    assert leaks(finished, {"the client secret": "catalogue-secret"}) == []
    if sign is None:
        assert auth["unauthorized"] == auth["forbidden"] == 0, auth
        return
    refusal, tool = sign
    other = "forbidden" if refusal == "unauthorized" else "unauthorized"
    assert auth[refusal] > 0 and auth[other] == 0, auth
    assert tool in {row["tool"] for row in auth["by_round"]}, auth
    assert auth["retried"] == (auth["unauthorized"] if refusal == "unauthorized" else 0), auth


def _refreshed_before_expiry(finished: Finished) -> None:
    """The leads think past the tokens' 2 s lifetime, yet only the revoke's 401s are seen (one per principal):
    the harness refreshes each token at half its life, and the refreshes are counted."""
    assert finished.summary["auth"]["unauthorized"] <= 4, finished.summary["auth"]
    assert finished.folder is not None
    refreshed = re.search(r'^mrtr_token_refreshes_total\{outcome="ok"\} (\S+)$',
                          (finished.folder / "metrics.prom").read_text(), re.MULTILINE)
    assert refreshed and float(refreshed[1]) > 4, "the revoke's renewals, then refreshes at half-life"
    assert re.search(r'^mrtr_token_refreshes_total\{outcome="failed"\} 0\.0$',
                     (finished.folder / "metrics.prom").read_text(), re.MULTILINE), "no outage, no failed refresh"


def _refreshes_failed_and_recovered(finished: Finished) -> None:
    """The outage is seen by the harness (a refresh refused, logged once) and is over before a token expires."""
    assert "answered HTTP 503" in finished.output and "token refreshes succeed again" in finished.output
    assert set(finished.summary["flows"]["by_outcome"]) == {"completed"}, finished.summary["flows"]


AUTH_CHECKS = {"token-expired-mid-flow": _refreshed_before_expiry, "auth-outage": _refreshes_failed_and_recovered}


def test_token_expired_mid_flow_without_refresh_ends_the_flows_whose_retry_is_refused(tmp_path, monkeypatch):
    """`refresh = false`: the revoke's 401 is not renewed, so every flow ends `error`, among them flows whose
    retry (issue_refund, round 2) was refused after the lead thought; the replicas log why. (Without refresh a
    lead never fetches a token after the first, an hour's, so the refusal is the revoke's, not an expiry's.)"""
    monkeypatch.setenv(SECRET_ENV, "catalogue-secret")
    text = (SCENARIOS / "on-call" / "token-expired-mid-flow.toml").read_text()
    assert "principals = 4\n" in text and "[expect]" in text
    scenario = tmp_path / "token-expired-no-refresh.toml"
    scenario.write_text(text.replace("principals = 4\n", "principals = 4\nrefresh = false\n").split("[expect]")[0])
    finished = run_harness(scenario, tmp_path / "results")
    assert finished.code == 0, finished.output
    flows, auth = finished.summary["flows"]["by_outcome"], finished.summary["auth"]
    assert set(flows) == {"error"}, flows
    assert auth["retried"] == 0 and auth["unauthorized"] == flows["error"], auth
    assert ("issue_refund", 2) in {(row["tool"], row["round"]) for row in auth["by_round"]}, auth
    assert finished.folder is not None
    logs = "".join(path.read_text() for path in (finished.folder / "target" / "logs").glob("r*.log"))
    assert "bearer token refused: revoked" in logs
