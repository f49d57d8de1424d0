"""Every reason the SDK logs for a refused requestState, reproduced against real replicas.

For each one the client sees the same -32602, the replica's stderr carries one line
naming the reason, and the replica's own /metrics counts it: the three places an
on-call engineer would look.
"""

from __future__ import annotations

import re

import httpx
import pytest

from harness.mrtr.reasons import REASONS, parse_rejection
from harness.shop.orders import build_orders
from harness.targets.local_deployment import ReplicaOptions

HELD_ORDERS = iter(build_orders().order_ids(needs_confirmation=True))
CAPABILITIES = {"elicitation": {"form": {}}}
YES = {"confirm": {"action": "accept", "content": {"release": True}}}

# The replicas of this module, by index: what each one is for.
NORMAL, SECOND, RENAMED, AHEAD, BEHIND, EPHEMERAL, BOUND, BOUND_TOO = range(8)


@pytest.fixture(scope="module")
def shop(deploy):
    return deploy([
        ReplicaOptions(),
        ReplicaOptions(),
        ReplicaOptions(name="shop-eu"),  # same key, another server name: another audience
        ReplicaOptions(clock_offset=120.0),  # mints states "from the future" for the others
        ReplicaOptions(clock_offset=-700.0),  # mints states already past a 10m TTL for the others
        ReplicaOptions(keyring="ephemeral"),
        ReplicaOptions(principal_header="X-Lead"),
        ReplicaOptions(principal_header="X-Lead"),
    ])


def post(url: str, tool: str, arguments: dict, *, id: int, responses=None, state=None,
         headers: dict | None = None) -> httpx.Response:
    """One 2026-07-28 round, built by hand so a test can send what no SDK client would."""
    params = {"name": tool, "arguments": arguments, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": CAPABILITIES,
        "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "0"}}}
    if responses is not None:
        params["inputResponses"] = responses
    if state is not None:
        params["requestState"] = state
    return httpx.post(url, json={"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params},
                      headers={"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
                               "Mcp-Method": "tools/call", "Mcp-Name": tool, **(headers or {})}, timeout=10)


def first_round(shop, replica: int, headers: dict | None = None) -> tuple[dict, str]:
    """Quote a held refund and ask to issue it on `replica`: (the arguments, the sealed state)."""
    url = shop.replica_urls[replica]
    quote = post(url, "quote_refund", {"order_id": next(HELD_ORDERS)}, id=1).json()
    arguments = {"quote_id": quote["result"]["structuredContent"]["quote_id"]}
    asked = post(url, "issue_refund", arguments, id=2, headers=headers).json()["result"]
    assert asked["resultType"] == "input_required"
    return arguments, asked["requestState"]


def counts(shop, replica: int) -> dict[str, float]:
    text = httpx.get(shop.replicas[replica].base_url + "/metrics").text
    return {m[1]: float(m[2]) for m in re.finditer(r'mrtr_request_state_rejections_total\{reason="([^"]+)"\} (\S+)',
                                                      text)}


def logged(shop, replica: int) -> list[str]:
    return [parse_rejection(line)[1] for line in shop.replicas[replica].log_path.read_text().splitlines()
            if parse_rejection(line)]


def assert_rejected(shop, replica: int, reason: str, response: httpx.Response, before: dict[str, float],
                    logged_before: int) -> None:
    assert response.status_code == 400
    assert response.json()["error"] == {"code": -32602, "message": "Invalid or expired requestState",
                                        "data": {"reason": "invalid_request_state"}}
    assert logged(shop, replica)[logged_before:] == [reason]
    after = counts(shop, replica)
    assert after[reason] - before[reason] == 1
    assert sum(after.values()) - sum(before.values()) == 1


def retry_on(shop, replica: int, arguments: dict, state, reason: str, headers: dict | None = None,
             responses=YES) -> None:
    before, lines = counts(shop, replica), len(logged(shop, replica))
    response = post(shop.replica_urls[replica], "issue_refund", arguments, id=3, responses=responses, state=state,
                    headers=headers)
    assert_rejected(shop, replica, reason, response, before, lines)


def test_every_reason_is_exported_at_zero_before_any_rejection(shop):
    assert set(REASONS) <= set(counts(shop, SECOND))


def test_an_edited_token_is_refused_for_its_seal(shop):
    arguments, state = first_round(shop, NORMAL)
    edited = state[:40] + ("A" if state[40] != "A" else "B") + state[41:]
    retry_on(shop, SECOND, arguments, edited, "seal")


def test_changed_arguments_on_the_retry_are_refused_for_request_binding(shop):
    arguments, state = first_round(shop, NORMAL)
    other, _ = first_round(shop, NORMAL)
    retry_on(shop, SECOND, other, state, "request binding")


def test_a_state_from_a_replica_with_another_name_is_refused_for_audience(shop):
    arguments, state = first_round(shop, RENAMED)
    retry_on(shop, NORMAL, arguments, state, "audience")


def test_a_state_minted_by_a_clock_far_ahead_is_refused_as_minted_in_the_future(shop):
    arguments, state = first_round(shop, AHEAD)
    retry_on(shop, NORMAL, arguments, state, "minted in the future")


def test_a_state_older_than_the_ttl_is_refused_as_expired(shop):
    arguments, state = first_round(shop, BEHIND)
    retry_on(shop, NORMAL, arguments, state, "expired")


def test_a_state_from_another_ring_is_refused_for_unknown_key(shop):
    arguments, state = first_round(shop, EPHEMERAL)
    retry_on(shop, NORMAL, arguments, state, "unknown key")


def test_an_ephemeral_replica_restarted_between_rounds_cannot_open_its_own_state(shop):
    arguments, state = first_round(shop, EPHEMERAL)
    shop.restart_replica(EPHEMERAL)
    retry_on(shop, EPHEMERAL, arguments, state, "unknown key")


@pytest.mark.parametrize("state", ["not-a-token", "v1.***", "v1.AAAA"])
def test_a_token_that_is_not_one_is_refused_as_malformed(shop, state):
    arguments, _ = first_round(shop, NORMAL)
    retry_on(shop, SECOND, arguments, state, "malformed")


def test_a_state_that_is_not_a_string_is_refused(shop):
    arguments, _ = first_round(shop, NORMAL)
    retry_on(shop, SECOND, arguments, 12345, "non-string requestState")


def test_a_state_bound_to_one_lead_is_refused_for_another(shop):
    arguments, state = first_round(shop, BOUND, headers={"X-Lead": "alice"})
    retry_on(shop, BOUND_TOO, arguments, state, "principal", headers={"X-Lead": "bob"})


def test_a_bound_state_retried_without_the_lead_is_refused_for_principal_drift(shop):
    arguments, state = first_round(shop, BOUND, headers={"X-Lead": "alice"})
    retry_on(shop, BOUND_TOO, arguments, state, "principal drift")


def test_the_same_lead_passes_the_principal_check_on_another_replica(shop):
    arguments, state = first_round(shop, BOUND, headers={"X-Lead": "alice"})
    response = post(shop.replica_urls[BOUND_TOO], "issue_refund", arguments, id=3, responses=YES, state=state,
                    headers={"X-Lead": "alice"})
    assert response.json()["result"]["structuredContent"]["status"] == "requested"


def test_the_rejection_line_is_self_contained(shop):
    arguments, state = first_round(shop, NORMAL)
    retry_on(shop, SECOND, arguments, state[:-3] + "AAA", "seal")
    line = [line for line in shop.replicas[SECOND].log_path.read_text().splitlines() if "rejected" in line][-1]
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z WARNING replica=r2 mcp\.server\.request_state: "
                    r"requestState rejected on tools/call: seal$", line)
