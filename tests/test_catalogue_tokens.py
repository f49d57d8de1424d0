"""The on-call catalogue's causes in OAuth tokens: expiry mid-flow, a client that is no lead, principal drift,
an authorization server's outage (the run itself and each one's `auth` sign: `tests.test_catalogue.check_on_call`)."""

from __future__ import annotations

import pytest

from tests.harness_run import SCENARIOS, run_harness
from tests.test_catalogue import SECRET_ENV, TOKENS, check_on_call


@pytest.mark.parametrize("name", TOKENS)
def test_each_token_scenario_produces_its_sign(name, tmp_path, monkeypatch):
    check_on_call(name, tmp_path, monkeypatch)


def test_token_expired_mid_flow_without_refresh_ends_the_flows_whose_retry_is_refused(tmp_path, monkeypatch):
    """`refresh = false`: the revoke's 401 is not renewed, so every flow ends `error`, among them flows whose
    retry (issue_refund, round 2) was refused after the lead thought; the replicas log why. (Without refresh a
    lead never fetches a token after the first, an hour's, so the refusal is the revoke's, not an expiry's.)
    That is the failure the file's [reproduces] states: `run --reproduce` of the variant passes."""
    monkeypatch.setenv(SECRET_ENV, "catalogue-secret")
    text = (SCENARIOS / "on-call" / "token-expired-mid-flow.toml").read_text()
    assert "principals = 4\n" in text and text.index("\n[reproduces]") < text.index("\n[expect]")
    scenario = tmp_path / "token-expired-no-refresh.toml"
    scenario.write_text(text.replace("principals = 4\n", "principals = 4\nrefresh = false\n").split("\n[expect]")[0])
    finished = run_harness(scenario, tmp_path / "results", "--reproduce")
    assert finished.code == 0, finished.output
    flows, auth = finished.summary["flows"]["by_outcome"], finished.summary["auth"]
    assert set(flows) == {"error"}, flows
    assert auth["retried"] == 0 and auth["unauthorized"] == flows["error"], auth
    assert ("issue_refund", 2) in {(row["tool"], row["round"]) for row in auth["by_round"]}, auth
    assert finished.folder is not None
    logs = "".join(path.read_text() for path in (finished.folder / "target" / "logs").glob("r*.log"))
    assert "bearer token refused: revoked" in logs
