"""Real services for tests: find their binaries, start them, stop them.

Tests that need a real service (redis-server, prometheus, dockerd) go
through :func:`require_binary`, so one rule decides what a missing
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
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

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
    fail_or_skip(f"{name} is not on PATH (set {REQUIRE_SERVICES_ENV}=1 to make this a failure)",
                 failure=f"{name} is not on PATH and {REQUIRE_SERVICES_ENV}=1 requires it: "
                         f"install it (e.g. apt-get install {name}) or unset {REQUIRE_SERVICES_ENV}")


def fail_or_skip(reason: str, *, failure: str | None = None) -> NoReturn:
    """Skip the calling test for `reason`, or, with MRTR_REQUIRE_SERVICES=1, fail it (saying `failure`, if given)."""
    if services_required():
        pytest.fail(reason if failure is None else failure, pytrace=False)
    pytest.skip(reason)


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
    log = open(folder / f"redis-{port}.log", "wb")  # noqa: SIM115 - the server's log, for its life
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


def _start_on_a_free_port(start: Callable[[int], subprocess.Popen[bytes] | None], attempts: int, folder: Path,
                          logs: str, failure: str) -> tuple[subprocess.Popen[bytes], int]:
    """Start a service on a kernel-chosen free port, again on another one if another process took it first."""
    for _ in range(attempts):
        port = free_port()
        proc = start(port)
        if proc is not None:
            return proc, port
    tails = "\n".join(path.read_text(errors="replace")[-500:] for path in folder.glob(logs))
    raise RuntimeError(f"{failure} {attempts} times; last logs:\n{tails}")


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
        proc, port = _start_on_a_free_port(lambda port: _start_redis(binary, port, folder), attempts,
                                           folder, "redis-*.log", "redis-server exited at start")
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
    log = open(log_path, "wb")  # noqa: SIM115 - the server's log, for its life
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
        proc, port = _start_on_a_free_port(lambda port: _start_prometheus(binary, config, port, folder), attempts,
                                           folder, "prometheus-*.log", "prometheus could not bind a port")
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            stop_process(proc, timeout_s=10.0)


DOCKERD_START_TIMEOUT_S = 30.0
DOCKERD_STOP_TIMEOUT_S = 20.0
DOCKERD_STORAGE_ENV = "MRTR_DOCKERD_STORAGE_DRIVER"


def docker_engine_answers(timeout_s: float = 2.0, base_url: str | None = None) -> bool:
    """True if the engine at `base_url` (by default: the one DOCKER_HOST or the default socket names) answers a ping."""
    import docker

    try:
        client = docker.from_env(timeout=timeout_s) if base_url is None else \
            docker.DockerClient(base_url=base_url, timeout=timeout_s)
    except docker.errors.DockerException:
        return False
    try:
        return bool(client.ping())
    except (docker.errors.DockerException, OSError):
        return False
    finally:
        client.close()


def _start_dockerd(binary: str, folder: Path, driver: str) -> tuple[subprocess.Popen[bytes] | None, str]:
    """Start a private dockerd on a socket in `folder`; the process once it answers a ping, or None if it
    exited (e.g. the storage driver does not work here). Returns the process and its DOCKER_HOST."""
    host = f"unix://{folder / 'docker.sock'}"
    (folder / "daemon.json").write_text("{}\n")  # the host's /etc/docker/daemon.json must not apply
    log_path = folder / f"dockerd-{driver}.log"
    log = open(log_path, "wb")  # noqa: SIM115 - the server's log, for its life
    try:
        proc = subprocess.Popen(
            [binary, "--host", host, "--data-root", str(folder / "data"), "--exec-root", str(folder / "exec"),
             "--pidfile", str(folder / "docker.pid"), "--config-file", str(folder / "daemon.json"),
             "--iptables=false", "--ip6tables=false", "--bridge=none", "--storage-driver", driver],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )
    finally:
        log.close()
    deadline = time.monotonic() + DOCKERD_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return None, host
        if docker_engine_answers(timeout_s=2, base_url=host):
            return proc, host
        time.sleep(0.1)
    stop_process(proc, timeout_s=DOCKERD_STOP_TIMEOUT_S)
    raise RuntimeError(f"dockerd did not answer a ping within {DOCKERD_START_TIMEOUT_S:.0f} s; "
                       f"log: {log_path.read_text(errors='replace')[-2000:]}")


@contextmanager
def docker_engine() -> Iterator[str]:
    """A Docker engine for the test, as a DOCKER_HOST URL (also set in os.environ meanwhile).

    Uses the engine that already answers (DOCKER_HOST or the default socket); otherwise
    starts a private dockerd (its socket, data and exec roots in a temp folder; host
    networking only: --iptables=false --bridge=none; overlay2, then vfs if overlay2 does
    not work here, or the driver MRTR_DOCKERD_STORAGE_DRIVER names) and stops it by its
    PID at the end. Skips or fails per :func:`require_binary` when dockerd is missing.
    Subprocesses the test starts inherit DOCKER_HOST, so they reach the same engine.
    """
    if docker_engine_answers():
        yield os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        return
    binary = require_binary("dockerd")
    # A short path: containerd's sockets live under the exec root and unix socket paths are limited.
    folder = Path(tempfile.mkdtemp(prefix="mrtr-dockerd-", dir="/tmp"))
    drivers = [os.environ[DOCKERD_STORAGE_ENV]] if os.environ.get(DOCKERD_STORAGE_ENV) else ["overlay2", "vfs"]
    proc, host = None, ""
    try:
        for driver in drivers:
            proc, host = _start_dockerd(binary, folder, driver)
            if proc is not None:
                break
        if proc is None:
            logs = "\n".join(f"{p.name}: {p.read_text(errors='replace')[-800:]}" for p in folder.glob("dockerd-*.log"))
            raise RuntimeError(f"dockerd exited at start with every storage driver tried ({drivers}):\n{logs}")
        previous = os.environ.get("DOCKER_HOST")
        os.environ["DOCKER_HOST"] = host
        try:
            yield host
        finally:
            if previous is None:
                os.environ.pop("DOCKER_HOST", None)
            else:
                os.environ["DOCKER_HOST"] = previous
    finally:
        if proc is not None:
            stop_process(proc, timeout_s=DOCKERD_STOP_TIMEOUT_S)
        _unmount_under(folder)
        shutil.rmtree(folder, ignore_errors=True)


def mounts_under(folder: Path) -> list[str]:
    """The mount points inside `folder`, from /proc/self/mountinfo (OSError when it cannot be read)."""
    prefix = str(folder) + "/"
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [point for point in points if point.startswith(prefix)]


def _unmount_under(folder: Path) -> None:
    """Lazily unmount what our dockerd left mounted in its folder (e.g. exec-root/netns/default)."""
    try:
        points = mounts_under(folder)
    except OSError:
        return
    for point in sorted(set(points), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)



def sigint_default() -> None:
    """`preexec_fn` for a child a test will Ctrl-C: its SIGINT back to the default, whatever the suite inherited.

    CI may start jobs with SIGINT ignored (`nohup ... &`), children inherit that, and a
    Python child that starts with SIGINT ignored never raises KeyboardInterrupt: the test
    would wait for an exit that never comes.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
