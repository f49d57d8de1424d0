"""The shop's authorization server as a process of a local deployment, and the harness's hand on its admin port.

Started like every other process of the deployment (`ManagedProcess`, in its own session,
on the run's lifeline: it dies with the harness, also on SIGKILL), before the replicas,
which are started verifying its tokens. The client secret never passes on a command line:
the server is told the NAME of the environment variable and inherits the variable.
"""

from __future__ import annotations

import http.client
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config.target import TargetConfig
from harness.errors import UsageError
from harness.runtime.processes import free_port, harness_command

SHOP_SCOPES = ("refunds:write",)
"""The scopes the shop's authorization server always knows: the refund policy's."""


class MissingSecret(UsageError):
    """The environment variable that should hold the client secret is not set."""


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

    The variable is checked here, before anything starts: a missing secret is the user's to fix (exit 2).
    """
    auth = target.auth
    if auth is None or auth.kind != "client-credentials" or auth.token_url is not None:
        return None
    assert auth.client_id is not None and auth.client_secret_env is not None  # the config's own rule
    if not os.environ.get(auth.client_secret_env):
        raise MissingSecret(f"the environment variable {auth.client_secret_env} is not set (target.auth."
                            f"client_secret_env): it must hold the client secret the shop's authorization "
                            f"server expects of {auth.client_id!r}")
    scopes = tuple(dict.fromkeys([*SHOP_SCOPES, *auth.scopes]))
    return AuthServerSpec(client_id=auth.client_id, secret_env=auth.client_secret_env, scopes=scopes)


class AuthAdminError(RuntimeError):
    """The authorization server's admin interface did not answer, or refused the change."""


class AuthServerProcess:
    """The authorization server's process (public port + 127.0.0.1 admin port), its issuer URL and admin calls."""

    def __init__(self, spec: AuthServerSpec, log_path: Path) -> None:
        from harness.target.local_deployment import ManagedProcess

        self.spec = spec
        self.port = free_port()
        self.admin_port = free_port()
        args = ["shop", "auth-server", "--port", str(self.port), "--admin-port", str(self.admin_port),
                "--client-id", spec.client_id, "--client-secret-env", spec.secret_env,
                "--audience", spec.audience, "--lifetime", f"{spec.lifetime:g}s",
                *(arg for scope in spec.scopes for arg in ("--scope", scope)), *spec.extra_args]
        self.process = ManagedProcess("auth", harness_command(*args), self.port, log_path)
        self.changed = False
        """Whether chaos changed anything since the start or the last reset (what rollback must undo)."""

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.process.start()
        self.process.wait_ready()

    def stop(self) -> None:
        self.process.stop()

    def admin(self, action: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One admin call (POST with a body, GET without); its JSON answer."""
        connection = http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=5.0)
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
        if action not in ("state", "reset"):
            self.changed = True
        return answer

    def reset(self) -> bool:
        """Everything chaos changed put back; True when there was something to put back."""
        if not self.changed or not self.process.running():
            return False
        self.admin("reset", {})
        self.changed = False
        return True
