"""The MCP SDK's private parts the harness relies on (pinned by tests/test_compat.py).

- `mcp.shared._httpx_utils.create_mcp_http_client`: the HTTP client the SDK's transports
  make for themselves (its default timeouts, redirects left off). A 2025-era session
  (`harness.mrtr.legacy`) passes its own client to the SDK's streamable HTTP transport, to
  carry the lead's token and headers, and makes it as the SDK would.

Importing this module imports the SDK's client side: only the 2025-era session does.
"""

from __future__ import annotations

from mcp.shared._httpx_utils import create_mcp_http_client

__all__ = ["create_mcp_http_client"]
