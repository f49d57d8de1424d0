"""Real services for tests: find their binaries, start them, stop them.

Tests that need a real service (redis-server today; prometheus and dockerd
later) go through :func:`require_binary`, so one rule decides what a missing
service means:

* by default the test is *skipped*, with the reason, so a laptop without
  Redis can still run the rest of the suite;
* with ``MRTR_REQUIRE_SERVICES=1`` (CI, the reference machine) the test
  *fails*, so a missing service can never turn a whole class of tests into a
  silent green run.

Services are started on a free 127.0.0.1 port in a temporary folder and are
stopped by their own PID, never by name, so parallel runs and any service
the developer runs by hand are left alone.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

REQUIRE_SERVICES_ENV = "MRTR_REQUIRE_SERVICES"
REDIS_START_TIMEOUT_S = 10.0


def services_required() -> bool:
    """True when a missing service must fail the test instead of skipping it."""
    return os.environ.get(REQUIRE_SERVICES_ENV, "").strip() == "1"


def require_binary(name: str) -> str:
    """The full path of executable `name`, or skip/fail the calling test.

    Skips when the binary is not on PATH, unless MRTR_REQUIRE_SERVICES=1, in
    which case it fails with a message saying how to fix it.
    """
    path = shutil.which(name)
    if path is not None:
        return path
    if services_required():
        pytest.fail(
            f"{name} is not on PATH and {REQUIRE_SERVICES_ENV}=1 requires it: "
            f"install it (e.g. apt-get install {name}) or unset {REQUIRE_SERVICES_ENV}",
            pytrace=False,
        )
    pytest.skip(f"{name} is not on PATH (set {REQUIRE_SERVICES_ENV}=1 to make this a failure)")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (the OS picks it).

    Another process could take it before the caller binds it; callers that
    start a server retry with a new port when the server fails to start.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def redis_answers_ping(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """True if a Redis server at host:port answers PING with PONG.

    Speaks the protocol over a raw socket so this helper needs no client
    library.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = 5.0) -> None:
    """Stop a process we started, by its PID: SIGTERM, then SIGKILL if it lingers."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout_s)


def _start_redis(binary: str, port: int, folder: Path) -> subprocess.Popen[bytes] | None:
    """Start redis-server on port; the process once it answers PING, or None
    if it exited (usually: the port was taken meanwhile)."""
    log = open(folder / f"redis-{port}.log", "wb")
    try:
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(folder)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    finally:
        log.close()  # the child holds its own copy
    deadline = time.monotonic() + REDIS_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return None
        if redis_answers_ping("127.0.0.1", port):
            return proc
        time.sleep(0.02)
    stop_process(proc)
    raise RuntimeError(
        f"redis-server on port {port} did not answer PING within {REDIS_START_TIMEOUT_S:.0f} s; "
        f"log: {(folder / f'redis-{port}.log').read_text(errors='replace')[-2000:]}"
    )


@contextmanager
def redis_server(attempts: int = 3) -> Iterator[str]:
    """Run a throwaway redis-server and yield its URL, e.g. redis://127.0.0.1:41234/0.

    No persistence (--save '' --appendonly no), data folder in a temp dir,
    bound to 127.0.0.1 only.  Skips or fails per :func:`require_binary` when
    redis-server is missing.  The server is stopped by its PID on exit, even
    when the test fails.
    """
    binary = require_binary("redis-server")
    with tempfile.TemporaryDirectory(prefix="mrtr-redis-") as tmp:
        folder = Path(tmp)
        proc = None
        for _ in range(attempts):
            port = free_port()
            proc = _start_redis(binary, port, folder)
            if proc is not None:
                break
        if proc is None:
            logs = "\n".join(p.read_text(errors="replace")[-500:] for p in folder.glob("redis-*.log"))
            raise RuntimeError(f"redis-server exited at start {attempts} times; last logs:\n{logs}")
        try:
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            stop_process(proc)


PROMETHEUS_START_TIMEOUT_S = 20.0


def prometheus_ready(base_url: str, timeout_s: float = 0.5) -> bool:
    """True if the Prometheus at base_url answers /-/ready with 200 (TSDB open, config loaded)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{base_url}/-/ready", timeout=timeout_s) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _start_prometheus(binary: str, config: Path, port: int, folder: Path) -> subprocess.Popen[bytes] | None:
    """Start prometheus on port; the process once /-/ready answers, or None if it exited
    (usually: the port was taken meanwhile)."""
    log_path = folder / f"prometheus-{port}.log"
    log = open(log_path, "wb")
    try:
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={folder / f'data-{port}'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    finally:
        log.close()
    deadline = time.monotonic() + PROMETHEUS_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            if "address already in use" in log_path.read_text(errors="replace"):
                return None
            raise RuntimeError(f"prometheus exited at start (code {proc.returncode}); "
                               f"log: {log_path.read_text(errors='replace')[-2000:]}")
        if prometheus_ready(f"http://127.0.0.1:{port}"):
            return proc
        time.sleep(0.05)
    stop_process(proc)
    raise RuntimeError(
        f"prometheus on port {port} was not ready within {PROMETHEUS_START_TIMEOUT_S:.0f} s; "
        f"log: {log_path.read_text(errors='replace')[-2000:]}"
    )


@contextmanager
def prometheus_server(config_dir: Path, config_name: str = "prometheus.yml", attempts: int = 3) -> Iterator[str]:
    """Run a throwaway Prometheus on `config_dir/config_name` and yield its URL, e.g. http://127.0.0.1:41234.

    Relative paths in the config (file_sd files) resolve against `config_dir`, as
    Prometheus does for any config file. The TSDB lives in a temp dir; the server is
    bound to 127.0.0.1 only and stopped by its PID on exit, even when the test fails.
    Skips or fails per :func:`require_binary` when prometheus is missing.
    """
    binary = require_binary("prometheus")
    config = Path(config_dir) / config_name
    with tempfile.TemporaryDirectory(prefix="mrtr-prometheus-") as tmp:
        folder = Path(tmp)
        proc = None
        for _ in range(attempts):
            port = free_port()
            proc = _start_prometheus(binary, config, port, folder)
            if proc is not None:
                break
        if proc is None:
            logs = "\n".join(p.read_text(errors="replace")[-500:] for p in folder.glob("prometheus-*.log"))
            raise RuntimeError(f"prometheus could not bind a port {attempts} times; last logs:\n{logs}")
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            stop_process(proc, timeout_s=10.0)
