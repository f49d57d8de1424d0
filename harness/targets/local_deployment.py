"""A whole shop deployment as local processes: the API, N replicas (and, with auth, the authorization server)
on free 127.0.0.1 ports.

`mrtr-harness shop up` uses it by hand; the harness's process backend uses it to start,
restart, pause and stop replicas during a run. Every replica is started with the one
replica command, so what differs between replicas is only their options. Processes are
started in their own session, tied to the harness by its lifeline (they die with it, also
on SIGKILL: see `harness.processes.children`), and stopped by their PID, never by name.
"""

from __future__ import annotations

import functools
import http.client
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from harness.atomic_files import open_append
from harness.config.replica_knobs import REPLICA_KNOBS
from harness.mrtr.keys import fingerprint, new_key, read_ring, remove_rings, write_ring
from harness.processes.children import alive, free_port, harness_command, start_child
from harness.targets.auth_admin import AuthServerSpec, admin_call, auth_server_args
from harness.targets.redis_process import RedisProcess
from harness.targets.zygote import Zygote, ZygoteError, borrowed_zygote

READY_TIMEOUT = 60.0
"""Seconds a process gets to answer /healthz before the deployment gives up on it."""


class DeploymentError(RuntimeError):
    """A process of the deployment could not be started or did not become ready."""


@dataclass
class ManagedProcess:
    """A process this deployment started: its command, its log file and its health URL.

    Started as a new interpreter, or (a replica, when a `Zygote` is given) forked from a
    parent that has the replica's code imported already; either way it is stopped by its PID.
    """

    label: str
    command: list[str]
    port: int
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    zygote: Zygote | None = None
    process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None
    _forked: int | None = None
    _terminated: bool = False

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The process's PID (forked by the zygote or started by us), None before it starts."""
        return self.process.pid if self.process is not None else self._forked

    def running(self) -> bool:
        if self._forked is not None:
            return alive(self._forked)
        return self.process is not None and self.process.poll() is None

    def start(self, stderr: int | IO[bytes] | None = None) -> None:
        """Start the process; its output goes to its log file unless the caller wants the pipe."""
        self._terminated = False
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        replica_command = harness_command("shop", "replica")
        if self.zygote is not None and stderr is None and self.command[:len(replica_command)] == replica_command:
            self._forked = self.zygote.spawn(self.command[len(replica_command):], self.log_path, self.env)
            return
        if stderr is None:
            self._log = open_append(self.log_path, binary=True)  # held for the life of the process
            stderr = self._log
        self.process = start_child(self.command, stdout=stderr, stderr=stderr, stdin=subprocess.DEVNULL,
                                   env={**os.environ, **self.env})

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> float:
        """Poll /healthz until it answers 200; returns the seconds it took.

        With the standard library's plain HTTP client: an `httpx` client loads the CA
        bundle when it is made (tens of ms of CPU, for a loopback URL that never uses
        TLS), and a run's start-up waits on four or more of these.
        """
        started = time.monotonic()
        deadline = started + timeout
        while time.monotonic() < deadline:
            if not self.running():
                code = self.process.returncode if self.process else "?"
                raise DeploymentError(f"{self.label} exited with code {code} before it was ready; "
                                      f"see {self.log_path}")
            if _answers_as(self.port, self.pid):
                return time.monotonic() - started
            time.sleep(0.05)
        raise DeploymentError(f"{self.label} did not answer {self.base_url}/healthz within {timeout:g}s; "
                              f"see {self.log_path}")

    def signal(self, signum: int) -> None:
        pid = self.pid
        if pid is not None and self.running():
            os.kill(pid, signum)

    def terminate(self) -> None:
        """SIGTERM without waiting (resumed first so it can exit); `stop` then waits for it. Asked once: a second
        SIGTERM makes uvicorn skip its graceful shutdown."""
        if not self._terminated and self.running():
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            self._terminated = True

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after `timeout`; resumes a paused process first so it can exit."""
        if self._forked is not None:
            self._stop_forked(timeout)
            return
        if self.process is None:
            return
        if self.process.poll() is None:
            self.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.process.wait(timeout)
        if self._log is not None:
            self._log.close()
            self._log = None

    def kill(self) -> None:
        """SIGKILL without grace, as a crash would."""
        if self.running():
            self.signal(signal.SIGKILL)
            if self.process is not None:
                self.process.wait(5.0)
            else:
                _wait_gone(self, 5.0)

    def _stop_forked(self, timeout: float) -> None:
        """As `stop`, for a process forked by the zygote (not our child: we watch its PID, the kernel reaps it)."""
        if self.running():
            self.terminate()
            if not _wait_gone(self, timeout):
                self.signal(signal.SIGKILL)
                _wait_gone(self, timeout)


def _stop_together(processes: Sequence[ManagedProcess]) -> None:
    """SIGTERM to each (resumed first), then wait for each as `stop` does."""
    for process in processes:
        process.terminate()
    for process in processes:
        process.stop()


PORT_TRIES = 3
"""Starts of a process on a port picked free, when each before lost its port to another program."""


def _ready_on_its_own_port(process: ManagedProcess, remake: Callable[[int], ManagedProcess]) -> ManagedProcess:
    """The started process once ready; when it ended having lost its port (picked free, taken by another program
    before it bound it), the same process started again on another port by `remake`: the harness's own race, never
    the target's failure. Any other end before ready is the deployment's error, as `wait_ready` says."""
    for _ in range(PORT_TRIES - 1):
        try:
            process.wait_ready()
            return process
        except DeploymentError:
            if process.running() or not _lost_its_port(process.log_path):
                raise
        process.stop()
        process = remake(free_port())
        process.start()
    process.wait_ready()
    return process


def _lost_its_port(log_path: Path) -> bool:
    """Whether the process's log ends with a failed bind (uvicorn's "address already in use")."""
    try:
        with open(log_path, "rb") as log:
            log.seek(max(log.seek(0, os.SEEK_END) - 4096, 0))
            return b"address already in use" in log.read()
    except OSError:
        return False


def _answers_as(port: int, pid: int | None) -> bool:
    """Whether `GET /healthz` on 127.0.0.1:`port` answers 200 from process `pid` (the shop's parts name their PID).

    A port picked free may be taken by another process before ours binds it; ours then exits, and
    a 200 from the other one must not pass for ours being ready.
    """
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1.0)
    try:
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        if response.status != 200:
            return False
        body = json.loads(response.read(65536) or b"null")
    except (OSError, http.client.HTTPException, ValueError):
        return False
    finally:
        connection.close()
    return isinstance(body, dict) and body.get("pid") == pid


def _wait_gone(process: ManagedProcess, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while process.running():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


class AuthServerProcess:
    """The authorization server's process (public port + 127.0.0.1 admin port), its issuer URL and admin calls."""

    def __init__(self, spec: AuthServerSpec, log_path: Path) -> None:
        self.spec = spec
        self.port = free_port()
        self.admin_port = free_port()
        self.process = ManagedProcess("auth", harness_command(*auth_server_args(spec, self.port, self.admin_port)),
                                      self.port, log_path)
        self.changed = False
        """Whether chaos changed anything since the start or the last reset (what rollback must undo)."""

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.process.start()
        self.process.wait_ready()

    def stop(self) -> None:
        self.process.stop()

    def admin(self, action: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One admin call (`admin_call`); a change, not a look, is what rollback must undo."""
        answer = admin_call(self.admin_port, action, body)
        if action not in ("state", "reset"):
            self.changed = True
        return answer

    def reset(self) -> bool:
        """Everything chaos changed put back; True when there was something to put back."""
        if not self.changed or not self.process.running():
            return False
        self.admin("reset", {})
        self.changed = False
        return True


@dataclass
class ReplicaOptions:
    """Per-replica overrides of the deployment's defaults; None (0 for the clock): the deployment's own. `store`,
    `ttl`, `name` and `clock_offset` are the knobs chaos turns (`harness.config.replica_knobs`)."""

    keyring: str | None = None
    store: str | None = None
    answers_store: str | None = None
    ttl: str | float | None = None
    """text ("10m") or real seconds."""
    name: str | None = None
    clock_offset: float = 0.0
    leak: float = 0.0
    """MB a minute the replica's memory grows while it serves (`shop replica --leak`)."""
    principal_header: str | None = None
    launch: str = "cli"  # "cli": mrtr-harness shop replica; "module": python -m harness.shop.server
    sse: bool = False
    serve_2025: bool = False
    """Ask 2025-era sessions with `elicitation/create` (both eras served), not with input requests (-32603)."""
    payment_rounds: int | None = None
    """pay_refund's URL-mode round count (0: none, an abandoned page asks until the client's cap); None: the shop's."""
    auth: bool = True  # False: started without the deployment's authorization server (a rollout that missed it)


def replica_args(label: str, port: int | None, api_url: str, options: ReplicaOptions, *, store: str, keyring: str,
                 ttl: str, name: str, auth_issuer: str | None = None, auth_audience: str | None = None) -> list[str]:
    """The replica command's arguments (after `shop replica` or `-m harness.shop.server`): `options`, else the
    deployment's defaults `store`, `keyring`, `ttl` and `name`; with `auth_issuer`, a resource server trusting that
    issuer's tokens. Every backend starts its replicas with these (`port` None: a stdio replica, which has none)."""
    own = {"store": store, "ttl": ttl, "name": name, "clock_offset": 0.0, "leak": 0.0}
    args = [*(["--port", str(port)] if port is not None else []), "--api", api_url, "--replica-id", label,
            "--keyring", options.keyring or keyring]
    for knob in REPLICA_KNOBS:
        args += knob.argument(getattr(options, knob.name) or own[knob.name])
    if auth_issuer is not None and options.auth:
        args += ["--auth-issuer", auth_issuer, *(["--auth-audience", auth_audience] if auth_audience else [])]
    if options.answers_store:
        args += ["--answers-store", options.answers_store]
    if options.principal_header and auth_issuer is None:  # with auth on, the SDK binds states to the token
        args += ["--principal-header", options.principal_header]
    if options.sse:
        args.append("--sse")
    if options.serve_2025:
        args.append("--serve-2025")
    if options.payment_rounds is not None:
        args += ["--payment-rounds", str(options.payment_rounds)]
    return args


class LocalDeployment:
    """The API and replicas as child processes, sharing one store and one key-ring file."""

    def __init__(self, workdir: Path, *, replicas: int = 3, store: str | None = None, ttl: str = "10m",
                 name: str = "shop", keyring: str | None = None, seed: int | None = None,
                 ring_per_replica: bool = False, fork_replicas: bool = True, release_guard: bool = True,
                 auth: AuthServerSpec | None = None) -> None:
        self.workdir = workdir
        self.release_guard = release_guard
        """False: the API releases a released refund again (`shop api --no-release-guard`)."""
        self.auth = AuthServerProcess(auth, workdir / "logs" / "auth.log") if auth is not None else None
        """The shop's authorization server, started before the replicas, which verify its tokens."""
        self.fork_replicas = fork_replicas
        """Fork replicas from a `Zygote` that imported their code once (fast restarts), else start interpreters."""
        self.zygote: Zygote | None = None
        self.zygote_borrowed = False
        """Whether `zygote` is the one a hunt lends (`harness.targets.zygote.lent_zygote`): left running at the stop."""
        self.ring_path = workdir / "keyring"
        self.ring_per_replica = ring_per_replica
        self.store = store or f"sqlite:{workdir / 'shop.db'}"
        self.ttl, self.name, self.seed = ttl, name, seed
        self.keyring = keyring or f"file:{self.ring_path}"
        self.replica_count = replicas
        self.api: ManagedProcess | None = None
        self.replicas: list[ManagedProcess] = []
        self.options: list[ReplicaOptions] = []

    @property
    def replica_urls(self) -> list[str]:
        return [f"{replica.base_url}/mcp" for replica in self.replicas]

    def start(self, options: Sequence[ReplicaOptions] | None = None) -> None:
        """Write a fresh ring if none is given, start the API, then every replica; wait for all.

        `options` gives replicas their own knobs (one entry per replica, and it sets the
        replica count); without it every replica uses the deployment's defaults.
        """
        if self._owns_ring and not self.ring_path.exists():
            write_ring(self.ring_path, [new_key()])
        self.api = self._api_process(free_port())
        self.api.start()
        self.api = _ready_on_its_own_port(self.api, self._api_process)
        if self.auth is not None:
            self.auth.start()
        self.options = list(options) if options is not None else [ReplicaOptions() for _ in range(self.replica_count)]
        self.replica_count = len(self.options)
        if self._owns_ring and self.ring_per_replica:
            for index in range(self.replica_count):
                write_ring(self.ring_file(index), self.ring())
        for index in range(self.replica_count):
            self.replicas.append(self._replica_process(index, self.options[index], port=free_port()))
        for replica in self.replicas:
            replica.start()
        for index, replica in enumerate(self.replicas):
            self.replicas[index] = _ready_on_its_own_port(
                replica, functools.partial(self._replica_process, index, self.options[index]))

    def _api_process(self, port: int) -> ManagedProcess:
        args = ["shop", "api", "--port", str(port), "--store", self.store]
        if self.seed is not None:
            args += ["--seed", str(self.seed)]
        if not self.release_guard:
            args.append("--no-release-guard")
        return ManagedProcess("api", harness_command(*args), port, self.workdir / "logs" / "api.log")

    def _replica_process(self, index: int, options: ReplicaOptions, port: int) -> ManagedProcess:
        assert self.api is not None
        label = f"r{index + 1}"
        keyring = f"file:{self.ring_file(index)}" if self._owns_ring else self.keyring
        args = replica_args(label, port, self.api.base_url, options, store=self.store, keyring=keyring,
                            ttl=self.ttl, name=self.name, auth_issuer=self.auth.issuer if self.auth else None,
                            auth_audience=self.auth.spec.audience if self.auth else None)
        if options.launch == "module":
            return ManagedProcess(label, [sys.executable, "-m", "harness.shop.server", *args], port,
                                  self.workdir / "logs" / f"{label}.log")
        return ManagedProcess(label, harness_command("shop", "replica", *args), port,
                              self.workdir / "logs" / f"{label}.log", zygote=self._zygote())

    def _zygote(self) -> Zygote | None:
        """The replicas' zygote, started on first use; None (interpreters instead) when off or when it failed."""
        if self.fork_replicas and self.zygote is None and (lent := borrowed_zygote()) is not None:
            self.zygote, self.zygote_borrowed = lent, True
        if self.fork_replicas and self.zygote is None:
            try:
                self.zygote = Zygote(self.workdir / "logs" / "zygote.log")
            except (ZygoteError, OSError):
                self.fork_replicas = False  # slower starts, same behaviour
        return self.zygote

    def restart_replica(self, index: int, *, kill: bool = False, options: ReplicaOptions | None = None,
                        stderr: int | IO[bytes] | None = None) -> float:
        """Stop (gracefully, or kill -9) and start replica `index` on the same port; returns seconds to ready."""
        replica = self.replicas[index]
        replica.kill() if kill else replica.stop()
        if options is not None:
            self.options[index] = options
        self.replicas[index] = self._replica_process(index, self.options[index], replica.port)
        started = time.monotonic()
        self.replicas[index].start(stderr)
        self.replicas[index].wait_ready()
        return time.monotonic() - started

    @property
    def _owns_ring(self) -> bool:
        """True when the deployment manages the ring files itself (the default `file:` ring)."""
        return self.keyring == f"file:{self.ring_path}"

    def ring_file(self, index: int | None = None) -> Path:
        """The ring file replica `index` reads: its own, or the shared one."""
        if index is None or not self.ring_per_replica:
            return self.ring_path
        return self.workdir / "rings" / f"r{index + 1}"

    def rotate(self, keys: Sequence[str], replicas: Sequence[int] | None = None) -> list[str]:
        """Rewrite ring files (all, or those of `replicas`); replicas re-read them on their next token.

        Returns the fingerprints of the new ring, sealing key first.
        """
        targets = [None] if not self.ring_per_replica else list(replicas if replicas is not None
                                                                  else range(self.replica_count))
        for index in targets:
            write_ring(self.ring_file(index), keys)
        if self.ring_per_replica and replicas is None:
            write_ring(self.ring_path, keys)
        return [fingerprint(key) for key in keys]

    def ring(self, index: int | None = None) -> list[str]:
        return read_ring(self.ring_file(index))

    def remove_rings(self) -> None:
        """Delete the ring files this deployment wrote (its replicas keep their keys in memory until they stop)."""
        if self._owns_ring:
            remove_rings([self.ring_path, *(self.ring_file(index) for index in range(self.replica_count))])

    def stop(self) -> None:
        """Stop every process this deployment started, replicas first, by PID: each group is asked at once and then
        waited for (SIGKILL after its grace), so the stop takes the slowest one's time, not their sum. A borrowed
        zygote is left to its lender."""
        _stop_together(self.replicas)
        if self.zygote is not None and not self.zygote_borrowed:
            self.zygote.stop()
        self.zygote, self.zygote_borrowed = None, False
        _stop_together([process for process in (self.api, self.auth.process if self.auth else None)
                        if process is not None])

    def __enter__(self) -> LocalDeployment:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def shop_store(redis: RedisProcess | None, workdir: Path) -> str:
    """The store a local shop's API and replicas share: its Redis, started (its port is known only then), else a
    SQLite file in `workdir`."""
    if redis is not None:
        redis.start()
        return redis.url
    return f"sqlite:{workdir / 'shop.db'}"


def stop_shop(deployment: LocalDeployment | None, redis: RedisProcess | None) -> None:
    """Stop a local shop's processes by PID and delete its ring files (no key stays in a results folder), then its
    Redis."""
    if deployment is not None:
        deployment.stop()
        deployment.remove_rings()
    if redis is not None:
        redis.stop()
