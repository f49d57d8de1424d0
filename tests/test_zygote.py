"""Replicas forked from the zygote: each start is a new process that behaves like a fresh interpreter.

A restart must still be a restart (new PID, in-memory keys gone, the old process gone),
its output must land in the replica's own log, and nothing may outlive the deployment.
"""

from __future__ import annotations

import os
import socket
import time

import httpx
import pytest

from harness.processes.children import alive, free_port
from harness.targets import local_deployment
from harness.targets.local_deployment import LocalDeployment, ReplicaOptions


def health(deployment: LocalDeployment, index: int) -> dict:
    return httpx.get(f"{deployment.replicas[index].base_url}/healthz", timeout=5).json()


@pytest.fixture
def shop(tmp_path):
    deployment = LocalDeployment(tmp_path, replicas=2)
    deployment.start([ReplicaOptions(keyring="ephemeral"), ReplicaOptions()])
    try:
        yield deployment
    finally:
        deployment.stop()


def test_replicas_are_forked_from_one_zygote_and_each_is_its_own_session(shop):
    assert shop.zygote is not None
    zygote = shop.zygote.process.pid
    for replica in shop.replicas:
        assert replica.process is None and replica.pid is not None  # forked, not an interpreter we started
        assert os.getsid(replica.pid) == replica.pid
        with open(f"/proc/{replica.pid}/stat") as stat:
            parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        assert parent == zygote


@pytest.mark.parametrize("kill", [False, True])
def test_a_restart_is_a_new_process_with_new_ephemeral_keys_logging_to_the_same_file(shop, kill):
    old_pid, old_keys = shop.replicas[0].pid, health(shop, 0)["keys"]
    ready = shop.restart_replica(0, kill=kill)
    assert ready > 0
    assert shop.replicas[0].pid != old_pid and not alive(old_pid)
    assert health(shop, 0)["keys"] != old_keys  # an ephemeral key does not survive a restart
    log = shop.replicas[0].log_path.read_text()
    assert log.count("serving http://") == 2  # the first process's start and the second's, one file


def test_a_replica_that_cannot_start_says_so_with_its_log(shop, tmp_path):
    from harness.targets.local_deployment import DeploymentError

    with pytest.raises(DeploymentError, match=r"r2 exited .* before it was ready; see .*r2\.log"):
        shop.restart_replica(1, options=ReplicaOptions(keyring=f"file:{tmp_path / 'no-such-ring'}"))
    assert "no-such-ring" in shop.replicas[1].log_path.read_text()


def test_stopping_the_deployment_leaves_no_zygote_and_no_replica(tmp_path):
    deployment = LocalDeployment(tmp_path, replicas=2)
    deployment.start()
    pids = [replica.pid for replica in deployment.replicas]
    zygote = deployment.zygote
    assert zygote is not None
    deployment.stop()
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in pids)
    assert zygote.process.poll() is not None


def test_a_replica_whose_port_was_taken_before_it_bound_it_starts_again_on_another(tmp_path, monkeypatch):
    """A port picked free is free when picked, not when bound: here another socket holds r1's port first. r1 ends
    with "address already in use", and the deployment starts it again on another port instead of failing the run
    as the target's fault; the squatter's port is never r1's."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        picks = iter([None, taken])  # the API's pick, then r1's

        def pick() -> int:
            return next(picks, None) or free_port()

        monkeypatch.setattr(local_deployment, "free_port", pick)
        deployment = LocalDeployment(tmp_path, replicas=2)
        try:
            deployment.start()
            ports = [replica.port for replica in deployment.replicas]
            assert taken not in ports and len(set(ports)) == 2
            assert b"address already in use" in (tmp_path / "logs" / "r1.log").read_bytes()
            assert all(replica.running() for replica in deployment.replicas)
        finally:
            deployment.stop()
