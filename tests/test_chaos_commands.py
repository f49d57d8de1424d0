"""Chaos by command on deployments the harness did not start: `[target.commands]` against real processes.

The replicas are started and restarted by small shell scripts the test writes, as a user
would write them for their own machines: a PID file per replica, the same port after a
restart. The harness only runs the commands; what it journals and what the run shows
must follow from what those commands really did to the processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.config.scenario import parse_scenario
from harness.config.strict import ScenarioError
from harness.mrtr.keys import fingerprint, write_ring
from harness.processes.children import alive, free_port
from tests.harness_run import ROOT, key_files, run_harness

START = """#!/bin/sh
# start.sh NAME PORT MODULE ARGS...: start a replica in the background; its PID in NAME.pid, its output in NAME.log
dir=$(dirname "$0")
name=$1; port=$2; shift 2
echo "$port" > "$dir/$name.port"
cd "{root}" || exit 1
"{python}" -m "$@" --port "$port" >> "$dir/$name.log" 2>&1 < /dev/null &
echo $! > "$dir/$name.pid"
echo "started $name on $port as $!"
"""

RESTART = """#!/bin/sh
# restart.sh NAME MODULE ARGS...: stop the replica by its PID file, wait until it is gone, start it on its port again
dir=$(dirname "$0")
name=$1; shift
pid=$(cat "$dir/$name.pid") || exit 1
kill "$pid" || exit 1
i=0
while [ -e "/proc/$pid" ] && ! grep -q ') Z' "/proc/$pid/stat" 2>/dev/null && [ $i -lt 100 ]; do
  sleep 0.1; i=$((i + 1))
done
exec sh "$dir/start.sh" "$name" "$(cat "$dir/$name.port")" "$@"
"""


class Replicas:
    """Replicas a script started (so their PIDs are in files, not in this process's children); stopped by PID."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir()
        (folder / "start.sh").write_text(START.format(root=ROOT, python=sys.executable))
        (folder / "restart.sh").write_text(RESTART)
        self.names: list[str] = []

    def start(self, name: str, *module_args: str, env: dict[str, str] | None = None) -> str:
        """Start `python -m MODULE_ARGS... --port P` by the script, and wait until that process itself listens on P;
        `env` adds variables to this one's environment. A port is free when chosen, not when bound: another test's
        process may take it first, and then this one's bind fails while the port answers (its taker's), so a start
        whose process ended without listening is tried again on another port."""
        for _ in range(START_TRIES):
            port = free_port()
            self.log(name).unlink(missing_ok=True)
            subprocess.run(["sh", str(self.folder / "start.sh"), name, str(port), *module_args], check=True,
                           timeout=10, capture_output=True, env={**os.environ, **(env or {})})
            if self._listening(self.pid(name), port):
                self.names.append(name)
                return f"http://127.0.0.1:{port}/mcp"
        raise AssertionError(f"{name} never listened on a port of its own in {START_TRIES} starts: "
                             + self.log(name).read_text(errors="replace")[-2000:])

    @staticmethod
    def _listening(pid: int, port: int, timeout: float = 60.0) -> bool:
        """Whether the process `pid` comes to hold the socket listening on 127.0.0.1:`port` (False: it ended first)."""
        deadline = time.monotonic() + timeout
        while alive(pid):
            inode = _listener_inode(port)
            if inode is not None and _holds(pid, inode):
                return True
            assert time.monotonic() < deadline, f"pid {pid} never listened on {port} in {timeout:g} s"
            time.sleep(0.1)
        return False

    def wait_ready(self, timeout: float = 60.0) -> None:
        import socket

        deadline = time.monotonic() + timeout
        for name in self.names:
            port = int((self.folder / f"{name}.port").read_text())
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, f"{name} never served on {port}"
                    time.sleep(0.1)

    def pid(self, name: str) -> int:
        return int((self.folder / f"{name}.pid").read_text())

    def stop(self) -> None:
        for name in self.names:
            with contextlib.suppress(OSError, ValueError):
                os.kill(self.pid(name), signal.SIGKILL)

    def log(self, name: str) -> Path:
        return self.folder / f"{name}.log"


START_TRIES = 3


def _listener_inode(port: int) -> str | None:
    """The inode of the socket listening on 127.0.0.1:`port`, from /proc/net/tcp, or None."""
    local = f"0100007F:{port:04X}"
    with open("/proc/net/tcp", encoding="ascii") as table:
        next(table)
        for line in table:
            fields = line.split()
            if fields[1] == local and fields[3] == "0A":  # 0A: LISTEN
                return fields[9]
    return None


def _holds(pid: int, inode: str) -> bool:
    """Whether one of the process's open files is that socket."""
    target = f"socket:[{inode}]"
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return True
    return False


@pytest.fixture
def replicas(tmp_path):
    started = Replicas(tmp_path / "replicas")
    try:
        yield started
    finally:
        started.stop()


def toml_list(values: list[str]) -> str:
    return "[" + ", ".join(f'"{value}"' for value in values) + "]"


RESTART_SCENARIO = """
name = "desk-restart"
seed = 3
duration = "2s"
time_scale = 60
grace = "25s"

[target]
kind = "external"
urls = {urls}
logs = {logs}
ready_timeout = "30s"

[target.commands]
restart = ["sh", "{folder}/restart.sh", "{{replica}}", "tests.servers.refund_desk"]

[load]
arrival_rate = 8
routing = "same-replica"

[[flows]]
kind = "call"
tool = "refund_item"
arguments = {{ order_id = "O-1001" }}
answers = {{ sku = ["mug", "tee"] }}

[leads]
think = {{ dist = "constant", value = "12m" }}  # 12 s: longer than a restart on a busy machine (6 s seen)
decline = 0
cancel = 0
abandon = 0

[[chaos]]
at = "1s"
action = "restart"
replica = 1

[expect]
"rejections{{reason='unknown key',replica='r1'}}" = "> 0"
unexplained_rejections = "== 0"
"""


def test_a_restart_by_command_of_another_servers_replica_shows_unknown_key_on_that_replica_only(replicas, tmp_path):
    # Two replicas of a server this project did not write, each with its own per-process key.
    urls = [replicas.start(name, "tests.servers.refund_desk") for name in ("r1", "r2")]
    replicas.wait_ready()
    first_pid = replicas.pid("r1")
    logs = [f"file:{replicas.log(name)}@{name}" for name in ("r1", "r2")]
    scenario = tmp_path / "restart.toml"
    scenario.write_text(RESTART_SCENARIO.format(urls=toml_list(urls), logs=toml_list(logs), folder=replicas.folder))

    finished = run_harness(scenario, tmp_path / "results")

    assert finished.code == 0, finished.output
    assert replicas.pid("r1") != first_pid, "the restart command started a new process"
    journal = finished.journal()
    ran = [record for record in journal if record["type"] == "command"]
    assert [(r["name"], r["target"], r["exit_code"], r["ready"]) for r in ran] == [("restart", "r1", 0, True)]
    assert "started r1 on" in ran[0]["output"]
    chaos_end = [r for r in journal if r["type"] == "chaos" and r["phase"] == "end" and r["action"] == "restart"]
    assert [r["ok"] for r in chaos_end] == [True]
    # Every call stays on its first replica, and every answer comes after r1 serves again (the leads think longer than
    # the restart takes; while r1 is down the client sends a round elsewhere, as a balancer would): only r1's new
    # process lacks the key the states it sealed before were sealed with.
    logged = [(r["replica"], r["reason"]) for r in journal if r["type"] == "rejection"]
    assert logged and set(logged) == {("r1", "unknown key")}
    rejected_rounds = {r["replica"] for r in journal if r["type"] == "round" and r["code"] == "-32602"}
    assert rejected_rounds == {"r1"}
    served = {r["replica"] for r in journal if r["type"] == "round" and r["code"] is None}
    assert served == {"r1", "r2"}


SHOP_SCENARIO = """
name = "rotation-by-command"
seed = 11
duration = "9s"
time_scale = 60
grace = "10s"

[target]
kind = "external"
urls = {urls}
api = "{api}"
logs = {logs}
ttl = "10m"

[target.commands]
add-key = ["sh", "-c", "cd {folder} && cat {{key_file}} >> {{replica}}.ring && echo added {{key_id}} on {{replica}}"]
promote-key = ["sh", "-c", "cd {folder} && {{ cat {{key_file}}; grep -vxFf {{key_file}} {{replica}}.ring; }} >n && mv n {{replica}}.ring"]
retire-key = ["sh", "-c", "cd {folder} && cp {{key_file}} {{replica}}.ring"]

[load]
arrival_rate = 5
routing = "other-replica"

[[flows]]
kind = "refund"
amount = "above-limit"

[leads]
think = {{ dist = "constant", value = "1m" }}
decline = 0
cancel = 0
abandon = 0

[[chaos]]
at = "2s"
action = "rotate-keys"
order = "minter-first"
replica = 1
phase_gap = "4s"

[expect]
"rejections{{reason='unknown key',replica='r2'}}" = "> 0"
"rejections{{replica='r1'}}" = "== 0"
invariant_violations = "== 0"
unexplained_rejections = "== 0"
"""  # noqa: E501 - one shell command per key step, as a user writes it


def test_a_minter_first_rotation_by_commands_yields_unknown_key_on_the_replicas_that_could_not_open_the_new_key(
        replicas, tmp_path):
    folder = replicas.folder
    old = "0" * 63 + "1"  # the deployment's own key: only its ring files hold it, the harness never does
    for name in ("r1", "r2"):
        write_ring(folder / f"{name}.ring", [old])
    api = replicas.start("api", "harness", "shop", "api", "--store", f"sqlite:{folder / 'shop.db'}")
    urls = [replicas.start(name, "harness", "shop", "replica", "--api", api.removesuffix("/mcp"),
                           "--store", f"sqlite:{folder / 'shop.db'}", "--keyring", f"file:{folder / name}.ring",
                           "--replica-id", name) for name in ("r1", "r2")]
    replicas.wait_ready()
    logs = [f"file:{replicas.log(name)}@{name}" for name in ("r1", "r2")]
    scenario = tmp_path / "rotation.toml"
    scenario.write_text(SHOP_SCENARIO.format(urls=toml_list(urls), logs=toml_list(logs), folder=folder,
                                             api=api.removesuffix("/mcp")))

    finished = run_harness(scenario, tmp_path / "results")

    assert finished.code == 0, finished.output
    journal = finished.journal()
    ran = [(r["name"], r["target"], r["exit_code"]) for r in journal if r["type"] == "command"]
    assert ran == [("add-key", "r1", 0), ("promote-key", "r1", 0), ("add-key", "r2", 0), ("promote-key", "r2", 0)]
    new = (folder / "r1.ring").read_text().split()[0]
    assert (folder / "r1.ring").read_text().split() == [new, old] == (folder / "r2.ring").read_text().split()
    # The state r1 sealed with the new key was refused by r2 while r2 could not open it yet; r1 refused nothing.
    logged = {(r["replica"], r["reason"]) for r in journal if r["type"] == "rejection"}
    assert logged == {("r2", "unknown key")}
    # The key went to the commands as a file and by fingerprint: never into the journal or the results.
    text = (finished.folder / "journal.jsonl").read_text()
    assert new not in text and f"added {fingerprint(new)} on r1" in text
    assert key_files(finished.folder) == []


FAILING_SCENARIO = """
name = "failing-command"
duration = "4s"
grace = "2s"

[target]
kind = "external"
urls = {urls}

[load]
arrival_rate = 2

[[flows]]
kind = "call"
tool = "refund_item"
arguments = {{ order_id = "O-1001" }}
answers = {{ sku = "mug" }}

[leads]
think = {{ dist = "constant", value = "0s" }}

[[chaos]]
at = "1s"
action = "command"
command = ["sh", "-c", "echo contacting {{replica}} at {{url}}; echo the cluster said no >&2; exit 1"]

[expect]
chaos_failures = "== 0"
"""


def test_a_command_that_fails_is_a_chaos_failure_with_its_exit_code_and_output_in_the_journal(replicas, tmp_path):
    urls = [replicas.start("r1", "tests.servers.refund_desk")]
    replicas.wait_ready()
    scenario = tmp_path / "failing.toml"
    scenario.write_text(FAILING_SCENARIO.format(urls=toml_list(urls)))

    finished = run_harness(scenario, tmp_path / "results")

    assert finished.code == 1, finished.output
    journal = finished.journal()
    [ran] = [r for r in journal if r["type"] == "command"]
    assert (ran["name"], ran["target"], ran["exit_code"], ran["ok"]) == ("command", "r1", 1, False)
    assert ran["argv"][:2] == ["sh", "-c"] and urls[0] in ran["argv"][2]
    assert ran["output"] == f"contacting r1 at {urls[0]} the cluster said no"
    [end] = [r for r in journal if r["type"] == "chaos" and r["phase"] == "end" and r["action"] == "command"]
    assert not end["ok"] and "exited 1" in end["error"] and "the cluster said no" in end["error"]
    # the diagnostic reaches stderr through the harness's loggers, apart from the progress line
    assert "mrtr-harness: WARNING harness.chaos.schedule: chaos command on r1 failed: command failed" in finished.output


@pytest.mark.parametrize(("expect", "code"), [("", 1), ('chaos_failures = "<= 1"', 0)])
def test_a_chaos_action_that_did_not_happen_fails_the_run_unless_the_scenario_allows_it(replicas, tmp_path, expect,
                                                                                          code):
    """Without a chaos_failures threshold of its own, a run whose chaos failed has not tested what it says."""
    urls = [replicas.start("r1", "tests.servers.refund_desk")]
    replicas.wait_ready()
    scenario = tmp_path / "failing.toml"
    scenario.write_text(FAILING_SCENARIO.format(urls=toml_list(urls)).replace('chaos_failures = "== 0"', expect))
    finished = run_harness(scenario, tmp_path / "results")
    assert finished.code == code, finished.output
    said = "chaos: 1 action did not happen as scheduled (command r1: command failed"
    assert (said in finished.output) == (code == 1)
    assert any(said in problem for problem in finished.summary["problems"]) == (code == 1)


BASE = """
name = "by-command"
duration = "10s"

[target]
kind = "external"
urls = ["http://127.0.0.1:9/mcp", "http://127.0.0.1:10/mcp"]

[target.commands]
restart = ["systemctl", "restart", "mcp@{replcia}"]

[load]
arrival_rate = 1

[[flows]]
kind = "call"
tool = "t"
"""


@pytest.mark.parametrize(("change", "message"), [
    (("", ""), "by-command.toml:10: target.commands.restart: restart uses unknown placeholder {replcia}"),
    (("restart =", "restrat ="), "by-command.toml:10: target.commands.restrat: unknown command name 'restrat'"),
    (("{replcia}", "{replica}"), None),
])
def test_validate_refuses_unknown_placeholders_and_command_names_naming_the_line(change, message):
    text = BASE.replace(*change) if change[0] else BASE
    if message is None:
        assert parse_scenario(text, "by-command.toml").target.commands["restart"][2] == "mcp@{replica}"
        return
    with pytest.raises(ScenarioError) as error:
        parse_scenario(text, "by-command.toml")
    assert str(error.value).startswith(message)


def test_validate_refuses_an_action_with_no_command_on_an_external_target_naming_its_line(tmp_path):
    text = BASE.replace("{replcia}", "{replica}") + '\n[[chaos]]\nat = "2s"\naction = "set-ttl"\nttl = "1m"\n'
    scenario = tmp_path / "by-command.toml"
    scenario.write_text(text)
    checked = subprocess.run([sys.executable, "-m", "harness", "validate", str(scenario)], capture_output=True,
                             text=True, timeout=60, cwd=ROOT)
    assert checked.returncode == 2
    line = text.splitlines().index('action = "set-ttl"') + 1
    assert f"by-command.toml:{line}: chaos[1].action: set-ttl on an external target needs [target.commands] " \
           "set-ttl" in checked.stdout + checked.stderr


CAPACITY_SCENARIO = """
name = "desk-capacity"
duration = "2s"
grace = "2s"

[target]
kind = "external"
urls = {urls}

[target.commands]
scale = ["sh", "-c", "echo $MRTR_RUN_ID {{replicas}} >> {folder}/scaled.txt"]

[load]
arrival_rate = 2

[[flows]]
kind = "call"
tool = "refund_item"
arguments = {{ order_id = "O-1001" }}
answers = {{ sku = "mug" }}

[leads]
think = {{ dist = "constant", value = "0s" }}
"""


def test_capacity_sweeps_replica_counts_of_an_external_target_through_its_scale_command(replicas, tmp_path):
    urls = [replicas.start("r1", "tests.servers.refund_desk")]
    replicas.wait_ready()
    scenario = tmp_path / "capacity.toml"
    scenario.write_text(CAPACITY_SCENARIO.format(urls=toml_list(urls), folder=replicas.folder))
    swept = subprocess.run([sys.executable, "-m", "harness", "capacity", str(scenario), "--replicas", "1-2",
                            "--rates", "2", "--step", "2s", "--warmup", "0.5s", "--results", str(tmp_path / "results")],
                           capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert swept.returncode == 0, swept.stdout + swept.stderr
    [folder] = [path for path in (tmp_path / "results").iterdir() if path.is_dir()]
    assert (replicas.folder / "scaled.txt").read_text().splitlines() == [f"{folder.name} 1", f"{folder.name} 2"]
    document = json.loads((folder / "capacity.json").read_text())
    assert [step["replicas"] for step in document["steps"]] == [1, 2]
    log = (folder / "steps.log").read_text()
    assert log.index("scale to 1:") < log.index("--- 1 replica at") < log.index("scale to 2:") \
        < log.index("--- 2 replicas at")


ROLLBACK_SCENARIO = """
name = "rollback-by-command"
duration = "3s"
time_scale = 60
grace = "2s"

[target]
kind = "external"
urls = {urls}
ttl = "10m"

[target.commands]
set-ttl = ["sh", "-c", "echo ttl {{ttl}} on {{replica}} >> {folder}/done.txt"]

[load]
arrival_rate = 2

[[flows]]
kind = "call"
tool = "refund_item"
arguments = {{ order_id = "O-1001" }}
answers = {{ sku = "mug" }}

[leads]
think = {{ dist = "constant", value = "0s" }}

[[chaos]]
at = "0.5s"
action = "command"
command = ["sh", "-c", "echo delay on {{replica}} >> {folder}/done.txt"]
rollback = ["sh", "-c", "echo delay off on {{replica}} >> {folder}/done.txt"]

[[chaos]]
at = "1s"
action = "set-ttl"
ttl = "2m"
replica = 1
"""


def test_the_rollback_undoes_what_commands_changed_newest_first_with_the_targets_own_values(replicas, tmp_path):
    urls = [replicas.start("r1", "tests.servers.refund_desk")]
    replicas.wait_ready()
    scenario = tmp_path / "rollback.toml"
    scenario.write_text(ROLLBACK_SCENARIO.format(urls=toml_list(urls), folder=replicas.folder))

    finished = run_harness(scenario, tmp_path / "results")

    assert finished.code == 0, finished.output
    # set-ttl 2m modelled is 2 s real; the rollback puts back the target's own ttl, 10m modelled: 10 s real.
    assert (replicas.folder / "done.txt").read_text().splitlines() == [
        "delay on r1", "ttl 2 on r1", "ttl 10 on r1", "delay off on r1"]
    [rollback] = [r for r in finished.journal() if r["type"] == "chaos" and r["phase"] == "end"
                  and r["action"] == "rollback"]
    assert rollback["ok"] and len(rollback["detail"]["undone"]) == 2


AUTH_SCENARIO = """
name = "auth-by-command"
duration = "3s"
grace = "2s"

[target]
kind = "external"
urls = {urls}

[target.commands]
subject-drift = ["sh", "-c", "echo drift {{share}} >> {folder}/done.txt"]
auth-down = ["sh", "-c", "echo down >> {folder}/done.txt"]
auth-up = ["sh", "-c", "echo up >> {folder}/done.txt"]
revoke = ["sh", "-c", "echo revoke {{share}} >> {folder}/done.txt"]
scope-loss = ["sh", "-c", "echo lose {{scope}} {{share}} >> {folder}/done.txt"]
scope-restore = ["sh", "-c", "echo restore {{scope}} >> {folder}/done.txt"]
token-expiry = ["sh", "-c", "echo expiry {{lifetime}} >> {folder}/done.txt"]
token-expiry-end = ["sh", "-c", "echo expiry end >> {folder}/done.txt"]

[load]
arrival_rate = 2

[[flows]]
kind = "call"
tool = "refund_item"
arguments = {{ order_id = "O-1001" }}
answers = {{ sku = "mug" }}

[leads]
think = {{ dist = "constant", value = "0s" }}

[[chaos]]
at = "0s"
action = "subject-drift"
share = 0.5
duration = "0.2s"

[[chaos]]
at = "0.5s"
action = "auth-down"
duration = "0.2s"

[[chaos]]
at = "1s"
action = "revoke"
share = 0.5

[[chaos]]
at = "1.2s"
action = "scope-loss"
share = 0.25

[[chaos]]
at = "1.5s"
action = "token-expiry"
lifetime = "3s"
"""


def test_auth_actions_by_command_run_their_commands_and_the_rollback_undoes_what_stays_changed(replicas, tmp_path):
    urls = [replicas.start("r1", "tests.servers.refund_desk")]
    replicas.wait_ready()
    scenario = tmp_path / "auth.toml"
    scenario.write_text(AUTH_SCENARIO.format(urls=toml_list(urls), folder=replicas.folder))

    finished = run_harness(scenario, tmp_path / "results")

    assert finished.code == 0, finished.output
    # each command once, deployment-wide; the durations' ends at their ends, the rest by the rollback, newest first
    assert (replicas.folder / "done.txt").read_text().splitlines() == [
        "drift 0.5", "drift 0", "down", "up", "revoke 0.5", "lose refunds:write 0.25", "expiry 3", "expiry end",
        "restore refunds:write"]
    ends = [r for r in finished.journal() if r["type"] == "chaos" and r["phase"] == "end"]
    assert [(r["action"], r["target"], r["ok"]) for r in ends if r["action"] != "rollback"] == [
        ("subject-drift", "auth", True), ("auth-down", "auth", True), ("revoke", "auth", True),
        ("scope-loss", "auth", True), ("token-expiry", "auth", True)]
