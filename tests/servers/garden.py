"""garden: a small MRTR server for the client's tests (deliberately not the shop).

Each tool pins one behaviour of the 2026-07-28 wire the client must handle:

* `plan_bed` asks two different form questions in two rounds, then completes (3 rounds);
* `water` completes in one round; `flaky` is a tool error (`isError`);
* `frozen` raises a JSON-RPC error (-32603, HTTP 200);
* `slow` sleeps (timeouts), `chatty` emits a notification first (forces SSE mode);
* `shed` answers once with a state-only `InputRequiredResult` (load shedding);
* `loop_forever` asks again every round (the client's round cap);
* `name_bed` asks through an SDK resolver, so the SDK itself enforces the capability (-32021).

Replicas share the sealing key through `GARDEN_REQUEST_STATE_KEY` (ephemeral when unset),
so a retry can land on any of them. With `GARDEN_RECORD=<file>` every HTTP request is
appended to that file as a JSON line (headers, body, status), for wire-level comparisons.

Run: `python -m tests.servers.garden --port P [--sse] [--name garden]`.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Annotated, Any

import anyio
import uvicorn
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.request_state import RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    ClientCapabilities,
    ElicitationCapability,
    ElicitRequest,
    ElicitRequestFormParams,
    FormElicitationCapability,
    InputRequiredResult,
    MissingRequiredClientCapabilityErrorData,
    ProgressNotification,
    ProgressNotificationParams,
)
from pydantic import BaseModel, Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send

KEY_ENV = "GARDEN_REQUEST_STATE_KEY"
TTL_ENV = "GARDEN_STATE_TTL"
RECORD_ENV = "GARDEN_RECORD"

SOILS = ["loam", "clay", "sand", "silt", "peat", "chalk"]

SOIL_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {"soil": {"type": "string", "title": "Soil", "enum": SOILS}},
    "required": ["soil"],
}
SOWING_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "date": {"type": "string", "format": "date", "title": "Sowing date"},
        "rows": {"type": "integer", "minimum": 1, "maximum": 20, "title": "Rows"},
        "note": {"type": "string", "maxLength": 80, "title": "Note"},
    },
    "required": ["date", "rows"],
}


class BedName(BaseModel):
    name: str = Field(max_length=40)


def ask_bed_name(bed_id: str) -> Elicit[BedName]:
    """Resolver: the SDK renders the question, and refuses (-32021) a client that can't show forms."""
    return Elicit(f"What should bed {bed_id} be called?", BedName)


def build_server(name: str = "garden") -> MCPServer:
    """The garden server, sealing with the shared key from the environment."""
    key = os.environ.get(KEY_ENV)
    ttl = float(os.environ.get(TTL_ENV, "600"))
    security = RequestStateSecurity(keys=[key], ttl=ttl) if key else RequestStateSecurity.ephemeral(ttl=ttl)
    server = MCPServer(name, request_state_security=security)

    @server.tool(description="Plan a bed: asks for the soil, then the sowing, then returns the plan.")
    def plan_bed(bed_id: str, ctx: Context) -> str | InputRequiredResult:
        _require_form_elicitation(ctx)
        state = ctx.request_state
        answers = ctx.input_responses or {}
        if state is None or not state.startswith(("ask=soil", "soil=")):
            return _ask("soil", f"Which soil is bed {bed_id}?", SOIL_FORM, "ask=soil")
        if state == "ask=soil":
            soil = _accepted(answers, "soil")
            if soil is None or soil.get("soil") not in SOILS:
                return _ask("soil", f"Which soil is bed {bed_id}?", SOIL_FORM, "ask=soil")
            return _ask("sowing", f"When and how many rows for bed {bed_id}?", SOWING_FORM, f"soil={soil['soil']}")
        sowing = _accepted(answers, "sowing")
        if sowing is None:
            raise ToolError(f"Bed {bed_id} was not planned: nobody gave a sowing date.")
        return f"Bed {bed_id}: {state[5:]}, sow {sowing['date']} in {sowing['rows']} rows"

    @server.tool(description="Water a bed (one round).")
    def water(bed_id: str) -> str:
        return f"Bed {bed_id} watered"

    @server.tool(description="Sleep, then answer (timeouts; long handlers).")
    async def slow(seconds: float) -> str:
        await anyio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool(description="Send a progress notification, then answer (forces SSE in SSE mode).")
    async def chatty(bed_id: str, ctx: Context) -> str:
        notification = ProgressNotification(params=ProgressNotificationParams(progress_token="garden", progress=1.0))
        await ctx.request_context.session.send_notification(notification, related_request_id=ctx.request_id)
        await anyio.sleep(0.05)
        return f"Bed {bed_id} inspected"

    @server.tool(description="Shed load once with a state-only answer, then complete.")
    def shed(bed_id: str, ctx: Context) -> str | InputRequiredResult:
        if ctx.request_state is None:
            return InputRequiredResult(request_state="shed=1")
        return f"Bed {bed_id} weeded after a wait"

    @server.tool(description="Ask again on every round.")
    def loop_forever(bed_id: str, ctx: Context) -> InputRequiredResult:
        n = int(ctx.request_state[2:]) + 1 if ctx.request_state else 1
        return _ask("again", f"Round {n}: really bed {bed_id}?", {"type": "object", "properties": {}}, f"n={n}")

    @server.tool(description="Always a tool error.")
    def flaky(bed_id: str) -> str:
        raise ToolError(f"The hose burst at bed {bed_id}")

    @server.tool(description="Always a JSON-RPC internal error.")
    def frozen(bed_id: str) -> str:
        raise MCPError(code=INTERNAL_ERROR, message="The ground is frozen")

    @server.tool(description="Name a bed, asking through an SDK resolver.")
    def name_bed(bed_id: str, name: Annotated[BedName, Resolve(ask_bed_name)]) -> str:
        return f"Bed {bed_id} is called {name.name}"

    return server


def _ask(key: str, message: str, schema: dict[str, Any], state: str) -> InputRequiredResult:
    params = ElicitRequestFormParams(message=message, requested_schema=schema)
    return InputRequiredResult(input_requests={key: ElicitRequest(params=params)}, request_state=state)


def _accepted(answers: dict[str, Any], key: str) -> dict[str, Any] | None:
    answer = answers.get(key)
    if answer is None or getattr(answer, "action", None) != "accept":
        return None
    return getattr(answer, "content", None) or {}


def _require_form_elicitation(ctx: Context) -> None:
    """Refuse, as the SDK's resolvers do, to ask a client that declared no form elicitation."""
    elicitation = ctx.client_capabilities.elicitation if ctx.client_capabilities else None
    if elicitation is not None and (elicitation.form is not None or elicitation.url is None):
        return
    required = ClientCapabilities(elicitation=ElicitationCapability(form=FormElicitationCapability()))
    data = MissingRequiredClientCapabilityErrorData(required_capabilities=required)
    raise MCPError(
        code=MISSING_REQUIRED_CLIENT_CAPABILITY,
        message="Client did not declare the form elicitation capability",
        data=data.model_dump(by_alias=True, mode="json", exclude_none=True),
    )


class Recorder:
    """ASGI middleware appending each HTTP request to a JSON-lines file.

    One line per request: method, path, the client's address (its port tells which
    connection carried the request), headers, body, the response status and body.
    """

    def __init__(self, app: ASGIApp, path: str) -> None:
        self.app = app
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        replayed = False
        status: list[int] = []
        response: list[bytes] = []

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            elif message["type"] == "http.response.body":
                response.append(message.get("body", b""))
                if not message.get("more_body", False):
                    self._write(scope, body, status, response)  # before the client can see the end
            await send(message)

        await self.app(scope, replay, watch)

    def _write(self, scope: Scope, body: bytes, status: list[int], response: list[bytes]) -> None:
        line = {
            "method": scope["method"],
            "path": scope["path"],
            "client": list(scope["client"]) if scope.get("client") else None,
            "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]],
            "body": body.decode("utf-8", "replace"),
            "status": status[0] if status else None,
            "response": b"".join(response).decode("utf-8", "replace"),
        }
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")


def build_app(*, sse: bool = False, name: str = "garden") -> ASGIApp:
    """The stateless Streamable HTTP app; SSE mode (`json_response=False`) is the SDK's default."""
    app: ASGIApp = build_server(name).streamable_http_app(stateless_http=True, json_response=not sse)
    record = os.environ.get(RECORD_ENV)
    return Recorder(app, record) if record else app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--sse", action="store_true", help="SSE mode (json_response=False)")
    parser.add_argument("--name", default="garden", help="server name (the sealing audience)")
    args = parser.parse_args()
    uvicorn.run(build_app(sse=args.sse, name=args.name), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
