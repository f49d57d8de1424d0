"""The harness's own fault proxy: one listener per replica on 127.0.0.1, forwarding bytes to the replica.

When a scenario has a `network` chaos step, the load talks to these proxies instead of
the replicas, and the step sets a fault on one proxy (or all) for its duration. Each
proxy is greenlets in the load process's own gevent loop, no process of its own: when
the harness ends, even by SIGKILL, the kernel closes its sockets and no port stays open.

The proxy forwards TCP bytes and knows HTTP only as far as it must: an *exchange* is
one request and its answer, and a new one begins when the client sends after the
server has answered (or first, on a fresh connection). A fault draws, once per
exchange and from the scenario's seed, whether it hits (`toxicity`), and counts the
exchanges it hit where it acted (a delay, a reset, a cut), so the chaos record can say
what the fault did. With no fault set, a chunk costs one attribute check each way.
"""

from __future__ import annotations

import random
import socket
import struct
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import gevent
import gevent.socket
from gevent.pool import Group

from harness.config.chaos import NetworkAction

CHUNK = 65536
"""Bytes read at a time (a bandwidth limit reads less, so its pace is even)."""
CONNECT_TIMEOUT = 10.0
"""Seconds the proxy gives a replica to accept its connection: a dead one is a reset, not a hang."""


@dataclass
class ActiveFault:
    """One network step on one proxy while it lasts: what it is, its seeded draws and its counts."""

    step: NetworkAction
    rng: random.Random
    exchanges: int = 0
    """Exchanges that began on this proxy while the fault was on."""
    hit: int = 0
    """Of those, the ones it acted on (delayed, slowed, reset, swallowed, cut; for down, connections closed)."""

    def draw(self) -> bool:
        """Whether the exchange beginning now is hit: one seeded draw per exchange."""
        self.exchanges += 1
        return self.step.toxicity >= 1.0 or self.rng.random() < self.step.toxicity

    def delay(self) -> float:
        return self.step.delay + (self.rng.uniform(0.0, self.step.jitter) if self.step.jitter else 0.0)


@dataclass
class _Exchange:
    fault: ActiveFault | None
    """The fault that hit this exchange (None: it goes through untouched)."""
    answered: int = 0
    """Bytes of the answer forwarded so far."""
    counted: bool = False

    def count(self) -> None:
        if self.fault is not None and not self.counted:
            self.counted = True
            self.fault.hit += 1


class _Link:
    """One client connection and the proxy's connection to the replica: two pumps, one per direction."""

    def __init__(self, proxy: FaultProxy, client: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream: socket.socket | None = None
        self.exchange: _Exchange | None = None
        self.answering = True
        """The server spoke last (or nobody did yet): the client's next bytes begin an exchange."""
        self.moved = time.monotonic()
        self.closed = False

    def serve(self) -> None:
        fault = self.proxy.fault
        if fault is not None and fault.step.fault == "reset" and fault.step.when == "on-connect" and fault.draw():
            _Exchange(fault).count()
            self.close(reset=True)
            return
        host, port = self.proxy.upstream
        try:
            self.upstream = gevent.socket.create_connection((host, port), timeout=CONNECT_TIMEOUT)
            self.upstream.settimeout(None)
        except OSError:  # the replica refused or is gone: the client sees its connection reset
            self.close(reset=True)
            return
        to_client = gevent.spawn(self._to_client)
        try:
            self._to_server()
        finally:
            if self.closed:
                to_client.kill(block=False)
            else:
                to_client.join()
            self.close()

    # --- client -> replica ---------------------------------------------------------------

    def _to_server(self) -> None:
        while not self.closed:
            data = _recv(self.client, self._chunk())
            if not data:
                _shutdown_write(self.upstream)
                return
            self.moved = time.monotonic()
            if self.answering:
                self._begin_exchange()
            exchange = self.exchange
            if exchange is not None and exchange.fault is not None \
                    and not self._apply_to_server(exchange, exchange.fault, data):
                continue
            assert self.upstream is not None
            try:
                self.upstream.sendall(data)
            except OSError:
                self.close(reset=True)
                return

    def _begin_exchange(self) -> None:
        self.answering = False
        fault = self.proxy.fault
        exchange = _Exchange(fault if fault is not None and fault.draw() else None)
        self.exchange = exchange
        if exchange.fault is not None and exchange.fault.step.fault == "cut-slow":
            gevent.spawn(self._cut_when_idle, exchange)

    def _apply_to_server(self, exchange: _Exchange, fault: ActiveFault, data: bytes) -> bool:
        """Act on a request chunk; False: it is swallowed, not forwarded."""
        kind = fault.step.fault
        if kind == "blackhole":
            exchange.count()
            return False
        if kind == "latency" and fault.step.direction != "to-client" and not exchange.counted:
            exchange.count()
            gevent.sleep(fault.delay())
        elif kind == "bandwidth":
            exchange.count()
            gevent.sleep(len(data) / fault.step.rate)
        return not self.closed

    # --- replica -> client ---------------------------------------------------------------

    def _to_client(self) -> None:
        assert self.upstream is not None
        while not self.closed:
            data = _recv(self.upstream, self._chunk())
            if not data:  # the replica ended the connection: so does the proxy, both sides
                self.close()
                return
            self.moved = time.monotonic()
            first = not self.answering
            self.answering = True
            exchange = self.exchange
            if exchange is not None and exchange.fault is not None:
                forwarded = self._apply_to_client(exchange, exchange.fault, data, first)
                if forwarded is None:
                    return
                data = forwarded
            try:
                self.client.sendall(data)
            except OSError:
                self.close(reset=True)
                return
            if exchange is not None:
                exchange.answered += len(data)
                if self._truncated(exchange):
                    self.close()
                    return

    def _apply_to_client(self, exchange: _Exchange, fault: ActiveFault, data: bytes, first: bool) -> bytes | None:
        """Act on an answer chunk: the bytes to forward, or None when the connection was ended instead."""
        step = fault.step
        if step.fault == "blackhole":
            return None  # nothing comes back; the request was never forwarded anyway
        if step.fault == "latency" and step.direction != "to-server" and first:
            exchange.count()
            gevent.sleep(fault.delay())
        elif step.fault == "bandwidth":
            exchange.count()
            gevent.sleep(len(data) / step.rate)
        elif step.fault == "reset" and step.when == "before-answer":
            exchange.count()
            self.close(reset=True)
            return None
        elif step.fault == "reset" and step.when == "mid-answer":
            exchange.count()
            _send_quietly(self.client, data[:max(1, len(data) // 2)])
            self.close(reset=True)
            return None
        elif step.fault == "truncate":
            allowed = int(step.after or 0) - exchange.answered
            if allowed < len(data):
                exchange.count()
                _send_quietly(self.client, data[:max(allowed, 0)])
                self.close()
                return None
        return None if self.closed else data

    def _truncated(self, exchange: _Exchange) -> bool:
        fault = exchange.fault
        return fault is not None and fault.step.fault == "truncate" and exchange.answered >= int(fault.step.after or 0)

    # --- the rest ------------------------------------------------------------------------

    def _cut_when_idle(self, exchange: _Exchange) -> None:
        """cut-slow: close the connection once the request waited `after` with no byte moving either way."""
        assert exchange.fault is not None and exchange.fault.step.after is not None
        after = exchange.fault.step.after
        while not self.closed and self.exchange is exchange and not self.answering:
            idle = time.monotonic() - self.moved
            if idle >= after:
                exchange.count()
                self.close()
                return
            gevent.sleep(after - idle)

    def _chunk(self) -> int:
        fault = self.proxy.fault
        if fault is not None and fault.step.fault == "bandwidth":
            return max(1, min(CHUNK, fault.step.rate // 10))
        return CHUNK

    def close(self, *, reset: bool = False) -> None:
        """Close both sides; `reset` sends an RST (SO_LINGER 0) instead of an orderly end."""
        if self.closed:
            return
        self.closed = True
        for sock in (self.client, self.upstream):
            if sock is None:
                continue
            if reset:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
            sock.close()
        self.proxy.links.discard(self)


@dataclass(eq=False)
class FaultProxy:
    """The listener in front of one replica: `url` is where the load sends that replica's rounds."""

    label: str
    upstream_url: str
    port: int = 0
    fault: ActiveFault | None = None
    links: set[_Link] = field(default_factory=set)
    _listener: socket.socket | None = None
    _accepting: gevent.Greenlet | None = None
    _handlers: Group = field(default_factory=Group)

    def __post_init__(self) -> None:
        parts = urlsplit(self.upstream_url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"network faults need plain http replica URLs; {self.upstream_url} is not one")
        self.upstream = (parts.hostname, parts.port or 80)

    @property
    def url(self) -> str:
        parts = urlsplit(self.upstream_url)
        return urlunsplit(("http", f"127.0.0.1:{self.port}", parts.path, parts.query, ""))

    def listen(self) -> None:
        """Bind (a free port the first time, the same one after `down`) and accept in a greenlet."""
        listener = gevent.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(512)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._accepting = gevent.spawn(self._accept, listener)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            client, _ = listener.accept()
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(self, client)
            self.links.add(link)
            self._handlers.spawn(link.serve)

    def stop_listening(self) -> None:
        if self._accepting is not None:
            self._accepting.kill()
            self._accepting = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def set_fault(self, fault: ActiveFault) -> None:
        self.fault = fault
        if fault.step.fault == "down":  # refused from now on; what was open is closed, as a dead port's would be
            self.stop_listening()
            for link in list(self.links):
                fault.hit += 1
                link.close(reset=True)

    def clear_fault(self) -> None:
        fault, self.fault = self.fault, None
        if fault is not None and fault.step.fault == "down":
            self.listen()

    def close(self) -> None:
        """No listener, no connection, no greenlet left."""
        self.fault = None
        self.stop_listening()
        for link in list(self.links):
            link.close()
        self._handlers.kill(block=True, timeout=5.0)


class FaultProxies:
    """One `FaultProxy` per replica, in the order of the target's replicas."""

    def __init__(self, urls: list[str], labels: list[str], seed: int) -> None:
        self.proxies = [FaultProxy(label, url) for url, label in zip(urls, labels, strict=True)]
        self.seed = seed

    @property
    def urls(self) -> list[str]:
        return [proxy.url for proxy in self.proxies]

    def start(self) -> None:
        try:
            for proxy in self.proxies:
                proxy.listen()
        except BaseException:
            self.close()
            raise

    def describe(self) -> str:
        return ", ".join(f"{proxy.label} {proxy.url} -> {proxy.upstream_url}" for proxy in self.proxies)

    def set_fault(self, step: NetworkAction, replicas: list[int], draw_stream: random.Random) -> list[ActiveFault]:
        """Put the fault on the replicas given (0-based); each gets its own seeded stream of draws."""
        faults = []
        for index in replicas:
            fault = ActiveFault(step, random.Random(draw_stream.getrandbits(64)))
            self.proxies[index].set_fault(fault)
            faults.append(fault)
        return faults

    def clear_fault(self, replicas: list[int]) -> None:
        for index in replicas:
            self.proxies[index].clear_fault()

    def close(self) -> None:
        for proxy in self.proxies:
            proxy.close()


def _recv(sock: socket.socket | None, size: int) -> bytes:
    if sock is None:
        return b""
    try:
        return sock.recv(size)
    except OSError:
        return b""


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:
        pass


def _shutdown_write(sock: socket.socket | None) -> None:
    """Pass on an orderly end of one direction (the other may still carry an answer)."""
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass
