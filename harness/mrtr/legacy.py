"""A 2025-era host: the SDK's own `Client`, with the `initialize` handshake and a session, on a gevent load process.

Each call opens a session on one replica (initialize, initialized), sends `tools/call`
and answers the server's `elicitation/create` requests on the call's stream with the
lead's answers, while the call stays open (that is the 2025 way: the server waits on
the person, and so does a connection); then it ends the session (DELETE). The call is
journaled as one round: its questions went over the session, not as input requests.

Against a server that serves only 2026-07-28 (MRTR), a call that needs input ends as
the server answers it: -32603 "Handler returned an invalid result" for a hand-built
input request, -32600 for a resolver, whose 2025 path finds no back-channel on a stateless
server. Against a server that serves both eras, the questions arrive and the call completes.

The SDK's client runs on anyio, and asyncio allows one running event loop per OS thread,
which every greenlet of a load process shares: so every 2025 call of a process runs as a
task of one event loop (`LegacyLoop`), on a greenlet of its own. The loop's selector is
gevent's (a load process is patched), so while the loop waits the other greenlets run;
a greenlet that starts a call waits on a gevent result, and the lead's answer (`respond`)
is asked for on the loop's greenlet, in the same thread as everything else. The cost per
call is in benchmarks/README.md.

A call obeys `[load] timeout` as a 2026 round does: each stretch in which the host waits on
the server (the handshake, the call, the rest of it after an answer) must end within it,
else the call ends `timeout`; the lead's thinking, inside the call, is not counted. With
`[target.auth]` every request of the session carries the lead's current token, and a 401 or
403 ends the call `unauthorized` or `forbidden` with the OAuth `error`, an auth refusal like
any round's (a 2025 host's call is not resent after a 401: its session would start afresh).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import anyio
import gevent
import httpx2
from gevent.event import AsyncResult
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitResult

from harness._compat.mcp import create_mcp_http_client
from harness.mrtr.client import CallResult, CallSteps, LeadAnswer, Responder, RoundHook, RoundRecord
from harness.mrtr.credentials import AUTHORIZATION, Credentials
from harness.mrtr.outcome import Outcome, outcome_for_error_code
from harness.mrtr.routing import Router
from harness.mrtr.wire import AUTH_STATUSES, auth_reply

__all__ = ["LegacyClient", "LegacyLoop", "process_loop"]

T = TypeVar("T")

_ANSWERED = frozenset({Outcome.COMPLETE, Outcome.TOOL_ERROR})
"""A call the tool answered: a refusal after it (closing the session with a token that ran out) does not undo it."""

QUESTION_KEY = "elicitation"
"""The key a 2025 question is handed to the lead under (a 2025 request has no input-request key of its own)."""


_PROCESS_LOOP: LegacyLoop | None = None


def process_loop() -> LegacyLoop:
    """The process's one `LegacyLoop`, for users that come and go in one process (a hunt's trials, a benchmark's
    windows): asyncio runs one loop per OS thread, and every greenlet of a process shares its thread."""
    global _PROCESS_LOOP
    if _PROCESS_LOOP is None:
        _PROCESS_LOOP = LegacyLoop()
    return _PROCESS_LOOP


class LegacyLoop:
    """One asyncio event loop for every 2025 call of a load process, run on a greenlet of its own.

    It lives as long as the load process: a flow stopped mid-call cancels its own call (`run`).
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._greenlet: gevent.Greenlet | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def run(self, make: Callable[[], Awaitable[T]]) -> T:
        """Run the coroutine `make()` makes on the loop; the calling greenlet waits (the others run)."""
        loop = self._started()
        done: AsyncResult = AsyncResult()

        async def task() -> None:
            try:
                done.set(await make())
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller, who decides
                done.set_exception(exc)

        started: list[asyncio.Task[None]] = []

        def start() -> None:
            running = loop.create_task(task())
            started.append(running)
            self._tasks.add(running)
            running.add_done_callback(self._tasks.discard)

        loop.call_soon_threadsafe(start)
        try:
            return done.get()
        except gevent.GreenletExit:  # the flow was stopped (the run's end): its call goes too, session and all
            loop.call_soon_threadsafe(lambda: [running.cancel() for running in started])
            raise

    def _started(self) -> asyncio.AbstractEventLoop:
        if self._loop is None or self._greenlet is None or self._greenlet.dead:
            self._loop = asyncio.new_event_loop()
            self._greenlet = gevent.spawn(self._loop.run_forever)
        return self._loop


class LegacyClient:
    """Runs `tools/call` as a 2025-era host does: the SDK's `Client`, a session per call on one replica.

    `elicitation`: whether the client declares it (the SDK's client declares form and URL
    together when it has a callback, and nothing without one). Same call interface as
    `MrtrClient.call_steps`, so a flow does not know which era its host speaks.
    """

    def __init__(self, router: Router, loop: LegacyLoop, *, elicitation: bool, timeout: float = 30.0,
                 headers: Mapping[str, str] | None = None, clock: Callable[[], float] = time.time,
                 credentials: Credentials | None = None) -> None:
        self.router = router
        self.loop = loop
        self.elicitation = elicitation
        self.timeout = timeout
        """Seconds each wait on the server may last (`[load] timeout`)."""
        self.headers = dict(headers or {})
        self.credentials = credentials
        self._clock = clock

    def call_steps(self, tool: str, arguments: Mapping[str, Any], respond: Responder, *,
                   intended_at: float | None = None, on_round: RoundHook | None = None,
                   lead: int | None = None, trace: object = None) -> CallSteps:
        """One call to its end. It waits on the lead inside the call (an open stream), so it yields no waits.
        `lead`: whose token every request of the session carries (with `credentials`). `trace` is taken and
        left unused: the SDK's own client injects the trace context of its global tracer, which the harness
        does not set, so a 2025 call carries no `traceparent`; its flow still records the call's span."""
        url = self.router.pick(None)
        at = intended_at if intended_at is not None else self._clock()
        auth = _LeadToken(self.credentials, lead) if self.credentials is not None and lead is not None else None
        call = _Call(self, url, tool, dict(arguments), respond, auth)
        sent_at = self._clock()
        record = self.loop.run(call.run)
        record.intended_at = min(at, sent_at)
        record.sent_at = sent_at
        record.received_at = self._clock()
        if on_round is not None:
            on_round(tool, record)
        outcome = Outcome.ABANDONED if call.abandoned else record.outcome
        return CallResult(outcome, record, 1, max(0.0, record.server_time - call.think), call.think, 0.0)
        yield  # a generator like MrtrClient.call_steps; the wait for the lead happened inside the call


class _LeadToken(httpx2.Auth):
    """Every request of a 2025 session with the lead's current token; remembers the first 401 or 403 answered."""

    def __init__(self, credentials: Credentials, lead: int) -> None:
        self.credentials = credentials
        self.lead = lead
        self.refused: tuple[int, str | None] | None = None
        """(status, its `WWW-Authenticate` challenge) of the first 401 or 403."""

    def auth_flow(self, request: httpx2.Request) -> Any:
        line = self.credentials.authorization(self.lead)
        if line:
            request.headers[AUTHORIZATION] = line.partition(":")[2].strip()
        response = yield request
        if response.status_code in AUTH_STATUSES and self.refused is None:
            self.refused = (response.status_code, response.headers.get("www-authenticate"))


class _Call:
    """One 2025 call in progress: the lead's answers as the server's questions come, and how it ended."""

    def __init__(self, client: LegacyClient, url: str, tool: str, arguments: dict[str, Any],
                 respond: Responder, auth: _LeadToken | None = None) -> None:
        self.client = client
        self.url = url
        self.tool = tool
        self.arguments = arguments
        self.respond = respond
        self.auth = auth
        self.asked = 0
        self.think = 0.0
        self.abandoned = False
        self.waiting: anyio.CancelScope | None = None
        """Bounds each wait on the server by the client's timeout; pushed back after the lead answers."""

    async def run(self) -> RoundRecord:
        record = RoundRecord(1, self.url, 0, 0.0, 0.0, 0.0, Outcome.CONNECTION_ERROR, sent_responses=False)
        timeout = self.client.timeout
        try:
            async with create_mcp_http_client(headers=self.client.headers, timeout=httpx2.Timeout(timeout, read=None),
                                              auth=self.auth) as http:
                with anyio.CancelScope(deadline=anyio.current_time() + timeout) as self.waiting:
                    await self._session(http, record)
                if self.waiting.cancelled_caught:
                    record.outcome = Outcome.TIMEOUT
        except Exception as exc:  # noqa: BLE001 - closing the session's client failed: the call's outcome stands
            record.error_message = record.error_message or f"{type(exc).__name__}: {exc}"[:200]
        if self.auth is not None and self.auth.refused is not None and record.outcome not in _ANSWERED:
            status, challenge = self.auth.refused
            reply = auth_reply(status, b"", challenge)
            record.outcome, record.http_status, record.error_code = reply.outcome, status, None
            record.error_message, record.auth_error = reply.error_message, reply.auth_error
        record.sent_responses = self.asked > 0  # the caller stamps the times
        return record

    async def _session(self, http: httpx2.AsyncClient, record: RoundRecord) -> None:
        """The session and the call on it; what it came to goes in `record`."""
        callback = self.elicit if self.client.elicitation else None
        try:
            transport = streamable_http_client(self.url, http_client=http)
            async with Client(transport, mode="legacy", elicitation_callback=callback) as session:
                result = await session.call_tool(self.tool, self.arguments)
            record.result = result.model_dump(by_alias=True, mode="json", exclude_none=True)
            record.outcome = Outcome.TOOL_ERROR if result.is_error else Outcome.COMPLETE
            record.http_status = 200
        except MCPError as error:
            record.outcome = outcome_for_error_code(error.error.code)
            record.error_code = error.error.code
            record.error_message = error.error.message
        except Exception as exc:  # noqa: BLE001 - a transport failure is this call's outcome, not the flow's crash
            mcp_error = _first_mcp_error(exc)
            if mcp_error is not None:
                record.outcome = outcome_for_error_code(mcp_error.error.code)
                record.error_code = mcp_error.error.code
                record.error_message = mcp_error.error.message
            else:
                record.error_message = f"{type(exc).__name__}: {exc}"[:200]

    async def elicit(self, context: Any, params: Any) -> Any:
        """The server's `elicitation/create`: the lead answers it, after thinking, while the call stays open."""
        self.asked += 1
        if self.waiting is not None:  # the lead's thinking is not the server's time
            self.waiting.deadline = float("inf")
        question = RoundRecord(self.asked, self.url, 0, time.time(), time.time(), time.time(), Outcome.INPUT_REQUIRED,
                               input_requests={QUESTION_KEY: {
                                   "method": "elicitation/create",
                                   "params": params.model_dump(by_alias=True, mode="json", exclude_none=True)}})
        reply = self.respond(question)
        answers, wait = reply if isinstance(reply, LeadAnswer) else (reply, 0.0)
        if answers is None:  # the person walked away: the host closes the question, the call ends unanswered
            self.abandoned = True
            return ElicitResult(action="cancel")
        if wait > 0:
            self.think += wait
            await asyncio.sleep(wait)
        if self.waiting is not None:
            self.waiting.deadline = anyio.current_time() + self.client.timeout
        return ElicitResult.model_validate(answers[QUESTION_KEY])


def _first_mcp_error(exc: BaseException) -> MCPError | None:
    """The SDK's error inside an exception group (anyio's task groups wrap what a task raised), if there is one."""
    if isinstance(exc, MCPError):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _first_mcp_error(inner)
        if found is not None:
            return found
    return None
