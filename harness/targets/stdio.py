"""The stdio target: MCP servers the harness starts as its children and speaks to over their stdin and stdout.

By default the server is the shop (`mrtr-harness shop replica --transport stdio`), beside its API (HTTP on
127.0.0.1, whose ledger the invariants read) and its store, started as the embedded target starts them;
`[target] stdio_command` starts any other stdio server instead (no ledger then). Processes come one per
replica, started with the target (`stdio_processes = "per-replica"`), or one per simulated client, started at
its flow's first call and stopped at its end (`"per-client"`, all counted under the label `client`, and one
started and stopped with the target, so a command that cannot serve fails the start, exit 3); each
process's cold start (spawn to first answer) is journaled (`cold_start`). Their stderr is their log, read for
rejections as any replica's.

Chaos acts on the processes, by their PID: restart (stdin closed, then started again), kill (SIGKILL, then
started again), pause (SIGSTOP, SIGCONT). Everything else a scenario could ask is refused when it is read
(`harness.config.target.STDIO_CHAOS`); what still reaches a stdio target raises `ChaosUnsupported`.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.config.logs import LogSource
from harness.config.scenario import Scenario
from harness.config.target import STDIO_CLIENT_LABEL
from harness.mrtr.stdio import ColdStart, StdioServer, StdioServers, stdio_url
from harness.processes.children import harness_command, process_cpu_seconds
from harness.secrets import command_env
from harness.targets.health import ReplicaHealth, from_process
from harness.targets.interface import ChaosUnsupported, NoAuthServer, ReplicaChange, TargetError
from harness.targets.ledger_check import LedgerAtApi
from harness.targets.local_deployment import (
    DeploymentError,
    LocalDeployment,
    ReplicaOptions,
    replica_args,
    shop_store,
    stop_shop,
)
from harness.targets.redis_process import RedisProcess

_NO_RING = "a stdio target's key ring is the harness's to read, not to rotate: rotate-keys is refused for it"


class StdioTarget(NoAuthServer, LedgerAtApi):
    """The servers as child processes over stdio, with the shop's API when the server is the shop."""

    def __init__(self, scenario: Scenario, workdir: Path) -> None:
        self.scenario = scenario
        self.workdir = workdir
        spec = scenario.target
        self.per_client = spec.stdio_processes == "per-client"
        self.labels = [STDIO_CLIENT_LABEL] if self.per_client else [f"r{n + 1}" for n in range(spec.replicas)]
        self.urls = [stdio_url(label) for label in self.labels]
        self.shop = not spec.stdio_command
        self.redis = RedisProcess(workdir / "redis") if self.shop and spec.store == "redis" else None
        self.deployment: LocalDeployment | None = None
        self.api_url: str | None = None
        self.paused: set[int] = set()
        # the shop gets the harness's environment, as the embedded one does; another server the allow-list and
        # `command_env` only, as a command the harness runs for the target: never a secret it was not given
        env = None if self.shop else command_env(spec.command_env)
        self.servers = StdioServers(self._command, workdir / "logs", labels=self.labels, per_client=self.per_client,
                                    timeout=scenario.load.timeout, env=env)

    def on_cold_start(self, hook: Callable[[ColdStart], None]) -> None:
        """`hook` sees each process's cold start as it happens (the run journals it)."""
        self.servers.on_cold_start = hook

    def start(self) -> None:
        """The shop's API (the shop only), then every replica's process, each waited for to its first answer (per
        client: one, started and stopped, to prove the command serves)."""
        try:
            if self.shop:
                self._start_api()
            self.servers.start()
        except (DeploymentError, RuntimeError, OSError) as exc:
            self.stop()
            raise TargetError(str(exc)) from None

    def _start_api(self) -> None:
        spec = self.scenario.target
        store = shop_store(self.redis, self.workdir)
        self.deployment = LocalDeployment(self.workdir, replicas=0, store=store,
                                          ttl=f"{self.scenario.real(spec.ttl)}", name=spec.name,
                                          keyring="ephemeral" if spec.keyring == "ephemeral" else None,
                                          release_guard=spec.release_guard, fork_replicas=False)
        self.deployment.start([])
        self.api_url = self.deployment.api.base_url if self.deployment.api else None

    def _command(self, label: str) -> list[str]:
        """The argv of a process of `label`: the scenario's `stdio_command`, or the shop's replica over stdio."""
        spec = self.scenario.target
        if not self.shop:
            return list(spec.stdio_command)
        assert self.deployment is not None and self.api_url is not None
        options = ReplicaOptions(store="memory" if spec.store == "memory" else None,
                                 payment_rounds=spec.payment_rounds)
        args = replica_args(label, None, self.api_url, options, store=self.deployment.store,
                            keyring=self.deployment.keyring, ttl=self.deployment.ttl, name=spec.name)
        return harness_command("shop", "replica", "--transport", "stdio", *args)

    def stop(self) -> None:
        """Every process stopped by its PID (stdin closed, SIGKILL after a grace), then the API; no ring is left."""
        self.servers.stop()
        stop_shop(self.deployment, self.redis)

    def log_sources(self) -> list[LogSource]:
        """Each label's stderr, as a file (per-client processes append to one)."""
        return [LogSource("file", str(self.workdir / "logs" / f"{label}.log"), label) for label in self.labels]

    def cpu_seconds(self) -> dict[str, tuple[int, float]]:
        """Each replica's process and the API's, from /proc (per-client processes come and go: not counted)."""
        found = {server.label: (server.pid, cpu) for server in self.servers.replicas
                 if server.pid is not None and (cpu := process_cpu_seconds(server.pid)) is not None}
        api = self.deployment.api if self.deployment is not None else None
        if api is not None and api.pid is not None and (cpu := process_cpu_seconds(api.pid)) is not None:
            found["api"] = (api.pid, cpu)
        return found

    def replica_health(self) -> dict[str, ReplicaHealth]:
        """Each replica's process from /proc; none per client (each lives one flow)."""
        return {server.label: health for server in self.servers.replicas
                if (health := from_process(server.pid)) is not None}

    def target_pids(self) -> set[int]:
        pids = {server.pid for server in self.servers.all() if server.pid is not None and server.running()}
        api = self.deployment.api if self.deployment is not None else None
        if api is not None and api.pid is not None and api.running():
            pids.add(api.pid)
        if self.redis is not None and self.redis.process is not None:
            pids.add(self.redis.process.pid)
        return pids

    def replicas_up(self) -> int:
        if self.per_client:
            return 1
        return sum(1 for index, server in enumerate(self.servers.replicas)
                   if server.connected() and index not in self.paused)

    # --- chaos operations --------------------------------------------------------------------

    def _replica(self, index: int) -> StdioServer:
        if self.per_client:
            raise ChaosUnsupported("per-client stdio processes live one flow each: no replica to act on")
        return self.servers.replicas[index]

    def restart(self, index: int, *, kill: bool = False) -> float:
        """Stop the replica's process (SIGKILL, or its stdin closed) and start a new one; seconds to its answer."""
        self._replica(index)
        self.paused.discard(index)
        try:
            return self.servers.restart(index, kill=kill)
        except (RuntimeError, OSError) as exc:
            raise TargetError(str(exc)) from None

    def pause(self, index: int) -> None:
        self._replica(index).signal(signal.SIGSTOP)
        self.paused.add(index)

    def resume(self, index: int) -> None:
        self._replica(index).signal(signal.SIGCONT)
        self.paused.discard(index)

    def reconfigure(self, replicas: Sequence[int], change: ReplicaChange) -> list[float]:
        raise ChaosUnsupported("a stdio server is started with its command's options: it cannot be reconfigured")

    def add_key(self, replicas: Sequence[int], key: str) -> None:
        raise ChaosUnsupported(_NO_RING)

    def promote_key(self, replicas: Sequence[int], key: str) -> None:
        raise ChaosUnsupported(_NO_RING)

    def retire_old_keys(self, replicas: Sequence[int], key: str) -> None:
        raise ChaosUnsupported(_NO_RING)

    def sealing_key(self, index: int) -> str | None:
        return None

    def rollback(self) -> list[str]:
        """Every paused replica resumed, every replica whose process died started again."""
        undone = []
        for index in sorted(self.paused):
            self.resume(index)
            undone.append(f"resumed {self.labels[index]}")
        for index, server in enumerate(self.servers.replicas):
            if not server.connected():
                self.servers.restart(index, kill=True)
                undone.append(f"started {self.labels[index]} again")
        return undone
