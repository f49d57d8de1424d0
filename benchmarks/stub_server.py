"""stub: the cheapest MRTR server this repository can run, so a benchmark can make the load process the limit.

How many flows one load process drives can only be measured against servers that are
not the limit. On a 2-core machine every SDK-based server is (the garden costs about
2 ms of CPU per round, a shop replica 5-8 ms, the harness about 1-1.5 ms), so this
server answers the 2026-07-28 wire by hand on plain asyncio at a few tens of µs per
round. It is a load target, not a reference: it checks what the harness must get right
(the routing headers, the `_meta` envelope, the elicitation capability, the echoed
`requestState`, the answer key) and nothing else; it does not seal its state and it
has one tool.

`confirm` (argument `item`) asks one form question (`release`, a boolean) and completes
on the retry that carries the answer and the state, like the shop's `issue_refund`
above the limit: two rounds. Any tool name is served the same way.

With `--reject FRACTION`, a seeded share of the continuation rounds (those that carry a
`requestState`) is refused as the SDK refuses a state: HTTP 400, JSON-RPC -32602
`Invalid or expired requestState`, and one WARNING line in the shop's replicas' format
with the SDK's message (`requestState rejected on tools/call: expired`) on `--log PATH`
(line-buffered), so a run that follows that file reconciles every refusal it saw.

Run: `python -m benchmarks.stub_server --port P [--reject FRACTION --seed N --log PATH --replica r1]`
(HTTP/1.1 keep-alive, JSON answers, 127.0.0.1).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import time
from pathlib import Path
from typing import IO, Any

import orjson

PROTOCOL_VERSION = "2026-07-28"
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
STATE_PREFIX = "stub1."
FORM = {
    "type": "object",
    "properties": {"release": {"type": "boolean", "title": "Release it"}},
    "required": ["release"],
}
MAX_HEAD = 65536
REJECTED_REASON = "expired"
"""The reason the stub's refusals log: one the harness knows (`harness.vocabulary.REASONS`), and a state
nobody tampered with."""


class Rejections:
    """Which continuation rounds to refuse (a seeded draw of `fraction` of them), and the log line of each."""

    def __init__(self, fraction: float, seed: int, replica: str, log: IO[str] | None = None) -> None:
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"the share to reject must be between 0 and 1, not {fraction}")
        self.fraction = fraction
        self.replica = replica
        self.log = log
        self._draw = random.Random(seed).random

    def refuse(self) -> bool:
        """Whether to refuse this continuation round; a refusal is logged first, as the SDK does."""
        if self.fraction <= 0.0 or self._draw() >= self.fraction:
            return False
        if self.log is not None:
            self.log.write(rejection_line(self.replica, time.time()))
        return True


def rejection_line(replica: str, at: float) -> str:
    """The SDK's rejection WARNING as the shop's replicas print it (`harness.shop.replica.configure_logging`)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 1000):03d}Z"
    return (f"{stamp} WARNING replica={replica} mcp.server.request_state: "
            f"requestState rejected on tools/call: {REJECTED_REASON}\n")


class Stub(asyncio.Protocol):
    """One connection: parse requests as bytes arrive, answer each in order."""

    states = itertools.count(1)
    rejections: Rejections | None = None

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].split(b"\r\n")
            headers = {}
            for line in head[1:]:
                name, _, value = line.partition(b":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get(b"content-length", b"0"))
            if len(self.buffer) < end + 4 + length:
                if end > MAX_HEAD:
                    self._send(400, {"error": "head too long"}, close=True)
                return  # the body is still coming
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            status, answer = respond(head[0], headers, body, Stub.rejections)
            self._send(status, answer, close=headers.get(b"connection", b"").lower() == b"close")

    def _send(self, status: int, answer: dict[str, Any], *, close: bool) -> None:
        assert self.transport is not None
        body = orjson.dumps(answer)
        reason = b"OK" if status == 200 else b"Bad Request"
        self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s"
                             % (status, reason, len(body), b"connection: close\r\n" if close else b"", body))
        if close:
            self.transport.close()


def respond(request_line: bytes, headers: dict[bytes, bytes], body: bytes,
            rejections: Rejections | None = None) -> tuple[int, dict[str, Any]]:
    """One `tools/call` round: (HTTP status, JSON-RPC message); `rejections` may refuse a continuation round."""
    if not request_line.startswith(b"POST "):
        return 400, {"error": "POST only"}
    try:
        message = orjson.loads(body)
        request_id, params = message["id"], message["params"]
        tool, meta = params["name"], params.get("_meta") or {}
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return 400, error(None, -32700, "Parse error")
    if (headers.get(b"mcp-protocol-version") != PROTOCOL_VERSION.encode()
            or headers.get(b"mcp-method") != b"tools/call" or headers.get(b"mcp-name") != tool.encode()
            or meta.get(META_VERSION) != PROTOCOL_VERSION):
        return 400, error(request_id, -32020, "Header mismatch")
    capabilities = meta.get(META_CAPABILITIES)
    if not isinstance(capabilities, dict) or "form" not in (capabilities.get("elicitation") or {}):
        return 400, error(request_id, -32021, "Client did not declare the form elicitation capability")
    state = params.get("requestState")
    if state is None:
        item = (params.get("arguments") or {}).get("item", "?")
        question = {"method": "elicitation/create",
                    "params": {"mode": "form", "message": f"Release {item}?", "requestedSchema": FORM}}
        return 200, result(request_id, {"resultType": "input_required", "inputRequests": {"confirm": question},
                                        "requestState": f"{STATE_PREFIX}{next(Stub.states)}"})
    if not isinstance(state, str) or not state.startswith(STATE_PREFIX) \
            or (rejections is not None and rejections.refuse()):
        return 400, error(request_id, -32602, "Invalid or expired requestState")
    answer = (params.get("inputResponses") or {}).get("confirm") or {}
    released = answer.get("action") == "accept" and (answer.get("content") or {}).get("release") is True
    text = "released" if released else "held"
    return 200, result(request_id, {"content": [{"type": "text", "text": text}],
                                    "structuredContent": {"status": text}})


def result(request_id: Any, value: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def error(request_id: Any, code: int, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": text}}


async def serve(port: int) -> None:
    """Serve on 127.0.0.1:`port` until cancelled (refusing as `Stub.rejections` says)."""
    server = await asyncio.get_running_loop().create_server(Stub, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--reject", type=float, default=0.0, metavar="FRACTION",
                        help="refuse this share of the continuation rounds with -32602 (default 0)")
    parser.add_argument("--seed", type=int, default=0, help="the seed of the draw of which rounds to refuse")
    parser.add_argument("--log", type=Path, default=None, help="where each refusal's WARNING line goes")
    parser.add_argument("--replica", default="r1", help="the replica name on those lines")
    args = parser.parse_args()
    log = open(args.log, "w", buffering=1) if args.log is not None else None  # noqa: SIM115 - lives with the server
    Stub.rejections = Rejections(args.reject, args.seed, args.replica, log) if args.reject > 0 else None
    try:
        asyncio.run(serve(args.port))
    except KeyboardInterrupt:
        pass
    finally:
        if log is not None:
            log.close()


if __name__ == "__main__":
    main()
