"""The embedded target: the shop as local processes (the `process` backend), started and broken by the run.

Replicas get their own ring file each, so a key rotation rolls out replica by replica
the way a real deployment does, and can be done out of order on purpose. TTLs given to
replicas are real seconds: the scenario's modelled TTL divided by its time scale. The
ring files hold the only copies of the keys outside the replicas' memory: they are deleted
when the target stops, so a results folder never keeps a key.

With `[target.auth]` (client-credentials, no token_url) the shop runs its own authorization
server (`harness.targets.auth_admin`) and every replica verifies its tokens; a client finds
the token endpoint by discovery from a replica's 401. The auth chaos actions act on it.
"""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.config.logs import LogSource
from harness.config.scenario import Scenario
from harness.config.target import TargetConfig
from harness.processes.children import process_cpu_seconds
from harness.targets.auth_admin import AuthAdminError, auth_server_spec
from harness.targets.health import ReplicaHealth, from_process
from harness.targets.interface import AuthChange, ChaosUnsupported, ReplicaChange, RingKeys, TargetError
from harness.targets.ledger_check import LedgerAtApi
from harness.targets.local_deployment import DeploymentError, LocalDeployment, ReplicaOptions, shop_store, stop_shop
from harness.targets.redis_process import RedisProcess


class EmbeddedTarget(RingKeys, LedgerAtApi):
    """The shop's API and N replicas on free 127.0.0.1 ports, torn down at the end whatever happens."""

    def __init__(self, scenario: Scenario, workdir: Path) -> None:
        self.scenario = scenario
        self.workdir = workdir
        spec = scenario.target
        self.redis = RedisProcess(workdir / "redis") if spec.store == "redis" else None
        self.deployment: LocalDeployment | None = None
        self.original: list[ReplicaOptions] = []
        self.original_rings: list[list[str]] = []
        self.paused: set[int] = set()
        self.labels = [f"r{n + 1}" for n in range(spec.replicas)]
        self.urls: list[str] = []
        self.api_url: str | None = None

    def start(self) -> None:
        spec = self.scenario.target
        auth = auth_server_spec(spec)  # a missing secret variable: exit 2, before anything starts
        try:
            store = shop_store(self.redis, self.workdir)
            self.deployment = LocalDeployment(self.workdir, replicas=spec.replicas, store=store,
                                              ttl=f"{self.scenario.real(spec.ttl)}", name=spec.name,
                                              keyring="ephemeral" if spec.keyring == "ephemeral" else None,
                                              ring_per_replica=True, release_guard=spec.release_guard,
                                              auth=auth)
            self.original = replica_options(spec)
            self.deployment.start([dataclasses.replace(option) for option in self.original])
        except DeploymentError as exc:
            self.stop()
            raise TargetError(str(exc)) from None
        self.urls = self.deployment.replica_urls
        self.api_url = self.deployment.api.base_url if self.deployment.api else None
        self.original_rings = [self._ring_or_empty(index) for index in range(spec.replicas)]

    def stop(self) -> None:
        """Stop every process, by PID, and delete the ring files (no key stays in the results folder)."""
        stop_shop(self.deployment, self.redis)

    def log_sources(self) -> list[LogSource]:
        assert self.deployment is not None
        return [LogSource("file", str(replica.log_path), replica.label) for replica in self.deployment.replicas]

    def cpu_seconds(self) -> dict[str, tuple[int, float]]:
        """(pid, CPU seconds so far) of each replica process now running, and of the API, from /proc."""
        if self.deployment is None:
            return {}
        processes = [*self.deployment.replicas, *([self.deployment.api] if self.deployment.api else [])]
        return {process.label: (process.pid, cpu) for process in processes
                if process.pid is not None and (cpu := process_cpu_seconds(process.pid)) is not None}

    def replica_health(self) -> dict[str, ReplicaHealth]:
        """Each replica process now running, from /proc."""
        if self.deployment is None:
            return {}
        return {replica.label: health for replica in self.deployment.replicas
                if (health := from_process(replica.pid)) is not None}

    def target_pids(self) -> set[int]:
        """Every process of the target now running: replicas, API, the replicas' zygote, redis-server."""
        if self.deployment is None:
            return set()
        pids = {process.pid for process in [*self.deployment.replicas, self.deployment.api]
                if process is not None and process.pid is not None and process.running()}
        if self.deployment.zygote is not None:
            pids.add(self.deployment.zygote.process.pid)
        if self.redis is not None and self.redis.process is not None:
            pids.add(self.redis.process.pid)
        auth = self.deployment.auth
        if auth is not None and auth.process.pid is not None and auth.process.running():
            pids.add(auth.process.pid)
        return pids

    def replicas_up(self) -> int:
        if self.deployment is None:
            return 0
        return sum(1 for index, replica in enumerate(self.deployment.replicas)
                   if replica.running() and index not in self.paused)

    # --- chaos operations --------------------------------------------------------------------

    def restart(self, index: int, *, kill: bool = False) -> float:
        assert self.deployment is not None
        self.paused.discard(index)
        return self.deployment.restart_replica(index, kill=kill)

    def pause(self, index: int) -> None:
        assert self.deployment is not None
        self.deployment.replicas[index].signal(signal.SIGSTOP)
        self.paused.add(index)

    def resume(self, index: int) -> None:
        assert self.deployment is not None
        self.deployment.replicas[index].signal(signal.SIGCONT)
        self.paused.discard(index)

    def reconfigure(self, replicas: Sequence[int], change: ReplicaChange) -> list[float]:
        """Restart each replica with its options changed (a TTL in real seconds)."""
        assert self.deployment is not None
        fields: dict[str, Any] = change.changed()
        ready = []
        for index in replicas:
            self.paused.discard(index)
            options = dataclasses.replace(self.deployment.options[index], **fields)
            ready.append(self.deployment.restart_replica(index, options=options))
        return ready

    def ring(self, index: int) -> list[str]:
        if self.scenario.target.keyring == "ephemeral":
            raise ChaosUnsupported("replicas on ephemeral keys have no ring to rotate")
        assert self.deployment is not None
        return self.deployment.ring(index)

    def set_ring(self, index: int, keys: list[str]) -> None:
        self.ring(index)
        assert self.deployment is not None
        self.deployment.rotate(keys, [index])

    def auth_change(self, change: AuthChange) -> dict[str, object]:
        """The change, made through the authorization server's admin port; the replicas learn it within a second."""
        auth = self.deployment.auth if self.deployment is not None else None
        if auth is None:
            raise ChaosUnsupported(f"{change.action} needs [target.auth] (client-credentials, no token_url): this "
                                   f"shop runs no authorization server")
        try:
            return auth.admin(*_admin_call(change))
        except AuthAdminError as exc:
            raise ChaosUnsupported(str(exc)) from None

    def rollback(self) -> list[str]:
        """Every replica running with its original options and ring; returns what had to be undone."""
        if self.deployment is None:
            return []
        undone = []
        if self.deployment.auth is not None and self.deployment.auth.reset():
            undone.append("reset the authorization server (lifetime, revocations, scopes, refusing, drift)")
        for index in sorted(self.paused):
            self.resume(index)
            undone.append(f"resumed {self.labels[index]}")
        for index, original in enumerate(self.original):
            replica = self.deployment.replicas[index]
            if self.deployment.options[index] != original or not replica.running():
                self.deployment.restart_replica(index, options=dataclasses.replace(original))
                undone.append(f"restarted {self.labels[index]} with its original options")
            if self.original_rings[index] and self._ring_or_empty(index) != self.original_rings[index]:
                self.deployment.rotate(self.original_rings[index], [index])
                undone.append(f"restored the ring of {self.labels[index]}")
        return undone


def _admin_call(change: AuthChange) -> tuple[str, dict[str, object]]:
    """The admin action and body that make `change` on the shop's authorization server."""
    if change.action == "token-expiry":
        return "lifetime", {"seconds": change.lifetime if change.on else None}
    if change.action == "revoke":
        return "revoke", {"share": change.share, "seed": change.seed}
    if change.action == "scope-loss":
        return "scope-loss", {"share": change.share, "scope": change.scope, "seed": change.seed}
    if change.action == "auth-down":
        return "down", {"down": change.on}
    return "drift", {"share": change.share if change.on else 0.0}


def replica_options(spec: TargetConfig) -> list[ReplicaOptions]:
    """Each replica's options as the scenario's target gives them: its store, principal header, eras served and
    payment round count, then its overrides (name, clock offset, behind or ahead, launch, memory stores, auth
    off). The process and docker backends start replicas from these."""
    options = [ReplicaOptions(store="memory" if spec.store == "memory" else None,
                              principal_header=spec.principal_header, serve_2025=spec.serve_2025,
                              payment_rounds=spec.payment_rounds) for _ in range(spec.replicas)]
    for override in spec.overrides:
        option = options[override.replica - 1]
        offset = override.clock_offset or 0.0
        option.name = override.name
        option.clock_offset = -offset if override.clock_behind else offset
        option.launch = override.launch
        option.auth = override.auth
        option.leak = override.leak
        if override.store == "memory":
            option.store = "memory"
        if override.answers_store == "memory":
            option.answers_store = "memory"
    return options
