"""Nothing the harness starts outlives it, also when it is killed with SIGKILL and can stop nothing.

The harness is run as a user runs it; while it runs, every process below it is collected
from /proc (children of children too, among them the replicas the zygote forks, which a
dead zygote would leave re-parented to init). After the SIGKILL, the kernel must end
every one of them within seconds, through the lifeline each was started with.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.processes.children import alive, descendants, parent_of
from tests.harness_run import ROOT, SCENARIOS
from tests.services import sigint_default

GONE_WITHIN = 5.0


def start(args: list[str], output: Path) -> subprocess.Popen[bytes]:
    """The harness as a user starts it, with SIGINT at its default whatever this runner inherited."""
    with open(output, "wb") as sink:
        return subprocess.Popen([sys.executable, "-m", "harness", *args], stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=ROOT,
                                preexec_fn=sigint_default)


def watch(process: subprocess.Popen[bytes], seconds: float) -> set[int]:
    """Every process seen below `process` during `seconds` (sampled every 0.2 s), with `process` still running."""
    seen: set[int] = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the harness exited early with {process.returncode}"
        seen |= descendants(process.pid)
        time.sleep(0.2)
    return seen


def watch_until_line(process: subprocess.Popen[bytes], output: Path, text: str, timeout: float) -> set[int]:
    """Every process seen below `process` until `text` is in its output (a loaded machine starts slowly)."""
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    while text not in output.read_text(errors="replace"):
        assert time.monotonic() < deadline, output.read_text(errors="replace")
        seen |= watch(process, 0.2)
    return seen


def wait_for_line(process: subprocess.Popen[bytes], output: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in output.read_text(errors="replace"):
        assert process.poll() is None, output.read_text(errors="replace")
        assert time.monotonic() < deadline, f"no {text!r} within {timeout:g}s:\n{output.read_text(errors='replace')}"
        time.sleep(0.2)


def kill_and_count_survivors(process: subprocess.Popen[bytes], seen: set[int]) -> set[int]:
    """SIGKILL the harness; the processes of `seen` still alive `GONE_WITHIN` seconds later."""
    process.kill()
    process.wait(10)
    deadline = time.monotonic() + GONE_WITHIN
    while any(alive(pid) for pid in seen) and time.monotonic() < deadline:
        time.sleep(0.1)
    return {pid for pid in seen if alive(pid)}


def describe(pids: set[int]) -> list[str]:
    described = []
    for pid in sorted(pids):
        try:
            described.append(f"{pid} (parent {parent_of(pid)}): "
                             + Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120])
        except OSError:
            described.append(f"{pid}: gone")
    return described


def test_a_run_killed_with_sigkill_leaves_no_process_behind(tmp_path):
    output = tmp_path / "output.txt"
    process = start(["run", str(SCENARIOS / "smoke.toml"), "--duration", "60s", "--results", str(tmp_path)], output)
    try:
        seen = watch_until_line(process, output, "target up", timeout=120)
        seen |= watch(process, 3.0)  # the load and the live fold are up once the target is
        zygotes = {pid for pid in seen if b"harness.targets.zygote" in _cmdline(pid) and parent_of(pid) == process.pid}
        replicas = {pid for pid in seen if parent_of(pid) in zygotes}
        assert len(zygotes) == 1 and len(replicas) == 3, describe(seen)  # smoke.toml: 3 forked replicas
        folds = {pid for pid in seen if b"harness.run.live_fold" in _cmdline(pid) and parent_of(pid) == process.pid}
        assert len(folds) == 1, describe(seen)  # the run's live fold, a process of its own
        survivors = kill_and_count_survivors(process, seen)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert not survivors, describe(survivors)


def test_shop_up_killed_with_sigkill_leaves_no_process_behind(tmp_path):
    output = tmp_path / "output.txt"
    process = start(["shop", "up", "--replicas", "2", "--workdir", str(tmp_path / "shop")], output)
    try:
        wait_for_line(process, output, "Ctrl-C stops everything.", timeout=120)
        seen = watch(process, 2.0)
        assert len(seen) >= 4, describe(seen)  # the API, the zygote and two replicas
        survivors = kill_and_count_survivors(process, seen)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert not survivors, describe(survivors)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_a_child_started_with_the_lifeline_dies_with_its_parent_even_when_paused(tmp_path):
    """The lifeline on its own: a parent starts a sleeping child with `start_child`, the child is SIGSTOPped
    (as chaos pauses a replica), then the parent is killed: the kernel ends the child anyway."""
    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys, time; from harness.processes.children import start_child; "
         f"child = start_child(['sleep', '600']); open({str(pid_file)!r}, 'w').write(str(child.pid)); "
         "time.sleep(600)"],
        cwd=ROOT, preexec_fn=sigint_default)
    try:
        deadline = time.monotonic() + 30
        while not pid_file.exists() or not pid_file.read_text():
            assert parent.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        child = int(pid_file.read_text())
        assert alive(child) and parent_of(child) == parent.pid
        os.kill(child, signal.SIGSTOP)
        survivors = kill_and_count_survivors(parent, {child})
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
    assert not survivors, describe(survivors)


AUTH_SCENARIO = """
name = "auth-lifeline"
duration = "60s"
[target]
kind = "embedded"
replicas = 1
[target.auth]
kind = "client-credentials"
client_id = "support-leads"
client_secret_env = "MRTR_LIFELINE_SECRET"
[load]
model = "open"
arrival_rate = 1
[[flows]]
kind = "refund"
"""


def test_a_run_with_its_own_authorization_server_killed_with_sigkill_leaves_no_process_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("MRTR_LIFELINE_SECRET", "lifeline-secret")
    scenario = tmp_path / "auth.toml"
    scenario.write_text(AUTH_SCENARIO)
    output = tmp_path / "output.txt"
    process = start(["run", str(scenario), "--results", str(tmp_path / "results")], output)
    try:
        wait_for_line(process, output, "target up", timeout=120)
        seen = watch(process, 1.0)
        servers = {pid for pid in seen if b"auth-server" in _cmdline(pid)}
        assert len(servers) == 1, describe(seen)
        survivors = kill_and_count_survivors(process, seen)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert not survivors, describe(survivors)


TOKEN_SCENARIO = """
name = "token-lifeline"
duration = "60s"
[target]
kind = "external"
urls = ["{url}"]
[target.auth]
kind = "command"
command = ["sh", "-c", "echo $$ > {pid_file}; exec sleep 600"]
[load]
arrival_rate = 1
[[flows]]
kind = "call"
tool = "refund_item"
arguments = {{ order_id = "O-1001" }}
"""


def test_a_run_killed_with_sigkill_while_a_token_command_runs_leaves_no_token_command_behind(tmp_path):
    """A token command that hangs (a vault that does not answer) dies with the harness, like every other child."""
    from tests.servers import start_server

    pid_file = tmp_path / "token-command.pid"
    desk = start_server("tests.servers.refund_desk", log=tmp_path / "desk.log")
    scenario = tmp_path / "token.toml"
    scenario.write_text(TOKEN_SCENARIO.format(url=desk.url, pid_file=pid_file))
    output = tmp_path / "output.txt"
    process = start(["run", str(scenario), "--results", str(tmp_path / "results")], output)
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists() or not pid_file.read_text().strip():
            assert process.poll() is None, output.read_text(errors="replace")
            assert time.monotonic() < deadline, "the token command never ran"
            time.sleep(0.1)
        command = int(pid_file.read_text())
        # The shell writes its PID before it execs sleep; while the kernel swaps the image, /proc shows an
        # empty command line, so wait for the exec to finish rather than read the one instant.
        while alive(command) and b"sleep" not in _cmdline(command) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert alive(command) and b"sleep" in _cmdline(command), describe({command})
        survivors = kill_and_count_survivors(process, {command})
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        desk.stop()
    assert not survivors, describe(survivors)
