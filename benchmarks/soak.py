"""A long run at the load process's top speed: does the harness's own cost grow with the run's length?

Each side is one real `mrtr-harness run` (`python -m harness run`, in a child process) of
the harness in `--code` (default: this checkout), against two stub servers
(`benchmarks/stub_server.py`, two rounds per flow, about 0.1 ms per round), closed model,
16 agents, leads answering at once, same-replica routing. While it runs, this script
samples the child's RSS (`/proc/<pid>/status` VmRSS) once a second, and that of its live
fold process (`harness.run.fold`, where the code has one), and counts the flows its journal
has finished (a byte count of `"type":"flow"` lines, no parsing). Both record every full
garbage collection they make through `gc.callbacks` (a `sitecustomize` put on their path,
so neither side's code is changed for the measurement).

Figures per side:

- RSS growth per 1,000,000 finished flows after the first 100,000 (a least-squares slope
  of RSS over finished flows, from 100,000 flows to the load's stop), of the load process
  and of the fold process apart, and the fold process's CPU seconds per 1,000 flows;
- last flow to exit: seconds from the last `flow` record's `t` to the child's exit;
- flows finished per 1 s bin during the load (from the journal afterwards): the median,
  the bins below half of it, and the full collections that overlap each;
- `mrtr-harness report DIR` on the folder: wall seconds, flows per second, peak RSS
  (`ru_maxrss` of that child); where the run saved its figures (`figures.json`, or an older
  code's `figures.pickle`), once from them and once more without them (one pass over the
  journal, as for a killed run).

Run from the repository root (the code before, for the ratio, from a worktree of it):

    python -m benchmarks.soak [--seconds 160] [--code DIR] [--label after] [--kill-after SECONDS]

With `--kill-after`, the run is SIGKILLed that long after it started, and `report DIR` is
timed on the folder it left: from its last saved figures and the records after them, then
again from the journal alone.

Raw figures go to `results/benchmarks/soak-<utc>.json`; run folders to
`results/benchmarks/runs/`. Leaves out: the log collector (the stub has no logs), chaos,
a ledger (the stub has none), workers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from benchmarks.cpu import machine_facts
from benchmarks.flows_per_second import SERVERS, servers
from benchmarks.runs import (
    REPO_ROOT,
    RESULTS,
    PartTail,
    fold_pid,
    journal_bytes,
    rss_bytes,
    slope_mib_per_million,
    write_figures,
)
from harness.journal.segments import part_lines
from harness.runtime.processes import process_cpu_seconds

SCENARIO = """\
name = "soak-benchmark"
seed = 19
duration = "{seconds}s"
grace = "5s"

[target]
kind = "external"
urls = {urls}

[load]
model = "closed"
users = 16
routing = "same-replica"
timeout = "10s"

[[flows]]
kind = "call"
tool = "confirm"
arguments = {{ item = "X-1" }}

[leads]
think = {{ dist = "constant", value = "0s" }}
"""

GC_PROBE = '''\
"""Installed by benchmarks/soak.py: each full (generation 2) collection of this process, as a JSON line."""
import gc, os, time
_path, _pid = os.environ.get("MRTR_GC_PROBE"), os.getpid()
if _path:
    _out, _began = open(_path, "a", buffering=1), [0.0]
    def _probe(phase, info):
        if info.get("generation") != 2:
            return
        if phase == "start":
            _began[0] = time.time()
        elif os.getpid() == _pid:
            _out.write('{"pid": %d, "t": %.6f, "pause": %.6f, "collected": %d}\\n'
                       % (_pid, _began[0], time.time() - _began[0], info.get("collected", 0)))
    gc.callbacks.append(_probe)
'''
FLOW_MARK = b'"type":"flow"'
SAMPLE_EVERY = 1.0


def count_flows(journal: PartTail, count: int) -> int:
    """Flows finished so far, reading only what the journal gained (whole lines)."""
    return count + journal.read().count(FLOW_MARK)


def soak_run(code: Path, seconds: float, urls: list[str], work: Path,
             kill_after: float | None = None) -> dict[str, Any]:
    """One run of `code`'s harness; with `kill_after`, SIGKILLed that many seconds after it started (a killed run)."""
    results = RESULTS / "runs"
    results.mkdir(parents=True, exist_ok=True)
    scenario = work / "soak.toml"
    scenario.write_text(SCENARIO.format(seconds=seconds, urls=json.dumps(urls)))
    probe_dir = work / "probe"
    probe_dir.mkdir()
    (probe_dir / "sitecustomize.py").write_text(GC_PROBE)
    gc_log = work / "gc.jsonl"
    before = set(results.iterdir())
    env = {**os.environ, "PYTHONPATH": f"{code}{os.pathsep}{probe_dir}", "MRTR_GC_PROBE": str(gc_log)}
    child = subprocess.Popen([sys.executable, "-m", "harness", "run", str(scenario), "--quiet", "--results",
                              str(results)], cwd=code, env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    samples: list[tuple[float, int, int, int]] = []  # (time, finished flows, RSS bytes, the fold's RSS bytes)
    fold_cpu: list[tuple[float, int, float]] = []  # (time, finished flows, the fold's CPU seconds)
    folder, tail, flows, fold = None, None, 0, None
    began = time.monotonic()
    deadline = began + seconds + 600
    while child.poll() is None and time.monotonic() < deadline:
        if kill_after is not None and time.monotonic() - began >= kill_after:
            child.kill()
            break
        if folder is None:
            made = [path for path in set(results.iterdir()) - before if (path / "journal.jsonl").is_file()]
            folder = made[0] if made else None
        if folder is not None:
            tail = tail or PartTail(folder / "journal.jsonl")
            flows = count_flows(tail, flows)
        if fold is None:
            fold = fold_pid(child.pid)
        rss, fold_rss = rss_bytes(child.pid), rss_bytes(fold) if fold is not None else 0
        if rss is not None:
            samples.append((time.time(), flows, rss, fold_rss or 0))
        if fold is not None and (seconds_used := process_cpu_seconds(fold)) is not None:
            fold_cpu.append((time.time(), flows, seconds_used))
        time.sleep(SAMPLE_EVERY)
    if child.poll() is None:
        child.kill()
    _, stderr = child.communicate(timeout=60)
    exited = time.time()
    assert folder is not None, stderr.decode(errors="replace")[-2000:]
    figures = run_figures(folder, samples, exited, gc_log, child.pid)
    figures["fold_process"] = fold_figures(samples, fold_cpu)
    figures.update(code=str(code), exit_code=child.returncode, stderr_tail=stderr.decode(errors="replace")[-500:],
                   report=report_figures(code, folder, figures["flows_finished"]))
    saved = [folder / name for name in ("figures.json", "figures.pickle") if (folder / name).is_file()]
    if saved:  # the side saved its figures: also the journal's path alone (no snapshot)
        saved[0].unlink()
        figures["report_from_journal"] = report_figures(code, folder, figures["flows_finished"])
    return figures


def run_figures(folder: Path, samples: list[tuple[float, int, int, int]], exited: float, gc_log: Path,
                load_pid: int) -> dict[str, Any]:
    flow_times, load_started, load_stopped = [], None, None
    for line in part_lines(folder / "journal.jsonl"):
        if FLOW_MARK in line:
            flow_times.append(orjson.loads(line)["t"])
        elif b'"load-started"' in line or b'"load-stopped"' in line:
            record = orjson.loads(line)
            if record.get("event") == "load-started":
                load_started = record["t"]
            elif record.get("event") == "load-stopped":
                load_stopped = record["t"]
    assert load_started is not None and flow_times
    killed = load_stopped is None  # SIGKILLed (`--kill-after`): the load ran until the last flow journaled
    if load_stopped is None:
        load_stopped = max(flow_times)
    pauses = [json.loads(line) for line in gc_log.read_text().splitlines()] if gc_log.is_file() else []
    pauses = [pause for pause in pauses if pause["pid"] == load_pid]  # the fold's own are in `fold_process`
    bins = Counter(int(t - load_started) for t in flow_times if load_started <= t < load_stopped)
    whole = range(1, int(load_stopped - load_started))  # the first second is the agents' spawn
    per_bin = [bins.get(second, 0) for second in whole]
    median = statistics.median(per_bin)
    low = [{"second": second, "flows": bins.get(second, 0),
            "full_gc_ms": round(1000 * sum(p["pause"] for p in pauses
                                           if second <= p["t"] - load_started < second + 1
                                           or second <= p["t"] + p["pause"] - load_started < second + 1), 1)}
           for second in whole if bins.get(second, 0) < median / 2]
    steady = [(flows, rss) for t, flows, rss, _ in samples if flows >= 100_000 and t <= load_stopped]
    return {"flows_finished": len(flow_times), "load_seconds": round(load_stopped - load_started, 1),
            "median_flows_per_second": median, "bins_below_half_median": low,
            "rss_growth_mib_per_million_flows": slope_mib_per_million(steady),
            "rss_at_100k_mib": round(steady[0][1] / 2**20, 1) if steady else None,
            "rss_peak_mib": round(max(rss for _, _, rss, _ in samples) / 2**20, 1),
            "last_flow_to_exit_s": None if killed else round(exited - max(flow_times), 1),
            "full_gcs": len(pauses),
            "full_gc_pause_max_ms": round(1000 * max((p["pause"] for p in pauses), default=0), 1),
            "full_gc_pause_total_ms": round(1000 * sum(p["pause"] for p in pauses), 1),
            "journal_bytes": journal_bytes(folder),
            "folder": str(folder.relative_to(REPO_ROOT))}


def fold_figures(samples: list[tuple[float, int, int, int]], cpu: list[tuple[float, int, float]]) -> dict[str, Any]:
    """The fold process's RSS growth per 1,000,000 flows after the first 100,000, its peak, and its CPU per flow."""
    steady = [(flows, rss) for _, flows, _, rss in samples if flows >= 100_000 and rss]
    busy = [(flows, seconds) for _, flows, seconds in cpu if flows > 0]
    per_flow = (busy[-1][1] - busy[0][1]) / (busy[-1][0] - busy[0][0]) if len(busy) > 1 and busy[-1][0] > busy[0][0] \
        else None
    return {"rss_growth_mib_per_million_flows": slope_mib_per_million(steady),
            "rss_peak_mib": round(max((rss for *_, rss in samples), default=0) / 2**20, 1),
            "cpu_us_per_flow": round(per_flow * 1e6, 1) if per_flow is not None else None}


def report_figures(code: Path, folder: Path, flows: int) -> dict[str, Any]:
    """`mrtr-harness report DIR` of the side's own code on its folder: wall seconds, flows/s, peak RSS."""
    started = time.monotonic()
    child = subprocess.Popen([sys.executable, "-m", "harness", "report", str(folder)], cwd=code,
                             env={**os.environ, "PYTHONPATH": str(code)}, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    return {"exit_code": child.returncode, "seconds": round(wall, 2), "flows_per_second": round(flows / wall),
            "peak_rss_mib": round(usage.ru_maxrss / 1024, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=160.0)
    parser.add_argument("--code", type=Path, default=REPO_ROOT, help="the checkout whose harness runs")
    parser.add_argument("--label", default="after")
    parser.add_argument("--kill-after", type=float, default=None, metavar="SECONDS",
                        help="SIGKILL the run this long after it started, then time `report DIR` on what it left")
    args = parser.parse_args(argv)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    with servers(SERVERS["stub"], 2) as running, tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        figures = soak_run(args.code.resolve(), args.seconds, [server.url for server in running], Path(tmp),
                           args.kill_after)
    document = {"label": args.label, "started": started, "machine": machine_facts(), "seconds": args.seconds,
                "load_average_after": os.getloadavg(), **figures}
    write_figures(f"soak-{args.label}", document)
    print(json.dumps({k: v for k, v in document.items() if k != "bins_below_half_median"}, indent=2))
    print("bins below half the median:", json.dumps(document["bins_below_half_median"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
