"""The flows' OpenTelemetry, folded from the journal by the run's live fold: their spans and the rounds' durations.

The load process only draws the ids, puts each round's `traceparent` in its request and writes the ids into
the journal (the `start` record's `trace_id`, each round's `span_id`). Here, in the live fold process (a core
of its own), every round record's `server_time` goes into `mcp.client.operation.duration` (counted a batch of
records at a time: `batch_done`), and a flow in flight keeps its records (a reference each, nothing read from
them) until its `flow` record comes; then only a flow the load kept (its `flow` record marked with its trace
id: `marks.Sampling`) has its records read into its spans (`harness.telemetry.flow_spans`) for the exporter. A
record kept whole holds about a kilobyte more than a tuple of the fields a span needs would: the price, paid
only by rounds of flows in flight (the rate times the leads' think time), of not building that tuple for the
98% of flows that are not kept. The flow's entry goes with its end: memory holds the flows in flight, never
the ones done. Only the live fold of a run with export on builds one (`fold_telemetry`); `report DIR` never
exports. The records are the run's own but read as untrusted: a round or flow whose ids or fields are not what
the journal writes is left out of the spans.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from harness.journal.records import RecordType
from harness.telemetry import switch
from harness.vocabulary import MODERN_REVISION

if TYPE_CHECKING:
    from harness.telemetry.client_metrics import ClientDurations
    from harness.telemetry.export import FoldSpanSink
    from harness.telemetry.flow_spans import FlowStart, RoundSpan

__all__ = ["FlowTelemetry", "fold_telemetry"]

_TRACE_ID: Final = re.compile(r"[0-9a-f]{32}")
_SPAN_ID: Final = re.compile(r"[0-9a-f]{16}")
_START: Final = RecordType.START.value
_ROUND: Final = RecordType.ROUND.value
_FLOW: Final = RecordType.FLOW.value


class FlowTelemetry:
    """What the live fold exports: kept flows' spans (`sink`: tracing on) and the rounds' durations (metrics on)."""

    def __init__(self, sink: FoldSpanSink | None, durations: ClientDurations | None) -> None:
        self.sink, self.durations = sink, durations
        self.in_flight: dict[str, list[Mapping[str, Any]]] = {}
        """Traced flows started and not ended yet (tracing on only), each its start record then its round records,
        as read (a reference each): an entry goes when its `flow` record comes."""
        self.protocols: dict[str, str] = {}
        """Flows in flight whose host speaks a 2025 revision (the duration's and the spans' attribute)."""
        self.routes: dict[str, Callable[[Mapping[str, Any]], None]] = {
            _START: self.add_start, _ROUND: self.add_round, _FLOW: self.add_flow}
        """Each record kind this reads, to its method: the live fold calls them by the kind it already read."""

    def add(self, record: Mapping[str, Any]) -> None:
        """One journal record (a dict): a flow's start, a round or a flow's end; any other is not read."""
        kind = record.get("type")
        route = self.routes.get(kind) if type(kind) is str else None
        if route is not None:
            route(record)

    def add_start(self, record: Mapping[str, Any]) -> None:
        get = record.get
        flow_id, protocol = get("flow_id"), get("protocol")
        if type(flow_id) is not str:
            return
        if type(protocol) is str:
            self.protocols[flow_id] = protocol
        if self.sink is not None and type(get("trace_id")) is str:
            self.in_flight[flow_id] = [record]

    def add_round(self, record: Mapping[str, Any]) -> None:
        """Per round, the least work: the duration set aside, and the record kept for its flow's spans. A field of
        the wrong type (the journal is read as untrusted) costs the round its duration, never the fold."""
        get = record.get
        flow_id = get("flow_id")
        if type(flow_id) is not str:
            return
        if self.durations is not None:
            code = get("code")
            self.durations.record_round(get("server_time"), get("tool"), code if type(code) is str else None,
                                        get("http_status"),
                                        self.protocols.get(flow_id, MODERN_REVISION) if self.protocols
                                        else MODERN_REVISION)
        flow = self.in_flight.get(flow_id)
        if flow is not None:
            flow.append(record)

    def add_flow(self, record: Mapping[str, Any]) -> None:
        """A flow's end: its records forgotten, and its spans sent when the load kept it. The load decides the
        sampling (`marks.Sampling`) when the flow ends and marks a kept flow's `flow` record with its trace id, so
        the journal and the backend agree on which flows were exported, whichever process's share decided."""
        flow_id = record.get("flow_id")
        if type(flow_id) is not str:
            return
        protocol = self.protocols.pop(flow_id, MODERN_REVISION) if self.protocols else MODERN_REVISION
        flow = self.in_flight.pop(flow_id, None)
        mark = record.get("trace_id")
        if flow is None or self.sink is None or type(mark) is not str:
            return
        from harness.telemetry.flow_spans import flow_spans
        from harness.telemetry.marks import KEPT_OUTCOMES

        start = _flow_start(flow[0], protocol)
        if start is None or mark != flow[0].get("trace_id"):  # a mark that is not its flow's
            return
        outcome = str(record.get("outcome", ""))
        rounds = [span for round_record in flow[1:] if (span := _round_span(round_record)) is not None]
        failed = any(span.code is not None for span in rounds)
        self.sink.send(flow_spans(start, rounds, flow_id=flow_id, outcome=outcome,
                                  failed=failed or outcome in KEPT_OUTCOMES, ended=_number(record.get("t")),
                                  resource=self.sink.resource))

    def batch_done(self) -> None:
        """A batch of records is folded: the rounds' durations set aside in it are counted (in one go)."""
        if self.durations is not None:
            self.durations.add_pending()

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
    sink = durations = None
    if switch.tracing_on():
        from harness.telemetry.export import FoldSpanSink

        sink = FoldSpanSink(run_id)
    if switch.metrics_on():
        from harness.telemetry.client_metrics import ClientDurations

        durations = ClientDurations(run_id)
    return FlowTelemetry(sink, durations) if sink is not None or durations is not None else None


def _flow_start(record: Mapping[str, Any], protocol: str) -> FlowStart | None:
    """A kept flow's start, its fields checked (the journal is read as untrusted); None when its trace id is not one."""
    from harness.telemetry.flow_spans import FlowStart

    trace_id, lead = record.get("trace_id"), record.get("lead")
    if not isinstance(trace_id, str) or _TRACE_ID.fullmatch(trace_id) is None:
        return None
    return FlowStart(int(trace_id, 16), str(record.get("flow", "")), _number(record.get("t")),
                     str(record.get("host", "")), lead if isinstance(lead, int) else None, protocol)


def _round_span(record: Mapping[str, Any]) -> RoundSpan | None:
    """A kept flow's round, its fields checked; None when its span id is not one."""
    from harness.telemetry.flow_spans import RoundSpan

    get = record.get
    span_id, code = get("span_id"), get("code")
    if not isinstance(span_id, str) or _SPAN_ID.fullmatch(span_id) is None:
        return None
    return RoundSpan(int(span_id, 16), str(get("tool") or ""), _integer(get("round")) or 0, str(get("replica") or ""),
                     str(get("server") or ""), _integer(get("request_id")), _number(get("sent")),
                     _number(get("t")), str(get("outcome") or ""), code if isinstance(code, str) else None,
                     _integer(get("http_status")), _integer(get("state_bytes")))


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
