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
import math
import os
from collections.abc import Mapping
from typing import Any, Final

import gevent
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

import harness
from harness.telemetry import switch
from harness.telemetry.conventions import RUN_ID, SERVICE_NAME_DEFAULT

__all__ = ["SCOPE", "MetricsPipe", "SpanSink", "resource"]

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


EXPORT_INTERVAL: Final = "OTEL_METRIC_EXPORT_INTERVAL"
DEFAULT_INTERVAL_MILLIS: Final = 60_000


def export_interval(environ: Mapping[str, str] | None = None) -> float:
    """`OTEL_METRIC_EXPORT_INTERVAL` in seconds (milliseconds in the variable; 60 s when unset or not a number > 0)."""
    text = (os.environ if environ is None else environ).get(EXPORT_INTERVAL, "").strip()
    try:
        millis = float(text) if text else DEFAULT_INTERVAL_MILLIS
    except ValueError:
        millis = DEFAULT_INTERVAL_MILLIS
    return (millis if millis > 0 and math.isfinite(millis) else DEFAULT_INTERVAL_MILLIS) / 1000.0


class MetricsPipe:
    """A `MeterProvider` whose reader exports every `OTEL_METRIC_EXPORT_INTERVAL` from a greenlet of this process,
    and once more at `close`.

    Not the SDK's own timer thread: the SDK restarts that thread in every child the process forks
    (`os.register_at_fork`), and a gevent process's `subprocess` forks in Python, so each child the run starts
    would export the parent's metrics (or warn that its exporter is shut) before it execs. A reader with no
    interval has no thread and no fork hook; the greenlet here does its timing.
    """

    def __init__(self, run_id: str) -> None:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        self.provider = MeterProvider(resource=resource(run_id), shutdown_on_exit=False, metric_readers=[
            PeriodicExportingMetricReader(OTLPMetricExporter(), export_interval_millis=math.inf)])
        self._timer = gevent.spawn(self._every, export_interval())
        self._closed = False

    def _every(self, seconds: float) -> None:
        while True:
            gevent.sleep(seconds)
            self.provider.force_flush(SHUTDOWN_MILLIS)

    def close(self) -> None:
        """The last values collected and sent, the reader stopped (once)."""
        if not self._closed:
            self._closed = True
            self._timer.kill()
            try:
                self.provider.force_flush(SHUTDOWN_MILLIS)  # a reader with no timer collects nothing at shutdown
            finally:
                self.provider.shutdown(timeout_millis=SHUTDOWN_MILLIS)


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
