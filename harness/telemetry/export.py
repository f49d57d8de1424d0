"""Where the harness's spans and metrics go: the SDK's OTLP exporters (http/protobuf), timed by greenlets.

The exporters read OpenTelemetry's own variables (the endpoint, `OTEL_EXPORTER_OTLP_HEADERS`,
timeouts); the harness never reads or writes the headers. Every process names itself
`mrtr-harness` unless `OTEL_SERVICE_NAME` says another, and carries the run's id. The run process is
gevent-patched: its senders (`MetricsPipe`, `SpanSink`: the run span, the chaos, the reconciled
reasons) are greenlets that wake once per batch or export interval, and send with patched sockets.
No SDK thread is started there: the SDK restarts its threads in forked children (below). The flows'
spans and `mcp.client.operation.duration` are exported from the live fold, a plain process that
forks nothing: `FoldSpanSink` there is the SDK's own `BatchSpanProcessor`, with its thread.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from typing import Final

import gevent
import gevent.event
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

import harness
from harness._compat.opentelemetry import ForkQuietMeterProvider
from harness.telemetry.conventions import RUN_ID, SERVICE_NAME_DEFAULT
from harness.telemetry.switch import named_resource

__all__ = ["SCOPE", "FoldSpanSink", "MetricsPipe", "SpanSink", "resource"]

logger = logging.getLogger(__name__)

SCOPE = InstrumentationScope("mrtr-harness", harness.__version__)
"""The instrumentation scope of every span and metric the harness makes itself."""

SHUTDOWN_MILLIS = 10_000
"""How long the end of a process waits for the last spans to be sent (bounded: a backend that is down
costs the run at most this)."""


def resource(run_id: str) -> Resource:
    """`service.name` (`OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES`, else `mrtr-harness`), the other resource
    attributes the variables give, and the run's id."""
    return named_resource(SERVICE_NAME_DEFAULT, {RUN_ID: run_id} if run_id else {})


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
    interval has no thread and no fork hook; the greenlet here does its timing. The provider's own fork hook
    is quieted too (`harness._compat.opentelemetry`).
    """

    def __init__(self, run_id: str) -> None:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        self.provider = ForkQuietMeterProvider(resource=resource(run_id), shutdown_on_exit=False, metric_readers=[
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


BATCH = 512
"""Spans per OTLP request (the SDK's `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` default)."""
QUEUE = 2048 * 8
"""Spans a process holds for export at most; past it the newest are dropped, counted and said once at close
(a backend that cannot keep up must not grow the load process without bound)."""
DELAY = 5.0
"""Seconds between sends when fewer than `BATCH` spans wait (the SDK's `OTEL_BSP_SCHEDULE_DELAY` default)."""


class SpanSink:
    """Finished spans to OTLP: batched here, sent by the SDK's `OTLPSpanExporter` (http/protobuf) from a greenlet.

    `send` hands over spans the harness built itself (`ReadableSpan`, with its own ids); a greenlet
    sends them `BATCH` at a time, every `DELAY` or as soon as a batch is full; `close` sends what
    is left and stops it, so nothing outlives the process's run. Not the SDK's `BatchSpanProcessor`:
    it restarts its worker thread in every child the process forks (`os.register_at_fork`), and in a
    gevent process, whose `subprocess` forks in Python, starting a thread yields to the hub, so the
    child ran the parent's greenlets instead of its `exec` (a run's Locust master forked a second
    master rather than its worker).
    """

    def __init__(self, run_id: str) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        self.resource = resource(run_id)
        self._exporter = OTLPSpanExporter()
        self._queue: list[ReadableSpan] = []
        self._dropped = 0
        self._wake = gevent.event.Event()
        self._closing = False
        self._closed = False
        self._sender = gevent.spawn(self._send_every)

    def send(self, spans: list[ReadableSpan]) -> None:
        if self._closing:
            return
        room = QUEUE - len(self._queue)
        if len(spans) > room:
            self._dropped += len(spans) - room
            spans = spans[:room]
        self._queue.extend(spans)
        if len(self._queue) >= BATCH:
            self._wake.set()

    def _send_every(self) -> None:
        while not self._closing:
            self._wake.wait(DELAY)
            self._wake.clear()
            self._send_queued()
        self._send_queued()

    def _send_queued(self) -> None:
        while self._queue:
            batch, self._queue = self._queue[:BATCH], self._queue[BATCH:]
            self._exporter.export(batch)  # the exporter retries, times out and logs a failure itself

    def close(self) -> None:
        """Send what is queued and stop (once); a backend that does not answer costs at most `SHUTDOWN_MILLIS`."""
        if self._closed:
            return
        self._closed = self._closing = True
        self._wake.set()
        if not self._sender.join(SHUTDOWN_MILLIS / 1000.0):
            self._sender.kill()
        self._exporter.shutdown()
        if self._dropped:
            logger.warning("%d spans were dropped: the OTLP endpoint did not keep up with %d queued",
                           self._dropped, QUEUE)


class FoldSpanSink:
    """Finished spans to OTLP from the live fold (a plain process: no gevent, no fork): the SDK's
    `BatchSpanProcessor` (its thread, its queue and batch, `OTEL_BSP_*`) around its `OTLPSpanExporter`.

    `close` sends what is queued and joins the thread, so nothing outlives the fold; a backend that does not
    answer costs at most `SHUTDOWN_MILLIS` (and the exporter's own timeout).
    """

    def __init__(self, run_id: str) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self.resource = resource(run_id)
        queue = None if os.environ.get("OTEL_BSP_MAX_QUEUE_SIZE") else QUEUE  # the fold hands a second's flows at once
        self._processor = BatchSpanProcessor(OTLPSpanExporter(), max_queue_size=queue)
        self._closed = False

    def send(self, spans: list[ReadableSpan]) -> None:
        if self._closed:
            return
        for span in spans:
            self._processor.on_end(span)

    def close(self) -> None:
        """Send what is queued and stop the processor's thread (once)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._processor.force_flush(SHUTDOWN_MILLIS)
        finally:
            self._processor.shutdown()
