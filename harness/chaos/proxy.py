"""The harness's own fault proxy: one listener per replica on 127.0.0.1, forwarding bytes to the replica.

When a scenario has a `network` chaos step, the load talks to these proxies instead of
the replicas, and the step sets a fault on one proxy (or all) for its duration. Each
proxy is greenlets in the load process's own gevent loop, no process of its own: when
the harness ends, even by SIGKILL, the kernel closes its sockets and no port stays open.

The proxy forwards TCP bytes and knows HTTP only as far as it must: an *exchange* is
one request and its answer, and a new one begins when the client sends after the
server has answered (or first, on a fresh connection). A fault acts by time, on the
bytes that move while it is on: it meets an exchange when a byte of it moves in its
window (a stream begun before it included), draws once, from the scenario's seed,
whether it hits it (`toxicity`), and stops acting when it ends, releasing what it
held. It counts each exchange it met once, and once more each one it acted on, so the
chaos record can say what it did. With no fault set, a chunk costs one attribute
check each way.

What each kind of fault does is its own `_Behaviour` (`_BEHAVIOURS`, one per
`NetworkAction.fault`): hooks for a connection opening, the fault opening, a request chunk and
an answer chunk, so the proxy's pumps never ask which fault is on.

`down` keeps the listening socket bound to its port and only stops it listening, so
connections are refused (as by a dead port) and no other socket, not even an
outgoing connection's source port, can take the port before `up` listens again.
"""

from __future__ import annotations

import random
import socket
import struct
import time
import typing
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import gevent
import gevent.socket
from gevent.event import Event
from gevent.pool import Group

from harness.config.chaos import NetworkAction, NetworkFaultKind

CHUNK = 65536
"""Bytes read at a time (a bandwidth limit reads less, so its pace is even)."""
CONNECT_TIMEOUT = 10.0
"""Seconds the proxy gives a replica to accept its connection: a dead one is a reset, not a hang."""


@dataclass(eq=False)
class ActiveFault:
    """One network step on one proxy while it lasts: what it is, its seeded draws and its counts."""

    step: NetworkAction
    rng: random.Random
    exchanges: int = 0
    """Exchanges the fault met: under way (a byte moving, a request waiting) while it was on, each once."""
    hit: int = 0
    """Of those, the ones it acted on (delayed, slowed, reset, swallowed, held, cut; for down, connections closed)."""
    ended: Event = field(default_factory=Event)
    """Set when the fault is off: whatever it holds moves on at once."""
    does: _Behaviour = field(init=False)
    """What its kind of fault does to connections and bytes."""

    def __post_init__(self) -> None:
        self.does = _BEHAVIOURS[self.step.fault]

    def draw(self) -> bool:
        """Whether what the fault meets now is hit: one seeded draw."""
        return self.step.toxicity >= 1.0 or self.rng.random() < self.step.toxicity

    def meet(self) -> bool:
        """Count an exchange the fault meets for the first time, and draw whether it hits it."""
        self.exchanges += 1
        return self.draw()

    def delay(self) -> float:
        return self.step.delay + (self.rng.uniform(0.0, self.step.jitter) if self.step.jitter else 0.0)


@dataclass(eq=False)
class _Meeting:
    """What one fault decided about one exchange, the first time it saw a byte of it (or its wait)."""

    fault: ActiveFault
    hit: bool
    counted: bool = False
    delayed: set[str] = field(default_factory=set)
    """The directions a latency fault has delayed ("request", "answer"): once each."""
    watched: bool = False
    """A cut-slow fault watches the exchange's idle time."""


@dataclass(eq=False)
class _Exchange:
    answered: int = 0
    """Bytes of the answer forwarded so far."""
    meeting: _Meeting | None = None
    """The last fault that met this exchange."""

    def under(self, fault: ActiveFault) -> _Meeting | None:
        """The fault on now, if it hits this exchange; the first time it sees the exchange, it meets it."""
        if self.meeting is None or self.meeting.fault is not fault:
            self.meeting = _Meeting(fault, fault.meet())
        return self.meeting if self.meeting.hit else None

    def count(self) -> None:
        """The fault acted on this exchange: counted once however often it acts."""
        meeting = self.meeting
        if meeting is not None and not meeting.counted:
            meeting.counted = True
            meeting.fault.hit += 1


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
        self.gone = Event()
        """Set when the link is closed: nothing it holds is waited for any more."""

    def serve(self) -> None:
        fault = self.proxy.fault
        if fault is not None and fault.does.on_connect(self, fault):
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

    def waiting(self) -> bool:
        """A request was sent and no byte of its answer came back yet."""
        return not self.closed and self.exchange is not None and not self.answering

    def fault_opened(self, fault: ActiveFault) -> None:
        """A cut-slow fault meets the requests already waiting when it opens: their idle time counts from now."""
        fault.does.opened(self, fault)

    def _hold(self, fault: ActiveFault, seconds: float | None) -> None:
        """Wait `seconds` (None: while the fault lasts), less if the fault ends or the link closes first."""
        gevent.wait([fault.ended, self.gone], timeout=seconds, count=1)

    # --- client -> replica ---------------------------------------------------------------

    def _to_server(self) -> None:
        while not self.closed:
            data = _recv(self.client, self._chunk())
            if not data:
                _shutdown_write(self.upstream)
                return
            self.moved = time.monotonic()
            if self.answering:
                self.answering = False
                self.exchange = _Exchange()
            fault = self.proxy.fault
            if fault is not None and self.exchange is not None:
                meeting = self.exchange.under(fault)
                if meeting is not None and not self._apply_to_server(self.exchange, meeting, data):
                    continue
            assert self.upstream is not None
            try:
                self.upstream.sendall(data)
            except OSError:
                self.close(reset=True)
                return

    def _apply_to_server(self, exchange: _Exchange, meeting: _Meeting, data: bytes) -> bool:
        """Act on a request chunk; False: it is swallowed, not forwarded."""
        return meeting.fault.does.to_server(self, exchange, meeting, data) and not self.closed

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
            exchange, fault = self.exchange, self.proxy.fault
            if fault is not None and exchange is not None and (meeting := exchange.under(fault)) is not None:
                forwarded = self._apply_to_client(exchange, meeting, data, first)
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

    def _apply_to_client(self, exchange: _Exchange, meeting: _Meeting, data: bytes, first: bool) -> bytes | None:
        """Act on an answer chunk: the bytes to forward, or None when the connection was ended instead."""
        forwarded = meeting.fault.does.to_client(self, exchange, meeting, data, first)
        return None if forwarded is None or self.closed else forwarded

    # --- the rest ------------------------------------------------------------------------

    def _watch(self, exchange: _Exchange, meeting: _Meeting) -> None:
        if not meeting.watched:
            meeting.watched = True
            gevent.spawn(self._cut_when_idle, exchange, meeting.fault)

    def _cut_when_idle(self, exchange: _Exchange, fault: ActiveFault) -> None:
        """cut-slow: close the connection once the request waited `after` with no byte moving either way.

        Idle time counts from the last byte moved or from when the fault met the request, whichever is later;
        the watch ends with the fault.
        """
        assert fault.step.after is not None
        after, met = fault.step.after, time.monotonic()
        while self.waiting() and self.exchange is exchange and not fault.ended.is_set():
            idle = time.monotonic() - max(self.moved, met)
            if idle >= after:
                exchange.count()
                self.close()
                return
            self._hold(fault, after - idle)

    def _chunk(self) -> int:
        fault = self.proxy.fault
        return CHUNK if fault is None else fault.does.chunk(fault.step)

    def close(self, *, reset: bool = False) -> None:
        """Close both sides; `reset` sends an RST (SO_LINGER 0) instead of an orderly end."""
        if self.closed:
            return
        self.closed = True
        self.gone.set()
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
        """Bind a free port, held for the proxy's life, and accept on it in a greenlet."""
        self._listener = _bound_for_life()
        self.port = self._listener.getsockname()[1]
        self._start_accepting()

    def _start_accepting(self) -> None:
        """Listen (again) on the port held: it is the same one, or the proxy says so and stops."""
        listener = self._listener
        if listener is None or self._accepting is not None:  # closed already, or listening
            return
        listener.listen(512)
        if listener.getsockname()[1] != self.port:  # the kernel let go of the port: never serve elsewhere silently
            raise OSError(f"the proxy for {self.label} lost its port {self.port}")
        self._accepting = gevent.spawn(self._accept, listener)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            client, _ = listener.accept()
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(self, client)
            self.links.add(link)
            self._handlers.spawn(link.serve)

    def _stop_accepting(self) -> None:
        """Refuse connections from now on and keep the port: the listener is bound, just not listening.

        On a system where a listener cannot do that, it goes on accepting and this says so.
        """
        listener = self._listener
        if listener is None:  # closed already: nothing listens
            return
        if self._accepting is not None:
            self._accepting.kill()
            self._accepting = None
        try:
            listener.shutdown(socket.SHUT_RDWR)  # Linux: back to a bound, closed socket; the port stays its own
        except OSError:
            pass
        if listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            self._accepting = gevent.spawn(self._accept, listener)
            raise OSError(f"the proxy for {self.label} cannot stop listening and keep its port on this system")

    def set_fault(self, fault: ActiveFault) -> None:
        """Turn `fault` on (ending the one on before it): it acts on every connection from now on."""
        previous = self.fault
        was_down, down = previous is not None and previous.does.refuses, fault.does.refuses
        if down and not was_down:
            self._stop_accepting()  # first: if it cannot be done, nothing has changed
        elif was_down and not down:
            self._start_accepting()
        if previous is not None:
            previous.ended.set()
        self.fault = fault
        if down:  # refused from now on; what was open is closed, as a dead port's would be
            for link in list(self.links):
                fault.hit += 1
                link.close(reset=True)
            return
        for link in list(self.links):
            link.fault_opened(fault)

    def clear_fault(self, fault: ActiveFault) -> None:
        """Turn `fault` off; what it held moves on. A fault already replaced by a later one is just ended."""
        fault.ended.set()
        if self.fault is not fault:
            return
        self.fault = None
        if fault.does.refuses:
            self._start_accepting()

    def close(self) -> None:
        """No listener, no connection, no greenlet left."""
        if self.fault is not None:
            self.fault.ended.set()
        self.fault = None
        if self._accepting is not None:
            self._accepting.kill()
            self._accepting = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for link in list(self.links):
            link.close()
        self._handlers.kill(block=True, timeout=5.0)


def _bound_for_life() -> socket.socket:
    """A listening socket on a free 127.0.0.1 port, bound to it by number so the port outlives a stop.

    Linux releases a port picked by the kernel (bind to 0) when its socket stops listening; a port bound by
    number stays the socket's. So a first socket picks the port and holds it while the listener binds it by
    number (both with SO_REUSEADDR, neither listening yet), then lets go.
    """
    picker = _reusable()
    try:
        picker.bind(("127.0.0.1", 0))
        listener = _reusable()
        try:
            listener.bind(("127.0.0.1", picker.getsockname()[1]))
        except BaseException:
            listener.close()
            raise
    finally:
        picker.close()
    return listener


def _reusable() -> socket.socket:
    sock = gevent.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return sock


class _Behaviour:
    """What one kind of network fault does, hook by hook; each hook's default leaves the bytes alone."""

    refuses = False
    """The proxy stops listening (its port kept) while the fault is on, and closes what is open."""

    def on_connect(self, link: _Link, fault: ActiveFault) -> bool:
        """A connection opens under the fault; True: the fault ended it."""
        return False

    def opened(self, link: _Link, fault: ActiveFault) -> None:
        """The fault opens while `link` is open."""

    def chunk(self, step: NetworkAction) -> int:
        """Bytes read at a time while the fault is on."""
        return CHUNK

    def to_server(self, link: _Link, exchange: _Exchange, meeting: _Meeting, data: bytes) -> bool:
        """Act on a request chunk the fault hits; False: it is swallowed."""
        return True

    def to_client(self, link: _Link, exchange: _Exchange, meeting: _Meeting, data: bytes,
                  first: bool) -> bytes | None:
        """Act on an answer chunk the fault hits: the bytes to forward, or None when the connection was ended."""
        return data


class _Latency(_Behaviour):
    def to_server(self, link: _Link, exchange: _Exchange, meeting: _Meeting, data: bytes) -> bool:
        self._delay(link, exchange, meeting, "request", "to-client")
        return True

    def to_client(self, link: _Link, exchange: _Exchange, meeting: _Meeting, data: bytes,
                  first: bool) -> bytes | None:
        self._delay(link, exchange, meeting, "answer", "to-server")
        return data

    @staticmethod
    def _delay(link: _Link, exchange: _Exchange, meeting: _Meeting, what: str, other_direction: str) -> None:
        """Delay this side of the exchange once, unless the fault delays only the other direction."""
        fault = meeting.fault
        if fault.step.direction != other_direction and what not in meeting.delayed:
            meeting.delayed.add(what)
            exchange.count()
            link._hold(fault, fault.delay())


class _Bandwidth(_Behaviour):
    def chunk(self, step: NetworkAction) -> int:
        return max(1, min(CHUNK, step.rate // 10))

    def to_server(self, link: _Link, exchange: _Exchange, meeting: _Meeting, data: bytes) -> bool:
        exchange.count()
        link._hold(meeting.fault, len(data) / meeting.fault.step.rate)
        return True

    def to_client(self, link: _Link, exchange: _Exchange, meeting: _Meeting, data: bytes,
                  first: bool) -> bytes | None:
        self.to_server(link, exchange, meeting, data)
        return data


class _Reset(_Behaviour):
    def on_connect(self, link: _Link, fault: ActiveFault) -> bool:
        if fault.step.when != "on-connect" or not fault.draw():
            return False
        fault.exchanges += 1  # the connection's first exchange, and its only one; one not hit is met as it moves
        fault.hit += 1
        link.close(reset=True)
        return True

    def to_client(self, link: _Link, exchange: _Exchange, meeting: _Meeting, data: bytes,
                  first: bool) -> bytes | None:
        when = meeting.fault.step.when
        if not (when == "mid-answer" or (when == "before-answer" and first)):
            return data
        exchange.count()
        if when == "mid-answer":
            _send_quietly(link.client, data[:max(1, len(data) // 2)])
        link.close(reset=True)
        return None


class _Blackhole(_Behaviour):
    def to_server(self, link: _Link, exchange: _Exchange, meeting: _Meeting, data: bytes) -> bool:
        exchange.count()
        return False

    def to_client(self, link: _Link, exchange: _Exchange, meeting: _Meeting, data: bytes,
                  first: bool) -> bytes | None:
        exchange.count()  # held, not lost: a stream pauses for the window and goes on after it
        link._hold(meeting.fault, None)
        return data


class _Truncate(_Behaviour):
    def to_client(self, link: _Link, exchange: _Exchange, meeting: _Meeting, data: bytes,
                  first: bool) -> bytes | None:
        allowed = int(meeting.fault.step.after or 0) - exchange.answered
        if allowed > len(data):
            return data
        exchange.count()
        _send_quietly(link.client, data[:max(allowed, 0)])
        link.close()
        return None


class _Down(_Behaviour):
    refuses = True


class _CutSlow(_Behaviour):
    def opened(self, link: _Link, fault: ActiveFault) -> None:
        """It meets the requests already waiting when it opens: their idle time counts from now."""
        if link.waiting():
            assert link.exchange is not None
            meeting = link.exchange.under(fault)
            if meeting is not None:
                link._watch(link.exchange, meeting)

    def to_server(self, link: _Link, exchange: _Exchange, meeting: _Meeting, data: bytes) -> bool:
        link._watch(exchange, meeting)
        return True


_BEHAVIOURS: dict[str, _Behaviour] = {"latency": _Latency(), "bandwidth": _Bandwidth(), "reset": _Reset(),
                                      "blackhole": _Blackhole(), "truncate": _Truncate(), "down": _Down(),
                                      "cut-slow": _CutSlow()}
"""Each kind of fault (`NetworkAction.fault`) and what it does."""

if set(_BEHAVIOURS) != set(typing.get_args(NetworkFaultKind)):
    raise TypeError(f"network faults without a behaviour: {set(typing.get_args(NetworkFaultKind)) - set(_BEHAVIOURS)}")


class FaultProxies:
    """One `FaultProxy` per replica, in the order of the target's replicas."""

    def __init__(self, urls: list[str], labels: list[str]) -> None:
        self.proxies = [FaultProxy(label, url) for url, label in zip(urls, labels, strict=True)]

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
        faults: list[ActiveFault] = []
        try:
            for index in replicas:
                fault = ActiveFault(step, random.Random(draw_stream.getrandbits(64)))
                self.proxies[index].set_fault(fault)
                faults.append(fault)
        except BaseException:  # all or none: a step that fails to start leaves no fault behind
            self.clear_fault(replicas[:len(faults)], faults)
            raise
        return faults

    def clear_fault(self, replicas: list[int], faults: list[ActiveFault]) -> None:
        """Turn off the faults `set_fault` put on these replicas (a later fault on one stays on)."""
        for index, fault in zip(replicas, faults, strict=True):
            self.proxies[index].clear_fault(fault)

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
