"""The replicas' health over the load: each replica's resident memory, CPU, descriptors and threads, journaled.

Every `HEALTH_EVERY` seconds while the load runs the target is asked for each replica's figures
(`Target.replica_health`: /proc, the engine's stats or the replica's `process_*` metrics) and each is journaled as
a `health` record, so the report's memory chart and `replica_rss_growth` come from the journal alone. One sample
at the load's start and one when it stops bracket the series; a replica that cannot be read at a sample leaves a
gap, never a zero.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from harness.journal.records import HealthSampled, RecordType
from harness.journal.writer import Journal
from harness.targets.health import ReplicaHealth
from harness.targets.interface import Target

HEALTH_EVERY = 2.0
"""Seconds between two samples: enough points for a slope over a short run, a few /proc reads each."""


def health_record(label: str, health: ReplicaHealth, t: float) -> HealthSampled:
    """The `health` record of one replica's figures at `t` (a figure its source lacks is left out)."""
    record = HealthSampled(type=RecordType.HEALTH, t=t, replica=label, rss_mb=round(health.rss_mb, 3),
                           source=health.source)
    if health.cpu_seconds is not None:
        record["cpu_seconds"] = round(health.cpu_seconds, 3)
    if health.open_fds is not None:
        record["open_fds"] = health.open_fds
    if health.threads is not None:
        record["threads"] = health.threads
    return record


def sample(target: Target, journal: Journal) -> int:
    """Journal every replica's health now; how many replicas were read."""
    now = time.time()
    figures = target.replica_health()
    for label, health in figures.items():
        journal.write(health_record(label, health, now))
    return len(figures)


def sample_every(target: Target, journal: Journal, sleep: Callable[[float], object],
                 every: float = HEALTH_EVERY) -> None:
    """`sample`, then again every `every` seconds, until the greenlet running it is killed."""
    while True:
        sample(target, journal)
        sleep(every)
