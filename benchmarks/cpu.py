"""CPU accounting for the benchmarks: processes, the whole machine, and the machine's facts.

The machine these figures come from is shared and noisy, so every measured window also
says what the rest of the machine did in it (busy cores minus our own processes, load
average): a load process that got less than a core because a neighbour took it is not
the same finding as a load process that is the limit.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.processes.children import process_cpu_seconds as harness_process_cpu

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads): the harness's own reader, which a run's `extra.cpu` uses.

    A process that is gone mid-window makes the window meaningless, so here it is an error.
    """
    seconds = harness_process_cpu(pid)
    if seconds is None:
        raise ProcessLookupError(f"process {pid} is gone: its CPU cannot be read")
    return seconds


def machine_seconds() -> tuple[float, float]:
    """(busy, steal) CPU seconds of all cores together, from the first line of `/proc/stat`.

    Busy is user, nice, system, irq and softirq. The machine is shared: what other processes
    burn during a window (busy minus our own) and what the hypervisor steals are CPU our
    processes could not have, so a window reports them next to our own.
    """
    user, nice, system, _idle, _iowait, irq, softirq, steal = (
        int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    )
    return (user + nice + system + irq + softirq) / CLOCK_TICKS, steal / CLOCK_TICKS


def machine_busy_seconds() -> float:
    """Busy CPU seconds of all cores together (the busy half of `machine_seconds`)."""
    return machine_seconds()[0]


def load_average() -> float:
    """The 1-minute load average (on 2 cores, above 2 means something waited for a core)."""
    return os.getloadavg()[0]


def machine_facts() -> dict[str, Any]:
    """What the figures were measured on."""
    model = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor(),
    )
    return {"cpus": os.cpu_count(), "cpu_model": model, "platform": platform.platform(),
            "python": platform.python_version()}


@dataclass
class Window:
    """CPU seconds spent in one measured window: this process, named child processes, the machine."""

    wall: float = 0.0
    own: float = 0.0
    """`time.process_time()` of this process (the load generator)."""
    processes: dict[str, float] = field(default_factory=dict)
    machine: float = 0.0
    load_average: tuple[float, float] = (0.0, 0.0)
    """The 1-minute load average at the start and at the end of the window."""

    def cores(self) -> dict[str, float]:
        """Average cores busy over the window; `others` is what the rest of the machine took."""
        ours = self.own + sum(self.processes.values())
        cores = {"load": self.own / self.wall} | {name: cpu / self.wall for name, cpu in self.processes.items()}
        cores["others"] = max(0.0, self.machine - ours) / self.wall
        cores["machine"] = self.machine / self.wall
        return {name: round(value, 2) for name, value in cores.items()}


@contextmanager
def window(pids: Mapping[str, int]) -> Iterator[Window]:
    """Measure a window around the `with` block; the figures are filled in when it ends."""
    out = Window()
    load_before = load_average()
    before = {name: process_cpu_seconds(pid) for name, pid in pids.items()}
    machine, own, wall = machine_busy_seconds(), time.process_time(), time.perf_counter()
    yield out
    out.wall = time.perf_counter() - wall
    out.own = time.process_time() - own
    out.machine = machine_busy_seconds() - machine
    out.processes = {name: process_cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    out.load_average = (round(load_before, 2), round(load_average(), 2))
