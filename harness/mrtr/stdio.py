"""MRTR over stdio: a server the harness starts as its child, driven round by round by the MCP SDK's own client.

A stdio server has one client, the process that started it, and speaks newline-delimited JSON-RPC on its
standard input and output (the SDK's `mcp.server.stdio`). The harness starts it itself (`StdioServer`), in its
own session and tied to the harness's lifeline (`harness.processes.children.start_child`), so it is stopped by
its PID and dies with the harness even after a SIGKILL; the SDK's `stdio_client` would spawn it through anyio,
which has no hook for the lifeline. Its pipes are framed exactly as `stdio_client` frames them (one JSON-RPC
message a line, parsed by the SDK's own adapter) and handed to the SDK's `Client` as a `Transport`; the
session speaks 2026-07-28 from its first request (no probe, as `Client(mode="2026-07-28")`).

`StdioClient` runs a call as `MrtrClient` does, one `tools/call` per round through the SDK's
`ClientSession.call_tool(allow_input_required=True)`, the lead's answers and the `requestState` sent back
as they came; the lead's thinking is yielded as a wait (the flow parks), never slept on the event loop.
Every round is a `RoundRecord`, so the journal, the verdict and the reports are the ones HTTP gives.

The cold start of a process is the time from its spawn to its first answer (`tools/list`, whose tools the
output contracts read): what a host that starts the server on demand waits before the first call.

Every coroutine runs on the process's one asyncio loop (`harness.mrtr.legacy.process_loop`, on a greenlet),
whose selector is gevent's; a process is spawned from the calling greenlet, on the main thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import anyio
import gevent
import mcp_types
from mcp import Client, MCPError
from mcp.shared.message import SessionMessage
from mcp_types import CallToolResult, InputRequiredResult

from harness.atomic_files import open_append
from harness.mrtr.client import (
    DEFAULT_INPUT_REQUIRED_MAX_ROUNDS,
    STATE_ONLY_BACKOFF_CAP,
    STATE_ONLY_BACKOFF_INITIAL,
    CallResult,
    CallSteps,
    LeadAnswer,
    Responder,
    RoundHook,
    RoundRecord,
)
from harness.mrtr.legacy import LegacyLoop, process_loop
from harness.mrtr.outcome import Outcome, outcome_for_error_code
from harness.mrtr.routing import Router
from harness.processes.children import start_child

__all__ = ["ColdStart", "StdioClient", "StdioServer", "StdioServers", "stdio_url"]

PROTOCOL = "2026-07-28"
MAX_LINE = 16 * 1024 * 1024
"""The longest line read from a server's stdout: a longer one ends the session (a server gone wrong)."""
CONNECTION_CLOSED = -32000
REQUEST_TIMEOUT = -32001
"""The SDK's codes for a session that ended and a request past its timeout (`mcp_types`)."""
READY_TIMEOUT = 60.0
"""Seconds a new process gets to give its first answer (a cold start on a loaded machine takes seconds)."""
STOP_GRACE = 2.0
"""Seconds a server gets to exit after its stdin closes (the SDK's own grace), then SIGKILL by its PID."""


def stdio_url(label: str) -> str:
    """The name a round's replica goes by in the journal and the router: `stdio://r1`."""
    return f"stdio://{label}"


@dataclass(frozen=True)
class ColdStart:
    """One process's cold start: its spawn to its first answer."""

    label: str
    pid: int
    seconds: float
    at: float
    """When it answered first (Unix seconds)."""


class StdioServer:
    """One server process: its PID, its SDK session over its pipes, and its cold start."""

    def __init__(self, label: str, command: Sequence[str], log_path: Path, loop: LegacyLoop, *,
                 env: Mapping[str, str] | None = None, timeout: float = 30.0,
                 ready_timeout: float = READY_TIMEOUT) -> None:
        """`timeout`: seconds each round may wait for its answer (`[load] timeout`); `ready_timeout`: for the
        first answer."""
        self.label = label
        self.url = stdio_url(label)
        self.command = list(command)
        self.log_path = log_path
        self.loop = loop
        self.env = dict(env) if env is not None else None
        self.timeout = timeout
        self.ready_timeout = ready_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.client: Client | None = None
        self.tools: list[dict[str, Any]] = []
        self.cold_start: ColdStart | None = None
        self._closed: asyncio.Event | None = None
        self._done: asyncio.Future[None] | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def connected(self) -> bool:
        """Whether a round can be sent now: the process lives and its session is open."""
        return self.client is not None and self.running() and self._closed is not None and not self._closed.is_set()

    def start(self) -> ColdStart:
        """Spawn the process, open the SDK's session on its pipes and wait for its first answer (`tools/list`).

        Raises `OSError` when it cannot be spawned, `RuntimeError` when it does not answer within `ready_timeout`
        (the process is stopped then)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open_append(self.log_path, binary=True)
        child_in, to_child = os.pipe()
        from_child, child_out = os.pipe()
        spawned = time.monotonic()
        try:
            self.process = start_child(self.command, stdin=child_in, stdout=child_out, stderr=self._log,
                                       env=self.env)
        except OSError:
            for descriptor in (from_child, to_child):
                os.close(descriptor)
            self._log.close()
            self._log = None
            raise
        finally:
            os.close(child_in)
            os.close(child_out)
        reader, writer = os.fdopen(from_child, "rb", buffering=0), os.fdopen(to_child, "wb", buffering=0)
        try:
            first = self.loop.run(lambda: self._open(reader, writer))
        except Exception as exc:  # noqa: BLE001 - whatever it was, the process gave no first answer
            code = self.process.poll()
            self.stop()
            exited = f"exited with code {code}" if code is not None else _said(_first_mcp_error(exc) or exc)
            raise RuntimeError(f"{self.label} ({self.command[0]}) gave no first answer: {exited}; "
                               f"see {self.log_path}") from None
        except BaseException:
            self.stop()
            raise
        self.tools = first
        self.cold_start = ColdStart(self.label, self.process.pid, time.monotonic() - spawned, time.time())
        return self.cold_start

    async def _open(self, reader: IO[bytes], writer: IO[bytes]) -> list[dict[str, Any]]:
        """Start the task that holds the session open, and wait for its first answer."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[list[dict[str, Any]]] = loop.create_future()
        self._closed = asyncio.Event()
        self._done = loop.create_task(self._hold(reader, writer, ready))
        return await ready

    async def _hold(self, reader: IO[bytes], writer: IO[bytes], ready: asyncio.Future[list[dict[str, Any]]]) -> None:
        """The session, open until `stop` or the process's end; its first answer set on `ready`."""
        assert self._closed is not None
        closed = self._closed
        try:
            async with pipe_transport(reader, writer, closed) as streams, \
                    Client(_Streams(streams), mode=PROTOCOL, elicitation_callback=_asked_in_rounds,
                           read_timeout_seconds=self.timeout, cache=None) as client:
                with anyio.fail_after(self.ready_timeout):
                    listed = await client.session.list_tools()
                if not ready.done():
                    ready.set_result([tool.model_dump(by_alias=True, mode="json", exclude_none=True)
                                      for tool in listed.tools])
                self.client = client
                await closed.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
            if not isinstance(exc, Exception):
                raise
        finally:
            self.client = None
            closed.set()

    async def call(self, tool: str, arguments: Mapping[str, Any], responses: Mapping[str, Any] | None,
                   state: str | None) -> CallToolResult | InputRequiredResult | MCPError | Exception | None:
        """One `tools/call` round on this process's session: its result, or what it failed with; None when the
        session had closed and nothing was sent."""
        client = self.client
        if client is None:
            return None
        try:
            result = await client.session.call_tool(
                tool, dict(arguments), read_timeout_seconds=self.timeout,
                input_responses=dict(responses) if responses is not None else None, request_state=state,
                allow_input_required=True)
        except Exception as exc:  # noqa: BLE001 - the round's outcome, not the flow's crash
            return _first_mcp_error(exc) or exc
        return result

    def signal(self, signum: int) -> None:
        """Send `signum` to the process by its PID, while it runs (SIGSTOP, SIGCONT, SIGKILL)."""
        if self.process is not None and self.running():
            os.kill(self.process.pid, signum)

    def kill(self) -> None:
        """SIGKILL by its PID, as a crash would; its session ends with the pipe."""
        if self.running():
            self.signal(signal.SIGKILL)
        self.stop()

    def stop(self) -> None:
        """End the session (stdin closes), give the process `STOP_GRACE` to exit, then SIGKILL it by its PID."""
        if self._closed is not None:
            closed, done = self._closed, self._done
            self.loop.run(lambda: _close(closed, done))
        if self.process is not None:
            if self.running():
                self.signal(signal.SIGCONT)  # a paused process cannot read its stdin's end
            try:
                self.process.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.process.wait(STOP_GRACE)
        if self._log is not None:
            self._log.close()
            self._log = None


async def _close(closed: asyncio.Event, done: asyncio.Future[None] | None) -> None:
    closed.set()
    if done is not None:
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(done), STOP_GRACE)


async def _asked_in_rounds(context: Any, params: Any) -> Any:
    """Declares elicitation (form and URL) on every request; never called: questions come as input requests,
    which the rounds hand to the lead themselves."""
    return mcp_types.ErrorData(code=-32601, message="questions are answered in the next round")


class _Streams:
    """A `Transport` over streams already open (the SDK's `Client` enters it)."""

    def __init__(self, streams: Any) -> None:
        self.streams = streams

    async def __aenter__(self) -> Any:
        return self.streams

    async def __aexit__(self, *exc: object) -> None:
        return None


@contextlib.asynccontextmanager
async def pipe_transport(reader: IO[bytes], writer: IO[bytes], closed: asyncio.Event) -> AsyncIterator[Any]:
    """The SDK's read and write streams over a child's stdout and stdin, framed as `mcp.client.stdio` frames them:
    one JSON-RPC message a line, each line parsed by the SDK's adapter (a line that does not parse is handed on
    as the error it is). The stdout's end (the process died) sets `closed`; closing both pipes ends it."""
    loop = asyncio.get_running_loop()
    lines = asyncio.StreamReader(limit=MAX_LINE)
    read_transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(lines), reader)
    write_transport, _ = await loop.connect_write_pipe(asyncio.Protocol, writer)
    incoming_writer, incoming = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    outgoing, outgoing_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def read() -> None:
        async with incoming_writer:
            with contextlib.suppress(ValueError, ConnectionError, anyio.ClosedResourceError,
                                     anyio.BrokenResourceError):
                while line := await lines.readline():
                    if line.strip():
                        await incoming_writer.send(_parsed(line))
        closed.set()

    async def write() -> None:
        async with outgoing_reader:
            async for message in outgoing_reader:
                if write_transport.is_closing():
                    break
                text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                write_transport.write(text.encode("utf-8") + b"\n")

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read)
        tasks.start_soon(write)
        try:
            yield incoming, outgoing
        finally:
            write_transport.close()  # the server reads EOF: the spec's first step of a stdio shutdown
            read_transport.close()
            await outgoing.aclose()
            await incoming.aclose()
            tasks.cancel_scope.cancel()


def _parsed(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc


def _first_mcp_error(exc: BaseException) -> MCPError | None:
    """The SDK's error, or the first inside an exception group."""
    if isinstance(exc, MCPError):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _first_mcp_error(inner)
        if found is not None:
            return found
    return None


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200] if str(exc) else type(exc).__name__


class StdioServers:
    """The stdio servers of a run, one per replica (started with the target) or one per simulated client (started
    at its flow's first call, stopped at its end), and every cold start so far.

    `on_cold_start` sees each process's cold start as it happens (the journal's `cold_start` record)."""

    def __init__(self, command: Callable[[str], Sequence[str]], log_folder: Path, *, labels: Sequence[str],
                 per_client: bool, env: Mapping[str, str] | None = None, timeout: float = 30.0,
                 on_cold_start: Callable[[ColdStart], None] | None = None) -> None:
        """`command(label)`: the argv a process of that label is started with."""
        self.command = command
        self.log_folder = log_folder
        self.labels = list(labels)
        self.per_client = per_client
        self.env = env
        self.timeout = timeout
        self.loop = process_loop()
        self.replicas: list[StdioServer] = []
        self.clients: dict[int, StdioServer] = {}
        """Per-client mode: each lead's process, while its flow runs."""
        self.ending: list[StdioServer] = []
        """Per-client processes whose flows ended, being stopped (each stop is asked again at the target's)."""
        self.cold_starts: list[ColdStart] = []
        self.on_cold_start = on_cold_start
        self.failure: str | None = None
        """Why the latest per-client process could not be started, for the round that needed it."""

    def server(self, label: str) -> StdioServer:
        """A new server, not started: its log is `log_folder/LABEL.log` (per-client processes share one)."""
        log = self.log_folder / f"{label}.log"
        return StdioServer(label, self.command(label), log, self.loop, env=self.env, timeout=self.timeout)

    def started(self, server: StdioServer) -> StdioServer:
        """`server`, started, its cold start counted."""
        cold = server.start()
        self.cold_starts.append(cold)
        if self.on_cold_start is not None:
            self.on_cold_start(cold)
        return server

    def start(self) -> None:
        """Per replica: every replica's process, started in turn (each its own cold start). Per client: one process
        started and stopped, so a command that cannot serve fails the target's start, not every flow (its cold
        start counts as any other's)."""
        if not self.per_client:
            for label in self.labels:
                self.replicas.append(self.started(self.server(label)))
            return
        self.started(self.server(self.labels[0])).stop()

    def restart(self, index: int, *, kill: bool) -> float:
        """Replica `index` stopped (SIGKILL, or its stdin closed) and started again; seconds to its first answer."""
        old = self.replicas[index]
        old.kill() if kill else old.stop()
        self.replicas[index] = self.started(self.server(old.label))
        cold = self.replicas[index].cold_start
        return cold.seconds if cold is not None else 0.0

    def for_round(self, url: str, lead: int | None) -> StdioServer | None:
        """The process a round goes to: the lead's own (started now when it has none), or the replica `url` names,
        else another replica that is connected (as a balancer would); None when none is."""
        if self.per_client:
            key = lead if lead is not None else -1
            server = self.clients.get(key)
            if server is None or not server.connected():
                if server is not None:
                    server.stop()
                server = self.clients[key] = self.server(self.labels[0])
                try:
                    self.started(server)
                except (RuntimeError, OSError) as exc:  # the round says why, and the flow ends on it
                    self.failure = str(exc)
                    return None
            return server
        by_url = {server.url: server for server in self.replicas}
        chosen = by_url.get(url)
        if chosen is not None and chosen.connected():
            return chosen
        return next((server for server in self.replicas if server.connected()), None)

    def flow_ended(self, flow: Any) -> None:
        """Per-client mode: a flow ended (`FlowEnv.on_flow_end`), so its lead's process is stopped."""
        server = self.clients.pop(flow.lead, None) if self.per_client else None
        if server is not None:  # stopped beside the flows, never holding up the one that ended (or the run's table)
            self.ending.append(server)
            gevent.spawn(server.stop)

    def all(self) -> list[StdioServer]:
        return [*self.replicas, *self.clients.values()]

    def stop(self) -> None:
        """Every process stopped by its PID: its stdin closed, SIGKILL after the grace."""
        for server in [*self.all(), *self.ending]:
            server.stop()
        self.clients.clear()
        self.ending.clear()


class StdioClient:
    """`tools/call` over stdio through the SDK's `ClientSession`, round by round: `MrtrClient.call_steps`'s
    interface, so a flow does not know its rounds go over pipes."""

    def __init__(self, servers: StdioServers, router: Router, *,
                 max_rounds: int = DEFAULT_INPUT_REQUIRED_MAX_ROUNDS, clock: Callable[[], float] = time.time) -> None:
        self.servers = servers
        self.router = router
        self.max_rounds = max_rounds
        self._clock = clock
        self._ids = itertools.count(1)

    def call_steps(self, tool: str, arguments: Mapping[str, Any], respond: Responder, *,
                   intended_at: float | None = None, on_round: RoundHook | None = None,
                   lead: int | None = None, trace: object = None) -> CallSteps:
        """One call to its end, as `MrtrClient.call_steps`: each wait yielded, each round handed to `on_round`.
        `trace` is taken and left unused (the SDK's client carries no `traceparent` of the harness's)."""
        count = 0
        server_time = think = backoff = 0.0
        delay = STATE_ONLY_BACKOFF_INITIAL
        responses: Mapping[str, Any] | None = None
        state: str | None = None
        replica: str | None = None
        at = intended_at if intended_at is not None else self._clock()
        while True:
            count += 1
            record = self._round(tool, arguments, responses, state, self.router.pick(replica), lead, count, at)
            server_time += record.server_time
            if on_round is not None:
                on_round(tool, record)
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
                responses = answers
                think += wait
            else:
                wait, delay = delay, min(delay * 2, STATE_ONLY_BACKOFF_CAP)
                responses = None
                backoff += wait
            del record
            at = self._clock() + wait
            if wait > 0:
                yield wait

    def _round(self, tool: str, arguments: Mapping[str, Any], responses: Mapping[str, Any] | None,
               state: str | None, url: str, lead: int | None, number: int, intended_at: float) -> RoundRecord:
        server = self.servers.for_round(url, lead)
        sent_at = self._clock()
        record = RoundRecord(number, server.url if server is not None else url, next(self._ids),
                             min(intended_at, sent_at), sent_at, sent_at, Outcome.CONNECTION_ERROR,
                             sent_responses=responses is not None, sent_state=state is not None,
                             redispatched_from=url if server is not None and server.url != url else None)
        if server is None:
            record.error_message = self.servers.failure or "no stdio server process is connected"
            return record
        answer = self.servers.loop.run(lambda: server.call(tool, arguments, responses, state))
        record.received_at = self._clock()
        classify(record, answer)
        return record

    def read_tools(self, _line: str = "") -> list[object] | None:
        """tools/list as a process's first answer gave it (its first page), for the output contracts
        (`harness.load.output_contracts`); None before any process answered."""
        server = next((server for server in self.servers.all() if server.tools), None)
        return [{"tools": server.tools}] if server is not None else None


def classify(record: RoundRecord,
             answer: CallToolResult | InputRequiredResult | MCPError | Exception | None) -> None:
    """What a round came to, in `record`: the result and its outcome, or the error's code and message (None:
    never sent, a connection error)."""
    if answer is None:
        record.outcome = Outcome.CONNECTION_ERROR
        record.error_message = "the stdio server's session had closed"
        return
    if isinstance(answer, MCPError):
        code = answer.error.code
        record.error_code = code
        record.error_message = answer.error.message
        # the session ended under a written request (the process died): the server may have acted on it
        record.outcome = Outcome.TIMEOUT if code == REQUEST_TIMEOUT else \
            Outcome.ANSWER_LOST if code == CONNECTION_CLOSED else outcome_for_error_code(code)
        if record.outcome in (Outcome.TIMEOUT, Outcome.ANSWER_LOST):
            record.error_code = None
        return
    if isinstance(answer, Exception):
        record.outcome = Outcome.INVALID_RESULT
        record.error_message = _said(answer)
        return
    body = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
    record.result = body
    record.response_bytes = len(json.dumps(body, separators=(",", ":")))
    if isinstance(answer, InputRequiredResult):
        record.outcome = Outcome.INPUT_REQUIRED
        record.input_requests = body.get("inputRequests") or None
        record.request_state = answer.request_state
    else:
        record.outcome = Outcome.TOOL_ERROR if answer.is_error else Outcome.COMPLETE
