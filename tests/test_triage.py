"""`mrtr-harness triage` on real logs: replicas' plain lines, the SDK's own rich console, JSON, live sources.

The plain logs come from real shop replicas refusing states over HTTP; the rich and JSON
logs from a script that drives the SDK's own `RequestStateBoundary` into real rejections
while logging through the SDK's own `configure_logging()` (rich's `RichHandler`, as an
MCPServer logs by default), at several console widths so records wrap and fold. Live
sources (a followed file that is rotated, stdin, a compose service's container) run the
real command in a subprocess and are watched through its metrics endpoint; every wait is
bounded and none is asserted on.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import docker
import httpx
import pytest

from harness.cli.main import main
from harness.logs.parse import LineParser
from harness.mrtr.reasons import REASONS
from harness.processes.children import free_port
from harness.targets.local_deployment import ReplicaOptions
from harness.triage.counts import LiveCounts
from harness.triage.display import render_live
from tests.harness_run import ROOT
from tests.services import docker_engine, fail_or_skip, sigint_default
from tests.test_rejection_reasons import YES, first_round, post

WAIT_SECONDS = 30.0
SDK_REASONS = ("seal", "expired", "unknown key", "audience", "request binding", "malformed",
               "non-string requestState", "principal", "principal drift")
"""What `SDK_LOGS` provokes, once each, in this order."""

SDK_LOGS = '''
"""Real rejections by the SDK's RequestStateBoundary, logged through the SDK's own configure_logging().

With rich installed that is rich's RichHandler on stderr; the same records also go to
RichHandlers of other console widths and to a JSON-lines file of our own formatter.
"""
import asyncio, json, logging, os, sys, time
from dataclasses import dataclass

from mcp.server.mcpserver.utilities.logging import configure_logging
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPError
from rich.console import Console
from rich.logging import RichHandler

OUT = sys.argv[1]
ARGS = {"quote_id": "Q-1"}
KEY = os.urandom(32)


class JsonLines(logging.Formatter):
    def format(self, record):
        return json.dumps({"time": self.formatTime(record), "level": record.levelname, "logger": record.name,
                           "message": record.getMessage(), "pod": "shop-7d9f-x2"})


configure_logging("INFO")
root = logging.getLogger()
for width in (60, 132):
    root.addHandler(RichHandler(console=Console(file=open(f"{OUT}/rich-{width}.log", "w"), width=width),
                                rich_tracebacks=True))
as_json = logging.FileHandler(f"{OUT}/sdk.jsonl")
as_json.setFormatter(JsonLines())
root.addHandler(as_json)


def boundary(*, audience="shop", key=KEY, ttl=600.0, bound=False):
    security = RequestStateSecurity(keys=[key], ttl=ttl, bind_principal=(lambda ctx: ctx.user) if bound else None)
    return RequestStateBoundary(security, default_audience=audience)


@dataclass
class Context:  # what the boundary reads of a ServerRequestContext
    method: str
    params: dict
    user: str | None = None


def context(arguments, state=None, user=None):
    params = {"name": "issue_refund", "arguments": arguments}
    if state is not None:
        params["requestState"] = state
    return Context("tools/call", params, user)


async def ask(ctx):
    return {"resultType": "input_required", "inputRequests": {}, "requestState": "asked"}


async def mint(b, user=None):
    return (await b(context(ARGS, user=user), ask))["requestState"]


async def refuse(b, state, arguments=ARGS, user=None):
    try:
        await b(context(arguments, state, user), ask)
    except MCPError as exc:
        assert exc.code == -32602
        return
    raise AssertionError("the state was accepted")


async def main():
    log = logging.getLogger("shop")
    shop, short, bound = boundary(), boundary(ttl=0.001), boundary(bound=True)

    async def expired(state):
        state = await mint(short)
        time.sleep(0.01)
        await refuse(short, state)

    steps = {
        "seal": lambda s: refuse(shop, s[:40] + ("A" if s[40] != "A" else "B") + s[41:]),
        "expired": expired,
        "unknown key": lambda s: refuse(boundary(key=os.urandom(32)), s),
        "audience": lambda s: refuse(boundary(audience="shop-eu"), s),
        "request binding": lambda s: refuse(shop, s, arguments={"quote_id": "Q-2"}),
        "malformed": lambda s: refuse(shop, "not-a-token"),
        "non-string requestState": lambda s: refuse(shop, 12345),
    }
    for reason, step in steps.items():
        log.info("round 2 of issue_refund for a lead who took a while to answer (%s next)", reason)
        await step(await mint(shop))
    state = await mint(bound, user="alice")
    await refuse(bound, state, user="bob")
    await refuse(bound, state, user=None)
    await shop(context(ARGS, await mint(shop)), ask)  # accepted: no line


asyncio.run(main())
'''


# --- real logs -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def replica_logs(deploy) -> dict[str, Path]:
    """Plain logs of two real replicas, r2's clock 700 s behind: r1 refused a state of r2's as expired; r2
    refused one of r1's as minted in the future, and two of its own for their seal and their request binding."""
    shop = deploy([ReplicaOptions(), ReplicaOptions(clock_offset=-700.0)])
    r1, r2 = 0, 1

    def refused(replica: int, arguments: dict, state: object) -> None:
        answer = post(shop.replica_urls[replica], "issue_refund", arguments, id=3, responses=YES, state=state)
        assert answer.status_code == 400 and answer.json()["error"]["code"] == -32602

    refused(r1, *first_round(shop, r2))
    refused(r2, *first_round(shop, r1))
    arguments, state = first_round(shop, r2)
    refused(r2, arguments, state[:40] + ("A" if state[40] != "A" else "B") + state[41:])
    _, state = first_round(shop, r2)
    other, _ = first_round(shop, r2)
    refused(r2, other, state)
    logs = {replica.label: replica.log_path for replica in shop.replicas}
    wait_for(lambda: rejection_lines(logs["r1"]) == 1 and rejection_lines(logs["r2"]) == 3, "replica log lines")
    return logs


@pytest.fixture(scope="module")
def sdk_logs(tmp_path_factory) -> Path:
    """rich-80.log (the SDK's configure_logging on stderr), rich-60.log, rich-132.log and sdk.jsonl."""
    try:
        import rich  # noqa: F401 - the SDK logs through rich only when it is installed
    except ImportError:
        fail_or_skip("rich is not installed: the SDK's rich console cannot be produced (pip install rich)",
                     failure="rich is not installed and MRTR_REQUIRE_SERVICES=1: pip install rich")
    folder = tmp_path_factory.mktemp("sdk-logs")
    with open(folder / "rich-80.log", "wb") as stderr:
        subprocess.run([sys.executable, "-c", SDK_LOGS, str(folder)], stderr=stderr, check=True, timeout=60,
                       env={**os.environ, "COLUMNS": "80"})
    return folder


def rejection_lines(path: Path) -> int:
    return path.read_text().count("requestState rejected on")


def wait_for(condition: Callable[[], bool], what: str, process: subprocess.Popen[str] | None = None) -> None:
    """Poll `condition` (bounded); give up at once if the triage `process` it depends on has ended."""
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"triage exited with {process.returncode} before {what}: {process.stderr.read()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.1)


def triage(capsys, *args: str) -> tuple[int, dict]:
    """`mrtr-harness triage --once --json ARGS` in this process: (exit code, the JSON)."""
    code = main(["triage", "--once", "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def live_triage(*args: str) -> subprocess.Popen[str]:
    """`mrtr-harness triage --json ARGS`, live, in its own process (stopped by `stop`)."""
    return subprocess.Popen([sys.executable, "-m", "harness", "triage", "--json", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=sigint_default)


def stop(process: subprocess.Popen[str]) -> tuple[int, dict]:
    """Ctrl-C a live triage: (exit code, the JSON it prints on the way out)."""
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=WAIT_SECONDS)
    assert out, err
    return process.returncode, json.loads(out)


def metric(port: int, replica: str, reason: str) -> float | None:
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return None
    for labels, value in re.findall(r"^mrtr_request_state_rejections_total\{(.*)\} (\S+)$", text, re.MULTILINE):
        if dict(re.findall(r'(\w+)="([^"]*)"', labels)) == {"replica": replica, "reason": reason}:
            return float(value)
    return None


PLAIN = {"expired": {"r1": 1}, "minted in the future": {"r2": 1}, "seal": {"r2": 1}, "request binding": {"r2": 1}}
"""What `replica_logs` holds, by reason and replica."""


def every_sdk_reason_once(replica: str) -> dict[str, dict[str, int]]:
    return {reason: {replica: 1} for reason in SDK_REASONS}


# --- plain logs of real replicas ---------------------------------------------------------------


def test_plain_replica_logs_are_counted_by_reason_and_replica(replica_logs, capsys):
    code, result = triage(capsys, *(f"--file={path}" for path in replica_logs.values()))
    assert result["by_reason_and_replica"] == PLAIN
    assert result["rejections"] == 4
    assert result["by_reason"] == {**{reason: 0 for reason in (*REASONS, "other")},
                                   "expired": 1, "minted in the future": 1, "seal": 1, "request binding": 1}
    assert result["tampering_or_client_bug"] == ["seal", "request binding"]
    assert code == result["exit_code"] == 1


def test_only_expired_states_exit_0(replica_logs, capsys):
    code, result = triage(capsys, "--file", str(replica_logs["r1"]))
    assert result["by_reason_and_replica"] == {"expired": {"r1": 1}}
    assert code == 0


def test_a_seal_rejection_exits_1(replica_logs, capsys):
    code, result = triage(capsys, "--file", str(replica_logs["r2"]))
    assert result["by_reason"]["seal"] == 1
    assert code == 1


def test_a_reason_on_some_replicas_only_says_so(replica_logs, capsys):
    _, result = triage(capsys, *(f"--file={path}@{label}" for label, path in replica_logs.items()))
    assert result["replicas"] == ["r1", "r2"]
    assert result["advice"]["expired"]["where"].startswith("only on r1 of 2 replicas")
    assert result["advice"]["seal"]["where"].startswith("only on r2 of 2 replicas")
    assert "fix NTP" in result["advice"]["minted in the future"]["next_step"]
    assert "proxy rewriting request bodies" in result["advice"]["seal"]["cause"]


def test_the_summary_names_each_reason_its_cause_and_next_step(replica_logs, capsys):
    code = main(["triage", "--once", *(f"--file={path}@{label}" for label, path in replica_logs.items())])
    out = capsys.readouterr().out
    assert code == 1
    assert re.search(r"^! seal +1 ", out, re.MULTILINE)
    assert re.search(r"^  expired +1 ", out, re.MULTILINE)
    assert "raise the TTL above the leads' think time" in out
    assert "v1." not in out  # no token, ever


# --- the SDK's rich console and JSON --------------------------------------------------------


@pytest.mark.parametrize("name", ["rich-80.log", "rich-60.log", "rich-132.log"])
def test_the_sdks_rich_console_is_counted_however_it_wraps(sdk_logs, capsys, name):
    code, result = triage(capsys, "--file", f"{sdk_logs / name}@r9")
    assert result["by_reason_and_replica"] == every_sdk_reason_once("r9")
    assert code == 1


def test_a_rich_record_wraps_in_the_default_console(sdk_logs):
    text = (sdk_logs / "rich-80.log").read_text()
    assert "requestState rejected on tools/call: non-string requestState" not in text
    assert re.search(r"WARNING +requestState rejected on +request_state\.py:\d+\n +tools/call: ", text)


def test_json_logs_are_counted_with_their_pod_field_as_replica(sdk_logs, capsys):
    code, result = triage(capsys, "--file", str(sdk_logs / "sdk.jsonl"))
    assert result["by_reason_and_replica"] == every_sdk_reason_once("shop-7d9f-x2")
    assert code == 1


def test_a_commands_output_is_a_source(sdk_logs, capsys):
    code, result = triage(capsys, "--command", f"cat {sdk_logs / 'sdk.jsonl'}")
    assert result["by_reason_and_replica"] == every_sdk_reason_once("shop-7d9f-x2")


@pytest.mark.parametrize("name", ["rich-60.log", "sdk.jsonl"])
def test_a_runs_log_collector_counts_what_triage_counts(sdk_logs, name):
    """A run against servers that log through the SDK's rich console (or JSON) explains their rejections too."""
    from collections import Counter

    from harness.config.logs import LogSource
    from harness.logs.collector import Collector

    events = []
    log = sdk_logs / name
    text = log.read_text()
    copy = log.parent / f"followed-{name}"
    copy.write_text("")  # a run follows a log from its end: the lines come once it is followed
    began = log.stat().st_mtime - 60  # the run began before the SDK logged these lines (they carry its time)
    collector = Collector(events.append, since=began)
    collector.follow(LogSource("file", str(copy), "r9"))
    with copy.open("a") as out:
        out.write(text)
    collector.stop(settle=0.5)
    counted = Counter((event.reason, event.replica) for event in events)
    expected_replica = "r9" if name.startswith("rich") else "shop-7d9f-x2"  # the JSON names its pod
    assert counted == Counter({(reason, expected_replica): 1 for reason in SDK_REASONS})


def test_a_rich_record_a_quiet_stream_left_unfinished_is_counted_once_stale():
    now = [0.0]
    seen = []
    parser = LineParser(seen.append, clock=lambda: now[0])
    head = "[11/30/26 06:21:58] WARNING  requestState rejected on tools/call:       request_state.py:263"
    parser.feed(head, "r1")
    parser.feed("                             principal", "r1")  # may yet become "principal drift"
    parser.flush(older_than=1.0)
    assert seen == []
    now[0] = 1.5
    parser.flush(older_than=1.0)
    assert [(r.replica, r.reason, r.method) for r in seen] == [("r1", "principal", "tools/call")]


def test_stream_prefixes_and_shipper_fields_name_the_replica(tmp_path, capsys):
    message = "requestState rejected on tools/call: "
    stream = tmp_path / "stream.log"
    stream.write_text("\n".join([
        f"[pod/shop-7d9f-abcde/shop] 2026-11-30T05:12:57.934Z WARNING mcp.server.request_state: {message}unknown key",
        f"shop-r2-1  | WARNING:mcp.server.request_state:{message}expired",
        json.dumps({"log": f"2026-11-30T05:12:57.934Z WARNING replica=r3 mcp.server.request_state: {message}audience\n",
                    "stream": "stderr"}),
        json.dumps({"MESSAGE": f"{message}bind_principal returned int, expected str or None", "_HOSTNAME": "node-4"}),
        f"WARNING:mcp.server.request_state:{message}a reason from a newer SDK",
    ]) + "\n")
    code, result = triage(capsys, "--command", f"cat {stream}")
    assert result["by_reason_and_replica"] == {"unknown key": {"shop-7d9f-abcde": 1}, "expired": {"shop-r2-1": 1},
                                               "audience": {"r3": 1}, "principal binding error": {"node-4": 1},
                                               "other": {"unknown": 1}}
    assert code == 0


# --- what is not a rejection -------------------------------------------------------------------


NOISE = [
    "2026-11-30T05:12:57.934Z INFO replica=r1 harness.shop.replica: serving http://127.0.0.1:8101/mcp name=shop",
    "2026-11-30T05:12:58.001Z ERROR replica=r1 mcp.server.request_state: refusing to seal requestState on "
    "tools/call: principal binding error",
    "2026-11-30T05:12:58.002Z ERROR replica=r1 mcp.server.request_state: requestState codec raised during unseal "
    "on tools/call",
    "Traceback (most recent call last):",
    '{"level": "WARNING", "message": "slow round on tools/call", "pod": "p1"}',
    '{"level": "INFO", "message": "echoing the state", "requestState": "v1.AAAA", "pod": "p1"}',
    "                    WARNING  disk almost full                                disk.py:12",
    "WARNING  requestState store is slow",
    "{not json, requestState rejected on",
    "",
    "\x1b[31mWARNING\x1b[0m something else",
]


def test_everything_else_is_ignored(replica_logs, tmp_path, capsys):
    real = [line for path in replica_logs.values() for line in path.read_text().splitlines()
            if "requestState rejected on" in line]
    mixed = tmp_path / "mixed.log"
    mixed.write_text("\n".join(NOISE * 50 + real + NOISE * 50) + "\n", errors="replace")
    code, result = triage(capsys, "--file", str(mixed))
    assert result["by_reason_and_replica"] == PLAIN
    assert result["lines"] == len(NOISE) * 100 + len(real)


# --- live sources -------------------------------------------------------------------------------


def test_stdin_is_read_until_it_ends(replica_logs):
    text = "\n".join(NOISE) + "\n" + replica_logs["r1"].read_text() + replica_logs["r2"].read_text()
    finished = subprocess.run([sys.executable, "-m", "harness", "triage", "--stdin", "--json"], input=text,
                              capture_output=True, text=True, timeout=WAIT_SECONDS)
    result = json.loads(finished.stdout)
    assert result["by_reason_and_replica"] == PLAIN
    assert finished.returncode == 1


def test_a_file_rotated_while_followed_is_counted_on_both_sides(replica_logs, tmp_path):
    r1_lines = replica_logs["r1"].read_text()  # expired
    r2_lines = replica_logs["r2"].read_text()  # minted in the future, seal, request binding
    log = tmp_path / "app.log"
    log.write_text("before triage started: not counted\n" + r2_lines)
    port = free_port()
    process = live_triage("--file", f"{log}@app", "--metrics-port", str(port))
    try:
        wait_for(lambda: all(metric(port, "app", reason) == 0 for reason in REASONS), "every reason at 0", process)
        with log.open("a") as out:
            out.write("\n".join(NOISE) + "\n" + r2_lines)
        wait_for(lambda: metric(port, "app", "seal") == 1 and metric(port, "app", "request binding") == 1,
                 "the first half", process)
        with log.open("a") as out:  # written just before the rotation: must not be lost with the old file
            out.write(r1_lines)
        log.rename(tmp_path / "app.log.1")
        log.write_text(r2_lines)
        wait_for(lambda: metric(port, "app", "expired") == 1 and metric(port, "app", "seal") == 2, "the second half",
                 process)
        code, result = stop(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert result["by_reason_and_replica"] == {"minted in the future": {"app": 2}, "seal": {"app": 2},
                                               "request binding": {"app": 2}, "expired": {"app": 1}}
    assert code == 1


def test_sigterm_ends_a_live_triage_as_ctrl_c_does_with_its_summary(replica_logs, tmp_path):
    """What systemd, Kubernetes and `timeout` send: the counts so far are printed and judged, not lost. The line is
    counted only once the follow loop runs, which is where SIGTERM is caught."""
    log = tmp_path / "app.log"
    log.write_text("")
    port = free_port()
    process = live_triage("--file", f"{log}@app", "--metrics-port", str(port))
    try:
        wait_for(lambda: metric(port, "app", "expired") == 0, "the reasons at 0", process)
        log.write_text(replica_logs["r1"].read_text())  # expired
        wait_for(lambda: metric(port, "app", "expired") == 1, "the expired line", process)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=WAIT_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert json.loads(out)["by_reason_and_replica"] == {"expired": {"app": 1}}


@pytest.fixture()
def docker_client():
    """A client on an engine: the one that answers, or a private dockerd this test starts and stops."""
    with docker_engine():
        client = docker.from_env(timeout=30)
        yield client
        client.close()


def test_a_compose_services_container_is_followed_live(tmp_path, docker_client):
    client = docker_client
    from harness.targets.image import (  # an empty root over the host's /usr
        ensure_host_python_image,
        host_python_run_spec,
    )

    ensure_host_python_image(client)
    project, port, metrics_port = f"mrtr-triage-{uuid.uuid4().hex[:8]}", free_port(), free_port()
    spec = host_python_run_spec([tmp_path])
    labels = {"com.docker.compose.project": project, "com.docker.compose.service": "shop",
              "com.docker.compose.container-number": "1"}
    container = client.containers.run(
        # A real replica; refusing a state never reaches the shop's API, so none runs.
        command=spec.module("harness", "shop", "replica", "--port", str(port), "--api", "http://127.0.0.1:9",
                            "--replica-id", "d1", "--store", "memory", "--keyring", "ephemeral"),
        labels=labels, name=f"{project}-shop-1", detach=True, **spec.options())
    process = None
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _answers(f"{url}/healthz"), f"the replica in container {container.name}")
        process = live_triage("--docker-service", "shop", "--docker-project", project, "--metrics-port",
                              str(metrics_port))
        wait_for(lambda: metric(metrics_port, container.name, "malformed") == 0, "the container's replica at 0",
                 process)
        for state in ("not-a-token", "v1.AAAA", 12345):
            answer = post(f"{url}/mcp", "issue_refund", {"quote_id": "Q-1"}, id=3, responses=YES, state=state)
            assert answer.status_code == 400
        wait_for(lambda: metric(metrics_port, container.name, "malformed") == 2
                 and metric(metrics_port, container.name, "non-string requestState") == 1, "the container's lines",
                 process)
        code, result = stop(process)
    finally:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
        try:
            container.remove(force=True)
        except docker.errors.DockerException:
            pass  # the engine went away meanwhile: the test has failed already, and says why
    assert result["by_reason_and_replica"] == {"malformed": {container.name: 2},
                                               "non-string requestState": {container.name: 1}}
    assert code == 1


def test_several_compose_services_are_read_each_container_its_own_replica(tmp_path, docker_client, capsys):
    """The shipped stack's replicas are three services (replica1-replica3): `--docker-service` takes them all, and
    a service of the project it does not name is not read."""
    client = docker_client
    from harness.targets.image import ensure_host_python_image, host_python_run_spec

    ensure_host_python_image(client)
    project = f"mrtr-triage-{uuid.uuid4().hex[:8]}"
    spec = host_python_run_spec([tmp_path])

    def start(service: str, command: list[str]) -> docker.models.containers.Container:
        labels = {"com.docker.compose.project": project, "com.docker.compose.service": service,
                  "com.docker.compose.container-number": "1"}
        return client.containers.run(command=command, labels=labels, name=f"{project}-{service}-1", detach=True,
                                     **spec.options())

    containers = []
    try:
        ports = {}
        for service in ("replica1", "replica2"):
            ports[service] = port = free_port()
            containers.append(start(service, spec.module(
                "harness", "shop", "replica", "--port", str(port), "--api", "http://127.0.0.1:9", "--replica-id",
                service, "--store", "memory", "--keyring", "ephemeral")))
        # Another service of the project, logging a rejection line: not named, so not read.
        containers.append(start("api", ["-c", "print('WARNING requestState rejected on tools/call: seal')"]))
        for container, state in zip(containers, ("not-a-token", 12345), strict=False):
            url = f"http://127.0.0.1:{ports[container.labels['com.docker.compose.service']]}"
            wait_for(lambda url=url: _answers(f"{url}/healthz"), f"the replica in container {container.name}")
            answer = post(f"{url}/mcp", "issue_refund", {"quote_id": "Q-1"}, id=3, responses=YES, state=state)
            assert answer.status_code == 400
            wait_for(lambda container=container: b"requestState rejected" in container.logs(),
                     f"the rejection in {container.name}'s log")
        wait_for(lambda: b"rejected" in containers[2].logs(), "the other service's line")
        code, result = triage(capsys, "--docker-service", "replica1", "--docker-service", "replica2",
                              "--docker-project", project)
    finally:
        for container in containers:
            try:
                container.remove(force=True)
            except docker.errors.DockerException:
                pass  # the engine went away meanwhile: the test has failed already, and says why
    replica1, replica2 = (container.name for container in containers[:2])
    assert result["by_reason_and_replica"] == {"malformed": {replica1: 1}, "non-string requestState": {replica2: 1}}
    assert code == 1


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


# --- the window, and usage --------------------------------------------------------------------


def test_the_recent_window_slides_and_the_whole_window_keeps_everything():
    now = [0.0]
    counts = LiveCounts(60, clock=lambda: now[0])
    counts.declare(["r1", "r2"])
    counts.add("r1", "unknown key")
    now[0] = 30.0
    counts.add("r2", "unknown key")
    now[0] = 75.0
    snapshot = counts.snapshot()
    assert snapshot.recent == {"unknown key": {"r2": 1}}
    assert snapshot.total == {"unknown key": {"r1": 1, "r2": 1}}
    assert snapshot.rate(snapshot.by_reason(recent=True)["unknown key"], recent=True) == pytest.approx(1 / 60)
    assert snapshot.replicas == ("r1", "r2")


def test_the_live_table_sets_the_last_window_against_the_whole_run_with_advice():
    now = [0.0]
    counts = LiveCounts(60, clock=lambda: now[0])
    counts.declare(["r1", "r2", "r3"])
    for _ in range(4):
        counts.add("r2", "unknown key")
    now[0] = 100.0
    counts.add("r3", "unknown key")
    counts.add("r1", "seal")
    shown = render_live(counts.snapshot(), sources=["file logs/r1.log"], width=120)
    assert re.search(r"^  unknown key +1 +0\.02 +5 +0\.05$", shown, re.MULTILINE)
    assert re.search(r"^! seal +1 +0\.02 +1 +0\.01$", shown, re.MULTILINE)
    assert re.search(r"^  unknown key +0/0 +0/4 +1/1$", shown, re.MULTILINE)  # per replica: last 60s / total
    assert "only on r2, r3 of 3 replicas: after a deploy, this points at per-process keys" in shown


@pytest.mark.parametrize("args, message", [
    ([], "no source"),
    (["--stdin", "--docker-project", "p"], "--docker-project needs --docker-service"),
    (["--stdin", "--window", "soon"], "--window: not a duration"),
    (["--stdin", "--once", "--metrics-port", "9464"], "cannot be combined with --once"),
    (["--stdin", "--metrics-port", "70000"], "not a TCP port"),
    (["--command", "'unbalanced"], "No closing quotation"),
])
def test_bad_options_exit_2_with_one_clear_error(capsys, args, message):
    assert main(["triage", *args]) == 2
    assert message in capsys.readouterr().err


def test_a_log_named_without_file_gets_the_command_that_reads_it(capsys):
    assert main(["triage", "logs/r1 today.log"]) == 2
    (said,) = capsys.readouterr().err.strip().splitlines()
    assert "name a log with --file, e.g. mrtr-harness triage --once --file 'logs/r1 today.log'" in said


def test_a_source_that_cannot_be_opened_exits_3(tmp_path, capsys):
    assert main(["triage", "--once", "--file", str(tmp_path / "missing.log")]) == 3
    assert "no such file" in capsys.readouterr().err
    assert main(["triage", "--once", "--command", "/nonexistent/kubectl logs -f"]) == 3
    assert "cannot start" in capsys.readouterr().err


def test_the_help_shows_every_source_and_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        main(["triage", "--help"])
    shown = capsys.readouterr().out
    for option in ("--file", "--command", "--stdin", "--docker-service", "--docker-project", "--once", "--json",
                   "--metrics-port", "--window"):
        assert option in shown
    assert "Exit codes: 0 " in shown and "docs/exit-codes.md" in shown
    assert "--file PATH[@LABEL]" in shown and "LABEL=PATH, the older form, is still read but deprecated" in \
        " ".join(shown.split())


# --- a pile of logs: compressed, binary, repeated, unlabelled, and placed by their own time --------------


def shop_line(stamp: str, reason: str, replica: str | None = None) -> str:
    """One rejection line as the shop's replicas log it (`stamp` is the line's own time, '' for none)."""
    where = f" replica={replica}" if replica else ""
    return f"{stamp} WARNING{where} mcp.server.request_state: requestState rejected on tools/call: {reason}".lstrip()


def test_a_gzipped_log_is_read_like_its_plain_self(replica_logs, tmp_path, capsys):
    rotated = tmp_path / "r2.log.1.gz"
    rotated.write_bytes(gzip.compress(replica_logs["r2"].read_bytes()))
    code, result = triage(capsys, "--file", str(replica_logs["r1"]), str(rotated))
    assert result["by_reason_and_replica"] == PLAIN
    assert code == 1


def test_a_gzipped_log_is_read_once_not_followed(tmp_path, capsys):
    rotated = tmp_path / "r2.log.1.gz"
    rotated.write_bytes(gzip.compress(shop_line("", "seal").encode() + b"\n"))
    assert main(["triage", "--file", str(rotated)]) == 2
    assert f"{rotated} is gzipped" in capsys.readouterr().err


@pytest.mark.parametrize("name, content, words", [
    ("core", b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256)) * 4, "is a binary file"),
    ("dump.gz", gzip.compress(b"\x00\x01\x02" * 100, mtime=0), "is a binary file"),
    ("cut.gz", b"\x1f\x8b\x08\x00garbage", "starts like a gzip file but cannot be decompressed"),
], ids=["binary", "gzipped-binary", "damaged-gzip"])
def test_a_file_that_is_no_log_exits_2_naming_it(tmp_path, capsys, name, content, words):
    path = tmp_path / name
    path.write_bytes(content)
    assert main(["triage", "--once", "--file", str(path)]) == 2
    assert f"{path} {words}" in capsys.readouterr().err


def test_the_same_file_given_twice_is_counted_once(tmp_path, capsys):
    log = tmp_path / "r1.log"
    log.write_text(shop_line("2026-11-30T05:00:00Z", "expired") + "\n")
    os.link(log, tmp_path / "hard.log")
    assert main(["triage", "--once", "--json", "--file", str(log), f"{tmp_path}/./r1.log",
                 str(tmp_path / "hard.log")]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["by_reason_and_replica"] == {"expired": {"r1": 1}}
    assert err.count(f"is the same file as {log}: read once") == 2


def test_files_without_a_label_are_named_by_their_base_name(tmp_path, capsys):
    (tmp_path / "r7.log.1").write_text(shop_line("", "expired") + "\n")
    (tmp_path / "r8.log.2.gz").write_bytes(gzip.compress((shop_line("", "expired") + "\n").encode()))
    (tmp_path / "all.log").write_text(shop_line("", "audience", replica="r9") + "\n")
    code, result = triage(capsys, "--file", *(str(tmp_path / name) for name in ("r7.log.1", "r8.log.2.gz", "all.log")),
                          "--file", f"{tmp_path / 'all.log'}@r10")
    assert result["by_reason_and_replica"] == {"expired": {"r7": 1, "r8": 1}, "audience": {"r9": 1}}
    assert "unknown" not in result["replicas"]


def test_a_files_label_follows_an_at_sign_as_in_a_scenarios_logs_entries(tmp_path, capsys):
    """`--file PATH@LABEL`, a scenario's `file:PATH@LABEL` without its kind; an `@` inside a folder's name, or in
    the name of a file that exists, is part of the path."""
    (tmp_path / "user@host").mkdir()
    (tmp_path / "user@host" / "r7.log").write_text(shop_line("", "expired") + "\n")
    (tmp_path / "app@2026-11-30.log").write_text(shop_line("", "audience") + "\n")
    (tmp_path / "plain.log").write_text(shop_line("", "seal") + "\n")
    code, result = triage(capsys, "--file", str(tmp_path / "user@host" / "r7.log"),
                          str(tmp_path / "app@2026-11-30.log"), f"{tmp_path / 'plain.log'}@edge-1.eu")
    assert result["by_reason_and_replica"] == {"expired": {"r7": 1}, "audience": {"app@2026-11-30": 1},
                                               "seal": {"edge-1.eu": 1}}
    assert code == 1


def test_the_older_label_first_form_still_counts_and_says_how_to_write_it_now(tmp_path, capsys):
    log = tmp_path / "any.log"
    log.write_text(shop_line("", "expired") + "\n")
    code = main(["triage", "--once", "--json", "--file", f"r3={log}"])
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["by_reason_and_replica"] == {"expired": {"r3": 1}}
    assert err.strip() == (f"mrtr-harness triage: --file r3={log}: LABEL=PATH is deprecated; write {log}@r3, the "
                           "form a scenario's logs entries use")


@pytest.mark.parametrize("value, message", [
    ("logs/r1.log@", "nothing after '@' in 'logs/r1.log@': '@' is followed by the replica's label; write PATH@LABEL, "
                     "e.g. logs/r1.log@r1"),
    ("@r1", "no path before '@' in '@r1'; write PATH@LABEL, e.g. logs/r1.log@r1"),
    ("logs/r1.log@r 1", "the replica label 'r 1' in 'logs/r1.log@r 1' holds characters a label cannot (it may hold "
                        "letters, digits, '.', '_' and '-'); write PATH@LABEL, e.g. logs/r1.log@r1"),
])
def test_a_bad_file_label_exits_2_with_one_line_saying_how_to_write_it(value, message, capsys):
    assert main(["triage", "--once", "--file", value]) == 2
    assert capsys.readouterr().err == f"mrtr-harness triage: --file: {message}\n"


PILE = [shop_line("2025-06-01T04:59:59Z", "expired", "r1"),
        shop_line("2025-06-01T05:00:00Z", "unknown key", "r1"),
        shop_line("2025-06-01T05:10:00Z", "unknown key", "r2"),
        shop_line("", "unknown key", "r2"),
        shop_line("2025-06-01T05:20:00+02:00", "expired", "r2"),  # 03:20 UTC, before --since
        shop_line("2025-06-01T05:59:30Z", "expired", "r2"),
        shop_line("2025-06-01T06:00:01Z", "unknown key", "r1")]


def test_since_and_until_keep_the_lines_written_in_between_by_their_own_time(tmp_path, capsys):
    (tmp_path / "pile.log").write_text("\n".join(PILE) + "\n")
    code, result = triage(capsys, "--file", str(tmp_path / "pile.log"),
                          "--since", "2025-06-01T05:00:00Z", "--until", "2025-06-01T06:00:00+00:00")
    assert result["by_reason_and_replica"] == {"unknown key": {"r1": 1, "r2": 1}, "expired": {"r2": 1}}
    assert result["first_seen"] == {"unknown key": "2025-06-01T05:00:00.000+00:00",
                                    "expired": "2025-06-01T05:59:30.000+00:00"}
    assert result["last_seen"]["unknown key"] == "2025-06-01T05:10:00.000+00:00"
    assert (result["outside_since_until"], result["undated"]) == (3, 1)
    assert main(["triage", "--once", "--file", str(tmp_path / "pile.log"), "--since", "2025-06-01T05:00:00Z"]) == 0
    summary = capsys.readouterr().out
    assert re.search(r"^  unknown key +3 +\S+ +2025-06-01 05:00:00 +2025-06-01 06:00:01$", summary, re.MULTILINE)
    assert "2 rejection(s) written outside --since/--until were left out" in summary
    assert "1 rejection(s) whose line carries no time were left out" in summary


def test_since_after_until_and_a_time_that_is_none_exit_2(capsys):
    assert main(["triage", "--stdin", "--since", "2025-06-02T00:00Z", "--until", "2025-06-01T00:00Z"]) == 2
    assert "is after --until" in capsys.readouterr().err
    assert main(["triage", "--stdin", "--since", "yesterday"]) == 2
    assert "--since: 'yesterday' is neither a time" in capsys.readouterr().err


def test_read_once_the_last_window_ends_with_the_logs_by_their_own_time(tmp_path, capsys):
    (tmp_path / "pile.log").write_text("\n".join(PILE) + "\n")
    code, result = triage(capsys, "--file", str(tmp_path / "pile.log"), "--window", "60s")
    window = result["last_window"]
    assert window["by_reason_and_replica"] == {"unknown key": {"r1": 1}, "expired": {"r2": 1}}
    assert window["ends"] == "2025-06-01T06:00:02.000+00:00" and window["by"] == "the lines' own time"
    assert result["rejections"] == len(PILE) and result["undated"] == 1


def test_an_unknown_reason_shows_the_text_it_was_logged_with(tmp_path, capsys):
    (tmp_path / "r1.log").write_text("\n".join([shop_line("", "a reason from a newer SDK")] * 2) + "\n")
    code, result = triage(capsys, "--file", str(tmp_path / "r1.log"))
    assert result["by_reason_and_replica"] == {"other": {"r1": 2}}
    assert result["other_logged"] == {"a reason from a newer SDK": 2}
    assert main(["triage", "--once", "--file", str(tmp_path / "r1.log")]) == 0
    assert "logged: 'a reason from a newer SDK' (2)" in capsys.readouterr().out


def test_the_unknown_key_advice_names_a_key_retired_after_a_correct_rotation(tmp_path, capsys):
    (tmp_path / "r1.log").write_text(shop_line("", "unknown key") + "\n")
    code, result = triage(capsys, "--file", str(tmp_path / "r1.log"))
    cause = result["advice"]["unknown key"]["cause"]
    assert "Harmless when it follows a correct rotation" in cause and "had expired anyway" in cause
    assert "nothing to fix" in result["advice"]["unknown key"]["next_step"]


# --- the catalogue named beside the advice ------------------------------------------------------


def test_the_advice_names_the_catalogue_scenario_that_reproduces_each_reason(replica_logs, capsys):
    from harness.config.scenario import load_scenario
    from harness.config.thresholds import parse_thresholds

    _, result = triage(capsys, *(f"--file={path}@{label}" for label, path in replica_logs.items()))
    rerun = "mrtr-harness run --reproduce "
    assert result["advice"]["seal"]["reproduced_by"] == [rerun + "scenarios/on-call/tampered-state.toml"]
    assert result["advice"]["minted in the future"]["reproduced_by"] == [rerun + "scenarios/on-call/clock-ahead.toml"]
    assert rerun + "scenarios/on-call/slow-leads.toml" in result["advice"]["expired"]["reproduced_by"]
    for reason, advice in result["advice"].items():  # each named file is a valid scenario reproducing that reason
        for command in advice["reproduced_by"]:
            assert command.startswith(rerun), command
            scenario = load_scenario(ROOT / command.removeprefix(rerun))
            selected = [threshold for threshold in parse_thresholds(scenario.reproduces or {})
                        if threshold.metric == "rejections" and threshold.selector == (("reason", reason),)]
            assert selected, (reason, command)
    main(["triage", "--once", *(f"--file={path}@{label}" for label, path in replica_logs.items())])
    out = capsys.readouterr().out
    assert "rerun: mrtr-harness run --reproduce scenarios/on-call/tampered-state.toml" in out


def test_only_a_parsed_whole_run_reproduction_of_a_reason_names_a_scenario(tmp_path):
    from harness.triage.on_call_catalogue import reproducers

    (tmp_path / "a-reproducer.toml").write_text("[reproduces]\n\"rejections{reason='seal'}\" = \"> 0\"\n")
    (tmp_path / "b-broken.toml").write_text("[reproduces\n\"rejections{reason='seal'}\" = \"> 0\"\n")
    (tmp_path / "c-one-replica.toml").write_text(
        "[reproduces]\n\"rejections{reason='seal',replica='r1'}\" = \"> 0\"\n")
    (tmp_path / "d-healthy.toml").write_text("[reproduces]\n\"rejections{reason='seal'}\" = \"== 0\"\n")
    (tmp_path / "e-not-a-table.toml").write_text("reproduces = 3\n")
    (tmp_path / "f-not-text.toml").write_bytes(b"\xff\xfe[reproduces]\n")
    (tmp_path / "g-expected-only.toml").write_text("[expect]\n\"rejections{reason='seal'}\" = \"> 0\"\n")
    found = reproducers(tmp_path)
    assert list(found) == ["seal"] and [Path(file).name for file in found["seal"]] == ["a-reproducer.toml"]
    assert reproducers(tmp_path / "absent") == {}


# --- trace ids ---------------------------------------------------------------------------------

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
OTHER_TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "00f067aa0ba902b7"
REJECTED = "requestState rejected on tools/call: "
TRACED = [  # (a line in one of the shapes servers write, the reason in it, the trace id in it)
    (f"2026-11-30T05:12:57.934Z WARNING replica=r1 trace_id={TRACE} mcp.server.request_state: {REJECTED}seal",
     "seal", TRACE),  # the shop's replicas
    (f"2026-11-30T05:12:58.000Z WARNING replica=r1 mcp.server.request_state: {REJECTED}expired "
     f"trace_id={TRACE} span_id={SPAN}", "expired", TRACE),  # appended after the message
    (f"2026-11-30 05:12:58,100 WARNING [mcp.server.request_state] [request_state.py:263] [trace_id={OTHER_TRACE} "
     f"span_id={SPAN} resource.service.name=shop trace_sampled=True] - {REJECTED}unknown key", "unknown key",
     OTHER_TRACE),  # OpenTelemetry's logging instrumentation
    (json.dumps({"message": f"{REJECTED}audience", "trace_id": TRACE.upper(), "pod": "p1"}), "audience", TRACE),
    (json.dumps({"msg": f"{REJECTED}audience", "traceparent": f"00-{OTHER_TRACE}-{SPAN}-01"}), "audience",
     OTHER_TRACE),
    (json.dumps({"message": f"{REJECTED}malformed", "trace": {"id": TRACE}}), "malformed", TRACE),  # ECS
    (f"2026-11-30T05:12:58.200Z WARNING replica=r2 mcp.server.request_state: {REJECTED}seal "
     f"traceparent=00-{OTHER_TRACE}-{SPAN}-01", "seal", OTHER_TRACE),
    (f"2026-11-30T05:12:58.300Z WARNING replica=r2 trace_id={'0' * 32} mcp.server.request_state: {REJECTED}seal",
     "seal", None),  # the invalid (all-zero) id is no trace
    (shop_line("2026-11-30T05:12:58.400Z", "expired", "r2"), "expired", None),
]


@pytest.mark.parametrize("line, reason, trace_id", TRACED)
def test_a_rejection_line_gives_its_trace_id_in_every_shape_and_the_reason_stays_whole(line, reason, trace_id):
    seen = []
    parser = LineParser(seen.append)
    parser.feed(line)
    assert [(found.reason, found.trace_id) for found in seen] == [(reason, trace_id)]


def test_triage_shows_each_reasons_latest_trace_ids_in_its_summary_and_json(tmp_path, capsys):
    (tmp_path / "mixed.log").write_text("\n".join(line for line, _, _ in TRACED) + "\n")
    code, result = triage(capsys, "--file", str(tmp_path / "mixed.log"))
    assert result["trace_ids"] == {"seal": [OTHER_TRACE, TRACE], "expired": [TRACE], "unknown key": [OTHER_TRACE],
                                   "audience": [OTHER_TRACE, TRACE], "malformed": [TRACE]}
    main(["triage", "--once", "--file", str(tmp_path / "mixed.log")])
    shown = " ".join(capsys.readouterr().out.split())  # unwrapped
    assert f"trace: {OTHER_TRACE}, {TRACE} (the latest, newest first)" in shown


def test_a_reason_keeps_only_its_latest_few_trace_ids_and_the_live_table_shows_them():
    counts = LiveCounts(60, clock=lambda: 0.0)
    traces = [f"{number:032x}" for number in range(1, 8)]
    for trace_id in traces:
        counts.add("r1", "expired", trace_id=trace_id)
    counts.add("r1", "expired")  # a line without one changes nothing
    snapshot = counts.snapshot()
    assert snapshot.trace_ids == {"expired": traces[:-4:-1]}  # bounded: the newest three, newest first
    assert f"trace: {', '.join(traces[:-4:-1])}" in render_live(snapshot, sources=["stdin"], width=160)
