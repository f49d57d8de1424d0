"""A replica as an OAuth resource server: JWT access tokens verified locally, and a scope per tool.

The replica hands the SDK a `TokenVerifier` and `AuthSettings`; the SDK then answers a
request without a valid token 401 with `WWW-Authenticate: Bearer ... resource_metadata=...`
and serves the RFC 9728 protected-resource metadata that points a client at the
authorization server (`harness.shop.authserver`), so a client finds the token endpoint by
discovery. With auth on, the SDK's default principal binding seals every requestState to
the token's (client, issuer, subject): the shop does not override it.

Tokens are RFC 9068 JWTs checked against the authorization server's JWKS, here, with no
network call per round (why: see `harness.shop.authserver`). What a JWT cannot carry,
news after it was issued, comes from the server's revocation feed, polled every second
in the background; the keys are re-read on the same beat (a new signing key after the
server restarts). While the server is unreachable the replica keeps the keys and the feed
it has: rounds go on, as they would behind a hosted identity provider that is down.

`issue_refund` needs `refunds:write`. The SDK's `required_scopes` applies to the whole
endpoint, so the scope per tool is checked by `ScopeGate`, an ASGI layer inside the SDK's
authentication: a tools/call for a gated tool (read from the `Mcp-Method` and `Mcp-Name`
headers, which the SDK holds equal to the body) by a token without the scope is answered
HTTP 403 `insufficient_scope`, with `WWW-Authenticate` naming the scope, as RFC 6750 3.1
says. The tool checks the scope again itself (`require_scope`), for a request that came by
the 2025 path, which carries no such headers: that one gets a tool error.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from typing import Any

import httpx
import jwt
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver.exceptions import ToolError

logger = logging.getLogger("harness.shop.auth")

POLL_SECONDS = 1.0
"""How often a replica re-reads the authorization server's keys and revocation feed."""

VERIFIED_CACHE = 10_000
"""How many verified tokens a replica remembers (their claims), so a lead's next round skips the signature check."""

TOOL_SCOPES: dict[str, str] = {"issue_refund": "refunds:write"}
"""The scope each gated tool needs: the refund policy lets only support leads issue refunds."""


def _fingerprint(claims: dict[str, Any]) -> str:
    """What a log line names a token by: its subject and the first characters of its jti, never the token."""
    return f"sub={claims.get('sub')} jti={str(claims.get('jti', ''))[:8]}"


class JwtVerifier:
    """The SDK's `TokenVerifier` for the shop's tokens: signature, issuer, audience, expiry, then the feed."""

    def __init__(self, issuer: str, audience: str, server_url: str | None = None) -> None:
        self.issuer = issuer
        self.audience = audience
        self.server_url = (server_url or issuer).rstrip("/")
        """Where this replica reaches the authorization server (in a container network, not the issuer URL)."""
        self.keys: dict[str, Any] = {}
        self._jwks: dict[str, Any] | None = None
        self.feed: dict[str, Any] = {"revoked_before": {}, "withdrawn": {}, "drop_subject": 0.0}
        self._poller: asyncio.Task[None] | None = None
        self._random = random.Random()
        self._verified: dict[str, dict[str, Any]] = {}
        """Claims of tokens whose signature held, by token: a lead sends the same token every round until it is
        refreshed, and an ES256 check costs about 0.15 ms of CPU. Expiry and the feed are checked every time."""
        self._load_keys_at_start()

    def _load_keys_at_start(self) -> None:
        """The keys and the feed, read before the replica serves (as a resource server loads its JWKS at boot):
        else its first token, arriving while the authorization server is down, would find no key to check it by.
        An authorization server that cannot be read now leaves them to the poller."""
        try:
            with httpx.Client(timeout=2.0) as http:
                jwks = http.get(f"{self.server_url}/jwks").raise_for_status().json()
                self.keys, self._jwks = {key["kid"]: jwt.PyJWK(key) for key in jwks["keys"]}, jwks
                self.feed = http.get(f"{self.server_url}/revocations").raise_for_status().json()
        except (httpx.HTTPError, ValueError, KeyError, jwt.PyJWKError) as exc:
            logger.warning("authorization server not read at start (%s); its keys are polled for", type(exc).__name__)

    async def refresh(self, http: httpx.AsyncClient) -> None:
        """Read the keys and the feed once; what cannot be read is kept as it was."""
        try:
            jwks = (await http.get(f"{self.server_url}/jwks")).raise_for_status().json()
            if jwks != self._jwks:  # a key object is made only when the set changed (a restart's new key)
                self.keys, self._jwks = {key["kid"]: jwt.PyJWK(key) for key in jwks["keys"]}, jwks
            self.feed = (await http.get(f"{self.server_url}/revocations")).raise_for_status().json()
        except (httpx.HTTPError, ValueError, KeyError, jwt.PyJWKError) as exc:
            logger.debug("authorization server not read (%s); keeping the keys and feed held", type(exc).__name__)

    async def _poll(self) -> None:
        async with httpx.AsyncClient(timeout=2.0) as http:
            while True:
                await self.refresh(http)
                await asyncio.sleep(POLL_SECONDS)

    async def _started(self) -> None:
        if self._poller is None:
            self._poller = asyncio.create_task(self._poll())
        if not self.keys:
            async with httpx.AsyncClient(timeout=2.0) as http:
                await self.refresh(http)

    async def verify_token(self, token: str) -> AccessToken | None:
        await self._started()
        claims = self._verified.get(token)
        if claims is not None and claims["_kid"] not in self.keys:  # signed by a key the server no longer publishes
            claims = None
        if claims is not None and float(claims["exp"]) <= time.time():
            logger.warning("bearer token refused: expired %s", _fingerprint(claims))
            return None
        if claims is None:
            claims = self._decode(token)
            if claims is None:
                return None
            if len(self._verified) >= VERIFIED_CACHE:
                self._verified.clear()
            self._verified[token] = claims = {**claims, "_kid": str(jwt.get_unverified_header(token).get("kid"))}
        subject = str(claims["sub"])
        cutoff = self.feed.get("revoked_before", {}).get(subject)
        if cutoff is not None and float(claims["iat"]) <= float(cutoff):
            logger.warning("bearer token refused: revoked %s", _fingerprint(claims))
            return None
        withdrawn = set(self.feed.get("withdrawn", {}).get(subject, ()))
        scopes = [scope for scope in str(claims.get("scope", "")).split() if scope not in withdrawn]
        drop = float(self.feed.get("drop_subject", 0.0))
        if drop > 0 and self._random.random() < drop:
            logger.warning("bearer token verified without its subject (subject-drift) %s", _fingerprint(claims))
            subject_seen: str | None = None
        else:
            subject_seen = subject
        return AccessToken(token=token, client_id=str(claims["client_id"]), scopes=scopes,
                           expires_at=int(claims["exp"]), resource=self.audience, subject=subject_seen,
                           claims={"iss": claims["iss"], "jti": claims.get("jti")})

    def _decode(self, token: str) -> dict[str, Any] | None:
        """The token's claims if its signature, issuer, audience and times hold; None (and why, logged) if not."""
        try:
            kid = str(jwt.get_unverified_header(token).get("kid"))
            key = self.keys.get(kid)
            if key is None:
                logger.warning("bearer token refused: unknown signing key %s", str(kid)[:8])
                return None
            return jwt.decode(token, key=key, algorithms=["ES256"], audience=self.audience, issuer=self.issuer,
                              options={"require": ["exp", "iat", "sub", "iss", "aud", "client_id"]})
        except jwt.ExpiredSignatureError:
            logger.warning("bearer token refused: expired %s", _fingerprint(_unverified(token)))
        except jwt.InvalidAudienceError:
            logger.warning("bearer token refused: audience %s", _fingerprint(_unverified(token)))
        except jwt.InvalidIssuerError:
            logger.warning("bearer token refused: issuer %s", _fingerprint(_unverified(token)))
        except jwt.InvalidTokenError as exc:
            logger.warning("bearer token refused: invalid (%s)", type(exc).__name__)
        return None


def _unverified(token: str) -> dict[str, Any]:
    try:
        return jwt.decode(token, options={"verify_signature": False})
    except jwt.InvalidTokenError:
        return {}


def require_scope(tool: str) -> None:
    """In a tool: a tool error when the caller's token lacks the tool's scope (the 2025 path's backstop)."""
    needed = TOOL_SCOPES.get(tool)
    token = get_access_token()
    if needed is not None and token is not None and needed not in token.scopes:
        logger.warning("tool %s refused: insufficient_scope, needs %s (sub=%s)", tool, needed, token.subject)
        raise ToolError(f"{tool} needs the {needed} scope, which this token does not have.")


def _method_and_name(headers: Any) -> tuple[bytes | None, str]:
    """The `Mcp-Method` and `Mcp-Name` header values of an ASGI scope's headers (names are lower-case there)."""
    method, name = None, ""
    for key, value in headers:
        if key == b"mcp-method":
            method = value
        elif key == b"mcp-name":
            name = value.decode("latin-1")
    return method, name


class ScopeGate:
    """ASGI layer, inside the SDK's authentication: 403 insufficient_scope for a gated tool called without its scope."""

    def __init__(self, app: Any, resource_metadata_url: str) -> None:
        self.app = app
        self.resource_metadata_url = resource_metadata_url

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        user = scope.get("user") if scope["type"] == "http" else None
        if isinstance(user, AuthenticatedUser):
            method, tool = _method_and_name(scope.get("headers", ()))
            if method == b"tools/call":
                needed = TOOL_SCOPES.get(tool)
                if needed is not None and needed not in user.scopes:
                    logger.warning("tool %s refused: insufficient_scope, needs %s (sub=%s)", tool, needed,
                                   user.access_token.subject)
                    await self._forbid(send, needed)
                    return
        await self.app(scope, receive, send)

    async def _forbid(self, send: Any, needed: str) -> None:
        description = f"Required scope: {needed}"
        challenge = (f'Bearer error="insufficient_scope", scope="{needed}", error_description="{description}", '
                     f'resource_metadata="{self.resource_metadata_url}"')
        body = json.dumps({"error": "insufficient_scope", "error_description": description}).encode()
        await send({"type": "http.response.start", "status": 403,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", challenge.encode())]})
        await send({"type": "http.response.body", "body": body})


def auth_settings(issuer: str, resource_url: str) -> Any:
    """The SDK's `AuthSettings` for a replica: its issuer and its own resource URL (RFC 9728's `resource`).

    `validate_token_resource` is off because the verifier checks the token's `aud` itself:
    every replica of one deployment shares the audience, while each has its own URL.
    """
    from mcp.server.auth.settings import AuthSettings

    # validated from strings, so a path-less issuer keeps its exact form (no trailing slash): RFC 8414 issuers
    # compare as strings, and the metadata's must be the tokens' `iss`
    return AuthSettings.model_validate({"issuer_url": issuer, "resource_server_url": resource_url,
                                        "validate_token_resource": False})


def gate_scopes(app: Any, resource_url: str) -> None:
    """Put `ScopeGate` innermost in the SDK app's middleware (after authentication), before its first request."""
    from mcp.server.auth.routes import build_resource_metadata_url
    from starlette.middleware import Middleware

    app.user_middleware.append(Middleware(ScopeGate, resource_metadata_url=str(build_resource_metadata_url(
        resource_url))))  # type: ignore[arg-type]

