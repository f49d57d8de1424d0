"""The MRTR round loop: call, let a person answer, retry, until the call ends.

This mirrors the SDK's driver (`mcp.client._input_required.run_input_required_driver`)
round for round: a retry repeats the method, tool and arguments with a new JSON-RPC
id, the answers keyed like the questions, and the `requestState` echoed unread; a
state-only answer (load shedding) is retried after a 50 ms backoff doubling to
250 ms; the SDK's cap counts retries, so a server that never stops asking gets
`max_rounds` retries (`max_rounds + 1` POSTs) before the call gives up.

Unlike the SDK's `Client` it is synchronous and gevent-friendly, holds no connection
while the person thinks, lets the caller choose the replica of every round, and
records every round (`RoundRecord`) for the journal and the metrics.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple, TypeVar

import gevent

import harness
from harness.mrtr.credentials import INVALID_TOKEN, Credentials
from harness.mrtr.error_text import content_text, scrub
from harness.mrtr.outcome import Outcome
from harness.mrtr.routing import Router
from harness.mrtr.transport import NOT_SENT, HttpAnswer, RoundTransport, Transport
from harness.mrtr.wire import CallFrame, Envelope, SseScanner, decode_reply, dump_bytes
from harness.telemetry.marks import FlowTrace

__all__ = ["CallResult", "CallSteps", "MrtrClient", "LeadAnswer", "Responder", "RoundHook", "RoundRecord", "Steps",
           "drive"]

DEFAULT_INPUT_REQUIRED_MAX_ROUNDS: Final = 10
"""The SDK's `mcp.client._input_required.DEFAULT_INPUT_REQUIRED_MAX_ROUNDS`, spelled here so a load process
never imports the SDK's client (and with it its server); a test checks they agree."""

STATE_ONLY_BACKOFF_INITIAL: Final = 0.05
"""First wait before retrying a state-only answer (the SDK's `_STATE_ONLY_BACKOFF_INITIAL_SECONDS`)."""

STATE_ONLY_BACKOFF_CAP: Final = 0.25
"""Longest wait between state-only retries (the SDK's `_STATE_ONLY_BACKOFF_CAP_SECONDS`)."""


@dataclass(slots=True)
class RoundRecord:
    """One POST of a call, as the journal and the metrics see it.

    `latency` runs from the *intended* send time, not the actual one: if the load
    process is late (a busy core, a full pool), the wait is part of what a user would
    have felt, and measuring from the actual send would hide it (coordinated omission).
    `server_time` is the pure send-to-response time, for comparing with server metrics.
    """

    round: int
    """1-based position in the call."""
    replica: str
    """The URL that served the round."""
    request_id: int
    intended_at: float
    """Round 1: the scheduled start (or now); later rounds: when the person answered."""
    sent_at: float
    received_at: float
    outcome: Outcome
    http_status: int | None = None
    error_code: int | None = None
    error_message: str | None = None
    """A JSON-RPC error's `message`, or the start of an HTTP error's body, as the server sent it."""
    sent_responses: bool = False
    """Whether the round carried `inputResponses`."""
    sent_state: bool = False
    """Whether the round carried a `requestState`."""
    input_requests: dict[str, Any] | None = None
    """For `input_required`: the questions, keyed as the answers must be."""
    request_state: str | None = None
    """For `input_required`: the token to echo (kept so adversarial flows can replay or edit it)."""
    result: dict[str, Any] | None = None
    """The JSON-RPC result for complete / tool_error / input_required rounds."""
    served_by: str | None = None
    """The replica the answer says served it (`X-Served-By`), where `replica` may be a balancer's URL."""
    redispatched_from: str | None = None
    """The URL the round was routed to first, when no connection to it could be opened and the round went
    to `replica` instead (`MrtrClient(redispatch=True)`); None when it went where it was routed."""
    auth_error: str | None = None
    """For `unauthorized` / `forbidden`: the OAuth `error` the server gave (`invalid_token`, `insufficient_scope`)."""
    auth_retry: bool = False
    """The round is the resend of one the server answered 401 `invalid_token`, after the lead's token was renewed."""
    response_bytes: int = 0
    """The answer's body as read, in bytes (an SSE stream's up to the JSON-RPC response); 0 when none came."""
    span_id: str = ""
    """The round's client span id (16 hex digits), whose `traceparent` the round carried; empty when its flow is
    not traced."""

    @property
    def latency(self) -> float:
        """Seconds from the intended send time to the response (coordinated-omission safe)."""
        return self.received_at - self.intended_at

    @property
    def server_time(self) -> float:
        """Seconds from the actual send to the response."""
        return self.received_at - self.sent_at

    @property
    def asks(self) -> bool:
        """Whether the round put questions to the person (not a state-only shed)."""
        return bool(self.input_requests)

    @property
    def message(self) -> str | None:
        """What a failed round said, scrubbed of secrets and cut short; None when it said nothing.

        A tool error's text content, a JSON-RPC error's `message`, or an HTTP error's status
        and the start of its body (`error_message` holds the excerpt).
        """
        if self.outcome is Outcome.TOOL_ERROR:
            text = content_text(self.result)
        elif self.outcome in _HTTP_OUTCOMES:
            text = f"HTTP {self.http_status}" + (f": {self.error_message}" if self.error_message else "")
        elif self.error_code is not None:
            text = self.error_message or ""
        else:
            return None
        return scrub(text) or None


_HTTP_OUTCOMES: Final = frozenset({Outcome.HTTP_ERROR, Outcome.UNAUTHORIZED, Outcome.FORBIDDEN})


class LeadAnswer(NamedTuple):
    """A person's answer to a round's questions, and how long they took to give it."""

    responses: Mapping[str, Any] | None
    """The `inputResponses` object, or None to abandon the call."""
    think_seconds: float = 0.0
    """Real seconds before the answer is sent; the client waits them with no connection held."""


Responder = Callable[[RoundRecord], "LeadAnswer | Mapping[str, Any] | None"]
"""Answers a round's questions without waiting: a `LeadAnswer` (the answers and the seconds the
person thinks first), or just the `inputResponses` object to answer at once, or None to
abandon the call.
"""

RoundHook = Callable[[str, RoundRecord], None]
"""Sees each round (tool, record) as soon as its response is read."""


@dataclass(slots=True)
class CallResult:
    """How a whole call ended.

    `last` is the round that ended it. `rounds` holds every round's record only when the
    caller asked for them (`call_tool`); a call driven step by step (`call_steps`) keeps
    none of them while it waits, so a flow parked on its lead holds no parsed response.
    """

    outcome: Outcome
    last: RoundRecord | None
    round_count: int
    server_time: float = 0.0
    """Seconds from send to response, summed over the rounds."""
    think_time: float = 0.0
    """Seconds spent waiting on the responder (the person)."""
    backoff_time: float = 0.0
    """Seconds waited before state-only retries."""
    rounds: list[RoundRecord] = field(default_factory=list)

    @property
    def result(self) -> dict[str, Any] | None:
        """The final result body for complete and tool_error (None for the other outcomes)."""
        if self.last is None or self.outcome not in (Outcome.COMPLETE, Outcome.TOOL_ERROR):
            return None
        return self.last.result

    @classmethod
    def of(cls, records: list[RoundRecord]) -> CallResult:
        """The result of hand-sent rounds (the adversarial flows), ended by the last of them."""
        last = records[-1]
        return cls(last.outcome, last, len(records), sum(r.server_time for r in records))


T = TypeVar("T")

Steps = Generator[float, None, T]
"""Work in progress (a call, a flow) that yields each wait in seconds (a person thinking, a
shed's backoff) instead of sleeping it, and returns a T. Whoever drives it does the waiting:
`drive` sleeps in the calling greenlet; the load plan parks it as data until it is due."""

CallSteps = Steps[CallResult]
"""A call in progress, returning the call's result."""


def drive(steps: Steps[T], sleep: Callable[[float], Any]) -> T:
    """Run steps to their end in the calling greenlet, sleeping each wait; returns what they return."""
    try:
        wait = next(steps)
        while True:
            if wait > 0:
                sleep(wait)
            wait = next(steps)
    except StopIteration as done:
        return done.value


def _refuse_line_breaks(headers: Mapping[str, str] | None) -> None:
    """A CR or LF in a header would split the request on the wire: refused before anything is sent."""
    if headers and any("\r" in f"{k}{v}" or "\n" in f"{k}{v}" for k, v in headers.items()):
        raise ValueError("header names and values must not contain CR or LF")


class MrtrClient:
    """Runs `tools/call` flows over the 2026-07-28 wire, one POST per round.

    One client may run many calls (sequentially or from several greenlets): ids come
    from a per-client counter, and nothing else is per call. Give every client of a
    process the same `transport` so they share its connection pools; `timeout` is the
    read timeout of the transport a client makes for itself when given none.
    `max_rounds` caps retries exactly as the SDK's `input_required_max_rounds` does.
    """

    def __init__(
        self,
        router: Router,
        *,
        capabilities: Mapping[str, Any],
        client_info: tuple[str, str] = ("mrtr-harness", harness.__version__),
        max_rounds: int = DEFAULT_INPUT_REQUIRED_MAX_ROUNDS,
        timeout: float = 30.0,
        transport: RoundTransport | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Any] = gevent.sleep,
        redispatch: bool = True,
        headers: Mapping[str, str] | None = None,
        retry_lost_answers: int = 0,
        credentials: Credentials | None = None,
    ) -> None:
        """`retry_lost_answers`: how many times a call resends a round whose answer was lost, with the same
        state and answers (a host that retries; the server's once-only record must refuse the replay).
        `headers`: sent on every round besides the protocol's own (the principal header a deployment binds
        states to). `redispatch`: when no connection to a round's replica can be opened (a replica that is
        down or restarting), send the round to another replica, as a health-checking balancer
        would. The server never saw the request, so this hides no MRTR failure: a rejected
        state, a lost record or a broken answer is still reported as it happened.
        `credentials`: each lead's OAuth token; a round given a `lead` carries its `Authorization`, and a
        call's round answered 401 `invalid_token` is sent once more after the lead's token is renewed.
        """
        self.redispatch = redispatch
        self.retry_lost_answers = retry_lost_answers
        self.router = router
        _refuse_line_breaks(headers)
        self.envelope = Envelope(capabilities, client_info, headers)
        self.max_rounds = max_rounds
        self.transport = transport if transport is not None else Transport(read_timeout=timeout)
        self._clock = clock
        self._sleep = sleep
        self._ids = itertools.count(1)
        self.credentials = credentials

    def call_tool(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        respond: Responder,
        *,
        intended_at: float | None = None,
        on_round: Callable[[RoundRecord], None] | None = None,
        lead: int | None = None,
    ) -> CallResult:
        """Drive one call to its end in this greenlet, sleeping while the person thinks.

        The result keeps every round's record (`rounds`). `on_round` sees each record as
        soon as its response is read, before the person is asked.
        """
        rounds: list[RoundRecord] = []

        def keep(_tool: str, record: RoundRecord) -> None:
            rounds.append(record)
            if on_round is not None:
                on_round(record)

        result = drive(self.call_steps(tool, arguments, respond, intended_at=intended_at, on_round=keep, lead=lead),
                       self._sleep)
        result.rounds = rounds
        return result

    def call_steps(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        respond: Responder,
        *,
        intended_at: float | None = None,
        on_round: RoundHook | None = None,
        lead: int | None = None,
        trace: FlowTrace | None = None,
    ) -> CallSteps:
        """One call to its end (complete, an error, abandoned or rounds_exceeded), as steps.

        Yields every wait instead of sleeping it, and holds across a wait only what the
        next round needs: the frame, the answers, the state string and the replica, not
        the round's parsed response. `on_round` sees each record as soon as its response
        is read (before the person is asked), so journals and metrics are written as the
        call happens and a call stopped mid-think has left its rounds. A round after a
        wait counts its latency from when the wait was due: a late resume (a busy load
        process) is latency a user would have felt. `lead`: whose token the rounds carry (with `credentials`).
        `trace`: the flow's trace, when it is traced: each round carries its own span's `traceparent`.
        """
        frame = CallFrame(self.envelope, tool, arguments)
        count = 0
        server_time = think = backoff = 0.0
        delay = STATE_ONLY_BACKOFF_INITIAL
        responses: bytes | None = None
        state: str | None = None
        replica: str | None = None
        at = intended_at if intended_at is not None else self._clock()
        retries = self.retry_lost_answers
        reauthorized = False
        while True:
            count += 1
            record = self._round(frame, count, responses, state, self.router.pick(replica), at, lead, reauthorized,
                                 trace)
            server_time += record.server_time
            if on_round is not None:
                on_round(tool, record)
            if record.outcome is Outcome.ANSWER_LOST and retries > 0 and count <= self.max_rounds:
                retries -= 1  # the same round again, same state and answers: did the server act on the first?
                replica, at = record.replica, self._clock()  # routed as a retry after the replica that lost it
                continue
            reauthorized = record.outcome is Outcome.UNAUTHORIZED and not reauthorized and count <= self.max_rounds \
                and self._renewed(record, lead)
            if reauthorized:  # the same round again with the lead's new token, once
                replica, at = record.replica, self._clock()
                continue
            if record.outcome is not Outcome.INPUT_REQUIRED:
                return CallResult(record.outcome, record, count, server_time, think, backoff)
            if count > self.max_rounds:
                return CallResult(Outcome.ROUNDS_EXCEEDED, record, count, server_time, think, backoff)
            replica, state = record.replica, record.request_state
            if record.input_requests:
                delay = STATE_ONLY_BACKOFF_INITIAL
                reply = respond(record)
                answers, wait = reply if isinstance(reply, LeadAnswer) else (reply, 0.0)
                if answers is None:
                    return CallResult(Outcome.ABANDONED, record, count, server_time, think, backoff)
                # Held encoded while waiting: bytes, not nested dicts. orjson's bytes keep its
                # 4 KiB write buffer, so the wait keeps an exact-size copy.
                responses = memoryview(dump_bytes(answers)).tobytes()
                think += wait
                del reply, answers
            else:
                wait, delay = delay, min(delay * 2, STATE_ONLY_BACKOFF_CAP)
                responses = None
                backoff += wait
            del record  # nothing of the response is held while waiting
            at = self._clock() + wait
            if wait > 0:
                yield wait

    def send_round(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        input_responses: Mapping[str, Any] | None = None,
        request_state: object = None,
        replica: str | None = None,
        headers: Mapping[str, str] | None = None,
        round_number: int = 1,
        intended_at: float | None = None,
        lead: int | None = None,
        trace: FlowTrace | None = None,
    ) -> RoundRecord:
        """Send exactly one round, as given; the adversarial hook of the on-call catalogue.

        With it a caller can send a retry with an edited `requestState`, with changed
        arguments, a replay of a retry that already completed, or with a wrong routing
        header (`headers` overrides the computed ones); the fuzzer's `request_state`
        may be any JSON value (`wire.JSON_NULL` for an explicit null). `replica` defaults
        to the router's choice for a round 1. `lead`: whose token it carries (with `credentials`); a 401 is
        not retried here: the round is sent exactly as given.
        """
        _refuse_line_breaks(headers)
        frame = CallFrame(self.envelope, tool, arguments, headers)
        url = replica if replica is not None else self.router.pick(None)
        at = intended_at if intended_at is not None else self._clock()
        return self._round(frame, round_number, input_responses, request_state, url, at, lead, False, trace)

    def _renewed(self, record: RoundRecord, lead: int | None) -> bool:
        """Whether a 401 round may go again: its error is `invalid_token`, and the lead now holds
        a token obtained after the round was sent (this blocks the greenlet on the refresh, off the hot path)."""
        return (record.auth_error == INVALID_TOKEN and self.credentials is not None and lead is not None
                and self.credentials.renew(lead, record.sent_at))

    def _others(self, replica: str) -> list[str]:
        """The other replicas, in list order starting after `replica`: each is tried once."""
        replicas = list(self.router.replicas)
        start = replicas.index(replica) + 1 if replica in replicas else 0
        return [r for r in replicas[start:] + replicas[:start] if r != replica]

    def _round(
        self,
        frame: CallFrame,
        number: int,
        responses: Mapping[str, Any] | bytes | None,
        state: object,
        replica: str,
        intended_at: float,
        lead: int | None = None,
        auth_retry: bool = False,
        trace: FlowTrace | None = None,
    ) -> RoundRecord:
        request_id = next(self._ids)
        if trace is None:
            body = frame.body(request_id, responses, state)
            span_id = ""
        else:
            span_id = trace.new_span()
            body = frame.body(request_id, responses, state, trace.traceparent(span_id))
        scanner = SseScanner(request_id)
        headers = frame.headers
        line = self.credentials.authorization(lead) if self.credentials is not None and lead is not None else ""
        sent_at = self._clock()
        answer = self.transport.post(replica, body, headers, scanner, line) if line else \
            self.transport.post(replica, body, headers, scanner)
        routed_to = replica
        if answer is NOT_SENT and self.redispatch:
            for other in self._others(replica):  # nobody saw it: send it where a balancer would
                replica = other
                answer = self.transport.post(replica, body, headers, scanner, line) if line else \
                    self.transport.post(replica, body, headers, scanner)
                if answer is not NOT_SENT:
                    break
        received_at = self._clock()
        if answer is NOT_SENT:
            answer = Outcome.CONNECTION_ERROR
        record = RoundRecord(
            number,
            replica,
            request_id,
            min(intended_at, sent_at),  # sent early (a timer's slack): latency is never below the server's time
            sent_at,
            received_at,
            Outcome.CONNECTION_ERROR,
            sent_responses=responses is not None,
            sent_state=state is not None,
            redispatched_from=routed_to if replica != routed_to else None,
            auth_retry=auth_retry,
            span_id=span_id,
        )
        if not isinstance(answer, HttpAnswer):
            record.outcome = answer
            return record
        reply = decode_reply(answer.status, answer.content_type, answer.body, request_id, scanner, answer.challenge)
        record.outcome = reply.outcome
        record.http_status = answer.status
        record.response_bytes = len(answer.body)
        record.served_by = answer.served_by
        record.error_code = reply.error_code
        record.error_message = reply.error_message
        record.auth_error = reply.auth_error
        result = reply.result
        record.result = result
        if reply.outcome is Outcome.INPUT_REQUIRED and result is not None:
            record.input_requests = result.get("inputRequests") or None
            record.request_state = result.get("requestState")
        return record
