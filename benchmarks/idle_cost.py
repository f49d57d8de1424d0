"""The fixed cost per second of a run: wake-ups and CPU of the load process while nothing happens.

A run pays some things every second whatever the load: the log collector looking at the
replicas' log files, the run's own loops (is the load done, are the replicas up), Locust's
greenlets, the progress line, the journal's flusher. At a low rate this fixed cost is
most of the harness's CPU per round, so it is measured alone here: a real `mrtr-harness
run` on the embedded shop (the smoke scenario's three replicas and their log files, with
the progress line on, as a user sees it in a log), closed model with a few agents whose
leads think for ten minutes. After the first seconds every flow waits on its lead and
nothing else happens. Over the middle of the load (`--skip` seconds after the load
started to `--tail` seconds before it stops) this script samples the run process from
`/proc` every 0.5 s: CPU (all threads) and context switches (all threads; a voluntary
switch is the process going to sleep until something wakes it), per second.

`--code DIR` measures another checkout in the same session (the code before a change,
from `git archive`), alternating with this one, so the two are compared under the same
machine load.

Then the floors, what one wake-up costs on this machine whatever the code: a process that
does nothing but wake 100 times a second, with `time.sleep` (a plain thread) and with
`gevent.sleep` after the harness's own Locust import (a load process), each sampled the
same way for `--floor-seconds`.

    python -m benchmarks.idle_cost [--seconds 40] [--repeat 2] [--code DIR] [--floor-seconds 10] [--floors-only]

Raw figures go to `results/benchmarks/idle_cost-<utc>.json`.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.cpu import machine_facts
from benchmarks.runs import REPO_ROOT, ChildRun, interpolate, load_average, process_sample, write_figures

SAMPLE_EVERY = 0.5
IDLE = """\
name = "idle"
description = "Embedded shop, 3 replicas; four agents whose leads think for ten minutes"
seed = 7
duration = "{seconds}s"
grace = "0s"
time_scale = 60

[target]
kind = "embedded"
replicas = 3
store = "sqlite"
ttl = "10h"

[load]
model = "closed"
users = 4
ramp = "1s"
routing = "round-robin"

[[flows]]
kind = "refund"

[leads]
think = {{ dist = "constant", value = "10h" }}
"""


def one_run(code: Path, work: Path, seconds: float, skip: float, tail: float) -> dict[str, Any]:
    """A run; its load process's CPU and context switches per second over the quiet middle of its load."""
    scenario = work / "idle.toml"
    scenario.write_text(IDLE.format(seconds=seconds))
    child = ChildRun(scenario, work / f"results-{len(list(work.glob('results-*')))}", code=code, quiet=False).start()
    samples = []
    child.watch(lambda run: run.event("load-started") is not None, every=0.2, timeout=180)
    started = child.event("load-started")
    if started is None:
        code_, stderr = child.finish(timeout=60)
        raise SystemExit(f"the run never started its load (exit {code_}): {stderr}")
    opened, closed = started["t"] + skip, started["t"] + seconds - tail

    def look() -> None:
        sample = process_sample(child.pid)
        if sample is not None:
            samples.append(sample)

    child.watch(lambda run: bool(samples) and samples[-1].at > closed + SAMPLE_EVERY, every=SAMPLE_EVERY,
                timeout=seconds + 120, on_tick=look)
    exit_code, stderr = child.finish(timeout=seconds + 120)
    wall = closed - opened
    per_second = {name: (interpolate(samples, closed, name) - interpolate(samples, opened, name)) / wall
                  for name in ("cpu", "switches", "voluntary")}
    rounds_inside = sum(1 for r in child.records if r.get("type") == "round" and opened <= r["t"] < closed)
    waiting = sum(1 for r in child.records if r.get("type") == "start") - sum(
        1 for r in child.records if r.get("type") == "flow" and r["t"] < closed)
    return {"exit_code": exit_code, "stderr_tail": stderr.strip().splitlines()[-2:], "window_s": round(wall, 1),
            "cpu_ms_per_s": round(per_second["cpu"] * 1000, 2),
            "wakeups_per_s": round(per_second["voluntary"], 1),
            "context_switches_per_s": round(per_second["switches"], 1),
            "threads": samples[-1].threads if samples else None,
            "rounds_in_window": rounds_inside, "flows_waiting": waiting,
            "load_average": round(load_average(), 2)}


WAKERS = {
    "time.sleep (a plain thread)": "import time\nwhile True:\n    time.sleep(0.01)\n",
    "gevent.sleep (a load process)": ("import locust\n"
                                      "import gevent, harness.run.run\nwhile True:\n    gevent.sleep(0.01)\n"),
}
"""Processes that only wake 100 times a second: the floor of one wake-up's CPU, by how the process sleeps."""


def wake_floors(seconds: float, wakers: Mapping[str, str] = WAKERS) -> dict[str, dict[str, float]]:
    """CPU µs per wake-up of each of `wakers` (name: a Python program that only wakes), sampled over `seconds`
    after 3 s of settling."""
    floors = {}
    for name, code in wakers.items():
        process = subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT)
        try:
            time.sleep(3.0)
            first = process_sample(process.pid)
            time.sleep(seconds)
            last = process_sample(process.pid)
        finally:
            process.kill()  # the child we started, by its PID
            process.wait(10)
        assert first is not None and last is not None, f"{name}: the process died"
        wakeups = last.voluntary - first.voluntary
        floors[name] = {"wakeups_per_s": round(wakeups / (last.at - first.at), 1),
                        "cpu_us_per_wakeup": round((last.cpu - first.cpu) / wakeups * 1e6, 1)}
        print(f"floor, {name}: {floors[name]['wakeups_per_s']} wake-ups/s, "
              f"{floors[name]['cpu_us_per_wakeup']} µs CPU per wake-up", flush=True)
    return floors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40.0, help="load duration of each run (default 40)")
    parser.add_argument("--skip", type=float, default=10.0, help="seconds after the load's start left out")
    parser.add_argument("--tail", type=float, default=3.0, help="seconds before the load's stop left out")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each code, alternating (default 2)")
    parser.add_argument("--code", type=Path, action="append", default=[],
                        help="another checkout of the harness to measure alongside this one (repeatable)")
    parser.add_argument("--floor-seconds", type=float, default=10.0, help="seconds each floor is sampled")
    parser.add_argument("--floors-only", action="store_true", help="only the wake-up floors, no run")
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.seconds - args.skip - args.tail < 5:
        parser.error("--repeat must be positive and the window (seconds - skip - tail) at least 5 s")
    codes = {"this": REPO_ROOT, **{f"code:{path}": path.resolve() for path in args.code}}
    started = datetime.now(UTC)
    figures: dict[str, Any] = {
        "benchmark": "idle_cost",
        "command": shlex.join(["python", "-m", "benchmarks.idle_cost", *(sys.argv[1:] if argv is None else argv)]),
        "date": started.isoformat(timespec="seconds"), "machine": machine_facts(),
        "settings": vars(args) | {"code": [str(path) for path in args.code]}, "runs": {},
    }
    with tempfile.TemporaryDirectory(prefix="idle-cost-") as tmp:
        for _ in range(0 if args.floors_only else args.repeat):
            for name, code in codes.items():
                work = Path(tmp) / name.replace("/", "_").replace(":", "_")
                work.mkdir(exist_ok=True)
                run = one_run(code, work, args.seconds, args.skip, args.tail)
                figures["runs"].setdefault(name, []).append(run)
                print(f"{name}: {run['wakeups_per_s']} wake-ups/s ({run['context_switches_per_s']} switches/s), "
                      f"{run['cpu_ms_per_s']} ms CPU/s, {run['rounds_in_window']} rounds and "
                      f"{run['flows_waiting']} flows waiting in the window, exit {run['exit_code']}, "
                      f"load average {run['load_average']}", flush=True)
    figures["median"] = {name: {key: statistics.median(run[key] for run in runs)
                                for key in ("wakeups_per_s", "context_switches_per_s", "cpu_ms_per_s")}
                         for name, runs in figures["runs"].items()}
    figures["wake_floors"] = wake_floors(args.floor_seconds)
    figures["duration_s"] = round((datetime.now(UTC) - started).total_seconds(), 1)
    write_figures("idle_cost", figures, started)
    for name, median in figures["median"].items():
        print(f"{name}: median {median}")
    return 0 if all(run["exit_code"] == 0 for runs in figures["runs"].values() for run in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
