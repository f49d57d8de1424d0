"""HTTP for MRTR rounds: pooled, never pinned, never held across a person's think time.

The load generator must stay cheap (its CPU per round at most a tenth of a replica's, so
the harness never limits what it measures), so this is a small HTTP/1.1 client written
for exactly one exchange, a JSON POST and its answer, on gevent sockets: the SDK's async
`Client`, `requests`, `httpx` and geventhttpclient's pool with its general response parser
all cost more CPU per round (figures in `benchmarks/README.md`). A round writes one request
(its head precomputed per URL) and reads one answer: the status line, the three fields it
needs (length or chunking, content type, `Connection`) and the body.

A connection goes back to its pool as soon as its answer is read, so a flow that waits
minutes for a lead holds no socket (file descriptors, not memory, are what limit a load
process), and a retry is free to go anywhere. Two measured hazards shape the pool:

* a request sent on a keep-alive connection just as the server's idle timer closes it
  fails (uvicorn: 5 s). A POST must not be retried blindly (it may have run), so
  connections idle longer than `max_idle` (1 s by default) are closed instead of
  reused, well before any server gives up on them; one the server already closed (a
  replica restarted) is noticed before reuse and replaced;
* behind a balancer, a reused connection pins every round to one replica.
  `reuse_connections=False` sends `Connection: close`, so the balancer picks per round.

A server in SSE mode may answer with `text/event-stream`: given an `SseScanner`, the
stream is read only until the scanner has the response, and the connection is then
closed (the server may keep the stream open). The whole exchange, stream included,
gets `read_timeout`, so a stream of keepalive pings cannot run forever.

Errors never escape a round: they come back as `Outcome.TIMEOUT`, as
`Outcome.CONNECTION_ERROR` when the request could not be written, as `Outcome.ANSWER_LOST`
when it was written and the answer broke off (the server may have acted on it), or as
`NOT_SENT` when no connection could be opened (the server cannot have seen the request,
so the client may send it elsewhere). Nothing here
patches gevent; Locust does that, and gevent's sockets cooperate in plain code too.
"""

from __future__ import annotations

import enum
import ipaddress
import select
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol
from urllib.parse import SplitResult, urlsplit

import gevent
import gevent.socket
import gevent.ssl
from gevent import getcurrent
from gevent.lock import BoundedSemaphore
from gevent.monkey import get_original

import harness
from harness.mrtr.outcome import Outcome
from harness.mrtr.wire import SSE_CONTENT_TYPE, SseScanner

__all__ = ["NOT_SENT", "HttpAnswer", "NotSent", "RoundTransport", "Transport"]

DEFAULT_MAX_IDLE: Final = 1.0
"""Seconds a pooled connection may idle before it is closed rather than reused (uvicorn keeps 5 s)."""

DEFAULT_POOL_SIZE: Final = 32
"""Connections per origin (a replica, or a balancer); a round waits for a free one beyond that."""

_POLL: Final = get_original("select", "poll")
"""The operating system's `select.poll`, also in a process gevent patched (see `_Connection.peer_closed`)."""

RECV_SIZE: Final = 65536
MAX_HEAD: Final = 65536
"""Bytes of status line and header fields accepted before the answer counts as broken."""


@dataclass(slots=True)
class HttpAnswer:
    """A fully read HTTP response (for SSE, read up to the matching JSON-RPC response)."""

    status: int
    content_type: str
    body: bytes
    served_by: str | None = None
    """The `X-Served-By` header's value: the replica a balancer passed the request to, when it says."""
    challenge: str | None = None
    """The `WWW-Authenticate` header's value (a 401's or 403's OAuth challenge), when there is one."""


class RoundTransport(Protocol):
    """What the round loop needs from a transport (tests and benchmarks can script one)."""

    def post(
        self, url: str, body: bytes, headers: Mapping[str, str], sse: SseScanner | None = None, line: str = ""
    ) -> HttpAnswer | Outcome | NotSent: ...


class NotSent(enum.Enum):
    """The request never left this process: no connection could be opened to the replica.

    Unlike a connection that broke mid-answer, the server cannot have acted on it, so
    the client may send the same round to another replica, as a balancer would.
    """

    CONNECT_FAILED = "connect_failed"


NOT_SENT = NotSent.CONNECT_FAILED


class _Broken(Exception):
    """The answer was cut off or is not HTTP/1.x: the connection is unusable."""


class _NotWritten(Exception):
    """The connection broke while the request was being written."""


class _RoundTimeout(Exception):
    """The exchange ran past `read_timeout` (raised into the round's greenlet by its timer)."""


class _Connection:
    """One open socket, when it last went idle, and (plain TCP) a poll object to look at it without blocking."""

    __slots__ = ("sock", "idle_since", "_poll")

    def __init__(self, sock: gevent.socket.socket) -> None:
        self.sock = sock
        self.idle_since = 0.0
        self._poll: Any = None
        if not isinstance(sock, gevent.ssl.SSLSocket):
            self._poll = _POLL()
            self._poll.register(sock.fileno(), select.POLLIN | select.POLLPRI)

    def peer_closed(self) -> bool:
        """Whether the server closed (or wrote to) this idle connection: one `poll` with no wait.

        An idle HTTP/1.1 connection has nothing to read; readable (EOF, stray bytes) or hung
        up means the next request on it would fail or be misread. The operating system's own
        `poll` (never gevent's): it answers at once, with no exception to raise and catch on
        the usual answer, which a non-blocking peek needed. Over TLS readable data may be the
        protocol's own (a session ticket): there only the idle expiry protects a reuse.
        """
        return self._poll is not None and bool(self._poll.poll(0))

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class _Endpoint:
    """One origin (scheme, host, port): its idle connections and its connection slots."""

    __slots__ = ("host", "port", "ssl_context", "idle", "slots", "size", "_literal")

    def __init__(self, host: str, port: int, ssl_context: gevent.ssl.SSLContext | None, size: int) -> None:
        self.host, self.port, self.ssl_context = host, port, ssl_context
        self.idle: list[_Connection] = []
        self.slots = BoundedSemaphore(size)
        self.size = size
        self._literal = _ip_literal(host)

    def checkout(self, now: float, max_idle: float, connect_timeout: float) -> _Connection | None:
        """The freshest idle connection still fit for reuse, else a new one; None if connecting failed.

        The caller holds one of the endpoint's slots.
        """
        idle = self.idle
        while idle:
            connection = idle.pop()  # the most recently used: least likely to have been closed
            if now - connection.idle_since <= max_idle and not connection.peer_closed():
                return connection
            connection.close()
        try:
            sock = self._connect(connect_timeout)
        except OSError:  # refused, unreachable, connect timeout: nothing was sent
            return None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a request over one segment: no Nagle wait
            if self.ssl_context is not None:
                sock = self.ssl_context.wrap_socket(sock, server_hostname=self.host)
        except OSError:  # the TLS handshake failed: the request was not sent either
            sock.close()
            return None
        sock.settimeout(None)  # the round's own timer bounds every wait (one timer per round, not per read)
        return _Connection(sock)

    def _connect(self, timeout: float) -> gevent.socket.socket:
        """A connected socket. An IP address is connected to directly: `create_connection` would send
        even a literal through gevent's resolver thread pool, which costs more than the connect
        itself (a replica URL is usually `127.0.0.1:port`, and with `reuse_connections=False`
        every round connects). A name is resolved on every connect, so DNS changes are seen.
        """
        if self._literal is None:
            return gevent.socket.create_connection((self.host, self.port), timeout=timeout)
        sock = gevent.socket.socket(self._literal, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect((self.host, self.port))
        except BaseException:
            sock.close()
            raise
        return sock

    def close(self) -> None:
        for connection in self.idle:
            connection.close()
        self.idle.clear()


class Transport:
    """POSTs rounds to replica URLs over small shared pools, one per origin.

    Share one `Transport` between all the MRTR clients of a process (a Locust worker):
    the pools are per origin, so every flow's rounds reuse the same few connections.
    """

    def __init__(
        self,
        *,
        read_timeout: float = 30.0,
        connect_timeout: float = 2.0,
        max_idle: float = DEFAULT_MAX_IDLE,
        reuse_connections: bool = True,
        pool_size: int = DEFAULT_POOL_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.read_timeout = read_timeout
        self.connect_timeout = connect_timeout
        self.max_idle = max_idle
        self.reuse_connections = reuse_connections
        self.pool_size = pool_size
        self._clock = clock
        self._endpoints: dict[tuple[str, str, int], _Endpoint] = {}
        self._routes: dict[str, tuple[_Endpoint, str]] = {}
        """Per round URL (a replica's, or a balancer's: a handful): its endpoint and its constant request head."""

    def post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        sse: SseScanner | None = None,
        line: str = "",
    ) -> HttpAnswer | Outcome | NotSent:
        """Send one request and read its answer; an `Outcome` when the exchange failed, `NOT_SENT` when
        no connection could be opened.

        `headers` must be valid field lines (no CR/LF): they are written as given. `line`: one more
        field line, CRLF included, written after them (a lead's ready-made `Authorization`).
        `sse`, when given, reads a `text/event-stream` answer only until the scanner has
        the response; the rest of such a stream is dropped with its connection.
        """
        endpoint, prefix = self._routes.get(url) or self._route(url)
        lines = "".join([f"{name}: {value}\r\n" for name, value in headers.items()])
        request = f"{prefix}{lines}{line}Content-Length: {len(body)}\r\n\r\n".encode("latin-1") + body
        return self._send(endpoint, request, sse)

    def visit(self, url: str, body: bytes = b"") -> HttpAnswer | Outcome | NotSent:
        """POST to a URL that is not a round's: a lead finishing on a provider's page (URL mode).

        Such URLs are one per flow, so unlike round URLs nothing is kept per URL; the
        connection is pooled per origin like the rounds'.
        """
        parsed, endpoint = self._endpoint(url)
        return self._send(endpoint, f"{self._prefix(parsed)}Content-Length: {len(body)}\r\n\r\n".encode("latin-1")
                          + body, None)

    def connections_in_use(self) -> int:
        """Connections checked out of the pools right now (a round in flight holds one).

        Zero while every flow is waiting on its person: the property the memory and
        file-descriptor budget of a load process rests on.
        """
        return sum(e.size - e.slots.counter for e in self._endpoints.values())

    def close(self) -> None:
        """Close every pooled connection."""
        for endpoint in self._endpoints.values():
            endpoint.close()
        self._endpoints.clear()
        self._routes.clear()

    def _send(self, endpoint: _Endpoint, request: bytes, sse: SseScanner | None) -> HttpAnswer | Outcome | NotSent:
        """One exchange on a pooled (or new) connection, which goes back to the pool when fit for reuse."""
        endpoint.slots.acquire()
        try:
            connection = endpoint.checkout(self._clock(), self.max_idle, self.connect_timeout)
            if connection is None:
                return NOT_SENT
            # One loop timer per round, started and closed directly: a `gevent.Timeout` object does the same with
            # more Python on a path every round takes.
            timer = gevent.get_hub().loop.timer(self.read_timeout)
            timer.start(getcurrent().throw, _RoundTimeout)
            try:
                answer, reusable = _exchange(connection.sock, request, sse)
            except _RoundTimeout:
                connection.close()
                return Outcome.TIMEOUT
            except _NotWritten:
                connection.close()
                return Outcome.CONNECTION_ERROR
            except (OSError, _Broken, ValueError):  # written, then the answer broke off or came garbled
                connection.close()
                return Outcome.ANSWER_LOST
            finally:
                timer.close()
            if reusable and self.reuse_connections:
                connection.idle_since = self._clock()
                endpoint.idle.append(connection)
            else:
                connection.close()
            return answer
        finally:
            endpoint.slots.release()

    def _route(self, url: str) -> tuple[_Endpoint, str]:
        parsed, endpoint = self._endpoint(url)
        route = self._routes[url] = (endpoint, self._prefix(parsed))
        return route

    def _endpoint(self, url: str) -> tuple[SplitResult, _Endpoint]:
        parsed = urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        origin = (parsed.scheme, parsed.hostname, port)
        endpoint = self._endpoints.get(origin)
        if endpoint is None:
            context = gevent.ssl.create_default_context() if parsed.scheme == "https" else None
            endpoint = self._endpoints[origin] = _Endpoint(parsed.hostname, port, context, self.pool_size)
        return parsed, endpoint

    def _prefix(self, parsed: SplitResult) -> str:
        """The request line and the fields that never change for this URL."""
        host = f"[{parsed.hostname}]" if ":" in (parsed.hostname or "") else parsed.hostname
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        target = (parsed.path or "/") + (f"?{parsed.query}" if parsed.query else "")
        prefix = (
            f"POST {target} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"User-Agent: mrtr-harness/{harness.__version__}\r\n"
        )
        if not self.reuse_connections:
            prefix += "Connection: close\r\n"
        return prefix


def _ip_literal(host: str) -> socket.AddressFamily | None:
    """The address family of a host that is an IP address, None for a name."""
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return None


# --- one exchange on one connection -------------------------------------------------------------

WWW_AUTHENTICATE = b"www-authenticate"
"""A 401's or 403's OAuth challenge (RFC 6750 section 3): its `error` says why the token was refused."""

SERVED_BY = b"x-served-by"
"""The response header that names the replica behind a balancer (the shop's replicas send it; HAProxy:
`http-response set-header X-Served-By %s`), so that rounds sent to one URL are still counted per replica."""


def _exchange(sock: gevent.socket.socket, request: bytes, sse: SseScanner | None) -> tuple[HttpAnswer, bool]:
    """Write the request, read the answer; returns it and whether the connection may be reused."""
    try:
        _send_all(sock, request)
    except OSError as exc:
        raise _NotWritten from exc
    status_line, head, rest = _read_head(sock, sock.recv(RECV_SIZE))
    status = int(status_line[9:12])
    while 100 <= status < 200:  # interim answers (103 Early Hints): the real one follows
        status_line, head, rest = _read_head(sock, rest)
        status = int(status_line[9:12])
    length: int | None = None
    chunked = False
    content_type = ""
    served_by: str | None = None
    challenge: str | None = None
    keep_alive = status_line[7:8] == b"1"
    for line in head:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"content-type":
            content_type = value.strip().decode("latin-1")
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif name == b"connection":
            keep_alive = b"close" not in value.lower() and (keep_alive or b"keep-alive" in value.lower())
        elif name == SERVED_BY:
            served_by = value.strip().decode("latin-1")
        elif name == WWW_AUTHENTICATE:
            challenge = value.strip().decode("latin-1")
    if status in (204, 304):
        return HttpAnswer(status, content_type, b"", served_by, challenge), keep_alive
    streaming = sse is not None and content_type.startswith(SSE_CONTENT_TYPE)
    if chunked:
        reader = _ChunkedBody(sock, rest)
        if streaming:
            assert sse is not None
            for piece in reader:
                if sse.feed(piece):
                    break  # the rest of the stream is dropped with its connection
            return HttpAnswer(status, content_type, b"", served_by, challenge), False
        body = b"".join(reader)
        if not reader.complete:
            raise _Broken("connection closed in a chunked body")
        return HttpAnswer(status, content_type, body, served_by, challenge), keep_alive
    if length is None:  # delimited by the server closing the connection
        parts = [rest]
        while more := sock.recv(RECV_SIZE):
            parts.append(more)
        body, keep_alive = b"".join(parts), False
    else:
        body = rest
        while len(body) < length:
            more = sock.recv(RECV_SIZE)
            if not more:
                raise _Broken("connection closed in the response body")
            body += more
        if len(body) > length:
            raise _Broken("more bytes than Content-Length")
    if streaming:
        assert sse is not None
        sse.feed(body)
        return HttpAnswer(status, content_type, b"", served_by, challenge), keep_alive
    return HttpAnswer(status, content_type, body, served_by, challenge), keep_alive


def _send_all(sock: gevent.socket.socket, data: bytes) -> None:
    """`sendall` without its per-call work: gevent's reads the socket's send buffer size (a system call) on every
    call to cut the data in chunks; a request is one small write, usually taken whole."""
    while data:
        sent = sock.send(data)
        data = data[sent:]


def _read_head(sock: gevent.socket.socket, data: bytes) -> tuple[bytes, list[bytes], bytes]:
    """Read up to the end of a response head: (status line, field lines, the bytes after the head)."""
    while (end := data.find(b"\r\n\r\n")) < 0:
        if len(data) > MAX_HEAD:
            raise _Broken("response head too long")
        more = sock.recv(RECV_SIZE)
        if not more:
            raise _Broken("connection closed in the response head")
        data += more
    lines = data[:end].split(b"\r\n")
    status_line = lines[0]
    if not status_line.startswith(b"HTTP/1.") or len(status_line) < 12:
        raise _Broken("not an HTTP/1.x response")
    return status_line, lines[1:], data[end + 4 :]


class _ChunkedBody:
    """A chunked body, decoded as it arrives: iterate for the data, then read `complete`.

    A stream cut off before its last chunk simply ends with `complete` False (for SSE
    the scanner decides whether it got the response); a malformed chunk size raises
    `_Broken`.
    """

    __slots__ = ("_sock", "_data", "complete")

    def __init__(self, sock: gevent.socket.socket, data: bytes) -> None:
        self._sock = sock
        self._data = data
        self.complete = False

    def __iter__(self) -> Iterator[bytes]:
        sock, data = self._sock, self._data
        while True:
            while (line_end := data.find(b"\r\n")) < 0:
                if not (more := sock.recv(RECV_SIZE)):
                    return
                data += more
            try:
                size = int(data[:line_end].split(b";", 1)[0], 16)
            except ValueError:
                raise _Broken("bad chunk size") from None
            data = data[line_end + 2 :]
            if size == 0:  # the last chunk: optional trailer fields, then a blank line
                while not (data.startswith(b"\r\n") or b"\r\n\r\n" in data):
                    if not (more := sock.recv(RECV_SIZE)):
                        return
                    data += more
                self.complete = True
                return
            while len(data) < size + 2:
                if not (more := sock.recv(RECV_SIZE)):
                    if data[:size]:
                        yield data[:size]
                    return
                data += more
            yield data[:size]
            data = data[size + 2 :]
