"""The 2026-07-28 `tools/call` messages: request bytes out, a classified reply in.

Every round is one self-contained POST (no `initialize`, no session), so everything a
server needs rides on each request: the routing headers and, in `params._meta`, the
protocol version, the client's capabilities and its info. The load generator sends
thousands of these a second, so the parts that never change are serialised once
(`Envelope` per client, `CallFrame` per call) and a round only splices in its id,
the answers and the echoed `requestState`.

Names and codes are the SDK's (`mcp_types`, `mcp.shared.inbound`), spelled here because importing
either costs a load process a tenth of a second or more of start-up; `tests/test_mrtr_client.py`
checks each against the SDK, so the harness cannot drift from the server it tests.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from harness.mrtr.error_text import http_excerpt
from harness.mrtr.outcome import Outcome, outcome_for_error_code
from harness.vocabulary import MODERN_REVISION

__all__ = [
    "ACCEPT",
    "PROTOCOL_VERSION",
    "TOOLS_CALL",
    "CallFrame",
    "Envelope",
    "ServerReply",
    "SseScanner",
    "decode_reply",
    "dump_bytes",
    "dumps",
]

MCP_METHOD_HEADER: Final = "mcp-method"
MCP_NAME_HEADER: Final = "mcp-name"
MCP_PROTOCOL_VERSION_HEADER: Final = "mcp-protocol-version"
"""The routing headers of `mcp.shared.inbound`, spelled here: importing anything under `mcp` imports the
whole SDK, server included (about 0.3 s of CPU), and a load process runs no server code.
`tests/test_mrtr_client.py` checks they are the SDK's."""

_HEADER_SAFE = re.compile(r"^[\x20-\x7E]*$")
_B64_SENTINEL = re.compile(r"^=\?base64\?(?P<payload>.*)\?=$")


def encode_header_value(value: str) -> str:
    """A header value as the SDK's `encode_header_value` sends it (and its server decodes it).

    Printable ASCII without edge whitespace passes as is; anything else is wrapped as
    `=?base64?...?=`. Kept byte for byte equal to the SDK's (checked by a test), for the
    same reason as the constants above. A client encodes each tool's name once
    (`Envelope.headers_for`): two regular expressions per call showed in a profile.
    """
    if _HEADER_SAFE.fullmatch(value) and value == value.strip() and not _B64_SENTINEL.fullmatch(value):
        return value
    return f"=?base64?{base64.b64encode(value.encode('utf-8')).decode('ascii')}?="

PROTOCOL_VERSION: Final = MODERN_REVISION
"""The SDK's `mcp_types.version.LATEST_MODERN_VERSION`: the stateless revision. Without the header a server serves
the 2025 path."""

PROTOCOL_VERSION_META_KEY: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_META_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_META_KEY: Final = "io.modelcontextprotocol/clientInfo"
"""The `params._meta` keys of `mcp_types`."""

TOOLS_CALL: Final = "tools/call"

TRACEPARENT: Final = "traceparent"
"""The W3C Trace Context key the SDK's propagator reads from `params._meta`."""

ACCEPT: Final = "application/json, text/event-stream"
"""Both types: a server in SSE mode answers 406 to an `Accept` that does not name both."""

JSON_CONTENT_TYPE: Final = "application/json"
SSE_CONTENT_TYPE: Final = "text/event-stream"

INPUT_REQUIRED: Final = "input_required"
COMPLETE: Final = "complete"


def _mapping(value: Any) -> Any:
    """orjson's fallback: any other `Mapping` (arguments may be one) is written as an object; `JSON_NULL` as null."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, JsonNull):
        return None
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


class JsonNull:
    """An explicit JSON `null` where `None` means "leave the field out" (a fuzzer's `requestState: null`)."""

    def __repr__(self) -> str:
        return "null"


JSON_NULL: Final = JsonNull()


def dump_bytes(value: Any) -> bytes:
    """Compact UTF-8 JSON, the way the SDK writes it (pydantic does not escape non-ASCII either).

    orjson, because a load process encodes answers and decodes replies on every round:
    it costs a tenth of the standard library's `json` there.
    """
    return orjson.dumps(value, default=_mapping)


def dumps(value: Any) -> str:
    """`dump_bytes` as text."""
    return dump_bytes(value).decode()


class Envelope:
    """The per-client constant part of every request: `params._meta` and the fixed headers.

    Serialised once at construction because it is the same on every round of every
    call this client makes; a round only concatenates it.
    """

    __slots__ = ("capabilities", "client_info", "meta_json", "meta_suffix", "traced_suffix", "base_headers",
                 "_tool_headers")

    def __init__(self, capabilities: Mapping[str, Any], client_info: tuple[str, str],
                 headers: Mapping[str, str] | None = None) -> None:
        """`headers`: sent on every request besides the protocol's own (a principal header)."""
        name, version = client_info
        self.capabilities = dict(capabilities)
        self.client_info = {"name": name, "version": version}
        self.meta_json = dumps(
            {
                PROTOCOL_VERSION_META_KEY: PROTOCOL_VERSION,
                CLIENT_CAPABILITIES_META_KEY: self.capabilities,
                CLIENT_INFO_META_KEY: self.client_info,
            }
        )
        self.meta_suffix = f',"_meta":{self.meta_json}}}}}'.encode()
        self.traced_suffix = (b',"_meta":{"' + TRACEPARENT.encode() + b'":"',
                              b'",' + self.meta_json[1:].encode() + b"}}")
        """`meta_suffix` around a `traceparent` (only rounds of a traced flow use it)."""
        self.base_headers: dict[str, str] = {
            "Content-Type": JSON_CONTENT_TYPE,
            "Accept": ACCEPT,
            MCP_PROTOCOL_VERSION_HEADER: PROTOCOL_VERSION,
            MCP_METHOD_HEADER: TOOLS_CALL,
            **(headers or {}),
        }
        self._tool_headers: dict[str, dict[str, str]] = {}

    def headers_for(self, tool: str) -> dict[str, str]:
        """The headers of every call to `tool`, one shared dict per tool: not a copy per call.

        A flow waiting on its lead keeps its call's frame; 100,000 of them must not keep
        100,000 copies of the same five headers. Callers never mutate the dict they get.
        """
        headers = self._tool_headers.get(tool)
        if headers is None:
            headers = self._tool_headers[tool] = {**self.base_headers, MCP_NAME_HEADER: encode_header_value(tool)}
        return headers


class CallFrame:
    """The per-call constant part: tool name, arguments and headers, serialised once.

    A retry must repeat the tool and the arguments exactly (the SDK seals a digest of
    them into the state); serialising them once per call makes every round of the call
    carry byte-identical arguments by construction, and costs one encode per call
    instead of one per round.
    """

    __slots__ = ("tool", "arguments", "headers", "_prefix", "_meta_suffix", "_traced_suffix")

    def __init__(self, envelope: Envelope, tool: str, arguments: Mapping[str, Any],
                 headers: Mapping[str, str] | None = None) -> None:
        """`headers` override the computed ones for this call only (the adversarial hook)."""
        self.tool = tool
        self.arguments = arguments
        shared = envelope.headers_for(tool)
        self.headers: Mapping[str, str] = {**shared, **headers} if headers else shared
        self._prefix = (f',"method":"{TOOLS_CALL}","params":{{"name":{dumps(tool)},"arguments":{dumps(arguments)}'
                        .encode())
        self._meta_suffix = envelope.meta_suffix
        self._traced_suffix = envelope.traced_suffix

    def body(
        self,
        request_id: int,
        input_responses: Mapping[str, Any] | bytes | None = None,
        request_state: object = None,
        traceparent: bytes | None = None,
    ) -> bytes:
        """The request body of one round; `input_responses` may come already encoded (`dump_bytes`).

        `request_state` is spliced in as the JSON string it was received as: the client
        never parses, decodes or rewrites the token, it only echoes it. (Only the fuzzer
        sends anything else: another JSON value, or `JSON_NULL` for an explicit null.)
        `traceparent`: the round span's W3C context, first in `params._meta` (where the SDK's
        server reads it: `mcp.shared._otel.extract_trace_context`); None, the bytes are as ever.
        """
        parts = [b'{"jsonrpc":"2.0","id":', str(request_id).encode(), self._prefix]
        if input_responses is not None:
            parts.append(b',"inputResponses":')
            parts.append(input_responses if isinstance(input_responses, bytes) else dump_bytes(input_responses))
        if request_state is not None:
            parts.append(b',"requestState":')
            parts.append(dump_bytes(request_state))
        if traceparent is None:
            parts.append(self._meta_suffix)
        else:
            head, tail = self._traced_suffix
            parts += (head, traceparent, tail)
        return b"".join(parts)


@dataclass(slots=True)
class ServerReply:
    """One round's answer, classified. `result` is set for complete, tool_error and input_required;
    `error_message` is a JSON-RPC error's message, or the start of an HTTP error's body."""

    outcome: Outcome
    result: dict[str, Any] | None = None
    error_code: int | None = None
    error_message: str | None = None
    auth_error: str | None = None
    """A 401's or 403's OAuth `error` (`invalid_token`, `insufficient_scope`), from its challenge or body."""


_FRAME_END: Final = re.compile(rb"\r\n\r\n|\n\n|\r\r")


class SseScanner:
    """Finds the JSON-RPC response for one request id in a `text/event-stream` body.

    A server in SSE mode commits to the stream when a handler emits a notification or
    runs past its ping interval; the stream then carries `event: message` frames with
    notifications, `: ping` comments, and finally the response. `feed` takes raw chunks
    as they arrive and returns True once the response is found, so the transport can
    stop reading (and close the connection rather than wait for a server that keeps
    the stream open).
    """

    __slots__ = ("_request_id", "_buffer", "message")

    def __init__(self, request_id: int) -> None:
        self._request_id = request_id
        self._buffer = b""
        self.message: dict[str, Any] | None = None

    def feed(self, chunk: bytes) -> bool:
        """Consume a chunk; True once the matching response has been read."""
        if self.message is not None:
            return True
        self._buffer += chunk
        frames = _FRAME_END.split(self._buffer)
        self._buffer = frames.pop()
        for frame in frames:
            message = _frame_message(frame)
            if message is not None and self._is_response(message):
                self.message = message
                return True
        return False

    def finish(self) -> bool:
        """The stream ended: a last frame may lack its blank line."""
        if self.message is None and self._buffer:
            self.feed(b"\n\n")
        return self.message is not None

    def _is_response(self, message: dict[str, Any]) -> bool:
        if "result" not in message and "error" not in message:
            return False  # a notification (progress, log) riding the same stream
        return message.get("id") == self._request_id or ("error" in message and message.get("id") is None)


def _frame_message(frame: bytes) -> dict[str, Any] | None:
    """The JSON object in one SSE frame's `data:` lines, or None (comments, other events)."""
    event = b"message"
    data: list[bytes] = []
    for line in frame.splitlines():
        if not line or line.startswith(b":"):
            continue  # `: ping` keepalives are comments
        field, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if field == b"data":
            data.append(value)
        elif field == b"event":
            event = value
    if event != b"message" or not data:
        return None
    try:
        message = orjson.loads(b"\n".join(data))
    except orjson.JSONDecodeError:
        return None
    return message if isinstance(message, dict) else None


def decode_reply(
    status: int,
    content_type: str,
    body: bytes,
    request_id: int,
    sse: SseScanner | None = None,
    challenge: str | None = None,
) -> ServerReply:
    """Classify one HTTP answer to a `tools/call` round.

    The JSON-RPC body decides over the HTTP status: the SDK sends -32602/-32020/-32021
    with 400 and -32603 with 200, so a status alone would misfile both. A non-2xx
    without a JSON-RPC error body (a proxy, a 406 or 421 from the transport) is
    `http_error`; a 2xx that is not a response to this id is `invalid_result`. A 401 or
    403 is the resource server's answer before any MCP handling (the SDK's
    `RequireAuthMiddleware`): `unauthorized` or `forbidden`, with the OAuth `error` of its
    `WWW-Authenticate` challenge (or, failing that, of its JSON body).
    """
    if status in AUTH_STATUSES:
        return auth_reply(status, body, challenge)
    if sse is not None and content_type.startswith(SSE_CONTENT_TYPE):
        message = sse.message if sse.finish() else None
    else:
        message = _json_object(body)
    if message is not None and isinstance(error := message.get("error"), dict):
        return _error_reply(error)
    if not 200 <= status < 300:
        return ServerReply(Outcome.HTTP_ERROR, error_message=http_excerpt(body) or None)
    if message is None or message.get("id") != request_id:
        return ServerReply(Outcome.INVALID_RESULT)
    result = message.get("result")
    if not isinstance(result, dict):
        return ServerReply(Outcome.INVALID_RESULT)
    return ServerReply(classify_result(result), result)


AUTH_STATUSES: Final = {401: Outcome.UNAUTHORIZED, 403: Outcome.FORBIDDEN}

_CHALLENGE_FIELD: Final = r'{name}=(?:"([^"]+)"|([^\s,]+))'
"""The SDK's pattern for one field of a `WWW-Authenticate` challenge (`mcp.client.auth.utils.
extract_field_from_www_auth`), spelled here for the reason the header names are; a test checks they agree."""
_CHALLENGE_ERROR: Final = re.compile(_CHALLENGE_FIELD.format(name="error"))
_CHALLENGE_DESCRIPTION: Final = re.compile(_CHALLENGE_FIELD.format(name="error_description"))


def challenge_field(challenge: str, pattern: re.Pattern[str]) -> str | None:
    """One field's value (quoted or not) of a `WWW-Authenticate` challenge, or None."""
    match = pattern.search(challenge)
    return (match.group(1) or match.group(2)) if match else None


def auth_reply(status: int, body: bytes, challenge: str | None) -> ServerReply:
    """A 401 or 403: the OAuth `error` and description, from the challenge first, then the body's JSON."""
    error = description = None
    if challenge:
        error = challenge_field(challenge, _CHALLENGE_ERROR)
        description = challenge_field(challenge, _CHALLENGE_DESCRIPTION)
    if error is None and (message := _json_object(body)) is not None:
        error = message.get("error") if isinstance(message.get("error"), str) else None
        text = message.get("error_description")
        description = text if isinstance(text, str) else description
    said = (f"{error}: {description}" if description else error) if error else http_excerpt(body) or None
    return ServerReply(AUTH_STATUSES[status], error_message=said, auth_error=error)


def classify_result(result: Mapping[str, Any]) -> Outcome:
    """Read a `tools/call` result: no `resultType` is complete, an unknown one is invalid.

    An `input_required` result must carry `inputRequests` (an object) and/or
    `requestState` (a string); one carrying neither gives the client nothing to do.
    """
    result_type = result.get("resultType", COMPLETE)
    if result_type == COMPLETE:
        return Outcome.TOOL_ERROR if result.get("isError") is True else Outcome.COMPLETE
    if result_type != INPUT_REQUIRED:
        return Outcome.INVALID_RESULT
    requests = result.get("inputRequests")
    state = result.get("requestState")
    if requests is not None and not isinstance(requests, dict):
        return Outcome.INVALID_RESULT
    if state is not None and not isinstance(state, str):
        return Outcome.INVALID_RESULT
    if not requests and state is None:
        return Outcome.INVALID_RESULT
    return Outcome.INPUT_REQUIRED


def _error_reply(error: Mapping[str, Any]) -> ServerReply:
    code = error.get("code")
    if not isinstance(code, int):
        return ServerReply(Outcome.INVALID_RESULT)
    message = error.get("message")
    return ServerReply(outcome_for_error_code(code), None, code, message if isinstance(message, str) else None)


def _json_object(body: bytes) -> dict[str, Any] | None:
    if not body:
        return None
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
