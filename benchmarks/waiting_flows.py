"""Flows waiting on leads, in a real `mrtr-harness run`: what each costs in memory, and the wind-down at the stop.

Measured on the path users run: `mrtr-harness run` (a child process) against an
external target of two stub MRTR servers (`benchmarks/stub_server.py`, a few tens of µs
per round, so the load process is the limit), open model at `--rate` flows/s for
`--seconds`, every lead thinking 20 minutes, grace 0: every flow started is still
waiting on its lead when the load stops.

While the load runs it samples the run process's RSS (`/proc/<pid>/status`), that of its
live fold process (`harness.run.live_fold`: the flows in flight of `one_outcome_per_flow` are
kept there) apart, and the flows started so far (the journal's `start` records, read as they are written): the
baseline is the RSS when the load starts, the figure is RSS growth per 1,000 waiting
flows, and the RSS at the peak. After the run it reads from the journal: flows
started, flows with exactly one end record, flows journaled as interrupted by the run,
and the time from the `load-stopped` record to the last `flow` record and to the
reconciliation, invariants and `run end`. It also measures the journal's flush delay
in a separate process patched as a run is (gevent): from `write` to the record being
readable through another file handle, over `--flush-trials` writes each followed by quiet.

    python -m benchmarks.waiting_flows --rate 1000 --seconds 100

    python -m benchmarks.waiting_flows --rate 1000 --seconds 60 --workers 2

With `--workers N` the load runs on N local Locust workers: each worker's RSS is sampled
against the flows it holds (its journal part's `start` records), and the run process's
against all of them. The whole-life peak RSS (`ru_maxrss` of the run, or of its largest
worker) covers the wind-down and the reports too.

Prints the figures and writes JSON to `results/benchmarks/`. What it leaves out: CPU
(see the CPU benchmark) and where the memory goes inside the process (a tracemalloc
breakdown needs code inside the run; `benchmarks/README.md` gives one).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.runs import PartTail, is_fold_process, write_figures
from harness.journal.segments import part_lines
from harness.processes.children import descendants
from harness.report import journal_parts

ROOT = Path(__file__).resolve().parents[1]

SCENARIO = """
name = "waiting-flows"
seed = 11
duration = "{seconds}s"
grace = "0s"
[target]
kind = "external"
urls = [{urls}]
[load]
model = "open"
arrival_rate = {rate}
max_in_flight = 2000000
routing = "round-robin"
[[flows]]
kind = "call"
tool = "confirm"
arguments = {{ item = "X-1" }}
[leads]
think = {{ dist = "constant", value = "20m" }}
"""

FLUSH_PROBE = """
import sys, time
from pathlib import Path
import locust  # noqa: F401 - patched as a run is: the journal's batches are written by a timer on gevent's loop
from harness.journal.writer import Journal
from harness.journal.records import FlowStarted, RecordType
path = Path(sys.argv[1]); trials = int(sys.argv[2])
journal = Journal(path)
delays = []
with open(path, "rb") as reader:
    for n in range(trials):
        size = path.stat().st_size
        written = time.monotonic()
        journal.write(FlowStarted(type=RecordType.START, t=time.time(), flow_id=f"f{n}", flow="x", scheduled=None,
                                  late=False))
        while path.stat().st_size == size:
            time.sleep(0.001)
        delays.append(time.monotonic() - written)
        time.sleep(0.3)  # quiet: nothing follows the record
journal.close()
print(" ".join(f"{d:.4f}" for d in delays))
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_listening(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"stub server on port {port} did not start")


def measure_run(rate: float, seconds: float, work: Path, workers: int = 0) -> dict[str, Any]:
    ports = [free_port(), free_port()]
    servers = [subprocess.Popen([sys.executable, "-m", "benchmarks.stub_server", "--port", str(port)], cwd=ROOT,
                                stdin=subprocess.DEVNULL) for port in ports]
    try:
        for port in ports:
            wait_listening(port)
        scenario = work / "waiting.toml"
        urls = ", ".join(f'"http://127.0.0.1:{port}/mcp"' for port in ports)
        scenario.write_text(SCENARIO.format(seconds=seconds, rate=rate, urls=urls))
        started = time.monotonic()
        command = [sys.executable, "-m", "harness", "run", str(scenario), "--results", str(work / "results"),
                   "--quiet", *(["--workers", str(workers)] if workers else [])]
        with open(work / "run.log", "w+", encoding="utf-8") as log:
            run = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=log)
            memory = sample_memory(run, work / "results", deadline=time.monotonic() + seconds * 4 + 600)
            code = run.wait(900)  # a million flows take minutes to journal, reconcile and report
            # The largest RSS the run process (or a worker of it) ever had, wind-down and reports included.
            lifetime_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            log.seek(0)
            tail = log.read()[-600:]
        wall = time.monotonic() - started
    finally:
        for server in servers:
            server.kill()
            server.wait(10)
    (folder,) = [path for path in (work / "results").iterdir() if path.is_dir()]
    return {"exit_code": code, "wall_seconds": round(wall, 1), "workers": workers,
            "memory": {**memory, "peak_rss_whole_life_mib": round(lifetime_peak, 1)},
            **read_journal_figures(folder), "tail": tail}


class Process:
    """One process of the run (the run itself, or a Locust worker) and the flows it holds."""

    def __init__(self, name: str, pid: int) -> None:
        self.name, self.pid = name, pid
        self.base: tuple[int, float] | None = None
        self.peak: tuple[int, float] | None = None

    def sample(self, flows: int) -> None:
        rss = rss_mib(self.pid)
        if rss is None:
            return
        if self.base is None:
            self.base = (flows, rss)
        if self.peak is None or rss >= self.peak[1]:
            self.peak = (flows, rss)

    def figures(self) -> dict[str, Any]:
        if self.base is None or self.peak is None or self.peak[0] == self.base[0]:
            return {"name": self.name}
        per_thousand = (self.peak[1] - self.base[1]) / (self.peak[0] - self.base[0]) * 1000
        return {"name": self.name, "rss_at_load_start_mib": round(self.base[1], 1),
                "flows_waiting_at_peak": self.peak[0], "rss_at_peak_mib": round(self.peak[1], 1),
                "mib_per_1000_waiting": round(per_thousand, 2),
                "projected_rss_at_100k_mib": round(self.base[1] + per_thousand * 100, 1)}


def sample_memory(run: subprocess.Popen[bytes], results: Path, deadline: float) -> dict[str, Any]:
    """RSS of the run process (and of each worker) against the flows each holds, twice a second, over the load.

    Flows are counted from the journal's `start` records as they are written: the run's
    own `journal.jsonl`, or each worker's part `journal-w<i>.jsonl` (flow ids `w<i>-…`).
    The baseline of each process is its RSS when the load starts; the figure, its RSS
    growth per 1,000 flows it holds (the run process, with workers, per 1,000 of all).
    """
    offsets: dict[Path, PartTail] = {}
    starts: Counter[str] = Counter()
    processes: dict[str, Process] = {}
    loading = False
    samples: list[tuple[float, int, float]] = []
    while run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
        folders = [path for path in results.glob("*") if (path / "journal.jsonl").is_file()]
        if not folders:
            continue
        chunks = read_new(folders[0], offsets)
        for part, chunk in chunks.items():
            starts[part] += chunk.count(b'"type":"start"')
        text = b"".join(chunks.values())
        loading = loading or b'"event":"load-started"' in text
        if loading:
            find_processes(run.pid, processes)
            total = sum(starts.values())
            for name, process in processes.items():
                process.sample(total if name in ("run", "fold") else starts[f"journal-{name}.jsonl"])
            rss = rss_mib(run.pid)
            if rss is not None:
                samples.append((round(time.monotonic(), 1), total, rss))
        if b'"event":"load-stopped"' in text:
            break
    figures = [process.figures() for process in processes.values()]
    run_figures = next((f for f in figures if f["name"] == "run"), {})
    return {**run_figures, "processes": figures, "samples": samples[:: max(1, len(samples) // 40)]}


def read_new(folder: Path, offsets: dict[Path, PartTail]) -> dict[str, bytes]:
    """The complete lines written since the last call to the run's journal and to each worker's part."""
    chunks: dict[str, bytes] = {}
    for path in journal_parts(folder):
        tail = offsets.setdefault(path, PartTail(path))
        chunks[path.name] = tail.read()
    return chunks


def find_processes(run_pid: int, processes: dict[str, Process]) -> None:
    """The run process, its live fold process (`fold`), and each Locust worker below it, named by the journal
    spool it has open (`w0`, ...).

    The master gives a worker its index when it says hello; the worker then journals to
    `journal-w<i>.jsonl` in a spool folder of its own, which is how it is told apart here.
    """
    processes.setdefault("run", Process("run", run_pid))
    for pid in descendants(run_pid):
        if is_fold_process(pid):  # the run's live fold: it reads every part, a worker's too
            processes.setdefault("fold", Process("fold", pid))
            continue
        name = spool_name(pid)
        if name is not None:
            processes.setdefault(name, Process(name, pid))


def spool_name(pid: int) -> str | None:
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return None
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        match = re.search(r"journal-(w\d+)\.jsonl$", target)
        if match:
            return match.group(1)
    return None


def rss_mib(pid: int) -> float | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    kib = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), None)
    return None if kib is None else kib / 1024


def journal_lines(folder: Path) -> Iterator[str]:
    """Every line of the run's journal and of each worker's part (flows live in the parts with workers)."""
    for path in journal_parts(folder):
        for line in part_lines(path):
            yield line.decode("utf-8")


def read_journal_figures(folder: Path) -> dict[str, Any]:
    starts: Counter[str] = Counter()
    ends: Counter[str] = Counter()
    by_run = 0
    stopped = last_end = None
    marks: dict[str, float] = {}
    for line in journal_lines(folder):
        record = json.loads(line)
        kind = record.get("type")
        if kind == "start":
            starts[record["flow_id"]] += 1
        elif kind == "flow":
            ends[record["flow_id"]] += 1
            by_run += bool(record.get("interrupted_by_run"))
            last_end = max(last_end or 0.0, record["t"])  # parts are read one after another
        elif kind == "run" and record.get("event") == "load-stopped":
            stopped = record["t"]
        elif kind in ("reconciliation", "invariant") or (kind == "run" and record.get("event") == "end"):
            marks.setdefault(kind if kind != "run" else "run end", record["t"])
    exactly_one = sum(1 for flow_id in starts if starts[flow_id] == 1 and ends[flow_id] == 1)
    return {"flows_started": len(starts), "flows_with_exactly_one_end": exactly_one,
            "flows_without_end": sum(1 for flow_id in starts if ends[flow_id] == 0),
            "interrupted_by_run": by_run,
            "wind_down_seconds": round(last_end - stopped, 3) if stopped and last_end else None,
            "after_load_stopped_seconds": {name: round(t - stopped, 3) for name, t in marks.items()} if stopped else {}}


def measure_flush(trials: int, work: Path) -> dict[str, Any]:
    result = subprocess.run([sys.executable, "-c", FLUSH_PROBE, str(work / "flush.jsonl"), str(trials)], cwd=ROOT,
                            capture_output=True, text=True, timeout=trials * 2 + 60, check=True)
    delays = sorted(float(value) for value in result.stdout.split())
    pick = lambda q: delays[min(len(delays) - 1, int(q * len(delays)))]  # noqa: E731
    return {"trials": len(delays), "p50_ms": round(pick(0.5) * 1000, 1), "p99_ms": round(pick(0.99) * 1000, 1),
            "max_ms": round(delays[-1] * 1000, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1000.0, help="flows per second (default 1000)")
    parser.add_argument("--seconds", type=float, default=100.0, help="load duration (default 100)")
    parser.add_argument("--flush-trials", type=int, default=200)
    parser.add_argument("--workers", type=int, default=0,
                        help="run the load on this many local Locust workers (default: in the run process)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mrtr-waiting-flows-") as tmp:
        work = Path(tmp)
        figures = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
                   "rate": args.rate, "seconds": args.seconds,
                   "run": measure_run(args.rate, args.seconds, work, args.workers),
                   "flush": measure_flush(args.flush_trials, work)}
    print(json.dumps(figures, indent=2))
    write_figures("waiting_flows", figures)


def machine() -> dict[str, Any]:
    return {"cores": os.cpu_count(), "python": platform.python_version(), "kernel": platform.release(),
            "load_average": os.getloadavg()}


if __name__ == "__main__":
    main()
