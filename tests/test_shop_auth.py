"""The shop with auth on, on the process backend: its own authorization server, replicas as resource servers.

Real processes all the way: the embedded target starts the authorization server and the
replicas; tokens are fetched from its token endpoint found by discovery, with plain
httpx; each round is a real 2026-07-28 POST. Every chaos action on the authorization
server is checked by what a round gets and by the reason the replica logs.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from harness.config.scenario import parse_scenario
from harness.journal.writer import read_journal
from harness.report import journal_parts
from harness.shop.authserver import Signer
from harness.shop.orders import build_orders
from harness.shop.token_checks import POLL_SECONDS
from harness.targets.embedded import EmbeddedTarget
from harness.targets.interface import AuthChange
from tests.harness_run import SCENARIOS, leaks, run_harness

SECRET_ENV = "MRTR_TEST_SHOP_SECRET"
SECRET = "correct horse battery staple"
CLIENT = "support-leads"
PROTOCOL = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": PROTOCOL,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}}
HELD_ORDERS = iter(build_orders().order_ids(needs_confirmation=True))
SCENARIO = f"""
name = "auth"
duration = "30s"
[target]
kind = "embedded"
replicas = 3
overrides = [{{ replica = 3, auth = false }}]   # r3: a rollout that missed the auth config
[target.auth]
kind = "client-credentials"
client_id = "{CLIENT}"
client_secret_env = "{SECRET_ENV}"
scopes = ["refunds:write"]
[load]
model = "closed"
users = 1
[[flows]]
kind = "refund"
"""
FEED_SECONDS = 5.0
"""How long a test waits for the replicas to poll a change from the authorization server (they do every second)."""


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedTarget]:
    os.environ[SECRET_ENV] = SECRET
    target = EmbeddedTarget(parse_scenario(SCENARIO), tmp_path_factory.mktemp("auth-shop"))
    try:
        target.start()
        yield target
    finally:
        target.stop()
        os.environ.pop(SECRET_ENV, None)


@pytest.fixture(autouse=True)
def _put_back(shop: EmbeddedTarget) -> Iterator[None]:
    yield
    shop.rollback()


def call(url: str, tool: str, arguments: dict, token: str | None, **params) -> httpx.Response:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": PROTOCOL, "Mcp-Method": "tools/call", "Mcp-Name": tool}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments, "_meta": META, **params}}
    return httpx.post(url, json=body, headers=headers, timeout=10.0)


def discovered_token_url(url: str) -> str:
    """The spec's way: the 401's WWW-Authenticate, then RFC 9728 metadata, then RFC 8414 metadata."""
    challenge = call(url, "quote_refund", {"order_id": "O-1"}, None).headers["www-authenticate"]
    resource = httpx.get(re.search(r'resource_metadata="([^"]+)"', challenge).group(1)).json()
    issuer = resource["authorization_servers"][0].rstrip("/")
    return httpx.get(f"{issuer}/.well-known/oauth-authorization-server").json()["token_endpoint"]


def token(shop: EmbeddedTarget, lead: int, scope: str = "refunds:write") -> dict:
    response = httpx.post(discovered_token_url(shop.urls[0]), auth=(CLIENT, SECRET),
                          data={"grant_type": "client_credentials", "scope": scope, "lead": str(lead)})
    assert response.status_code == 200, response.text
    return response.json()


def claims(access_token: str) -> dict:
    payload = access_token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def quote(shop: EmbeddedTarget, access_token: str) -> str:
    response = call(shop.urls[0], "quote_refund", {"order_id": next(HELD_ORDERS)}, access_token)
    assert response.status_code == 200, response.text
    return response.json()["result"]["structuredContent"]["quote_id"]


def first_round(shop: EmbeddedTarget, access_token: str) -> tuple[str, str]:
    """A refund above the limit, asked: (quote id, the requestState its retry must echo)."""
    quote_id = quote(shop, access_token)
    result = call(shop.urls[0], "issue_refund", {"quote_id": quote_id}, access_token).json()["result"]
    assert result["resultType"] == "input_required", result
    return quote_id, result["requestState"]


def retry(shop: EmbeddedTarget, quote_id: str, state: str, access_token: str) -> httpx.Response:
    answers = {"confirm": {"action": "accept", "content": {"release": True}}}
    return call(shop.urls[1], "issue_refund", {"quote_id": quote_id}, access_token, inputResponses=answers,
                requestState=state)


def log_of(shop: EmbeddedTarget, index: int) -> str:
    assert shop.deployment is not None
    return Path(shop.deployment.replicas[index].log_path).read_text()


def until(check, seconds: float = FEED_SECONDS):
    """`check()` once it is truthy, polled; the last value when `seconds` run out."""
    deadline = time.monotonic() + seconds
    while not (value := check()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return value


def test_a_round_without_a_token_is_401_and_names_the_resource_metadata(shop):
    response = call(shop.urls[0], "quote_refund", {"order_id": "O-1"}, None)
    assert response.status_code == 401
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer ") and 'error="invalid_token"' in challenge
    resource = httpx.get(re.search(r'resource_metadata="([^"]+)"', challenge).group(1)).json()
    assert resource["resource"] == shop.urls[0]
    assert resource["authorization_servers"] == [shop.deployment.auth.issuer]


def test_the_authorization_server_metadata_leads_to_a_client_credentials_token_endpoint(shop):
    issuer = shop.deployment.auth.issuer
    document = httpx.get(f"{issuer}/.well-known/oauth-authorization-server").json()
    assert document["issuer"] == issuer
    assert document["grant_types_supported"] == ["client_credentials"]
    assert set(document["token_endpoint_auth_methods_supported"]) == {"client_secret_basic", "client_secret_post"}
    assert discovered_token_url(shop.urls[1]) == document["token_endpoint"]
    assert httpx.get(document["jwks_uri"]).json()["keys"][0]["alg"] == "ES256"


def test_each_lead_is_its_own_subject_by_either_client_authentication(shop):
    by_basic = token(shop, 3)
    by_post = httpx.post(discovered_token_url(shop.urls[0]),
                         data={"grant_type": "client_credentials", "client_id": CLIENT, "client_secret": SECRET}).json()
    assert claims(by_basic["access_token"])["sub"] == f"{CLIENT}/lead-3"
    assert claims(by_post["access_token"])["sub"] == CLIENT
    assert by_basic["scope"] == "refunds:write" and by_basic["expires_in"] > 0
    assert call(shop.urls[1], "quote_refund", {"order_id": "O-1"}, by_basic["access_token"]).status_code == 200


def test_a_wrong_secret_is_refused_with_invalid_client_and_the_answer_never_carries_it(shop):
    wrong = "not-the-" + SECRET
    response = httpx.post(discovered_token_url(shop.urls[0]), auth=(CLIENT, wrong),
                          data={"grant_type": "client_credentials"})
    assert (response.status_code, response.json()["error"]) == (401, "invalid_client")
    assert wrong not in response.text and SECRET not in response.text
    assert SECRET not in Path(shop.deployment.auth.process.log_path).read_text()


def test_a_token_with_the_same_claims_signed_by_another_key_is_refused(shop):
    genuine = claims(token(shop, 15)["access_token"])
    forged = Signer().sign(genuine)  # same issuer, subject, audience and scope; not the server's key
    response = call(shop.urls[0], "quote_refund", {"order_id": "O-1"}, forged)
    assert response.status_code == 401 and 'error="invalid_token"' in response.headers["www-authenticate"]
    assert "bearer token refused: unknown signing key" in log_of(shop, 0)


def test_issue_refund_without_refunds_write_is_403_insufficient_scope(shop):
    reader = token(shop, 4, scope="")["access_token"]
    quote_id = quote(shop, reader)  # quoting needs no scope
    response = call(shop.urls[0], "issue_refund", {"quote_id": quote_id}, reader)
    assert response.status_code == 403
    challenge = response.headers["www-authenticate"]
    assert 'error="insufficient_scope"' in challenge and 'scope="refunds:write"' in challenge
    assert "resource_metadata=" in challenge
    assert "tool issue_refund refused: insufficient_scope" in log_of(shop, 0)


def test_issue_refund_on_the_2025_path_without_refunds_write_is_a_tool_error_naming_the_scope(shop):
    reader = token(shop, 16, scope="")["access_token"]
    quote_id = quote(shop, reader)
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "Authorization": f"Bearer {reader}"}  # no MCP-Protocol-Version: the 2025 path, with a session
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}
    opened = httpx.post(shop.urls[0], json=hello, headers=headers, timeout=10.0)
    headers["Mcp-Session-Id"] = opened.headers["mcp-session-id"]
    httpx.post(shop.urls[0], json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "issue_refund", "arguments": {"quote_id": quote_id}}}
    answer = httpx.post(shop.urls[0], json=body, headers=headers, timeout=10.0).text
    result = json.loads(answer[answer.index("{"):].splitlines()[0])["result"]  # plain JSON or one SSE event
    assert result["isError"] and "needs the refunds:write scope" in result["content"][0]["text"]


def test_a_retry_with_another_leads_token_is_rejected_for_principal(shop):
    quote_id, state = first_round(shop, token(shop, 5)["access_token"])
    response = retry(shop, quote_id, state, token(shop, 6)["access_token"])
    assert response.json()["error"]["code"] == -32602
    assert "requestState rejected on tools/call: principal\n" in log_of(shop, 1)


def test_a_retry_with_a_refreshed_token_of_the_same_lead_is_served(shop):
    quote_id, state = first_round(shop, token(shop, 7)["access_token"])
    response = retry(shop, quote_id, state, token(shop, 7)["access_token"])
    assert response.json()["result"]["structuredContent"]["status"] == "requested"  # released: the API pays it


def test_a_retry_on_a_replica_started_without_auth_is_rejected_for_principal_drift(shop):
    quote_id, state = first_round(shop, token(shop, 14)["access_token"])  # sealed on r1, to lead 14
    answers = {"confirm": {"action": "accept", "content": {"release": True}}}
    response = call(shop.urls[2], "issue_refund", {"quote_id": quote_id}, token(shop, 14)["access_token"],
                    inputResponses=answers, requestState=state)
    assert response.json()["error"]["code"] == -32602
    assert "requestState rejected on tools/call: principal drift" in log_of(shop, 2)


# --- chaos on the authorization server -----------------------------------------------------------


def test_token_expiry_issues_short_tokens_that_expire_while_the_lead_thinks(shop):
    shop.auth_change(AuthChange("token-expiry", lifetime=3.0))
    short = token(shop, 8)
    assert short["expires_in"] == 3
    quote_id, state = first_round(shop, short["access_token"])
    # the lead thinks past it: until a replica refuses the token (r1's log, below, is the retry's own)
    assert until(lambda: call(shop.urls[0], "quote_refund", {"order_id": "O-1"}, short["access_token"]).status_code
                 == 401, seconds=short["expires_in"] + FEED_SECONDS)
    response = retry(shop, quote_id, state, short["access_token"])
    assert response.status_code == 401 and 'error="invalid_token"' in response.headers["www-authenticate"]
    assert f"bearer token refused: expired sub={CLIENT}/lead-8" in log_of(shop, 1)
    shop.auth_change(AuthChange("token-expiry", on=False))
    assert token(shop, 8)["expires_in"] > 60


def test_revoke_makes_the_leads_tokens_401_until_they_fetch_new_ones(shop):
    held = token(shop, 9)["access_token"]
    answer = shop.auth_change(AuthChange("revoke", share=1.0))
    assert answer["revoked"] >= 1 and 9 in answer["leads"]
    assert until(lambda: call(shop.urls[0], "quote_refund", {"order_id": "O-1"}, held).status_code == 401)
    assert f"bearer token refused: revoked sub={CLIENT}/lead-9" in log_of(shop, 0)
    assert call(shop.urls[0], "quote_refund", {"order_id": "O-1"}, token(shop, 9)["access_token"]).status_code == 200


def test_scope_loss_turns_a_leads_refunds_into_403(shop):
    held = token(shop, 10)["access_token"]
    answer = shop.auth_change(AuthChange("scope-loss", share=1.0, scope="refunds:write"))
    assert 10 in answer["leads"]
    quote_id = quote(shop, held)
    assert until(lambda: call(shop.urls[1], "issue_refund", {"quote_id": quote_id}, held).status_code == 403)
    assert token(shop, 10, scope="refunds:write")["scope"] == ""  # a new token does not bring it back
    assert f"insufficient_scope, needs refunds:write (sub={CLIENT}/lead-10)" in log_of(shop, 1)


def test_auth_down_refuses_token_requests_while_rounds_go_on_with_valid_tokens(shop):
    held = token(shop, 11)["access_token"]
    token_url = discovered_token_url(shop.urls[0])
    shop.auth_change(AuthChange("auth-down"))
    refused = httpx.post(token_url, auth=(CLIENT, SECRET), data={"grant_type": "client_credentials"})
    assert (refused.status_code, refused.json()["error"]) == (503, "temporarily_unavailable")
    # The replicas' polls of the keys and feed fail too: they keep what they hold, so the held token is served before,
    # during and after two failed polls per replica (counted by the authorization server itself).
    auth = shop.deployment.auth if shop.deployment is not None else None
    assert auth is not None
    polls_to_see = auth.admin("state")["reads_refused"] + 2 * len(shop.urls)
    answers = []

    def served_through_failed_polls() -> bool:
        answers.append(call(shop.urls[0], "quote_refund", {"order_id": "O-1"}, held).status_code)
        return auth.admin("state")["reads_refused"] >= polls_to_see

    assert until(served_through_failed_polls, 10 * POLL_SECONDS), "the replicas did not poll the server while down"
    answers.append(call(shop.urls[0], "quote_refund", {"order_id": "O-1"}, held).status_code)
    assert set(answers) == {200}, answers
    shop.auth_change(AuthChange("auth-down", on=False))
    assert httpx.post(token_url, auth=(CLIENT, SECRET), data={"grant_type": "client_credentials"}).status_code == 200


def test_subject_drift_gives_the_sdks_principal_reason_on_the_retry(shop):
    held = token(shop, 12)["access_token"]
    quote_id, state = first_round(shop, held)  # sealed to (client, issuer, lead-12)
    shop.auth_change(AuthChange("subject-drift", share=1.0))
    assert until(lambda: call(shop.urls[1], "quote_refund", {"order_id": "O-1"}, held).status_code == 200
                 and "verified without its subject" in log_of(shop, 1))  # the replica has learned of the drift
    response = retry(shop, quote_id, state, held)
    assert response.json()["error"]["code"] == -32602
    assert "requestState rejected on tools/call: principal\n" in log_of(shop, 1)


def test_rollback_puts_the_authorization_server_back(shop):
    shop.auth_change(AuthChange("token-expiry", lifetime=2.0))
    shop.auth_change(AuthChange("auth-down"))
    assert "reset the authorization server" in " ".join(shop.rollback())
    assert token(shop, 13)["expires_in"] > 60


def test_the_authorization_server_without_its_secret_variable_exits_2_naming_it():
    env = {key: value for key, value in os.environ.items() if key != "MRTR_TEST_NO_SUCH_SECRET"}
    started = subprocess.run([sys.executable, "-m", "harness", "shop", "auth-server", "--port", "1", "--client-id",
                              CLIENT, "--client-secret-env", "MRTR_TEST_NO_SUCH_SECRET"], capture_output=True,
                             text=True, env=env, timeout=60)
    assert started.returncode == 2
    assert "MRTR_TEST_NO_SUCH_SECRET" in started.stderr and "Traceback" not in started.stderr


def test_a_replica_given_both_a_principal_header_and_an_issuer_exits_2_saying_to_give_one():
    started = subprocess.run([sys.executable, "-m", "harness", "shop", "replica", "--port", "1", "--api",
                              "http://127.0.0.1:1", "--principal-header", "X-Lead", "--auth-issuer",
                              "http://127.0.0.1:2"], capture_output=True, text=True, timeout=60)
    assert started.returncode == 2
    assert "--principal-header and --auth-issuer" in started.stderr and "Traceback" not in started.stderr


@pytest.mark.parametrize("workers", [(), ("--workers", "2", "--duration", "4s")], ids=["one-process", "two-workers"])
def test_the_oauth_scenario_passes_with_zero_rejections_and_no_refusal(tmp_path, monkeypatch, workers):
    """scenarios/oauth.toml as a user runs it: refunds above and below the limit, each lead its own token. With
    Locust workers each holds its own leads' tokens: the workers' journal parts leak none either."""
    monkeypatch.setenv("MCP_CLIENT_SECRET", SECRET)
    finished = run_harness(SCENARIOS / "oauth.toml", tmp_path, *workers)
    assert finished.code == 0, finished.output
    summary = finished.summary
    assert summary["rejections"]["total_logged"] == 0 and summary["reconciliation"]["unexplained"] == 0
    assert (summary["auth"]["unauthorized"], summary["auth"]["forbidden"]) == (0, 0), summary["auth"]
    records = [record for part in journal_parts(finished.folder) for record in read_journal(part)]
    asked = [record for record in records if record["type"] == "round" and record["round"] == 2]
    assert asked and summary["flows"]["by_outcome"].get("completed", 0) > 0, "refunds above the limit, confirmed"
    assert leaks(finished, {"the client secret": SECRET}) == [], "neither the secret nor a token (a JWT) anywhere"


def test_the_oauth_scenario_without_its_secret_variable_runs_on_a_throwaway_secret_and_says_so(tmp_path,
                                                                                                monkeypatch):
    """A newcomer's first OAuth run: the harness starts both sides of an embedded target, so any secret serves."""
    monkeypatch.delenv("MCP_CLIENT_SECRET", raising=False)
    finished = run_harness(SCENARIOS / "oauth.toml", tmp_path, "--duration", "2s")
    assert finished.code == 0, finished.output
    said = [line for line in finished.output.splitlines() if "MCP_CLIENT_SECRET is not set" in line]
    assert len(said) == 1 and "drew a throwaway secret" in said[0], finished.output
    assert finished.summary["flows"]["by_outcome"].get("completed", 0) > 0
    assert leaks(finished, {}) == [], "no token (a JWT) anywhere"
