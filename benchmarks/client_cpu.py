"""Client CPU per MRTR round against one replica's server CPU per round, side by side in one run.

The project's target: the harness is never the bottleneck, its client CPU per round at most a
tenth of one replica's server CPU per round (so one harness core drives ten replica
cores). Both sides are measured over the same window on the same rounds: this load
process's own `time.process_time()` (the client: `MrtrClient` + `Transport`, gevent
patched first as in a Locust worker, several greenlets running flows at once) and the
replica's utime+stime from `/proc/<pid>/stat`.

Servers (`--server`):

* `shop` (default): the reference deployment, one replica and its API (`LocalDeployment`,
  sqlite store in a temp dir). A flow is `quote_refund` on an order above the refund
  limit, then `issue_refund`, which asks to release the held refund and completes when
  the answer comes: three rounds. The API's CPU is reported too (each tool call makes
  the replica call it), but the target compares against the replica alone.
* `garden`: the tiny test server (`tests/servers/garden.py`), its three-round `plan_bed`.
  Far cheaper per round than a real server, so its ratio is a worst case for the client.

Each window is repeated (`--repeat`), because the machine is shared and noisy; every
window also records what the rest of the machine used. A bare keep-alive request on a
gevent socket (no pool, no parser, no JSON) is measured after the windows, as the floor
any gevent-based client pays per round on this machine.

`--whole-run N` then runs the whole harness N times, `mrtr-harness run` on the smoke
scenario at 16 flows/s for 20 s (three replicas, leads thinking, journal, metrics,
Locust): its `summary.json` carries `extra.cpu`, the harness process's CPU per round
against the replicas' over the same load window. That figure counts everything a load
process does, not only the client; it says how many replica cores one harness core
drives in a real run.

Run from the repository root:

    python -m benchmarks.client_cpu [--server shop|garden] [--flows 200] [--repeat 3] [--concurrency 8]
                                    [--sse] [--whole-run 2]

It prints the figures and writes them as JSON to `results/benchmarks/client_cpu-<utc>.json`.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()  # a load process, like a Locust worker: patch first, once

import argparse
import json
import secrets
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import gevent.pool

from benchmarks.cpu import machine_facts, window
from harness.mrtr import MrtrClient, Outcome, RoundRecord, Router, Transport
from harness.mrtr.wire import CallFrame

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "results" / "benchmarks"
CAPABILITIES = {"elicitation": {"form": {}}}
GARDEN_ANSWERS: dict[str, dict[str, Any]] = {
    "soil": {"action": "accept", "content": {"soil": "loam"}},
    "sowing": {"action": "accept", "content": {"date": "2026-04-01", "rows": 4}},
}
FLOW_TIMEOUT = 30.0
"""Seconds one round may take (the transport's read timeout): with the flow count, it bounds every window."""

Flow = Callable[[MrtrClient, int], tuple[int, str]]
"""Runs flow number `index` with a client; returns (rounds sent, outcome: `complete` or what went wrong)."""


@dataclass
class Server:
    """A started server under test: where to send rounds, whose CPU to read, and its flow."""

    url: str
    pids: dict[str, int]
    """`replica` (the target compares against it) and any helper process (the shop's `api`)."""
    flow: Flow
    floor_round: tuple[str, dict[str, Any]]
    """A round-1 request (tool, arguments) for the socket floor: answered at once, no side effect that matters."""


# --- the servers -----------------------------------------------------------------------------------


def shop_flow(held_orders: list[str]) -> Flow:
    """Quote an order above the limit, then issue: the replica asks, the lead says release."""

    def release(record: RoundRecord) -> dict[str, Any]:
        return {key: {"action": "accept", "content": {"release": True}} for key in record.input_requests or {}}

    def nobody(record: RoundRecord) -> None:
        return None  # quote_refund never asks; abandon if it ever does

    def one(client: MrtrClient, index: int) -> tuple[int, str]:
        quote = client.call_tool("quote_refund", {"order_id": held_orders[index % len(held_orders)]}, nobody)
        if quote.outcome is not Outcome.COMPLETE:
            return quote.round_count, f"quote {quote.outcome.value}"
        quote_id = (quote.result or {}).get("structuredContent", {}).get("quote_id")
        issue = client.call_tool("issue_refund", {"quote_id": quote_id}, release)
        rounds = quote.round_count + issue.round_count
        if issue.outcome is not Outcome.COMPLETE:
            return rounds, f"issue {issue.outcome.value}"
        status = ((issue.result or {}).get("structuredContent") or {}).get("status")
        if status != "requested" or issue.round_count != 2:
            return rounds, f"issue {status} in {issue.round_count} rounds"
        return rounds, Outcome.COMPLETE.value

    return one


def garden_flow(client: MrtrClient, index: int) -> tuple[int, str]:
    """plan_bed: two questions, then the result."""

    def answer(record: RoundRecord) -> dict[str, Any]:
        return {key: GARDEN_ANSWERS[key] for key in record.input_requests or {}}

    result = client.call_tool("plan_bed", {"bed_id": f"BENCH-{index}"}, answer)
    return result.round_count, result.outcome.value


@contextmanager
def shop_server(sse: bool) -> Iterator[Server]:
    from harness.shop.catalogue import build_catalogue
    from harness.target.local_deployment import LocalDeployment, ReplicaOptions

    held = build_catalogue().order_ids(needs_confirmation=True)
    with tempfile.TemporaryDirectory(prefix="client-cpu-") as tmp:
        deployment = LocalDeployment(Path(tmp), replicas=1)
        try:  # the deployment stops its processes by PID, before the temp dir goes
            deployment.start([ReplicaOptions(sse=sse)])
            replica, api = deployment.replicas[0], deployment.api
            assert replica.pid is not None and api is not None and api.pid is not None
            yield Server(deployment.replica_urls[0], {"replica": replica.pid, "api": api.pid}, shop_flow(held),
                         ("quote_refund", {"order_id": held[0]}))
        finally:
            deployment.stop()


@contextmanager
def garden_server(sse: bool) -> Iterator[Server]:
    from tests.servers import start_server

    server = start_server("tests.servers.garden", *(["--sse"] if sse else []),
                          env={"GARDEN_REQUEST_STATE_KEY": secrets.token_hex(16)})
    try:
        yield Server(server.url, {"replica": server.pid}, garden_flow, ("plan_bed", {"bed_id": "FLOOR"}))
    finally:
        server.stop()


SERVERS = {"shop": shop_server, "garden": garden_server}


# --- measuring ---------------------------------------------------------------------------------------


def run_flows(server: Server, client: MrtrClient, first: int, count: int,
              concurrency: int) -> tuple[int, dict[str, int]]:
    """Run `count` flows on `concurrency` greenlets; return the rounds sent and the outcomes."""
    outcomes: dict[str, int] = {}
    rounds = 0

    def one(index: int) -> None:
        nonlocal rounds
        sent, outcome = server.flow(client, index)
        rounds += sent
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    gevent.pool.Pool(concurrency).map(one, range(first, first + count))
    return rounds, outcomes


def measure_window(server: Server, client: MrtrClient, first: int, flows: int, concurrency: int) -> dict[str, Any]:
    """One window: the flows, and every process's CPU over exactly that time."""
    with window(server.pids) as spent:
        rounds, outcomes = run_flows(server, client, first, flows, concurrency)
    per_round = {"client": spent.own / rounds * 1e6} | {
        name: cpu / rounds * 1e6 for name, cpu in spent.processes.items()}
    return {
        "flows": flows,
        "rounds": rounds,
        "outcomes": outcomes,
        "wall_s": round(spent.wall, 3),
        "rounds_per_s": round(rounds / spent.wall, 1),
        "cpu_us_per_round": {name: round(value, 1) for name, value in per_round.items()},
        "client_to_replica": round(per_round["client"] / per_round["replica"], 3),
        "cores": spent.cores(),
        "load_average": spent.load_average,
    }


def socket_floor(client: MrtrClient, url: str, tool: str, arguments: dict[str, Any], requests: int) -> float:
    """CPU µs of a bare keep-alive request/response on a gevent socket (no pool, no parser, no JSON).

    The same round-1 request a flow sends, written and read by hand: what any
    gevent-based client must pay per round on this machine, whatever its design.
    """
    host, _, rest = url.removeprefix("http://").partition("/")
    address, _, port = host.rpartition(":")
    frame = CallFrame(client.envelope, tool, arguments)
    body = frame.body(1)
    head = f"POST /{rest} HTTP/1.1\r\nHost: {host}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in frame.headers.items())
    request = f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body
    with socket.create_connection((address, int(port))) as sock:

        def one() -> None:
            sock.sendall(request)
            data = b""
            while b"\r\n\r\n" not in data:
                data += sock.recv(65536)
            fields, _, rest = data.partition(b"\r\n\r\n")
            length = next(int(line[15:]) for line in fields.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            while len(rest) < length:
                rest += sock.recv(65536)

        for _ in range(20):
            one()
        before = time.process_time()
        for _ in range(requests):
            one()
        return (time.process_time() - before) / requests * 1e6


def client_alone(args: argparse.Namespace) -> dict[str, Any]:
    """Start the server, warm up, measure `--repeat` windows and the socket floor; stop the server."""
    with SERVERS[args.server](args.sse) as server:
        transport = Transport(read_timeout=FLOW_TIMEOUT)
        client = MrtrClient(Router(server.url), capabilities=CAPABILITIES, transport=transport)
        _, warm = run_flows(server, client, 0, args.warmup, args.concurrency)
        if set(warm) != {Outcome.COMPLETE.value}:
            raise SystemExit(f"warm-up failed: {warm}")
        windows = []
        for repeat in range(args.repeat):
            windows.append(measure_window(server, client, args.warmup + repeat * args.flows, args.flows,
                                          args.concurrency))
            print(_window_line(windows[-1]), flush=True)
        floor = socket_floor(client, server.url, *server.floor_round, requests=min(args.flows * 3, 600))
        transport.close()
    ratios = [w["client_to_replica"] for w in windows]
    return {
        "server": args.server,
        "server_mode": "sse" if args.sse else "json",
        "concurrency": args.concurrency,
        "windows": windows,
        "ratio": {"min": min(ratios), "median": statistics.median(ratios), "max": max(ratios)},
        "gevent_socket_floor_cpu_us_per_request": round(floor, 1),
        "floor_to_replica": [round(floor / w["cpu_us_per_round"]["replica"], 3) for w in windows],
        "all_complete": all(set(w["outcomes"]) == {Outcome.COMPLETE.value} for w in windows),
    }


def _window_line(w: dict[str, Any]) -> str:
    cpu = w["cpu_us_per_round"]
    others = "".join(f", {name} {value:,.0f}" for name, value in cpu.items() if name not in ("client", "replica"))
    return (f"  {w['rounds']} rounds in {w['wall_s']:.1f} s: client {cpu['client']:,.0f} µs/round, replica "
            f"{cpu['replica']:,.0f}{others}; ratio {w['client_to_replica']:.3f}; cores {w['cores']}; "
            f"load {w['load_average'][0]}-{w['load_average'][1]}; outcomes {w['outcomes']}")


# --- the whole harness, for comparison ---------------------------------------------------------------


def fast_smoke(path: Path) -> None:
    """The smoke scenario at 16 flows/s for 20 s (README's whole-run command, as a file)."""
    text = (REPO_ROOT / "scenarios" / "smoke.toml").read_text()
    fast = text.replace("arrival_rate = 4 ", "arrival_rate = 16 ").replace('duration = "30s"', 'duration = "20s"')
    if fast.count("arrival_rate = 16 ") != 1 or fast.count('duration = "20s"') != 1:
        raise SystemExit("scenarios/smoke.toml changed: the whole-run scenario can no longer be derived from it")
    path.write_text(fast)


def whole_runs(count: int) -> list[dict[str, Any]]:
    """`mrtr-harness run` on the fast smoke scenario, `count` times in a row; each run's `extra.cpu`."""
    runs = []
    folder = RESULTS / "runs"
    with tempfile.TemporaryDirectory(prefix="client-cpu-run-") as tmp:
        scenario = Path(tmp) / "fast.toml"
        fast_smoke(scenario)
        for _ in range(count):
            before = set(folder.glob("*")) if folder.exists() else set()
            command = [sys.executable, "-m", "harness", "run", str(scenario), "--quiet", "--results", str(folder)]
            started = time.monotonic()
            done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
            code = done.returncode
            if code != 0:
                print(done.stderr[-2000:], file=sys.stderr)
            (made,) = set(folder.glob("*")) - before
            summary = json.loads((made / "summary.json").read_text())
            cpu = summary["extra"]["cpu"]
            runs.append({"exit_code": code, "results": str(made.relative_to(REPO_ROOT)),
                         "seconds": round(time.monotonic() - started, 1), "cpu": cpu})
            print(f"  whole run {made.name}: exit {code}, {cpu['rounds']} rounds, harness "
                  f"{cpu['harness_per_round_ms']} ms/round, replicas {cpu['replica_per_round_ms']} ms/round, "
                  f"ratio {cpu.get('harness_to_replica')}", flush=True)
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=sorted(SERVERS), default="shop", help="server under test (default shop)")
    parser.add_argument("--flows", type=int, default=200, help="flows per measured window (3 rounds each)")
    parser.add_argument("--repeat", type=int, default=3, help="measured windows, back to back (default 3)")
    parser.add_argument("--warmup", type=int, default=40, help="flows before measuring (default 40)")
    parser.add_argument("--concurrency", type=int, default=8, help="greenlets running flows at once (default 8)")
    parser.add_argument("--sse", action="store_true", help="run the replica in SSE mode")
    parser.add_argument("--whole-run", type=int, default=0, metavar="N",
                        help="then run the whole harness N times on the smoke scenario at 16 flows/s (default 0)")
    args = parser.parse_args(argv)
    if min(args.flows, args.repeat, args.warmup, args.concurrency) < 1 or args.whole_run < 0:
        parser.error("counts must be positive")
    started = datetime.now(UTC)
    figures: dict[str, Any] = {
        "benchmark": "client_cpu",
        "command": shlex.join(["python", "-m", "benchmarks.client_cpu", *(sys.argv[1:] if argv is None else argv)]),
        "date": started.isoformat(timespec="seconds"),
        "machine": machine_facts(),
        "settings": vars(args),
    }
    print(f"client alone against one {args.server} replica ({args.flows} flows x {args.repeat}, "
          f"{args.concurrency} greenlets):", flush=True)
    figures["client_alone"] = client_alone(args)
    alone = figures["client_alone"]
    print(f"client alone: ratio {alone['ratio']['min']:.3f}-{alone['ratio']['max']:.3f} "
          f"(median {alone['ratio']['median']:.3f}; goal <= 0.1); bare gevent socket floor "
          f"{alone['gevent_socket_floor_cpu_us_per_request']:,.0f} µs/request "
          f"({min(alone['floor_to_replica']):.3f}-{max(alone['floor_to_replica']):.3f} of the replica's round)")
    if args.whole_run:
        print(f"whole harness, {args.whole_run} run(s) of the smoke scenario at 16 flows/s:", flush=True)
        figures["whole_run"] = whole_runs(args.whole_run)
    figures["duration_s"] = round((datetime.now(UTC) - started).total_seconds(), 1)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"client_cpu-{started:%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"written to {out.relative_to(REPO_ROOT)}")
    failed = not alone["all_complete"] or any(run["exit_code"] != 0 for run in figures.get("whole_run", []))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
