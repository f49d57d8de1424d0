"""Bad input gets one clear error each, and the replica and the API keep serving."""

from __future__ import annotations

import httpx
import pytest

from tests.test_rejection_reasons import post

HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
           "Mcp-Method": "tools/call", "Mcp-Name": "quote_refund", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def shop(deploy):
    return deploy(replicas=1)


def still_serving(shop) -> bool:
    result = post(shop.replica_urls[0], "quote_refund", {"order_id": "O-1000"}, id=9).json()["result"]
    return result["structuredContent"]["order_id"] == "O-1000"


def test_malformed_json_is_a_parse_error(shop):
    response = httpx.post(shop.replica_urls[0], content=b'{"jsonrpc": "2.0", "id": 1, "method": ', headers=HEADERS)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32700
    assert still_serving(shop)


def test_an_unknown_tool_is_named_in_the_error(shop):
    response = post(shop.replica_urls[0], "refund_everything", {}, id=1)
    body = response.json()
    message = body["error"]["message"] if "error" in body else body["result"]["content"][0]["text"]
    assert "refund_everything" in message
    assert still_serving(shop)


def test_an_unknown_quote_is_a_tool_error_that_says_what_to_do(shop):
    result = post(shop.replica_urls[0], "issue_refund", {"quote_id": "Q-nope"}, id=1).json()["result"]
    assert result["isError"]
    assert "There is no quote Q-nope" in result["content"][0]["text"]
    assert still_serving(shop)


def test_an_unknown_order_is_a_tool_error(shop):
    result = post(shop.replica_urls[0], "quote_refund", {"order_id": "O-0"}, id=1).json()["result"]
    assert result["isError"] and "There is no order O-0" in result["content"][0]["text"]


def test_a_huge_body_is_refused_before_it_is_read_whole(shop):
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"quote_refund","arguments":{"order_id":"' \
           + b"x" * (5 * 1024 * 1024) + b'"}}}'
    response = httpx.post(shop.replica_urls[0], content=body, headers=HEADERS, timeout=30)
    assert response.status_code == 413
    assert still_serving(shop)


def test_a_request_without_the_protocol_header_is_taken_for_the_2025_path(shop):
    """A fact measured on mcp 2.3.0, pinned: no MCP-Protocol-Version header, no 2026-07-28 answer. The shop gives
    2025-era clients a session (so it knows what they declared), and a call outside one is refused."""
    headers = {k: v for k, v in HEADERS.items() if k != "MCP-Protocol-Version"}
    response = httpx.post(shop.replica_urls[0], headers=headers, json={
        "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "quote_refund",
                                                                       "arguments": {"order_id": "O-1000"}}})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "Bad Request: Missing session ID"
    assert still_serving(shop)


def test_the_api_refuses_bad_json_and_unknown_refunds_clearly(shop):
    api = shop.api.base_url
    bad = httpx.post(f"{api}/refunds", content=b"{nope")
    assert bad.status_code == 400 and "not JSON" in bad.json()["error"]
    missing = httpx.post(f"{api}/refunds", json={"order_id": "O-1000"})
    assert missing.status_code == 400 and "quote_id" in missing.json()["error"]
    assert httpx.post(f"{api}/refunds/R-99999/confirm").status_code == 404
    huge = httpx.post(f"{api}/returns", content=b"{" + b" " * 100_000 + b"}")
    assert huge.status_code == 400
    assert httpx.get(f"{api}/healthz").json()["status"] == "ok"
