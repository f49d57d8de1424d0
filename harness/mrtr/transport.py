"""HTTP for MRTR rounds: pooled, never pinned, never held across a person's think time.

Built on `geventhttpclient` because the load generator must stay cheap: the SDK's
async `Client` costs about ten times the CPU per call, and `requests`/`httpx` several
times more. A connection goes back to its pool as soon as its response is read, so a
flow that waits minutes for a lead holds no socket (file descriptors, not memory,
are what limit a load process), and a retry is free to go anywhere.

Two measured hazards shape the pool:

* a request sent on a keep-alive connection just as the server's idle timer closes it
  fails (uvicorn: 5 s). A POST must not be retried blindly (it may have run), so
  connections idle longer than `max_idle` (1 s by default) are closed instead of
  reused, well before any server gives up on them;
* behind a balancer, a reused connection pins every round to one replica.
  `reuse_connections=False` sends `Connection: close`, so the balancer picks per round.

geventhttpclient's `ConnectionPool` and its C response parser do the work; the request
head is written here, because `HTTPClient.request` re-merges and re-validates every
header on every request (about 80 µs of a ~450 µs round on the reference VM, see
`benchmarks/client_cpu.py`), and a round's headers are fixed per call.

Errors never escape a round: they come back as `Outcome.TIMEOUT` or
`Outcome.CONNECTION_ERROR`. Nothing here patches gevent; Locust does that, and
geventhttpclient's sockets are gevent sockets in plain (unpatched) code too.
"""

from __future__ import annotations

import enum

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import gevent.socket
from geventhttpclient import URL
from geventhttpclient.connectionpool import ConnectionPool, SSLConnectionPool
from geventhttpclient.response import HTTPParseError, HTTPSocketPoolResponse

import harness
from harness.mrtr.outcome import Outcome
from harness.mrtr.wire import SSE_CONTENT_TYPE, SseScanner

__all__ = ["HttpAnswer", "RoundTransport", "Transport"]

DEFAULT_MAX_IDLE: Final = 1.0
"""Seconds a pooled connection may idle before it is closed rather than reused (uvicorn keeps 5 s)."""

DEFAULT_POOL_SIZE: Final = 32
"""Connections per replica URL; a round waits for a free one beyond that."""


@dataclass(slots=True)
class HttpAnswer:
    """A fully read HTTP response (for SSE, read up to the matching JSON-RPC response)."""

    status: int
    content_type: str
    body: bytes


class RoundTransport(Protocol):
    """What the round loop needs from a transport (tests and benchmarks can script one)."""

    def post(
        self, url: str, body: bytes, headers: Mapping[str, str], sse: SseScanner | None = None
    ) -> HttpAnswer | Outcome: ...


class NotSent(enum.Enum):
    """The request never left this process: no connection could be opened to the replica.

    Unlike a connection that broke mid-answer, the server cannot have acted on it, so
    the client may send the same round to another replica, as a balancer would.
    """

    CONNECT_FAILED = "connect_failed"


NOT_SENT = NotSent.CONNECT_FAILED


class ConnectFailed(OSError):
    """Connecting failed (refused, unreachable, connect timeout): nothing was sent."""


class _IdleExpiry:
    """Mixin for geventhttpclient's pool: a connection idle past `max_idle` counts as dead.

    The pool already discards connections that `_is_socket_alive` rejects before reuse,
    so stamping the return time and failing that check is all the expiry needs.
    """

    _max_idle: float
    _clock: Callable[[], float]
    _idle_since: dict[Any, float]
    _closed: bool

    def _setup_expiry(self, max_idle: float, clock: Callable[[], float]) -> None:
        self._max_idle = max_idle
        self._clock = clock
        self._idle_since = {}

    def _is_socket_alive(self, sock: gevent.socket.socket | None) -> bool:
        idle_since = self._idle_since.pop(sock, None)
        if idle_since is None or self._clock() - idle_since > self._max_idle:
            return False
        return super()._is_socket_alive(sock)  # type: ignore[misc]

    def return_socket(self, sock: gevent.socket.socket) -> None:
        if not self._closed:
            self._idle_since[sock] = self._clock()
        super().return_socket(sock)  # type: ignore[misc]

    def _create_socket(self) -> gevent.socket.socket:
        try:
            return super()._create_socket()  # type: ignore[misc]
        except OSError as error:
            raise ConnectFailed(str(error)) from error

    def close(self) -> None:
        super().close()  # type: ignore[misc]
        self._idle_since.clear()


class _Pool(_IdleExpiry, ConnectionPool):
    pass


class _SslPool(_IdleExpiry, SSLConnectionPool):
    pass


class _ResponseFields(dict[str, str]):
    """Response header fields by lowercased name, for geventhttpclient's parser.

    Its default `Headers` keeps order, case and duplicates at a few µs per field; a
    round reads only `content-type`, so a plain dict (last duplicate wins) is enough.
    """

    __slots__ = ()

    def add(self, name: str, value: str) -> None:
        self[name.lower()] = value


class _Endpoint:
    """One replica URL: its pool and the constant start of every request head sent to it."""

    __slots__ = ("pool", "prefix")

    def __init__(self, pool: ConnectionPool, prefix: str) -> None:
        self.pool = pool
        self.prefix = prefix

    def request(self, body: bytes, headers: Mapping[str, str]) -> HTTPSocketPoolResponse:
        """Send one POST and parse the response head; the socket returns to the pool when read."""
        lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        head = f"{self.prefix}{lines}Content-Length: {len(body)}\r\n\r\n".encode("latin-1")
        pool = self.pool
        sock = pool.get_socket()
        try:
            sock.sendall(head + body)
        except BaseException:
            pool.release_socket(sock)
            raise
        return HTTPSocketPoolResponse(sock, pool, method="POST", headers_type=_ResponseFields)


class Transport:
    """POSTs rounds to replica URLs over small shared pools, one per URL.

    Share one `Transport` between all the MRTR clients of a process (a Locust worker):
    the pools are per URL, so every flow's rounds reuse the same few connections.
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
        self._endpoints: dict[str, _Endpoint] = {}

    def post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        sse: SseScanner | None = None,
    ) -> HttpAnswer | Outcome | NotSent:
        """Send one request and read its answer; an `Outcome` when the exchange failed, `NOT_SENT` when
        no connection could be opened.

        `headers` must be valid field lines (no CR/LF): they are written as given.
        `sse`, when given, reads a `text/event-stream` answer only until the scanner has
        the response; the rest of such a stream is dropped with its connection.
        """
        endpoint = self._endpoints.get(url) or self._open(url)
        try:
            response = endpoint.request(body, headers)
            content_type = response.get("content-type") or ""
            if sse is not None and content_type.startswith(SSE_CONTENT_TYPE):
                if not self._read_stream(response, sse):
                    return Outcome.TIMEOUT
                return HttpAnswer(response.status_code, content_type, b"")
            return HttpAnswer(response.status_code, content_type, response.read())
        except ConnectFailed:
            return NOT_SENT
        except TimeoutError:
            return Outcome.TIMEOUT
        except (OSError, HTTPParseError):
            return Outcome.CONNECTION_ERROR

    def connections_in_use(self) -> int:
        """Connections checked out of the pools right now (a round in flight holds one).

        Zero while every flow is waiting on its person: the property the memory and
        file-descriptor budget of a load process rests on.
        """
        return sum(e.pool.size - e.pool._semaphore.counter for e in self._endpoints.values())

    def close(self) -> None:
        """Close every pooled connection."""
        for endpoint in self._endpoints.values():
            endpoint.pool.close()
        self._endpoints.clear()

    def _read_stream(self, response: HTTPSocketPoolResponse, sse: SseScanner) -> bool:
        """Feed SSE lines to the scanner until it has the response; False past the deadline.

        The per-read socket timeout alone would let a stream of keepalive pings run
        forever, so the whole stream also gets `read_timeout`.
        """
        deadline = self._clock() + self.read_timeout
        try:
            while not sse.feed(line := response.readline(b"\n")):
                if not line or self._clock() > deadline:
                    break
        finally:
            response.release()  # closes the connection if the stream was not read to its end
        return sse.message is not None or self._clock() <= deadline

    def _open(self, url: str) -> _Endpoint:
        parsed = URL(url)
        if parsed.scheme not in ("http", "https"):
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        pool_class = _SslPool if parsed.scheme == "https" else _Pool
        pool = pool_class(
            parsed.host,
            port,
            parsed.host,
            port,
            size=self.pool_size,
            connection_timeout=self.connect_timeout,
            network_timeout=self.read_timeout,
        )
        pool._setup_expiry(self.max_idle, self._clock)
        host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
        prefix = (
            f"POST {parsed.request_uri or '/'} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"User-Agent: mrtr-harness/{harness.__version__}\r\n"
        )
        if not self.reuse_connections:
            prefix += "Connection: close\r\n"
        endpoint = self._endpoints[url] = _Endpoint(pool, prefix)
        return endpoint
