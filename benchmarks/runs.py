"""A real `mrtr-harness run` in a child process, watched from outside: its journal as written, and /proc.

The benchmarks measure the path users run, so each figure comes from `python -m harness
run` in a child process, never from the harness's classes called in the benchmark's own
process. This module starts such a child (optionally from another checkout of the code,
`code`, for a before/after comparison in one session), follows its journal as it is
written, and reads what the kernel knows of it and of any other process: CPU in
nanoseconds from `/proc/<pid>/task/*/schedstat` (every thread; `/proc/<pid>/stat` only
counts in 10 ms ticks) and wake-ups as context switches from `/proc/<pid>/task/*/status`.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from harness.journal.segments import PartReader

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "results" / "benchmarks"


def write_figures(benchmark: str, figures: Any, started: datetime | None = None) -> Path:
    """Write a benchmark's raw figures to `results/benchmarks/<benchmark>-<UTC start>.json` (git ignores the
    folder; the README cites the file) and say where."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{benchmark}-{started or datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"written to {path.relative_to(REPO_ROOT)}", flush=True)
    return path


# --- what the kernel knows of a process ------------------------------------------------------------


@dataclass(frozen=True)
class ProcessSample:
    """One look at a process: CPU seconds and context switches so far, summed over its live threads."""

    at: float
    """`time.time()` of the look (the journal's clock)."""
    cpu: float
    switches: int
    voluntary: int
    threads: int


def process_sample(pid: int) -> ProcessSample | None:
    """CPU and context switches of every thread of `pid` now, or None when it is gone.

    A thread that ended before the look takes its counts with it: sample processes whose
    threads live as long as the window (a run's do).
    """
    at = time.time()
    cpu_ns = switches = voluntary = threads = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat", "rb") as schedstat:
                cpu_ns += int(schedstat.read().split()[0])
            with open(f"/proc/{pid}/task/{task}/status", "rb") as status:
                for line in status:
                    if line.startswith(b"voluntary_ctxt_switches"):
                        count = int(line.split()[1])
                        switches += count
                        voluntary += count
                    elif line.startswith(b"nonvoluntary_ctxt_switches"):
                        switches += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended between the listing and the read
        threads += 1
    return ProcessSample(at, cpu_ns / 1e9, switches, voluntary, threads)


def rss_bytes(pid: int) -> int | None:
    """The resident memory of `pid` now (`/proc/<pid>/status` VmRSS), or None when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def slope_mib_per_million(points: list[tuple[int, int]]) -> float | None:
    """Least-squares slope of bytes (RSS, or any other size) over finished flows, in MiB per 1,000,000 flows;
    None with fewer than 3 points or no flows between them."""
    if len(points) < 3:
        return None
    xs, ys = [float(x) for x, _ in points], [float(y) for _, y in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return None
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
    return round(slope * 1_000_000 / 2**20, 2)


def interpolate(samples: Sequence[ProcessSample], moment: float, name: str) -> float:
    """A sampled counter at `moment`, interpolated between the two samples around it."""
    times = [sample.at for sample in samples]
    index = min(max(bisect_left(times, moment), 1), len(samples) - 1)
    before, after = samples[index - 1], samples[index]
    share = (moment - before.at) / (after.at - before.at) if after.at > before.at else 0.0
    low, high = float(getattr(before, name)), float(getattr(after, name))
    return low + (high - low) * min(max(share, 0.0), 1.0)


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def children_of(pid: int) -> list[int]:
    """The live processes whose parent is `pid` (one pass over /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and parent_of(int(entry)) == pid:
            found.append(int(entry))
    return sorted(found)


def is_fold_process(pid: int) -> bool:
    """Whether `pid` is a run's live fold process (`python -m harness.run.live_fold.worker`)."""
    return "harness.run.live_fold" in cmdline(pid)


def fold_pid(run_pid: int) -> int | None:
    """The live fold process of the run `run_pid`, or None (not started yet, or code that folds in the run)."""
    return next((pid for pid in children_of(run_pid) if is_fold_process(pid)), None)


def worker_pids(run_pid: int) -> list[int]:
    """The live Locust workers a run `run_pid` started with `--workers N` (`python -m harness worker ...`)."""
    return [pid for pid in children_of(run_pid) if " harness worker " in f" {cmdline(pid)} "]


def embedded_target_pids(harness_pid: int) -> dict[str, int]:
    """The embedded shop's processes under a run: `api`, and `replica-N` for each replica the zygote forked."""
    pids: dict[str, int] = {}
    for child in children_of(harness_pid):
        line = cmdline(child)
        if "harness.targets.zygote" in line:
            for index, replica in enumerate(children_of(child), 1):
                pids[f"replica-{index}"] = replica
        elif " shop api" in line:
            pids["api"] = child
        elif " shop replica" in line:  # a replica started as its own interpreter
            pids[f"replica-{sum(1 for name in pids if name.startswith('replica')) + 1}"] = child
    return pids


def machine_busy_seconds() -> float:
    """Busy CPU seconds of all cores together (user, nice, system, irq, softirq) from `/proc/stat`."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    user, nice, system, _idle, _iowait, irq, softirq, _steal = (int(value) for value in fields)
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


# --- a run in a child process ----------------------------------------------------------------------


@dataclass
class ChildRun:
    """`python -m harness run SCENARIO [--quiet] --results RESULTS` started from `code` (default: this checkout)."""

    scenario: Path
    results: Path
    code: Path = REPO_ROOT
    args: Sequence[str] = ()
    quiet: bool = True
    """`--quiet` (no progress line); without it the line goes to the child's stderr, a pipe: a log, not a tty."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment variables for the child beside this process's own (`PYTHONPATH` is `code`)."""
    process: subprocess.Popen[bytes] | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    _journal: PartTail | None = None
    started_at: float = 0.0

    def start(self) -> ChildRun:
        """Start it; the child imports the harness of `code` (its folder first on the path)."""
        self.results.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.env, "PYTHONPATH": str(self.code)}
        command = [sys.executable, "-m", "harness", "run", str(self.scenario), *(["--quiet"] * self.quiet),
                   "--results", str(self.results), *self.args]
        self.started_at = time.time()
        self.process = subprocess.Popen(command, cwd=self.code, env=env, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def folder(self) -> Path | None:
        folders = [path for path in self.results.iterdir() if (path / "journal.jsonl").is_file()]
        return folders[0] if len(folders) == 1 else None

    def read(self) -> list[dict[str, Any]]:
        """The records written since the last call (whole lines only); all of them are kept in `records`."""
        if self._journal is None:
            folder = self.folder
            if folder is None:
                return []
            self._journal = PartTail(folder / "journal.jsonl")
        new = [orjson.loads(line) for line in self._journal.read().splitlines() if line]
        self.records.extend(new)
        return new

    def event(self, name: str) -> dict[str, Any] | None:
        """The first `run` record of this event read so far (`load-started`, `load-stopped`, `cpu`, `end`)."""
        return next((r for r in self.records if r.get("type") == "run" and r.get("event") == name), None)

    def watch(self, until: Callable[[ChildRun], bool], every: float, timeout: float,
              on_tick: Callable[[], None] | None = None) -> None:
        """Read the journal (and call `on_tick`) every `every` seconds until `until(self)`, the exit, or the
        timeout."""
        deadline = time.monotonic() + timeout
        while self.process is not None and self.process.poll() is None and time.monotonic() < deadline:
            if on_tick is not None:
                on_tick()
            self.read()
            if until(self):
                return
            time.sleep(every)

    def finish(self, timeout: float) -> tuple[int, str]:
        """Wait for the exit (kill the child by its PID if it overruns); (exit code, the end of its stderr)."""
        assert self.process is not None
        try:
            _, stderr = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, stderr = self.process.communicate(timeout=30)
        self.read()
        return self.process.returncode, stderr.decode(errors="replace")[-2000:]


class PartTail:
    """A journal part read as it grows, whole lines only: its segments, plain or compressed, as one stream
    (`harness.journal.segments`; an older code's single file reads the same)."""

    def __init__(self, part: Path) -> None:
        self._reader = PartReader(part)
        self._rest = b""

    def read(self) -> bytes:
        """The whole lines written since the last call."""
        data = self._rest + b"".join(iter(self._reader.read, b""))
        cut = data.rfind(b"\n") + 1
        self._rest = data[cut:]
        return data[:cut]


def journal_bytes(folder: Path) -> int:
    """Bytes the journal takes on disk: every part's segments, plain and compressed."""
    return sum(path.stat().st_size for path in folder.glob("journal*")
               if path.name.endswith((".jsonl", ".jsonl.zst")))


def sample_until_exit(pids: Callable[[], dict[str, int]], child: ChildRun, every: float,
                      timeout: float) -> Iterator[dict[str, ProcessSample]]:
    """Every `every` seconds until the child exits: a sample of each process `pids()` names (gone ones left out)."""
    deadline = time.monotonic() + timeout
    while child.process is not None and child.process.poll() is None and time.monotonic() < deadline:
        looks = {name: process_sample(pid) for name, pid in pids().items()}
        yield {name: look for name, look in looks.items() if look is not None}
        child.read()
        time.sleep(every)


def load_average() -> float:
    return os.getloadavg()[0]
