"""The MRTR client against real garden servers (subprocesses), and against the SDK's own `Client`.

Every classification is produced by a real server response, not a mock: the point of
the client is to read what mcp 2.3.0 really sends. The few pure tests (SSE framing,
routing, backoff schedule) pin what a live server cannot show on demand.
"""

from __future__ import annotations

import json
import random
import secrets
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import gevent
import pytest
from mcp import Client
from mcp.client import _input_required as sdk_driver
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PROTOCOL_VERSION_META_KEY,
    ElicitResult,
)

from harness.config.load import Routing
from harness.mrtr.client import STATE_ONLY_BACKOFF_CAP, STATE_ONLY_BACKOFF_INITIAL, LeadAnswer, MrtrClient, RoundRecord
from harness.mrtr.outcome import Outcome, OutcomeError
from harness.mrtr.routing import Router
from harness.mrtr.transport import HttpAnswer, Transport
from harness.mrtr.wire import PROTOCOL_VERSION, CallFrame, SseScanner, decode_reply

try:
    from servers import Running, free_port, start_server
except ImportError:  # pragma: no cover - run from the repository root as a package
    from tests.servers import Running, free_port, start_server

GARDEN = "tests.servers.garden"
CAPABILITIES = {"elicitation": {"form": {}, "url": {}}}
ANSWERS: dict[str, dict[str, Any]] = {
    "soil": {"action": "accept", "content": {"soil": "loam"}},
    "sowing": {"action": "accept", "content": {"date": "2026-04-01", "rows": 4, "note": "beans"}},
    "again": {"action": "accept", "content": {}},
}


@dataclass
class Gardens:
    recorded: Running
    """JSON mode, recording every request to `record`."""
    record: Path
    replicas: list[Running]
    """Three JSON-mode replicas sharing one key (the first is `recorded`)."""
    sse: Running
    """SSE mode (`json_response=False`)."""

    @property
    def urls(self) -> list[str]:
        return [replica.url for replica in self.replicas]


@pytest.fixture(scope="module")
def gardens(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gardens]:
    record = tmp_path_factory.mktemp("garden") / "requests.jsonl"
    env = {"GARDEN_REQUEST_STATE_KEY": secrets.token_hex(16)}
    recorded = start_server(GARDEN, env={**env, "GARDEN_RECORD": str(record)}, wait=False)
    others = [start_server(GARDEN, env=env, wait=False) for _ in range(2)]
    sse = start_server(GARDEN, "--sse", env=env, wait=False)
    started = [recorded, *others, sse]
    try:
        for server in started:
            server.wait_ready()
        yield Gardens(recorded, record, [recorded, *others], sse)
    finally:
        for server in started:
            server.stop()


def answer(record: RoundRecord) -> dict[str, Any]:
    """A person who answers every garden question at once."""
    assert record.input_requests
    return {key: ANSWERS[key] for key in record.input_requests}


def client_for(urls: list[str] | str, routing: Routing = Routing.ROUND_ROBIN, **kwargs: Any) -> MrtrClient:
    kwargs.setdefault("capabilities", CAPABILITIES)
    return MrtrClient(Router(urls, routing), **kwargs)


# --- the round loop against a real server ----------------------------------------------


def test_plan_bed_completes_in_three_rounds_with_the_answers_given(gardens: Gardens) -> None:
    asked: list[list[str]] = []

    def respond(record: RoundRecord) -> dict[str, Any]:
        asked.append(list(record.input_requests or {}))
        return answer(record)

    result = client_for(gardens.recorded.url).call_tool("plan_bed", {"bed_id": "B-3"}, respond)

    assert result.outcome is Outcome.COMPLETE
    assert result.round_count == 3
    assert asked == [["soil"], ["sowing"]]
    assert result.result is not None
    assert result.result["structuredContent"] == {"result": "Bed B-3: loam, sow 2026-04-01 in 4 rows"}
    first, second, third = result.rounds
    assert [r.outcome for r in result.rounds] == [Outcome.INPUT_REQUIRED, Outcome.INPUT_REQUIRED, Outcome.COMPLETE]
    assert (first.sent_responses, first.sent_state) == (False, False)
    assert (second.sent_responses, second.sent_state) == (True, True)
    assert first.request_state and first.request_state.startswith("v1.")
    assert len({r.request_id for r in result.rounds}) == 3
    assert all(r.latency >= r.server_time >= 0 for r in result.rounds)


def test_a_round_s_response_bytes_are_the_length_of_the_body_the_server_sent_back(gardens: Gardens) -> None:
    """Locust's "Average size (bytes)" per round: the same request, sent by hand, gets a body of that length."""
    import urllib.request

    client = client_for(gardens.recorded.url)
    frozen = client.call_tool("frozen", {"bed_id": "B-1"}, answer).last
    assert frozen is not None and frozen.outcome is Outcome.JSONRPC_ERROR
    by_hand = urllib.request.Request(gardens.recorded.url, data=_body(client, "frozen", frozen.request_id),
                                     headers=_headers(client, "frozen"), method="POST")
    with urllib.request.urlopen(by_hand, timeout=10) as reply:
        sent_back = reply.read()
    assert b"The ground is frozen" in sent_back
    assert frozen.response_bytes == len(sent_back)
    first = client.call_tool("plan_bed", {"bed_id": "B-3"}, answer).rounds[0]
    assert first.request_state and first.response_bytes > len(first.request_state)  # the state is in the body


def test_intermediate_rounds_are_reported_before_the_person_is_asked(gardens: Gardens) -> None:
    seen: list[int] = []

    def respond(record: RoundRecord) -> dict[str, Any]:
        assert seen[-1] == record.round
        return answer(record)

    result = client_for(gardens.recorded.url).call_tool(
        "plan_bed", {"bed_id": "B-4"}, respond, on_round=lambda r: seen.append(r.round)
    )
    assert seen == [1, 2, 3] and result.outcome is Outcome.COMPLETE


def test_latency_counts_from_the_intended_send_time(gardens: Gardens) -> None:
    client = client_for(gardens.recorded.url)
    late_by = 0.5
    result = client.call_tool("water", {"bed_id": "B-1"}, answer, intended_at=time.time() - late_by)
    (only,) = result.rounds
    assert only.latency - only.server_time >= late_by  # the time before the send counts, the server's too


def test_a_round_sent_before_its_intended_time_counts_its_latency_from_the_send(gardens: Gardens) -> None:
    """A timer's slack may start a round early (on a wake-up the load process had anyway): its latency must
    never come out shorter than the time the server took."""
    client = client_for(gardens.recorded.url)
    result = client.call_tool("water", {"bed_id": "B-1"}, answer, intended_at=time.time() + 5.0)
    (only,) = result.rounds
    assert only.intended_at == only.sent_at
    assert only.latency == only.server_time > 0


def test_a_call_in_steps_yields_the_think_time_and_holds_no_response_while_it_waits(gardens: Gardens) -> None:
    """The load plan drives calls step by step: each wait is yielded, never slept, and a resume later than
    the wait was due counts in the next round's latency (a late load process is latency a user felt)."""
    seen: list[RoundRecord] = []
    steps = client_for(gardens.recorded.url).call_steps(
        "plan_bed", {"bed_id": "B-7"}, lambda record: LeadAnswer(answer(record), 0.2),
        on_round=lambda tool, record: seen.append(record))
    assert next(steps) == 0.2
    assert [record.round for record in seen] == [1]
    waiting = steps.gi_frame.f_locals  # what a parked call keeps: the encoded answers and the state, no record
    assert "record" not in waiting and isinstance(waiting["responses"], bytes) and isinstance(waiting["state"], str)
    late_by = 0.3
    time.sleep(0.2 + late_by)  # the driver comes back late
    assert next(steps) == 0.2
    second = seen[1]
    assert second.latency - second.server_time >= late_by
    with pytest.raises(StopIteration) as done:
        next(steps)
    result = done.value.value
    assert (result.outcome, result.round_count, result.think_time) == (Outcome.COMPLETE, 3, 0.4)
    assert result.rounds == [] and result.last is seen[-1]
    assert steps.gi_frame is None  # ended: nothing of the call is held


def test_no_connection_is_held_while_the_person_thinks(gardens: Gardens) -> None:
    transport = Transport()
    in_use: list[int] = []

    def respond(record: RoundRecord) -> dict[str, Any]:
        in_use.append(transport.connections_in_use())
        return answer(record)

    result = client_for(gardens.recorded.url, transport=transport).call_tool("plan_bed", {"bed_id": "B-5"}, respond)
    assert result.outcome is Outcome.COMPLETE
    assert in_use == [0, 0]


def test_abandoned_when_the_person_does_not_answer(gardens: Gardens) -> None:
    result = client_for(gardens.recorded.url).call_tool("plan_bed", {"bed_id": "B-6"}, lambda record: None)
    assert result.outcome is Outcome.ABANDONED
    assert result.round_count == 1


def test_tool_error(gardens: Gardens) -> None:
    result = client_for(gardens.recorded.url).call_tool("flaky", {"bed_id": "B-1"}, answer)
    assert result.outcome is Outcome.TOOL_ERROR
    assert result.result is not None and result.result["isError"] is True


def test_unknown_tool_is_a_tool_error_on_mcpserver(gardens: Gardens) -> None:
    """MCPServer answers an unknown tool with `isError`, not a JSON-RPC error."""
    result = client_for(gardens.recorded.url).call_tool("no_such_tool", {}, answer)
    assert result.outcome is Outcome.TOOL_ERROR


def test_jsonrpc_error_keeps_its_code_and_comes_with_http_200(gardens: Gardens) -> None:
    result = client_for(gardens.recorded.url).call_tool("frozen", {"bed_id": "B-1"}, answer)
    assert result.outcome is Outcome.JSONRPC_ERROR
    assert result.last is not None
    assert (result.last.error_code, result.last.http_status) == (INTERNAL_ERROR, 200)


def test_edited_request_state_is_invalid_state_with_http_400(gardens: Gardens) -> None:
    client = client_for(gardens.recorded.url)
    first = client.send_round("plan_bed", {"bed_id": "B-7"})
    assert first.request_state is not None
    state = first.request_state
    edited = state[:20] + ("A" if state[20] != "A" else "B") + state[21:]
    retry = client.send_round(
        "plan_bed", {"bed_id": "B-7"}, input_responses=answer(first), request_state=edited, round_number=2
    )
    assert retry.outcome is Outcome.INVALID_STATE
    assert (retry.error_code, retry.http_status) == (INVALID_PARAMS, 400)
    assert retry.error_message == "Invalid or expired requestState"


def test_changed_arguments_on_a_retry_are_invalid_state(gardens: Gardens) -> None:
    client = client_for(gardens.recorded.url)
    first = client.send_round("plan_bed", {"bed_id": "B-8"})
    retry = client.send_round(
        "plan_bed", {"bed_id": "B-9"}, input_responses=answer(first), request_state=first.request_state
    )
    assert retry.outcome is Outcome.INVALID_STATE


def test_a_replayed_retry_is_accepted_again(gardens: Gardens) -> None:
    """The SDK's seal does not make a state single-use; the harness must be able to show it."""
    client = client_for(gardens.urls)
    first = client.send_round("loop_forever", {"bed_id": "B-10"}, replica=gardens.urls[0])
    replays = [
        client.send_round(
            "loop_forever", {"bed_id": "B-10"}, input_responses=answer(first), request_state=first.request_state,
            replica=url,
        )
        for url in gardens.urls
    ]
    assert [r.outcome for r in replays] == [Outcome.INPUT_REQUIRED] * 3


def test_missing_capability_comes_from_the_sdk_resolver(gardens: Gardens) -> None:
    client = client_for(gardens.recorded.url, capabilities={})
    result = client.call_tool("name_bed", {"bed_id": "B-1"}, answer)
    assert result.outcome is Outcome.MISSING_CAPABILITY
    assert result.last is not None
    assert (result.last.error_code, result.last.http_status) == (MISSING_REQUIRED_CLIENT_CAPABILITY, 400)


def test_wrong_mcp_name_header_is_header_mismatch(gardens: Gardens) -> None:
    client = client_for(gardens.recorded.url)
    record = client.send_round("water", {"bed_id": "B-1"}, headers={"mcp-name": "plan_bed"})
    assert record.outcome is Outcome.HEADER_MISMATCH
    assert (record.error_code, record.http_status) == (HEADER_MISMATCH, 400)


def test_timeout_when_the_server_is_slower_than_the_read_timeout(gardens: Gardens) -> None:
    result = client_for(gardens.recorded.url, timeout=0.3).call_tool("slow", {"seconds": 1.5}, answer)
    assert result.outcome is Outcome.TIMEOUT
    assert result.last is not None and result.last.http_status is None


def test_connection_error_when_nothing_listens() -> None:
    result = client_for(f"http://127.0.0.1:{free_port()}/mcp").call_tool("water", {"bed_id": "B-1"}, answer)
    assert result.outcome is Outcome.CONNECTION_ERROR


def test_connection_error_when_the_server_stops_between_rounds() -> None:
    server = start_server(GARDEN, env={"GARDEN_REQUEST_STATE_KEY": secrets.token_hex(16)})
    try:
        def respond(record: RoundRecord) -> dict[str, Any]:
            server.stop()
            return answer(record)

        result = client_for(server.url).call_tool("plan_bed", {"bed_id": "B-1"}, respond)
    finally:
        server.stop()
    assert [r.outcome for r in result.rounds] == [Outcome.INPUT_REQUIRED, Outcome.CONNECTION_ERROR]
    assert result.outcome is Outcome.CONNECTION_ERROR


def test_a_round_nobody_could_connect_to_goes_to_another_replica(gardens: Gardens) -> None:
    down = f"http://127.0.0.1:{free_port()}/mcp"
    result = client_for([down, *gardens.urls], Routing.OTHER_REPLICA).call_tool("plan_bed", {"bed_id": "B-9"}, answer)
    assert result.outcome is Outcome.COMPLETE
    assert down not in {record.replica for record in result.rounds}


def test_a_round_sent_on_to_another_replica_names_the_one_it_was_routed_to(gardens: Gardens) -> None:
    down = f"http://127.0.0.1:{free_port()}/mcp"
    result = client_for([down, *gardens.urls]).call_tool("plan_bed", {"bed_id": "B-9"}, answer)
    assert result.outcome is Outcome.COMPLETE
    first, *later = result.rounds  # round-robin: round 1 was routed to the replica that is down
    assert (first.redispatched_from, first.replica) == (down, gardens.urls[0])
    assert all(record.redispatched_from is None for record in later)


def test_without_redispatch_a_replica_that_is_down_is_a_connection_error(gardens: Gardens) -> None:
    down = f"http://127.0.0.1:{free_port()}/mcp"
    client = client_for([down, *gardens.urls], redispatch=False)
    result = client.call_tool("water", {"bed_id": "B-9"}, answer)
    assert result.outcome is Outcome.CONNECTION_ERROR and result.last.replica == down


def test_rounds_exceeded_after_max_rounds_retries(gardens: Gardens) -> None:
    asked: list[int] = []

    def respond(record: RoundRecord) -> dict[str, Any]:
        asked.append(record.round)
        return answer(record)

    result = client_for(gardens.recorded.url).call_tool("loop_forever", {"bed_id": "B-1"}, respond)
    assert result.outcome is Outcome.ROUNDS_EXCEEDED
    assert result.round_count == 11  # like the SDK: the cap counts retries, after the first call
    assert asked == list(range(1, 11))


def test_state_only_answer_is_retried_after_a_backoff_without_answers(gardens: Gardens) -> None:
    asked: list[RoundRecord] = []
    result = client_for(gardens.recorded.url).call_tool("shed", {"bed_id": "B-1"}, asked.append)
    assert result.outcome is Outcome.COMPLETE
    assert asked == []  # nobody is asked on a state-only round
    shed, retry = result.rounds
    assert shed.input_requests is None and shed.request_state is not None
    assert (retry.sent_responses, retry.sent_state) == (False, True)
    assert retry.sent_at - shed.received_at >= STATE_ONLY_BACKOFF_INITIAL
    assert result.backoff_time >= STATE_ONLY_BACKOFF_INITIAL


# --- SSE mode ----------------------------------------------------------------------------


def test_sse_mode_server_answers_are_parsed(gardens: Gardens) -> None:
    transport = Transport()
    client = client_for(gardens.sse.url, transport=transport)
    chatty = client.call_tool("chatty", {"bed_id": "B-1"}, answer)
    assert chatty.outcome is Outcome.COMPLETE
    assert chatty.result is not None
    assert chatty.result["structuredContent"] == {"result": "Bed B-1 inspected"}
    planned = client.call_tool("plan_bed", {"bed_id": "B-2"}, answer)  # fast handlers: plain JSON in SSE mode
    assert planned.outcome is Outcome.COMPLETE and planned.round_count == 3
    assert transport.connections_in_use() == 0


def test_chatty_really_commits_sse_on_an_sse_mode_server(gardens: Gardens) -> None:
    """Guards the test above: it only proves SSE parsing if the server really streamed."""
    client = client_for(gardens.sse.url)
    answer_ = client.transport.post(gardens.sse.url, _body(client, "chatty", 99), _headers(client, "chatty"))
    assert isinstance(answer_, HttpAnswer)
    assert answer_.content_type.startswith("text/event-stream")
    assert b"notifications/progress" in answer_.body
    reply = decode_reply(answer_.status, answer_.content_type, answer_.body, 99, _scanned(answer_.body, 99))
    assert reply.outcome is Outcome.COMPLETE


def test_sse_scanner_skips_pings_and_notifications_and_survives_split_chunks() -> None:
    stream = (
        b": ping\r\n\r\n"
        b'event: message\r\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\r\n\r\n'
        b'event: message\r\ndata: {"jsonrpc":"2.0","id":6,"result":{}}\r\n\r\n'
        b'event: message\r\ndata: {"jsonrpc":"2.0","id":7,"result":{"content":[]}}\r\n\r\n'
    )
    for size in (1, 2, 7, len(stream)):
        scanner = SseScanner(7)
        done = [scanner.feed(stream[i : i + size]) for i in range(0, len(stream), size)]
        assert done[-1] is True and scanner.message == {"jsonrpc": "2.0", "id": 7, "result": {"content": []}}


def test_a_stream_without_the_response_is_an_invalid_result() -> None:
    scanner = SseScanner(1)
    scanner.feed(b": ping\n\n")
    assert decode_reply(200, "text/event-stream", b"", 1, scanner).outcome is Outcome.INVALID_RESULT


@pytest.mark.parametrize(
    ("status", "body", "outcome"),
    [
        (200, {"jsonrpc": "2.0", "id": 1, "result": {"content": []}}, Outcome.COMPLETE),
        (200, {"jsonrpc": "2.0", "id": 1, "result": {"resultType": "complete", "isError": True}}, Outcome.TOOL_ERROR),
        (200, {"jsonrpc": "2.0", "id": 1, "result": {"resultType": "task"}}, Outcome.INVALID_RESULT),
        (200, {"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required"}}, Outcome.INVALID_RESULT),
        (200, {"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required", "requestState": "s"}},
         Outcome.INPUT_REQUIRED),
        (200, {"jsonrpc": "2.0", "id": 2, "result": {}}, Outcome.INVALID_RESULT),
        (502, None, Outcome.HTTP_ERROR),
        (400, {"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "x"}}, Outcome.INVALID_STATE),
        (200, {"jsonrpc": "2.0", "id": 1, "error": {"code": -32001, "message": "x"}}, Outcome.JSONRPC_ERROR),
    ],
)
def test_replies_are_classified_by_body_before_status(status: int, body: Any, outcome: Outcome) -> None:
    raw = json.dumps(body).encode() if body is not None else b"<html>bad gateway</html>"
    assert decode_reply(status, "application/json", raw, 1).outcome is outcome


def test_failure_texts_carry_no_ids() -> None:
    assert repr(OutcomeError(Outcome.INVALID_STATE, INVALID_PARAMS)) == "OutcomeError('invalid_state (-32602)')"
    assert str(OutcomeError(Outcome.HTTP_ERROR, http_status=502)) == "http_error (HTTP 502)"
    assert not Outcome.ABANDONED.is_failure and Outcome.ROUNDS_EXCEEDED.is_failure


# --- backoff schedule (a scripted transport: a live server cannot shed on demand) ---------


class _ScriptedTransport:
    """Answers rounds from a list of results, recording nothing but what it was sent."""

    def __init__(self, results: list[dict[str, Any]]) -> None:
        self.results = results
        self.bodies: list[dict[str, Any]] = []

    def post(self, url: str, body: bytes, headers: Mapping[str, str], sse: Any = None) -> HttpAnswer:
        request = json.loads(body)
        self.bodies.append(request)
        result = self.results[len(self.bodies) - 1]
        body = {"jsonrpc": "2.0", "id": request["id"], "result": result}
        return HttpAnswer(200, "application/json", json.dumps(body).encode())


def test_state_only_backoff_doubles_to_the_cap_and_resets_after_a_question() -> None:
    shed = {"resultType": "input_required", "requestState": "s"}
    ask = {"resultType": "input_required", "inputRequests": {"again": {}}, "requestState": "q"}
    transport = _ScriptedTransport([shed, shed, shed, shed, ask, shed, {"content": []}])
    slept: list[float] = []
    client = MrtrClient(Router("http://x/mcp"), capabilities={}, transport=transport, sleep=slept.append)
    result = client.call_tool("t", {"a": 1}, answer)
    assert result.outcome is Outcome.COMPLETE
    assert slept == [0.05, 0.1, 0.2, 0.25, 0.05]
    assert (STATE_ONLY_BACKOFF_INITIAL, STATE_ONLY_BACKOFF_CAP) == (
        sdk_driver._STATE_ONLY_BACKOFF_INITIAL_SECONDS,
        sdk_driver._STATE_ONLY_BACKOFF_CAP_SECONDS,
    )
    assert ["inputResponses" in b["params"] for b in transport.bodies] == [False] * 5 + [True, False]


def test_retries_repeat_the_arguments_byte_for_byte_with_new_ids() -> None:
    ask = {"resultType": "input_required", "inputRequests": {"again": {}}, "requestState": "v1.\u00e9/+="}
    transport = _ScriptedTransport([ask, ask, {"content": []}])
    client = MrtrClient(Router("http://x/mcp"), capabilities={}, transport=transport)
    client.call_tool("t", {"b": [1, 2], "a": "é"}, answer)
    params = [b["params"] for b in transport.bodies]
    assert [p["arguments"] for p in params] == [{"b": [1, 2], "a": "é"}] * 3
    assert [p.get("requestState") for p in params] == [None, ask["requestState"], ask["requestState"]]
    assert len({b["id"] for b in transport.bodies}) == 3


# --- routing -----------------------------------------------------------------------------


def test_other_replica_moves_every_retry_to_another_replica(gardens: Gardens) -> None:
    client = client_for(gardens.urls, Routing.OTHER_REPLICA)
    for bed in range(4):
        result = client.call_tool("plan_bed", {"bed_id": f"R-{bed}"}, answer)
        assert result.outcome is Outcome.COMPLETE
        replicas = [r.replica for r in result.rounds]
        assert all(a != b for a, b in zip(replicas, replicas[1:], strict=False)), replicas


def test_same_replica_keeps_every_round_of_a_call_on_one_replica(gardens: Gardens) -> None:
    client = client_for(gardens.urls, Routing.SAME_REPLICA)
    firsts = set()
    for bed in range(3):
        result = client.call_tool("plan_bed", {"bed_id": f"S-{bed}"}, answer)
        assert result.outcome is Outcome.COMPLETE
        assert len({r.replica for r in result.rounds}) == 1
        first = result.rounds[0]
        firsts.add(first.redispatched_from or first.replica)  # a round 1 never sent goes on to another replica
    assert len(firsts) == 3  # round 1 still spreads over the replicas


def test_round_robin_cycles_through_the_replicas(gardens: Gardens) -> None:
    result = client_for(gardens.urls, Routing.ROUND_ROBIN).call_tool("plan_bed", {"bed_id": "RR-1"}, answer)
    assert result.outcome is Outcome.COMPLETE
    assert [r.replica for r in result.rounds] == gardens.urls


def test_router_strategies_without_servers() -> None:
    urls = ["a", "b", "c"]
    rng_router = Router(urls, Routing.RANDOM, rng=random.Random(7))
    assert {rng_router.pick() for _ in range(50)} == set(urls)
    other = Router(urls, Routing.OTHER_REPLICA)
    previous = None
    for _ in range(20):
        current = other.pick(previous)
        assert current != previous
        previous = current
    for strategy in Routing:
        assert Router("http://balancer/mcp", strategy).pick("http://balancer/mcp") == "http://balancer/mcp"


# --- transport ---------------------------------------------------------------------------


def _requests_for(record: Path, bed_id: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    return [line for line in lines if f'"bed_id":"{bed_id}"' in line["body"]]


def test_idle_connections_are_closed_not_reused(gardens: Gardens) -> None:
    now = [0.0]
    transport = Transport(max_idle=1.0, clock=lambda: now[0])
    client = client_for(gardens.recorded.url, transport=transport)
    for step in (0.0, 0.5, 2.0):  # reuse after 0.5 s idle, a new connection after 1.5 s
        now[0] += step
        assert client.call_tool("water", {"bed_id": "IDLE-1"}, answer).outcome is Outcome.COMPLETE
    ports = [line["client"][1] for line in _requests_for(gardens.record, "IDLE-1")]
    assert ports[0] == ports[1] != ports[2]


def test_a_connection_the_server_closed_while_idle_is_replaced_not_failed() -> None:
    """A replica restarted between rounds closed the pooled connection: the next round notices
    before sending and opens a new one, instead of failing a request the server never saw."""
    env = {"GARDEN_REQUEST_STATE_KEY": secrets.token_hex(16)}
    port = free_port()
    servers = [start_server(GARDEN, env=env, port=port)]

    def restart_then_answer(record: RoundRecord) -> dict[str, Any]:
        servers[-1].stop()  # its side of the idle keep-alive connection closes with it
        servers.append(start_server(GARDEN, env=env, port=port))
        return answer(record)

    try:
        transport = Transport(max_idle=60.0)  # idle expiry must not be what saves the round
        result = client_for(servers[0].url, transport=transport).call_tool("plan_bed", {"bed_id": "B-1"},
                                                                          restart_then_answer)
    finally:
        for server in servers:
            server.stop()
    assert [record.outcome for record in result.rounds] == [Outcome.INPUT_REQUIRED] * 2 + [Outcome.COMPLETE]


def test_answer_lost_when_the_server_dies_after_the_request_reached_it() -> None:
    server = start_server(GARDEN, env={"GARDEN_REQUEST_STATE_KEY": secrets.token_hex(16)})
    try:
        gevent.spawn_later(0.5, server.process.kill)  # while the round waits for `slow`
        result = client_for(server.url, timeout=10.0).call_tool("slow", {"seconds": 3.0}, answer)
    finally:
        server.stop()
    assert result.outcome is Outcome.ANSWER_LOST
    assert result.last is not None and result.last.http_status is None


def test_page_visits_answer_and_share_one_connection_per_origin(gardens: Gardens) -> None:
    """URL mode's page visits: one URL per flow, pooled per origin like the rounds."""
    transport = Transport()
    base = gardens.recorded.url.removesuffix("/mcp")
    answers = [transport.visit(f"{base}/pages/visit-{n}") for n in range(2)]
    assert [a.status for a in answers if isinstance(a, HttpAnswer)] == [404, 404]
    lines = [json.loads(line) for line in gardens.record.read_text().splitlines()]
    visits = [line for line in lines if line["path"].startswith("/pages/visit-")]
    assert [line["method"] for line in visits] == ["POST", "POST"]
    assert len({line["client"][1] for line in visits}) == 1
    assert transport.connections_in_use() == 0


def test_without_reuse_every_round_opens_its_own_connection(gardens: Gardens) -> None:
    client = client_for(gardens.recorded.url, transport=Transport(reuse_connections=False))
    assert client.call_tool("plan_bed", {"bed_id": "CLOSE-1"}, answer).outcome is Outcome.COMPLETE
    requests = _requests_for(gardens.record, "CLOSE-1")
    assert len({line["client"][1] for line in requests}) == 3
    assert all(dict(line["headers"]).get("connection") == "close" for line in requests)


# --- conformance with the SDK's own Client ----------------------------------------------


def _sdk_call(url: str, tool: str, arguments: dict[str, Any]) -> Any:
    """Run one call through `mcp.Client` (the reference), answering like `answer` does."""

    async def elicit(context: Any, params: Any) -> ElicitResult:
        properties = params.requested_schema.get("properties", {})
        key = "soil" if "soil" in properties else "sowing" if "rows" in properties else "again"
        return ElicitResult(action="accept", content=ANSWERS[key]["content"])

    async def run() -> Any:
        async with Client(url, elicitation_callback=elicit, mode=PROTOCOL_VERSION) as client:
            try:
                return await client.call_tool(tool, arguments)
            except sdk_driver.InputRequiredRoundsExceededError as error:
                return error

    return anyio.run(run)


def _split_by_client(requests: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    ours = [r for r in requests if dict(r["headers"]).get("user-agent", "").startswith("mrtr-harness")]
    theirs = [r for r in requests if r not in ours]
    return ours, theirs


def _tools_calls(requests: list[dict[str, Any]]) -> list[tuple[dict[str, str], dict[str, Any], dict[str, Any]]]:
    calls = []
    for request in requests:
        body = json.loads(request["body"])
        if body.get("method") == "tools/call":
            calls.append((dict(request["headers"]), body, json.loads(request["response"])))
    return calls


def test_wire_matches_the_sdk_client_round_for_round(gardens: Gardens) -> None:
    url = gardens.recorded.url
    reference = _sdk_call(url, "plan_bed", {"bed_id": "CONF-1"})
    ours = client_for(url).call_tool("plan_bed", {"bed_id": "CONF-1"}, answer)

    assert ours.outcome is Outcome.COMPLETE and reference.is_error is False
    assert ours.result is not None and ours.result["structuredContent"] == reference.structured_content

    requests = [json.loads(line) for line in gardens.record.read_text().splitlines()]
    mine, sdk = _split_by_client([r for r in requests if '"CONF-1"' in r["body"] or '"tools/list"' in r["body"]])
    our_calls, sdk_calls = _tools_calls(mine), _tools_calls(sdk)
    assert len(our_calls) == len(sdk_calls) == 3
    for (our_h, our_b, _), (sdk_h, sdk_b, _) in zip(our_calls, sdk_calls, strict=True):
        for header in ("mcp-protocol-version", "mcp-method", "mcp-name", "content-type"):
            assert our_h[header] == sdk_h[header], header
        assert {"application/json", "text/event-stream"} <= {a.strip() for a in our_h["accept"].split(",")}
        assert our_b["method"] == sdk_b["method"]
        ours_p, sdk_p = our_b["params"], sdk_b["params"]
        assert (ours_p["name"], ours_p["arguments"]) == (sdk_p["name"], sdk_p["arguments"])
        assert set(ours_p["_meta"]) == set(sdk_p["_meta"])
        for key in (PROTOCOL_VERSION_META_KEY, CLIENT_CAPABILITIES_META_KEY):
            assert ours_p["_meta"][key] == sdk_p["_meta"][key]
        assert ours_p.get("inputResponses") == sdk_p.get("inputResponses")
        assert ("requestState" in ours_p) == ("requestState" in sdk_p)
    for calls in (our_calls, sdk_calls):
        assert len({body["id"] for _, body, _ in calls}) == 3
        for (_, _, previous), (_, body, _) in zip(calls, calls[1:], strict=False):
            assert body["params"]["requestState"] == previous["result"]["requestState"]  # echoed verbatim
    # The SDK lists the tools after a complete result (to validate its output schema); we never do.
    assert {json.loads(r["body"])["method"] for r in sdk} <= {"tools/call", "tools/list"}
    assert {json.loads(r["body"])["method"] for r in mine} == {"tools/call"}


def test_round_cap_and_state_only_retries_match_the_sdk_client(gardens: Gardens) -> None:
    url = gardens.recorded.url
    reference = _sdk_call(url, "loop_forever", {"bed_id": "CONF-2"})
    ours = client_for(url).call_tool("loop_forever", {"bed_id": "CONF-2"}, answer)
    assert isinstance(reference, sdk_driver.InputRequiredRoundsExceededError)
    assert ours.outcome is Outcome.ROUNDS_EXCEEDED
    mine, sdk = _split_by_client(_requests_for(gardens.record, "CONF-2"))
    assert len(_tools_calls(mine)) == len(_tools_calls(sdk)) == ours.round_count

    _sdk_call(url, "shed", {"bed_id": "CONF-3"})
    client_for(url).call_tool("shed", {"bed_id": "CONF-3"}, answer)
    mine, sdk = _split_by_client(_requests_for(gardens.record, "CONF-3"))
    for calls in (_tools_calls(mine), _tools_calls(sdk)):
        retry = calls[1][1]["params"]
        assert "requestState" in retry and "inputResponses" not in retry


# --- helpers for the raw SSE check --------------------------------------------------------


def _body(client: MrtrClient, tool: str, request_id: int) -> bytes:
    return CallFrame(client.envelope, tool, {"bed_id": "B-1"}).body(request_id)


def _headers(client: MrtrClient, tool: str) -> dict[str, str]:
    return CallFrame(client.envelope, tool, {"bed_id": "B-1"}).headers


def _scanned(body: bytes, request_id: int) -> SseScanner:
    scanner = SseScanner(request_id)
    scanner.feed(body)
    return scanner


def test_the_wire_constants_spelled_in_the_harness_are_the_sdk_s() -> None:
    """The load process spells the SDK's routing headers, its header encoding and its round cap itself, so it
    never imports the SDK (whose package imports its server); they must stay the SDK's."""
    import mcp_types
    from mcp.shared import inbound
    from mcp_types.version import LATEST_MODERN_VERSION

    from harness.mrtr import client, outcome, wire

    assert (wire.MCP_METHOD_HEADER, wire.MCP_NAME_HEADER, wire.MCP_PROTOCOL_VERSION_HEADER) == \
        (inbound.MCP_METHOD_HEADER, inbound.MCP_NAME_HEADER, inbound.MCP_PROTOCOL_VERSION_HEADER)
    assert client.DEFAULT_INPUT_REQUIRED_MAX_ROUNDS == sdk_driver.DEFAULT_INPUT_REQUIRED_MAX_ROUNDS
    assert (wire.PROTOCOL_VERSION_META_KEY, wire.CLIENT_CAPABILITIES_META_KEY, wire.CLIENT_INFO_META_KEY) == \
        (mcp_types.PROTOCOL_VERSION_META_KEY, mcp_types.CLIENT_CAPABILITIES_META_KEY, mcp_types.CLIENT_INFO_META_KEY)
    assert wire.PROTOCOL_VERSION == LATEST_MODERN_VERSION
    assert (outcome.INVALID_PARAMS, outcome.MISSING_REQUIRED_CLIENT_CAPABILITY, outcome.HEADER_MISMATCH) == \
        (mcp_types.INVALID_PARAMS, mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY, mcp_types.HEADER_MISMATCH)
    for value in ("plan_bed", "issue refund", " edge", "tab\there", "héllo", "=?base64?eA==?=", "", "ü" * 40):
        assert wire.encode_header_value(value) == inbound.encode_header_value(value), value


def test_a_load_process_imports_no_server_code() -> None:
    """Start-up of a load process (a run, a worker) must not pay for the MCP server SDK it never runs, nor for
    the SDK's types (pydantic models). `tests/test_run.py` checks a whole run the same way."""
    import subprocess
    import sys

    probe = ("import sys\nimport harness.cli.main\n"
             "import locust\n"
             "import harness.run.run, harness.load.distributed, harness.load.client_stack\n"
             "print(sorted({m for m in sys.modules if m.split('.')[0] in "
             "('mcp', 'mcp_types', 'starlette', 'uvicorn', 'sse_starlette') or m == 'harness.shop.server'}))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_challenge_fields_are_read_as_the_sdk_reads_them() -> None:
    """A 401's `WWW-Authenticate` is read on the hot path with the SDK's pattern, spelled in `wire`."""
    import httpx2
    from mcp.client.auth.utils import extract_field_from_www_auth

    from harness.mrtr import wire

    challenges = ['Bearer error="invalid_token", error_description="Authentication required", '
                  'resource_metadata="http://127.0.0.1:1/.well-known/oauth-protected-resource/mcp"',
                  'Bearer realm="shop", error=insufficient_scope, scope="refunds:write"', "Bearer", 'Basic realm="x"']
    for challenge in challenges:
        response = httpx2.Response(401, headers={"WWW-Authenticate": challenge})
        for name, pattern in (("error", wire._CHALLENGE_ERROR), ("error_description", wire._CHALLENGE_DESCRIPTION)):
            assert wire.challenge_field(challenge, pattern) == extract_field_from_www_auth(response, name), challenge


def test_a_401_or_403_is_classified_by_its_challenge_else_by_its_body() -> None:
    from harness.mrtr.wire import decode_reply

    challenge = 'Bearer error="insufficient_scope", error_description="Required scope: refunds:write"'
    forbidden = decode_reply(403, "application/json", b'{"error":"insufficient_scope"}', 1, None, challenge)
    assert (forbidden.outcome, forbidden.auth_error, forbidden.error_message) == \
        (Outcome.FORBIDDEN, "insufficient_scope", "insufficient_scope: Required scope: refunds:write")
    bare = decode_reply(401, "application/json", b'{"error":"invalid_token","error_description":"expired"}', 1)
    assert (bare.outcome, bare.auth_error, bare.error_message) == (Outcome.UNAUTHORIZED, "invalid_token",
                                                                   "invalid_token: expired")
    proxy = decode_reply(401, "text/html", b"<h1>login first</h1>", 1, None, 'Basic realm="proxy"')
    assert (proxy.outcome, proxy.auth_error) == (Outcome.UNAUTHORIZED, None)
