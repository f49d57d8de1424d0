"""The token endpoint of a target that did not say where it is, found as the MCP authorization spec says.

An unauthenticated round first: the resource server's 401 names its protected-resource
metadata in `WWW-Authenticate` (`resource_metadata=...`); else the RFC 9728 well-known
URLs. That metadata lists the authorization servers; their RFC 8414 (or OpenID) metadata
gives the `token_endpoint` and the client authentications it takes. URLs and parsing are
the SDK's (`mcp.client.auth.utils`, `mcp.shared.auth`); only the HTTP is ours (synchronous,
on gevent's sockets, before the load starts).

Every answer is checked before it is believed, since the secret goes where it points: the
protected-resource metadata must name the target as its `resource` (RFC 9728 section 3.3),
the authorization server's metadata the issuer it was asked as (RFC 8414 section 3.3), and
the token endpoint must be https, or plain http only when every URL involved is loopback
(or the scenario says `allow_http`). Otherwise discovery stops (exit 3) naming the mismatch,
before any token request, so no secret is sent.

Those checks hold the answers to each other, not to the user: a target is free, by RFC 9728,
to name any authorization server, and a hostile one names its own. `[target.auth] issuer`
pins the one the user trusts: an authorization server list without it, or metadata that
names another, stops discovery the same way (exit 3, no secret sent).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx2
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    extract_resource_metadata_from_www_auth,
    issuers_match,
)
from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata
from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url
from pydantic import ValidationError

from harness.auth.errors import TokenEndpointError
from harness.config.urls import secret_may_go
from harness.mrtr.wire import ACCEPT, MCP_PROTOCOL_VERSION_HEADER, PROTOCOL_VERSION

DISCOVERY_TIMEOUT = 10.0
DISCOVERY_PATIENCE = 60.0
"""Seconds a target that answers 502, 503 or 504 to the first probe is asked again: a balancer whose replicas are
still starting (a compose stack brought up with the run) answers so until one is healthy."""
_NOT_YET = frozenset({502, 503, 504})

_PROBE = b'{"jsonrpc":"2.0","id":0,"method":"tools/list","params":{}}'
"""The unauthenticated request whose 401 starts discovery (a resource server answers it before any MCP)."""


@dataclass(frozen=True)
class Discovered:
    """Where to ask for tokens, and how the authorization server wants the client to authenticate."""

    token_endpoint: str
    auth_methods: list[str] | None
    issuer: str
    scopes: list[str] | None = None
    """The resource's `scopes_supported` (RFC 9728), when it lists them."""


def discover(target_url: str, timeout: float = DISCOVERY_TIMEOUT, *, allow_http: bool = False,
             issuer: str | None = None) -> Discovered:
    """The token endpoint for `target_url` (an MCP endpoint); TokenEndpointError when no step leads to one, or
    when an answer does not hold up (a resource or issuer that is not the one asked, a token endpoint in the clear,
    an authorization server other than `issuer` when one is pinned)."""
    with httpx2.Client(timeout=timeout, follow_redirects=False) as http:
        resource = _protected_resource(http, target_url)
        if not resource.authorization_servers:
            raise TokenEndpointError(f"discovery: the protected-resource metadata of {target_url} names no "
                                     "authorization server; give [target.auth] token_url")
        asked = _pinned(resource, issuer, target_url) if issuer is not None else str(resource.authorization_servers[0])
        metadata = _authorization_server(http, asked, target_url)
    token_endpoint = str(metadata.token_endpoint)
    if not secret_may_go(token_endpoint, target_url, asked, allow_http=allow_http):
        raise TokenEndpointError(f"discovery: the token endpoint {token_endpoint} of issuer {asked} is plain http "
                                 f"and not every URL involved is loopback (target {target_url}): refused, no secret "
                                 "sent; use https, or set [target.auth] allow_http = true on a private network")
    return Discovered(token_endpoint, metadata.token_endpoint_auth_methods_supported, asked,
                      resource.scopes_supported)


def _pinned(resource: ProtectedResourceMetadata, issuer: str, target_url: str) -> str:
    """The authorization server the resource names that is the pinned `issuer`; TokenEndpointError when none is."""
    named = [str(server) for server in resource.authorization_servers or []]
    for server in named:
        if issuers_match(server, issuer):
            return server
    raise TokenEndpointError(f"discovery: the protected-resource metadata of {target_url} names authorization "
                             f"server {', '.join(named)}, not {issuer}, the issuer [target.auth] issuer pins: "
                             "refused, no secret sent")


def _get(http: httpx2.Client, url: str) -> httpx2.Response | None:
    try:
        return http.get(url, headers={MCP_PROTOCOL_VERSION_HEADER: PROTOCOL_VERSION})
    except httpx2.HTTPError:
        return None


def _probe(http: httpx2.Client, target_url: str) -> httpx2.Response:
    """The target's answer to an unauthenticated request, asked again while a balancer says no replica is up yet."""
    deadline = time.monotonic() + DISCOVERY_PATIENCE
    while True:
        try:
            probe = http.post(target_url, content=_PROBE, headers={"Content-Type": "application/json",
                                                                   "Accept": ACCEPT,
                                                                   MCP_PROTOCOL_VERSION_HEADER: PROTOCOL_VERSION})
        except httpx2.HTTPError as exc:
            raise TokenEndpointError(f"discovery: {target_url} cannot be reached: {type(exc).__name__}") from None
        if probe.status_code not in _NOT_YET or time.monotonic() >= deadline:
            return probe
        time.sleep(0.5)


def _protected_resource(http: httpx2.Client, target_url: str) -> ProtectedResourceMetadata:
    probe = _probe(http, target_url)
    if probe.status_code != 401:
        raise TokenEndpointError(f"discovery: {target_url} answered HTTP {probe.status_code} without a token, not "
                                 "401: it asks for none; give [target.auth] token_url, or drop [target.auth]")
    hinted = extract_resource_metadata_from_www_auth(probe)
    for url in build_protected_resource_metadata_discovery_urls(hinted, target_url):
        response = _get(http, url)
        if response is not None and response.status_code == 200:
            try:
                document = ProtectedResourceMetadata.model_validate_json(response.content)
            except ValidationError:
                continue
            return _for_target(document, url, target_url)
    raise TokenEndpointError(f"discovery: no protected-resource metadata (RFC 9728) for {target_url}; give "
                             "[target.auth] token_url")


def _authorization_server(http: httpx2.Client, issuer: str, target_url: str) -> OAuthMetadata:
    for url in build_oauth_authorization_server_metadata_discovery_urls(issuer, target_url):
        response = _get(http, url)
        if response is not None and response.status_code == 200:
            try:
                metadata = OAuthMetadata.model_validate_json(response.content)
            except ValidationError:
                continue
            if not issuers_match(str(metadata.issuer), issuer):
                raise TokenEndpointError(f"discovery: the authorization-server metadata at {url} names issuer "
                                         f"{metadata.issuer}, not {issuer}, the one asked (RFC 8414 section 3.3): "
                                         "refused, no secret sent")
            return metadata
    raise TokenEndpointError(f"discovery: no authorization-server metadata (RFC 8414) for {issuer}; give "
                             "[target.auth] token_url")


def _for_target(document: ProtectedResourceMetadata, url: str, target_url: str) -> ProtectedResourceMetadata:
    """The protected-resource metadata, if its `resource` is the target (or a path above it, as the SDK's client
    allows); TokenEndpointError naming both otherwise."""
    expected = resource_url_from_server_url(target_url)
    if not check_resource_allowed(requested_resource=expected, configured_resource=str(document.resource)):
        raise TokenEndpointError(f"discovery: the protected-resource metadata at {url} is for resource "
                                 f"{document.resource}, not {expected}, the target (RFC 9728 section 3.3): refused, "
                                 "no secret sent")
    return document
