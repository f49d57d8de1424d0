"""Where the harness's spans and metrics go: the SDK's batch processor and periodic reader, over OTLP http/protobuf.

The exporters read OpenTelemetry's own variables (the endpoint, `OTEL_EXPORTER_OTLP_HEADERS`,
timeouts); the harness never reads or writes the headers. Every process names itself
`mrtr-harness` unless `OTEL_SERVICE_NAME` says another, and carries the run's id. In a load
process (gevent-patched) the processor's worker and the reader's timer are greenlets: they wake
once per batch or export interval, never per round, and send with patched sockets, so an export
waiting on the network holds up no round; encoding is paid only for what sampling kept.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

import harness
from harness.telemetry import switch
from harness.telemetry.conventions import RUN_ID, SERVICE_NAME_DEFAULT

__all__ = ["SCOPE", "SpanSink", "resource"]

logger = logging.getLogger(__name__)

SCOPE = InstrumentationScope("mrtr-harness", harness.__version__)
"""The instrumentation scope of every span and metric the harness makes itself."""

SHUTDOWN_MILLIS = 10_000
"""How long the end of a process waits for the last spans to be sent (bounded: a backend that is down
costs the run at most this)."""


def resource(run_id: str) -> Resource:
    """`service.name` (`OTEL_SERVICE_NAME`, else `mrtr-harness`), `OTEL_RESOURCE_ATTRIBUTES`, and the run's id."""
    name = os.environ.get(switch.SERVICE_NAME) or SERVICE_NAME_DEFAULT
    attributes: dict[str, Any] = {SERVICE_NAME: name}
    if run_id:
        attributes[RUN_ID] = run_id
    return Resource.create(attributes)


class SpanSink:
    """Finished spans to OTLP: the SDK's `BatchSpanProcessor` in front of its `OTLPSpanExporter` (http/protobuf).

    `send` hands over spans the harness built itself (`ReadableSpan`, with its own ids); `close`
    flushes what is queued and stops the worker, so nothing outlives the process's run.
    """

    def __init__(self, run_id: str) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        self.resource = resource(run_id)
        self._processor = BatchSpanProcessor(OTLPSpanExporter())
        self._closed = False

    def send(self, spans: list[ReadableSpan]) -> None:
        if self._closed:
            return
        for span in spans:
            self._processor.on_end(span)

    def close(self) -> None:
        """Flush and stop (once); a backend that does not answer costs at most `SHUTDOWN_MILLIS`."""
        if self._closed:
            return
        self._closed = True
        try:
            self._processor.force_flush(SHUTDOWN_MILLIS)
        finally:
            self._processor.shutdown()
