"""The flows' OpenTelemetry, folded from the journal by the run's live fold: their spans and the rounds' durations.

The load process only draws the ids, puts each round's `traceparent` in its request and writes the
ids into the journal (the `start` record's `trace_id`, each round's `span_id`). Here, in the live
fold process (a core of its own), every round record's `server_time` goes into
`mcp.client.operation.duration`, and a flow in flight keeps what its spans need (its start, one
`RoundSpan` per round: `harness.telemetry.flow_spans`) until its `flow` record comes; then the
sampling decides (`marks.Sampling`) and a kept flow's spans go to the exporter. The flow's entry goes
with its end: memory holds the flows in flight, never the ones done. Only the live fold of a run
with export on builds one (`fold_telemetry`); `report DIR` never exports. The records are the run's
own but read as untrusted: a round or flow whose ids or fields are not what the journal writes is
left out of the spans.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from harness.folding.figures import add_by_kind
from harness.journal.records import RecordType, RunEvent
from harness.telemetry import switch
from harness.telemetry.marks import error_type
from harness.vocabulary import MODERN_REVISION

if TYPE_CHECKING:
    from harness.telemetry.client_metrics import ClientDurations
    from harness.telemetry.export import FoldSpanSink
    from harness.telemetry.flow_spans import FlowStart, RoundSpan
    from harness.telemetry.marks import Sampling

__all__ = ["FlowTelemetry", "fold_telemetry"]

_TRACE_ID: Final = re.compile(r"[0-9a-f]{32}")
_SPAN_ID: Final = re.compile(r"[0-9a-f]{16}")
_RUN: Final = RecordType.RUN.value


class _InFlight:
    """A traced flow in flight: its start, its rounds' span fields, whether one failed."""

    __slots__ = ("start", "rounds", "failed")

    def __init__(self, start: FlowStart) -> None:
        self.start = start
        self.rounds: list[tuple[Any, ...]] = []
        """Each round's raw fields in `RoundSpan`'s order, as its record had them (checked if the flow is kept)."""
        self.failed = False


class FlowTelemetry:
    """What the live fold exports: kept flows' spans (`sink`: tracing on) and the rounds' durations (metrics on)."""

    def __init__(self, sink: FoldSpanSink | None, sampling: Sampling | None, durations: ClientDurations | None
                 ) -> None:
        self.sink, self.sampling, self.durations = sink, sampling, durations
        self.in_flight: dict[str, _InFlight] = {}
        """Traced flows started and not ended yet (tracing on only): an entry goes when its `flow` record comes."""
        self.protocols: dict[str, str] = {}
        """Flows in flight whose host speaks a 2025 revision (metrics on, tracing off: the duration's attribute)."""

    def add(self, record: Mapping[str, Any]) -> None:
        """One journal record (a dict): a flow's start, a round, a flow's end, or the run's start (its seed)."""
        if add_by_kind(self, record):
            return
        if record.get("type") == _RUN and record.get("event") == RunEvent.START and self.sampling is not None:
            seed = record.get("seed")
            if isinstance(seed, int):
                self.sampling.seed = seed

    def add_start(self, record: Mapping[str, Any]) -> None:
        flow_id, protocol = record.get("flow_id"), record.get("protocol")
        if not isinstance(flow_id, str):
            return
        if not isinstance(protocol, str):
            protocol = MODERN_REVISION
        elif self.sink is None:
            self.protocols[flow_id] = protocol
        trace_id = record.get("trace_id")
        if self.sink is None or not isinstance(trace_id, str) or _TRACE_ID.fullmatch(trace_id) is None:
            return
        from harness.telemetry.flow_spans import FlowStart

        lead = record.get("lead")
        self.in_flight[flow_id] = _InFlight(FlowStart(
            int(trace_id, 16), str(record.get("flow", "")), _number(record.get("t")), str(record.get("host", "")),
            lead if isinstance(lead, int) else None, protocol))

    def add_round(self, record: Mapping[str, Any]) -> None:
        """Per round, the least work: the duration recorded, and the raw fields a span needs kept (read and checked
        only if the flow is kept, at its end: most flows are not)."""
        get = record.get
        flow_id, code = get("flow_id"), get("code")
        code = code if isinstance(code, str) else None
        flow = self.in_flight.get(flow_id) if isinstance(flow_id, str) else None
        if self.durations is not None:
            self._duration(record, flow, code)
        if flow is None:
            return
        flow.rounds.append((get("span_id"), get("tool"), get("round"), get("replica"), get("server"),
                            get("request_id"), get("sent"), get("t"), get("outcome"), code, get("http_status"),
                            get("state_bytes")))
        if code is not None:
            flow.failed = True

    def _duration(self, record: Mapping[str, Any], flow: _InFlight | None, code: str | None) -> None:
        assert self.durations is not None
        seconds, tool = record.get("server_time"), record.get("tool")
        if not isinstance(seconds, int | float) or not isinstance(tool, str):
            return
        if flow is not None:
            protocol = flow.start.protocol
        else:
            protocol = self.protocols.get(record.get("flow_id"), MODERN_REVISION)  # type: ignore[arg-type]
        http_status = record.get("http_status")
        self.durations.record(float(seconds), tool,
                              error_type(code, http_status if isinstance(http_status, int) else None)
                              if code is not None else None, protocol)

    def add_flow(self, record: Mapping[str, Any]) -> None:
        flow_id = record.get("flow_id")
        if not isinstance(flow_id, str):
            return
        self.protocols.pop(flow_id, None)
        flow = self.in_flight.pop(flow_id, None)
        if flow is None or self.sink is None or self.sampling is None:
            return
        outcome = str(record.get("outcome", ""))
        if not self.sampling.kept(flow_id, flow.failed, outcome):
            return
        from harness.telemetry.flow_spans import flow_spans
        from harness.telemetry.marks import KEPT_OUTCOMES

        rounds = [span for raw in flow.rounds if (span := _round_span(raw)) is not None]
        self.sink.send(flow_spans(flow.start, rounds, flow_id=flow_id, outcome=outcome,
                                  failed=flow.failed or outcome in KEPT_OUTCOMES, ended=_number(record.get("t")),
                                  resource=self.sink.resource))

    def close(self) -> None:
        """The last spans and durations sent, the exporters stopped (flows still in flight are left out)."""
        self.in_flight.clear()
        try:
            if self.sink is not None:
                self.sink.close()
        finally:
            if self.durations is not None:
                self.durations.close()


def fold_telemetry(run_id: str) -> FlowTelemetry | None:
    """The live fold's telemetry as OpenTelemetry's variables ask (`switch`), or None when neither signal is on."""
    sink = sampling = durations = None
    if switch.tracing_on():
        from harness.telemetry.export import FoldSpanSink
        from harness.telemetry.marks import Sampling

        sink, sampling = FoldSpanSink(run_id), Sampling(0)
    if switch.metrics_on():
        from harness.telemetry.client_metrics import ClientDurations

        durations = ClientDurations(run_id)
    return FlowTelemetry(sink, sampling, durations) if sink is not None or durations is not None else None


def _round_span(raw: tuple[Any, ...]) -> RoundSpan | None:
    """A kept flow's round, its fields checked (the journal is read as untrusted); None when its span id is not one."""
    from harness.telemetry.flow_spans import RoundSpan

    (span_id, tool, number, replica, server, request_id, sent, received, outcome, code, http_status,
     state_bytes) = raw
    if not isinstance(span_id, str) or _SPAN_ID.fullmatch(span_id) is None:
        return None
    return RoundSpan(int(span_id, 16), str(tool or ""), _integer(number) or 0, str(replica or ""), str(server or ""),
                     _integer(request_id), _number(sent), _number(received), str(outcome or ""), code,
                     _integer(http_status), _integer(state_bytes))


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
