"""What a round costs a client at a real run's pace, beside what it costs the run's whole load process.

The target for a load process is at most a tenth of a replica's CPU per round at 16 flows/s.
At that pace the process sleeps between answers, and a wake-up on a small VM costs more than
a round's work (`benchmarks.wakeups`). This puts three figures side by side, alternating, in
one session:

* **the run:** a real `mrtr-harness run` of the smoke scenario at each of `--flows` flows/s
  (`benchmarks.wakeups.one_run`): the run process's CPU per round, and the replicas'. Its
  verdict does not matter here, only that it is one (exit 0 or 1, never a harness error);
* **the harness's client alone, paced:** `benchmarks.paced_client --mode client` sending
  one-round `quote_refund` calls as Poisson arrivals at the run's rounds per second (measured
  in that run) to one replica: `MrtrClient` and `Transport`, nothing else;
* **a bare client, paced:** the same calls as bytes on a gevent socket (`--mode bare`): what
  any gevent client pays per round at this pace, whatever its design.

The floors use one replica, which keeps up with about 200 calls/s here: a floor whose
client fell below 90% of the rate asked is marked `kept_pace: false` and left out of the
medians (it measured a saturated replica's queue). Each floor is divided by the run's
replicas' CPU per round (not by the one replica's CPU per `quote_refund`, which is cheaper
than an average round), so it reads on the same scale as the run's ratio: how much of the
target the floor alone takes.

Run from the repository root:

    python -m benchmarks.paced_floor [--flows 16,64,96] [--repeat 2] [--window 20]

It prints the figures and writes them as JSON to `results/benchmarks/paced_floor-<utc>.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

from benchmarks.client_cpu import shop_server
from benchmarks.cpu import machine_facts
from benchmarks.runs import REPO_ROOT, load_average, process_sample, write_figures
from benchmarks.wakeups import one_run

MODES = ("client", "bare")


def paced(url: str, order: str, replica: int, mode: str, rate: float, window: float) -> dict[str, Any]:
    """One paced client child: its own figures, and the replica's CPU over exactly its window."""
    command = [sys.executable, "-m", "benchmarks.paced_client", "--url", url, "--order", order, "--mode", mode,
               "--rate", str(rate), "--window", str(window)]
    child = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        samples = []
        for line in child.stdout:
            if line.startswith("window-"):
                samples.append(process_sample(replica))
            elif line.startswith("{"):
                figures: dict[str, Any] = json.loads(line)
        code = child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()  # the child we started, by its PID
            child.wait(10)
    if code != 0 or len(samples) != 2 or None in samples:
        raise SystemExit(f"the paced {mode} client failed (exit {code})")
    first, last = samples
    assert first is not None and last is not None
    figures["replica_us_per_call"] = round((last.cpu - first.cpu) / figures["calls"] * 1e6, 1)
    figures["kept_pace"] = figures["calls_per_s"] >= 0.9 * rate
    """Below 90% of the rate asked, the one replica was saturated: the figure is a replica's queue, not a floor."""
    figures["load_average"] = load_average()
    return figures


def at_flows(flows: int, args: argparse.Namespace) -> dict[str, Any]:
    """`--repeat` times: a real run at `flows` flows/s, then each paced client at its rounds per second."""
    figures: dict[str, Any] = {"runs": [], **{mode: [] for mode in MODES}}
    for _ in range(args.repeat):
        run = one_run(REPO_ROOT, flows, args.skip, args.window, verdicts=(0, 1))
        figures["runs"].append(run)
        print(f"  {flows} flows/s, run: {run}", flush=True)
        rate = round(run["rounds"] / args.window, 1)
        with shop_server(sse=False) as server:
            order = server.floor_round[1]["order_id"]
            for mode in MODES:
                floor = paced(server.url, order, server.pids["replica"], mode, rate, args.window)
                floor["to_the_runs_replica_per_round"] = round(floor["cpu_us_per_call"]
                                                               / run["replicas_us_per_round"], 3)
                figures[mode].append(floor)
                print(f"  {flows} flows/s, paced {mode} at {rate} calls/s: {floor}", flush=True)
    figures["median"] = {
        "run_harness_to_replica": statistics.median(run["harness_to_replica"] for run in figures["runs"]),
        **{f"{mode}_to_the_runs_replica": statistics.median(f["to_the_runs_replica_per_round"] for f in kept)
           for mode in MODES if (kept := [f for f in figures[mode] if f["kept_pace"]])}}
    print(f"  {flows} flows/s, median: {figures['median']}", flush=True)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--flows", default="16", help="flows/s of the real runs, comma-separated (default 16)")
    parser.add_argument("--repeat", type=int, default=2, help="rounds of run, client, bare (default 2)")
    parser.add_argument("--skip", type=float, default=10.0, help="seconds of each run's load left out (default 10)")
    parser.add_argument("--window", type=float, default=20.0, help="seconds measured each time (default 20)")
    args = parser.parse_args(argv)
    started = datetime.now(UTC)
    figures: dict[str, Any] = {"date": started.isoformat(timespec="seconds"), "machine": machine_facts(),
                               "command": "python -m benchmarks.paced_floor " + " ".join(argv or sys.argv[1:]),
                               "by_flows_per_s": {}}
    for flows in (int(rate) for rate in args.flows.split(",")):
        figures["by_flows_per_s"][flows] = at_flows(flows, args)
    write_figures("paced_floor", figures, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
