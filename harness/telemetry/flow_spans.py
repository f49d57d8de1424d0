"""A flow's spans, built only if sampling keeps it, and handed to the exporter.

Tail sampling, decided when the flow ends (`marks.kept`): every flow with a failed round (a
rejection, an error, an auth refusal) is kept, and of the rest a share drawn from the scenario's
seed and the flow's id, so a rerun with the same seed keeps the same flows (`OTEL_TRACES_SAMPLER_ARG`,
default 0.01). While a flow runs its trace costs two random ids per round and one small tuple
(`marks`); the spans (`ReadableSpan`s with the harness's own ids: a round's span id went out in
its `traceparent` before anyone knew whether the flow would be kept) are built only for kept flows.

Each round is a CLIENT span named `tools/call {tool}`, child of the flow's INTERNAL span
`mrtr.flow {kind}`; the server's SERVER span, continued from the round's `traceparent`, is the
round span's child.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Final
from urllib.parse import urlsplit

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from harness.telemetry import conventions as attr
from harness.telemetry.export import SCOPE, SpanSink
from harness.telemetry.marks import FlowTrace, RoundMark, error_type, kept

__all__ = ["FlowSpans"]

_SAMPLED: Final = TraceFlags(TraceFlags.SAMPLED)


class FlowSpans:
    """A load process's flow traces: started with each flow, judged when it ends, the kept ones sent."""

    def __init__(self, sink: SpanSink, seed: int, share: float, protocol_version: str) -> None:
        self.sink, self.seed, self.share = sink, seed, share
        self.protocol_version = protocol_version

    @staticmethod
    def begin() -> FlowTrace:
        """A new flow's trace (its ids drawn now)."""
        return FlowTrace()

    def end(self, trace: FlowTrace, *, flow_id: str, kind: str, outcome: str, failed: bool, started: float,
            ended: float, host: str, lead: int, protocol_version: str | None = None) -> bool:
        """Judge the flow; if kept, build its spans and hand them to the sink. True when kept."""
        failed = failed or trace.failed
        if not kept(self.seed, flow_id, self.share, failed):
            return False
        flow_context = SpanContext(trace.trace_id, trace.span_id, is_remote=False, trace_flags=_SAMPLED)
        common = {attr.FLOW_KIND: kind, attr.FLOW_ID: flow_id}
        version = protocol_version or self.protocol_version
        spans = [self._round(trace, mark, flow_context, common, version) for mark in trace.round_marks()]
        spans.append(ReadableSpan(
            f"mrtr.flow {kind}", flow_context, None, self.sink.resource,
            {**common, attr.FLOW_OUTCOME: outcome, attr.FLOW_ROUNDS: len(trace.marks), attr.HOST: host,
             attr.LEAD: lead},
            kind=SpanKind.INTERNAL, status=Status(StatusCode.ERROR) if failed else Status(StatusCode.UNSET),
            start_time=_ns(started), end_time=_ns(ended), instrumentation_scope=SCOPE))
        self.sink.send(spans)
        return True

    def _round(self, trace: FlowTrace, mark: RoundMark, parent: SpanContext, common: dict[str, Any],
               version: str) -> ReadableSpan:
        attributes: dict[str, Any] = {
            attr.MCP_METHOD: "tools/call", attr.MCP_PROTOCOL_VERSION: version,
            attr.GEN_AI_OPERATION: attr.EXECUTE_TOOL, attr.GEN_AI_TOOL: mark.tool,
            attr.JSONRPC_REQUEST_ID: str(mark.request_id), **common,
            attr.ROUND: mark.round, attr.REPLICA: mark.replica, attr.ROUND_OUTCOME: mark.outcome,
            **_server(mark.url)}
        if mark.state_bytes is not None:
            attributes[attr.STATE_BYTES] = mark.state_bytes
        status = Status(StatusCode.UNSET)
        if mark.failure is not None:
            attributes[attr.ERROR_TYPE] = error_type(mark)
            if mark.error_code is not None:
                attributes[attr.RPC_STATUS] = str(mark.error_code)
            status = Status(StatusCode.ERROR, mark.failure)
        context = SpanContext(trace.trace_id, mark.span_id, is_remote=False, trace_flags=_SAMPLED)
        return ReadableSpan(f"tools/call {mark.tool}", context, parent, self.sink.resource, attributes,
                            kind=SpanKind.CLIENT, status=status, start_time=_ns(mark.sent),
                            end_time=_ns(mark.received), instrumentation_scope=SCOPE)

    def close(self) -> None:
        self.sink.close()


@lru_cache(maxsize=256)
def _server(url: str) -> dict[str, Any]:
    """`server.address` and `server.port` of a round's URL (a handful of URLs a run: read once each)."""
    parts = urlsplit(url)
    found: dict[str, Any] = {}
    if parts.hostname:
        found[attr.SERVER_ADDRESS] = parts.hostname
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        port = None
    if port:
        found[attr.SERVER_PORT] = port
    return found


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)
