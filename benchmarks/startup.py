"""Start-up CPU of `mrtr-harness run`: from exec to the load's start, beside floors measured in the same run.

The goal: the load process spends under 0.6 s of CPU before its load starts. It never
imports server code (the SDK's server side, starlette, uvicorn); what it must import
is Locust, which alone costs a good part of that, so Locust's own import is a floor
measured here alternately with the run, as is a bare interpreter.

Each trial is one of:

* `python -c pass` and `python -c "import locust"`: the floors, whole process CPU from
  `wait4` (user + system, exit included);
* a real `mrtr-harness run` against an external target (one stub server,
  `benchmarks/stub_server.py`), 2 s of load at 1 flow/s: the child's CPU is sampled from
  `/proc` every 10 ms, and its start-up is the CPU interpolated at the moment its journal
  says the load started (`load-started`). Since this change a run also records it itself
  (`harness_startup_seconds` in its `cpu` record, from its own clock at the load's start);
  both are kept;
* with `--embedded`, the same on the embedded shop (`scenarios/smoke.toml`, 2 s): the
  run starts the shop's API and a zygote that forks the replicas; only the harness's own
  process is counted, not the processes it starts.

`--code DIR` measures another checkout of the harness in the same session (for example
the code before a change, from `git archive`), alternating with this one.

    python -m benchmarks.startup [--trials 5] [--embedded] [--code DIR]

Raw figures go to `results/benchmarks/startup-<utc>.json`.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.cpu import machine_facts
from benchmarks.runs import REPO_ROOT, ChildRun, interpolate, load_average, process_sample, write_figures
from tests.servers import start_server

EXTERNAL = """\
name = "startup"
seed = 1
duration = "2s"
grace = "5s"

[target]
kind = "external"
urls = ["{url}"]

[load]
model = "open"
arrival_rate = 1
routing = "round-robin"

[[flows]]
kind = "call"
tool = "confirm"
arguments = {{ item = "X-1" }}

[leads]
think = {{ dist = "constant", value = "0s" }}
"""

SAMPLE_EVERY = 0.01


def floor_cpu(code: str) -> float:
    """Whole-process CPU seconds (user + system) of `python -c CODE`, from wait4."""
    process = subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise SystemExit(f"python -c {code!r} failed with {process.returncode}")
    return usage.ru_utime + usage.ru_stime


def run_startup(scenario: Path, code: Path, work: Path) -> dict[str, Any]:
    """One run: its CPU at the load's start (sampled from outside, and as it recorded itself)."""
    child = ChildRun(scenario, work / f"results-{time.monotonic_ns()}", code=code).start()
    samples = []
    started = None
    deadline = time.monotonic() + 120
    while child.process is not None and child.process.poll() is None and time.monotonic() < deadline:
        look = process_sample(child.pid)
        if look is not None:
            samples.append(look)
        if started is None and len(samples) % 5 == 0:
            child.read()
            started = child.event("load-started")
        if started is not None and samples[-1].at > started["t"] + 0.05:
            break  # a few samples past the start: enough to interpolate at it
        time.sleep(SAMPLE_EVERY)
    exit_code, stderr = child.finish(timeout=120)
    started = child.event("load-started")
    if started is None or len(samples) < 2:
        raise SystemExit(f"the run never started its load (exit {exit_code}): {stderr}")
    cpu = child.event("cpu") or {}
    return {"exit_code": exit_code, "cpu_at_load_start_s": round(interpolate(samples, started["t"], "cpu"), 4),
            "recorded_startup_s": cpu.get("harness_startup_seconds"),
            "exec_to_load_start_wall_s": round(started["t"] - child.started_at, 3),
            "threads_at_load_start": samples[-1].threads}


def summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5, help="trials of each kind, interleaved (default 5)")
    parser.add_argument("--embedded", action="store_true", help="also time runs on the embedded shop (smoke)")
    parser.add_argument("--code", type=Path, action="append", default=[],
                        help="another checkout of the harness to measure alongside this one (repeatable)")
    args = parser.parse_args(argv)
    if args.trials < 1:
        parser.error("--trials must be positive")
    codes = {"this": REPO_ROOT, **{f"code:{path}": path.resolve() for path in args.code}}
    started = datetime.now(UTC)
    figures: dict[str, Any] = {
        "benchmark": "startup",
        "command": shlex.join(["python", "-m", "benchmarks.startup", *(sys.argv[1:] if argv is None else argv)]),
        "date": started.isoformat(timespec="seconds"), "machine": machine_facts(), "settings": vars(args) | {
            "code": [str(path) for path in args.code]},
        "load_average": [round(load_average(), 2)],
    }
    floors: dict[str, list[float]] = {"python -c pass": [], "python -c 'import locust'": []}
    runs: dict[str, list[dict[str, Any]]] = {}
    stub = start_server("benchmarks.stub_server")
    try:
        with tempfile.TemporaryDirectory(prefix="startup-") as tmp:
            work = Path(tmp)
            scenarios = {"external": work / "external.toml"}
            scenarios["external"].write_text(EXTERNAL.format(url=stub.url))
            if args.embedded:
                smoke = (REPO_ROOT / "scenarios" / "smoke.toml").read_text().replace('duration = "30s"',
                                                                                     'duration = "2s"')
                scenarios["embedded"] = work / "embedded.toml"
                scenarios["embedded"].write_text(smoke)
            for trial in range(args.trials):
                floors["python -c pass"].append(floor_cpu("pass"))
                floors["python -c 'import locust'"].append(floor_cpu("import locust"))
                for code_name, code in codes.items():
                    for target, scenario in scenarios.items():
                        run = run_startup(scenario, code, work)
                        runs.setdefault(f"{code_name} {target}", []).append(run)
                        print(f"trial {trial + 1}: {code_name} {target}: {run['cpu_at_load_start_s']:.3f} s CPU at "
                              f"the load's start (recorded {run['recorded_startup_s']}), exit {run['exit_code']}",
                              flush=True)
                figures["load_average"].append(round(load_average(), 2))
    finally:
        stub.stop()
    locust_floor = statistics.median(floors["python -c 'import locust'"])
    figures["floors_cpu_s"] = {name: summary(values) for name, values in floors.items()}
    figures["runs"] = {}
    for name, trials in runs.items():
        cpu = [run["cpu_at_load_start_s"] for run in trials]
        figures["runs"][name] = {"cpu_at_load_start_s": summary(cpu),
                                 "to_import_locust": round(statistics.median(cpu) / locust_floor, 2),
                                 "trials": trials}
        print(f"{name}: median {statistics.median(cpu):.3f} s ({min(cpu):.3f}-{max(cpu):.3f}), "
              f"{statistics.median(cpu) / locust_floor:.2f}x `import locust`")
    for name, values in floors.items():
        print(f"{name}: median {statistics.median(values):.3f} s ({min(values):.3f}-{max(values):.3f})")
    figures["duration_s"] = round((datetime.now(UTC) - started).total_seconds(), 1)
    print(f"load average {figures['load_average']}")
    write_figures("startup", figures, started)
    return 0 if all(run["exit_code"] == 0 for trials in runs.values() for run in trials) else 1


if __name__ == "__main__":
    raise SystemExit(main())
