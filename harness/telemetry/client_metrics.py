"""`mcp.client.operation.duration` over OTLP: one value per round, in the conventions' buckets.

Kept here, not in the SDK's `Histogram` instrument: recording through the SDK (its measurement,
its attributes hashed, its lock, per round) took a tenth of a traced load process's time, which
alone broke the bound on what tracing may cost. A round here is a tuple of its raw journal fields
and an append to that tuple's list; after each batch of journal lines the lists are counted into
their series in C (`Counter` over `bisect`, `sum`, `min`, `max`), and the conventions' `error.type`
is worked out once per new combination of fields. Recorded in the run's live fold, from each
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
from collections import Counter
from functools import partial
from typing import Any

from harness.telemetry import conventions as attr
from harness.telemetry.export import SCOPE, export_interval, resource
from harness.telemetry.marks import error_type

__all__ = ["ClientDurations"]

logger = logging.getLogger(__name__)

MAX_SERIES = 256
"""Attribute sets a process records under; past them, a new error type is `_OTHER` (the conventions' word)."""

MAX_FIELDS = 4 * MAX_SERIES
"""Combinations of raw journal fields remembered as a short cut to their series."""

DESCRIPTION = "Duration of the MCP request as observed by the sender."


class _Series:
    """One attribute set's cumulative histogram: counts per bucket (one more than the bounds), sum, min, max."""

    __slots__ = ("attributes", "started", "counts", "sum", "count", "min", "max")

    def __init__(self, attributes: dict[str, Any], started: int) -> None:
        self.attributes = attributes
        self.started = started
        """When its counting began: the recorder's start, before any round it holds (rounds wait for a batch)."""
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
        self._started = time.time_ns()
        self._series: dict[tuple[str, str | None, str], _Series] = {}
        """The series by their attributes (tool, `error.type`, revision): what is exported."""
        self._by_fields: dict[tuple[Any, ...], _Series] = {}
        """The same series by the raw journal fields that fall in them (several may share one)."""
        self._pending: dict[tuple[Any, ...], list[Any]] = {}
        """Rounds recorded since the last `add_pending`, by their raw fields: only the recording thread reads it."""
        self._closed = False
        self._lock = threading.Lock()
        """Held while a round is counted and while the series are read for an export (two threads)."""
        self._stop = threading.Event()
        self._timer = threading.Thread(target=self._every, args=(export_interval(),), name="mcp-durations",
                                       daemon=True)
        self._timer.start()

    def record_round(self, seconds: Any, tool: Any, code: str | None, http_status: Any, version: str) -> None:
        """One round as the journal wrote it: `seconds` from send to answer, its tool, its failure's journal `code`
        (None: it did not fail) and HTTP status, its host's revision. Set aside by its raw fields (a tuple look-up
        and an append) until `add_pending`, which counts a batch at once; a round whose fields are not of the
        journal's types (a damaged journal) is left out there, never counted under a made-up series."""
        key = (tool, version) if code is None else (tool, version, code, http_status)
        try:
            values = self._pending.get(key)
        except TypeError:  # a field that is no JSON scalar
            return
        if values is None:
            values = self._pending[key] = []
        values.append(seconds)

    def add_pending(self) -> None:
        """Count the rounds set aside since the last call into their series: bucket counts, sum, min and max of each
        series' values in C (`Counter` over `bisect`, `sum`, `min`, `max`), not round by round in Python. Called by
        the thread that records (the live fold, after each batch of journal lines, and at `close`)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        with self._lock:
            for key, values in pending.items():
                series = self._by_fields.get(key) or self._series_of(key)
                if series is not None:
                    _count(series, values)

    def _series_of(self, key: tuple[Any, ...]) -> _Series | None:
        """The series a new combination of raw fields counts under (made when new); None when they are not the
        journal's types."""
        tool, version, code, http_status = key if len(key) == 4 else (*key, None, None)
        if type(tool) is not str or type(version) is not str:
            return None
        failure = None if code is None else error_type(code, http_status if type(http_status) is int else None)
        series = self._series.get((tool, failure, version)) or self._new_series((tool, failure, version))
        if len(self._by_fields) < MAX_FIELDS:  # past it (a server that makes up a code per answer), no short cut
            self._by_fields[key] = series
        return series

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
        series = self._series[(tool, error_type, version)] = _Series(attributes, self._started)
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
            self.add_pending()
            self._stop.set()
            self._timer.join()  # an export under way ends within the exporter's own timeout
            try:
                self._export()
            finally:
                self._exporter.shutdown()


def _count(series: _Series, values: list[Any]) -> None:
    """A batch of one series' round times into it; values that are not numbers (a damaged journal) are left out."""
    try:
        buckets = Counter(map(_bucket_of, values))  # a bucket holds values up to its bound
    except TypeError:
        values = [value for value in values if isinstance(value, int | float)]
        buckets = Counter(map(_bucket_of, values))
    if not values:
        return
    counts = series.counts
    for bucket, number in buckets.items():
        counts[bucket] += number
    series.sum += sum(values)
    series.count += len(values)
    series.min = min(series.min, min(values))
    series.max = max(series.max, max(values))


_bucket_of = partial(bisect_left, attr.DURATION_BUCKETS)
