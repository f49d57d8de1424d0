"""The docker backend against a real Docker engine: replicas as containers, broken through the engine's API.

The engine is the one that answers, or a private dockerd the module starts (and stops by
its PID). The image is an empty root imported in under a second,
run with host networking and read-only mounts of this interpreter and this harness.
Every container a test creates carries the harness's run label and is gone at the end.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time

import docker
import httpx
import pytest

from harness.config.scenario import parse_scenario
from harness.mrtr.keys import fingerprint, new_key
from harness.targets.docker import HARNESS_PID_LABEL, HOST_LABEL, RUN_LABEL, DockerTarget, remove_orphans
from harness.targets.image import HOST_PYTHON_IMAGE, ensure_host_python_image
from harness.targets.interface import ReplicaChange
from tests.harness_run import key_files, run_harness
from tests.services import docker_engine

pytestmark = pytest.mark.services

ROTATION_WITH_A_RESTART = f"""
name = "docker-rotation"
seed = 12
duration = "13s"
time_scale = 60
grace = "3s"

[target]
kind = "docker"
image = "{HOST_PYTHON_IMAGE}"
replicas = 3
keyring = "file"
ttl = "10m"

[load]
arrival_rate = 10  # a call's refund lands on r1 one time in three: enough of them inside the 3 s gap
routing = "other-replica"

[[flows]]
kind = "refund"
amount = "above-limit"

[leads]
think = {{ dist = "lognormal", median = "30s", p95 = "90s" }}

[[chaos]]
at = "1s"
action = "restart"
replica = 2

[[chaos]]
at = "2s"
action = "rotate-keys"
order = "minter-first"
replica = 1
phase_gap = "3s"

[expect]
"rejections{{reason='unknown key'}}" = "> 0"
unexplained_rejections = "== 0"
invariant_violations = "== 0"
"""

EPHEMERAL_RESTART = f"""
name = "docker-ephemeral-restart"
seed = 11
duration = "9s"
time_scale = 60
grace = "3s"

[target]
kind = "docker"
image = "{HOST_PYTHON_IMAGE}"
replicas = 2
keyring = "ephemeral"
ttl = "10m"

[load]
arrival_rate = 4
routing = "same-replica"

[[flows]]
kind = "refund"
amount = "above-limit"

[[flows]]
kind = "return"

[leads]
think = {{ dist = "lognormal", median = "3m", p95 = "6m" }}

[[chaos]]
at = "2s"
action = "restart"
replica = 1

[expect]
"rejections{{reason='unknown key'}}" = "> 0"
unexplained_rejections = "== 0"
invariant_violations = "== 0"
"""


@pytest.fixture(scope="module")
def engine():
    import docker

    with docker_engine():
        client = docker.from_env()
        ensure_host_python_image(client)
        yield client
        client.close()


@pytest.fixture(scope="module")
def target(engine, tmp_path_factory):
    """Two replicas on key-ring files, started once for the tests that break them by hand."""
    scenario = parse_scenario(ROTATION_WITH_A_RESTART.replace("replicas = 3", "replicas = 2"))
    target = DockerTarget(scenario, tmp_path_factory.mktemp("docker") / "run" / "target")
    try:
        target.start()
        yield target
    finally:
        target.stop()
    assert not engine.containers.list(all=True, filters={"label": f"{RUN_LABEL}={target.run_id}"})


@pytest.fixture
def no_leftovers(engine):
    """Every container the test created is removed when it ends (those there before it, such as the module's
    `target`, are not the test's)."""
    before = {container.id for container in engine.containers.list(all=True, filters={"label": RUN_LABEL})}
    yield
    left = [container for container in engine.containers.list(all=True, filters={"label": RUN_LABEL})
            if container.id not in before]
    for container in left:
        container.remove(force=True)
    assert not left, f"containers left behind: {[c.name for c in left]}"


def rejections_by_reason(summary: dict) -> dict[str, dict[str, int]]:
    return summary["rejections"]["by_reason"]


def chaos_ends(finished) -> dict[str, dict]:
    return {record["action"]: record for record in finished.journal()
            if record["type"] == "chaos" and record["phase"] == "end"}


def test_a_minter_first_rotation_in_containers_is_explained_by_the_replicas_container_logs(engine, no_leftovers,
                                                                                          tmp_path):
    scenario = tmp_path / "rotation.toml"
    scenario.write_text(ROTATION_WITH_A_RESTART)
    finished = run_harness(scenario, tmp_path / "results", timeout=120)
    summary = finished.summary
    assert finished.code == 0, finished.output
    assert summary["status"] == "completed"
    ends = chaos_ends(finished)
    assert {"restart", "rotate-keys", "rollback"} <= set(ends), ends  # each one finished within the run
    assert ends["restart"]["ok"] and ends["restart"]["detail"]["ready_after"] > 0, ends["restart"]
    assert ends["rotate-keys"]["ok"], ends["rotate-keys"]
    assert ends["rollback"]["ok"], ends["rollback"]
    unknown = rejections_by_reason(summary)["unknown key"]
    # r1 seals with the new key first: the others, still on [old], refuse its states, and say so in their logs.
    assert unknown.get("r2", 0) + unknown.get("r3", 0) > 0, unknown
    assert unknown.get("r1", 0) == 0, unknown
    assert summary["reconciliation"]["unexplained"] == 0
    rounds = {record["replica"] for record in finished.journal() if record["type"] == "round"}
    assert rounds == {"r1", "r2", "r3"}
    assert not key_files(finished.folder), key_files(finished.folder)  # the bind-mounted rings are deleted


def test_a_restart_on_ephemeral_keys_in_a_container_gives_unknown_key(engine, no_leftovers, tmp_path):
    scenario = tmp_path / "ephemeral.toml"
    scenario.write_text(EPHEMERAL_RESTART)
    finished = run_harness(scenario, tmp_path / "results", timeout=120)
    assert finished.code == 0, finished.output
    journal = finished.journal()
    start, end = (record for record in journal if record["type"] == "chaos" and record["action"] == "restart")
    assert end["ok"], end
    rejections = [record for record in journal if record["type"] == "rejection"]
    # Retries stay on the replica that minted the state: nothing is refused until the restart drops r1's key.
    assert rejections and all(record["t"] >= start["t"] for record in rejections), rejections[:3]
    assert {record["reason"] for record in rejections} == {"unknown key"}
    rounds = [record for record in journal if record["type"] == "round"]
    refused = [record for record in rounds if record["outcome"] == "invalid_state"]
    assert len(refused) == len(rejections)
    for retry in refused:  # each one a state the old r1 process sealed, retried after it was gone
        first = next(record for record in rounds if record["flow_id"] == retry["flow_id"]
                     and record["tool"] == retry["tool"] and record["round"] == 1)
        assert first["replica"] == "r1" and first["t"] < end["t"] and retry["t"] >= start["t"], (first, retry)


def test_a_restart_through_the_docker_cli_in_target_commands_replaces_the_engine_call(engine, no_leftovers,
                                                                                      tmp_path):
    """A `[target.commands] restart` runs instead of the backend's own restart: here the docker CLI, finding the
    replica's container by the run id in its environment and the replica label the backend gives it."""
    command = ('restart = ["sh", "-c", "docker restart $(docker ps -q --filter name=mrtr-$MRTR_RUN_ID- '
               '--filter label=mrtr-harness.replica={replica})"]')
    scenario = tmp_path / "cli-restart.toml"
    scenario.write_text(EPHEMERAL_RESTART.replace('ttl = "10m"\n', f'ttl = "10m"\n\n[target.commands]\n{command}\n', 1))
    finished = run_harness(scenario, tmp_path / "results", timeout=120)
    assert finished.code == 0, finished.output
    journal = finished.journal()
    [ran] = [record for record in journal if record["type"] == "command"]
    assert (ran["name"], ran["target"], ran["exit_code"], ran.get("ready")) == ("restart", "r1", 0, True), ran
    assert len(ran["output"].strip()) >= 12, "docker restart prints the id of the container it restarted"
    [end] = [record for record in journal if record["type"] == "chaos" and record["phase"] == "end"
             and record["action"] == "restart"]
    assert end["ok"] and end["detail"]["commands"][0]["name"] == "restart", end
    rejections = [record for record in journal if record["type"] == "rejection"]
    assert rejections and {record["reason"] for record in rejections} == {"unknown key"}


def test_the_log_collector_follows_a_container_across_restart_and_recreation(target):
    from harness.logs.collector import Collector

    seen: list[str] = []
    collector = Collector(lambda event: None, since=time.time(),
                          on_line=lambda replica, line: seen.append(f"{replica} {line}"))
    source = target.log_sources()[0]
    assert source.kind == "docker"
    collector.follow(source)  # how a run hands a log source over
    try:
        target.restart(0)
        target.reconfigure([0], ReplicaChange(name="renamed"))  # left so: the rollback test below puts it back
    finally:
        collector.stop(settle=1.0)
    serving = [line for line in seen if "serving http://" in line]
    assert len(serving) == 2, seen  # the restarted container and the recreated one; not the lines before
    assert "name=renamed" in serving[-1] and all(line.startswith("r1 ") for line in seen)
    assert len(seen) == len(set(seen)), "no line read twice across re-attachments"


def test_rollback_leaves_every_replica_container_running_with_its_original_ring(target):
    original = [replica.original_ring for replica in target.replicas]
    second = target.replicas[1].container.id
    target.set_ring(0, [new_key(), *original[0]])
    target.pause(0)
    target.reconfigure([1], ReplicaChange(clock_offset=120.0))
    target.replicas[1].container.kill()  # as if a kill's start had failed: left stopped
    assert target.replicas_up() == 0
    undone = target.rollback()
    assert any("resumed r1" in line for line in undone) and any("ring of r1" in line for line in undone), undone
    assert any("recreated r2" in line for line in undone), undone
    assert target.replicas_up() == 2
    for index, replica in enumerate(target.replicas):
        replica.container.reload()
        assert replica.container.status == "running"
        assert target.ring(index) == original[index]
        health = httpx.get(replica.url.removesuffix("/mcp") + "/healthz", timeout=5).json()
        assert health["keys"] == [fingerprint(key) for key in original[index]]
        assert health["clock_offset"] == 0.0 and health["name"] == "shop"
    assert target.replicas[1].container.id != second, "a changed setting is applied by a new container"


def test_every_container_names_the_harness_that_created_it(target):
    for replica in target.replicas:
        labels = replica.container.labels
        assert labels[HARNESS_PID_LABEL] == str(os.getpid()) and labels[HOST_LABEL] == socket.gethostname()


def test_containers_left_by_a_harness_that_died_are_removed_and_those_of_a_live_one_kept(engine):
    """A harness killed with SIGKILL cannot remove its containers: the next docker run on the host does."""
    gone = subprocess.Popen(["true"])
    gone.wait()  # its PID is now no process's
    owner = {HOST_LABEL: socket.gethostname()}
    left = engine.containers.create(HOST_PYTHON_IMAGE, command=["true"],
                                    labels={RUN_LABEL: "left-behind", HARNESS_PID_LABEL: str(gone.pid), **owner})
    live = engine.containers.create(HOST_PYTHON_IMAGE, command=["true"],
                                    labels={RUN_LABEL: "running-now", HARNESS_PID_LABEL: str(os.getpid()), **owner})
    try:
        removed = remove_orphans(engine)
        remaining = {container.id for container in engine.containers.list(all=True, filters={"label": RUN_LABEL})}
        assert left.name in removed and left.id not in remaining
        assert live.id in remaining
    finally:
        for container in (left, live):
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)


def test_a_docker_target_needs_an_image_or_a_compose_project():
    with pytest.raises(ValueError, match="image"):
        parse_scenario(ROTATION_WITH_A_RESTART.replace(f'image = "{HOST_PYTHON_IMAGE}"', ""))


HUNTED = f"""
name = "hunted"
seed = 20
duration = "9s"
time_scale = 60
grace = "10s"

[target]
kind = "docker"
image = "{HOST_PYTHON_IMAGE}"
replicas = 1
keyring = "ephemeral"
ttl = "10m"

[load]
arrival_rate = 4
routing = "same-replica"

[[flows]]
kind = "refund"
amount = "above-limit"

[leads]
think = {{ dist = "constant", value = "8m" }}

[expect]
"rejections{{reason='unknown key'}}" = "== 0"

[hunt]
trials = 1
trial_duration = "4s"
actions = ["restart"]
controls = 0
expect = true
max_steps = 1
reruns = 2
must_fail = 1
shrink_runs = 2
reproduce = 0
"""


def test_a_hunt_of_replicas_in_containers_restarts_them_through_the_engine_and_keeps_the_restart(engine, no_leftovers,
                                                                                                 tmp_path):
    """A docker target hunts as it runs (about 60 s): seed 20's one trial restarts the replica's container at 2 s, while
    the refunds whose states it sealed since the load began wait on their leads (8 s each, longer than a busy engine's
    restart: a lead who answers while the container is down gets a connection error, not `unknown key`; per-process
    keys: `unknown key`, which `[expect]` forbids, counted here); a replay fails too; the shrink's candidate drops the
    restart and holds (both its runs); the minimal schedule keeps it and names the same image (its rate not measured:
    `reproduce = 0`); no container is left. One replica, so every state waits on the one restarted: with two, a flow's
    quote and refund take turns, and a run whose refunds all went to the replica not restarted held."""
    import json
    import sys

    from tests.harness_run import ROOT

    path = tmp_path / "hunted.toml"
    path.write_text(HUNTED)
    done = subprocess.run([sys.executable, "-m", "harness", "hunt", str(path), "--results", str(tmp_path / "results")],
                          cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 1, done.stdout + done.stderr
    [folder] = list((tmp_path / "results").iterdir())
    records = [json.loads(line) for line in (folder / "hunt.jsonl").read_text().splitlines()]
    trials = [record for record in records if record["type"] == "trial"]
    search = trials[0]
    assert search["outcome"] == "failed" and search["schedule"]["steps"] == [
        {"action": "restart", "at": 2.0, "replica": 1}]
    assert search["reasons"]["unknown key"] > 0
    # replayed twice with fresh seeds before the shrink: one failing the same way suffices (another seed's
    # flows may have no state waiting when it restarts)
    replays = [trial for trial in trials if trial["purpose"] == "replay"]
    assert len(replays) == 2 and any(trial["outcome"] == "failed" for trial in replays)
    shrink = next(trial for trial in trials if trial["purpose"] == "shrink")
    assert shrink["schedule"]["steps"] == [] and shrink["outcome"] == "held"
    assert [step["action"] for step in records[-1]["shrink"]["minimal"]["steps"]] == ["restart"]
    minimal = parse_scenario((folder / "minimal.toml").read_text())
    assert minimal.target.kind == "docker" and minimal.target.image == HOST_PYTHON_IMAGE
    assert [(step.action, step.replica) for step in minimal.chaos] == [("restart", 1)]
