"""How often a real run's load process wakes up per MRTR round, and what one wake-up costs on this machine.

At 16 flows/s a load process sleeps between events, and on a small VM being woken costs
more CPU than a round's work. This measures both sides of that:

* **Per round, in a real run:** `mrtr-harness run` of the smoke scenario (embedded shop,
  three replicas) at `--rate` flows/s; over the load's middle (`--skip` seconds after its
  start, for `--window` seconds) the run process's CPU and context switches (voluntary:
  it slept; involuntary: it was preempted, usually by the replica its send woke), from
  `/proc/<pid>/task/*`, and the replicas' CPU, each divided by the journal's rounds in
  the window. `--code DIR` alternates runs of another checkout.
* **The floor:** what one wake-up costs a process that does nothing else but wake 100
  times a second: `benchmarks.idle_cost`'s `time.sleep` and `gevent.sleep` (after the
  harness's Locust import), and between them a bare `epoll` wait and a libev timer with
  an empty Python callback.

Run from the repository root:

    python -m benchmarks.wakeups [--rate 16] [--repeat 2] [--code DIR] [--no-floor]

It prints the figures and writes them as JSON to `results/benchmarks/wakeups-<utc>.json`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import idle_cost
from benchmarks.client_cpu import fast_smoke
from benchmarks.cpu import machine_facts
from benchmarks.runs import (
    REPO_ROOT,
    ChildRun,
    embedded_target_pids,
    load_average,
    process_sample,
    write_figures,
)

FLOOR_SECONDS = 10.0
WAKERS = {
    **idle_cost.WAKERS,
    "a bare epoll wait": "import select\npoller = select.epoll()\nwhile True:\n    poller.poll(0.01)\n",
    "a libev timer, empty Python callback (gevent's loop)": (
        "from gevent import monkey\nmonkey.patch_all()\nimport gevent\n"
        "timer = gevent.get_hub().loop.timer(0.01, 0.01)\ntimer.start(lambda: None)\n"
        "while True:\n    gevent.sleep(3600)\n"),
}
"""`benchmarks.idle_cost`'s floors, and two between them: how much of a wake-up is the kernel's, how much gevent's."""


def one_run(code: Path, rate: int, skip: float, window: float, verdicts: tuple[int, ...] = (0,)) -> dict[str, Any]:
    """A smoke run at `rate`; the run process's CPU and switches per round over the load's middle.

    An exit code outside `verdicts` stops the benchmark: a harness error (4) never gives a
    figure. Above 16 flows/s the smoke scenario's strict thresholds may fail the target on a
    state that expired as modelled (a lead's think in its lognormal tail), which is exit 1,
    a verdict on the target and no reason to drop a CPU figure.
    """
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "smoke.toml"
        fast_smoke(scenario, rate, int(skip + window + 5))
        child = ChildRun(scenario, Path(tmp) / "results", code=code).start()
        child.watch(lambda run: run.event("load-started") is not None, 0.2, 90)
        time.sleep(skip)
        replicas = [pid for name, pid in embedded_target_pids(child.pid).items() if name.startswith("replica")]
        before = _look(child, replicas)
        time.sleep(window)
        after = _look(child, replicas)
        exit_code, stderr = child.finish(timeout=window + 180)
    if exit_code not in verdicts:
        raise SystemExit(f"the run exited {exit_code}: {stderr}")
    rounds = after["rounds"] - before["rounds"]
    spent = {name: after[name] - before[name] for name in ("cpu", "voluntary", "involuntary", "replicas")}
    return {
        "rounds": rounds,
        "harness_us_per_round": round(spent["cpu"] / rounds * 1e6),
        "replicas_us_per_round": round(spent["replicas"] / rounds * 1e6),
        "harness_to_replica": round(spent["cpu"] / spent["replicas"], 3),
        "sleeps_per_round": round(spent["voluntary"] / rounds, 2),
        "preemptions_per_round": round(spent["involuntary"] / rounds, 2),
        "load_average": load_average(),
        "exit_code": exit_code,
    }


def _look(child: ChildRun, replicas: list[int]) -> dict[str, float]:
    child.read()
    harness = process_sample(child.pid)
    assert harness is not None, "the run ended before the window did"
    replica_cpu = sum(sample.cpu for pid in replicas if (sample := process_sample(pid)) is not None)
    return {"rounds": sum(1 for record in child.records if record.get("type") == "round"), "cpu": harness.cpu,
            "voluntary": harness.voluntary, "involuntary": harness.switches - harness.voluntary,
            "replicas": replica_cpu}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rate", type=int, default=16, help="flows/s of each run (default 16)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each code (default 2)")
    parser.add_argument("--skip", type=float, default=10.0, help="seconds after the load's start left out (default 10)")
    parser.add_argument("--window", type=float, default=20.0, help="seconds measured (default 20)")
    parser.add_argument("--code", type=Path, default=None, help="another checkout whose runs alternate with these")
    parser.add_argument("--no-floor", action="store_true", help="skip the cost of a bare wake-up")
    args = parser.parse_args(argv)
    started = datetime.now(UTC)
    figures: dict[str, Any] = {"date": started.isoformat(timespec="seconds"), "machine": machine_facts(),
                               "command": "python -m benchmarks.wakeups " + " ".join(argv or sys.argv[1:]),
                               "runs": {"this": []}}
    codes = {"this": REPO_ROOT}
    if args.code is not None:
        codes["code:" + str(args.code)] = args.code.resolve()
        figures["runs"]["code:" + str(args.code)] = []
    for _ in range(args.repeat):
        for name, code in codes.items():
            run = one_run(code, args.rate, args.skip, args.window)
            figures["runs"][name].append(run)
            print(f"  {name}: {run}", flush=True)
    if not args.no_floor:
        figures["wake_floors"] = idle_cost.wake_floors(FLOOR_SECONDS, WAKERS)
    write_figures("wakeups", figures, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
