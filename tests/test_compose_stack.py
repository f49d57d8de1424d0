"""The Dockerfile and docker-compose.yml end to end: the image builds and runs, the stack comes up, its harness
runs scenarios/compose.toml through the balancer with no rejection, and its Prometheus scrapes every replica.

What runs:

* Images, with no registry (`tests/images.py`): the repository's Dockerfile built once for
  this module as `mrtr-harness:local` on the debootstrapped Debian base (its root cached under
  /var/cache/mrtr-harness/, MRTR_IMAGE_CACHE overrides; only the first run on a machine pays
  for it, about 2 minutes), and stand-ins for `redis:7-alpine`, `prom/prometheus:v2.53.0`
  and `haproxy:2.9-alpine` built from Debian's packages on that base, with the entrypoints,
  default commands and users of the real images.
* The image alone: `--version`, `validate scenarios/smoke.toml`, its Python, its user.
* Debian's `docker-compose` (1.29, the Python one) brings the stack up on a private dockerd
  (`tests/services.py` docker_engine), reading a copy of docker-compose.yml that this test
  renders for host networking, so all traffic stays on 127.0.0.1:

  - every service gets `network_mode: host` and `extra_hosts` naming every service
    127.0.0.1, so the names the file uses (redis, api, replica1, balancer, harness...) still
    resolve; published ports go (host networking has none);
  - every listening port becomes a free port (the three replicas all listen on 8101 in the
    file, and fixed ports may be taken on a shared machine), and every `name:port` that
    points at a service follows it: in commands, in a copy of deploy/haproxy.cfg, of
    deploy/prometheus-targets/ and of scenarios/compose.toml (mounted over the image's);
  - `--host 0.0.0.0` and friends listen on 127.0.0.1 only;
  - the harness's results go to a temporary folder, and it talks to the private engine;
  - the scenario runs half a minute instead of three (`--duration`, and its restart and key
    rotation moved to the same points of the shorter run), to keep the suite short;
  - the top-level `name:` (which compose 1.29 does not know) becomes `--project-name`.

  Everything else (commands, users, volumes, the key-ring service, depends_on, the mounted
  configuration) is the shipped file's.
* Grafana is left out: it has no Debian package and no registry is reachable here, so it
  has no stand-in. The dashboards' queries are checked against a real Prometheus by
  tests/test_dashboards.py.

The test then reads what a user would: the run's summary.json (completed flows, zero
rejections, the chaos done, the verdict: every round carried a lead's token from the stack's
authorization server, found by discovery through the balancer, since the replicas refuse
any round without one), the replicas' logs (each one sealed with the
rotation's new key: the ring the harness rewrote, as root, stayed readable to them) and
Prometheus's /api/v1/targets (every replica and the harness scraped and up). Then it runs
docs/on-call.md's `triage --docker-service replica1 replica2 replica3 --docker-project mrtr`
line against the stack (tests/test_guides_run.py lists it as run here): it must find every
replica's container.

Everything the test started is removed by id at the end (`docker-compose down -v`, then any
container, network or volume of the project that is left); on a shared engine, the app
image and the stand-ins it built too. Fails instead of skipping when
debootstrap, dockerd or docker-compose is missing and MRTR_REQUIRE_SERVICES=1.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
import tomllib
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import __version__ as HARNESS_VERSION
from harness.config.durations import format_duration, parse_duration
from tests.guides import commands
from tests.images import ROOT, build_app_image, build_stand_ins, debian_base
from tests.services import docker_engine, fail_or_skip, free_port, require_binary
from tests.timings import report, seconds

pytestmark = [pytest.mark.services,
              pytest.mark.timeout(1800)]  # the first test debootstraps and builds images for both (ENGINE_TIMEOUT_S)

COMPOSE_FILE = ROOT / "docker-compose.yml"
APP_IMAGE = "mrtr-harness:local"
LEFT_OUT = {"grafana": "no Debian package and no registry here, so no stand-in image"}
REDIS_PORT = 6379
"""The port the Redis image listens on: the compose file's command names none."""
RUN_S = 30.0
"""How long the test runs the scenario (its own duration is 3 minutes, for people watching the dashboards):
`--duration` on the harness's command, and every chaos step moved to the same point of the shorter run."""
COMPOSE_TIMEOUT_S = 300
RUN_TIMEOUT_S = 240
SCRAPE_TIMEOUT_S = 60
TRIAGE_TIMEOUT_S = 60
ENGINE_TIMEOUT_S = 900
PROJECT_LABEL = "com.docker.compose.project"


# --- the compose file, rendered for host networking ------------------------------------------


def _flag(command: list[str], flag: str) -> str | None:
    for position, word in enumerate(command[:-1]):
        if word == flag:
            return command[position + 1]
    return None


def _with_flag(command: list[str], flag: str, value: str) -> list[str]:
    position = command.index(flag)
    return [*command[:position + 1], value, *command[position + 2:]]


def listen_ports(services: dict[str, Any], haproxy_cfg: str) -> dict[str, int]:
    """The port each service listens on in the shipped files: its command's flag, the balancer's `bind`,
    Redis's default. Services that listen on nothing (the key-ring writer) are absent."""
    ports: dict[str, int] = {}
    for name, service in services.items():
        command = [str(word) for word in service.get("command") or []]
        for flag in ("--port", "--metrics-port"):
            if (value := _flag(command, flag)) is not None:
                ports[name] = int(value)
        for word in command:
            if word.startswith("--web.listen-address="):
                ports[name] = int(word.rsplit(":", 1)[1])
        if command[:1] == ["redis-server"]:
            ports[name] = REDIS_PORT
    bind = re.search(r"^\s*bind\s+\S*:(\d+)", haproxy_cfg, re.M)
    assert bind, "deploy/haproxy.cfg binds no port"
    ports["balancer"] = int(bind.group(1))
    return ports


def retarget(text: str, shipped: dict[str, int], moved: dict[str, int]) -> str:
    """`text` with every `service:port` that reaches a service at its shipped port pointed at its new one."""
    names = "|".join(re.escape(name) for name in sorted(shipped, key=len, reverse=True))

    def move(match: re.Match[str]) -> str:
        name, port = match.group(1), int(match.group(2))
        return f"{name}:{moved[name]}" if shipped[name] == port else match.group(0)

    return re.sub(rf"(?<![\w.-])({names}):(\d+)\b", move, text)


@dataclass
class Rendered:
    """The compose file and the configuration copies this test runs the stack with."""

    compose: Path
    project: str
    ports: dict[str, int]
    results: Path
    services: list[str]
    speedup: float
    """The scenario's duration over the test's run."""


def render(folder: Path, docker_host: str) -> Rendered:
    """Write the host-networking copy of docker-compose.yml (and of the files it mounts that name ports)."""
    shipped_file = yaml.safe_load(COMPOSE_FILE.read_text())
    services: dict[str, Any] = {name: dict(spec) for name, spec in shipped_file["services"].items()
                                if name not in LEFT_OUT}
    shipped = listen_ports(services, (ROOT / "deploy" / "haproxy.cfg").read_text())
    moved = distinct_free_ports(list(shipped))

    def copy(source: Path, target: Path) -> Path:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(retarget(source.read_text(), shipped, moved))
        return target

    balancer_cfg = copy(ROOT / "deploy" / "haproxy.cfg", folder / "haproxy.cfg")
    balancer_cfg.write_text(re.sub(r"^(\s*bind\s+)\S*:\d+", rf"\g<1>127.0.0.1:{moved['balancer']}",
                                   balancer_cfg.read_text(), flags=re.M))
    targets = folder / "prometheus-targets"
    for source in sorted((ROOT / "deploy" / "prometheus-targets").glob("*.json")):
        copy(source, targets / source.name)
    scenario = copy(ROOT / "scenarios" / "compose.toml", folder / "compose.toml")
    speedup = shorten_chaos(scenario, RUN_S)
    results = folder / "results"
    results.mkdir()
    mounts = {  # container path -> the host path that replaces the shipped file's
        "/usr/local/etc/haproxy/haproxy.cfg": f"{balancer_cfg}:/usr/local/etc/haproxy/haproxy.cfg:ro",
        "/etc/prometheus/targets": f"{targets}:/etc/prometheus/targets:ro",
        "/app/results": f"{results}:/app/results",
        "/var/run/docker.sock": f"{docker_host.removeprefix('unix://')}:/var/run/docker.sock",
    }
    for name, service in services.items():
        on_host_network(service, list(services), moved.get(name), lambda word: retarget(word, shipped, moved))
        service["volumes"] = [mounts.get(str(volume).split(":")[1], volume) for volume in service.get("volumes") or []]
        if not service["volumes"]:
            del service["volumes"]
    services["harness"]["volumes"].append(f"{scenario}:/app/scenarios/compose.toml:ro")
    services["harness"]["command"] += ["--duration", format_duration(RUN_S)]
    rendered = {key: value for key, value in shipped_file.items() if key not in ("name", "services")}
    rendered["services"] = services
    compose = folder / "docker-compose.yml"
    compose.write_text(yaml.dump(rendered, Dumper=_PlainDumper, sort_keys=False))
    return Rendered(compose, shipped_file["name"], moved, results, list(services), speedup)


def distinct_free_ports(names: list[str]) -> dict[str, int]:
    """A free 127.0.0.1 port for each name, no two the same."""
    ports: dict[str, int] = {}
    while len(ports) < len(names):
        port = free_port()
        if port not in ports.values():
            ports[names[len(ports)]] = port
    return ports


def on_host_network(service: dict[str, Any], names: list[str], port: int | None,
                    retargeted: Callable[[str], str]) -> None:
    """Change `service` (in place) to host networking: every service name resolves to 127.0.0.1, no published
    port, its command listening on 127.0.0.1 at `port` and reaching the others at theirs."""
    service.pop("ports", None)
    service["network_mode"] = "host"
    service["extra_hosts"] = [f"{name}:127.0.0.1" for name in names]
    check = service.get("healthcheck") or {}
    if list(check.get("test", []))[:2] == ["CMD", "redis-cli"]:  # redis-cli asks the default port
        service["healthcheck"] = {**check, "test": ["CMD", "redis-cli", "-p", str(port), *check["test"][2:]]}
    if "command" in service:
        service["command"] = _listen_on_loopback([retargeted(str(word)) for word in service["command"]], port)


def shorten_chaos(scenario: Path, run_s: float) -> float:
    """Move the scenario's chaos steps to the same points of a `run_s`-second run (in place); returns the
    speed-up (its duration over `run_s`)."""
    text = scenario.read_text()
    parsed = tomllib.loads(text)
    speedup = parse_duration(parsed["duration"]) / run_s
    moved = re.subn(r'^(at\s*=\s*)"([^"]+)"',
                    lambda match: f'{match.group(1)}"{format_duration(parse_duration(match.group(2)) / speedup)}"',
                    text, flags=re.M)
    assert moved[1] == len(parsed.get("chaos", [])), "every chaos step has its own `at = \"...\"` line"
    scenario.write_text(moved[0])
    return speedup


class _PlainDumper(yaml.SafeDumper):
    """Writes every value out in full: no `&id001` anchors for the lists the services share."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _listen_on_loopback(command: list[str], port: int | None) -> list[str]:
    """The command listening on 127.0.0.1 at `port` instead of every address at the shipped port."""
    for flag in ("--host", "--metrics-host"):
        if _flag(command, flag) == "0.0.0.0":
            command = _with_flag(command, flag, "127.0.0.1")
    if port is None:
        return command
    for flag in ("--port", "--metrics-port"):
        if _flag(command, flag) is not None:
            command = _with_flag(command, flag, str(port))
    command = [f"--web.listen-address=127.0.0.1:{port}" if word.startswith("--web.listen-address=") else word
               for word in command]
    if command[:1] == ["redis-server"]:
        command = [*command, "--port", str(port), "--bind", "127.0.0.1"]
    return command


# --- driving the stack ------------------------------------------------------------------------


def compose(binary: str, rendered: Rendered, *args: str, timeout: float = COMPOSE_TIMEOUT_S) -> tuple[int, str]:
    """Run docker-compose on the rendered file as project `rendered.project` (from the repository's folder, so
    the shipped file's relative paths and build context mean what they mean for a user): exit code, output."""
    result = subprocess.run(
        [binary, "--project-name", rendered.project, "--project-directory", str(ROOT), "--file",
         str(rendered.compose), *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout,
        check=False,
    )
    return result.returncode, result.stdout.decode(errors="replace")


def _stack_logs(client: Any, project: str) -> str:
    """The last lines of every container of the project, for a failure message."""
    parts = []
    for container in client.containers.list(all=True, filters={"label": f"{PROJECT_LABEL}={project}"}):
        tail = container.logs(tail=15).decode(errors="replace")
        parts.append(f"--- {container.name} ({container.status})\n{tail}")
    return "\n".join(parts)


def wait_for_summary(client: Any, rendered: Rendered) -> dict[str, Any]:
    """The run's summary.json once the harness service has written it; fails when the harness stops first."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    harness = client.containers.list(all=True, filters={"label": [f"{PROJECT_LABEL}={rendered.project}",
                                                                   "com.docker.compose.service=harness"]})
    assert len(harness) == 1, f"expected one harness container, found {len(harness)}"
    while time.monotonic() < deadline:
        found = sorted(rendered.results.glob("*/summary.json"))
        if found:
            time.sleep(0.5)  # written in one go, but let the writer close it
            return json.loads(found[0].read_text())
        harness[0].reload()
        if harness[0].status in ("exited", "dead"):
            pytest.fail(f"the harness service stopped before its run wrote summary.json:\n"
                        f"{_stack_logs(client, rendered.project)}", pytrace=False)
        time.sleep(1)
    pytest.fail(f"no summary.json after {RUN_TIMEOUT_S} s:\n{_stack_logs(client, rendered.project)}", pytrace=False)


def scraped_targets(prometheus: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{prometheus}/api/v1/targets?state=active", timeout=5) as response:
        return list(json.load(response)["data"]["activeTargets"])


def wait_until_scraped(prometheus: str, replicas: int) -> list[dict[str, Any]]:
    """Prometheus's active targets once every replica and the harness have been scraped and are up (or the
    deadline passed: the caller's assertions then say which is not)."""
    deadline = time.monotonic() + SCRAPE_TIMEOUT_S
    targets: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            targets = scraped_targets(prometheus)
            up = [t for t in targets if t["health"] == "up"]
            if len(up) >= replicas + 1 and all(t["labels"]["job"] in ("mrtr-replicas", "mrtr-harness") for t in up):
                return targets
        time.sleep(1)
    return targets


# --- cleaning up --------------------------------------------------------------------------------


def project_volumes(client: Any, project: str) -> set[str]:
    """Every volume the project's containers mount (named ones and the images' anonymous ones)."""
    names = set()
    for container in client.containers.list(all=True, filters={"label": f"{PROJECT_LABEL}={project}"}):
        names |= {mount["Name"] for mount in container.attrs.get("Mounts") or [] if mount.get("Type") == "volume"}
    return names


def remove_leftovers(client: Any, project: str, volumes: set[str]) -> list[str]:
    """Remove by id whatever of the project `docker-compose down -v` left; returns what that was."""
    import docker

    left = []
    for container in client.containers.list(all=True, filters={"label": f"{PROJECT_LABEL}={project}"}):
        left.append(f"container {container.name}")
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_container(container.id, force=True, v=True)
    for network in client.networks.list(filters={"label": f"{PROJECT_LABEL}={project}"}):
        left.append(f"network {network.name}")
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_network(network.id)
    for volume in client.volumes.list(filters={"label": f"{PROJECT_LABEL}={project}"}):
        volumes.add(volume.name)
    for name in volumes:
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_volume(name)
            left.append(f"volume {name}")
    return left


@contextlib.contextmanager
def app_image_tag(client: Any, shared_engine: bool):
    """Yield; then, on a shared engine, remove the app image this test built and give `APP_IMAGE` back to the
    image that had it before (a user's own build)."""
    import docker

    before = None
    if shared_engine:
        with contextlib.suppress(docker.errors.ImageNotFound):
            before = client.images.get(APP_IMAGE).id
    try:
        yield
    finally:
        if shared_engine:
            with contextlib.suppress(docker.errors.ImageNotFound):
                ours = client.images.get(APP_IMAGE).id
                if ours != before:
                    client.images.remove(ours, force=True)
            if before is not None:
                with contextlib.suppress(docker.errors.ImageNotFound):
                    client.images.get(before).tag(APP_IMAGE)


# --- the engine and the app image, shared by the module's tests -------------------------------------


@dataclass
class Built:
    """A Docker engine with the Debian base and the repository's Dockerfile built on it as `APP_IMAGE`."""

    host: str
    client: Any
    shared_engine: bool
    base: Any
    build_s: float
    size_mb: float
    log: list[str]
    started: float


@pytest.fixture(scope="module")
def built() -> Iterator[Built]:
    """The engine (the one that answers, or a private dockerd) with the app image built once for this module:
    the Dockerfile's own test and the compose stack both use it, so the image is built once per suite."""
    require_binary("debootstrap")  # dockerd: docker_engine() requires it when no engine answers
    started = time.monotonic()
    with docker_engine() as docker_host:
        import docker

        client = docker.from_env(timeout=ENGINE_TIMEOUT_S)
        try:
            shared_engine = "/mrtr-dockerd-" not in docker_host
            with app_image_tag(client, shared_engine):
                base = debian_base(client)
                image, build_s, log = build_app_image(client, base.reference, APP_IMAGE)
                yield Built(docker_host, client, shared_engine, base, build_s, image.attrs["Size"] / 1e6, log,
                            started)
        finally:
            client.close()


# --- the tests ---------------------------------------------------------------------------------


def test_the_real_dockerfile_builds_on_a_debootstrapped_base_and_the_image_runs(request: pytest.FixtureRequest,
                                                                                built: Built):
    """The repository's Dockerfile, built on the debootstrapped Debian base (`tests/images.py`), makes an image that
    runs: its `--version`, `validate scenarios/smoke.toml`, its Python (3.11 or later, in its venv), not as root."""
    run_start = time.monotonic()
    client = built.client
    version = client.containers.run(APP_IMAGE, ["--version"], network_mode="host", remove=True)
    assert HARNESS_VERSION in version.decode(), version
    validated = client.containers.run(APP_IMAGE, ["validate", "scenarios/smoke.toml"], network_mode="host",
                                      remove=True, stderr=True)
    python = client.containers.run(
        APP_IMAGE, ["-c", "import sys; print(sys.version_info[:2] >= (3, 11), sys.prefix)"],
        entrypoint="python3", network_mode="host", remove=True,
    ).decode()
    assert python.split() == ["True", "/opt/mrtr"], python
    user = client.containers.run(APP_IMAGE, ["-u"], entrypoint="id", network_mode="host", remove=True)
    assert user.decode().strip() != "0", "the image must not run as root"
    base = built.base
    report(request, "dockerfile build", [
        f"{'cached root' if base.debootstrap_s is None else 'first run'}",
        base.root_line,
        seconds(base.import_s, f"docker import {base.reference}"),
        f"docker build {APP_IMAGE}: {built.build_s:.1f} s, image {built.size_mb:.0f} MB",
        f"docker run --version / validate / checks: {time.monotonic() - run_start:.1f} s",
        f"validate says: {validated.decode(errors='replace').strip()[:200]}",
        f"build log tail: {''.join(built.log).strip().splitlines()[-1] if built.log else ''}",
    ])


def test_the_compose_stack_runs_its_scenario_through_the_balancer_and_prometheus_scrapes_every_replica(
        request: pytest.FixtureRequest, tmp_path: Path, built: Built):
    binary = require_binary("docker-compose")
    import docker

    client, base = built.client, built.base
    rendered = render(tmp_path, built.host)
    if client.containers.list(all=True, filters={"label": f"{PROJECT_LABEL}={rendered.project}"}):
        fail_or_skip(f"the engine at {built.host} already runs a compose project {rendered.project!r}: "
                     f"this test would replace its containers")
    stand_ins = None
    volumes: set[str] = set()
    left: list[str] = []
    try:
        stand_ins = build_stand_ins(client, base)
        up_start = time.monotonic()
        try:
            code, output = compose(binary, rendered, "up", "--detach", "--no-build")
            if code != 0:
                pytest.fail(f"docker-compose up exited {code}:\n{output[-3000:]}\n"
                            f"{_stack_logs(client, rendered.project)}", pytrace=False)
            up_s = time.monotonic() - up_start
            volumes = project_volumes(client, rendered.project)
            summary = wait_for_summary(client, rendered)
            run_s = time.monotonic() - up_start - up_s
            targets = wait_until_scraped(f"http://127.0.0.1:{rendered.ports['prometheus']}", replicas=3)
            if not summary["passed"]:
                pytest.fail(f"the run did not pass: {summary['status']}, {summary['problems']}\n"
                            f"{_stack_logs(client, rendered.project)}", pytrace=False)
            check_summary(summary)
            check_balancer_spread_rounds(rendered)
            check_rotation_reached_every_replica(client, rendered.project, summary)
            check_targets(targets, rendered)
            triage_s = check_the_guides_docker_triage(client, rendered, built.host, tmp_path)
        finally:
            volumes |= project_volumes(client, rendered.project)
            code, output = compose(binary, rendered, "down", "--volumes", "--remove-orphans", "--timeout", "5")
            left = remove_leftovers(client, rendered.project, volumes)
            assert code == 0, f"docker-compose down exited {code}:\n{output[-3000:]}"
    finally:
        if built.shared_engine and stand_ins is not None:
            for tag in stand_ins.made:
                with contextlib.suppress(docker.errors.ImageNotFound):
                    client.images.remove(stand_ins.ids[tag], force=True)
    assert not left, f"docker-compose down -v left {left} (removed by id)"
    report(request, "compose stack", [
        f"total {time.monotonic() - built.started:.1f} s since the engine's start "
        f"({'cached root' if base.debootstrap_s is None else 'first run'})",
        base.root_line,
        seconds(base.import_s, f"docker import {base.reference}"),
        f"stand-ins {', '.join(stand_ins.ids)}: {stand_ins.seconds:.1f} s",
        f"docker build {APP_IMAGE}: {built.build_s:.1f} s",
        f"docker-compose up: {up_s:.1f} s; the harness's run until summary.json: {run_s:.1f} s",
        f"services: {', '.join(rendered.services)} (left out: {', '.join(LEFT_OUT)})",
        f"docs/on-call.md's docker triage against the stack: {triage_s:.1f} s",
        f"the run ({format_duration(RUN_S)}, {rendered.speedup:g}x shorter than the scenario): "
        f"flows {summary['flows']['by_outcome']}, rejections {summary['rejections']['client_rejections']}",
    ])


def check_summary(summary: dict[str, Any]) -> None:
    """What a user reads in summary.json after `docker compose up`: the flows completed, nothing rejected."""
    flows = summary["flows"]["by_outcome"]
    rejections = summary["rejections"]
    assert summary["scenario"]["name"] == "compose"
    assert flows.get("completed", 0) > 0, f"no flow completed: {summary['flows']}"
    assert rejections["client_rejections"] == 0, rejections
    assert rejections["total_logged"] == 0, f"replicas logged rejections: {rejections}"
    chaos = {step["action"]: step["ok"] for step in summary["chaos"]}
    assert chaos.get("restart") and chaos.get("rotate-keys"), f"the scenario's chaos failed: {summary['chaos']}"
    assert summary["passed"] and summary["exit_code"] == 0, \
        f"the run's verdict: {summary['status']} {summary.get('reason')} {summary['thresholds']}"


def check_balancer_spread_rounds(rendered: Rendered) -> None:
    """HAProxy passed rounds to every replica: the journal counts each round under the replica that answered
    it (its `X-Served-By`), though the harness sent every one to the balancer's one URL. A round no replica
    answered (HAProxy's own 503 while a replica restarts) names none, and stays the balancer's."""
    journal = next(rendered.results.glob("*/journal.jsonl"))
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    rounds = [record for record in records if record.get("type") == "round"]
    served = Counter(record["replica"] for record in rounds)
    replicas = {"r1", "r2", "r3"}
    assert replicas <= set(served), served
    unnamed = [(record["replica"], record["outcome"], record.get("http_status")) for record in rounds
               if record["replica"] not in replicas]
    assert all(replica == "balancer" and outcome not in ("complete", "input_required", "tool_error")
               for replica, outcome, _ in unnamed), unnamed


def check_rotation_reached_every_replica(client: Any, project: str, summary: dict[str, Any]) -> None:
    """Every replica logged that it seals with the rotation's new key, and never that it could not read the ring
    (a ring the harness, root, rewrote for replicas running as nobody: `docker compose logs replica1`)."""
    rotation = next(step for step in summary["chaos"] if step["action"] == "rotate-keys")
    new = rotation["detail"]["new"]
    replicas = client.containers.list(all=True, filters={"label": [f"{PROJECT_LABEL}={project}",
                                                                    "mrtr-harness.role=replica"]})
    assert len(replicas) == 3, [container.name for container in replicas]
    for container in replicas:
        logs = container.logs().decode(errors="replace")
        assert "key ring not reloaded" not in logs, f"{container.name}:\n{logs[-3000:]}"
        assert f"key ring reloaded: sealing with {new}" in logs, f"{container.name} never sealed with {new}:\n" \
                                                                 f"{logs[-3000:]}"


def check_the_guides_docker_triage(client: Any, rendered: Rendered, docker_host: str, folder: Path) -> float:
    """docs/on-call.md's triage of the shipped stack, as written but for its metrics port (moved to a free one, as
    every port of the stack here is): it follows each replica's container, serves each one's rejection counter
    (every reason at 0 before any line) on that port and prints its live table; SIGTERM then ends it with its
    summary and exit 0 (the run had no rejection). Returns how long it took."""
    (line,) = {line for _, line in commands() if "--docker-service" in line and f"--docker-project {rendered.project}"
               in line}
    argv = shlex.split(line)[1:]
    port = free_port()
    argv[argv.index("--metrics-port") + 1] = str(port)
    replicas = {container.name for container in client.containers.list(
        filters={"label": [f"{PROJECT_LABEL}={rendered.project}", "mrtr-harness.role=replica"]})}
    started = time.monotonic()
    table = folder / "triage.out"
    with table.open("w") as out:
        process = subprocess.Popen([sys.executable, "-m", "harness", *argv], cwd=ROOT, stdout=out,
                                   stderr=subprocess.PIPE, text=True, env={**os.environ, "DOCKER_HOST": docker_host})
    served: set[str] = set()
    try:
        deadline = time.monotonic() + TRIAGE_TIMEOUT_S
        while (served != replicas or not table.stat().st_size) and process.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.5)
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
                    text = answer.read().decode()
                served = set(re.findall(r'^mrtr_request_state_rejections_total\{[^}]*replica="([^"]+)"', text, re.M))
    finally:
        process.terminate()  # after its first table: triage turns SIGTERM into its summary by then
        _, err = process.communicate(timeout=30)
    assert replicas and served == replicas, f"{line}: served {served}, the stack's replicas {replicas}\n{err}"
    assert process.returncode == 0, f"{line} exited {process.returncode}:\n{err}\n{table.read_text()[-3000:]}"
    return time.monotonic() - started


def check_targets(targets: list[dict[str, Any]], rendered: Rendered) -> None:
    """Prometheus of the stack scraped the harness and every replica, each by its compose service name."""
    by_job: dict[str, dict[str, str]] = {}
    for target in targets:
        by_job.setdefault(target["labels"]["job"], {})[target["labels"]["instance"]] = target["health"]
    replicas = {f"{name}:{rendered.ports[name]}": "up" for name in ("replica1", "replica2", "replica3")}
    assert by_job.get("mrtr-replicas") == replicas, targets
    assert by_job.get("mrtr-harness") == {f"harness:{rendered.ports['harness']}": "up"}, targets
    labels = sorted(t["labels"].get("replica", "") for t in targets if t["labels"]["job"] == "mrtr-replicas")
    assert labels == ["r1", "r2", "r3"]
