"""The docker target: the shop's replicas as containers, broken through the engine's API.

Two ways to get replicas, told apart by the scenario's `target`:

- `image = "..."`: the harness creates the deployment from that image: the shop's API
  and N replicas, each a container with host networking on a free 127.0.0.1 port, found
  again by the harness's labels (`mrtr-harness.run=<id>`, `mrtr-harness.replica=rN`),
  removed at the end. The sqlite store lives in a folder bind-mounted into all of them;
  each replica reads its own key-ring file in a bind-mounted folder, so a rotation rolls
  out replica by replica, in order or not, like the process backend's.
- `compose_project = "..."` (and optionally `compose_service`): a deployment the harness
  did not create, found by compose's labels. Its replica URLs come from `urls`, or from
  each container's `--port` (host networking) or published port. It is left running at
  the end, rolled back to how it was found.

Every chaos action goes through the engine: restart (`container.restart`), kill and
start, pause and unpause; TTL, name, clock and store changes recreate the container with
the replica command's flags changed (same name, labels, mounts, network). A replica's
ring is the host file behind its `--keyring file:PATH`, found through its mounts.
Replica logs are followed through the engine by label (`LogSource` kind "docker"), so a
restarted or recreated container is picked up again.

The engine cannot tie a container's life to a process, so a harness killed with SIGKILL
cannot remove its containers. Each container it creates is labelled with the run id,
the harness's PID and this machine's host name (`mrtr-harness.harness-pid`,
`mrtr-harness.host`), and every docker-target run starts by removing the containers
whose harness (same host, that PID) is no longer alive: leftovers live until the next
docker run on this machine (or, when no run is going on, `docker rm -f $(docker ps -aq
--filter label=mrtr-harness.run)`).
The ring files in the target folder are deleted when the target stops.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import httpx

from harness.config.logs import COMPOSE_NUMBER, COMPOSE_PROJECT, COMPOSE_SERVICE, DOCKER_PREFIX, LogSource
from harness.config.replica_knobs import KNOBS
from harness.config.scenario import Scenario
from harness.mrtr.keys import new_key, read_ring, remove_rings, rewrite_ring_in_place, write_ring
from harness.processes.children import alive, descendants, free_port, process_cpu_seconds
from harness.targets.embedded import replica_options
from harness.targets.health import ReplicaHealth, from_docker_stats, from_process
from harness.targets.image import (
    HOST_PYTHON_IMAGE,
    RunSpec,
    ensure_host_python_image,
    host_python_run_spec,
    installed_run_spec,
    is_host_python,
)
from harness.targets.interface import ChaosUnsupported, NoAuthServer, ReplicaChange, RingKeys, TargetError
from harness.targets.ledger_check import LedgerAtApi
from harness.targets.local_deployment import replica_args
from harness.targets.redis_process import RedisProcess

RUN_LABEL = "mrtr-harness.run"
REPLICA_LABEL = "mrtr-harness.replica"
ROLE_LABEL = "mrtr-harness.role"
HARNESS_PID_LABEL = "mrtr-harness.harness-pid"
HOST_LABEL = "mrtr-harness.host"

READY_TIMEOUT = 30.0
STOP_TIMEOUT = 5
ENGINE_TIMEOUT = 60


def log_location(selector: dict[str, str]) -> str:
    return DOCKER_PREFIX + ",".join(f"{key}={value}" for key, value in selector.items())


@dataclass
class _Replica:
    label: str
    url: str
    selector: dict[str, str]
    container: Any
    original_command: list[str] = field(default_factory=list)
    original_ring: list[str] = field(default_factory=list)


class DockerTarget(NoAuthServer, RingKeys, LedgerAtApi):
    """Replicas as containers of a real Docker engine; the same chaos as the process backend."""

    def __init__(self, scenario: Scenario, workdir: Path) -> None:
        self.scenario = scenario
        self.workdir = workdir
        spec = scenario.target
        self.compose = spec.compose_project is not None
        self.run_id = f"{workdir.parent.name or 'run'}-{secrets.token_hex(3)}"
        self.redis = RedisProcess(workdir / "redis") if spec.store == "redis" and not self.compose else None
        self.client: Any = None
        self.replicas: list[_Replica] = []
        self.api_container: Any = None
        self.paused: set[int] = set()
        self.labels: list[str] = [] if self.compose else [f"r{n + 1}" for n in range(spec.replicas)]
        self.urls: list[str] = []
        self._balancer: str | None = None
        self.api_url: str | None = None
        self.orphans_removed: list[str] = []
        """Names of containers left by a harness that died (removed when this target started)."""

    # --- up and down -------------------------------------------------------------------------

    def start(self) -> None:
        import docker

        try:
            self.client = docker.from_env(timeout=ENGINE_TIMEOUT)
            self.client.ping()
        except docker.errors.DockerException as exc:
            raise TargetError(f"no Docker engine answers (DOCKER_HOST or the default socket): {exc}") from None
        try:
            if not self.compose:
                self.orphans_removed = remove_orphans(self.client)
            self._find_compose() if self.compose else self._create()
        except docker.errors.DockerException as exc:
            self.stop()
            raise TargetError(f"docker: {exc}") from None
        except TargetError:
            self.stop()
            raise
        for index, replica in enumerate(self.replicas):
            replica.original_command = _command(replica.container)
            replica.original_ring = self._ring_or_empty(index)
        self.labels = [replica.label for replica in self.replicas]
        # Rounds go to the balancer when the scenario names one (it then hides which replica
        # served them); chaos, logs and readiness still address every replica directly.
        self.urls = [self._balancer] if self._balancer else [replica.url for replica in self.replicas]

    def stop(self) -> None:
        """Remove every container this run created (by its run label) and its ring files; a compose deployment
        is left running, its rings untouched."""
        if self.client is not None and not self.compose:
            for container in self.client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={self.run_id}"}):
                with contextlib.suppress(Exception):
                    container.remove(force=True)
        if not self.compose:
            remove_rings([self.workdir / "rings" / label for label in self.labels])
        if self.redis is not None:
            self.redis.stop()
        if self.client is not None:
            self.client.close()
            self.client = None

    def _create(self) -> None:
        spec = self.scenario.target
        assert spec.image is not None
        rings, store_dir = self.workdir / "rings", self.workdir / "store"
        run_spec = self._run_spec(spec.image, [rings, store_dir])
        if self.redis is not None:
            self.redis.start()
            store = self.redis.url
        else:
            store = f"sqlite:{store_dir.resolve() / 'shop.db'}"
        if spec.keyring == "file":
            key = new_key()
            for label in self.labels:
                write_ring(rings / label, [key])
        api_port = free_port()
        self.api_container = self._run(run_spec, run_spec.module("harness", "shop", "api", "--port", str(api_port),
                                                                 "--store", store),
                                       {ROLE_LABEL: "api"}, "api")
        self.api_url = f"http://127.0.0.1:{api_port}"
        for label, options in zip(self.labels, replica_options(spec), strict=True):
            port = free_port()
            keyring = f"file:{(rings / label).resolve()}" if spec.keyring == "file" else "ephemeral"
            args = replica_args(label, port, self.api_url, options, store=store, keyring=keyring,
                                ttl=f"{self.scenario.real(spec.ttl)}", name=spec.name)
            module = ["harness.shop.server"] if options.launch == "module" else ["harness", "shop", "replica"]
            command = run_spec.module(module[0], *module[1:], *args)
            selector = {RUN_LABEL: self.run_id, REPLICA_LABEL: label}
            container = self._run(run_spec, command, {ROLE_LABEL: "replica", REPLICA_LABEL: label}, label)
            self.replicas.append(_Replica(label, f"http://127.0.0.1:{port}/mcp", selector, container))
        # Replicas reach the API only when a tool runs, so every container starts at once and is waited for here.
        self._wait_ready(self.api_container, self.api_url, "api")
        for replica in self.replicas:
            self._wait_ready(replica.container, _base(replica.url), replica.label)

    def _run_spec(self, image: str, shared: list[Path]) -> RunSpec:
        import docker

        if image == HOST_PYTHON_IMAGE:
            found = ensure_host_python_image(self.client, image)
        else:
            try:
                found = self.client.images.get(image)
            except docker.errors.ImageNotFound:
                raise TargetError(f"image {image!r} is not on this Docker engine (no registry is used): build it "
                                  f"first, or use image = {HOST_PYTHON_IMAGE!r} (made here, from this "
                                  f"interpreter)") from None
        return host_python_run_spec(shared, image) if is_host_python(found) else installed_run_spec(image, shared)

    def _run(self, run_spec: RunSpec, command: list[str], labels: dict[str, str], role: str) -> Any:
        owner = {RUN_LABEL: self.run_id, HARNESS_PID_LABEL: str(os.getpid()), HOST_LABEL: socket.gethostname()}
        return self.client.containers.run(command=command, detach=True, name=f"mrtr-{self.run_id}-{role}",
                                          labels={**owner, **labels}, **run_spec.options())

    def _find_compose(self) -> None:
        spec = self.scenario.target
        filters = [f"{COMPOSE_PROJECT}={spec.compose_project}"]
        if spec.compose_service:
            filters.append(f"{COMPOSE_SERVICE}={spec.compose_service}")
        found = [container for container in self.client.containers.list(all=True, filters={"label": filters})
                 if spec.compose_service or _is_replica(container)]
        found.sort(key=lambda c: (c.labels.get(COMPOSE_SERVICE, ""), int(c.labels.get(COMPOSE_NUMBER, "0") or 0)))
        where = f"compose project {spec.compose_project!r}" + \
            (f" service {spec.compose_service!r}" if spec.compose_service else "")
        if len(found) != spec.replicas:
            raise TargetError(f"{where} has {len(found)} replica container(s), the scenario says replicas = "
                              f"{spec.replicas}")
        balancer = len(spec.urls) == 1 and len(found) > 1
        if spec.urls and len(spec.urls) != len(found) and not balancer:
            raise TargetError(f"{where} has {len(found)} replica container(s) but urls names {len(spec.urls)}: "
                              f"name one URL per replica, one balancer URL, or none to reach each replica directly")
        down = [f"{container.name} ({container.status})" for container in found if container.status != "running"]
        if down:
            raise TargetError(f"{where}: replica containers not running: {', '.join(down)}; start the deployment first")
        for index, container in enumerate(found):
            number = container.labels.get(COMPOSE_NUMBER, str(index + 1))
            label = _flag(_command(container), "--replica-id") or f"r{number}"
            url = spec.urls[index] if spec.urls and not balancer else _compose_url(container)
            selector = {key: container.labels[key] for key in (COMPOSE_PROJECT, COMPOSE_SERVICE, COMPOSE_NUMBER)
                        if key in container.labels}
            self.replicas.append(_Replica(label, url, selector, container))
        self.api_url = spec.api.rstrip("/") if spec.api else None
        for replica in self.replicas:
            self._wait_ready(replica.container, _base(replica.url), replica.label)
        self._balancer = spec.urls[0] if balancer else None

    # --- what a run reads --------------------------------------------------------------------

    def log_sources(self) -> list[LogSource]:
        return [LogSource("docker", log_location(replica.selector), replica.label) for replica in self.replicas]

    def replicas_up(self) -> int:
        up = 0
        for index, replica in enumerate(self.replicas):
            with contextlib.suppress(Exception):
                replica.container.reload()
                up += replica.container.status == "running" and index not in self.paused
        return up

    def cpu_seconds(self) -> dict[str, tuple[int, float]]:
        """(pid, CPU seconds so far) of each replica's and the API's process, when the engine runs on this host."""
        seen: dict[str, tuple[int, float]] = {}
        for label, container in self._containers():
            pid = _host_pid(container)
            cpu = process_cpu_seconds(pid) if pid is not None else None
            if pid is not None and cpu is not None:
                seen[label] = (pid, cpu)
        return seen

    def replica_health(self) -> dict[str, ReplicaHealth]:
        """Each replica's container: its first process from /proc when the engine runs on this host (all four
        figures), else the container's stats through the engine (no descriptor count there)."""
        seen: dict[str, ReplicaHealth] = {}
        for replica in self.replicas:
            health = from_process(_host_pid(replica.container))
            if health is None:
                with contextlib.suppress(Exception):  # a container gone or an engine that refuses: no sample now
                    health = from_docker_stats(replica.container.stats(stream=False))
            if health is not None:
                seen[replica.label] = health
        return seen

    def target_pids(self) -> set[int]:
        """Every process inside the replicas' and the API's containers (when the engine runs on this host), and
        redis-server."""
        pids: set[int] = set()
        for _, container in self._containers():
            pid = _host_pid(container)
            if pid is not None:
                pids |= {pid, *descendants(pid)}
        if self.redis is not None and self.redis.process is not None:
            pids.add(self.redis.process.pid)
        return pids

    def _containers(self) -> list[tuple[str, Any]]:
        containers = [(replica.label, replica.container) for replica in self.replicas]
        if self.api_container is not None:
            containers.append(("api", self.api_container))
        return containers

    # --- chaos operations --------------------------------------------------------------------

    def restart(self, index: int, *, kill: bool = False) -> float:
        replica = self.replicas[index]
        self._unpause(index)
        started = time.monotonic()
        if kill:
            replica.container.kill()
            replica.container.wait(timeout=READY_TIMEOUT)
            replica.container.start()
        else:
            replica.container.restart(timeout=STOP_TIMEOUT)
        self._wait_ready(replica.container, _base(replica.url), replica.label)
        return time.monotonic() - started

    def pause(self, index: int) -> None:
        self.replicas[index].container.pause()
        self.paused.add(index)

    def resume(self, index: int) -> None:
        self._unpause(index)

    def _unpause(self, index: int) -> None:
        container = self.replicas[index].container
        container.reload()
        if container.status == "paused":
            container.unpause()
        self.paused.discard(index)

    def reconfigure(self, replicas: Sequence[int], change: ReplicaChange) -> list[float]:
        """Recreate each replica with its command's flags changed, each knob's option (`harness.config.replica_knobs`:
        --ttl in real seconds, --name, --clock-offset, --store)."""
        ready = []
        for index in replicas:
            command = _command(self.replicas[index].container)
            for key, value in change.changed().items():
                command = _with_flag(command, *KNOBS[key].argument(value))
            ready.append(self._recreate(index, command))
        return ready

    def _recreate(self, index: int, command: list[str]) -> float:
        """Stop and remove the replica's container, then create it again (same name, labels, mounts, network)."""
        replica = self.replicas[index]
        self._unpause(index)
        replica.container.reload()
        attrs = replica.container.attrs
        config, host_config = attrs["Config"], attrs["HostConfig"]
        name = attrs["Name"].lstrip("/")
        mode = host_config.get("NetworkMode") or ""
        networks = dict(attrs["NetworkSettings"].get("Networks") or {})
        replica.container.stop(timeout=STOP_TIMEOUT)
        replica.container.remove()
        joined: dict[str, Any] = {}
        if networks and mode not in ("host", "none") and not mode.startswith("container:"):
            first = mode if mode in networks else next(iter(networks))
            joined = {first: networks.pop(first)}
        api = self.client.api
        created = api.create_container(
            image=config["Image"], command=command, entrypoint=config.get("Entrypoint"),
            environment=config.get("Env"), labels=config.get("Labels"), name=name,
            working_dir=config.get("WorkingDir") or None, user=config.get("User") or None,
            ports=[tuple(port.split("/", 1)) for port in (config.get("ExposedPorts") or {})] or None,
            stop_signal=config.get("StopSignal"), healthcheck=config.get("Healthcheck"),
            tty=bool(config.get("Tty")), host_config=host_config,
            networking_config={"EndpointsConfig": {net: _endpoint(ep) for net, ep in joined.items()}}
            if joined else None)
        for net, endpoint in networks.items():
            if mode not in ("host", "none"):
                api.connect_container_to_network(created["Id"], net, aliases=endpoint.get("Aliases"))
        started = time.monotonic()
        api.start(created["Id"])
        replica.container = self.client.containers.get(created["Id"])
        self._wait_ready(replica.container, _base(replica.url), replica.label)
        return time.monotonic() - started

    def ring(self, index: int) -> list[str]:
        path, _ = self._ring_file(self.replicas[index])
        return read_ring(path)

    def set_ring(self, index: int, keys: list[str]) -> None:
        path, whole_file = self._ring_file(self.replicas[index])
        if whole_file:  # the file itself is mounted: a rename would not reach the container, rewrite in place
            rewrite_ring_in_place(path, keys)
        else:
            write_ring(path, keys)

    def _ring_file(self, replica: _Replica) -> tuple[Path, bool]:
        """The host path of the replica's ring file, and whether that file (not its folder) is the mount."""
        keyring = _flag(_command(replica.container), "--keyring") or "ephemeral"
        if not keyring.startswith("file:"):
            raise ChaosUnsupported(f"replica {replica.label} has no key-ring file (--keyring {keyring.split(':')[0]})")
        inside = PurePosixPath(keyring.removeprefix("file:"))
        for mount in sorted(replica.container.attrs.get("Mounts") or [], key=lambda m: -len(m["Destination"])):
            destination = PurePosixPath(mount["Destination"])
            if mount.get("Type") in ("bind", "volume") and (inside == destination or destination in inside.parents):
                # Where the harness sees the file: the mount's source on this host, or (a harness in a
                # container that mounts the same volume, as in docker-compose.yml) the same path as the replica.
                for path in (Path(mount["Source"]) / inside.relative_to(destination), Path(inside)):
                    if path.exists():
                        return path, inside == destination
        raise ChaosUnsupported(f"the key ring of replica {replica.label} ({inside}) is in no mount this harness "
                               f"can reach")

    def rollback(self) -> list[str]:
        """Every replica running with its original command and ring; returns what had to be undone."""
        undone = []
        for index in sorted(self.paused):
            self.resume(index)
            undone.append(f"resumed {self.labels[index]}")
        for index, replica in enumerate(self.replicas):
            replica.container.reload()
            if replica.container.status == "paused":
                replica.container.unpause()
                undone.append(f"resumed {replica.label}")
            if _command(replica.container) != replica.original_command:
                self._recreate(index, replica.original_command)
                undone.append(f"recreated {replica.label} with its original settings")
            elif replica.container.status != "running":
                replica.container.start()
                self._wait_ready(replica.container, _base(replica.url), replica.label)
                undone.append(f"started {replica.label}")
            if replica.original_ring and self._ring_or_empty(index) != replica.original_ring:
                self.set_ring(index, replica.original_ring)
                undone.append(f"restored the ring of {replica.label}")
        return undone

    # --- helpers -----------------------------------------------------------------------------

    def _wait_ready(self, container: Any, base_url: str, label: str, timeout: float = READY_TIMEOUT) -> float:
        """Poll base_url/healthz until it answers 200 (any answer, for a compose deployment).

        One client for all the polls, as `ManagedProcess.wait_ready`: a client per poll loads the CA bundle each time.
        """
        started = time.monotonic()
        checked = 0.0
        with httpx.Client(timeout=1.0) as client:
            while time.monotonic() - started < timeout:
                try:
                    status = client.get(f"{base_url}/healthz").status_code
                    if status == 200 or (self.compose and status < 500):
                        return time.monotonic() - started
                except httpx.HTTPError:
                    pass
                if time.monotonic() - checked > 0.5:
                    checked = time.monotonic()
                    container.reload()
                    if container.status in ("exited", "dead"):
                        tail = container.logs(tail=20).decode("utf-8", "replace")
                        raise TargetError(f"{label} container exited before it was ready; its last lines:\n{tail}")
                time.sleep(0.05)
        raise TargetError(f"{label} did not answer {base_url}/healthz within {timeout:g}s")


def remove_orphans(client: Any) -> list[str]:
    """Remove the containers a harness on this host created and left behind when it died (its PID gone).

    Containers of a live harness (another run going on now) and of other hosts sharing the
    engine are left alone. Returns the names of those removed.
    """
    removed = []
    host = socket.gethostname()
    for container in client.containers.list(all=True, filters={"label": [RUN_LABEL, HARNESS_PID_LABEL]}):
        labels = container.labels or {}
        owner = labels.get(HARNESS_PID_LABEL, "")
        if labels.get(HOST_LABEL) != host or not owner.isdigit() or alive(int(owner)):
            continue
        with contextlib.suppress(Exception):
            container.remove(force=True)
            removed.append(container.name)
    return removed


def _host_pid(container: Any) -> int | None:
    """The host PID of a container's first process, or None (gone, or the engine runs in another pid namespace)."""
    with contextlib.suppress(Exception):
        container.reload()
        pid = int(container.attrs["State"]["Pid"])
        # The engine's pid namespace is ours only if that pid is in this container's cgroup.
        if pid and container.id in Path(f"/proc/{pid}/cgroup").read_text():
            return pid
    return None


def _base(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _command(container: Any) -> list[str]:
    return list(container.attrs["Config"].get("Cmd") or [])


def _is_replica(container: Any) -> bool:
    """A shop replica's container: its command runs `shop replica` or `harness.shop.server`."""
    words = _command(container)
    return "harness.shop.server" in words or any(a == "shop" and b == "replica"
                                                 for a, b in zip(words, words[1:], strict=False))


def _flag(command: list[str], flag: str) -> str | None:
    for position, word in enumerate(command):
        if word == flag and position + 1 < len(command):
            return command[position + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None


def _with_flag(command: list[str], flag: str, value: str) -> list[str]:
    """`command` with `flag`'s value replaced, or the flag appended when it is absent."""
    command = list(command)
    for position, word in enumerate(command):
        if word == flag and position + 1 < len(command):
            command[position + 1] = value
            return command
        if word.startswith(flag + "="):
            command[position] = f"{flag}={value}"
            return command
    return [*command, flag, value]


def _endpoint(endpoint: dict[str, Any]) -> dict[str, Any]:
    return {"Aliases": endpoint.get("Aliases"), "IPAMConfig": endpoint.get("IPAMConfig")}


def _compose_url(container: Any) -> str:
    """A compose replica's MCP URL: its --port on 127.0.0.1 with host networking, else the port published
    for it, else its address on its network (which may change when chaos recreates it: give urls then)."""
    port = _flag(_command(container), "--port")
    if port is None:
        raise TargetError(f"cannot tell the port of {container.name}: give the scenario's urls")
    if container.attrs["HostConfig"].get("NetworkMode") == "host":
        return f"http://127.0.0.1:{port}/mcp"
    published = (container.attrs["NetworkSettings"].get("Ports") or {}).get(f"{port}/tcp") or []
    if not published:  # its address on its network: reachable from the host and from containers on that network
        networks = container.attrs["NetworkSettings"].get("Networks") or {}
        addresses = [net.get("IPAddress") for net in networks.values()]
        if not any(addresses):
            raise TargetError(f"{container.name} has no published port or address for {port}/tcp: give urls")
        return f"http://{next(a for a in addresses if a)}:{port}/mcp"
    host = published[0].get("HostIp") or "127.0.0.1"
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return f"http://{host}:{published[0]['HostPort']}/mcp"
