"""sdk_examples: two of the MCP Python SDK's own example servers, served over Streamable HTTP for `init`'s tests.

Vendored from github.com/modelcontextprotocol/python-sdk at commit 57394b054 (MIT License,
Copyright (c) 2024 Anthropic, PBC): examples/mcpserver/parameter_descriptions.py (`greet_user`:
descriptions and defaults) and examples/mcpserver/complex_inputs.py (`name_shrimp`: a nested
pydantic model, written as a `$ref` into `$defs`, and a bounded list). The tools are the
examples' own, unchanged; only the two servers are joined into one, and served on
127.0.0.1 by the tests' `serve_main`. A server this project did not write: what `init`
must read as any user's server.

With `SDK_EXAMPLES_ERA=2025` (not the examples' own: the tests' addition) its `server/discover`
advertises only 2025-11-25, as a server that keeps 2025-era sessions does: the SDK's client
then falls back to the `initialize` handshake.

Run: `python -m tests.servers.sdk_examples --port P`.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

import mcp_types as types
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel, Field

from tests.servers import serve_main

mcp = MCPServer("SDK examples")


# examples/mcpserver/parameter_descriptions.py
@mcp.tool()
def greet_user(
    name: str = Field(description="The name of the person to greet"),
    title: str = Field(description="Optional title like Mr/Ms/Dr", default=""),
    times: int = Field(description="Number of times to repeat the greeting", default=1),
) -> str:
    """Greet a user with optional title and repetition"""
    greeting = f"Hello {title + ' ' if title else ''}{name}!"
    return "\n".join([greeting] * times)


# examples/mcpserver/complex_inputs.py
class ShrimpTank(BaseModel):
    class Shrimp(BaseModel):
        name: Annotated[str, Field(max_length=10)]

    shrimp: list[Shrimp]


@mcp.tool()
def name_shrimp(
    tank: ShrimpTank,
    # You can use pydantic Field in function signatures for validation.
    extra_names: Annotated[list[str], Field(max_length=10)],
) -> list[str]:
    """List all shrimp names in the tank"""
    return [shrimp.name for shrimp in tank.shrimp] + extra_names


ERA_ENV = "SDK_EXAMPLES_ERA"


async def _discover_2025_only(ctx: Any, params: types.RequestParams | None) -> types.DiscoverResult:
    return types.DiscoverResult(supported_versions=["2025-11-25"], capabilities=types.ServerCapabilities())


def main() -> None:
    if os.environ.get(ERA_ENV) == "2025":
        mcp._lowlevel_server.add_request_handler("server/discover", types.RequestParams, _discover_2025_only)
    serve_main(mcp.streamable_http_app, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
