"""Network faults between the harness and each replica, through the harness's own proxy.

Faults run against the real shop on the process backend, as a user runs them; a fault
hits only the replica it names and only inside its window, which the rounds the journal
holds show by their outcomes. What the shop answers too fast to show (an idle timeout,
the toxicity share) is tested on the proxy with a real slow HTTP server in this process.
"""

from __future__ import annotations

import re
import secrets
import socket
import time
from collections import Counter
from pathlib import Path

import gevent
import gevent.server
import gevent.socket
import pytest

from harness.chaos.proxy import FaultProxies
from harness.config.chaos import NetworkAction
from harness.config.scenario import ScenarioError, load_scenario
from harness.leads.seeding import stream
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
        if outcome is not None:
            assert hit and {r["outcome"] for r in hit} == {outcome}, (keys, hit)
        if "latency" in keys:  # 300 ms each way, over what the server took
            assert hit and all(r["latency"] >= 0.6 for r in hit), hit
        if "down" in keys:  # refused: every round went to the other replica
            assert not hit and any(inside(r, window) for r in rounds), keys
    failed = [r for r in rounds if r["outcome"] not in ("complete", "input_required")]
    assert failed
    for r in failed:  # nothing failed outside a window (plus the client's timeout), nor on the other replica
        assert r["replica"] == "r2" and any(w[0] - 0.05 <= r["sent"] <= w[1] + 0.05 for w in windows), r
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
        time.sleep(2.0)  # the blackhole is on, holding the load's connections open
        assert not kill_and_count_survivors(process, set())
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert not [port for port in ports if _listening(port)], ports


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
        while sock.recv(65536):
            gevent.sleep(answer_after)
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    server = gevent.server.StreamServer(("127.0.0.1", 0), handle)
    server.start()
    return server


def _exchange(url: str, timeout: float = 5.0) -> bytes:
    host, port = url.split("/")[2].split(":")
    answer = b""
    with gevent.socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        try:
            while chunk := sock.recv(65536):
                answer += chunk
                if answer.endswith(b"ok"):
                    break
        except ConnectionResetError:
            pass
    return answer


def _proxies(server: gevent.server.StreamServer) -> FaultProxies:
    proxies = FaultProxies([f"http://127.0.0.1:{server.server_port}/mcp"], ["r1"], seed=7)
    proxies.start()
    return proxies


def test_cut_slow_closes_a_request_waiting_longer_than_its_idle_timeout():
    server = _slow_server(0.5)
    proxies = _proxies(server)
    try:
        step = NetworkAction(action="network", at=0, duration=10, fault="cut-slow", after=0.2)
        (fault,) = proxies.set_fault(step, [0], stream(7, "test"))
        assert _exchange(proxies.urls[0]) == b""  # cut before the answer began
        proxies.clear_fault([0])
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
    finished = run_harness(scenario, tmp_path / "results")
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


def test_a_reset_after_the_question_loses_the_state_only_on_the_named_replica_in_the_window(tmp_path):
    finished = run_harness(ON_CALL / "reset-after-question.toml", tmp_path)
    assert finished.code == 0, finished.output
    records = finished.journal()
    start, end = [r for r in records if r["type"] == "chaos" and r["action"] == "network"]
    lost = [r for r in records if r["type"] == "round" and r["outcome"] == "answer_lost"]
    assert lost and {r["replica"] for r in lost} == {"r2"}
    assert all(start["t"] - 0.05 <= r["sent"] <= end["t"] + 0.05 for r in lost)
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
    finished = run_harness(ON_CALL / "latency-expiry.toml", tmp_path)
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
    assert all(any(s["t"] <= r["sent"] <= e["t"] for s, e in zip(starts, ends, strict=True)) for r in lost), lost
    assert any(r["outcome"] == "complete" for r in records if r["type"] == "round")
