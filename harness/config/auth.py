"""`[target.auth]`: how each simulated lead gets the OAuth access token its rounds carry.

Over Streamable HTTP an MRTR deployment is an OAuth resource server, and the SDK seals every
requestState to the token's client, issuer and subject; so each lead holds its own token.
A secret never sits in the scenario file (which is copied into the results folder): the
file names the environment variable that holds it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from harness.config.durations import PositiveDuration
from harness.config.strict import FieldProblem, Strict
from harness.config.urls import check_url, secret_may_go

AuthKind = Literal["client-credentials", "tokens", "command"]

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
"""An environment variable's name, as a POSIX shell accepts it."""


class TargetAuth(Strict):
    """The token source of every lead: the client-credentials grant, a file of tokens, or a command."""

    kind: AuthKind = Field(description="client-credentials (RFC 6749 4.4), tokens (a file, one token a line) or "
                                       "command (prints the token of lead {lead})")
    client_id: str | None = Field(default=None, min_length=1, description="client-credentials: the OAuth client")
    client_secret_env: str | None = Field(
        default=None, pattern=ENV_NAME,
        description="client-credentials: the NAME of the environment variable that holds the client secret")
    scopes: list[str] = Field(default_factory=list, description="the scopes requested for every lead's token")
    principals: int = Field(default=20, ge=1, le=100_000,
                            description="how many distinct leads (subjects) the load uses; lead i of the load is "
                                        "principal i mod principals")
    token_url: str | None = Field(
        default=None, description="client-credentials: the token endpoint; by default discovered from the "
                                  "target's 401 (WWW-Authenticate, then RFC 9728, then RFC 8414 metadata)")
    issuer: str | None = Field(
        default=None, description="client-credentials without token_url: the authorization server the client "
                                  "secret may go to, as its metadata's `issuer` names it (e.g. "
                                  "\"https://login.example.com\"); discovery that leads to any other is refused, no "
                                  "secret sent (default: whichever the target's metadata names)")
    file: str | None = Field(default=None, description="tokens: the file, one token a line; lead i uses line "
                                                       "i mod n (relative to the scenario file)")
    command: list[str] = Field(default_factory=list, description="command: an argv list that prints one token "
                                                                 "for {lead}; run again before it expires")
    command_env: list[Annotated[str, Field(pattern=ENV_NAME)]] = Field(
        default_factory=list, description="command: the environment variables it is given beside the allow-list "
                                          "(PATH, HOME, LANG, ...: docs/your-deployment.md), e.g. [\"VAULT_ADDR\"]")
    refresh: bool = Field(default=True, description="refresh a token before it expires, and once on a 401 "
                                                    "invalid_token (false: a lead keeps its first token)")
    refresh_margin: PositiveDuration = Field(default=30.0, description="how long before expires_in runs out a "
                                                                       "token is refreshed, real seconds")
    concurrency: int = Field(default=4, ge=1, le=64, description="how many token requests may be in flight at once")
    allow_http: bool = Field(default=False, description="let the leads' tokens go to plain-http target URLs, and the "
                                                        "client secret to a plain-http token endpoint, off this "
                                                        "machine (a private network, such as the compose stack's); "
                                                        "by default only https, or http when every URL involved is "
                                                        "loopback")

    @model_validator(mode="after")
    def _fits_kind(self) -> TargetAuth:
        if self.token_url is not None:
            check_url(self.token_url, "token_url")
            if not secret_may_go(self.token_url, allow_http=self.allow_http):
                raise FieldProblem(f"token_url {self.token_url} is plain http off this machine: the client secret "
                                   "would cross the network in the clear; use https, or set allow_http = true for "
                                   "a private network", "token_url")
        if self.issuer is not None:
            check_url(self.issuer, "issuer")
            if self.kind != "client-credentials" or self.token_url is not None:
                raise FieldProblem("issuer pins the authorization server discovery may send the client secret to: "
                                   "it is for kind = \"client-credentials\" without token_url (token_url already "
                                   "names where the secret goes)", "issuer")
        if self.kind == "client-credentials":
            if self.client_id is None:
                raise FieldProblem("client-credentials needs client_id = \"...\"", "kind")
            if self.client_secret_env is None:
                raise FieldProblem("client-credentials needs client_secret_env = \"NAME\", the environment "
                                   "variable that holds the secret (a secret never goes in the file)", "kind")
        if (self.kind == "tokens") != (self.file is not None):
            raise FieldProblem("file = \"...\" is for kind = \"tokens\", and kind = \"tokens\" needs it",
                               "file" if self.file is not None else "kind")
        if self.command_env and self.kind != "command":
            raise FieldProblem("command_env is for kind = \"command\" (the variables its command is given)",
                               "command_env")
        if (self.kind == "command") != bool(self.command):
            raise FieldProblem("command = [...] is for kind = \"command\", and kind = \"command\" needs it",
                               "command" if self.command else "kind")
        return self
