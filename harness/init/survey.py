"""What `init` learns of each URL: is it an MCP server, which revision, which tools, does it want OAuth.

First one plain POST (a JSON-RPC `server/discover`, no token): a connection that fails is a
target that cannot be reached (exit 3); a 401 is an OAuth resource server, whose token
endpoint is found as a run finds it (`harness.auth.discovery`); an answer that is not
JSON-RPC is no MCP server (exit 2). Then the SDK's own `Client` connects as any host would
(`server/discover`, falling back to `initialize` on a 2025-era server) and lists the tools,
every page of them, with a token when the server wants one and init was given a client.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2

from harness import foreign_text
from harness.errors import TargetDown, UsageError
from harness.mrtr.wire import ACCEPT, MCP_PROTOCOL_VERSION_HEADER, PROTOCOL_VERSION

SURVEY_TIMEOUT = 15.0
"""Seconds one URL may take to answer the probe, and then the SDK's discovery and tool listing."""

_MAX_PAGES = 100
"""tools/list pages followed before init stops: a cursor that never ends cannot hang it."""

_PROBE = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "server/discover",
                     "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION}}}).encode()


class NotMcp(UsageError):
    """A URL answered, but not as an MCP server does (exit 2: the URL given is wrong)."""


TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
"""MCP's rule for a tool's name (the specification's "Tool names"): 1 to 128 characters of A-Z, a-z, 0-9, `_`, `-`
and `.`. A name outside it is written into the scenario and shown in every report: init refuses the server."""


class BadToolName(NotMcp):
    """A server lists a tool whose name breaks MCP's tool-name rule (exit 2: nothing is written)."""


class NeedsCredentials(UsageError):
    """The server asks for an OAuth token and init was given no client to get one with (exit 2)."""


@dataclass(frozen=True)
class Tool:
    """One tool as tools/list gives it: what a `call` flow needs, and the hints a user should see."""

    name: str
    description: str
    input_schema: dict[str, Any]
    destructive: bool
    """The server's `destructiveHint` (MCP's default for a tool that is not read-only is true, but a missing
    annotation says nothing: only an explicit hint is shown)."""


@dataclass(frozen=True)
class OAuth:
    """A server that answered 401: where its tokens come from."""

    token_endpoint: str
    issuer: str
    scopes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Server:
    """What one URL said about itself."""

    url: str
    protocol: str
    name: str
    tools: list[Tool]
    oauth: OAuth | None


@dataclass(frozen=True)
class Client:
    """The OAuth client init lists tools with, when a server wants a token: its id and its secret's variable."""

    client_id: str
    secret_env: str


def survey(urls: Sequence[str], client: Client | None = None) -> list[Server]:
    """Every URL surveyed, in order; the first that fails ends the survey with its error."""
    return [survey_one(url, client) for url in urls]


def survey_one(url: str, client: Client | None) -> Server:
    """One URL: probed, then discovered and listed with the SDK's client (a token first, if it wants one)."""
    status = _probe(url)
    oauth = _oauth(url) if status == 401 else None
    token = _token(url, oauth, client) if oauth is not None else None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    protocol, name, tools = anyio.run(_listed, url, headers)
    for tool in tools:
        if not TOOL_NAME.fullmatch(tool.name):
            raise BadToolName(f"{url} lists a tool named {foreign_text.line(repr(tool.name), 80)}: MCP tool names are "
                              "1-128 characters of A-Z a-z 0-9 _ - . (nothing written)")
    return Server(url, protocol, name, tools, oauth)


def _probe(url: str) -> int:
    """The status of a plain `server/discover` POST; TargetDown when nothing answers, NotMcp when no MCP does."""
    try:
        with httpx2.Client(timeout=SURVEY_TIMEOUT, follow_redirects=False) as http:
            response = http.post(url, content=_PROBE, headers={
                "Content-Type": "application/json", "Accept": ACCEPT, MCP_PROTOCOL_VERSION_HEADER: PROTOCOL_VERSION})
    except httpx2.InvalidURL:
        raise NotMcp(f"{url} is not a URL init can connect to (give http://host:port/path)") from None
    except httpx2.HTTPError as exc:
        raise TargetDown(f"{url} cannot be reached: {type(exc).__name__}") from None
    if response.status_code == 401:
        return 401
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "text/event-stream" or (kind == "application/json" and _is_jsonrpc(response.content)):
        return response.status_code
    raise NotMcp(f"{url} is not an MCP server: a JSON-RPC POST got HTTP {response.status_code} "
                 f"({kind or 'no content type'}), not a JSON-RPC answer; give the server's MCP endpoint "
                 "(often .../mcp)")


def _is_jsonrpc(body: bytes) -> bool:
    try:
        message = json.loads(body)
    except ValueError:
        return False
    return isinstance(message, Mapping) and message.get("jsonrpc") == "2.0"


def _oauth(url: str) -> OAuth:
    """The token endpoint of a server that answered 401, found and checked as a run finds it."""
    from harness.auth.discovery import discover

    found = discover(url)  # TokenEndpointError (exit 3) naming what did not hold up
    return OAuth(found.token_endpoint, found.issuer, list(found.scopes or []))


def _token(url: str, oauth: OAuth, client: Client | None) -> str:
    """An access token to list tools with, from the client-credentials grant."""
    from harness.auth.client_credentials import ClientCredentials
    from harness.secrets import env_secret

    if client is None:
        raise NeedsCredentials(f"{url} asks for an OAuth token (HTTP 401; token endpoint {oauth.token_endpoint}): "
                               "give --client-id ID and --client-secret-env NAME (the variable that holds its "
                               "secret) so init can list its tools")
    secret = env_secret(client.secret_env, throwaway=False,
                        what=f"the client secret of {client.client_id!r} (--client-secret-env)")
    credentials = ClientCredentials(oauth.token_endpoint, client.client_id, secret, oauth.scopes)
    try:
        return credentials.fetch(0).value
    finally:
        credentials.close()


async def _listed(url: str, headers: dict[str, str]) -> tuple[str, str, list[Tool]]:
    """The SDK's client on `url`: the revision it agreed, the server's name, every tool."""
    from mcp import Client as SdkClient
    from mcp.client.streamable_http import streamable_http_client

    try:
        with anyio.fail_after(SURVEY_TIMEOUT):
            async with httpx2.AsyncClient(headers=headers, timeout=SURVEY_TIMEOUT) as http:
                transport = streamable_http_client(url, http_client=http)
                async with SdkClient(transport) as sdk:
                    info = sdk.server_info
                    name = info.name if info is not None else ""
                    return sdk.protocol_version, name, await _tools(sdk)
    except TimeoutError:
        raise TargetDown(f"{url} did not finish discovery and tools/list within {SURVEY_TIMEOUT:.0f} s") from None
    except Exception as exc:  # noqa: BLE001 - the SDK wraps its failures in task groups: say what it was, once
        cause = _innermost(exc)
        if isinstance(cause, httpx2.TransportError):
            raise TargetDown(f"{url} stopped answering during discovery: {_said(cause)}") from None
        raise NotMcp(f"{url}: the MCP SDK's client could not list its tools: {_said(cause)}") from None


async def _tools(sdk: Any) -> list[Tool]:
    tools: list[Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await sdk.list_tools(cursor=cursor) if cursor else await sdk.list_tools()
        for tool in page.tools:
            hints = tool.annotations
            tools.append(Tool(tool.name, (tool.description or "").strip(), dict(tool.input_schema or {}),
                              bool(hints is not None and hints.destructive_hint)))
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _innermost(exc: BaseException) -> BaseException:
    """The first leaf of an exception group (the SDK's task groups nest them)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _said(exc: BaseException) -> str:
    """The exception in one line: its text may be the server's own words."""
    text = foreign_text.line(exc, 300)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
