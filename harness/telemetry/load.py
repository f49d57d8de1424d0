"""A load process's OpenTelemetry: its flows' spans and its rounds' durations, each on only when its switch says.

Built once per load process (the run's own in a local run, each Locust worker's own), from the
same variables every process reads (`harness.telemetry.switch`); None when neither signal is on,
so a flow asks one `is None` and nothing of OpenTelemetry is imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.telemetry import switch
from harness.vocabulary import MODERN_REVISION

if TYPE_CHECKING:
    from harness.telemetry.client_metrics import ClientDurations
    from harness.telemetry.flow_spans import FlowSpans

__all__ = ["LoadTelemetry", "load_telemetry"]


@dataclass
class LoadTelemetry:
    """What a load process exports: `spans` (tracing on) and `durations` (metrics on); `close` flushes both."""

    spans: FlowSpans | None
    durations: ClientDurations | None

    def close(self) -> None:
        """Send what is left and stop the exporters: called when the process's flows are all ended."""
        for part in (self.spans, self.durations):
            if part is not None:
                part.close()


def load_telemetry(seed: int, run_id: str) -> LoadTelemetry | None:
    """The telemetry the variables ask for, or None; `seed` decides the sampled share (`flow_spans`)."""
    spans = durations = None
    if switch.tracing_on():
        from harness.telemetry.export import SpanSink
        from harness.telemetry.flow_spans import FlowSpans
        from harness.telemetry.marks import sampled_share

        spans = FlowSpans(SpanSink(run_id), seed, sampled_share(), MODERN_REVISION)
    if switch.metrics_on():
        from harness.telemetry.client_metrics import ClientDurations

        durations = ClientDurations(run_id)
    return LoadTelemetry(spans, durations) if spans is not None or durations is not None else None
