"""The shop's authorization server as the harness starts it: its spec, its command, and the harness's hand on
its admin port (the process is `harness.targets.local_deployment.AuthServerProcess`).

Started like every other process of the deployment (`ManagedProcess`, in its own session,
on the run's lifeline: it dies with the harness, also on SIGKILL), before the replicas,
which are started verifying its tokens. The client secret never passes on a command line:
the server is told the NAME of the environment variable and inherits the variable.
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass, field
from typing import Any

from harness.config.target import TargetConfig
from harness.secrets import env_secret

SHOP_SCOPES = ("refunds:write",)
"""The scopes the shop's authorization server always knows: the refund policy's."""


@dataclass(frozen=True)
class AuthServerSpec:
    """What the shop's authorization server is started with (the secret: the name of its variable only)."""

    client_id: str
    secret_env: str
    scopes: tuple[str, ...] = SHOP_SCOPES
    lifetime: float = 3600.0
    audience: str = "mcp-shop"
    extra_args: list[str] = field(default_factory=list)


def auth_server_spec(target: TargetConfig) -> AuthServerSpec | None:
    """The authorization server an embedded shop runs for `[target.auth]`: client-credentials with no token_url.

    The variable is read here, before anything starts: when it is unset, a throwaway secret is drawn into it
    (both sides are the harness's, so any value serves; `harness.secrets.env_secret` says so in one line).
    """
    auth = target.auth
    if auth is None or auth.kind != "client-credentials" or auth.token_url is not None:
        return None
    assert auth.client_id is not None and auth.client_secret_env is not None  # the config's own rule
    env_secret(auth.client_secret_env, throwaway=True, what=f"the client secret of {auth.client_id!r}")
    scopes = tuple(dict.fromkeys([*SHOP_SCOPES, *auth.scopes]))
    return AuthServerSpec(client_id=auth.client_id, secret_env=auth.client_secret_env, scopes=scopes)


class AuthAdminError(RuntimeError):
    """The authorization server's admin interface did not answer, or refused the change."""


def auth_server_args(spec: AuthServerSpec, port: int, admin_port: int) -> list[str]:
    """The harness's command-line arguments that start the server (`shop auth-server ...`), the secret by name only."""
    return ["shop", "auth-server", "--port", str(port), "--admin-port", str(admin_port),
            "--client-id", spec.client_id, "--client-secret-env", spec.secret_env,
            "--audience", spec.audience, "--lifetime", f"{spec.lifetime:g}s",
            *(arg for scope in spec.scopes for arg in ("--scope", scope)), *spec.extra_args]


def admin_call(admin_port: int, action: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """One call of the server's admin interface on 127.0.0.1 (POST with a body, GET without); its JSON answer."""
    connection = http.client.HTTPConnection("127.0.0.1", admin_port, timeout=5.0)
    try:
        payload = json.dumps(body).encode() if body is not None else None
        connection.request("POST" if payload is not None else "GET", f"/admin/{action}", body=payload,
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = json.loads(response.read() or b"{}")
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise AuthAdminError(f"the authorization server's admin interface did not answer {action}: "
                             f"{type(exc).__name__}") from None
    finally:
        connection.close()
    if response.status != 200:
        raise AuthAdminError(f"the authorization server refused {action}: {answer.get('error')}")
    return answer
