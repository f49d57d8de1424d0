"""Where a waiting flow's memory goes: tracemalloc inside a real `mrtr-harness run`, at the stop.

Runs the same scenario as `benchmarks/waiting_flows.py` (two stub servers, leads thinking
20 minutes, grace 0) with the run in this process and tracemalloc on, and takes a
snapshot when the load stops, just before the run journals the flows still waiting as
interrupted: every flow started is waiting then. Prints the allocation sites by bytes per
waiting flow, and the live objects by type per waiting flow (`gc.get_objects`, which also
counts the modules' own objects: divide those by nothing).

    python -m benchmarks.waiting_memory_profile --rate 300 --seconds 10

tracemalloc slows the process several times over and counts Python's allocations only
(not malloc's overhead or fragmentation): read its bytes as a breakdown, and the RSS
figures of `waiting_flows` as the cost.
"""

from __future__ import annotations

import argparse
import collections
import gc
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

from benchmarks.waiting_flows import SCENARIO, free_port, wait_listening


def profile_at_stop(top: int) -> list[str]:
    """Hook the load plan's stop so it reports first; returns the lines the report is written to."""
    import harness.load.plan as plan

    report: list[str] = []
    stop = plan.LoadPlan.kill_in_flight

    def kill_in_flight(self: Any) -> int:
        waiting = len(self.in_flight)
        gc.collect()
        snapshot = tracemalloc.take_snapshot()
        types = collections.Counter(type(thing).__name__ for thing in gc.get_objects())
        report.append(f"{waiting} flows waiting; traced {tracemalloc.get_traced_memory()[0] / 2**20:.1f} MiB")
        report.append("bytes/flow  blocks/flow  allocated at")
        for stat in snapshot.statistics("lineno")[:top]:
            report.append(f"{stat.size / waiting:10.0f}  {stat.count / waiting:11.2f}  {stat.traceback}")
        report.append("objects/flow  type")
        report.extend(f"{count / waiting:12.2f}  {name}" for name, count in types.most_common(top))
        return stop(self)

    plan.LoadPlan.kill_in_flight = kill_in_flight  # type: ignore[method-assign]
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=300.0, help="flows per second (default 300)")
    parser.add_argument("--seconds", type=float, default=10.0, help="load duration (default 10)")
    parser.add_argument("--top", type=int, default=25, help="allocation sites and types to show")
    args = parser.parse_args()
    import locust  # noqa: F401 - gevent's patching comes first, as in `mrtr-harness run`

    from harness.cli.main import main as harness_main

    ports = [free_port(), free_port()]
    servers = [subprocess.Popen([sys.executable, "-m", "benchmarks.stub_server", "--port", str(port)],
                                stdin=subprocess.DEVNULL) for port in ports]
    try:
        for port in ports:
            wait_listening(port)
        with tempfile.TemporaryDirectory(prefix="mrtr-waiting-profile-") as tmp:
            scenario = Path(tmp) / "waiting.toml"
            urls = ", ".join(f'"http://127.0.0.1:{port}/mcp"' for port in ports)
            scenario.write_text(SCENARIO.format(seconds=args.seconds, rate=args.rate, urls=urls))
            report = profile_at_stop(args.top)
            tracemalloc.start()
            code = harness_main(["run", str(scenario), "--results", str(Path(tmp) / "results"), "--quiet"])
    finally:
        for server in servers:
            server.kill()
            server.wait(10)
    print("\n".join(report))
    print(f"run exit code {code}")


if __name__ == "__main__":
    main()
