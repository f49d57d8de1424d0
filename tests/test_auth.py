"""OAuth on the client side, against a resource server and an authorization server the harness did not shape.

The guarded desk (`tests/servers/guarded_desk.py`) is an MRTR server on the SDK's
`TokenVerifier` + `AuthSettings`; the token desk (`tests/servers/token_desk.py`) its
authorization server on the SDK's metadata handler and client authenticator, each its own
process. A real `mrtr-harness run` finds the token endpoint by discovery (the 401's
`WWW-Authenticate`, RFC 9728, RFC 8414), gives each lead its own token and completes its
flows; no token and no secret is left in any file of the results folder. A revoked token
is renewed and its round sent once more (journaled), unless refresh is off. Bad input is
refused before the load with the exit code that says whose it is, naming no secret.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import gevent
import httpx
import pytest

from harness.auth import discovery
from harness.auth.errors import TokenEndpointError
from harness.auth.keeper import LeadTokens
from harness.auth.token import Token
from harness.auth.token_sources import lead_tokens
from harness.config.auth import TargetAuth
from harness.config.leads import LeadProfile
from harness.errors import TargetDown
from harness.leads.lead import capabilities
from harness.metrics.registry import RunMetrics
from harness.mrtr.client import MrtrClient
from harness.mrtr.outcome import Outcome
from harness.mrtr.routing import Router
from tests.harness_run import Finished, run_harness
from tests.servers import Running, free_port, start_server

CLIENT_ID = "support-leads"
SECRET_ENV = "GUARDED_DESK_TEST_SECRET"
YES = {"confirm": {"action": "accept", "content": {"release": True}}}

SCENARIO = """
name = "guarded-desk"
seed = 5
duration = "4s"
time_scale = 60
grace = "60s"  # a bound: the run waits only while flows are in flight (on a busy machine a round can take seconds)

[target]
kind = "external"
urls = ["{url}"]

[target.auth]
{auth}

[load]
arrival_rate = 5

[[flows]]
kind = "call"
tool = "confirm_refund"
arguments = [{{ order_id = "O-1" }}, {{ order_id = "O-2" }}]

[leads]
think = {{ dist = "constant", value = "30s" }}
decline = 0.0
cancel = 0.0
abandon = 0.0
"""

CLIENT_CREDENTIALS = f"""kind = "client-credentials"
client_id = "{CLIENT_ID}"
client_secret_env = "{SECRET_ENV}"
scopes = ["desk"]
principals = 3
"""


class Desks:
    """The two servers, the client secret, and the file the token desk writes every token it issues to."""

    def __init__(self, authorization: Running, resource: Running, secret: str, issued: Path) -> None:
        self.authorization, self.resource, self.secret, self.issued = authorization, resource, secret, issued

    def tokens(self) -> list[str]:
        return self.issued.read_text().split() if self.issued.exists() else []

    def forget(self) -> None:
        """Revoke every token issued so far."""
        httpx.post(f"{self.authorization.url}/forget", timeout=5).raise_for_status()


@pytest.fixture(scope="module")
def desks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Desks]:
    folder = tmp_path_factory.mktemp("desks")
    secret = secrets.token_urlsafe(24)
    issued = folder / "issued.txt"
    port = free_port()
    authorization = start_server("tests.servers.token_desk", port=port, path="", log=folder / "token_desk.log",
                                 env={"TOKEN_DESK_CLIENT": f"{CLIENT_ID}:{secret}", "TOKEN_DESK_ISSUED": str(issued),
                                      "TOKEN_DESK_SCOPES": "desk other"},
                                 wait=False)
    resource = start_server("tests.servers.guarded_desk", env={"GUARDED_DESK_ISSUER": authorization.url},
                            log=folder / "guarded_desk.log", wait=False)
    try:
        authorization.wait_ready()
        resource.wait_ready()
        yield Desks(authorization, resource, secret, issued)
    finally:
        resource.stop()
        authorization.stop()


def _run(desks: Desks, tmp_path: Path, auth: str = CLIENT_CREDENTIALS, url: str | None = None) -> Finished:
    scenario = tmp_path / "guarded.toml"
    scenario.write_text(SCENARIO.format(url=url or desks.resource.url, auth=auth))
    return run_harness(scenario, tmp_path / "results")


def test_a_run_finds_the_token_endpoint_by_discovery_and_every_flow_completes_with_no_token_in_its_results(
        desks: Desks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, desks.secret)
    finished = _run(desks, tmp_path)
    assert finished.code == 0, finished.output
    outcomes = finished.summary["flows"]["by_outcome"]
    assert outcomes.get("completed", 0) > 0 and set(outcomes) == {"completed"}, outcomes
    rounds = [record for record in finished.journal() if record["type"] == "round"]
    assert rounds and all(record["outcome"] in ("input_required", "complete") for record in rounds)
    tokens = desks.tokens()
    assert len(tokens) >= 3, "one token per principal, fetched before the load"
    assert finished.folder is not None
    leaked = [(path.name, what) for path in finished.folder.rglob("*") if path.is_file()
              for what, value in [("secret", desks.secret), *(("token", token) for token in tokens)]
              if value.encode() in path.read_bytes()]
    assert leaked == [], leaked
    assert desks.secret not in finished.output and not any(token in finished.output for token in tokens)


def _client(desks: Desks, tokens: LeadTokens) -> MrtrClient:
    return MrtrClient(Router([desks.resource.url]), capabilities=capabilities(LeadProfile()), credentials=tokens)


def _tokens(desks: Desks, monkeypatch: pytest.MonkeyPatch, **settings: object) -> LeadTokens:
    monkeypatch.setenv(SECRET_ENV, desks.secret)
    auth = TargetAuth.model_validate({"kind": "client-credentials", "client_id": CLIENT_ID,
                                      "client_secret_env": SECRET_ENV, "scopes": ["desk"], "principals": 2,
                                      **settings})
    return lead_tokens(auth, desks.resource.url)


def test_a_revoked_token_is_renewed_and_its_round_sent_once_more_so_the_call_completes(
        desks: Desks, monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = _tokens(desks, monkeypatch)
    try:
        def revoke_then_answer(record: object) -> dict[str, object]:
            desks.forget()  # the lead's token is revoked while they think
            return YES

        result = _client(desks, tokens).call_tool("confirm_refund", {"order_id": "O-1"}, revoke_then_answer, lead=1)
    finally:
        tokens.stop()
    assert [(r.outcome, r.auth_error, r.auth_retry) for r in result.rounds] == [
        (Outcome.INPUT_REQUIRED, None, False), (Outcome.UNAUTHORIZED, "invalid_token", False),
        (Outcome.COMPLETE, None, True)]
    assert result.outcome is Outcome.COMPLETE


def test_without_refresh_a_revoked_token_ends_the_call_unauthorized(
        desks: Desks, monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = _tokens(desks, monkeypatch, refresh=False)
    try:
        def revoke_then_answer(record: object) -> dict[str, object]:
            desks.forget()
            return YES

        result = _client(desks, tokens).call_tool("confirm_refund", {"order_id": "O-1"}, revoke_then_answer, lead=0)
    finally:
        tokens.stop()
    assert result.outcome is Outcome.UNAUTHORIZED
    assert [r.auth_retry for r in result.rounds] == [False, False]
    assert result.rounds[-1].message == "HTTP 401: invalid_token: Authentication required"


def test_a_token_without_the_scope_the_server_requires_is_forbidden(
        desks: Desks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = _tokens(desks, monkeypatch, scopes=["other"])
    try:
        record = _client(desks, tokens).send_round("confirm_refund", {"order_id": "O-1"}, lead=0)
    finally:
        tokens.stop()
    assert (record.outcome, record.http_status, record.auth_error) == (Outcome.FORBIDDEN, 403, "insufficient_scope")


def test_each_lead_carries_its_own_principals_token(desks: Desks, monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = _tokens(desks, monkeypatch, principals=3)
    try:
        headers = [tokens.authorization(lead) for lead in range(6)]
    finally:
        tokens.stop()
    assert headers[:3] == headers[3:] and len(set(headers[:3])) == 3
    assert all(header.startswith("Authorization: Bearer ") and header.endswith("\r\n") for header in headers)


BAD_INPUT = {
    # name: (the [target.auth] table, the secret to set (None: unset), exit code, text the one line must hold)
    "a-missing-secret-variable": (CLIENT_CREDENTIALS, None, 2, f"the environment variable {SECRET_ENV} is not set"),
    "a-token-file-with-no-tokens": ('kind = "tokens"\nfile = "empty.tokens"\n', "", 2, "empty.tokens holds no token"),
    "a-token-file-not-there": ('kind = "tokens"\nfile = "gone.tokens"\n', "", 2, "gone.tokens: cannot read it"),
    "an-unreachable-token-endpoint": (CLIENT_CREDENTIALS + 'token_url = "http://127.0.0.1:{free}/token"\n', "right",
                                      3, "cannot be reached"),
    "a-wrong-secret": (CLIENT_CREDENTIALS, "wrong", 3, "refused client support-leads: invalid_client"),
    "a-scope-not-granted": (CLIENT_CREDENTIALS.replace('["desk"]', '["payroll"]'), "right", 3,
                            "refused client support-leads: invalid_scope"),
}


@pytest.mark.parametrize("name", list(BAD_INPUT))
def test_bad_auth_input_stops_the_run_before_the_load_in_one_line_naming_no_secret(
        desks: Desks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    auth, secret, code, text = BAD_INPUT[name]
    (tmp_path / "empty.tokens").write_text("# no token yet\n\n")
    secret = desks.secret if secret == "right" else secret
    if secret is None:
        monkeypatch.delenv(SECRET_ENV, raising=False)
    else:
        monkeypatch.setenv(SECRET_ENV, secret)
    finished = _run(desks, tmp_path, auth.replace("{free}", str(free_port())))
    assert finished.code == code, finished.output
    assert text in finished.output and "Traceback" not in finished.output, finished.output
    assert desks.secret not in finished.output


FUZZ_FLOW = """
[[flows]]
kind = "fuzz"
tool = "confirm_refund"
arguments = [{ order_id = "O-1" }, { order_id = "O-2" }]
mutations = ["cross-principal"]
"""


def test_the_fuzzers_cross_principal_mutant_goes_back_with_another_leads_real_token_and_is_refused(
        desks: Desks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK seals each state to the token's client, issuer and subject: another lead's token is refused."""
    monkeypatch.setenv(SECRET_ENV, desks.secret)
    scenario = tmp_path / "fuzz.toml"
    text = SCENARIO.format(url=desks.resource.url, auth=CLIENT_CREDENTIALS)
    scenario.write_text(text[:text.index("[[flows]]")] + FUZZ_FLOW + text[text.index("[leads]"):])
    finished = run_harness(scenario, tmp_path / "results")
    mutants = [record for record in finished.journal() if record["type"] == "flow" and "mutation" in record]
    assert mutants and {record["mutant_answer"] for record in mutants} == {"rejected"}, finished.output
    assert finished.summary["fuzz"]["skipped"] == {}


def test_with_every_principal_on_one_token_the_cross_principal_mutant_is_skipped_saying_why(
        desks: Desks, tmp_path: Path) -> None:
    """Two principals, one token (a tokens file shorter than principals): sent "as another principal" the retry
    would go as the same one and be rightly served. The flows send their other class; no_mutant_accepted holds,
    and the report says cross-principal was not sent, and why."""
    token = httpx.post(f"{desks.authorization.url}/token", auth=(CLIENT_ID, desks.secret), timeout=10,
                       data={"grant_type": "client_credentials", "client_id": CLIENT_ID, "lead": "0",
                             "scope": "desk"}).json()["access_token"]
    (tmp_path / "one.tokens").write_text(token + "\n")
    scenario = tmp_path / "fuzz.toml"
    text = SCENARIO.format(url=desks.resource.url, auth='kind = "tokens"\nfile = "one.tokens"\nprincipals = 2\n')
    fuzz = FUZZ_FLOW.replace('["cross-principal"]', '["cross-principal", "truncate"]')
    scenario.write_text(text[:text.index("[[flows]]")] + fuzz + text[text.index("[leads]"):])
    finished = run_harness(scenario, tmp_path / "results")
    verdict = finished.summary["invariants"]["no_mutant_accepted"]
    assert verdict["checked"] and verdict["passed"], finished.output  # (its rejections go unlogged: no log here)
    flows = [record for record in finished.journal() if record["type"] == "flow"]
    assert {record.get("mutation") for record in flows} == {"truncate"}, "nothing went as the same principal"
    assert any(record.get("mutation_skipped") == "cross-principal" for record in flows), "the seed drew it"
    fuzz_summary = finished.summary["fuzz"]
    assert set(fuzz_summary["by_mutation"]) == {"truncate"}
    assert "every principal's token stands for the same one" in fuzz_summary["skipped"]["cross-principal"]
    assert "cross-principal: not sent, every principal's token stands for the same one" in finished.output


def test_cross_principal_goes_with_a_lead_who_is_someone_else(tmp_path: Path) -> None:
    """Three principals on two tokens: principal 2 holds principal 0's token, so it goes as principal 1."""
    path = tmp_path / "two.tokens"
    path.write_text("alpha-token\nbeta-token\n")
    tokens = lead_tokens(TargetAuth(kind="tokens", file=str(path), principals=3), "http://127.0.0.1:9/mcp")
    try:
        assert [tokens.other_principal(lead) for lead in range(4)] == [1, 2, 1, 1]
    finally:
        tokens.stop()
    path.write_text("alpha-token\n")
    tokens = lead_tokens(TargetAuth(kind="tokens", file=str(path), principals=3), "http://127.0.0.1:9/mcp")
    try:
        assert [tokens.other_principal(lead) for lead in range(3)] == [None, None, None]
    finally:
        tokens.stop()


def test_two_jwts_of_one_subject_are_one_principal() -> None:
    """A token command that ignores {lead} mints a new JWT each time: the values differ, the subject does not."""
    import jwt

    def minted(subject: str, nonce: int) -> Token:
        value = jwt.encode({"iss": "https://idp.example", "sub": subject, "client_id": "c", "jti": str(nonce)},
                           "not-a-real-key-but-long-enough-for-hs256", algorithm="HS256")
        return Token(value, time.time())

    assert minted("lead-0", 1).holder() == minted("lead-0", 2).holder() != minted("lead-1", 3).holder()
    assert Token("opaque-a", 0.0).holder() != Token("opaque-b", 0.0).holder()


OLD_HOST = """
[[hosts]]
name = "old"
protocol = "2025-11-25"
"""

HOST_2025_CASES = {
    # name: ([target.auth], the auth outcome every round must have (None: no refusal), its OAuth error)
    "the-leads-own-token": (CLIENT_CREDENTIALS, None, None),
    "a-token-the-server-does-not-know": ('kind = "tokens"\nfile = "bogus.tokens"\nprincipals = 2\n', "unauthorized",
                                         "invalid_token"),
    "a-token-without-the-scope-required": (CLIENT_CREDENTIALS.replace('["desk"]', '["other"]'), "forbidden",
                                           "insufficient_scope"),
}


@pytest.mark.parametrize("name", list(HOST_2025_CASES))
def test_a_2025_host_carries_its_leads_token_and_its_refusals_count_as_auth_refusals(
        desks: Desks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The SDK's own Client, a session per call: every request of it carries the lead's token; a 401 or 403 is an
    auth refusal (summary.json's `auth`), not a connection or JSON-RPC error."""
    auth, refusal, error = HOST_2025_CASES[name]
    monkeypatch.setenv(SECRET_ENV, desks.secret)
    (tmp_path / "bogus.tokens").write_text("not-a-token-the-desk-issued\n")
    scenario = tmp_path / "old.toml"
    text = SCENARIO.format(url=desks.resource.url, auth=auth)
    scenario.write_text(text[:text.index("[leads]")] + OLD_HOST + text[text.index("[leads]"):])
    finished = run_harness(scenario, tmp_path / "results")
    rounds = [record for record in finished.journal() if record["type"] == "round"]
    assert rounds and {record["host"] for record in rounds} == {"old"}, finished.output
    counted = finished.summary["auth"]
    if refusal is None:  # let in: the tool ran, and asks in 2026 form only, which a 2025 request gets as -32603
        assert counted["unauthorized"] == counted["forbidden"] == 0, counted
        assert {(record["outcome"], record["error"]) for record in rounds} == {
            ("jsonrpc_error", "Handler returned an invalid result")}, finished.output
    else:
        assert {(record["outcome"], record["http_status"]) for record in rounds} == {
            (refusal, 401 if refusal == "unauthorized" else 403)}, finished.output
        assert all(f"{error}: " in record["error"] for record in rounds)
        assert counted[refusal] == len(rounds), counted


def _revoke_once_rounds_are_flowing(desks: Desks, results: Path, timeout: float = 60.0) -> bool:
    """Revoke every token as soon as the run's journal holds a round (bounded); False if none came in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(b'"type":"round"' in path.read_bytes() for path in results.glob("*/journal.jsonl")):
            desks.forget()
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("refresh", [True, False])
def test_tokens_revoked_mid_run_are_renewed_and_their_rounds_resent_unless_refresh_is_off(
        desks: Desks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refresh: bool) -> None:
    monkeypatch.setenv(SECRET_ENV, desks.secret)
    scenario = tmp_path / "revoked.toml"
    scenario.write_text(SCENARIO.format(url=desks.resource.url,
                                        auth=CLIENT_CREDENTIALS + f"refresh = {str(refresh).lower()}\n"))
    with ThreadPoolExecutor(1) as pool:
        revoking = pool.submit(_revoke_once_rounds_are_flowing, desks, tmp_path / "results")
        finished = run_harness(scenario, tmp_path / "results")
        assert revoking.result(), finished.output
    auth = finished.summary["auth"]
    assert auth["unauthorized"] > 0 and auth["forbidden"] == 0, auth
    assert {(row["flow"], row["tool"], row["outcome"]) for row in auth["by_round"]} == {
        ("confirm_refund", "confirm_refund", "unauthorized")}
    retries = [record for record in finished.journal() if record["type"] == "round" and record.get("auth_retry")]
    outcomes = finished.summary["flows"]["by_outcome"]
    if refresh:  # every refused round went again with a new token, and its flow completed
        assert auth["retried"] == auth["unauthorized"] == len(retries), auth
        assert set(outcomes) == {"completed"}, outcomes
        assert finished.folder is not None
        renewed = re.search(r'^mrtr_token_refreshes_total\{outcome="ok"\} (\S+)$',
                            (finished.folder / "metrics.prom").read_text(), re.MULTILINE)
        assert renewed and float(renewed[1]) > 0, "the renewals are counted"
    else:
        assert auth["retried"] == 0 and not retries
        assert outcomes.get("error", 0) == auth["unauthorized"] > 0, outcomes


JWT_SCRIPT = ("import jwt, sys, time; print(jwt.encode({'sub': 'lead-' + sys.argv[1], 'exp': int(time.time()) + 2}, "
              "'not-a-real-key-but-long-enough-for-hs256', algorithm='HS256'))")
"""A token command that prints a JWT good for two seconds."""


def test_a_command_token_is_run_again_before_its_jwt_expires() -> None:
    """`kind = "command"`: the JWT's `exp` says when; the background refresh runs the command again before it."""
    import sys

    auth = TargetAuth(kind="command", command=[sys.executable, "-c", JWT_SCRIPT, "{lead}"], principals=2,
                      refresh_margin=30)
    tokens = lead_tokens(auth, "http://127.0.0.1:9/mcp")
    try:
        first = [tokens.authorization(lead) for lead in range(2)]
        deadline = time.monotonic() + 10
        while tokens.refreshed < 2 and time.monotonic() < deadline:
            gevent.sleep(0.05)  # the refresher is a greenlet of this (unpatched) test process
        assert tokens.refreshed >= 2 and tokens.failed == 0, "both tokens run again at half their life"
        assert [tokens.authorization(lead) for lead in range(2)] != first
    finally:
        tokens.stop()


def test_a_token_file_gives_lead_i_line_i_mod_n(tmp_path: Path) -> None:
    path = tmp_path / "leads.tokens"
    path.write_text("# tokens of the test tenant\nalpha-token\n\nbeta-token\n")
    tokens = lead_tokens(TargetAuth(kind="tokens", file=str(path), principals=3), "http://127.0.0.1:9/mcp")
    try:
        assert [tokens.authorization(lead) for lead in range(4)] == [
            f"Authorization: Bearer {value}\r\n" for value in ("alpha-token", "beta-token", "alpha-token",
                                                                "alpha-token")]
    finally:
        tokens.stop()


class _StartingBalancer(BaseHTTPRequestHandler):
    """A balancer whose replicas are still starting (503 to the first probes), then a resource server's answers;
    `lie` makes one of its metadata answers point elsewhere; `token_posts` counts requests to its token endpoint."""

    not_yet = 0
    lie: dict[str, str] = {}
    token_posts = 0

    def log_message(self, *args: object) -> None:
        pass

    def _json(self, status: int, body: dict, headers: dict[str, str] | None = None) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        base = f"http://127.0.0.1:{self.server.server_port}"
        if self.path == "/token":
            type(self).token_posts += 1
            self._json(200, {"access_token": "never-to-be-used", "token_type": "Bearer", "expires_in": 3600})
            return
        if type(self).not_yet > 0:
            type(self).not_yet -= 1
            self._json(503, {"error": "no server is available"})
            return
        self._json(401, {"error": "invalid_token"}, {
            "WWW-Authenticate": f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"'})

    def do_GET(self) -> None:
        base = f"http://127.0.0.1:{self.server.server_port}"
        lie = type(self).lie
        if self.path.startswith("/.well-known/oauth-protected-resource"):
            self._json(200, {"resource": lie.get("resource", f"{base}/mcp"), "authorization_servers": [base]})
        elif self.path == "/.well-known/oauth-authorization-server":
            self._json(200, {"issuer": lie.get("issuer", base), "authorization_endpoint": f"{base}/authorize",
                             "token_endpoint": lie.get("token_endpoint", f"{base}/token"),
                             "response_types_supported": ["code"]})
        else:
            self._json(404, {})


@pytest.fixture
def balancer(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The fake balancer's MCP URL, on 127.0.0.1, with its class state reset for the test."""
    monkeypatch.setattr(_StartingBalancer, "not_yet", 0)
    monkeypatch.setattr(_StartingBalancer, "lie", {})
    monkeypatch.setattr(_StartingBalancer, "token_posts", 0)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StartingBalancer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/mcp"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("not_yet", [2, 1000])
def test_discovery_waits_for_a_balancer_whose_replicas_are_starting_then_gives_up_naming_its_answer(
        not_yet: int, balancer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compose stack brought up with the run answers 503 until a replica is healthy: asked again, not refused."""
    monkeypatch.setattr(_StartingBalancer, "not_yet", not_yet)
    monkeypatch.setattr(discovery, "DISCOVERY_PATIENCE", 2.0)
    if not_yet == 2:
        assert discovery.discover(balancer).token_endpoint == balancer.replace("/mcp", "/token")
    else:
        with pytest.raises(TokenEndpointError, match="answered HTTP 503"):
            discovery.discover(balancer)


LIES = {
    # name: (what the metadata says instead of the truth, what the one line must name)
    "a-resource-document-for-another-server": ({"resource": "https://payroll.example.com/mcp"},
                                               "is for resource https://payroll.example.com/mcp, not "),
    "a-foreign-issuer": ({"issuer": "https://login.example.net"}, "names issuer https://login.example.net, not "),
    "a-plain-http-token-endpoint-on-another-host": ({"token_endpoint": "http://tokens.example.org/token"},
                                                    "token endpoint http://tokens.example.org/token of issuer "),
}


@pytest.mark.parametrize("name", list(LIES))
def test_discovery_that_meets_a_lie_stops_naming_it_and_sends_no_secret(
        name: str, balancer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """RFC 9728 3.3 and RFC 8414 3.3; the secret goes in the clear only on this machine (the other host named
    here is never contacted: the check refuses first)."""
    lie, text = LIES[name]
    monkeypatch.setattr(_StartingBalancer, "lie", lie)
    monkeypatch.setenv(SECRET_ENV, "a-secret-that-must-stay-here")
    auth = TargetAuth(kind="client-credentials", client_id=CLIENT_ID, client_secret_env=SECRET_ENV, principals=2)
    with pytest.raises(TokenEndpointError, match="refused, no secret sent") as refused:
        lead_tokens(auth, balancer)
    assert text in str(refused.value) and "a-secret-that-must-stay-here" not in str(refused.value)
    assert isinstance(refused.value, TargetDown), "exit 3: the target's answers, not the scenario"
    assert _StartingBalancer.token_posts == 0


def test_discovery_of_the_truth_fetches_tokens_and_a_foreign_issuer_stops_a_run_with_exit_3(
        balancer: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same server telling the truth gives tokens (so the lies above are what was refused); lying, a real run
    exits 3 in one line naming the issuer, before its load."""
    monkeypatch.setenv(SECRET_ENV, "a-secret-that-must-stay-here")
    auth = TargetAuth(kind="client-credentials", client_id=CLIENT_ID, client_secret_env=SECRET_ENV, principals=2)
    tokens = lead_tokens(auth, balancer)
    tokens.stop()
    assert _StartingBalancer.token_posts == 2
    monkeypatch.setattr(_StartingBalancer, "lie", LIES["a-foreign-issuer"][0])
    scenario = tmp_path / "lying.toml"
    scenario.write_text(SCENARIO.format(url=balancer, auth=CLIENT_CREDENTIALS))
    finished = run_harness(scenario, tmp_path / "results")
    assert finished.code == 3, finished.output
    assert "names issuer https://login.example.net," in finished.output and "Traceback" not in finished.output
    assert _StartingBalancer.token_posts == 2 and "a-secret-that-must-stay-here" not in finished.output


def test_a_pinned_issuer_sends_the_secret_only_to_that_authorization_server(
        balancer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """RFC 9728 lets a target name any authorization server, and a hostile one names its own, with metadata that
    holds together (here: the balancer names itself). `[target.auth] issuer` pins the one the user trusts: the same
    answers are refused before any token request, naming what the target named; pinned to it, tokens come."""
    monkeypatch.setenv(SECRET_ENV, "a-secret-that-must-stay-here")
    own = balancer.removesuffix("/mcp")
    pinned = TargetAuth(kind="client-credentials", client_id=CLIENT_ID, client_secret_env=SECRET_ENV, principals=2,
                        issuer="https://login.example.com")
    with pytest.raises(TokenEndpointError, match="refused, no secret sent") as refused:
        lead_tokens(pinned, balancer)
    assert str(refused.value) == (
        f"discovery: the protected-resource metadata of {balancer} names authorization server {own}, not "
        "https://login.example.com, the issuer [target.auth] issuer pins: refused, no secret sent")
    assert isinstance(refused.value, TargetDown) and _StartingBalancer.token_posts == 0

    tokens = lead_tokens(pinned.model_copy(update={"issuer": own}), balancer)
    tokens.stop()
    assert _StartingBalancer.token_posts == 2


GRANT = {"kind": "client-credentials", "client_id": CLIENT_ID, "client_secret_env": SECRET_ENV}


@pytest.mark.parametrize("auth", [GRANT | {"token_url": "https://login.example.com/token"},
                                  {"kind": "tokens", "file": "leads.tokens"}, GRANT | {"issuer": "login.example.com"}])
def test_an_issuer_pin_that_pins_nothing_is_refused_when_the_scenario_is_read(auth: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="issuer"):
        TargetAuth(**({"issuer": "https://login.example.com"} | auth))


def test_a_plain_http_token_url_off_this_machine_is_refused_when_the_scenario_is_read() -> None:
    with pytest.raises(ValueError, match="plain http off this machine"):
        TargetAuth(kind="client-credentials", client_id=CLIENT_ID, client_secret_env=SECRET_ENV,
                   token_url="http://tokens.example.org/token")
    for allowed in ({"token_url": "https://tokens.example.org/token"}, {"token_url": "http://127.0.0.1:9/token"},
                    {"token_url": "http://tokens.example.org/token", "allow_http": True}):
        TargetAuth(kind="client-credentials", client_id=CLIENT_ID, client_secret_env=SECRET_ENV, **allowed)


class _SlowSecondToken:
    """A token source whose first token lives one second and whose next request hangs (a slow token endpoint)."""

    refreshable = True

    def __init__(self) -> None:
        self.requests = 0

    def describe(self) -> str:
        return "a slow token endpoint"

    def fetch(self, principal: int) -> Token:
        self.requests += 1
        if self.requests > 1:
            gevent.sleep(30)
        now = time.time()
        return Token(f"token-{self.requests}", now, now + 1.0)

    def close(self) -> None:
        pass


def test_a_refresh_cut_short_by_the_end_of_the_run_is_counted_neither_failed_nor_ok() -> None:
    """mrtr_token_refreshes_total{outcome="failed"} means the authorization server failed, not that the run
    ended while a refresh was under way."""
    heard: list[bool] = []
    source = _SlowSecondToken()
    tokens = LeadTokens(source, 1, on_refresh=heard.append)
    tokens.start()
    deadline = time.monotonic() + 5
    while source.requests < 2 and time.monotonic() < deadline:
        gevent.sleep(0.05)  # the refresh at half the token's life is under way, and hangs
    assert source.requests == 2
    tokens.stop()
    assert heard == [] and tokens.failed == 0


class _ExpiredOnArrival:
    """A token source whose every token has run out a second before it is handed over (a clock far ahead)."""

    refreshable = True

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.requests = 0

    def describe(self) -> str:
        return "a source of expired tokens"

    def fetch(self, principal: int) -> Token:
        self.requests += 1
        return Token(f"token-{self.requests}", self.clock[0], self.clock[0] - 1.0)

    def close(self) -> None:
        pass


def _until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        gevent.sleep(0.01)
    return condition()


def test_a_token_expired_on_arrival_is_asked_for_again_no_sooner_than_the_floor_warned_once_and_counted(
        caplog: pytest.LogCaptureFixture) -> None:
    """On a clock that moves only when the test moves it, each principal is asked once per floor: never more,
    however long the refresher runs meanwhile (without the floor it asked 1,512 times a second)."""
    clock = [time.time()]
    source = _ExpiredOnArrival(clock)
    metrics = RunMetrics()
    tokens = LeadTokens(source, 2, clock=lambda: clock[0], floor=0.2, on_refresh=metrics.token_refreshed)
    caplog.set_level(logging.WARNING, logger="harness.auth.keeper")
    tokens.start()
    try:
        for steps in range(4):
            expected = 2 * (steps + 1)
            assert _until(lambda expected=expected: source.requests == expected), source.requests
            gevent.sleep(0.5)  # the refresher runs on, and the clock has not moved past the floor
            assert source.requests == expected
            if steps < 3:
                clock[0] += 0.2
    finally:
        tokens.stop()
    warnings = [record for record in caplog.records if "arrived expired" in record.getMessage()]
    assert len(warnings) == 1, [record.getMessage() for record in caplog.records]
    counted = {outcome: metrics.registry.get_sample_value("mrtr_token_refreshes_total", {"outcome": outcome})
               for outcome in ("ok", "expired_on_arrival", "failed")}
    assert counted == {"ok": 0.0, "expired_on_arrival": 6.0, "failed": 0.0}


def test_a_renewal_after_a_401_waits_out_the_floor_too() -> None:
    """A round refused for a token that came expired asks `renew`: it gets the next token, not a request per round."""
    clock = [time.time()]
    source = _ExpiredOnArrival(clock)
    tokens = LeadTokens(source, 1, clock=lambda: clock[0], floor=0.2, refresh=True)
    tokens.start()
    try:
        renewals = [gevent.spawn(tokens.renew, 0, clock[0]) for _ in range(20)]
        gevent.sleep(0.5)
        assert source.requests == 1 and not any(renewal.ready() for renewal in renewals)
        clock[0] += 0.2
        assert _until(lambda: all(renewal.ready() for renewal in renewals))
        assert [renewal.value for renewal in renewals] == [True] * 20 and source.requests == 2
    finally:
        tokens.stop()
