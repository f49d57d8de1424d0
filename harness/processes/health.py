"""A process's health read from /proc: resident memory, CPU seconds, open file descriptors and threads.

What a replica's health sample (`harness.targets.health`) reads of a process on this machine. From /proc and
nothing else (no psutil): the four figures are each one file or directory, and a process gone between two reads
gives None, not an error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from harness.processes.children import cpu_seconds_of, stat_fields


@dataclass(frozen=True)
class ProcessHealth:
    """One process's figures now."""

    rss_bytes: int
    cpu_seconds: float
    open_fds: int | None
    """None when this user may not list the process's descriptors (another user's process)."""
    threads: int


def process_health(pid: int) -> ProcessHealth | None:
    """The process's resident memory, CPU (utime + stime), descriptors and threads; None when it is gone."""
    fields = stat_fields(pid)
    if fields is None or len(fields) < 22 or fields[0] == "Z":
        return None
    # After the command name: state is field 3 (index 0), so threads (20) is 17 and rss (24) 21.
    cpu = cpu_seconds_of(fields)
    rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    try:
        fds: int | None = len(os.listdir(f"/proc/{pid}/fd"))
    except PermissionError:
        fds = None
    except OSError:
        return None
    return ProcessHealth(rss_bytes=rss, cpu_seconds=cpu, open_fds=fds, threads=int(fields[17]))
