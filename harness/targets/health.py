"""A replica's health now: resident memory, CPU, open file descriptors and threads, read through its target.

Three ways in, one figure: a process on this machine is read from /proc (`harness.processes.health`: the
embedded shop, a docker container whose engine runs here); a container the harness cannot see into from its
stats (the docker SDK's `stats`: no descriptor count there); a replica elsewhere (Kubernetes, any external
deployment) from the standard `process_*` metrics on the Prometheus URL the scenario names
(`[target] health_urls`), parsed with prometheus_client's own parser. That text is the replica's, so untrusted:
read up to `MAX_EXPOSITION` bytes, and a page that does not parse, or lacks resident memory, gives no sample
rather than a made-up one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from harness.processes.health import process_health

MAX_EXPOSITION = 4 * 1024 * 1024
"""Bytes of a metrics page read at most: a replica's page is a few kilobytes; more is not a metrics page."""
SCRAPE_TIMEOUT = 2.0
_MB = 1024 * 1024


@dataclass(frozen=True)
class ReplicaHealth:
    """One replica's figures at one moment; a figure its source does not give is None."""

    rss_mb: float
    cpu_seconds: float | None
    open_fds: int | None
    threads: int | None
    source: str
    """where they were read: proc, docker-stats or prometheus."""


def from_process(pid: int | None) -> ReplicaHealth | None:
    """A process on this machine, from /proc; None when it is gone."""
    figures = process_health(pid) if pid is not None else None
    if figures is None:
        return None
    return ReplicaHealth(rss_mb=figures.rss_bytes / _MB, cpu_seconds=figures.cpu_seconds,
                         open_fds=figures.open_fds, threads=figures.threads, source="proc")


def from_docker_stats(stats: Any) -> ReplicaHealth | None:
    """A container's one-shot stats (`container.stats(stream=False)`): its memory less the page cache, its CPU and
    its tasks (the threads of every process in it); None when the stats carry no memory figure (a stopped one)."""
    if not isinstance(stats, dict):
        return None
    memory = stats.get("memory_stats") or {}
    usage = memory.get("usage") if isinstance(memory, dict) else None
    if not isinstance(usage, int | float) or isinstance(usage, bool):
        return None
    inner = memory.get("stats") or {}
    cache = inner.get("inactive_file", inner.get("cache", 0)) if isinstance(inner, dict) else 0
    cpu = (stats.get("cpu_stats") or {}).get("cpu_usage", {}).get("total_usage")
    tasks = (stats.get("pids_stats") or {}).get("current")
    return ReplicaHealth(rss_mb=max(0.0, float(usage) - float(cache if isinstance(cache, int | float) else 0)) / _MB,
                         cpu_seconds=cpu / 1e9 if isinstance(cpu, int | float) else None, open_fds=None,
                         threads=tasks if isinstance(tasks, int) else None, source="docker-stats")


def from_exposition(text: str) -> ReplicaHealth | None:
    """The `process_*` metrics of a Prometheus text page (the client libraries' process collector); None when the
    page does not parse or has no `process_resident_memory_bytes`."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = {"process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds", "process_threads"}
    seen: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in wanted and sample.name not in seen and math.isfinite(sample.value):
                    seen[sample.name] = float(sample.value)
    except Exception:  # noqa: BLE001 - the parser's errors are of every kind; a page it refuses is no sample
        return None
    rss = seen.get("process_resident_memory_bytes")
    if rss is None or rss < 0:
        return None
    fds, threads = seen.get("process_open_fds"), seen.get("process_threads")
    return ReplicaHealth(rss_mb=rss / _MB, cpu_seconds=seen.get("process_cpu_seconds_total"),
                         open_fds=int(fds) if fds is not None and fds >= 0 else None,
                         threads=int(threads) if threads is not None and threads >= 0 else None, source="prometheus")


def scrape(url: str) -> ReplicaHealth | None:
    """GET a replica's metrics page and read it (`from_exposition`); None when it cannot be read."""
    import httpx

    try:
        with httpx.stream("GET", url, timeout=SCRAPE_TIMEOUT) as response:
            if response.status_code != 200:
                return None
            body = b""
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_EXPOSITION:
                    return None
    except httpx.HTTPError:
        return None
    return from_exposition(body.decode("utf-8", errors="replace"))
