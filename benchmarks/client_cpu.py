"""Client CPU per MRTR round against one replica's server CPU per round, side by side in one run.

The harness must never be the bottleneck: one harness core should drive ten replica
cores, so the client's CPU per round must stay at most a tenth of the server's. Both
are measured in the same run on the same rounds: the load process's own
`time.process_time()`, and the replica's utime+stime from `/proc/<pid>/stat`.

The flow is the garden's `plan_bed` (three rounds: two questions, then the result),
answered at once by several greenlets, as a Locust worker would (gevent patched first).

Run from the repository root:

    python -m benchmarks.client_cpu [--calls 600] [--concurrency 8] [--sse]

It prints the figures and writes them as JSON to `results/benchmarks/`.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()  # a load process, like a Locust worker: patch first, once

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import secrets  # noqa: E402
import socket  # noqa: E402
import time  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gevent.pool  # noqa: E402

from harness.mrtr import MrtrClient, Outcome, RoundRecord, Router, Transport  # noqa: E402
from harness.mrtr.wire import CallFrame  # noqa: E402
from tests.servers import start_server  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "results" / "benchmarks"
ANSWERS: dict[str, dict[str, Any]] = {
    "soil": {"action": "accept", "content": {"soil": "loam"}},
    "sowing": {"action": "accept", "content": {"date": "2026-04-01", "rows": 4}},
}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from `/proc/<pid>/stat` (fields 14 and 15)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def answer(record: RoundRecord) -> dict[str, Any]:
    return {key: ANSWERS[key] for key in record.input_requests or {}}


def run(client: MrtrClient, calls: int, concurrency: int) -> tuple[int, dict[str, int]]:
    """Run `calls` plan_bed flows on `concurrency` greenlets; return rounds sent and outcomes."""
    outcomes: dict[str, int] = {}
    rounds = 0

    def one(index: int) -> None:
        nonlocal rounds
        result = client.call_tool("plan_bed", {"bed_id": f"BENCH-{index}"}, answer)
        rounds += result.round_count
        outcomes[result.outcome.value] = outcomes.get(result.outcome.value, 0) + 1

    gevent.pool.Pool(concurrency).map(one, range(calls))
    return rounds, outcomes


def socket_floor(client: MrtrClient, port: int, requests: int) -> float:
    """CPU µs of a bare keep-alive request/response on a gevent socket (no pool, no parser, no JSON).

    The same round-1 request the flow sends, written and read by hand: what any
    gevent-based client must pay per round on this machine, whatever its design.
    """
    frame = CallFrame(client.envelope, "plan_bed", {"bed_id": "FLOOR"})
    body = frame.body(1)
    head = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in frame.headers.items())
    request = f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body
    with socket.create_connection(("127.0.0.1", port)) as sock:

        def one() -> None:
            sock.sendall(request)
            data = b""
            while b"\r\n\r\n" not in data:
                data += sock.recv(65536)
            fields, _, rest = data.partition(b"\r\n\r\n")
            length = next(int(line[15:]) for line in fields.split(b"\r\n") if line.lower().startswith(b"content-length:"))
            while len(rest) < length:
                rest += sock.recv(65536)

        for _ in range(50):
            one()
        before = time.process_time()
        for _ in range(requests):
            one()
        return (time.process_time() - before) / requests * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=600, help="measured calls (3 rounds each)")
    parser.add_argument("--warmup", type=int, default=60, help="calls before measuring")
    parser.add_argument("--concurrency", type=int, default=8, help="greenlets running calls at once")
    parser.add_argument("--sse", action="store_true", help="run the replica in SSE mode")
    args = parser.parse_args()

    server = start_server(
        "tests.servers.garden", *(["--sse"] if args.sse else []), env={"GARDEN_REQUEST_STATE_KEY": secrets.token_hex(16)}
    )
    try:
        client = MrtrClient(Router(server.url), capabilities={"elicitation": {"form": {}}}, transport=Transport())
        run(client, args.warmup, args.concurrency)
        client_before, server_before, wall_before = time.process_time(), process_cpu_seconds(server.pid), time.time()
        rounds, outcomes = run(client, args.calls, args.concurrency)
        client_cpu = time.process_time() - client_before
        server_cpu = process_cpu_seconds(server.pid) - server_before
        wall = time.time() - wall_before
        floor = socket_floor(client, server.port, args.calls)
    finally:
        server.stop()

    if outcomes != {Outcome.COMPLETE.value: args.calls}:
        raise SystemExit(f"not every call completed: {outcomes}")
    figures = {
        "benchmark": "client_cpu",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()},
        "server_mode": "sse" if args.sse else "json",
        "calls": args.calls,
        "rounds": rounds,
        "concurrency": args.concurrency,
        "wall_seconds": round(wall, 3),
        "rounds_per_second": round(rounds / wall, 1),
        "client_cpu_us_per_round": round(client_cpu / rounds * 1e6, 1),
        "server_cpu_us_per_round": round(server_cpu / rounds * 1e6, 1),
        "gevent_socket_floor_cpu_us_per_request": round(floor, 1),
    }
    figures["ratio_client_to_server"] = round(figures["client_cpu_us_per_round"] / figures["server_cpu_us_per_round"], 3)
    figures["goal_met"] = figures["ratio_client_to_server"] <= 0.1

    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"client_cpu-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(
        f"{rounds} rounds in {wall:.1f} s ({figures['rounds_per_second']}/s): "
        f"client {figures['client_cpu_us_per_round']} µs CPU/round, "
        f"server {figures['server_cpu_us_per_round']} µs CPU/round, "
        f"ratio {figures['ratio_client_to_server']} (goal <= 0.1: {'met' if figures['goal_met'] else 'NOT met'}); "
        f"bare gevent socket floor {figures['gevent_socket_floor_cpu_us_per_request']} µs/request"
    )
    print(f"written to {out.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
