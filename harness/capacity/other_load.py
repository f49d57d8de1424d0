"""The machine's CPU used during a step by processes other than the harness and its target.

Capacity found on a busy machine is lower than on a quiet one, so every step says how
much of the machine other processes took. What is left out: this process and the
children it has waited for (`os.times`: the API, the zygote, redis-server, Locust workers,
once stopped), and the target's processes that are not its children, counted by PID:
the replicas the zygote forks (the zygote's children, reaped by the kernel, so their CPU
reaches no `os.times`) and a docker target's containers. Those are sampled from /proc
while the step runs, by the PIDs the target gives (`Target.target_pids`); the CPU a
replica spends after the last sample (under a second of its shutdown) is missed, which
errs towards "busy".
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable

from harness.processes.children import parent_of, process_cpu_seconds
from harness.targets.interface import Target

SAMPLE_EVERY = 0.5
"""Seconds between samples of the target's processes."""


class OtherLoad:
    """Measures one step: `start()`, run the step, `stop()` gives the other processes' cores (or None)."""

    def __init__(self, target: Callable[[], Target | None]) -> None:
        self._target = target
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._started = 0.0
        self._busy: float | None = None
        self._own = 0.0
        self._ours: set[int] = set()  # the target's processes that are our children: os.times counts them
        self.target_seconds: dict[int, float] = {}
        """CPU seconds of each target process that is not our child, as last seen."""

    def start(self) -> None:
        self._started, self._busy, self._own = _wall(), machine_busy(), own_cpu()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="capacity-other-load")
        self._thread.start()

    def stop(self) -> float | None:
        """Stop sampling; the cores other processes used since `start`, or None off Linux."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        busy, wall = machine_busy(), _wall() - self._started
        if self._busy is None or busy is None or wall <= 0:
            return None
        with self._lock:
            target = sum(self.target_seconds.values())
        others = (busy - self._busy) - (own_cpu() - self._own) - target
        return max(0.0, others) / wall

    def _watch(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY):
            self.sample()

    def sample(self) -> None:
        """Read the CPU of the target's processes now running (not our children: those are in `os.times`)."""
        target = self._target()
        if target is None:
            return
        pids: set[int] = set()
        with contextlib.suppress(Exception):  # a target half up or half down: the next sample will do
            pids = target.target_pids()
        me = os.getpid()
        for pid in pids - self._ours:
            if parent_of(pid) == me:
                self._ours.add(pid)
                continue
            cpu = process_cpu_seconds(pid)
            if cpu is not None:
                with self._lock:
                    self.target_seconds[pid] = max(cpu, self.target_seconds.get(pid, 0.0))


def machine_busy() -> float | None:
    """CPU seconds the whole machine has been busy since boot (Linux /proc/stat), or None elsewhere."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(value) for value in stat.readline().split()[1:9]]
        return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def own_cpu() -> float:
    """CPU seconds of this process and its reaped children (a step's API, zygote and workers, once stopped)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _wall() -> float:
    return os.times().elapsed
