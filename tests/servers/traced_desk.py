"""traced_desk: the refund desk with the SDK's own OpenTelemetry on, its SERVER spans exported over OTLP.

The SDK's server opens a SERVER span per request (`OpenTelemetryMiddleware`, on by default) and
continues the trace of the request's `params._meta` `traceparent`; with a tracer provider set, those
spans reach the receiver `OTEL_EXPORTER_OTLP_ENDPOINT` names, each as soon as it ends (a simple
processor: the test stops the server without waiting for a batch).

Run: `OTEL_EXPORTER_OTLP_ENDPOINT=URL python -m tests.servers.traced_desk --port P`.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from starlette.types import ASGIApp

from tests.servers import refund_desk, serve_main


def build_app() -> ASGIApp:
    provider = TracerProvider(resource=Resource.create({"service.name": "traced-desk"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return refund_desk.build_app()


def main() -> None:
    serve_main(build_app, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
