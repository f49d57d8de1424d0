"""guarded_desk: an MRTR server behind OAuth, as the SDK's documentation sets one up.

A resource server on the SDK's `TokenVerifier` + `AuthSettings`: `MCPServer(token_verifier=...,
auth=AuthSettings(...))` answers 401 with `WWW-Authenticate` (naming its RFC 9728 metadata,
which the SDK serves) to a round without a valid token, and 403 `insufficient_scope` to one
without `desk`. Tokens are checked by RFC 7662 introspection at the authorization server
(`tests/servers/token_desk.py`), whose answer gives the principal (client, issuer, subject)
the SDK seals every requestState to. Its tool `confirm_refund(order_id)` asks once whether
to refund, then answers.

Run: `python -m tests.servers.guarded_desk --port P` with `GUARDED_DESK_ISSUER=<token_desk URL>`.
"""

from __future__ import annotations

import os
from typing import Any

import httpx2
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity
from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult
from pydantic import AnyHttpUrl
from starlette.types import ASGIApp

from tests.servers import serve_main

ISSUER_ENV = "GUARDED_DESK_ISSUER"
REQUIRED_SCOPE = "desk"

CONFIRM_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {"release": {"type": "boolean", "title": "Refund it?"}},
    "required": ["release"],
}


class IntrospectionVerifier(TokenVerifier):
    """RFC 7662: the authorization server says whether a token is active, whose it is and what it may do."""

    def __init__(self, introspection_url: str) -> None:
        self.introspection_url = introspection_url
        self._http: httpx2.AsyncClient | None = None
        """One client for the server's life (made on its event loop, at the first token): pooled connections."""

    async def verify_token(self, token: str) -> AccessToken | None:
        if self._http is None:
            self._http = httpx2.AsyncClient(timeout=5.0)
        response = await self._http.post(self.introspection_url, data={"token": token})
        claims = response.json() if response.status_code == 200 else {}
        if not claims.get("active"):
            return None
        return AccessToken(token=token, client_id=claims["client_id"], scopes=claims.get("scope", "").split(),
                           expires_at=claims.get("exp"), subject=claims.get("sub"), claims={"iss": claims.get("iss")})


def build_server(port: int) -> MCPServer:
    issuer = os.environ[ISSUER_ENV].rstrip("/")
    settings = AuthSettings(issuer_url=AnyHttpUrl(issuer), resource_server_url=AnyHttpUrl(f"http://127.0.0.1:{port}/mcp"),
                            required_scopes=[REQUIRED_SCOPE], validate_token_resource=False)
    server = MCPServer("guarded-desk", request_state_security=RequestStateSecurity.ephemeral(),
                       token_verifier=IntrospectionVerifier(f"{issuer}/introspect"), auth=settings)

    @server.tool(description="Refund an order, once the person confirms.")
    def confirm_refund(order_id: str, ctx: Context) -> str | InputRequiredResult:
        answer = (ctx.input_responses or {}).get("confirm")
        if ctx.request_state is None or answer is None:
            params = ElicitRequestFormParams(message=f"Refund order {order_id}?", requested_schema=CONFIRM_FORM)
            return InputRequiredResult(input_requests={"confirm": ElicitRequest(params=params)},
                                       request_state="ask=confirm")
        if getattr(answer, "action", None) != "accept":
            return f"Nothing refunded on order {order_id}"
        return f"Refunded order {order_id}"

    return server


def build_app(port: int) -> ASGIApp:
    return build_server(port).streamable_http_app(stateless_http=True, json_response=True)


def main() -> None:
    serve_main(build_app, __doc__.splitlines()[0], knows_its_port=True)


if __name__ == "__main__":
    main()
