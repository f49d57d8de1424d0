"""A flow's trace: its ids while it runs, a compact mark per round, and its spans built only if sampling keeps it.

Tail sampling, decided when the flow ends: every flow with a failed round (a rejection, an
error, an auth refusal) is kept, and of the rest a share drawn from the scenario's seed and
the flow's id, so a rerun with the same seed keeps the same flows (`OTEL_TRACES_SAMPLER_ARG`,
default 0.01). While a flow runs its trace costs two random ids per round and one small tuple;
the spans (`ReadableSpan`s with the harness's own ids: a round's span id went out in its
`traceparent` before anyone knew whether the flow would be kept) are built only for kept flows.

Each round is a CLIENT span named `tools/call {tool}`, child of the flow's INTERNAL span
`mrtr.flow {kind}`; the server's SERVER span, continued from the round's `traceparent`, is the
round span's child.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Final, NamedTuple
from urllib.parse import urlsplit

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from harness.telemetry import conventions as attr
from harness.telemetry.export import SCOPE, SpanSink

__all__ = ["DEFAULT_SHARE", "FlowSpans", "FlowTrace", "RoundMark", "sampled_share", "trace_hex", "span_hex"]

logger = logging.getLogger(__name__)

SAMPLER_ARG: Final = "OTEL_TRACES_SAMPLER_ARG"
DEFAULT_SHARE: Final = 0.01
"""The share of flows without a failure whose spans are exported when `OTEL_TRACES_SAMPLER_ARG` is unset."""

_SAMPLED: Final = TraceFlags(TraceFlags.SAMPLED)
_ids = random.Random()  # seeded from the OS: ids must differ between runs and processes, not repeat
_bits = _ids.getrandbits


def trace_hex(trace_id: int) -> str:
    return f"{trace_id:032x}"


def span_hex(span_id: int) -> str:
    return f"{span_id:016x}"


def sampled_share(environ: Mapping[str, str] | None = None) -> float:
    """`OTEL_TRACES_SAMPLER_ARG` as the share of flows without a failure to keep (0 to 1); the default when it is
    unset, and, with a warning, when it is not a number in that range (as the SDK's samplers treat it)."""
    text = (os.environ if environ is None else environ).get(SAMPLER_ARG, "").strip()
    if not text:
        return DEFAULT_SHARE
    try:
        share = float(text)
    except ValueError:
        share = -1.0
    if not 0.0 <= share <= 1.0:
        logger.warning("%s=%r is not a share between 0 and 1: %g used", SAMPLER_ARG, text, DEFAULT_SHARE)
        return DEFAULT_SHARE
    return share


class RoundMark(NamedTuple):
    """What a round span needs, kept on its flow while the flow is in flight (one tuple a round)."""

    span_id: int
    tool: str
    round: int
    replica: str
    url: str
    request_id: int
    sent: float
    received: float
    outcome: str
    failure: str | None
    """The journal's `code`: a JSON-RPC code or a failure class; None when the round did not fail."""
    http_status: int | None
    error_code: int | None
    state_bytes: int | None


class FlowTrace:
    """One flow's ids and round marks while it runs: a trace id, its own span id, one span id per round."""

    __slots__ = ("trace_id", "span_id", "marks", "failed")

    def __init__(self) -> None:
        self.trace_id = _bits(128) or 1
        self.span_id = _bits(64) or 1
        self.marks: list[RoundMark] = []
        self.failed = False

    @staticmethod
    def new_span() -> int:
        return _bits(64) or 1

    def traceparent(self, span_id: int) -> bytes:
        """The W3C `traceparent` of a round span: version 00, sampled (01), so a parent-based server records it."""
        return b"00-%032x-%016x-01" % (self.trace_id, span_id)

    def mark(self, mark: RoundMark) -> None:
        self.marks.append(mark)
        if mark.failure is not None:
            self.failed = True


class FlowSpans:
    """A load process's flow traces: started with each flow, judged when it ends, the kept ones sent."""

    def __init__(self, sink: SpanSink, seed: int, share: float, protocol_version: str) -> None:
        self.sink, self.seed, self.share = sink, seed, share
        self.protocol_version = protocol_version

    @staticmethod
    def begin() -> FlowTrace:
        """A new flow's trace (its ids drawn now)."""
        return FlowTrace()

    def keep(self, flow_id: str, failed: bool) -> bool:
        """Every failed flow; of the rest, `share` drawn from (seed, flow id), the same on every rerun."""
        if failed or self.share >= 1.0:
            return True
        if self.share <= 0.0:
            return False
        digest = hashlib.blake2b(f"{self.seed}:{flow_id}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") < self.share * 2.0**64

    def end(self, trace: FlowTrace, *, flow_id: str, kind: str, outcome: str, failed: bool, started: float,
            ended: float, host: str, lead: int, protocol_version: str | None = None) -> bool:
        """Judge the flow; if kept, build its spans and hand them to the sink. True when kept."""
        failed = failed or trace.failed
        if not self.keep(flow_id, failed):
            return False
        flow_context = SpanContext(trace.trace_id, trace.span_id, is_remote=False, trace_flags=_SAMPLED)
        common = {attr.FLOW_KIND: kind, attr.FLOW_ID: flow_id}
        version = protocol_version or self.protocol_version
        spans = [self._round(trace, mark, flow_context, common, version) for mark in trace.marks]
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


_HTTP_CLASSES: Final = frozenset({"http_error", "unauthorized", "forbidden"})


def error_type(mark: RoundMark) -> str:
    """The conventions' `error.type`: the JSON-RPC code, `tool_error`, the HTTP status, or the transport failure."""
    if mark.error_code is not None:
        return str(mark.error_code)
    if mark.failure in _HTTP_CLASSES and mark.http_status is not None:
        return str(mark.http_status)
    return mark.failure or "_OTHER"


@lru_cache(maxsize=256)
def _server(url: str) -> dict[str, Any]:
    """`server.address` and `server.port` of a round's URL (a handful of URLs a run: read once each)."""
    parts = urlsplit(url)
    found: dict[str, Any] = {}
    if parts.hostname:
        found[attr.SERVER_ADDRESS] = parts.hostname
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    if port:
        found[attr.SERVER_PORT] = port
    return found


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)
