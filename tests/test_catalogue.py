"""The on-call catalogue: every scenario produces the reason (or symptom) its cause must produce.

Each runs for real against the embedded shop (a few seconds each) and must pass its own
`[expect]`, where the expected reason is asserted dominant over every other. The auth
scenarios name MCP_CLIENT_SECRET for the client secret: each run gets one in its environment.

This module runs the causes in sealing and keys; the others run in test_catalogue_deployments.py,
test_catalogue_hosts.py and test_catalogue_tokens.py (a module per group, so that parallel
workers share the runs), all through `check_on_call` here.
"""

from __future__ import annotations

import re
from pathlib import Path

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


SEALING = ["changed-arguments", "clock-ahead", "different-names", "ephemeral-keys", "rotation-minter-first",
           "rotation-retire-early", "slow-leads", "tampered-state"]
DEPLOYMENTS = ["balancer-timeout", "latency-expiry", "lost-answer-retry", "records-in-memory", "reset-after-question",
               "started-two-ways"]
HOSTS = sorted(HOST_SIGNS)
TOKENS = sorted(AUTH_SIGNS)


def test_the_catalogue_has_one_scenario_per_known_cause():
    assert {path.stem for path in (SCENARIOS / "on-call").glob("*.toml")} == set(EXPECTED)
    assert sorted(SEALING + DEPLOYMENTS + HOSTS + TOKENS) == sorted(EXPECTED), "every cause is run once"


@pytest.mark.parametrize("name", SEALING)
def test_each_on_call_scenario_produces_its_reason(name, tmp_path, monkeypatch):
    check_on_call(name, tmp_path, monkeypatch)


def check_on_call(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the on-call scenario `name` as a user does; it passes its own [expect] and shows its cause's sign."""
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
