"""Network faults between the harness and each replica, through the harness's own proxy.

Faults run against the real shop on the process backend, as a user runs them; a fault
hits only the replica it names and only inside its window, which the rounds the journal
holds show by their outcomes. What the shop answers too fast to show (an idle timeout,
the toxicity share) is tested on the proxy with a real slow HTTP server in this process.
"""

from __future__ import annotations

import errno
import re
import secrets
import socket
import struct
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import gevent
import gevent.server
import gevent.socket
import pytest
from gevent.queue import Queue

from harness.chaos.proxy import ActiveFault, FaultProxies
from harness.config.chaos import NetworkAction
from harness.config.scenario import ScenarioError, load_scenario
from harness.journal.writer import read_journal
from harness.load.seeding import stream
from tests.harness_run import run_harness
from tests.servers import start_server
from tests.test_lifeline import kill_and_count_survivors, start, wait_for_line

SCENARIO_HEAD = """
name = "network-faults"
seed = 7
duration = "{duration}"
time_scale = 60
[target]
kind = "embedded"
replicas = 2
store = "sqlite"
ttl = "10m"
[load]
model = "open"
arrival_rate = 6
routing = "round-robin"
timeout = "1s"
[[flows]]
kind = "refund"
[leads]
think = {{ dist = "constant", value = "6s" }}
"""

FAULTS = [  # (its keys, the outcome every round it hits gets on the named replica)
    ('fault = "latency"\ndelay = "300ms"', None),
    ('fault = "reset"\nwhen = "before-answer"', "answer_lost"),
    ('fault = "reset"\nwhen = "mid-answer"', "answer_lost"),
    ('fault = "truncate"\nafter = 20', "answer_lost"),
    ('fault = "blackhole"', "timeout"),
    ('fault = "down"', None),
    ('fault = "bandwidth"\nrate = 2000', None),
]
WINDOW = 1.2
GAP = 1.3  # longer than the client's timeout: a blackholed round times out before the next fault


def _scenario(tmp_path: Path) -> Path:
    steps = "".join(f'\n[[chaos]]\naction = "network"\nat = {1 + i * (WINDOW + GAP):g}\nduration = {WINDOW}\n'
                    f'replica = 2\n{keys}\n' for i, (keys, _) in enumerate(FAULTS))
    path = tmp_path / "faults.toml"
    path.write_text(SCENARIO_HEAD.format(duration=f"{2 + len(FAULTS) * (WINDOW + GAP):g}s") + steps)
    return path


def test_each_fault_hits_only_the_named_replica_inside_its_window(tmp_path):
    finished = run_harness(_scenario(tmp_path), tmp_path / "results")
    assert finished.code == 0, finished.output
    records = finished.journal()
    starts = [r for r in records if r["type"] == "chaos" and r["phase"] == "start" and r["action"] == "network"]
    ends = [r for r in records if r["type"] == "chaos" and r["phase"] == "end" and r["action"] == "network"]
    assert [e["ok"] for e in ends] == [True] * len(FAULTS)
    windows = [(s["t"], e["t"]) for s, e in zip(starts, ends, strict=True)]
    rounds = [r for r in records if r["type"] == "round"]

    def inside(r: dict, window: tuple[float, float], margin: float = 0.05) -> bool:
        return window[0] + margin <= r["sent"] <= window[1] - margin

    for (keys, outcome), (start_record, end), window in zip(FAULTS, zip(starts, ends, strict=True), windows,
                                                            strict=True):
        assert end["target"] == "r2" and start_record["detail"]["fault"] in keys
        assert set(end["detail"]["hit"]) == {"r2"}, end["detail"]  # counted on the named replica only
        assert end["detail"]["hit"]["r2"] >= 1, (keys, end["detail"])
        hit = [r for r in rounds if r["replica"] == "r2" and inside(r, window)]
        if outcome is not None:  # the fault acts on bytes as the proxy (a greenlet of the load process) sees them:
            # on a starved machine a round sent just inside the window may reach it after the window closed, and
            # pass; so every round of the window that failed failed the fault's way, and at least one did
            failed_here = {r["outcome"] for r in hit if r["outcome"] not in ("complete", "input_required")}
            assert failed_here == {outcome}, (keys, hit)
        if "latency" in keys:  # 300 ms each way, over what the server took, as long as the window lasts over it
            assert hit and all(r["latency"] >= min(0.6, window[1] - r["sent"]) - 0.05 for r in hit), hit
        if "down" in keys:  # refused: every round went to the other replica
            assert not hit and any(inside(r, window) for r in rounds), keys
    failed = [r for r in rounds if r["outcome"] not in ("complete", "input_required")]
    assert failed
    for r in failed:  # nothing failed outside a window (plus the client's timeout), nor on the other replica
        assert r["replica"] == "r2" and any(_under_way(r, w) for w in windows), r
    assert {r["replica"] for r in rounds if r["outcome"] == "complete"} == {"r1", "r2"}
    reported = [action for action in finished.summary["chaos"] if action["action"] == "network"]
    for (keys, outcome), action, (start_t, end_t) in zip(FAULTS, reported, windows, strict=True):
        sent_in = Counter(r["outcome"] for r in rounds if r["replica"] == "r2" and start_t <= r["sent"] <= end_t)
        assert action["rounds"] == ({"r2": dict(sent_in)} if sent_in else {}), (keys, action)
        if outcome is not None:  # the fault's own outcome is among the rounds it is said to have hit
            assert action["rounds"]["r2"][outcome] >= 1, (keys, action)
    assert "rounds sent into it: r2 answer_lost" in finished.output


def test_a_run_killed_with_sigkill_during_a_fault_leaves_no_listening_port(tmp_path):
    scenario = tmp_path / "killed.toml"
    scenario.write_text(SCENARIO_HEAD.format(duration="60s")
                        + '\n[[chaos]]\naction = "network"\nat = "1s"\nduration = "50s"\nfault = "blackhole"\n')
    output = tmp_path / "output.txt"
    process = start(["run", str(scenario), "--results", str(tmp_path / "results")], output)
    try:
        wait_for_line(process, output, "network faults through proxies", timeout=60)
        ports = [int(port) for port in re.findall(r"r\d+ http://127\.0\.0\.1:(\d+)/mcp ->", output.read_text())]
        assert len(ports) == 2, output.read_text()
        assert all(_listening(port) for port in ports)
        deadline = time.monotonic() + 60
        while not (_fault_started(tmp_path / "results") and any(_connected(port) for port in ports)):
            assert process.poll() is None and time.monotonic() < deadline, output.read_text()
            time.sleep(0.1)  # until the blackhole is on, holding a connection of the load open
        assert not kill_and_count_survivors(process, set())
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert not [port for port in ports if _listening(port)], ports


def _under_way(record: dict, window: tuple[float, float], margin: float = 0.05) -> bool:
    """Whether a round was under way at some moment of a fault's window: a fault acts on the bytes moving in it,
    so a round sent just before it can be hit on its way back (`t` is when the round's answer was read)."""
    return record["sent"] - margin <= window[1] and record["t"] + margin >= window[0]


def _fault_started(results: Path) -> bool:
    """Whether the run's journal says its network fault started."""
    return any(record["type"] == "chaos" and record["phase"] == "start" and record["action"] == "network"
               for journal in results.glob("*/journal.jsonl") for record in read_journal(journal))


def _connected(port: int) -> bool:
    """Whether a connection to 127.0.0.1:`port` is open now (/proc/net/tcp, state 01, established)."""
    wanted = f"0100007F:{port:04X}"
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return any(line.split()[1] == wanted and line.split()[3] == "01" for line in lines)


def _listening(port: int) -> bool:
    """Whether anything on this machine listens on 127.0.0.1:`port` (/proc/net/tcp, state 0A)."""
    wanted = f"0100007F:{port:04X}"
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return any(line.split()[1] == wanted and line.split()[3] == "0A" for line in lines)


# --- the scenario's keys ---------------------------------------------------------------------


def _load(tmp_path: Path, chaos: str) -> None:
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO_HEAD.format(duration="10s") + '\n[[chaos]]\naction = "network"\nat = 1\n'
                    'duration = 1\n' + chaos)
    load_scenario(path)


def test_a_fault_refuses_another_faults_keys_and_names_its_own(tmp_path):
    with pytest.raises(ScenarioError, match=r"fault 'latency' takes no rate \(its keys: delay, direction, jitter\)"):
        _load(tmp_path, 'fault = "latency"\nrate = 100\n')
    with pytest.raises(ScenarioError, match="needs `after`"):
        _load(tmp_path, 'fault = "cut-slow"\n')
    with pytest.raises(ScenarioError, match="toxicity must be 1"):
        _load(tmp_path, 'fault = "down"\ntoxicity = 0.5\n')
    with pytest.raises(ScenarioError, match="replica 3"):
        _load(tmp_path, 'fault = "blackhole"\nreplica = 3\n')
    _load(tmp_path, 'fault = "cut-slow"\nafter = "250ms"\n')


# --- the proxy, against a real slow server ---------------------------------------------------


def _slow_server(answer_after: float) -> gevent.server.StreamServer:
    """An HTTP server on 127.0.0.1 that answers each request after `answer_after` seconds."""

    def handle(sock: socket.socket, _: object) -> None:
        try:
            while sock.recv(65536):
                gevent.sleep(answer_after)
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        except ConnectionResetError:  # a fault reset the proxy's side
            pass

    server = gevent.server.StreamServer(("127.0.0.1", 0), handle)
    server.start()
    return server


REQUEST = b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"


def _address(url: str) -> tuple[str, int]:
    host, port = url.split("/")[2].split(":")
    return host, int(port)


def _exchange(url: str, timeout: float = 5.0) -> bytes:
    """One request on a fresh connection: the answer, or what came of it before a reset."""
    with gevent.socket.create_connection(_address(url), timeout=timeout) as sock:
        return _ask(sock)


def _ask(sock: socket.socket) -> bytes:
    """One request on an open connection (a reset may come before the request is written, or after)."""
    answer = b""
    try:
        sock.sendall(REQUEST)
        while chunk := sock.recv(65536):
            answer += chunk
            if answer.endswith(b"ok"):
                break
    except (ConnectionResetError, BrokenPipeError):
        pass
    return answer


def _proxies(server: gevent.server.StreamServer) -> FaultProxies:
    proxies = FaultProxies([f"http://127.0.0.1:{server.server_port}/mcp"], ["r1"])
    proxies.start()
    return proxies


def test_cut_slow_closes_a_request_waiting_longer_than_its_idle_timeout():
    server = _slow_server(0.5)
    proxies = _proxies(server)
    try:
        step = NetworkAction(action="network", at=0, duration=10, fault="cut-slow", after=0.2)
        (fault,) = proxies.set_fault(step, [0], stream(7, "test"))
        assert _exchange(proxies.urls[0]) == b""  # cut before the answer began
        proxies.clear_fault([0], [fault])
        assert _exchange(proxies.urls[0]).endswith(b"ok")
        assert (fault.exchanges, fault.hit) == (1, 1)
    finally:
        proxies.close()
        server.stop()


def test_toxicity_hits_the_seeded_share_of_exchanges():
    server = _slow_server(0.0)
    proxies = _proxies(server)
    try:
        step = NetworkAction(action="network", at=0, duration=10, fault="reset", when="before-answer",
                             toxicity=0.3)
        (fault,) = proxies.set_fault(step, [0], stream(7, "test"))
        answers = [_exchange(proxies.urls[0]) for _ in range(200)]
        lost = sum(1 for answer in answers if not answer)
        assert fault.exchanges == 200 and fault.hit == lost
        assert 30 <= lost <= 90  # 60 expected
    finally:
        proxies.close()
        server.stop()
    assert not _listening(int(proxies.urls[0].split(":")[2].split("/")[0]))


def test_reset_on_connect_counts_each_exchange_once():
    """A fresh connection the fault resets is one exchange, hit; one it spares, and each exchange on a connection
    opened before it, is one exchange met as it moves, never hit."""
    server = _slow_server(0.0)
    proxies = _proxies(server)
    kept = gevent.socket.create_connection(_address(proxies.urls[0]), timeout=5.0)
    try:
        assert _ask(kept).endswith(b"ok")
        step = NetworkAction(action="network", at=0, duration=10, fault="reset", when="on-connect", toxicity=0.5)
        (fault,) = proxies.set_fault(step, [0], stream(7, "test"))
        fresh = [_exchange(proxies.urls[0]) for _ in range(40)]
        assert all(_ask(kept).endswith(b"ok") for _ in range(3))  # a connection already open is not reset
        reset = sum(1 for answer in fresh if not answer)
        assert 0 < reset < 40
        assert all(answer.endswith(b"ok") for answer in fresh if answer)
        assert (fault.exchanges, fault.hit) == (40 + 3, reset)
    finally:
        kept.close()
        proxies.close()
        server.stop()


class _Scripted:
    """A server on 127.0.0.1 that sends each part of its answer only when the test hands it over, as a stream
    (a 2025-era SSE answer) does: the test decides where in the exchange a fault opens or ends."""

    def __init__(self) -> None:
        self.requests: Queue[bytes] = Queue()
        self.parts: Queue[bytes] = Queue()
        self.server = gevent.server.StreamServer(("127.0.0.1", 0), self._handle)
        self.server.start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/mcp"

    def _handle(self, sock: socket.socket, _: object) -> None:
        self.requests.put(sock.recv(65536))
        while part := self.parts.get():
            sock.sendall(part)

    def stop(self) -> None:
        self.parts.put(b"")
        self.server.stop()


@dataclass
class _Stream:
    """A connection through the proxy to a scripted server, and the fault step the test opens when it says."""

    server: _Scripted
    proxies: FaultProxies
    client: socket.socket
    step: NetworkAction

    def request(self) -> None:
        self.client.sendall(REQUEST)
        self.server.requests.get(timeout=5.0)

    def open(self) -> ActiveFault:
        (fault,) = self.proxies.set_fault(self.step, [0], stream(7, "test"))
        return fault

    def answer(self, part: bytes, *, arrives: bytes | None = None) -> None:
        """The server sends `part`; the client gets `arrives` (default: all of it) and no more is waited for."""
        self.server.parts.put(part)
        expected = part if arrives is None else arrives
        assert _receive(self.client, len(part)) == expected


@contextmanager
def _streaming(**fault_keys: object) -> Iterator[_Stream]:
    server = _Scripted()
    proxies = FaultProxies([server.url], ["r1"])
    proxies.start()
    client = gevent.socket.create_connection(_address(proxies.urls[0]), timeout=5.0)
    try:
        yield _Stream(server, proxies, client, NetworkAction(action="network", at=0, duration=10, **fault_keys))
    finally:
        client.close()
        proxies.close()
        server.stop()


def _receive(sock: socket.socket, size: int) -> bytes:
    """Exactly `size` bytes, or fewer when the connection ends; a reset ends it too."""
    data = b""
    try:
        while len(data) < size and (chunk := sock.recv(size - len(data))):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def test_a_fault_opening_mid_answer_acts_on_the_stream_already_under_way():
    with _streaming(fault="reset", when="mid-answer") as link:
        link.request()
        link.answer(b"HTTP/1.1 200 OK\r\n\r\nevent: 1\n")  # the answer began before the fault
        fault = link.open()
        link.answer(b"event: 2\n", arrives=b"even")  # half of the next part, then the reset
        assert (fault.exchanges, fault.hit) == (1, 1)


def test_a_fault_that_ends_stops_acting_on_the_exchange_it_met():
    """An exchange begun under `truncate` whose answer goes on after the window comes through whole."""
    with _streaming(fault="truncate", after=30) as link:
        fault = link.open()
        link.request()  # the exchange begins inside the window
        link.answer(b"HTTP/1.1 200 OK\r\n\r\n")
        link.proxies.clear_fault([0], [fault])
        link.answer(b"event: 1, longer than the thirty bytes the fault allowed\n")
        assert (fault.exchanges, fault.hit) == (1, 0)


def test_a_blackhole_pauses_a_stream_under_way_and_it_goes_on_whole_when_the_fault_ends():
    with _streaming(fault="blackhole") as link:
        link.request()
        link.answer(b"event: 1\n")
        fault = link.open()
        link.server.parts.put(b"event: 2\n")
        _until(lambda: fault.hit == 1)  # the proxy holds the part: it counts it before it waits
        link.client.settimeout(0.0)
        with pytest.raises(BlockingIOError):
            link.client.recv(1)
        link.client.settimeout(5.0)
        link.proxies.clear_fault([0], [fault])
        assert _receive(link.client, 9) == b"event: 2\n"  # released when the fault ends: nothing lost
        link.answer(b"event: 3\n")
        assert (fault.exchanges, fault.hit) == (1, 1)


def test_cut_slow_opening_while_a_request_waits_cuts_it():
    with _streaming(fault="cut-slow", after=0.2) as link:
        link.request()  # the request waits; the server will not answer
        fault = link.open()
        assert _receive(link.client, 1) == b""  # closed by the proxy, not by the client's own timeout
        assert (fault.exchanges, fault.hit) == (1, 1)


def _until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Let the proxy's greenlets run until `condition` holds (`timeout` only bounds a failure)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the proxy never got there"
        gevent.sleep(0.005)


# --- down keeps the port ------------------------------------------------------------------------

IP_LOCAL_PORT_RANGE = 51
"""Linux 6.3+: the range a socket's kernel-chosen source port is drawn from (low | high << 16)."""


def _outgoing_from(port: int, destination: tuple[str, int]) -> socket.socket | None:
    """A connection whose source port the kernel must draw from `port` alone, as any outgoing connection may get
    it; None when the kernel has no per-socket range (the bind check alone then says the port is held)."""
    sock = gevent.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.IPPROTO_IP, IP_LOCAL_PORT_RANGE, struct.pack("I", port | port << 16))
    except OSError:
        sock.close()
        return None
    try:
        sock.connect(destination)
    except OSError:
        sock.close()
        raise
    return sock


def _held(port: int, destination: tuple[str, int]) -> bool:
    """Whether a socket on this machine still holds `port`: neither a bind nor an outgoing connection gets it."""
    probe = socket.socket()
    try:
        probe.bind(("127.0.0.1", port))
        return False
    except OSError as exc:
        assert exc.errno == errno.EADDRINUSE, exc
    finally:
        probe.close()
    try:
        taker = _outgoing_from(port, destination)
    except OSError as exc:
        assert exc.errno == errno.EADDRNOTAVAIL, exc
        return True
    if taker is None:
        return True
    taker.close()
    return False


def test_down_refuses_connections_on_a_port_it_never_lets_go_and_up_serves_again_on_it():
    """The old `down` closed the listener and bound the port again at `up`: in between, the kernel could give the
    port to an outgoing connection as its source port, and the proxy never listened again. Shown first on a plain
    listener (so the check can see a port let go), then: the proxy's port stays held through every `down`."""
    server = _slow_server(0.0)
    elsewhere = ("127.0.0.1", server.server_port)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed.listen(1)
    old_port = closed.getsockname()[1]
    closed.close()
    assert not _held(old_port, elsewhere)

    proxies = _proxies(server)
    url, port = proxies.urls[0], _address(proxies.urls[0])[1]
    open_before = gevent.socket.create_connection(("127.0.0.1", port), timeout=5.0)
    try:
        assert _ask(open_before).endswith(b"ok")
        step = NetworkAction(action="network", at=0, duration=10, fault="down")
        for cycle in range(20):
            (fault,) = proxies.set_fault(step, [0], stream(7, "down", cycle))
            with pytest.raises(ConnectionRefusedError):
                gevent.socket.create_connection(("127.0.0.1", port), timeout=5.0)
            assert _held(port, elsewhere), cycle
            proxies.clear_fault([0], [fault])
            assert proxies.urls == [url] and _exchange(url).endswith(b"ok"), cycle
            if cycle == 0:  # the one connection open when the first down came: reset
                assert fault.hit == 1
        assert _receive(open_before, 1) == b""
    finally:
        open_before.close()
        proxies.close()
        server.stop()
    assert not _listening(port)  # closed at the end: nothing left behind


def test_overlapping_faults_on_one_replica_each_end_only_themselves():
    """A step on every replica opening inside a step on one: the first one's end leaves the later one on, and the
    port serves again when the last one ends."""
    server = _slow_server(0.0)
    proxies = _proxies(server)
    url = proxies.urls[0]
    try:
        latency = NetworkAction(action="network", at=0, duration=10, fault="latency", delay=0.0)
        down = NetworkAction(action="network", at=0, duration=10, fault="down")
        (first,) = proxies.set_fault(latency, [0], stream(7, "first"))
        (later,) = proxies.set_fault(down, [0], stream(7, "later"))
        assert first.ended.is_set()  # replaced: it acts no more
        proxies.clear_fault([0], [first])
        with pytest.raises(ConnectionRefusedError):
            gevent.socket.create_connection(_address(url), timeout=5.0)
        proxies.clear_fault([0], [later])
        assert _exchange(url).endswith(b"ok")
    finally:
        proxies.close()
        server.stop()


# --- the on-call catalogue's network scenarios, looked at as an on-call engineer would ---------

ON_CALL = Path(__file__).resolve().parent.parent / "scenarios" / "on-call"


def _rounds_by_flow(records: list[dict]) -> dict[str, list[dict]]:
    flows: dict[str, list[dict]] = {}
    for record in records:
        if record["type"] == "round":
            flows.setdefault(record["flow_id"], []).append(record)
    return flows


def _invariant(records: list[dict], name: str) -> dict:
    (record,) = [r for r in records if r["type"] == "invariant" and r["invariant"] == name]
    return record


@pytest.mark.parametrize("once_only", ["shared", "memory"])
def test_a_retry_after_a_lost_answer_is_refused_as_a_replay_and_releases_nothing_twice(once_only, tmp_path):
    """With the once-only record shared, the replay is refused by it; kept in each replica's memory, the retry on
    the other replica passes it and the shop's ledger (a compare-and-set) refuses the second release."""
    scenario = tmp_path / "lost-answer-retry.toml"
    scenario.write_text((ON_CALL / "lost-answer-retry.toml").read_text() + "".join(
        f'\n[[target.overrides]]\nreplica = {n}\nanswers_store = "{once_only}"\n' for n in (1, 2)))
    finished = run_harness(scenario, tmp_path / "results", "--reproduce")
    assert finished.code == 0, finished.output
    records = finished.journal()
    refused = "was already confirmed" if once_only == "shared" else "is no longer held"
    replays = [rounds[i + 1] for rounds in _rounds_by_flow(records).values() for i in range(len(rounds) - 1)
               if rounds[i]["tool"] == "issue_refund" and rounds[i]["round"] >= 2
               and rounds[i]["outcome"] == "answer_lost" and rounds[i + 1]["outcome"] == "tool_error"]
    assert replays and all(refused in replay["error"] and replay["replica"] == "r1" for replay in replays), replays
    release = _invariant(records, "no_double_release")
    assert release["checked"] > 0 and release["violations"] == 0


def test_with_no_once_only_record_a_retried_lost_answer_releases_the_refund_twice_and_the_run_names_it(tmp_path):
    """The once-only record kept in each replica's memory and the API's 409 turned off: nothing stops the retry
    on the other replica, so the refund goes out twice; the ledger invariant fails the run and names the refund."""
    scenario = tmp_path / "no-once-only.toml"
    scenario.write_text((ON_CALL / "lost-answer-retry.toml").read_text().replace(
        "[target]\n", "[target]\nrelease_guard = false\n") + "".join(
        f'\n[[target.overrides]]\nreplica = {n}\nanswers_store = "memory"\n' for n in (1, 2)))
    finished = run_harness(scenario, tmp_path / "results")
    assert finished.code == 1, finished.output
    release = _invariant(finished.journal(), "no_double_release")
    assert release["violations"] > 0
    refund = re.search(r"R-\w+", release["detail"][0])
    assert refund and "released 2 times" in release["detail"][0], release
    assert refund.group(0) in finished.output and "no_double_release" in finished.output


def test_abort_on_violation_stops_the_run_at_the_first_refund_released_twice(tmp_path):
    """The same shop without its release guard, and `abort_on_violation`: the run reads the shop's ledger while
    the load goes, and stops itself once a refund went out twice, long before the minute it was scheduled for:
    exit 1, status aborted with the reason, every flow started has its end, and the invariant names the refund."""
    text = (ON_CALL / "lost-answer-retry.toml").read_text()
    assert 'duration = "8s"\ntime_scale = 60\n' in text
    scenario = tmp_path / "abort.toml"
    scenario.write_text(text.replace('duration = "8s"\ntime_scale = 60\n',
                                     'duration = "60s"\ntime_scale = 60\nabort_on_violation = true\n').replace(
        "[target]\n", "[target]\nrelease_guard = false\n") + "".join(
        f'\n[[target.overrides]]\nreplica = {n}\nanswers_store = "memory"\n' for n in (1, 2)))
    finished = run_harness(scenario, tmp_path / "results")
    assert finished.code == 1, finished.output
    summary = finished.summary
    assert summary["status"] == "aborted", summary
    assert summary["reason"] == "aborted: a refund was released or paid twice", summary["reason"]
    assert "aborted: a refund was released or paid twice" in finished.output
    records = finished.journal()
    (end,) = [r for r in records if r["type"] == "run" and r["event"] == "end"]
    assert end["status"] == "aborted", end
    assert sorted(r["flow_id"] for r in records if r["type"] == "start") == \
        sorted(r["flow_id"] for r in records if r["type"] == "flow")
    release = _invariant(records, "no_double_release")
    assert release["violations"] > 0 and "released 2 times" in release["detail"][0], release


def test_a_reset_after_the_question_loses_the_state_only_on_the_named_replica_in_the_window(tmp_path):
    finished = run_harness(ON_CALL / "reset-after-question.toml", tmp_path, "--reproduce")
    assert finished.code == 0, finished.output
    records = finished.journal()
    start, end = [r for r in records if r["type"] == "chaos" and r["action"] == "network"]
    lost = [r for r in records if r["type"] == "round" and r["outcome"] == "answer_lost"]
    assert lost and {r["replica"] for r in lost} == {"r2"}
    assert all(_under_way(r, (start["t"], end["t"])) for r in lost)
    asked = [r for r in lost if r["tool"] == "issue_refund" and r["round"] == 1]  # the question's answer
    assert asked, "some answers carrying a question must be lost"
    assert end["detail"]["hit"]["r2"] == len(lost)


def test_an_idle_timeout_shorter_than_a_leads_round_cuts_no_mrtr_round(tmp_path):
    finished = run_harness(ON_CALL / "balancer-timeout.toml", tmp_path)
    assert finished.code == 0, finished.output
    (end,) = [r for r in finished.journal() if r["type"] == "chaos" and r["action"] == "network"
              and r["phase"] == "end"]
    assert end["detail"]["after"] < 2.0  # the leads think 2 s
    assert all(n > 0 for n in end["detail"]["exchanges"].values()), end["detail"]
    assert end["detail"]["hit"] == {"r1": 0, "r2": 0}


def test_latency_on_one_replica_makes_states_expire_there_only(tmp_path):
    finished = run_harness(ON_CALL / "latency-expiry.toml", tmp_path, "--reproduce")
    assert finished.code == 0, finished.output
    expired = finished.summary["rejections"]["by_reason"]["expired"]
    assert expired.get("r2", 0) > 0 and not expired.get("r1"), expired


EXTERNAL = """
name = "faults-outside"
seed = 11
duration = "6s"
time_scale = 60
grace = "5s"
[target]
kind = "external"
urls = {urls}
[load]
arrival_rate = 6
routing = "round-robin"
timeout = "1s"
[[flows]]
kind = "call"
tool = "plan_bed"
arguments = {{ bed_id = "B-1" }}
[leads]
think = {{ dist = "constant", value = "6s" }}
[[chaos]]
action = "network"
at = "1s"
duration = "1.5s"
replica = 2
fault = "reset"
when = "before-answer"
[[chaos]]
action = "network"
at = "3.5s"
duration = "1.5s"
replica = 1
fault = "truncate"
after = 20
"""


def test_faults_hit_an_external_server_only_on_the_named_replica_inside_the_window(tmp_path):
    """The proxy sits on the harness's side, so it faults a server the project did not write: the garden, a
    minimal SDK `MCPServer` with MRTR tools, as two external replicas sharing one sealing key."""
    key = secrets.token_hex(32)
    gardens = [start_server("tests.servers.garden", env={"GARDEN_REQUEST_STATE_KEY": key}, wait=False)
               for _ in range(2)]
    try:
        for garden in gardens:
            garden.wait_ready()
        scenario = tmp_path / "outside.toml"
        scenario.write_text(EXTERNAL.format(urls=repr([garden.url for garden in gardens]).replace("'", '"')))
        finished = run_harness(scenario, tmp_path / "results")
    finally:
        for garden in gardens:
            garden.stop()
    assert finished.code in (0, 1), finished.output  # failed flows may fail thresholds; not a harness error
    records = finished.journal()
    starts = [r for r in records if r["type"] == "chaos" and r["action"] == "network" and r["phase"] == "start"]
    ends = [r for r in records if r["type"] == "chaos" and r["action"] == "network" and r["phase"] == "end"]
    lost = [r for r in records if r["type"] == "round" and r["outcome"] == "answer_lost"]
    for start_record, end, replica in zip(starts, ends, ("r2", "r1"), strict=True):
        inside = [r for r in lost if start_record["t"] <= r["sent"] <= end["t"]]
        assert inside and {r["replica"] for r in inside} == {replica}, (replica, inside)
        assert end["detail"]["hit"][replica] >= len(inside)
    assert all(any(_under_way(r, (s["t"], e["t"])) for s, e in zip(starts, ends, strict=True)) for r in lost), lost
    assert any(r["outcome"] == "complete" for r in records if r["type"] == "round")
