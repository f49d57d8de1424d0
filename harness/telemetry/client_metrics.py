"""`mcp.client.operation.duration` over OTLP: one value per round, in the conventions' buckets.

Kept here, not in the SDK's `Histogram` instrument: recording through the SDK (its measurement,
its attributes hashed, its lock, per round) took a tenth of a traced load process's time, which
alone broke the bound on what tracing may cost. A round here is a dict look-up, a bisection and
four additions into its series' cumulative counts. Recorded in the run's live fold, from each
round record's `server_time` (the load process writes the round; the fold, on another core, counts
it). Every `OTEL_METRIC_EXPORT_INTERVAL` (60 s by default) and at `close`, a thread of the fold (a plain
process) hands the series to the SDK's own `OTLPMetricExporter` as the SDK's own data points
(cumulative temporality, the conventions' explicit bounds), so what arrives is exactly what an SDK
histogram would have sent.
"""

from __future__ import annotations

import logging
import threading
import time
from bisect import bisect_left
from typing import Any

from harness.telemetry import conventions as attr
from harness.telemetry.export import SCOPE, export_interval, resource

__all__ = ["ClientDurations"]

logger = logging.getLogger(__name__)

MAX_SERIES = 256
"""Attribute sets a process records under; past them, a new error type is `_OTHER` (the conventions' word)."""

DESCRIPTION = "Duration of the MCP request as observed by the sender."


class _Series:
    """One attribute set's cumulative histogram: counts per bucket (one more than the bounds), sum, min, max."""

    __slots__ = ("attributes", "started", "counts", "sum", "count", "min", "max")

    def __init__(self, attributes: dict[str, Any]) -> None:
        self.attributes = attributes
        self.started = time.time_ns()
        self.counts = [0] * (len(attr.DURATION_BUCKETS) + 1)
        self.sum = 0.0
        self.count = 0
        self.min = float("inf")
        self.max = float("-inf")


class ClientDurations:
    """This process's `mcp.client.operation.duration`, exported over OTLP until `close`."""

    def __init__(self, run_id: str) -> None:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        self._resource = resource(run_id)
        self._exporter = OTLPMetricExporter()
        self._series: dict[tuple[str, str | None, str], _Series] = {}
        self._closed = False
        self._lock = threading.Lock()
        """Held while a round is counted and while the series are read for an export (two threads)."""
        self._stop = threading.Event()
        self._timer = threading.Thread(target=self._every, args=(export_interval(),), name="mcp-durations",
                                       daemon=True)
        self._timer.start()

    def record(self, seconds: float, tool: str, error_type: str | None, version: str) -> None:
        """One round: `seconds` from send to answer; `error_type` the conventions' value when it failed."""
        key = (tool, error_type, version)
        with self._lock:
            series = self._series.get(key)
            if series is None:
                series = self._new_series(key)
            series.counts[bisect_left(attr.DURATION_BUCKETS, seconds)] += 1  # a bucket holds values up to its bound
            series.sum += seconds
            series.count += 1
            if seconds < series.min:
                series.min = seconds
            if seconds > series.max:
                series.max = seconds

    def _new_series(self, key: tuple[str, str | None, str]) -> _Series:
        tool, error_type, version = key
        if len(self._series) >= MAX_SERIES:  # a server that makes up a code per answer
            error_type = "_OTHER" if error_type is not None else None
            series = self._series.get((tool, error_type, version))
            if series is not None:
                return series
        attributes: dict[str, Any] = {attr.MCP_METHOD: "tools/call", attr.GEN_AI_TOOL: tool,
                                      attr.MCP_PROTOCOL_VERSION: version}
        if error_type is not None:
            attributes[attr.ERROR_TYPE] = error_type
        series = self._series[(tool, error_type, version)] = _Series(attributes)
        return series

    def _every(self, seconds: float) -> None:
        while not self._stop.wait(seconds):
            self._export()

    def _export(self) -> None:
        """Every series so far, cumulative, through the SDK's exporter (a failure is the exporter's to log)."""
        from opentelemetry.sdk.metrics.export import (
            AggregationTemporality,
            Histogram,
            HistogramDataPoint,
            Metric,
            MetricsData,
            ResourceMetrics,
            ScopeMetrics,
        )

        now = time.time_ns()
        with self._lock:
            points = [HistogramDataPoint(attributes=series.attributes, start_time_unix_nano=series.started,
                                         time_unix_nano=now, count=series.count, sum=series.sum,
                                         bucket_counts=list(series.counts),
                                         explicit_bounds=list(attr.DURATION_BUCKETS), min=series.min, max=series.max)
                      for series in self._series.values() if series.count]
        if not points:
            return
        metric = Metric(name=attr.CLIENT_DURATION, description=DESCRIPTION, unit="s",
                        data=Histogram(data_points=points,
                                       aggregation_temporality=AggregationTemporality.CUMULATIVE))
        data = MetricsData(resource_metrics=[ResourceMetrics(
            resource=self._resource, scope_metrics=[ScopeMetrics(scope=SCOPE, metrics=[metric], schema_url="")],
            schema_url="")])
        try:
            self._exporter.export(data)
        except Exception:  # a backend that is down costs the run its metrics, never the run
            logger.warning("mcp.client.operation.duration could not be exported", exc_info=True)

    def close(self) -> None:
        """The last values sent, the exporter shut (once)."""
        if not self._closed:
            self._closed = True
            self._stop.set()
            self._timer.join()  # an export under way ends within the exporter's own timeout
            try:
                self._export()
            finally:
                self._exporter.shutdown()
