"""open_door: a deliberately broken MRTR server that accepts any requestState it is sent back.

What the fuzzer must catch. Its two tools (`open`, `other`) ask one form question on the
first round with a requestState that looks like the SDK's (`v1.` + base64url), and
complete whatever state, of whatever type, the retry carries: edited, cut, re-encoded,
minted by the other tool or for other arguments, replayed, or not a string at all. It
never checks a seal, a binding, an expiry or a once-only record, and logs nothing.

A tiny Starlette handler rather than the SDK's server: the SDK's own boundary refuses
most of these mutants however a tool is written, which is what this server must not do.

Run: `python -m tests.servers.open_door --port P`.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.servers import serve_main

TOOLS = ("open", "other")
QUESTION = {"method": "elicitation/create",
            "params": {"mode": "form", "message": "Go ahead?",
                       "requestedSchema": {"type": "object", "properties": {"go": {"type": "boolean"}},
                                           "required": ["go"]}}}


def build_app() -> Starlette:
    minted = itertools.count(1)

    async def mcp(request: Request) -> JSONResponse:
        message: dict[str, Any] = json.loads(await request.body())
        params = message.get("params") or {}
        if message.get("method") != "tools/call" or params.get("name") not in TOOLS:
            return JSONResponse({"jsonrpc": "2.0", "id": message.get("id"),
                                 "error": {"code": -32601, "message": "no such tool"}})
        if "requestState" in params:  # any state at all, even null: the door is open
            result: dict[str, Any] = {"resultType": "complete",
                                      "content": [{"type": "text", "text": f"done ({params['name']})"}]}
        else:
            state = "v1." + base64.urlsafe_b64encode(os.urandom(4) + next(minted).to_bytes(8, "big")
                                                     + os.urandom(60)).decode().rstrip("=")
            result = {"resultType": "input_required", "inputRequests": {"go": QUESTION}, "requestState": state}
        return JSONResponse({"jsonrpc": "2.0", "id": message.get("id"), "result": result})

    return Starlette(routes=[Route("/mcp", mcp, methods=["POST"])])


def main() -> None:
    serve_main(build_app, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
