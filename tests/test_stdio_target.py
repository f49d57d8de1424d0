"""The stdio target: the shop's replicas started as the harness's children, driven over their pipes by the SDK's client.

A real run, as a user runs it: refund flows through MRTR rounds over stdio, a replica SIGKILLed mid-run and
started again, each process's cold start (spawn to first answer) in summary.json and the closing table, and
afterwards no process of the run left, looked up by the PIDs the journal names, nor after the harness itself is
SIGKILLed. What a stdio target cannot do is refused by `validate`, exit 2, in one line saying why.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.processes.children import alive, descendants, stat_fields
from tests.harness_run import ROOT, run_harness
from tests.services import require_binary, sigint_default

GONE_WITHIN = 5.0

SCENARIO = """
name = "stdio-refunds"
seed = 11
duration = "8s"
time_scale = 60

[target]
kind = "stdio"
replicas = 2

[load]
model = "open"
arrival_rate = 2
routing = "round-robin"

[[flows]]
kind = "refund"
amount = "above-limit"     # every refund asks the lead: a second round over the pipe

[leads]
think = { dist = "constant", value = "12s" }   # 0.2 s real
decline = 0.0
cancel = 0.0
abandon = 0.0

[[chaos]]
action = "kill"
at = "3s"
replica = 1

[expect]
completed_ratio = ">= 0.8"     # a round on its pipe when r1 is killed loses its answer: that flow errs
cold_start = "count == 3"
"""


def _command_lines_naming(text: str) -> list[str]:
    """Every live process whose command line names `text` (the run's results folder: its API, its servers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in line and alive(int(entry.name)):
                found.append(f"{entry.name}: {line[:160]}")
    return found


def test_refunds_over_stdio_complete_through_a_kill_with_every_cold_start_reported_and_nothing_left(tmp_path):
    scenario = tmp_path / "stdio.toml"
    scenario.write_text(SCENARIO)
    results = tmp_path / "results"
    finished = run_harness(scenario, results)
    assert finished.code == 0, finished.output
    summary = finished.summary
    flows = summary["flows"]
    assert flows["total"] > 0 and set(flows["by_outcome"]) <= {"completed", "error"}, flows
    assert all(row["passed"] for row in summary["invariants"].values()), summary["invariants"]
    kill = [row for row in summary["chaos"] if row["action"] == "kill"]
    assert len(kill) == 1 and kill[0]["ok"], summary["chaos"]
    cold = summary["cold_start_seconds"]
    assert sorted(cold) == ["r1", "r2"] and cold["r1"]["count"] == 2 and cold["r2"]["count"] == 1, cold
    assert all(row["p50"] > 0 for row in cold.values()), cold
    assert "COLD START (spawn to first answer)" in finished.output and "r1: 2 process(es)" in finished.output
    assert "Cold start (spawn to first answer)" in (finished.folder / "report.html").read_text()

    journal = finished.journal()
    starts = [record for record in journal if record["type"] == "cold_start"]
    restarted = max(record["t"] for record in starts if record["replica"] == "r1")
    served_after = [record for record in journal if record["type"] == "round" and record["replica"] == "r1"
                    and record["sent"] > restarted and record["outcome"] in ("complete", "input_required")]
    assert served_after, "the restarted r1 served no round"
    asked = [record for record in journal if record["type"] == "round" and record["outcome"] == "input_required"]
    assert asked, "no round asked the lead: the MRTR round trip was not exercised"
    failed = [record for record in journal if record["type"] == "round"
              and record["outcome"] not in ("complete", "input_required")]
    assert all(record["outcome"] == "answer_lost" and record["replica"] == "r1" for record in failed), failed
    assert len(failed) == flows["by_outcome"].get("error", 0), (failed, flows)  # each one a flow's end, as judged

    pids = {record["pid"] for record in starts}
    assert len(pids) == 3 and not [pid for pid in pids if alive(pid)], pids
    assert not _command_lines_naming(str(results)), _command_lines_naming(str(results))


def test_the_shop_over_stdio_on_a_redis_store_serves_its_refunds(tmp_path):
    """`store = "redis"`: the shop's API and its stdio replicas share a Redis the target started (its port is known
    only once it runs; they were once handed port 0, and the API exited before it was ready: exit 3)."""
    require_binary("redis-server")
    scenario = tmp_path / "stdio-redis.toml"
    scenario.write_text(SCENARIO.split("[[chaos]]")[0].replace("replicas = 2\n", "replicas = 2\nstore = \"redis\"\n")
                        + '[expect]\ncompleted_ratio = ">= 0.8"\n')
    finished = run_harness(scenario, tmp_path / "results")
    assert finished.code == 0, finished.output
    assert finished.summary["flows"]["by_outcome"].get("completed", 0) > 0, finished.summary["flows"]
    assert all(row["passed"] for row in finished.summary["invariants"].values())


def test_a_run_killed_with_sigkill_leaves_no_stdio_server_behind(tmp_path):
    """The servers are the harness's children on its lifeline: a SIGKILLed harness, which can stop nothing, takes
    them with it (the kernel does), the shop's API too. One is paused then: a stdio server would leave on its own
    once its stdin closes, but a stopped one reads nothing, and only the lifeline's SIGKILL ends it."""
    scenario = tmp_path / "stdio.toml"
    scenario.write_text(SCENARIO.split("[[chaos]]")[0].replace('duration = "8s"', 'duration = "60s"')
                        + '[[chaos]]\naction = "pause"\nat = "1s"\nduration = "50s"\nreplica = 1\n')
    output = tmp_path / "output.txt"
    with open(output, "wb") as sink:
        harness = subprocess.Popen([sys.executable, "-m", "harness", "run", str(scenario), "--results",
                                    str(tmp_path / "results")], stdout=sink, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, cwd=ROOT, preexec_fn=sigint_default)
    try:
        deadline = time.monotonic() + 120
        while "target up" not in output.read_text(errors="replace"):
            assert harness.poll() is None and time.monotonic() < deadline, output.read_text(errors="replace")
            time.sleep(0.2)
        seen = descendants(harness.pid)
        servers = [pid for pid in seen if b"--transport\0stdio" in _cmdline(pid)]
        assert len(servers) == 2, seen
        while not any((stat_fields(pid) or ["?"])[0] == "T" for pid in servers):  # the pause has begun
            assert harness.poll() is None and time.monotonic() < deadline, output.read_text(errors="replace")
            time.sleep(0.1)
        harness.kill()
        harness.wait(10)
        deadline = time.monotonic() + GONE_WITHIN
        while any(alive(pid) for pid in seen) and time.monotonic() < deadline:
            time.sleep(0.1)
        survivors = {pid: _cmdline(pid)[:120] for pid in seen if alive(pid)}
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait(10)
    assert not survivors, survivors


@pytest.mark.parametrize("processes", ["per-replica", "per-client"])
def test_a_server_that_gives_no_first_answer_is_the_targets_failure_exit_3(tmp_path, processes):
    head = SCENARIO.split("[[flows]]")[0].replace(
        "replicas = 2", f'replicas = 1\nstdio_processes = "{processes}"\nstdio_command = ["false"]')
    scenario = tmp_path / "own.toml"
    scenario.write_text(head + '[[flows]]\nkind = "call"\ntool = "echo"\narguments = [{}]\n')
    finished = run_harness(scenario, tmp_path / "results")
    assert finished.code == 3, finished.output
    label = "r1" if processes == "per-replica" else "client"
    assert f"{label} (false) gave no first answer: exited with code 1" in finished.output, finished.output


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.mark.parametrize(("change", "said"), [
    ('[[chaos]]\naction = "rotate-keys"\nat = "3s"\n', "rotate-keys cannot act on a stdio target"),
    ('[[chaos]]\naction = "kill"\nat = "3s"\nreplica = 1\n', "each process lives one flow"),
])
def test_what_a_stdio_target_cannot_do_is_refused_at_validate(tmp_path, change, said):
    text = SCENARIO.split("[[chaos]]")[0] + change
    if "rotate-keys" not in change:
        text = text.replace("replicas = 2", 'stdio_processes = "per-client"')
    scenario = tmp_path / "bad.toml"
    scenario.write_text(text)
    checked = subprocess.run([sys.executable, "-m", "harness", "validate", str(scenario)], capture_output=True,
                             text=True, timeout=60, cwd=ROOT)
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert said in checked.stderr, checked.stderr
    assert len(checked.stderr.strip().splitlines()) == 1, checked.stderr


def test_an_assistant_is_asked_before_a_stdio_target_runs_a_command_and_not_for_the_shop():
    """In process: `mrtr-harness mcp` asks before a run executes anything beyond the embedded shop; a stdio target's
    own command is such a thing, the shop over stdio is not."""
    from harness.assistant.plan import beyond_the_shop
    from harness.config.scenario import parse_scenario

    base = SCENARIO.split("[[chaos]]")[0]
    assert beyond_the_shop(parse_scenario(base)) == []
    own = base.replace("replicas = 2", 'stdio_processes = "per-client"\nstdio_command = ["node", "server.mjs"]')
    assert beyond_the_shop(parse_scenario(own)) == ['run the stdio server command ["node", "server.mjs"] '
                                                    '(once per flow)']


def test_a_hunt_of_a_stdio_target_draws_only_what_its_processes_can_suffer():
    """In process: the hunt's search draws from the chaos a stdio target can do, and none per client."""
    from harness.config.hunt import drawable_actions
    from harness.config.scenario import parse_scenario

    base = SCENARIO.split("[[chaos]]")[0]
    assert sorted(drawable_actions(parse_scenario(base))) == ["kill", "pause", "restart", "rolling-restart"]
    per_client = base.replace("replicas = 2", 'stdio_processes = "per-client"')
    assert drawable_actions(parse_scenario(per_client)) == []


ECHO_SERVER = """
from mcp.server.mcpserver import MCPServer

app = MCPServer("echo")


@app.tool()
def echo(text: str) -> str:
    return text


app.run("stdio")
"""

SLOW_SERVER = """
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer

app = MCPServer("slow")


@app.tool()
def slow(text: str) -> str:
    Path(sys.argv[1]).write_text("called")  # the call reached the server: the test kills it now
    time.sleep(30)
    return text


app.run("stdio")
"""

KILLED_MID_ROUND = """
from gevent import monkey

monkey.patch_all()  # as a load process is
import signal
import sys
import time
from pathlib import Path

import gevent

from harness.mrtr.client import drive
from harness.mrtr.routing import Router
from harness.mrtr.stdio import StdioClient, StdioServers

folder = Path(sys.argv[1])
marker = folder / "called"
servers = StdioServers(lambda label: [sys.executable, str(folder / "slow.py"), str(marker)], folder / "logs",
                       labels=["r1"], per_client=False)
servers.start()
client = StdioClient(servers, Router([servers.replicas[0].url]))
call = gevent.spawn(drive, client.call_steps("slow", {"text": "hi"}, lambda record: None), gevent.sleep)
deadline = time.monotonic() + 30
while not marker.exists() and time.monotonic() < deadline:
    gevent.sleep(0.05)
servers.replicas[0].signal(signal.SIGKILL)
result = call.get(timeout=30)
servers.stop()
print(result.outcome.value, result.last.error_code, flush=True)
"""


def test_a_round_on_the_pipe_of_a_killed_server_is_judged_answer_lost(tmp_path):
    """The server had the request and died before it answered: it may have acted on it, which is what HTTP calls a
    lost answer (`answer_lost`), not a timeout or a bad reply, and the call ends at once, not at its timeout."""
    (tmp_path / "slow.py").write_text(SLOW_SERVER)
    script = tmp_path / "killed.py"
    script.write_text(KILLED_MID_ROUND)
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["answer_lost None"], done.stdout + done.stderr


PER_REPLICA_THEN_PER_CLIENT = """
from gevent import monkey

monkey.patch_all()  # as a load process is
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import gevent

from harness.mrtr.client import drive
from harness.mrtr.routing import Router
from harness.mrtr.stdio import StdioClient, StdioServers
from harness.processes.children import alive

folder = Path(sys.argv[1])
echo = lambda label: [sys.executable, str(folder / "echo.py")]
replicas = StdioServers(echo, folder / "replicas", labels=["r1"], per_client=False)
replicas.start()
result = drive(StdioClient(replicas, Router([replicas.replicas[0].url])).call_steps(
    "echo", {"text": "hi"}, lambda record: None), gevent.sleep)
replicas.stop()
print(result.outcome.value, result.result["structuredContent"], flush=True)

servers = StdioServers(echo, folder / "clients", labels=["client"], per_client=True)  # a second target, one process
servers.start()  # per client: one process, started and stopped (the command serves)
client = StdioClient(servers, Router(["stdio://client"]))
for lead in (1, 2, 1):  # lead 1's second call reuses its process
    drive(client.call_steps("echo", {"text": "hi"}, lambda record: None, lead=lead), gevent.sleep)
pids = {lead: server.pid for lead, server in servers.clients.items()}
print(sorted(pids), len(set(pids.values())), len(servers.cold_starts), flush=True)
servers.flow_ended(SimpleNamespace(lead=1))  # lead 1's flow ended: its process is stopped beside the flows
deadline = time.monotonic() + 10
while alive(pids[1]) and time.monotonic() < deadline:
    gevent.sleep(0.05)
print(alive(pids[1]), alive(pids[2]), flush=True)
servers.stop()
print([alive(pid) for pid in pids.values()], flush=True)
"""


def test_per_replica_then_per_client_servers_in_one_process_on_its_one_event_loop(tmp_path):
    """Two stdio targets one after the other in one process (a hunt's trials): asyncio runs one loop per thread, so
    the second's servers use the loop the first started. Per client, a lead's process starts at its first call, is
    reused by its next, and stops when its flow ends, the other lead's still running (any MCP server will do)."""
    (tmp_path / "echo.py").write_text(ECHO_SERVER)
    script = tmp_path / "servers.py"
    script.write_text(PER_REPLICA_THEN_PER_CLIENT)
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["complete {'result': 'hi'}", "[1, 2] 2 3", "False True", "[False, False]"], \
        done.stdout + done.stderr
