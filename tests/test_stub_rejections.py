"""The benchmark stub's refusals: the SDK's answer to the client, and a log line the harness's collector reads."""

from __future__ import annotations

import io

import orjson

from benchmarks.stub_server import PROTOCOL_VERSION, Rejections, rejection_line, respond
from harness.logs.parse import LineParser, Rejection

HEADERS = {b"mcp-protocol-version": PROTOCOL_VERSION.encode(), b"mcp-method": b"tools/call", b"mcp-name": b"confirm"}
META = {"io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}}


def call(state: str | None = None) -> bytes:
    params: dict[str, object] = {"name": "confirm", "arguments": {"item": "X-1"}, "_meta": META}
    if state is not None:
        params |= {"requestState": state, "inputResponses": {"confirm": {"action": "accept",
                                                                          "content": {"release": True}}}}
    return orjson.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params})


def test_a_refusal_line_is_read_by_the_collector_as_the_sdk_rejection_it_stands_for() -> None:
    seen: list[Rejection] = []
    LineParser(seen.append).feed(rejection_line("r2", 1796405809.8204618))
    assert len(seen) == 1
    assert (seen[0].replica, seen[0].reason, seen[0].method) == ("r2", "expired", "tools/call")
    assert seen[0].logged_at is not None and abs(seen[0].logged_at - 1796405809.820) < 0.002


def test_refusals_are_a_seeded_share_and_each_is_logged_once() -> None:
    log = io.StringIO()
    first, again = Rejections(0.01, 3, "r1", log), Rejections(0.01, 3, "r1", io.StringIO())
    draws = [first.refuse() for _ in range(50_000)]
    assert draws == [again.refuse() for _ in range(50_000)]
    assert 400 < sum(draws) < 600
    assert log.getvalue().count("requestState rejected on tools/call: expired") == sum(draws)
    assert not any(Rejections(0.0, 3, "r1").refuse() for _ in range(1000))


def test_a_refused_continuation_is_answered_as_the_sdk_answers_it_and_a_first_round_never_is() -> None:
    always = Rejections(1.0, 0, "r1")
    status, first = respond(b"POST /mcp HTTP/1.1", HEADERS, call(), always)
    assert status == 200 and first["result"]["resultType"] == "input_required"
    status, refused = respond(b"POST /mcp HTTP/1.1", HEADERS, call(first["result"]["requestState"]), always)
    assert (status, refused["error"]) == (400, {"code": -32602, "message": "Invalid or expired requestState"})
    status, done = respond(b"POST /mcp HTTP/1.1", HEADERS, call(first["result"]["requestState"]))
    assert status == 200 and done["result"]["structuredContent"] == {"status": "released"}
