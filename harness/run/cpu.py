"""CPU accounting: what the harness spent per MRTR round, beside what the replicas spent, over the load.

The harness must never be the bottleneck, and this is where a run proves it: one
snapshot when the load starts and one when it stops, of the harness's CPU (this process's and
its live fold process's) and of every target process (from /proc, by PID), and the round count
at each. The first snapshot is also the harness's start-up cost (its CPU from exec to the
load's start), which the record keeps beside the window's. Start-up is left out on both
sides; a replica restarted during the load (another PID at the end) is left out of the
replicas' figure, which makes the comparison err against the harness.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from harness.journal.records import CpuUsed, RecordType, RunEvent

ProcessCpu = Mapping[str, tuple[int, float]]
"""Label -> (PID, CPU seconds so far), as `Target.cpu_seconds()` gives it."""


@dataclass(frozen=True)
class CpuSnapshot:
    harness_seconds: float
    rounds_by_replica: dict[str, int]
    processes: dict[str, tuple[int, float]]


def snapshot(processes: Callable[[], ProcessCpu], rounds_by_replica: Mapping[str, int],
             helpers: float = 0.0) -> CpuSnapshot:
    """The harness's CPU (this process's, plus `helpers`: the CPU seconds of its own helper processes, the live
    fold's), the target's processes' CPU and the rounds each replica served, now."""
    return CpuSnapshot(time.process_time() + helpers, dict(rounds_by_replica), dict(processes()))


def account(start: CpuSnapshot, end: CpuSnapshot) -> CpuUsed:
    """The `run cpu` record for the window between two snapshots."""
    rounds = sum(end.rounds_by_replica.values()) - sum(start.rounds_by_replica.values())
    same = [label for label, (pid, _) in end.processes.items()
            if label != "api" and start.processes.get(label, (None, 0.0))[0] == pid]
    replica_cpu = sum(end.processes[label][1] - start.processes[label][1] for label in same)
    replica_rounds = sum(end.rounds_by_replica.get(label, 0) - start.rounds_by_replica.get(label, 0)
                         for label in same)
    harness_cpu = end.harness_seconds - start.harness_seconds
    record = CpuUsed(type=RecordType.RUN, event=RunEvent.CPU, t=time.time(), rounds=rounds,
                     harness_seconds=round(harness_cpu, 3),
                     harness_per_round_ms=round(harness_cpu / rounds * 1000, 3) if rounds else None,
                     harness_startup_seconds=round(start.harness_seconds, 3),
                     replicas_measured=same, replica_seconds=round(replica_cpu, 3),
                     replica_per_round_ms=round(replica_cpu / replica_rounds * 1000, 3) if replica_rounds else None)
    if record["harness_per_round_ms"] and record["replica_per_round_ms"]:
        record["harness_to_replica"] = round(record["harness_per_round_ms"] / record["replica_per_round_ms"], 3)
    return record
