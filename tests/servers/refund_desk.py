"""refund_desk: an MRTR server that asks a free-text question the harness cannot guess.

`refund_item(order_id)` asks which SKU of the order to refund, as a plain string (no enum,
as many real servers ask it), then refunds it, or answers the tool error
"order O-1001 has no item '...'" for a SKU the order does not hold. A lead typing from the
schema alone invents SKUs; a scenario's `answers` pins them. Every refund is printed on
stdout (`refunded <order> <sku>`), so a test can read what the leads chose.

Run: `python -m tests.servers.refund_desk --port P` (`REFUND_DESK_KEY` shares the sealing key).
"""

from __future__ import annotations

import os
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.request_state import RequestStateSecurity
from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult
from starlette.types import ASGIApp

from tests.servers import serve_main

KEY_ENV = "REFUND_DESK_KEY"

ORDERS: dict[str, list[str]] = {"O-1001": ["mug", "tee"], "O-1002": ["tee", "mug", "cap"]}

SKU_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {"sku": {"type": "string", "title": "SKU", "maxLength": 24}},
    "required": ["sku"],
}


def build_server() -> MCPServer:
    key = os.environ.get(KEY_ENV)
    security = RequestStateSecurity(keys=[key]) if key else RequestStateSecurity.ephemeral()
    server = MCPServer("refund-desk", request_state_security=security)

    @server.tool(description="Refund one item of an order: asks which SKU.")
    def refund_item(order_id: str, ctx: Context) -> str | InputRequiredResult:
        items = ORDERS.get(order_id)
        if items is None:
            raise ToolError(f"there is no order {order_id}")
        answer = (ctx.input_responses or {}).get("item")
        if ctx.request_state is None or answer is None:
            params = ElicitRequestFormParams(message=f"Which item of order {order_id} should be refunded?",
                                             requested_schema=SKU_FORM)
            return InputRequiredResult(input_requests={"item": ElicitRequest(params=params)}, request_state="ask=sku")
        if getattr(answer, "action", None) != "accept":
            return f"Nothing refunded on order {order_id}"
        sku = (getattr(answer, "content", None) or {}).get("sku")
        if sku not in items:
            raise ToolError(f"order {order_id} has no item {sku!r}")
        print(f"refunded {order_id} {sku}", flush=True)
        return f"Refunded {sku} of order {order_id}"

    return server


def build_app() -> ASGIApp:
    return build_server().streamable_http_app(stateless_http=True, json_response=True)


def main() -> None:
    serve_main(build_app, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
