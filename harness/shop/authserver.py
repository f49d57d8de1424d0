"""The shop's OAuth authorization server: client-credentials tokens, one subject per lead, in its own process.

`mrtr-harness shop auth-server` (or `python -m harness.shop.authserver`). It issues
RFC 6749 4.4 client-credentials tokens to one confidential client (client_secret_basic
or client_secret_post), as RFC 9068 JWT access tokens signed with an ES256 key it makes
at start, and serves:

- `/.well-known/oauth-authorization-server`: RFC 8414 metadata (the SDK's `OAuthMetadata`,
  plus `jwks_uri`), which a client reaches by discovery from a replica's 401;
- `/token`: the grant. An extra form parameter `lead=<n>` (0-based) asks for lead n's
  token: its `sub` is `<client_id>/lead-<n>` (without it, the client id), so every
  simulated support lead is its own principal, as a person signing in would be;
- `/jwks`: the public keys the replicas verify tokens against, locally;
- `/revocations`: what the replicas poll every second to learn what a JWT cannot say
  by itself (see below).

Why JWTs verified locally against the JWKS, not RFC 7662 introspection: it is what a
hosted identity provider (Auth0, Entra ID, Okta, Keycloak) gives a resource server, and
it keeps the authorization server off the round's hot path: a replica verifies a
signature, it does not make a network call per round. So an outage of the authorization
server breaks only token requests (refreshes), and rounds carry on with valid tokens
until they expire. What a self-contained token cannot carry is news after it was issued:
a revocation, or a scope withdrawn. Here the replicas poll `/revocations` every second
(subjects whose tokens issued before a time are revoked, scopes withdrawn per subject).
A real deployment does one of: short token lifetimes (minutes) and accepts the window;
a revocation feed or event push like this one; or introspection for the few high-value
calls only. The feed also carries the harness's `subject-drift` fault (a share of
verifications that drop the subject), clearly the harness's, not OAuth's.

The admin interface, on its own 127.0.0.1 socket (`--admin-port`) and nowhere else, is
for the harness's chaos actions: token lifetime, revoke, scope loss, refuse (down), drift,
reset. Every figure it returns is a count or a lead number, never a token or the secret.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hmac
import json
import logging
import os
import random
import secrets
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_plus

from harness.errors import ExitCode

if TYPE_CHECKING:  # Starlette is imported where the server is built: `mrtr-harness` parses its options without it
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response

logger = logging.getLogger("harness.shop.authserver")

METADATA_PATH = "/.well-known/oauth-authorization-server"
REVOCATIONS_PATH = "/revocations"
MAX_LEAD = 1_000_000
"""The highest lead number a token request may name (the scenario's `principals` is at most 100,000)."""


@dataclass
class AuthPolicy:
    """The authorization server's state that the admin interface changes, and what it has issued."""

    client_id: str
    secret: str
    issuer: str
    audience: str
    scopes: list[str]
    lifetime: float
    default_scopes: list[str] = field(default_factory=list)
    short_lifetime: float | None = None
    """token-expiry: while set, tokens are issued with this lifetime instead."""
    down: bool = False
    """auth-down: every public route refuses (503 temporarily_unavailable) while set."""
    drop_subject: float = 0.0
    """subject-drift: the share of the replicas' verifications that drop the subject."""
    revoked_before: dict[str, float] = field(default_factory=dict)
    """revoke: tokens of this subject issued at or before this time are revoked."""
    withdrawn: dict[str, list[str]] = field(default_factory=dict)
    """scope-loss: the scopes each subject no longer has."""
    subjects: dict[str, float] = field(default_factory=dict)
    """Every subject a token was issued to, with the time of its latest token."""
    issued: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    reads_refused: int = 0
    """Reads of the public routes (keys, feed, metadata) refused while down: the replicas' failed polls."""

    def subject(self, lead: int | None) -> str:
        return self.client_id if lead is None else f"{self.client_id}/lead-{lead}"

    def effective_lifetime(self) -> float:
        return self.short_lifetime if self.short_lifetime is not None else self.lifetime

    def refuse(self, error: str) -> None:
        self.refused[error] = self.refused.get(error, 0) + 1

    def feed(self) -> dict[str, Any]:
        """What the replicas poll: revocations, withdrawn scopes, and the drift fault."""
        return {"revoked_before": self.revoked_before, "withdrawn": self.withdrawn,
                "drop_subject": self.drop_subject}


class Signer:
    """The ES256 key the server signs with, made at start; its public half is the JWKS."""

    def __init__(self) -> None:
        import jwt
        from cryptography.hazmat.primitives.asymmetric import ec

        self._key = ec.generate_private_key(ec.SECP256R1())
        self.kid = secrets.token_hex(8)
        public = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self._key.public_key()))
        self.jwks = {"keys": [{**public, "kid": self.kid, "use": "sig", "alg": "ES256"}]}

    def sign(self, claims: dict[str, Any]) -> str:
        import jwt

        return jwt.encode(claims, self._key, algorithm="ES256", headers={"kid": self.kid, "typ": "at+jwt"})


class TokenRefused(Exception):
    """A token request the server answers with an RFC 6749 5.2 error."""

    def __init__(self, error: str, description: str, status: int = 400) -> None:
        super().__init__(description)
        self.error, self.description, self.status = error, description, status


def _client_credentials(request: Request, form: dict[str, str]) -> tuple[str, str, bool]:
    """(client_id, secret, by Basic) from client_secret_basic or client_secret_post; refused if both or neither."""
    header = request.headers.get("authorization", "")
    posted = "client_secret" in form
    if header.lower().startswith("basic "):
        if posted:
            raise TokenRefused("invalid_request", "use one client authentication method, not two")
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
            client_id, secret = decoded.split(":", 1)
        except (ValueError, UnicodeDecodeError):
            raise TokenRefused("invalid_client", "malformed Basic credentials", 401) from None
        client_id, secret = unquote_plus(client_id), unquote_plus(secret)
        if form.get("client_id", client_id) != client_id:  # RFC 6749 3.2.1 lets the form name it too: the same one
            raise TokenRefused("invalid_request", "the form's client_id is not the one authenticated")
        return client_id, secret, True
    if posted:
        return form.get("client_id", ""), form["client_secret"], False
    raise TokenRefused("invalid_client", "client authentication required", 401)


def _lead(form: dict[str, str]) -> int | None:
    text = form.get("lead")
    if text is None:
        return None
    if not text.isdigit() or int(text) > MAX_LEAD:
        raise TokenRefused("invalid_request", f"lead must be a whole number from 0 to {MAX_LEAD}")
    return int(text)


def _granted_scopes(policy: AuthPolicy, form: dict[str, str], subject: str) -> list[str]:
    asked = form.get("scope", "").split()
    unknown = [scope for scope in asked if scope not in policy.scopes]
    if unknown:
        raise TokenRefused("invalid_scope", f"unknown scope {unknown[0]!r}")
    withdrawn = set(policy.withdrawn.get(subject, ()))
    return [scope for scope in (asked or policy.default_scopes) if scope not in withdrawn]


def issue(policy: AuthPolicy, signer: Signer, request: Request, form: dict[str, str]) -> dict[str, Any]:
    """One client-credentials grant: the token response (RFC 6749 5.1), or TokenRefused."""
    if "grant_type" not in form:
        raise TokenRefused("invalid_request", "grant_type is missing")
    if form.get("grant_type") != "client_credentials":
        raise TokenRefused("unsupported_grant_type", "only client_credentials is supported")
    client_id, secret, basic = _client_credentials(request, form)
    known = hmac.compare_digest(client_id.encode(), policy.client_id.encode())
    if not (hmac.compare_digest(secret.encode(), policy.secret.encode()) and known):
        raise TokenRefused("invalid_client", "unknown client or wrong secret", 401 if basic else 400)
    lead = _lead(form)
    subject = policy.subject(lead)
    scopes = _granted_scopes(policy, form, subject)
    now = time.time()
    lifetime = policy.effective_lifetime()
    claims = {"iss": policy.issuer, "sub": subject, "aud": policy.audience, "client_id": policy.client_id,
              "scope": " ".join(scopes), "iat": now, "exp": now + lifetime, "jti": secrets.token_hex(12)}
    policy.issued += 1
    policy.subjects[subject] = now
    return {"access_token": signer.sign(claims), "token_type": "Bearer", "expires_in": max(1, round(lifetime)),
            "scope": " ".join(scopes)}


def _oauth_error(error: TokenRefused) -> JSONResponse:
    from starlette.responses import JSONResponse

    headers = {"Cache-Control": "no-store"}
    if error.status == 401:
        headers["WWW-Authenticate"] = 'Basic realm="token"'
    return JSONResponse({"error": error.error, "error_description": error.description}, status_code=error.status,
                        headers=headers)


def _unavailable() -> JSONResponse:
    from starlette.responses import JSONResponse

    return JSONResponse({"error": "temporarily_unavailable", "error_description": "the authorization server is "
                         "down"}, status_code=503, headers={"Retry-After": "1", "Cache-Control": "no-store"})


def metadata(policy: AuthPolicy) -> dict[str, Any]:
    """RFC 8414 metadata: the SDK's `OAuthMetadata` (which has no `jwks_uri` field, so it is added)."""
    from mcp.shared.auth import OAuthMetadata

    base = policy.issuer.rstrip("/")
    # validated from strings, so a path-less issuer keeps its exact form: RFC 8414 issuers compare as strings
    document = OAuthMetadata.model_validate({
        "issuer": policy.issuer, "authorization_endpoint": f"{base}/authorize", "token_endpoint": f"{base}/token",
        "scopes_supported": policy.scopes, "response_types_supported": ["token"],
        "grant_types_supported": ["client_credentials"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"]})
    return {**document.model_dump(mode="json", exclude_none=True), "jwks_uri": f"{base}/jwks"}


def build_app(policy: AuthPolicy, signer: Signer, admin_port: int | None) -> Starlette:
    """The public routes, and the admin routes answered on the admin socket only."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    def on_admin_socket(request: Request) -> bool:
        server = request.scope.get("server")
        return admin_port is not None and server is not None and server[1] == admin_port

    async def token(request: Request) -> Response:
        if policy.down:
            policy.refuse("temporarily_unavailable")
            logger.warning("token request refused: the authorization server is down (auth-down)")
            return _unavailable()
        form = {key: str(value) for key, value in (await request.form()).items()}
        try:
            body = issue(policy, signer, request, form)
        except TokenRefused as exc:
            policy.refuse(exc.error)
            logger.warning("token request refused: %s (%s)", exc.error, exc.description)
            return _oauth_error(exc)
        return JSONResponse(body, headers={"Cache-Control": "no-store", "Pragma": "no-cache"})

    async def authorize(request: Request) -> Response:
        return JSONResponse({"error": "unsupported_response_type", "error_description": "this server issues "
                             "client-credentials tokens only"}, status_code=400)

    def public(payload: Any) -> Any:
        async def route(request: Request) -> Response:
            if policy.down:
                policy.reads_refused += 1
                return _unavailable()
            return JSONResponse(payload() if callable(payload) else payload)
        return route

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "issuer": policy.issuer, "pid": os.getpid()})

    async def admin(request: Request) -> Response:
        if not on_admin_socket(request):
            return JSONResponse({"error": "not found"}, status_code=404)
        try:
            body = await request.json() if request.method == "POST" else {}
            if not isinstance(body, dict):
                raise TypeError("the body must be a JSON object")
            answer = _admin_action(policy, request.path_params["action"], body)
        except (KeyError, TypeError, ValueError) as exc:
            return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=400)
        logger.info("admin %s: %s", request.path_params["action"], json.dumps(answer, sort_keys=True))
        return JSONResponse(answer)

    return Starlette(routes=[
        Route(METADATA_PATH, public(lambda: metadata(policy)), methods=["GET"]),
        Route("/token", token, methods=["POST"]),
        Route("/authorize", authorize, methods=["GET", "POST"]),
        Route("/jwks", public(signer.jwks), methods=["GET"]),
        Route(REVOCATIONS_PATH, public(policy.feed), methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/admin/{action}", admin, methods=["GET", "POST"]),
    ])


def _chosen(policy: AuthPolicy, share: float, seed: int) -> list[str]:
    """A `share` of the lead subjects that hold tokens, drawn from `seed` (at least one when share > 0)."""
    if not 0.0 <= share <= 1.0:
        raise ValueError("share must be from 0 to 1")
    subjects = sorted(policy.subjects, key=_lead_order)
    count = min(len(subjects), max(1 if share > 0 else 0, round(share * len(subjects))))
    return sorted(random.Random(seed).sample(subjects, count), key=_lead_order)


def _lead_order(subject: str) -> tuple[int, str]:
    tail = subject.rsplit("/lead-", 1)
    return (int(tail[1]), subject) if len(tail) == 2 and tail[1].isdigit() else (-1, subject)


def _leads(subjects: Sequence[str]) -> list[int | str]:
    return [order if (order := _lead_order(subject)[0]) >= 0 else subject for subject in subjects]


def _admin_action(policy: AuthPolicy, action: str, body: dict[str, Any]) -> dict[str, Any]:
    """The chaos actions' levers; each answers with what it did, in counts and lead numbers."""
    if action == "state":
        return {"issued": policy.issued, "refused": policy.refused, "reads_refused": policy.reads_refused,
                "subjects": len(policy.subjects),
                "lifetime": policy.effective_lifetime(), "down": policy.down, "drop_subject": policy.drop_subject,
                "revoked": len(policy.revoked_before), "scope_lost": len(policy.withdrawn)}
    if action == "lifetime":
        seconds = body.get("seconds")
        if seconds is not None and not float(seconds) > 0:
            raise ValueError("seconds must be more than 0, or null for the configured lifetime")
        policy.short_lifetime = float(seconds) if seconds is not None else None
        return {"lifetime": policy.effective_lifetime()}
    if action == "revoke":
        chosen = _chosen(policy, float(body["share"]), int(body.get("seed", 0)))
        now = time.time()
        for subject in chosen:
            policy.revoked_before[subject] = now
        return {"revoked": len(chosen), "leads": _leads(chosen), "of": len(policy.subjects)}
    if action == "scope-loss":
        scope = str(body.get("scope", "refunds:write"))
        chosen = _chosen(policy, float(body["share"]), int(body.get("seed", 0)))
        for subject in chosen:
            policy.withdrawn[subject] = sorted({*policy.withdrawn.get(subject, ()), scope})
        return {"scope": scope, "lost": len(chosen), "leads": _leads(chosen), "of": len(policy.subjects)}
    if action == "down":
        policy.down = bool(body["down"])
        return {"down": policy.down}
    if action == "drift":
        share = float(body["share"])
        if not 0.0 <= share <= 1.0:
            raise ValueError("share must be from 0 to 1")
        policy.drop_subject = share
        return {"drop_subject": share}
    if action == "reset":
        policy.short_lifetime, policy.down, policy.drop_subject = None, False, 0.0
        policy.revoked_before.clear()
        policy.withdrawn.clear()
        return {"reset": True}
    raise ValueError(f"unknown admin action {action!r}")


# --- the command ---------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, required=True, help="port of the token, metadata and JWKS routes")
    parser.add_argument("--admin-port", type=int, default=None,
                        help="port of the admin interface (chaos), always on 127.0.0.1; default: none")
    parser.add_argument("--issuer", default=None,
                        help="the issuer URL (default http://HOST:PORT); tokens carry it as iss")
    parser.add_argument("--client-id", required=True, help="the one OAuth client's id")
    parser.add_argument("--client-secret-env", required=True,
                        help="the NAME of the environment variable that holds the client's secret")
    parser.add_argument("--scope", action="append", dest="scopes", default=None,
                        help="a scope the client may be granted (repeatable; default refunds:write)")
    parser.add_argument("--default-scope", action="append", dest="default_scopes", default=[],
                        help="granted when a request asks for no scope (repeatable; default none)")
    parser.add_argument("--audience", default="mcp-shop",
                        help="the tokens' aud, which every replica checks (default mcp-shop)")
    parser.add_argument("--lifetime", default="1h", help="token lifetime, expires_in (default 1h)")


def policy_from(parser: argparse.ArgumentParser, args: argparse.Namespace) -> AuthPolicy:
    """The server's policy from its options; a missing secret variable is a usage error naming it."""
    from harness.config.durations import parse_duration

    secret = os.environ.get(args.client_secret_env, "")
    if not secret:
        parser.error(f"the environment variable {args.client_secret_env} (--client-secret-env) is not set or empty")
    try:
        lifetime = parse_duration(args.lifetime)
    except ValueError as exc:
        parser.error(f"--lifetime: {exc}")
    if lifetime <= 0:
        parser.error("--lifetime: must be more than 0")
    scopes = args.scopes or ["refunds:write"]
    unknown = [scope for scope in args.default_scopes if scope not in scopes]
    if unknown:
        parser.error(f"--default-scope {unknown[0]} is not one of the --scope values")
    issuer = args.issuer or f"http://{args.host}:{args.port}"
    return AuthPolicy(client_id=args.client_id, secret=secret, issuer=issuer, audience=args.audience,
                      scopes=scopes, default_scopes=args.default_scopes, lifetime=lifetime)


def _listening(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(256)
    sock.set_inheritable(True)
    return sock


def serve(policy: AuthPolicy, host: str, port: int, admin_port: int | None) -> int:
    """Serve the public routes on HOST:PORT and the admin routes on 127.0.0.1:ADMIN_PORT until stopped."""
    import uvicorn

    from harness.shop.replica import configure_logging

    configure_logging("auth")
    try:
        sockets = [_listening(host, port), *([_listening("127.0.0.1", admin_port)] if admin_port else [])]
    except OSError as exc:
        print(f"mrtr-harness shop auth-server: cannot listen: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    app = build_app(policy, Signer(), admin_port)
    logger.info("serving issuer %s token %s/token client=%s audience=%s lifetime=%gs admin=%s", policy.issuer,
                policy.issuer.rstrip("/"), policy.client_id, policy.audience, policy.lifetime,
                f"127.0.0.1:{admin_port}" if admin_port else "off")
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off")
    asyncio.run(uvicorn.Server(config).serve(sockets=sockets))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mrtr-harness shop auth-server", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    return serve(policy_from(parser, args), args.host, args.port, args.admin_port)


if __name__ == "__main__":
    raise SystemExit(main())
