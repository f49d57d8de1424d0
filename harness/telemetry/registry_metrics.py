"""The project's own Prometheus counters and gauges over OTLP too, read from the registry at each export.

Observable instruments, one per counter (`mrtr_..._total`) and gauge (`mrtr_...`) of the registry
`/metrics` serves, named as docs/metrics.md names them, their labels as attributes: each export reads
the registry once (`registry.collect()`), so the hot path keeps one set of books, Prometheus's. In
the run process, whose registry holds every worker's counts as well. Histograms stay Prometheus's
(OpenTelemetry has no asynchronous histogram); `mcp.client.operation.duration` is the rounds'
latency over OTLP.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from functools import partial

from opentelemetry.metrics import CallbackOptions, Observation
from prometheus_client import CollectorRegistry
from prometheus_client.samples import Sample

import harness
from harness.telemetry.export import MetricsPipe

__all__ = ["RegistryExport"]

FRESH = 1.0
"""Seconds one read of the registry serves every instrument's callback of the same export."""


class RegistryExport:
    """The registry's counters and gauges as observable instruments, exported until `close` (which sends the last
    values: the run's final counts)."""

    def __init__(self, registry: CollectorRegistry, run_id: str) -> None:
        self._registry = registry
        self._samples: dict[str, list[Sample]] = {}
        self._read_at = -FRESH
        self._pipe = MetricsPipe(run_id)
        meter = self._pipe.provider.get_meter("mrtr-harness", harness.__version__)
        for family in registry.collect():
            if family.type == "counter":
                name = f"{family.name}_total"
                meter.create_observable_counter(name, [partial(self._observe, name)], description=family.documentation)
            elif family.type == "gauge":
                meter.create_observable_gauge(family.name, [partial(self._observe, family.name)],
                                              description=family.documentation)

    def _observe(self, name: str, options: CallbackOptions) -> Iterable[Observation]:
        if time.monotonic() - self._read_at > FRESH:
            samples: dict[str, list[Sample]] = {}
            for family in self._registry.collect():
                for sample in family.samples:
                    samples.setdefault(sample.name, []).append(sample)
            self._samples, self._read_at = samples, time.monotonic()
        return [Observation(sample.value, dict(sample.labels)) for sample in self._samples.get(name, [])]

    def close(self) -> None:
        """The last values sent, the reader stopped (once)."""
        self._pipe.close()
