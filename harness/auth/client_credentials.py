"""The client-credentials grant (RFC 6749 section 4.4), through Authlib's OAuth 2 client.

One lead's token request carries the extra form field `lead=<principal>`: an authorization
server that issues per-lead subjects (the reference shop's) reads it, any other ignores it.
The client authenticates the way the server's metadata says it takes (`client_secret_basic`,
RFC 6749's default, else `client_secret_post`). Errors name the endpoint and the `error`
the server answered, never the secret.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Final

import httpx2
from authlib.integrations.base_client.errors import OAuthError
from authlib.integrations.httpx_client import OAuth2Client

from harness.auth.errors import TokenEndpointError
from harness.auth.token import Token, from_response

TOKEN_TIMEOUT: Final = 10.0
"""Seconds one token request may take."""

AUTH_METHODS: Final = ("client_secret_basic", "client_secret_post")
"""The client authentications this grant can use, in order of preference."""


def auth_method(supported: Sequence[str] | None) -> str:
    """The token endpoint authentication to use, given what the server's metadata lists (None: not said)."""
    if not supported:
        return AUTH_METHODS[0]
    return next((method for method in AUTH_METHODS if method in supported), AUTH_METHODS[0])


class ClientCredentials:
    """Fetches each principal's token from one token endpoint with one client's id and secret."""

    refreshable = True

    def __init__(self, token_url: str, client_id: str, secret: str, scopes: Sequence[str], *,
                 method: str = AUTH_METHODS[0], timeout: float = TOKEN_TIMEOUT) -> None:
        self.token_url = token_url
        self.client_id = client_id
        self._identify = {"client_id": client_id} if method == "client_secret_basic" else {}
        """With HTTP Basic the form names the client too (RFC 6749 section 3.2.1 allows it; the SDK's
        `ClientAuthenticator` needs it); with `client_secret_post` Authlib puts it in the form itself."""
        self._client = OAuth2Client(client_id, secret, token_endpoint_auth_method=method,
                                    scope=" ".join(scopes) or None, timeout=timeout)

    def describe(self) -> str:
        return f"client {self.client_id} at {self.token_url}"

    def fetch(self, principal: int) -> Token:
        """A new token for `principal` (blocks this greenlet on the request)."""
        now = time.time()
        try:
            response = self._client.fetch_token(self.token_url, grant_type="client_credentials",
                                              lead=str(principal), **self._identify)
        except OAuthError as exc:  # a 400 or 401 with an OAuth error body: its `error` says why
            raise TokenEndpointError(f"token endpoint {self.token_url} refused client {self.client_id}: "
                                     f"{exc.error}") from None
        except httpx2.HTTPStatusError as exc:
            raise TokenEndpointError(f"token endpoint {self.token_url} answered HTTP "
                                     f"{exc.response.status_code}") from None
        except httpx2.HTTPError as exc:
            raise TokenEndpointError(f"token endpoint {self.token_url} cannot be reached: "
                                     f"{type(exc).__name__}") from None
        try:
            return from_response(dict(response), now)
        except (KeyError, TypeError, ValueError):
            raise TokenEndpointError(f"token endpoint {self.token_url} answered without a usable access_token "
                                     "(RFC 6749 section 5.1)") from None

    def close(self) -> None:
        self._client.close()
