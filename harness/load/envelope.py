"""The envelope fuzzer: JSON-RPC requests sent wrong in their envelope, and the answer each must get.

A `fuzz` flow whose draw is one of its `envelope` classes (`harness.config.mutations.EnvelopeMutation`)
sends no MRTR round: it POSTs one broken `tools/list` request (two, for `duplicate-id`) to a replica
and judges the answer against `REQUIRED`, what JSON-RPC 2.0 and MCP's streamable HTTP transport
say it must be. `tools/list` reads nothing and changes nothing, so a server that takes a broken
envelope for a good one does no harm. The answer counts as `as_required`, `otherwise` (with what
came instead: `got`, e.g. `400 -32602`) or `no_answer` (a timeout or a broken connection).

Where the real SDK server (mcp 2.3.0) answers other than the spec, the spec's answer stays the
required one and `SDK_DEVIATIONS` names the difference, so a report can say it is a known one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

import gevent

from harness.config.flows import FuzzFlow
from harness.config.mutations import EnvelopeMutation
from harness.journal.records import FlowOutcome
from harness.load.flow import Flow
from harness.mrtr.transport import HttpAnswer, RoundTransport
from harness.mrtr.wire import ACCEPT, JSON_CONTENT_TYPE, MCP_METHOD_HEADER

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
INVALID_PARAMS: Final = -32602
LIST_METHOD: Final = "tools/list"
HUGE_ID: Final = 2**70
"""An integer id past 64 bits: JSON has no bound on a number, MCP asks only for an integer."""
NULL_ID: Final = object()
"""The answer's `id` was JSON null (not absent)."""


class EnvelopeAnswer(StrEnum):
    """How the server answered an envelope mutant."""

    AS_REQUIRED = "as_required"
    OTHERWISE = "otherwise"  # an answer, not the required one (a 5xx among them)
    NO_ANSWER = "no_answer"  # a timeout or a broken connection


@dataclass(frozen=True)
class Required:
    """The answer a class must get: an HTTP status, and the JSON-RPC error codes (None: no error) and id."""

    statuses: frozenset[int]
    codes: frozenset[int] | None
    id_null: bool = False
    """the error must carry `"id": null` (JSON-RPC §5: the request's id could not be read)."""
    echo_id: bool = False
    """the answer must carry the request's own id, exactly."""
    body: bool | None = True
    """whether the answer has a JSON-RPC body (a notification's 202 has none); None: only the status counts."""
    text: str = ""


_ERROR_STATUS = frozenset({400})
REQUIRED: Final[dict[EnvelopeMutation, Required]] = {
    EnvelopeMutation.INVALID_JSON: Required(_ERROR_STATUS, frozenset({PARSE_ERROR}), id_null=True,
                                            text="400, -32700 with id null (JSON-RPC §5.1)"),
    EnvelopeMutation.MISSING_ID: Required(frozenset({202}), None, body=False,
                                          text="202 and no body: a notification (JSON-RPC §4.1; streamable HTTP)"),
    EnvelopeMutation.DUPLICATE_ID: Required(frozenset({200}), None, echo_id=True,
                                            text="each of the two answered, with that id"),
    EnvelopeMutation.OBJECT_ID: Required(_ERROR_STATUS, frozenset({INVALID_REQUEST}), id_null=True,
                                         text="400, -32600 with id null (JSON-RPC §4: String, Number or Null)"),
    EnvelopeMutation.ARRAY_ID: Required(_ERROR_STATUS, frozenset({INVALID_REQUEST}), id_null=True,
                                        text="400, -32600 with id null (JSON-RPC §4)"),
    EnvelopeMutation.FLOAT_ID: Required(_ERROR_STATUS, frozenset({INVALID_REQUEST}), id_null=True,
                                        text="400, -32600 with id null (MCP: an id is a string or an integer)"),
    EnvelopeMutation.HUGE_ID: Required(frozenset({200}), None, echo_id=True,
                                       text="answered, with that id exactly (MCP: any integer)"),
    EnvelopeMutation.JSONRPC_1: Required(_ERROR_STATUS, frozenset({INVALID_REQUEST}),
                                         text='400, -32600 (JSON-RPC §4: "jsonrpc" MUST be exactly "2.0")'),
    EnvelopeMutation.JSONRPC_MISSING: Required(_ERROR_STATUS, frozenset({INVALID_REQUEST}),
                                               text="400, -32600 (JSON-RPC §4)"),
    EnvelopeMutation.PARAMS_ARRAY: Required(_ERROR_STATUS, frozenset({INVALID_REQUEST, INVALID_PARAMS}),
                                            text="400, -32600 or -32602 (MCP params are an object)"),
    EnvelopeMutation.PARAMS_STRING: Required(_ERROR_STATUS, frozenset({INVALID_REQUEST}),
                                             text="400, -32600 (JSON-RPC §4.2: params are structured)"),
    EnvelopeMutation.PARAMS_NULL: Required(_ERROR_STATUS, frozenset({INVALID_REQUEST}),
                                           text="400, -32600 (JSON-RPC §4.2: params are structured, or absent)"),
    EnvelopeMutation.OVERSIZE_BODY: Required(frozenset({413}), None, body=None,
                                             text="413 (Content Too Large), before the body is read whole"),
}
"""What each class must be answered with. The HTTP status is MCP's streamable HTTP mapping of the error
(400 for a JSON-RPC error the transport refuses); a JSON-RPC error that does not say `id: null` may
carry the request's id or null alike."""

SDK_DEVIATIONS: Final[dict[EnvelopeMutation, str]] = {
    EnvelopeMutation.PARAMS_NULL: "400 -32602 id the request's: mcp 2.3.0 takes the envelope and refuses its "
                                  "params (invalid params); by JSON-RPC §4.2 a params member that is neither an "
                                  "object nor an array makes the request itself invalid (-32600)",
}
"""Where mcp 2.3.0's server answers other than `REQUIRED`, by class: what it answers, then why that is not
the spec's answer (`tests/test_envelope_shop.py` pins each against a real replica)."""


@dataclass(frozen=True)
class Got:
    """What came back: the HTTP status, the JSON-RPC error code (None: a result, or no JSON-RPC body), the id."""

    status: int
    code: int | None
    reply_id: object
    has_body: bool

    def describe(self) -> str:
        """`400 -32600 id null`, `200 result`, `202`: what the reports show of an answer otherwise."""
        if not self.has_body:
            return str(self.status)
        kind = "result" if self.code is None else str(self.code)
        shown = "null" if self.reply_id is NULL_ID else "absent" if self.reply_id is None else \
            "other" if not isinstance(self.reply_id, str | int) else "the request's"
        return f"{self.status} {kind} id {shown}"


def read_answer(answer: HttpAnswer) -> Got:
    """The status, error code and id of one answer; a body that is no JSON-RPC message has no code and no id."""
    message = _message(answer.content_type, answer.body)
    if message is None:
        return Got(answer.status, None, None, bool(answer.body.strip()))
    error = message.get("error")
    code = error.get("code") if isinstance(error, Mapping) else None
    reply_id = message.get("id")
    return Got(answer.status, code if isinstance(code, int) else None,
               NULL_ID if reply_id is None and "id" in message else reply_id, True)


def judge(mutation: EnvelopeMutation, got: Got | None, sent_id: object) -> EnvelopeAnswer:
    """How `got` counts for `mutation` (None: nothing came back)."""
    if got is None:
        return EnvelopeAnswer.NO_ANSWER
    required = REQUIRED[mutation]
    if got.status not in required.statuses or (required.body is not None and got.has_body != required.body):
        return EnvelopeAnswer.OTHERWISE
    if not required.body:
        return EnvelopeAnswer.AS_REQUIRED
    if (got.code is None) != (required.codes is None) or (required.codes is not None and
                                                          got.code not in required.codes):
        return EnvelopeAnswer.OTHERWISE
    if required.id_null and got.reply_id is not NULL_ID:
        return EnvelopeAnswer.OTHERWISE
    if required.echo_id and (type(got.reply_id) is not type(sent_id) or got.reply_id != sent_id):
        return EnvelopeAnswer.OTHERWISE
    if not required.id_null and not required.echo_id and got.reply_id not in (NULL_ID, sent_id):
        return EnvelopeAnswer.OTHERWISE
    return EnvelopeAnswer.AS_REQUIRED


def _message(content_type: str, body: bytes) -> dict[str, Any] | None:
    """The JSON-RPC message of a JSON body, or of an SSE stream's first `message` event."""
    text = body.decode("utf-8", "replace")
    if content_type.startswith("text/event-stream"):
        text = next((line[5:].strip() for line in text.splitlines() if line.startswith("data:")), "")
    try:
        decoded = json.loads(text)
    except ValueError:
        return None
    return decoded if isinstance(decoded, dict) else None


@dataclass(frozen=True)
class EnvelopeMutant:
    """One broken request: its body, its headers, the id it sent (for the echo check) and how many to send at once."""

    body: bytes
    headers: dict[str, str]
    sent_id: object
    copies: int = 1


def make_mutant(mutation: EnvelopeMutation, meta: Mapping[str, Any], request_id: int, body_limit: int,
                base_headers: Mapping[str, str]) -> EnvelopeMutant:
    """The request `mutation` sends: a `tools/list` with the client's `_meta` (`meta`), broken one way."""
    headers = {**base_headers, "Content-Type": JSON_CONTENT_TYPE, "Accept": ACCEPT, MCP_METHOD_HEADER: LIST_METHOD}
    request: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": LIST_METHOD,
                               "params": {"_meta": dict(meta)}}
    sent_id: object = request_id
    copies = 1
    if mutation is EnvelopeMutation.INVALID_JSON:
        return EnvelopeMutant(json.dumps(request).encode()[:-7], headers, None)
    if mutation is EnvelopeMutation.OVERSIZE_BODY:
        request["params"]["_meta"]["padding"] = ""
        bare = len(json.dumps(request).encode())
        request["params"]["_meta"]["padding"] = "x" * max(0, body_limit + 1 - bare)
        return EnvelopeMutant(json.dumps(request).encode(), headers, request_id)
    if mutation is EnvelopeMutation.MISSING_ID:
        del request["id"]
        sent_id = None
    elif mutation is EnvelopeMutation.DUPLICATE_ID:
        copies = 2
    elif mutation in _IDS:
        request["id"] = sent_id = _IDS[mutation]
    elif mutation is EnvelopeMutation.JSONRPC_1:
        request["jsonrpc"] = "1.0"
    elif mutation is EnvelopeMutation.JSONRPC_MISSING:
        del request["jsonrpc"]
    else:
        request["params"] = _PARAMS[mutation]
    return EnvelopeMutant(json.dumps(request).encode(), headers, sent_id, copies)


_IDS: Final[dict[EnvelopeMutation, object]] = {
    EnvelopeMutation.OBJECT_ID: {"id": 1}, EnvelopeMutation.ARRAY_ID: [1], EnvelopeMutation.FLOAT_ID: 1.5,
    EnvelopeMutation.HUGE_ID: HUGE_ID}
_PARAMS: Final[dict[EnvelopeMutation, object]] = {
    EnvelopeMutation.PARAMS_ARRAY: ["_meta"], EnvelopeMutation.PARAMS_STRING: "_meta",
    EnvelopeMutation.PARAMS_NULL: None}


def exchange(transport: RoundTransport, url: str, mutant: EnvelopeMutant, line: str = "") -> list[Got | None]:
    """POST the mutant's copies at once (each in its own greenlet) and read each answer (None: none came)."""
    senders = [gevent.spawn(transport.post, url, mutant.body, mutant.headers, None, line)
               for _ in range(mutant.copies)]
    gevent.joinall(senders)
    return [read_answer(sender.value) if isinstance(sender.value, HttpAnswer) else None for sender in senders]


def send_envelope(flow: Flow, spec: FuzzFlow, mutation: EnvelopeMutation) -> FlowOutcome:
    """Send `mutation`'s request (its copies at once) to a replica, judge the answers, and say so on the flow record.

    The flow record gets `envelope_mutation`, `envelope_answer` (the worst of the copies'),
    `envelope_got` (what came back, when not as required) and `envelope_length` (the body's bytes).
    """
    client = flow.env.client
    meta = json.loads(client.envelope.meta_json)
    mutant = make_mutant(mutation, meta, 1_000_000_000 + flow.rng.randrange(1_000_000_000),
                         spec.envelope_body_limit, client.envelope.base_headers)
    line = client.credentials.authorization(flow.lead) if client.credentials is not None else ""
    answers = exchange(client.transport, client.router.pick(None), mutant, line)
    judged = [(judge(mutation, got, mutant.sent_id), got) for got in answers]
    order = list(EnvelopeAnswer)
    verdict, got = max(judged, key=lambda item: order.index(item[0]))
    flow.facts.update(envelope_mutation=mutation.value, envelope_answer=verdict.value, envelope_length=len(mutant.body))
    if verdict is EnvelopeAnswer.OTHERWISE and got is not None:
        flow.facts["envelope_got"] = got.describe()
    return FlowOutcome.COMPLETED if verdict is EnvelopeAnswer.AS_REQUIRED else FlowOutcome.ERROR
