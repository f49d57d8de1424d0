"""`mcp.client.operation.duration` over OTLP: one value per round, in the conventions' buckets.

The SDK's `MeterProvider` and its `OTLPMetricExporter` (http/protobuf), sent every
`OTEL_METRIC_EXPORT_INTERVAL` (60 s by default; `export.MetricsPipe`); `close` collects and sends
the last values, so a run shorter than an interval still exports them. Attributes per round are
one of a few dicts made once each (method, tool, error, version), so recording costs a dict look-up
and the SDK's own update.
"""

from __future__ import annotations

from typing import Any

import harness
from harness.telemetry import conventions as attr
from harness.telemetry.export import MetricsPipe

__all__ = ["ClientDurations"]

MAX_SERIES = 256
"""Attribute sets a process records under; past them, a new error type is `_OTHER` (the conventions' word)."""


class ClientDurations:
    """This process's `mcp.client.operation.duration`, exported over OTLP until `close`."""

    def __init__(self, run_id: str) -> None:
        self._pipe = MetricsPipe(run_id)
        meter = self._pipe.provider.get_meter("mrtr-harness", harness.__version__)
        self._histogram = meter.create_histogram(
            attr.CLIENT_DURATION, unit="s", description="Duration of the MCP request as observed by the sender.",
            explicit_bucket_boundaries_advisory=list(attr.DURATION_BUCKETS))
        self._attributes: dict[tuple[str, str | None, str], dict[str, Any]] = {}

    def record(self, seconds: float, tool: str, error_type: str | None, version: str) -> None:
        """One round: `seconds` from send to answer; `error_type` the conventions' value when it failed."""
        key = (tool, error_type, version)
        attributes = self._attributes.get(key)
        if attributes is None and len(self._attributes) >= MAX_SERIES:  # a server that makes up a code per answer
            key = (tool, "_OTHER" if error_type is not None else None, version)
            error_type = key[1]
            attributes = self._attributes.get(key)
        if attributes is None:
            attributes = {attr.MCP_METHOD: "tools/call", attr.GEN_AI_TOOL: tool, attr.MCP_PROTOCOL_VERSION: version}
            if error_type is not None:
                attributes[attr.ERROR_TYPE] = error_type
            self._attributes[key] = attributes
        self._histogram.record(seconds, attributes)

    def close(self) -> None:
        """The last values sent, the reader stopped (once)."""
        self._pipe.close()
