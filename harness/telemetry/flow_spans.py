"""A finished flow's spans, built from what its journal records said, for the live fold to export.

Tail sampling, decided when the flow ends (`marks.Sampling`): every flow with a failed round (a
rejection, an error, an auth refusal) is kept, and of the rest a share drawn from the scenario's seed and
the flow's id, so a rerun with the same seed keeps the same flows (`OTEL_TRACES_SAMPLER_ARG`, default
0.01). While a flow runs, the load process draws its trace id (its rounds' span ids are numbered from it:
`marks.FlowTrace`), puts each round's `traceparent` in its request and writes the ids into the journal:
nothing more. The run's live fold process (`harness.folding.flow_traces`) keeps what a flow in flight's
spans need from its records and, when the flow ends and is kept, builds them here (`ReadableSpan`s with
the harness's own ids: a round's span id went out in its `traceparent` before anyone knew whether the
flow would be kept) and hands them to its exporter.

Each round is a CLIENT span named `tools/call {tool}`, child of the flow's INTERNAL span `mrtr.flow
{kind}`; the server's SERVER span, continued from the round's `traceparent`, is the round span's child.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Final, NamedTuple

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from harness.telemetry import conventions as attr
from harness.telemetry.export import SCOPE
from harness.telemetry.marks import error_type, flow_span_id, rpc_code

__all__ = ["FlowStart", "RoundSpan", "flow_spans", "nanos"]

_SAMPLED: Final = TraceFlags(TraceFlags.SAMPLED)


class RoundSpan(NamedTuple):
    """What a round's span needs, from its journal record (one tuple a round, kept while its flow is in flight)."""

    span_id: int
    tool: str
    round: int
    replica: str
    server: str
    """`host:port`, as the round record's `server` (`marks.server_of`)."""
    request_id: int | None
    sent: float
    received: float
    outcome: str
    code: str | None
    """The journal's `code`: a JSON-RPC code or a failure class; None when the round did not fail."""
    http_status: int | None
    state_bytes: int | None


class FlowStart(NamedTuple):
    """What a flow's span needs from its `start` record."""

    trace_id: int
    kind: str
    started: float
    host: str
    lead: int | None
    protocol: str


def flow_spans(start: FlowStart, rounds: list[RoundSpan], *, flow_id: str, outcome: str, failed: bool,
               ended: float, resource: Resource) -> list[ReadableSpan]:
    """The flow's round spans and its own span, in that order."""
    flow_context = SpanContext(start.trace_id, flow_span_id(start.trace_id), is_remote=False, trace_flags=_SAMPLED)
    common = {attr.FLOW_KIND: start.kind, attr.FLOW_ID: flow_id}
    spans = [_round(start, mark, flow_context, common, resource) for mark in rounds]
    flow_attributes: dict[str, Any] = {**common, attr.FLOW_OUTCOME: outcome, attr.FLOW_ROUNDS: len(rounds),
                                       attr.HOST: start.host}
    if start.lead is not None:
        flow_attributes[attr.LEAD] = start.lead
    spans.append(ReadableSpan(
        f"mrtr.flow {start.kind}", flow_context, None, resource, flow_attributes,
        kind=SpanKind.INTERNAL, status=Status(StatusCode.ERROR) if failed else Status(StatusCode.UNSET),
        start_time=nanos(start.started), end_time=nanos(ended), instrumentation_scope=SCOPE))
    return spans


def _round(start: FlowStart, mark: RoundSpan, parent: SpanContext, common: dict[str, Any],
           resource: Resource) -> ReadableSpan:
    attributes: dict[str, Any] = {
        attr.MCP_METHOD: "tools/call", attr.MCP_PROTOCOL_VERSION: start.protocol,
        attr.GEN_AI_OPERATION: attr.EXECUTE_TOOL, attr.GEN_AI_TOOL: mark.tool, **common,
        attr.ROUND: mark.round, attr.REPLICA: mark.replica, attr.ROUND_OUTCOME: mark.outcome, **_server(mark.server)}
    if mark.request_id is not None:
        attributes[attr.JSONRPC_REQUEST_ID] = str(mark.request_id)
    if mark.state_bytes is not None:
        attributes[attr.STATE_BYTES] = mark.state_bytes
    status = Status(StatusCode.UNSET)
    if mark.code is not None:
        attributes[attr.ERROR_TYPE] = error_type(mark.code, mark.http_status)
        if (code := rpc_code(mark.code)) is not None:
            attributes[attr.RPC_STATUS] = code
        status = Status(StatusCode.ERROR, mark.code)
    context = SpanContext(start.trace_id, mark.span_id, is_remote=False, trace_flags=_SAMPLED)
    return ReadableSpan(f"tools/call {mark.tool}", context, parent, resource, attributes,
                        kind=SpanKind.CLIENT, status=status, start_time=nanos(mark.sent),
                        end_time=nanos(mark.received), instrumentation_scope=SCOPE)


@lru_cache(maxsize=256)
def _server(server: str) -> dict[str, Any]:
    """`server.address` and `server.port` of a round's `host:port` (a handful a run: read once each)."""
    host, colon, port = server.rpartition(":")
    if not colon or not port.isdigit() or host.endswith(":"):
        host, port = server, ""
    found: dict[str, Any] = {}
    if host.strip("[]"):
        found[attr.SERVER_ADDRESS] = host.strip("[]")
    if port:
        found[attr.SERVER_PORT] = int(port)
    return found


def nanos(seconds: float) -> int:
    """A journal time (Unix seconds) as OpenTelemetry's (Unix nanoseconds)."""
    return int(seconds * 1e9)
