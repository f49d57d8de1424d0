"""A locustfile: Locust's own `FastHttpUser` POSTing one request body again and again, the floor for a load process.

`benchmarks/flows_per_second.py` runs it with the `locust` command beside each harness run,
against the same stub servers (`benchmarks/stub_server.py`), with as many users as the
harness has agents: what one Locust process does per second and per core when each
request is a plain POST with no MRTR on top (Locust's documentation puts FastHttpUser at
about 16,000 simple requests/s per core). The body is the harness's round 1 of the stub's
`confirm` tool, with its routing headers, so the stub does the same work it does for a
harness round 1 (and answers `input_required`); the users alternate between the stub URLs
given in `PLAIN_POST_URLS` (comma-separated), as the harness's round-robin does.
"""

from __future__ import annotations

import itertools
import json
import os

from locust import FastHttpUser, constant, task

URLS = [url for url in os.environ.get("PLAIN_POST_URLS", "").split(",") if url]
BODY = json.dumps({
    "jsonrpc": "2.0", "id": 1, "method": "tools/call",
    "params": {"name": "confirm", "arguments": {"item": "X-1"},
               "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                         "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
                         "io.modelcontextprotocol/clientInfo": {"name": "plain-posts", "version": "0"}}},
}, separators=(",", ":")).encode()
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
           "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "confirm"}


class PlainPost(FastHttpUser):
    """One POST after another, no wait, alternating between the stub servers."""

    wait_time = constant(0)
    host = URLS[0] if URLS else "http://127.0.0.1:9"

    def on_start(self) -> None:
        self._urls = itertools.cycle(URLS or [self.host])

    @task
    def post(self) -> None:
        self.client.post(next(self._urls), data=BODY, headers=HEADERS, name="round 1")
