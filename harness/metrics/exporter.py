"""Serving a run's metrics: the `/metrics` endpoint, Prometheus's file_sd targets, the final scrape.

The registry (`RunMetrics`) is what the run counts; this module is how Prometheus gets
it: an HTTP endpoint on the run's (or the master's) process, file_sd files so the shipped
`dashboards/prometheus.yml` finds the harness and every replica with no editing, and an
optional linger so Prometheus scrapes the last counts before the process exits.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, start_http_server

from harness.atomic_files import write_atomically


class MetricsExporter:
    """One run's `/metrics` endpoint and scrape files; `close()` removes the files it wrote."""

    def __init__(self, registry: CollectorRegistry, *, port: int, host: str = "127.0.0.1",
                 targets_folder: Path | None = None, run_id: str) -> None:
        self.registry = registry
        self.port, self.host = port, host
        self.targets_folder = targets_folder
        self.run_id = run_id
        self._scrape_files: list[Path] = []

    def start(self, replica_urls: Sequence[str], replica_labels: Sequence[str]) -> None:
        """Serve `/metrics` (a daemon thread of prometheus-client's), then write the scrape targets.

        Raises OSError when the port is taken: a harness problem, reported as such by the run.
        """
        start_http_server(self.port, addr=self.host, registry=self.registry)
        if self.targets_folder is not None:
            self._write_targets(self.targets_folder, replica_urls, replica_labels)

    def _write_targets(self, folder: Path, urls: Sequence[str], labels: Sequence[str]) -> None:
        """File-sd files for this run (the harness and every replica, labelled with the run id).

        Prometheus re-reads them live, so a run with random replica ports is scraped without
        any editing; they are removed after the run.
        """
        harness = [{"targets": [f"127.0.0.1:{self.port}"], "labels": {"run_id": self.run_id}}]
        replicas = [{"targets": [urlsplit(url).netloc], "labels": {"run_id": self.run_id, "replica": label}}
                    for url, label in zip(urls, labels, strict=True)]
        folder.mkdir(parents=True, exist_ok=True)
        self._scrape_files = [write_atomically(folder / "harness.json", json.dumps(harness, indent=2)),
                              write_atomically(folder / "replicas.json", json.dumps(replicas, indent=2))]

    def linger(self, seconds: float, sleep: Callable[[float], Any], say: Callable[[str], None]) -> None:
        """Keep serving the final counts a while, so Prometheus's next scrape sees them."""
        if seconds > 0:
            say(f"serving the final metrics for {seconds:g}s more")
            sleep(seconds)

    def close(self) -> None:
        for path in self._scrape_files:
            path.unlink(missing_ok=True)
        self._scrape_files = []

