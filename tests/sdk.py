"""Driving a shop replica with the SDK's own `Client` over HTTP, with the rounds counted on the wire."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitResult

PROTOCOL = "2026-07-28"
YES = ElicitResult(action="accept", content={"release": True})


@dataclass
class Wire:
    """Every POST the client sent, by tool name: what "rounds on the wire" means in these tests."""

    posts: list[dict[str, Any]] = field(default_factory=list)

    async def record(self, request: httpx2.Request) -> None:
        if request.method == "POST":
            self.posts.append({"name": request.headers.get("mcp-name"), "body": request.content})

    def rounds(self, tool: str) -> int:
        return sum(1 for post in self.posts if post["name"] == tool)


@asynccontextmanager
async def connect(url: str, elicitation: Callable[..., Awaitable[ElicitResult]] | None = None,
                  wire: Wire | None = None, headers: dict[str, str] | None = None):
    """An SDK Client on one replica URL, pinned to the 2026-07-28 wire (no discovery round)."""
    hooks = {"request": [wire.record]} if wire is not None else {}
    async with httpx2.AsyncClient(event_hooks=hooks, headers=headers or {}, timeout=30.0) as http:
        transport = streamable_http_client(url, http_client=http, terminate_on_close=False)
        async with Client(transport, mode=PROTOCOL, elicitation_callback=elicitation) as client:
            yield client


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(fn)


async def say_yes(context: Any, params: Any) -> ElicitResult:
    return YES


def answer(action: str, content: dict[str, Any] | None = None) -> Callable[..., Awaitable[ElicitResult]]:
    async def callback(context: Any, params: Any) -> ElicitResult:
        return ElicitResult(action=action, content=content)

    return callback
