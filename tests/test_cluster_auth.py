"""Workers and master prove they hold the run's cluster secret before the master's setup is sent or obeyed.

A stranger who reaches the master's port speaks Locust's own wire (a ZeroMQ DEALER sending msgpack'd triples):
it gets no setup, takes no worker index, its journal lines and metrics reach no result, and a frame that is no
message does not stop the master listening. A stranger answering as the master gets nothing obeyed.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import msgpack
import zmq

import harness
from harness.processes.children import free_port
from tests.harness_run import ROOT, SCENARIOS, Finished, valid_summary

SMOKE = SCENARIOS / "smoke.toml"
SECRET = {"MRTR_CLUSTER_SECRET": "the-secret-of-this-deployment"}
FORGED_FLOW = "forged-0"


class Wire:
    """A raw ZeroMQ socket speaking Locust's wire: (type, data, node id), msgpack'd."""

    def __init__(self, kind: int, node: str = "") -> None:
        self.context = zmq.Context()
        self.socket = self.context.socket(kind)
        self.socket.setsockopt(zmq.LINGER, 0)
        if node:
            self.socket.setsockopt(zmq.IDENTITY, node.encode())
        self.node = node
        self.seen: list[tuple[str, Any]] = []

    def send(self, kind: str, data: Any, *, to: bytes | None = None) -> None:
        frame = msgpack.dumps((kind, data, self.node if to is None else to.decode()))
        self.socket.send_multipart([to, frame] if to is not None else [frame])

    def until(self, kind: str, timeout: float = 20.0) -> tuple[Any, bytes | None]:
        """Read messages until one of `kind` comes (its data and, on a ROUTER, who sent it); AssertionError when
        none comes within `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.socket.poll(int(max(0.0, deadline - time.monotonic()) * 1000)):
                break
            frames = self.socket.recv_multipart()
            sender = frames[0] if len(frames) == 2 else None
            message_kind, data, _ = msgpack.loads(frames[-1], raw=False, strict_map_key=False)
            self.seen.append((message_kind, data))
            if message_kind == kind:
                return data, sender
        raise AssertionError(f"no {kind} within {timeout}s; seen {[seen for seen, _ in self.seen]}")

    def drain(self) -> None:
        while self.socket.poll(200):
            frames = self.socket.recv_multipart()
            self.seen.append(tuple(msgpack.loads(frames[-1], raw=False, strict_map_key=False)[:2]))

    def close(self) -> None:
        self.socket.close()
        self.context.term()


def _start_master(results: Path, port: int, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "harness", "run", str(SMOKE), "--results", str(results), "--quiet",
         "--master", "--master-bind-port", str(port), *args],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **SECRET}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)


def _start_worker(home: Path, port: int, secret: dict[str, str] = SECRET) -> subprocess.Popen[str]:
    home.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "harness", "worker", "--master-host", "127.0.0.1", "--master-port", str(port),
         "--spool", str(home)],
        cwd=home, env={**os.environ, "PYTHONPATH": str(ROOT), **secret}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)


_READ: dict[int, bytearray] = {}
"""What each process's output held after the last line a wait returned (by pid)."""


def _wait_for_line(process: subprocess.Popen[str], text: str, timeout: float = 60.0) -> list[str]:
    """The process's output lines up to the first holding `text` (AssertionError when it ends or times out first).
    Read from the pipe's descriptor, not its buffered file: a line already buffered is never waited for."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    held = _READ.setdefault(process.pid, bytearray())
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        while b"\n" in held:
            cut = held.index(b"\n") + 1
            line = held[:cut].decode(errors="replace")
            del held[:cut]
            lines.append(line)
            if text in line:
                return lines
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        held += chunk
    raise AssertionError(f"{text!r} never came; output so far: {''.join(lines)}{held.decode(errors='replace')}")


def _stop(*processes: subprocess.Popen[str]) -> None:
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait(10)


FORGED_LINE = json.dumps({"type": "start", "t": 1, "flow_id": FORGED_FLOW, "flow": "smoke", "scheduled": 1,
                          "late": False})
GARBAGE = [b"\x01", b"\xc1", b"\x93\x01", msgpack.dumps([1, 2]), msgpack.dumps(["x", None]), b"\x91" * 3000,
           msgpack.dumps((["list-type"], None, "forger")), msgpack.dumps(("heartbeat", None, "forger"))]


def _forge(wire: Wire) -> None:
    """Everything a stranger without the secret can send: Locust's hello, the harness's hello with a challenge of its
    own, a proof it made up, and then journal lines, metrics and garbage as if it had been let in."""
    wire.send("client_ready", version("locust"))
    wire.send("mrtr:hello", {"version": harness.__version__, "nonce": "0" * 64})
    challenge, _ = wire.until("mrtr:challenge")
    assert set(challenge) == {"nonce", "proof"}  # the master proves itself first; the stranger cannot answer
    wire.send("mrtr:auth", {"proof": "0" * 64})
    refused, _ = wire.until("mrtr:refused")
    assert "did not prove it holds MRTR_CLUSTER_SECRET" in refused
    wire.send("mrtr:journal", {"lines": [FORGED_LINE], "active": 0})
    wire.send("mrtr:journal", {"data": {"lines": [FORGED_LINE], "active": 0}, "n": 1, "mac": "0" * 64})
    wire.send("stats", {"mrtr": [["flow_started", "forged"]], "user_classes_count": {}, "user_count": 0})
    wire.send("mrtr:ready", None)
    wire.send("mrtr:finished", {"mrtr": []})
    for frame in GARBAGE:
        wire.socket.send(frame)


def test_a_stranger_without_the_secret_gets_no_setup_and_leaves_no_trace_in_the_run(tmp_path):
    port = free_port()
    results = tmp_path / "results"
    master = _start_master(results, port, "--duration", "5s", "--expect-workers", "1")
    stranger = Wire(zmq.DEALER, "forger")
    worker = None
    try:
        _wait_for_line(master, "waiting for 1 worker")
        stranger.socket.connect(f"tcp://127.0.0.1:{port}")
        _forge(stranger)
        worker = _start_worker(tmp_path / "machine", port)
        output, _ = master.communicate(timeout=150)
        worker_output, _ = worker.communicate(timeout=60)
        stranger.drain()
    finally:
        _stop(master, *([worker] if worker else []))
        stranger.close()
    assert master.returncode == 0, output
    assert worker.returncode == 0, worker_output
    assert "mrtr:setup" not in [kind for kind, _ in stranger.seen]
    assert "worker w0 of 1" in worker_output  # the real worker took index 0: the stranger took none
    assert "refused 1 node that did not prove MRTR_CLUSTER_SECRET" in output, output
    assert "frames that were no message" in output and "dropped" in output, output
    folder = next(path for path in results.iterdir() if path.is_dir())
    assert [path.name for path in folder.glob("journal-w*")] == ["journal-w0.jsonl"]
    leaked = [path.name for path in folder.rglob("*") if path.is_file() and FORGED_FLOW.encode() in path.read_bytes()]
    assert leaked == []
    assert b"forged" not in (folder / "metrics.prom").read_bytes()
    summary = Finished(0, output, folder).summary
    assert summary["status"] == "completed" and summary["flows"]["total"] > 0


def test_a_worker_obeys_nothing_from_a_master_that_cannot_prove_itself(tmp_path):
    """A ROUTER on the master's port answers the worker's hello with a made-up proof, then sends a setup anyway: the
    worker never sets up (no ready, no setup failure), says why, and exits 1."""
    port = free_port()
    impostor = Wire(zmq.ROUTER)
    impostor.socket.bind(f"tcp://127.0.0.1:{port}")
    worker = _start_worker(tmp_path / "machine", port)
    try:
        _, node = impostor.until("client_ready", timeout=60)
        assert node is not None
        impostor.send("ack", {"index": 0}, to=node)
        hello, _ = impostor.until("mrtr:hello")
        impostor.send("mrtr:challenge", {"nonce": "1" * 64, "proof": "2" * 64}, to=node)
        impostor.send("mrtr:setup", {"scenario": "{}", "urls": ["http://127.0.0.1:9/mcp"], "labels": ["r"],
                                     "index": 0, "workers": 1, "auth_url": None}, to=node)
        output, _ = worker.communicate(timeout=60)
        impostor.drain()
    finally:
        _stop(worker)
        impostor.close()
    assert worker.returncode == 1, output
    assert "the master did not prove it holds MRTR_CLUSTER_SECRET" in output, output
    assert {"mrtr:auth", "mrtr:ready", "mrtr:setup-failed"}.isdisjoint(kind for kind, _ in impostor.seen)
    assert "nonce" in hello


def test_a_worker_without_the_secret_cannot_start():
    env_without = {key: value for key, value in os.environ.items() if key != "MRTR_CLUSTER_SECRET"}
    done = subprocess.run([sys.executable, "-m", "harness", "worker", "--master-port", str(free_port())],
                          cwd=ROOT, env={**env_without, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stderr
    assert "MRTR_CLUSTER_SECRET is not set" in done.stderr


def test_a_worker_lost_before_the_load_starts_is_the_harness_s_failure_named_at_once(tmp_path):
    """One of two workers is killed once it is set up: the run does not wait out --expect-workers-max-wait (5m) and
    blame the target (exit 3); it says which worker was lost, and exits 4."""
    port = free_port()
    results = tmp_path / "results"
    master = _start_master(results, port, "--duration", "5s", "--expect-workers", "2",
                           "--expect-workers-max-wait", "5m")
    worker = None
    try:
        _wait_for_line(master, "waiting for 2 workers")
        worker = _start_worker(tmp_path / "machine", port)
        _wait_for_line(worker, "worker w0 of 2")
        worker.send_signal(signal.SIGKILL)
        output, _ = master.communicate(timeout=120)
    finally:
        _stop(master, *([worker] if worker else []))
    assert master.returncode == 4, output
    assert "worker w0 was lost before it finished" in output, output
    folder = next(path for path in results.iterdir() if path.is_dir())
    summary = valid_summary(folder / "summary.json")
    assert summary["status"] == "errored" and "worker w0" in summary["reason"]


def test_a_worker_lost_during_the_load_is_the_harness_s_failure_named_at_once(tmp_path):
    """One of two workers is killed once its flows reach the master: the run stops with a harness error naming it
    (exit 4), without waiting out its duration or the 30 s a worker has to finish."""
    port = free_port()
    results = tmp_path / "results"
    master = _start_master(results, port, "--duration", "10m", "--expect-workers", "2")
    workers: list[subprocess.Popen[str]] = []
    try:
        _wait_for_line(master, "waiting for 2 workers")
        workers = [_start_worker(tmp_path / f"machine-{number}", port) for number in range(2)]
        seen = {number: "".join(_wait_for_line(worker, " of 2: scenario")) for number, worker in enumerate(workers)}
        number, _ = next((number, text) for number, text in seen.items() if "worker w1 of 2" in text)
        folder = _wait_for_folder(results)
        _wait_for_growth(folder / "journal-w1.jsonl")
        workers[number].send_signal(signal.SIGKILL)
        output, _ = master.communicate(timeout=120)
    finally:
        _stop(master, *workers)
    assert master.returncode == 4, output
    assert "worker w1 was lost before it finished (its heartbeats stopped)" in output, output
    summary = valid_summary(folder / "summary.json")
    assert summary["status"] == "errored" and "worker w1" in summary["reason"]


def _wait_for_folder(results: Path, timeout: float = 60.0) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        folders = [path for path in results.iterdir() if path.is_dir()] if results.exists() else []
        if folders:
            return folders[0]
        time.sleep(0.1)
    raise AssertionError(f"no results folder in {results}")


def _wait_for_growth(part: Path, timeout: float = 60.0) -> None:
    """Until the master has written some of a worker's journal (its flows are running)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if part.exists() and part.stat().st_size > 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"{part} never grew")
