"""token_desk: an OAuth authorization server for the tests, on the SDK's own auth pieces.

RFC 8414 metadata through the SDK's `MetadataHandler` (built by `build_metadata`), client
authentication through the SDK's `ClientAuthenticator` (`client_secret_basic` or `_post`).
The SDK's token handler serves only the authorization-code, refresh and ID-JAG grants, so
the token route is a small Starlette handler for the client-credentials grant (RFC 6749
section 4.4): an opaque token a request, subject `<client_id>/lead-<n>` when the request
carries `lead=<n>`. Resource servers check tokens by RFC 7662 introspection (`/introspect`).
For the tests: `POST /forget` drops every token issued so far (a revocation of them all), and
`TOKEN_DESK_ISSUED=<file>` appends every token issued to that file, so a test can look for
them where they must not be.

Run: `python -m tests.servers.token_desk --port P` with `TOKEN_DESK_CLIENT=id:secret`
(`TOKEN_DESK_LIFETIME` seconds, default 3600; `TOKEN_DESK_SCOPES`, space-separated).
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass

from mcp.server.auth.handlers.metadata import MetadataHandler
from mcp.server.auth.handlers.token import TokenErrorResponse
from mcp.server.auth.json_response import PydanticJSONResponse
from mcp.server.auth.middleware.client_auth import AuthenticationError, ClientAuthenticator
from mcp.server.auth.routes import build_metadata
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.servers import serve_main

CLIENT_ENV = "TOKEN_DESK_CLIENT"
LIFETIME_ENV = "TOKEN_DESK_LIFETIME"
ISSUED_ENV = "TOKEN_DESK_ISSUED"
SCOPES_ENV = "TOKEN_DESK_SCOPES"


@dataclass
class Issued:
    client_id: str
    scopes: list[str]
    expires_at: int
    subject: str


class OneClient:
    """The provider half `ClientAuthenticator` needs: the one client this server knows."""

    def __init__(self, client_id: str, secret: str) -> None:
        self.client = OAuthClientInformationFull(client_id=client_id, client_secret=secret,
                                                 token_endpoint_auth_method="client_secret_basic",
                                                 grant_types=["client_credentials"], redirect_uris=None)

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.client if client_id == self.client.client_id else None


def build_app(port: int) -> Starlette:
    client_id, _, secret = os.environ[CLIENT_ENV].partition(":")
    lifetime = int(os.environ.get(LIFETIME_ENV, "3600"))
    scopes = os.environ.get(SCOPES_ENV, "desk").split()
    issuer = AnyHttpUrl(f"http://127.0.0.1:{port}")
    metadata = build_metadata(issuer, None, ClientRegistrationOptions(valid_scopes=scopes), RevocationOptions())
    metadata.grant_types_supported = ["client_credentials"]
    metadata.introspection_endpoint = AnyHttpUrl(f"{issuer}introspect")
    authenticator = ClientAuthenticator(OneClient(client_id, secret))  # type: ignore[arg-type]
    issued: dict[str, Issued] = {}

    async def token(request: Request) -> Response:
        form = await request.form()
        try:
            client = await authenticator.authenticate_request(request)
        except AuthenticationError as exc:
            return PydanticJSONResponse(TokenErrorResponse(error="invalid_client", error_description=str(exc)),
                                        status_code=401)
        if form.get("grant_type") != "client_credentials":
            return PydanticJSONResponse(TokenErrorResponse(error="unsupported_grant_type"), status_code=400)
        asked = str(form.get("scope") or " ".join(scopes)).split()
        if any(scope not in scopes for scope in asked):
            return PydanticJSONResponse(TokenErrorResponse(error="invalid_scope"), status_code=400)
        lead = form.get("lead")
        value = secrets.token_urlsafe(32)
        issued[value] = Issued(str(client.client_id), asked, int(time.time()) + lifetime,
                               f"{client.client_id}/lead-{lead}" if lead is not None else str(client.client_id))
        if os.environ.get(ISSUED_ENV):
            with open(os.environ[ISSUED_ENV], "a") as kept:
                kept.write(f"{value}\n")
        return PydanticJSONResponse(OAuthToken(access_token=value, expires_in=lifetime, scope=" ".join(asked)))

    async def introspect(request: Request) -> Response:
        form = await request.form()
        grant = issued.get(str(form.get("token")))
        if grant is None or grant.expires_at < time.time():
            return JSONResponse({"active": False})
        return JSONResponse({"active": True, "client_id": grant.client_id, "scope": " ".join(grant.scopes),
                             "exp": grant.expires_at, "sub": grant.subject, "iss": str(issuer)})

    async def forget(request: Request) -> Response:
        issued.clear()
        return JSONResponse({"forgotten": True})

    return Starlette(routes=[
        Route("/forget", forget, methods=["POST"]),
        Route("/.well-known/oauth-authorization-server", MetadataHandler(metadata).handle, methods=["GET"]),
        Route("/token", token, methods=["POST"]),
        Route("/introspect", introspect, methods=["POST"]),
    ])


def main() -> None:
    serve_main(build_app, __doc__.splitlines()[0], knows_its_port=True)


if __name__ == "__main__":
    main()
