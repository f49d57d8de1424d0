"""Wind-down at scale: a real `mrtr-harness run` that stops with tens of thousands of flows waiting on leads.

The trust question: when the load stops with every lead still thinking (20 minutes,
grace 0), does every started flow get exactly one end record, and how long does the
run take to journal them? Measured on the path users run: `mrtr-harness run` (a child
process) against an external target of two stub MRTR servers
(`benchmarks/stub_server.py`, a few tens of µs per round, so the load process is the
limit), open model at `--rate` flows/s for `--seconds`.

From the journal it reads: flows started, flows with exactly one end record, flows
journaled as interrupted by the run, and the wind-down time (from the `load-stopped`
record to the last `flow` record). It also measures the journal's flush delay in a
separate process: the time from `write` to the record being readable from another
file handle, over `--flush-trials` writes each followed by quiet.

    python -m benchmarks.wind_down --rate 1000 --seconds 100

Prints the figures and writes JSON to `results/benchmarks/`. What it leaves out: the
memory and CPU of the run (see the waiting-flows and CPU benchmarks), and the master and
workers path (`--workers`), where each worker journals its own flows.
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
name = "wind-down"
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
        scenario = work / "wind-down.toml"
        urls = ", ".join(f'"http://127.0.0.1:{port}/mcp"' for port in ports)
        scenario.write_text(SCENARIO.format(seconds=seconds, rate=rate, urls=urls))
        started = time.monotonic()
        run = subprocess.run([sys.executable, "-m", "harness", "run", str(scenario), "--results", str(work / "results"),
                              "--quiet"], cwd=ROOT, capture_output=True, text=True, timeout=seconds * 4 + 600)
        wall = time.monotonic() - started
    finally:
        for server in servers:
            server.kill()
            server.wait(10)
    (folder,) = [path for path in (work / "results").iterdir() if path.is_dir()]
    return {"exit_code": run.returncode, "wall_seconds": round(wall, 1), **read_journal_figures(folder),
            "tail": run.stderr[-600:]}


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
    with tempfile.TemporaryDirectory(prefix="mrtr-wind-down-") as tmp:
        work = Path(tmp)
        figures = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
                   "rate": args.rate, "seconds": args.seconds, "run": measure_run(args.rate, args.seconds, work),
                   "flush": measure_flush(args.flush_trials, work)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"wind_down-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, indent=2))
    print(f"written to {out.relative_to(ROOT)}")


def machine() -> dict[str, Any]:
    return {"cores": os.cpu_count(), "python": platform.python_version(), "kernel": platform.release(),
            "load_average": os.getloadavg()}


if __name__ == "__main__":
    main()
