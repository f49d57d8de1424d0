"""The run's own spans: the run (`mrtr.run {scenario}`) with a child per chaos action, and each rejection's reason.

Built in the run process when spans are exported. Each chaos action (and the rollback) is a child
span from its start to its end as the schedule journals them, sent as soon as it ends; the run span
itself is sent when the run's end is journaled. Flows are traces of their own (a trace per flow is
what a tracing backend shows and samples well); the run id on every process's resource joins them.
Once reconciliation (at the run's end) has matched a rejected round to the line a replica logged, the
reason goes into the flow's trace as `mrtr.reconciled {reason}`, a child of the round's client span,
at the time the line was logged (the client only ever sees `-32602`; the reason is in the log).
"""

from __future__ import annotations

import random
from typing import Final

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from harness.telemetry import conventions as attr
from harness.telemetry.export import SCOPE, SpanSink
from harness.telemetry.flow_spans import nanos

__all__ = ["RunSpans"]

_SAMPLED: Final = TraceFlags(TraceFlags.SAMPLED)


class RunSpans:
    """The run span's ids from the run's start; its chaos children sent as they end; itself sent by `close`."""

    def __init__(self, run_id: str, scenario: str, seed: int, began: float) -> None:
        self.sink = SpanSink(run_id)
        ids = random.Random()
        self.context = SpanContext(ids.getrandbits(128) or 1, ids.getrandbits(64) or 1, is_remote=False,
                                   trace_flags=_SAMPLED)
        self._ids = ids
        self.scenario, self.seed, self.began = scenario, seed, began

    @property
    def trace_id(self) -> str:
        return f"{self.context.trace_id:032x}"

    def chaos(self, action: str, target: str, started: float, ended: float, error: str | None) -> None:
        """One chaos action (or the rollback), child of the run span; ERROR when it failed."""
        context = SpanContext(self.context.trace_id, self._ids.getrandbits(64) or 1, is_remote=False,
                              trace_flags=_SAMPLED)
        status = Status(StatusCode.ERROR, error) if error is not None else Status(StatusCode.UNSET)
        self.sink.send([ReadableSpan(f"mrtr.chaos {action}", context, self.context, self.sink.resource,
                                     {attr.CHAOS_ACTION: action, attr.CHAOS_TARGET: target},
                                     kind=SpanKind.INTERNAL, status=status, start_time=nanos(started),
                                     end_time=nanos(ended), instrumentation_scope=SCOPE)])

    def reconciled(self, trace_id: str, span_id: str, reason: str, replica: str, t: float) -> None:
        """The reason a replica logged for a rejected round, once reconciliation matched them: a span in the flow's
        trace, child of the round's client span (`mrtr.reconciled {reason}`), at the time the line was logged."""
        parent = SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=_SAMPLED)
        context = SpanContext(parent.trace_id, self._ids.getrandbits(64) or 1, is_remote=False, trace_flags=_SAMPLED)
        self.sink.send([ReadableSpan(f"mrtr.reconciled {reason}", context, parent, self.sink.resource,
                                     {attr.REJECTION_REASON: reason, attr.REPLICA: replica},
                                     kind=SpanKind.INTERNAL, start_time=nanos(t), end_time=nanos(t),
                                     instrumentation_scope=SCOPE)])

    def close(self, ended: float, status: str, error: str | None = None) -> None:
        """The run span (`status`: the journal's end status), then the sink flushed and stopped."""
        span_status = Status(StatusCode.ERROR, error or status) if status == "errored" else Status(StatusCode.UNSET)
        self.sink.send([ReadableSpan(f"mrtr.run {self.scenario}", self.context, None, self.sink.resource,
                                     {attr.SCENARIO: self.scenario, attr.SEED: self.seed},
                                     kind=SpanKind.INTERNAL, status=span_status, start_time=nanos(self.began),
                                     end_time=nanos(ended), instrumentation_scope=SCOPE)])
        self.sink.close()
