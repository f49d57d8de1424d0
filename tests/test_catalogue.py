"""The on-call catalogue: every scenario produces the reason (or symptom) its cause must produce.

Each runs for real against the embedded shop (a few seconds each), as a user runs it: `run --reproduce`,
passing its own `[reproduces]` (the failure), where the expected reason is asserted dominant over
every other; the few with the fix in place on the shop (`FIXED`) run plainly, passing their `[expect]`
(the healthy outcome). The auth scenarios name MCP_CLIENT_SECRET for the client secret: each run
gets one in its environment.

This module runs the causes in sealing and keys; the others run in test_catalogue_deployments.py,
test_catalogue_hosts.py and test_catalogue_tokens.py (a module per group, so that parallel
workers share the runs), all through `check_on_call` here.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.scenario import load_scenario
from harness.config.thresholds import Threshold, parse_thresholds
from tests.harness_run import ROOT, SCENARIOS, Finished, leaks, run_harness

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

FIXED = frozenset({"balancer-timeout", "auth-outage", "token-expired-mid-flow", "old-client-dual-era",
                   "endless-url-counted"})
"""The scenarios whose shop has the fix in place: run plainly, they pass their [expect] (the healthy outcome); their
[reproduces] states the failure the fix prevents. Every other scenario reproduces its failure (`run --reproduce`)."""

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


def test_every_catalogue_scenario_states_its_failure_and_its_healthy_outcome_apart():
    """Parsed only: each file has both tables, its comments say how to reproduce and what the fix is, and its
    healthy outcome is the failure's absence (a count its [reproduces] wants above 0 is 0 in its [expect], over
    the same selection or a wider one)."""
    for path in sorted((SCENARIOS / "on-call").glob("*.toml")):
        scenario = load_scenario(path)
        assert scenario.reproduces and scenario.expect, path.name
        comments = "".join(line for line in path.read_text().splitlines(keepends=True) if line.startswith("#"))
        assert "--reproduce" in comments and "fix" in comments, path.name
        healthy = [threshold for threshold in parse_thresholds(scenario.expect) if _is(threshold, "==")]
        failure = [threshold for threshold in parse_thresholds(scenario.reproduces) if _is(threshold, ">")]
        assert any(ok.metric == bad.metric and set(ok.selector) <= set(bad.selector)
                   for ok in healthy for bad in failure), path.name


def test_the_table_for_an_external_deployment_names_what_the_chaos_registry_asks_for():
    """docs/on-call.md's table (generated): each scenario's `[target.commands]` as its steps need them, and the shop's
    start-up settings it must be deployed with."""
    from harness.triage.on_call_catalogue import external_table

    rows = {line.split(" | ")[0].strip("| `"): line for line in external_table().splitlines()[2:]}
    assert set(rows) == set(EXPECTED)
    assert "| `add-key`, `promote-key` |" in rows["rotation-minter-first"], "minter-first never retires a key"
    assert "| `add-key`, `promote-key`, `retire-key` |" in rows["rotation-retire-early"]
    assert "`auth-down`, `auth-up`" in rows["auth-outage"] and "| `restart` |" in rows["ephemeral-keys"]
    assert '`keyring = "ephemeral"`' in rows["ephemeral-keys"] and "replica 2: `name = \"shop-eu\"`" in rows[
        "different-names"]
    assert "the harness's own fault proxy" in rows["latency-expiry"] and rows["tampered-state"].endswith("| nothing |")


def _is(threshold: Threshold, op: str) -> bool:
    """The threshold's one condition compares with `op` against 0."""
    return len(threshold.conditions) == 1 and (threshold.conditions[0].op, threshold.conditions[0].value) == (op, 0)


def test_reproduce_on_a_scenario_without_reproduces_is_a_usage_error(tmp_path):
    """Refused before anything starts, in one line (exit 2)."""
    finished = run_harness(SCENARIOS / "smoke.toml", tmp_path, "--reproduce")
    assert finished.code == 2, finished.output
    assert finished.output.strip().splitlines() == [
        "mrtr-harness run: scenario 'smoke' has no [reproduces] table (the failure it reproduces): only its [expect] "
        "can be judged"]
    assert finished.folder is None


@pytest.mark.parametrize("name", SEALING)
def test_each_on_call_scenario_produces_its_reason(name, tmp_path, monkeypatch):
    finished = check_on_call(name, tmp_path, monkeypatch)
    if name == "slow-leads":
        _judged_by_expect_it_fails(finished)


def _judged_by_expect_it_fails(finished: Finished) -> None:
    """The same run's figures judged by [expect] (the healthy outcome), as `report --judge expect` rebuilds them:
    the fault is in the scenario, so on the shop the fix does not hold (exit 1), and every output says which
    table was judged."""
    assert finished.folder is not None
    rebuilt = subprocess.run([sys.executable, "-m", "harness", "report", str(finished.folder), "--judge", "expect"],
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert rebuilt.returncode == 1, rebuilt.stdout + rebuilt.stderr
    assert "status failed, exit code 1 (judged by [expect])" in rebuilt.stdout
    assert "threshold rejections{reason='expired'}: == 0" in rebuilt.stdout
    summary = json.loads((finished.folder / "summary.json").read_text())
    assert summary["judged"] == "expect" and not summary["passed"]
    assert '<property name="judged" value="expect" />' in (finished.folder / "junit.xml").read_text()
    assert "judged by <b>[expect]</b>" in (finished.folder / "report.html").read_text()


def check_on_call(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Finished:
    """Run the on-call scenario `name` as a user does (`--reproduce` unless its fix is in place: `FIXED`); it
    passes the table judged and shows its cause's sign."""
    monkeypatch.setenv(SECRET_ENV, "catalogue-secret")
    reproduce = name not in FIXED
    finished = run_harness(SCENARIOS / "on-call" / f"{name}.toml", tmp_path, *(["--reproduce"] if reproduce else []))
    summary = finished.summary
    assert finished.code == 0, finished.output
    assert summary["status"] == "completed"
    assert summary["judged"] == ("reproduces" if reproduce else "expect")
    if reproduce:
        assert "(judged by [reproduces]: the failure reproduced)" in finished.output
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
    return finished


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
    """The leads think past the tokens' 2 s lifetime, yet every 401 is renewed and its round resent: the harness
    refreshes each token at half its life, and the refreshes are counted. The revoke gives one 401 per principal;
    a machine too busy to wake a refresh within the token's second half gives one more, renewed the same way, so
    the count of 401s is not what the code guarantees."""
    auth = finished.summary["auth"]
    assert auth["unauthorized"] > 0 and auth["retried"] == auth["unauthorized"], auth
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
