"""`[target.auth]` made into the run's tokens: the source of its kind, and every principal's first token.

`check` reads what a run needs from the machine before anything starts (the secret's
variable, the token file), so bad input exits 2 with nothing started (an embedded target,
whose both sides the harness starts, gets a throwaway secret instead of an unset one); `lead_tokens`
then builds the source (discovering the token endpoint when `token_url` is not given)
and fetches every principal's token before the load starts.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness.auth.client_credentials import ClientCredentials, auth_method
from harness.auth.keeper import LeadTokens, TokenSource
from harness.auth.token_command import TokenCommand
from harness.auth.token_file import TokenFile, read_tokens
from harness.config.auth import TargetAuth
from harness.config.target import TargetConfig
from harness.secrets import MissingSecret, env_secret


def secret_of(auth: TargetAuth, *, throwaway: bool = False) -> str:
    """The client secret, from the variable the scenario names (registered as a secret); MissingSecret naming the
    variable when it is unset or empty, unless `throwaway` (an embedded target) draws one."""
    assert auth.client_secret_env is not None, "client-credentials is validated to name its secret's variable"
    return env_secret(auth.client_secret_env, throwaway=throwaway,
                      what=f"the client secret of {auth.client_id!r} ([target.auth] client_secret_env)")


def check(target: TargetConfig) -> None:
    """What the run will need of this machine, before anything starts (MissingSecret: exit 2)."""
    auth = target.auth
    if auth is None:
        return
    if auth.kind == "client-credentials":
        secret_of(auth, throwaway=target.kind == "embedded")
    elif auth.kind == "tokens":
        assert auth.file is not None
        read_tokens(Path(auth.file))


def missing_secret(target: TargetConfig) -> str | None:
    """What `check` would refuse on this machine (the variable's name or the file, never a value), for `validate`
    to say as a warning; None when nothing is missing, or an embedded target would draw a throwaway secret."""
    auth = target.auth
    if auth is None or (auth.kind == "client-credentials" and target.kind == "embedded"):
        return None
    try:
        check(target)
    except MissingSecret as exc:
        return str(exc)
    return None


def build_source(auth: TargetAuth, target_url: str) -> TokenSource:
    """The token source of `auth`'s kind; a client-credentials one finds its endpoint from `target_url` if need be."""
    if auth.kind == "tokens":
        assert auth.file is not None
        return TokenFile(Path(auth.file))
    if auth.kind == "command":
        return TokenCommand(auth.command, pass_env=auth.command_env)
    assert auth.client_id is not None
    secret = secret_of(auth)
    if auth.token_url is not None:
        return ClientCredentials(auth.token_url, auth.client_id, secret, auth.scopes)
    from harness.auth.discovery import discover  # the SDK's discovery helpers: imported only to discover

    found = discover(target_url, allow_http=auth.allow_http, issuer=auth.issuer)
    return ClientCredentials(found.token_endpoint, auth.client_id, secret, auth.scopes,
                             method=auth_method(found.auth_methods))


def lead_tokens(auth: TargetAuth, target_url: str, on_refresh: Callable[[str], None] | None = None) -> LeadTokens:
    """Every principal's first token, fetched now (TokenEndpointError: exit 3), refreshing from then on."""
    tokens = LeadTokens(build_source(auth, target_url), auth.principals, concurrency=auth.concurrency,
                        refresh=auth.refresh, margin=auth.refresh_margin, on_refresh=on_refresh)
    try:
        tokens.start()
    except BaseException:
        tokens.stop()
        raise
    return tokens
