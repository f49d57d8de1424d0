"""A replica's spans over OTLP, and the trace id on its log lines: a rejection a person reads joins its trace.

The MCP SDK opens a SERVER span for every request (`mcp.method.name`, `gen_ai.tool.name`, `error.type`
`-32602` for a refused `requestState`), continuing the trace a client put in `params._meta` (W3C
`traceparent`), through OpenTelemetry's global tracer provider. `start_tracing` installs that provider when
OpenTelemetry's own variables ask (`harness.telemetry.switch.tracing_on`): a batch processor and the OTLP
http exporter, `service.name` from `OTEL_SERVICE_NAME` (else `mrtr-shop`), `service.instance.id` the replica's
label. It runs in the replica's own process, after a zygote's fork: a batch processor's thread does not survive
one. Its spans are flushed when the replica stops gracefully (within `FLUSH_SECONDS`); a replica killed with
SIGKILL loses the spans it had not sent yet.

`TraceIdFilter` puts the trace id of the request being served on each log line (`trace_id=<32 hex>`), with
tracing on or off: a request that carried a `traceparent` has a trace whoever exports it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final

from opentelemetry import trace

from harness.telemetry.switch import named_resource, tracing_on

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

FLUSH_SECONDS: Final = 2.0
"""How long a stopping replica waits for its last spans to leave: a collector that is down must not hold up a
restart (the harness kills a replica that has not stopped 5 s after SIGTERM)."""
DEFAULT_SERVICE_NAME: Final = "mrtr-shop"
"""The replicas' `service.name` when `OTEL_SERVICE_NAME` (or `service.name` in `OTEL_RESOURCE_ATTRIBUTES`) says none."""


def start_tracing(label: str, environ: Mapping[str, str] | None = None) -> Callable[[], None] | None:
    """Export this process's spans when tracing is on; the function that flushes and stops the export, else None."""
    if not tracing_on(environ):
        return None
    provider = tracer_provider(label)
    trace.set_tracer_provider(provider)

    def stop() -> None:
        """Flush and stop the export, waiting `FLUSH_SECONDS` at most (the exporter retries a collector that is
        down for longer); what has not left by then is lost with the process."""
        flushing = threading.Thread(target=provider.shutdown, name="otel-flush", daemon=True)
        flushing.start()
        flushing.join(FLUSH_SECONDS)

    return stop


def tracer_provider(label: str) -> TracerProvider:
    """A tracer provider exporting in batches over OTLP/HTTP, configured by OpenTelemetry's variables (endpoint,
    headers, timeout, batch delay, resource attributes), its resource naming the shop and the replica `label`."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=named_resource(DEFAULT_SERVICE_NAME, {SERVICE_INSTANCE_ID: label}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


class TraceIdFilter(logging.Filter):
    """Sets `record.trace` to ` trace_id=<32 hex>` inside a traced request, else to nothing (a format field)."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = trace.get_current_span().get_span_context()
        record.trace = f" trace_id={trace.format_trace_id(context.trace_id)}" if context.is_valid else ""
        return True
