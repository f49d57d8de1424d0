"""Flows waiting on leads, in a real `mrtr-harness run`: what each costs in memory, and the wind-down at the stop.

Measured on the path users run: `mrtr-harness run` (a child process) against an
external target of two stub MRTR servers (`benchmarks/stub_server.py`, a few tens of µs
per round, so the load process is the limit), open model at `--rate` flows/s for
`--seconds`, every lead thinking 20 minutes, grace 0: every flow started is still
waiting on its lead when the load stops.

While the load runs it samples the run process's RSS (`/proc/<pid>/status`) and the
flows started so far (the journal's `start` records, read as they are written): the
baseline is the RSS when the load starts, the figure is RSS growth per 1,000 waiting
flows, and the RSS at the peak. After the run it reads from the journal: flows
started, flows with exactly one end record, flows journaled as interrupted by the run,
and the time from the `load-stopped` record to the last `flow` record and to the
reconciliation, invariants and `run end`. It also measures the journal's flush delay
in a separate process patched as a run is (gevent): from `write` to the record being
readable through another file handle, over `--flush-trials` writes each followed by quiet.

    python -m benchmarks.waiting_flows --rate 1000 --seconds 100

Prints the figures and writes JSON to `results/benchmarks/`. What it leaves out: CPU
(see the CPU benchmark), the master and workers path (`--workers`, where each worker
holds and journals its own flows), and where the memory goes inside the process (a
tracemalloc breakdown needs code inside the run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "benchmarks"

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
from harness.locust_first import import_locust
import_locust()  # patched as a run is: the journal's batches are written by a timer on gevent's loop
from harness.journal import Journal
from harness.records import FlowStarted, RecordType
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


def measure_run(rate: float, seconds: float, work: Path) -> dict[str, Any]:
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
        with open(work / "run.log", "w+", encoding="utf-8") as log:
            run = subprocess.Popen([sys.executable, "-m", "harness", "run", str(scenario), "--results",
                                    str(work / "results"), "--quiet"], cwd=ROOT, stdout=log, stderr=log)
            memory = sample_memory(run, work / "results", deadline=time.monotonic() + seconds * 4 + 600)
            code = run.wait(60)
            log.seek(0)
            tail = log.read()[-600:]
        wall = time.monotonic() - started
    finally:
        for server in servers:
            server.kill()
            server.wait(10)
    (folder,) = [path for path in (work / "results").iterdir() if path.is_dir()]
    return {"exit_code": code, "wall_seconds": round(wall, 1), "memory": memory, **read_journal_figures(folder),
            "tail": tail}


def sample_memory(run: subprocess.Popen[bytes], results: Path, deadline: float) -> dict[str, Any]:
    """RSS of the run process against flows started, twice a second, from the load's start to its stop."""
    journal: Path | None = None
    offset = starts = 0
    base = peak = None
    samples: list[tuple[float, int, float]] = []
    while run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
        if journal is None:
            folders = [path for path in results.glob("*") if (path / "journal.jsonl").is_file()]
            journal = folders[0] / "journal.jsonl" if folders else None
            continue
        with open(journal, "rb") as lines:
            lines.seek(offset)
            chunk = lines.read()
        chunk = chunk[: chunk.rfind(b"\n") + 1]
        offset += len(chunk)
        starts += chunk.count(b'"type":"start"')
        rss = rss_mib(run.pid)
        if rss is None:
            break
        if base is None and b'"event":"load-started"' in chunk:
            base = (starts, rss)
        if base is not None:
            samples.append((round(time.monotonic(), 1), starts, rss))
            peak = (starts, rss) if peak is None or rss >= peak[1] else peak
        if b'"event":"load-stopped"' in chunk:
            break
    if base is None or peak is None or peak[0] == base[0]:
        return {"samples": samples}
    per_thousand = (peak[1] - base[1]) / (peak[0] - base[0]) * 1000
    return {"rss_at_load_start_mib": round(base[1], 1), "flows_waiting_at_peak": peak[0],
            "rss_at_peak_mib": round(peak[1], 1), "mib_per_1000_waiting": round(per_thousand, 2),
            "projected_rss_at_100k_mib": round(base[1] + per_thousand * 100, 1),
            "samples": samples[:: max(1, len(samples) // 40)]}


def rss_mib(pid: int) -> float | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    kib = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), None)
    return None if kib is None else kib / 1024


def read_journal_figures(folder: Path) -> dict[str, Any]:
    starts: Counter[str] = Counter()
    ends: Counter[str] = Counter()
    by_run = 0
    stopped = last_end = None
    marks: dict[str, float] = {}
    with open(folder / "journal.jsonl", encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            kind = record.get("type")
            if kind == "start":
                starts[record["flow_id"]] += 1
            elif kind == "flow":
                ends[record["flow_id"]] += 1
                by_run += bool(record.get("interrupted_by_run"))
                last_end = record["t"]
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mrtr-waiting-flows-") as tmp:
        work = Path(tmp)
        figures = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
                   "rate": args.rate, "seconds": args.seconds, "run": measure_run(args.rate, args.seconds, work),
                   "flush": measure_flush(args.flush_trials, work)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"waiting_flows-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, indent=2))
    print(f"written to {out.relative_to(ROOT)}")


def machine() -> dict[str, Any]:
    return {"cores": os.cpu_count(), "python": platform.python_version(), "kernel": platform.release(),
            "load_average": os.getloadavg()}


if __name__ == "__main__":
    main()
