"""An external target: a deployment the harness does not start, reached by its URLs.

Logs come from the files, commands, containers or pods the scenario names (`file:PATH` or
`file:PATH@replica`, `command:journalctl -f -u mcp`, `docker:LABEL=VALUE`,
`kubernetes:mrtr:app.kubernetes.io/name=mcp`; see `harness.config.logs`), so
rejections are still explained by reason. Chaos is whatever the scenario's `[target.commands]`
can reach (run by the chaos runner through `harness.targets.commands`); the process operations
themselves are not the harness's to do here, so each raises `ChaosUnsupported` and the run
records it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from harness.config.logs import LogSource, parse_log_location
from harness.config.scenario import Scenario
from harness.targets.commands import accepts
from harness.targets.health import ReplicaHealth, scrape
from harness.targets.interface import ChaosUnsupported, NoAuthServer, ReplicaChange, TargetError
from harness.targets.ledger_check import LedgerAtApi


class ExternalTarget(NoAuthServer, LedgerAtApi):
    def __init__(self, scenario: Scenario) -> None:
        spec = scenario.target
        self.urls = list(spec.urls)
        self.labels = [f"r{n + 1}" for n in range(len(self.urls))]
        self.health_urls = list(spec.health_urls)
        """Each replica's Prometheus metrics page (`process_*`), in `urls`' order: its health, scraped."""
        self.api_url = spec.api.rstrip("/") if spec.api else None
        self._logs = [replace(parse_log_location(entry, index), pass_env=tuple(spec.command_env))
                      for index, entry in enumerate(spec.logs)]  # a log command gets the commands' environment

    def start(self) -> None:
        """Check every URL accepts a connection: a target that cannot be reached exits 3.

        A connection, not a request: a GET on an MCP endpoint in SSE mode opens a stream
        that never ends, and a POST would be a call the scenario did not ask for.
        """
        for url in self.urls:
            if not accepts(url, timeout=5.0):
                raise TargetError(f"cannot reach {url}: nothing accepts connections there")

    def stop(self) -> None:
        """Nothing to stop: the harness did not start this deployment."""

    def log_sources(self) -> list[LogSource]:
        return list(self._logs)

    def cpu_seconds(self) -> dict[str, tuple[int, float]]:
        """Nothing: an external deployment's processes are not ours to read (they may be on another machine)."""
        return {}

    def replica_health(self) -> dict[str, ReplicaHealth]:
        """Each replica's `process_*` metrics, scraped from `[target] health_urls` (none named: nothing)."""
        return {label: health for label, url in zip(self.labels, self.health_urls, strict=False)
                if (health := scrape(url)) is not None}

    def target_pids(self) -> set[int]:
        return set()

    def replicas_up(self) -> int:
        return sum(1 for url in self.urls if accepts(url, timeout=1.0))

    def restart(self, index: int, *, kill: bool = False) -> float:
        raise ChaosUnsupported("an external target cannot be restarted by the harness")

    def pause(self, index: int) -> None:
        raise ChaosUnsupported("an external target cannot be paused by the harness")

    def resume(self, index: int) -> None:
        raise ChaosUnsupported("an external target cannot be resumed by the harness")

    def reconfigure(self, replicas: Sequence[int], change: ReplicaChange) -> list[float]:
        raise ChaosUnsupported("an external target cannot be reconfigured by the harness")

    def add_key(self, replicas: Sequence[int], key: str) -> None:
        raise ChaosUnsupported("the harness holds no key ring of an external target")

    def promote_key(self, replicas: Sequence[int], key: str) -> None:
        raise ChaosUnsupported("the harness holds no key ring of an external target")

    def retire_old_keys(self, replicas: Sequence[int], key: str) -> None:
        raise ChaosUnsupported("the harness holds no key ring of an external target")

    def sealing_key(self, index: int) -> str | None:
        return None

    def rollback(self) -> list[str]:
        return []
