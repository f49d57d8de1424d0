"""`[target.auth]` made into the run's tokens: the source of its kind, and every principal's first token.

`check` reads what a run needs from the machine before anything starts (the secret's
variable, the token file), so bad input exits 2 with nothing started; `lead_tokens`
then builds the source (discovering the token endpoint when `token_url` is not given)
and fetches every principal's token before the load starts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from harness.auth.client_credentials import ClientCredentials, auth_method
from harness.auth.errors import AuthInputError
from harness.auth.keeper import LeadTokens, TokenSource
from harness.auth.token_command import TokenCommand
from harness.auth.token_file import TokenFile, read_tokens
from harness.config.auth import TargetAuth


def secret_of(auth: TargetAuth, environ: Mapping[str, str] | None = None) -> str:
    """The client secret, from the variable the scenario names; AuthInputError naming it when unset or empty."""
    assert auth.client_secret_env is not None, "client-credentials is validated to name its secret's variable"
    secret = (os.environ if environ is None else environ).get(auth.client_secret_env)
    if not secret:
        raise AuthInputError(f"[target.auth] client_secret_env: the environment variable {auth.client_secret_env} "
                             "is not set (it holds the client secret)")
    return secret


def check(auth: TargetAuth) -> None:
    """What the run will need of this machine, before anything starts (AuthInputError: exit 2)."""
    if auth.kind == "client-credentials":
        secret_of(auth)
    elif auth.kind == "tokens":
        assert auth.file is not None
        read_tokens(Path(auth.file))


def build_source(auth: TargetAuth, target_url: str) -> TokenSource:
    """The token source of `auth`'s kind; a client-credentials one finds its endpoint from `target_url` if need be."""
    if auth.kind == "tokens":
        assert auth.file is not None
        return TokenFile(Path(auth.file))
    if auth.kind == "command":
        return TokenCommand(auth.command)
    assert auth.client_id is not None
    secret = secret_of(auth)
    if auth.token_url is not None:
        return ClientCredentials(auth.token_url, auth.client_id, secret, auth.scopes)
    from harness.auth.discovery import discover  # the SDK's discovery helpers: imported only to discover

    found = discover(target_url, allow_http=auth.allow_http)
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
