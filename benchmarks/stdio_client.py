"""What a stdio target costs: a shop replica's cold start over stdio against over HTTP, and a call over each.

A stdio target (`harness.targets.stdio`) starts each server as the harness's child and drives its
rounds through the SDK's own client over its pipes (`harness.mrtr.stdio`); the embedded target
starts HTTP replicas and drives them with the harness's `MrtrClient`. This measures, against one
shop API:

- the cold start: a stdio replica from spawn to its first answer (`tools/list`), against an HTTP
  replica started as a new interpreter (no zygote) from spawn to its first `/healthz` 200,
  `--starts` of each, alternating;
- one `issue_refund` call on an order above the refund limit (the shop asks once, the answer
  releases the refund), over each: the load process's CPU per call (`time.process_time()`, gevent
  patched first, as a load process is), the replica's CPU per call (`/proc/<pid>/stat`) and the wall
  time per call, `--concurrency` greenlets at a time. Quotes are made outside the windows; windows
  alternate (HTTP, stdio, HTTP, ...), `--repeat` of each, since the machine is shared.

Run from the repository root:

    python -m benchmarks.stdio_client [--calls 100] [--repeat 3] [--starts 5] [--concurrency 4]

It prints the figures and writes them to `results/benchmarks/stdio_client-<utc>.json`.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()  # a load process: patch first, once

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.cpu import machine_facts
from benchmarks.legacy_client import measure, quotes, release
from benchmarks.runs import write_figures
from harness.mrtr.client import MrtrClient, drive
from harness.mrtr.outcome import Outcome
from harness.mrtr.routing import Router
from harness.mrtr.stdio import StdioClient, StdioServers
from harness.processes.children import harness_command
from harness.targets.local_deployment import LocalDeployment, ReplicaOptions, replica_args


def stdio_command(deployment: LocalDeployment) -> Callable[[str], list[str]]:
    """The shop's replica over stdio, as the stdio target starts it, against `deployment`'s API and ring."""
    assert deployment.api is not None
    api = deployment.api.base_url

    def command(label: str) -> list[str]:
        args = replica_args(label, None, api, ReplicaOptions(), store=deployment.store, keyring=deployment.keyring,
                            ttl=deployment.ttl, name=deployment.name)
        return harness_command("shop", "replica", "--transport", "stdio", *args)

    return command


def cold_starts(deployment: LocalDeployment, folder: Path, count: int) -> dict[str, list[float]]:
    """`count` cold starts each way, alternating: stdio (spawn to first answer), HTTP (spawn to /healthz)."""
    found: dict[str, list[float]] = {"stdio": [], "http": []}
    for index in range(count):
        servers = StdioServers(stdio_command(deployment), folder / "cold", labels=[f"c{index}"], per_client=False)
        servers.start()
        found["stdio"].append(round(servers.cold_starts[0].seconds, 4))
        servers.stop()
        found["http"].append(round(deployment.restart_replica(0), 4))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    started = datetime.now(UTC)
    from harness.shop.orders import build_orders

    held = build_orders().order_ids(needs_confirmation=True)
    runs: dict[str, list[dict[str, Any]]] = {"http": [], "stdio": []}
    with tempfile.TemporaryDirectory(prefix="stdio-client-") as tmp:
        deployment = LocalDeployment(Path(tmp), replicas=1, fork_replicas=False)
        servers: StdioServers | None = None
        try:
            deployment.start([ReplicaOptions()])
            starts = cold_starts(deployment, Path(tmp), args.starts)
            print("cold starts:", starts, flush=True)
            url = deployment.replica_urls[0]
            http = MrtrClient(Router([url], "round-robin"), capabilities={"elicitation": {"form": {}, "url": {}}})
            servers = StdioServers(stdio_command(deployment), Path(tmp) / "logs", labels=["r1"], per_client=False)
            servers.start()
            over_pipes = StdioClient(servers, Router([servers.replicas[0].url], "round-robin"))
            http_replica, stdio_replica = deployment.replicas[0].pid, servers.replicas[0].pid
            assert http_replica is not None and stdio_replica is not None

            def http_call(quote_id: str) -> Outcome:
                return http.call_tool("issue_refund", {"quote_id": quote_id}, release).outcome

            def stdio_call(quote_id: str) -> Outcome:
                return drive(over_pipes.call_steps("issue_refund", {"quote_id": quote_id}, release),
                             time.sleep).outcome

            calls = {"http": (http_call, http_replica), "stdio": (stdio_call, stdio_replica)}
            for call, pid in calls.values():  # warm both paths up
                measure(call, quotes(http, held, 10), args.concurrency, {"replica": pid})
            for _ in range(args.repeat):
                for way, (call, pid) in calls.items():
                    figures = measure(call, quotes(http, held, args.calls), args.concurrency, {"replica": pid})
                    runs[way].append(figures)
                    print(way, figures, flush=True)
        finally:
            if servers is not None:
                servers.stop()
            deployment.stop()
    summary = {way: {key: statistics.median(run[key] for run in windows)
                     for key in ("client_us_per_call", "replica_us_per_call", "wall_ms_per_call")}
               for way, windows in runs.items()}
    ratios = {key: round(summary["stdio"][key] / summary["http"][key], 2) for key in summary["stdio"]}
    cold = {way: statistics.median(values) for way, values in starts.items()}
    print("median cold start, s:", cold, "\nmedian per call:", summary, "\nstdio / http:", ratios)
    write_figures("stdio_client", {"machine": machine_facts(), "args": vars(args), "started": started.isoformat(),
                                   "cold_starts": starts, "median_cold_start": cold, "windows": runs,
                                   "median": summary, "ratio_stdio_to_http": ratios}, started)


if __name__ == "__main__":
    main()
