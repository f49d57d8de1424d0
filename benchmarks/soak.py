"""A long run at the load process's top speed: does the harness's own cost grow with the run's length?

Each side is one real `mrtr-harness run` (`python -m harness run`, in a child process) of
the harness in `--code` (default: this checkout), against two stub servers
(`benchmarks/stub_server.py`, two rounds per flow, about 0.1 ms per round), closed model,
16 agents, leads answering at once, same-replica routing. While it runs, this script
samples the child's RSS (`/proc/<pid>/status` VmRSS) once a second, that of its live
fold process (`harness.run.live_fold`, where the code has one) and, with `--workers N` (the run's
own `--workers N`: the child is then Locust's master and the load is in its workers), that
of each worker (`python -m harness worker`, children of the run found by their command line),
and counts the flows its journal has finished (a byte count of `"type":"flow"` lines in every
part, `journal.jsonl` and each worker's `journal-w<N>.jsonl`, no parsing). They all record
every full garbage collection they make through `gc.callbacks` (a `sitecustomize` put on
their path, so neither side's code is changed for the measurement).

With `--reject FRACTION`, each stub refuses a seeded share of the continuation rounds as the
SDK refuses a `requestState` (-32602 `Invalid or expired requestState`) and logs each refusal
in the shop's replicas' line format to a file of its own; the scenario names those files
(`[target] logs`, `file:PATH@r<N>`), so the run's log collector follows them and its
reconciliation matches every client rejection with a logged line, live and at the end:
a chaos that keeps rejecting, with what reconciliation holds in memory in the figures.

Figures per side:

- RSS growth per 1,000,000 finished flows after the first 100,000 (`--steady-from`; a
  least-squares slope of RSS over finished flows, from there to the load's stop), and the
  peak RSS, of the run process (the load process, or the master with workers), of the fold
  process and of each worker apart, and the fold process's CPU µs per flow;
- last flow to exit: seconds from the last `flow` record's `t` to the child's exit;
- flows finished per 1 s bin during the load (from the journal afterwards): the median,
  the bins below half of it, and the full collections that overlap each (those of the run
  process and of its workers, not the fold's); the continuation rounds (rounds after a
  flow's first) the journal holds;
- `mrtr-harness report DIR` on the folder: wall seconds, flows per second, peak RSS
  (`ru_maxrss` of that child) and the peak of its process tree's RSS summed (a journal of
  many segments is folded by one process per CPU; shared pages counted in each); where the
  run saved its figures (`figures.json`, or an older code's `figures.pickle`), once from them
  and once more without them (the whole journal folded, as for a killed run);
- with `--reject`: the run's reconciliation from its `summary.json` (client rejections, logged,
  matched, unexplained, unmatched logged, settled early where the code counts it) and the
  rejection rate the clients saw (client rejections per continuation round in the journal).

Run from the repository root (the code before, for the ratio, from a worktree of it):

    python -m benchmarks.soak [--seconds 160] [--code DIR] [--label after] [--kill-after SECONDS]
                              [--reject FRACTION] [--workers N] [--steady-from FLOWS]

With `--kill-after`, the run is SIGKILLed that long after it started, and `report DIR` is
timed on the folder it left: from its last saved figures and the records after them, then
again from the journal alone.

Raw figures go to `results/benchmarks/soak-<utc>.json`; run folders to
`results/benchmarks/runs/`. Leaves out: the log collector unless `--reject` (the stub logs
nothing else), chaos commands (the refusals are the stub's own), a ledger (the stub has none),
workers on other machines.
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
from collections.abc import Iterator
from contextlib import AbstractContextManager
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
    worker_pids,
    write_figures,
)
from harness.journal.segments import part_lines, part_names
from harness.processes.children import process_cpu_seconds
from tests.servers import Running

SCENARIO = """\
name = "soak-benchmark"
seed = 19
duration = "{seconds}s"
grace = "5s"

[target]
kind = "external"
urls = {urls}{logs}

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
ROUND_MARK = b'"type":"round"'
FIRST_ROUND_MARK = b'"round":1,'
PARTS = r"journal(?:-w\d+)?"
"""The journal's parts: the run's own, and each worker's (`harness.report.journal_parts`)."""
SAMPLE_EVERY = 1.0
REPLICAS = 2
STEADY_FROM = 100_000
"""Finished flows after which RSS is expected flat (the slope is taken from there)."""
RECONCILED = ("client_rejections", "logged", "matched", "unexplained", "unmatched_logged", "settled_early")

Sample = tuple[float, int, dict[str, int]]
"""(time, finished flows, RSS bytes by process: `load`, `fold`, `worker-1`, ...)."""


class JournalFlows:
    """Flows finished so far in every part of a run's journal, reading only what each part gained (whole lines)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.tails: dict[str, PartTail] = {}
        self.count = 0

    def read(self) -> int:
        for name in part_names(self.folder, PARTS):  # a worker's part appears with its first batch
            tail = self.tails.setdefault(name, PartTail(self.folder / name))
            self.count += tail.read().count(FLOW_MARK)
        return self.count


def stub_servers(count: int, reject: float, logs: Path) -> AbstractContextManager[list[Running]]:
    """`count` stub servers; with `reject`, each refuses that share of continuation rounds (its own seed) and logs
    each refusal to `logs/r<N>.log`. Stopped by PID on the way out."""
    logs.mkdir(parents=True, exist_ok=True)

    def rejecting(number: int) -> tuple[str, ...]:
        return ("--reject", str(reject), "--seed", str(number), "--log", str(logs / f"r{number}.log"),
                "--replica", f"r{number}") if reject > 0 else ()

    return servers(SERVERS["stub"], count, rejecting)


def log_sources(logs: Path, count: int) -> list[str]:
    """The scenario's `[target] logs`: each stub's file, labelled with the replica its URL is (`r1`, `r2`, ...)."""
    return [f"file:{logs / f'r{number}.log'}@r{number}" for number in range(1, count + 1)]


def soak_run(code: Path, seconds: float, urls: list[str], work: Path, kill_after: float | None = None,
             workers: int = 0, logs: list[str] | None = None, steady_from: int = STEADY_FROM) -> dict[str, Any]:
    """One run of `code`'s harness; with `kill_after`, SIGKILLed that many seconds after it started (a killed run);
    with `workers`, `run --workers N`; with `logs`, the scenario's `[target] logs` (reconciliation on)."""
    results = RESULTS / "runs"
    results.mkdir(parents=True, exist_ok=True)
    scenario = work / "soak.toml"
    sources = f"\nlogs = {json.dumps(logs)}" if logs else ""
    scenario.write_text(SCENARIO.format(seconds=seconds, urls=json.dumps(urls), logs=sources))
    probe_dir = work / "probe"
    probe_dir.mkdir()
    (probe_dir / "sitecustomize.py").write_text(GC_PROBE)
    gc_log = work / "gc.jsonl"
    before = set(results.iterdir())
    env = {**os.environ, "PYTHONPATH": f"{code}{os.pathsep}{probe_dir}", "MRTR_GC_PROBE": str(gc_log)}
    child = subprocess.Popen([sys.executable, "-m", "harness", "run", str(scenario), "--quiet", "--results",
                              str(results), *(["--workers", str(workers)] if workers else [])],
                             cwd=code, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    samples: list[Sample] = []
    fold_cpu: list[tuple[float, int, float]] = []  # (time, finished flows, the fold's CPU seconds)
    folder, journal, flows = None, None, 0
    pids: dict[str, int] = {"load": child.pid}
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
            journal = journal or JournalFlows(folder)
            flows = journal.read()
        find_processes(pids, child.pid, workers)
        rss = {name: value for name, pid in pids.items() if (value := rss_bytes(pid)) is not None}
        if "load" in rss:
            samples.append((time.time(), flows, rss))
        if "fold" in pids and (seconds_used := process_cpu_seconds(pids["fold"])) is not None:
            fold_cpu.append((time.time(), flows, seconds_used))
        time.sleep(SAMPLE_EVERY)
    if child.poll() is None:
        child.kill()
    _, stderr = child.communicate(timeout=60)
    exited = time.time()
    assert folder is not None, stderr.decode(errors="replace")[-2000:]
    load_pids = {pid for name, pid in pids.items() if name != "fold"}
    figures = run_figures(folder, samples, exited, gc_log, load_pids, steady_from)
    figures["fold_process"] = {**process_figures(samples, "fold", steady_from), **fold_cpu_figures(fold_cpu)}
    if workers:
        figures["worker_processes"] = {name: process_figures(samples, name, steady_from)
                                       for name in pids if name.startswith("worker-")}
    if logs:
        figures["reconciliation"] = reconciliation_figures(folder, figures["continuation_rounds"])
    figures.update(code=str(code), exit_code=child.returncode, stderr_tail=stderr.decode(errors="replace")[-500:],
                   report=report_figures(code, folder, figures["flows_finished"]))
    saved = [folder / name for name in ("figures.json", "figures.pickle") if (folder / name).is_file()]
    if saved:  # the side saved its figures: also the journal's path alone (no snapshot)
        saved[0].unlink()
        figures["report_from_journal"] = report_figures(code, folder, figures["flows_finished"])
    return figures


def find_processes(pids: dict[str, int], run_pid: int, workers: int) -> None:
    """Add the run's fold process and its workers to `pids` as they appear (`fold`, `worker-1`, ... in PID order)."""
    if "fold" not in pids and (fold := fold_pid(run_pid)) is not None:
        pids["fold"] = fold
    known = {pid for name, pid in pids.items() if name.startswith("worker-")}
    if len(known) < workers:
        for pid in worker_pids(run_pid):
            if pid not in known:
                known.add(pid)
                pids[f"worker-{len(known)}"] = pid


def journal_lines(folder: Path) -> Iterator[bytes]:
    """Every line of every part of the run's journal (the run's own part first)."""
    for name in sorted(part_names(folder, PARTS), key=lambda name: (name != "journal.jsonl", len(name), name)):
        yield from part_lines(folder / name)


def run_figures(folder: Path, samples: list[Sample], exited: float, gc_log: Path, load_pids: set[int],
                steady_from: int = STEADY_FROM) -> dict[str, Any]:
    """The run process's figures and the journal's: flows, per-second bins, full collections of the load's
    processes (`load_pids`: the run's, and its workers'), continuation rounds."""
    flow_times, load_started, load_stopped, continuations = [], None, None, 0
    for line in journal_lines(folder):
        if FLOW_MARK in line:
            flow_times.append(orjson.loads(line)["t"])
        elif ROUND_MARK in line:
            continuations += FIRST_ROUND_MARK not in line
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
    pauses = [pause for pause in pauses if pause["pid"] in load_pids]  # not the fold's
    bins = Counter(int(t - load_started) for t in flow_times if load_started <= t < load_stopped)
    whole = range(1, int(load_stopped - load_started))  # the first second is the agents' spawn
    per_bin = [bins.get(second, 0) for second in whole]
    median = statistics.median(per_bin)
    low = [{"second": second, "flows": bins.get(second, 0),
            "full_gc_ms": round(1000 * sum(p["pause"] for p in pauses
                                           if second <= p["t"] - load_started < second + 1
                                           or second <= p["t"] + p["pause"] - load_started < second + 1), 1)}
           for second in whole if bins.get(second, 0) < median / 2]
    return {"flows_finished": len(flow_times), "load_seconds": round(load_stopped - load_started, 1),
            "median_flows_per_second": median, "bins_below_half_median": low,
            **process_figures([sample for sample in samples if sample[0] <= load_stopped], "load", steady_from),
            "rss_peak_mib": round(max(rss["load"] for *_, rss in samples) / 2**20, 1),
            "continuation_rounds": continuations,
            "last_flow_to_exit_s": None if killed else round(exited - max(flow_times), 1),
            "full_gcs": len(pauses),
            "full_gc_pause_max_ms": round(1000 * max((p["pause"] for p in pauses), default=0), 1),
            "full_gc_pause_total_ms": round(1000 * sum(p["pause"] for p in pauses), 1),
            "journal_bytes": journal_bytes(folder),
            "folder": str(folder.relative_to(REPO_ROOT))}


def process_figures(samples: list[Sample], name: str, steady_from: int = STEADY_FROM) -> dict[str, Any]:
    """Process `name`'s RSS growth per 1,000,000 flows after the first `steady_from` (and over the second half of
    that: a bounded store that fills first and then stays shows as growth over the whole and none in the second
    half), its RSS at each quarter of that span, there, and its peak."""
    steady = [(flows, rss[name]) for _, flows, rss in samples if flows >= steady_from and rss.get(name)]
    return {"rss_growth_mib_per_million_flows": slope_mib_per_million(steady),
            "rss_growth_last_half_mib_per_million_flows": slope_mib_per_million(steady[len(steady) // 2:]),
            "rss_by_quarter_mib": [round(steady[min(len(steady) - 1, len(steady) * q // 4)][1] / 2**20, 1)
                                   for q in range(5)] if steady else None,
            "rss_at_steady_from_mib": round(steady[0][1] / 2**20, 1) if steady else None,
            "rss_peak_mib": round(max((rss.get(name, 0) for *_, rss in samples), default=0) / 2**20, 1)}


def fold_cpu_figures(cpu: list[tuple[float, int, float]]) -> dict[str, Any]:
    """The fold process's CPU µs per finished flow, over the samples it had flows in."""
    busy = [(flows, seconds) for _, flows, seconds in cpu if flows > 0]
    per_flow = (busy[-1][1] - busy[0][1]) / (busy[-1][0] - busy[0][0]) if len(busy) > 1 and busy[-1][0] > busy[0][0] \
        else None
    return {"cpu_us_per_flow": round(per_flow * 1e6, 1) if per_flow is not None else None}


def reconciliation_figures(folder: Path, continuation_rounds: int) -> dict[str, Any]:
    """The run's reconciliation as its `summary.json` gives it, and the share of continuation rounds refused."""
    summary = folder / "summary.json"
    reconciled = (orjson.loads(summary.read_bytes()).get("reconciliation") if summary.is_file() else None) or {}
    figures: dict[str, Any] = {key: reconciled[key] for key in RECONCILED if key in reconciled}
    rejections = reconciled.get("client_rejections")
    figures["rejection_rate_seen"] = round(rejections / continuation_rounds, 5) \
        if isinstance(rejections, int) and continuation_rounds else None
    return figures


def report_figures(code: Path, folder: Path, flows: int) -> dict[str, Any]:
    """`mrtr-harness report DIR` of the side's own code on its folder: wall seconds, flows/s, peak RSS of the report
    process, and the peak of its whole tree's RSS summed (its fold processes too; pages they share counted in each),
    sampled every 100 ms."""
    started = time.monotonic()
    child = subprocess.Popen([sys.executable, "-m", "harness", "report", str(folder)], cwd=code,
                             env={**os.environ, "PYTHONPATH": str(code)}, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    tree_peak = 0
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            break
        tree_peak = max(tree_peak, sum(rss_bytes(member) or 0 for member in process_tree(child.pid)))
        time.sleep(0.1)
    wall = time.monotonic() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    return {"exit_code": child.returncode, "seconds": round(wall, 2), "flows_per_second": round(flows / wall),
            "peak_rss_mib": round(usage.ru_maxrss / 1024, 1), "peak_tree_rss_mib": round(tree_peak / 2**20, 1)}


def process_tree(pid: int) -> list[int]:
    """`pid` and every process below it, from the kernel's own lists of children (`/proc/<pid>/task/<tid>/children`):
    cheaper than reading every process's status, which a sampler next to a measured process should be."""
    tree, todo = [], [pid]
    while todo:
        member = todo.pop()
        tree.append(member)
        try:
            for task in os.listdir(f"/proc/{member}/task"):
                with open(f"/proc/{member}/task/{task}/children") as children:
                    todo.extend(int(child) for child in children.read().split())
        except OSError:
            continue
    return tree


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=160.0)
    parser.add_argument("--code", type=Path, default=REPO_ROOT, help="the checkout whose harness runs")
    parser.add_argument("--label", default="after")
    parser.add_argument("--kill-after", type=float, default=None, metavar="SECONDS",
                        help="SIGKILL the run this long after it started, then time `report DIR` on what it left")
    parser.add_argument("--reject", type=float, default=0.0, metavar="FRACTION",
                        help="the stubs refuse this seeded share of continuation rounds (-32602) and log each; "
                             "the run reconciles them (default 0: no logs, no refusals)")
    parser.add_argument("--workers", type=int, default=0, help="run with --workers N (default 0: the load in the run)")
    parser.add_argument("--steady-from", type=int, default=STEADY_FROM, metavar="FLOWS",
                        help=f"finished flows from which the RSS slopes are taken (default {STEADY_FROM:,})")
    args = parser.parse_args(argv)
    if not 0.0 <= args.reject <= 1.0:
        parser.error("--reject takes a share between 0 and 1")
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp, \
            stub_servers(REPLICAS, args.reject, Path(tmp) / "logs") as running:
        logs = log_sources(Path(tmp) / "logs", REPLICAS) if args.reject > 0 else None
        figures = soak_run(args.code.resolve(), args.seconds, [server.url for server in running], Path(tmp),
                           args.kill_after, args.workers, logs, args.steady_from)
    document = {"label": args.label, "started": started, "machine": machine_facts(), "seconds": args.seconds,
                "reject": args.reject, "workers": args.workers, "load_average_after": os.getloadavg(), **figures}
    write_figures(f"soak-{args.label}", document)
    print(json.dumps({k: v for k, v in document.items() if k != "bins_below_half_median"}, indent=2))
    print("bins below half the median:", json.dumps(document["bins_below_half_median"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
