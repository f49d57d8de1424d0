"""Export the SDK's `requestState` rejection reasons from any MRTR server: one call.

The client of an MRTR server only ever sees `-32602 "Invalid or expired requestState"`;
why the state was refused exists in one log line on `mcp.server.request_state`. Add

    from harness.metrics.instrument import instrument
    instrument(server)          # server: mcp.server.mcpserver.MCPServer

to your own server and it counts every rejection by reason in
`mrtr_request_state_rejections_total{reason}` (every reason the SDK knows pre-set to 0,
so a dashboard shows a flat zero rather than no data) and serves `/metrics`. Every shop
replica is instrumented this way.
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from harness.mrtr.reasons import OTHER_REASON, REASONS, REQUEST_STATE_LOGGER, parse_rejection

__all__ = ["RejectionCounter", "instrument"]


class RejectionCounter(logging.Handler):
    """A logging handler that turns each SDK rejection line into a counter increment.

    It reads the record's formatted message, not the console output, so it counts the
    same whatever handler (plain, rich, JSON) prints the line.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(level=logging.WARNING)
        self.counter = Counter(
            "mrtr_request_state_rejections_total",
            "requestState rejections by the reason the MCP SDK logged (the client sees only -32602).",
            ["reason"],
            registry=registry,
        )
        for reason in (*REASONS, OTHER_REASON):
            self.counter.labels(reason=reason)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            parsed = parse_rejection(record.getMessage())
        except Exception:  # noqa: BLE001 - a metrics hook must never break the server's logging
            return
        if parsed is not None:
            self.counter.labels(reason=parsed[1]).inc()


def instrument(server: Any | None = None, *, registry: CollectorRegistry = REGISTRY,
               path: str = "/metrics") -> RejectionCounter:
    """Count rejections by reason; with an `MCPServer`, also serve the registry at `path`.

    Makes sure WARNING lines of the SDK's logger are emitted (a server that silenced
    `mcp` logging would otherwise count nothing) without changing where they print.
    """
    handler = RejectionCounter(registry)
    logger = logging.getLogger(REQUEST_STATE_LOGGER)
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.WARNING:
        logger.setLevel(logging.WARNING)
    if server is not None:
        _serve_metrics(server, registry, path)
    return handler


def _serve_metrics(server: Any, registry: CollectorRegistry, path: str) -> None:
    from starlette.requests import Request
    from starlette.responses import Response

    @server.custom_route(path, methods=["GET"], include_in_schema=False)
    async def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
