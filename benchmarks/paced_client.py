"""A client that does nothing but one-round tool calls at a run's pace: the floor under a load process.

At 16 flows/s a run's load process sleeps between answers, and each answer wakes it with
its caches emptied by the replicas on the other core. What part of its CPU per round is
that, and what part its own work? This child process sends the same one-round call
(`quote_refund`, answered at once) to a replica as Poisson arrivals at `--rate` a
second, each on a greenlet of its own over a pool of kept-alive connections, and
measures its own CPU per call, in one of two ways:

* `bare`: the request's bytes written and the answer read by hand on a gevent socket
  (no parser, no JSON, no harness): what any gevent client pays per round at this pace.
* `client`: the harness's own `MrtrClient` and `Transport` (the wire, the pool, the
  outcome), without Locust, the journal, the metrics, leads or flows.

It prints `window-start` when its window begins (after `--settle` seconds), `window-end`
when it ends, then one JSON line: calls, CPU µs per call, voluntary and involuntary
context switches per call. `benchmarks.paced_floor` starts it and samples the replica
between the two lines.

    python -m benchmarks.paced_client --url URL --order ORDER [--mode bare|client] [--rate 43]
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()  # a load process: patch first, once

import argparse
import json
import random
import resource
import socket
import time
from collections.abc import Callable

import gevent
from gevent.queue import SimpleQueue

from benchmarks.client_cpu import bare_request, read_bare_answer
from harness.mrtr.client import MrtrClient
from harness.mrtr.outcome import Outcome
from harness.mrtr.routing import Router
from harness.mrtr.transport import Transport
from harness.mrtr.wire import Envelope

CAPABILITIES = {"elicitation": {"form": {}}}
TOOL = "quote_refund"


def bare_call(url: str, envelope: Envelope, order: str) -> Callable[[], None]:
    """One call as bytes on a kept-alive socket, pooled; the answer read up to its Content-Length."""
    address, request = bare_request(envelope, url, TOOL, {"order_id": order})
    idle: SimpleQueue[socket.socket] = SimpleQueue()

    def one() -> None:
        sock = idle.get_nowait() if idle.qsize() else socket.create_connection(address)
        sock.sendall(request)
        fields = read_bare_answer(sock)
        if not fields.startswith(b"HTTP/1.1 200"):
            raise SystemExit(f"the replica answered {fields[:40]!r}")
        idle.put(sock)

    return one


def client_call(client: MrtrClient, order: str) -> Callable[[], None]:
    """One call through the harness's `MrtrClient` (its wire, pool and outcome)."""

    def one() -> None:
        result = client.call_tool(TOOL, {"order_id": order}, lambda record: None)
        if result.outcome is not Outcome.COMPLETE:
            raise SystemExit(f"the call ended {result.outcome.value}")

    return one


def own_cpu_and_switches() -> tuple[float, int, int]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, usage.ru_nvcsw, usage.ru_nivcsw


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--url", required=True, help="the replica's MCP endpoint")
    parser.add_argument("--order", required=True, help="an order id of the shop's catalogue to quote")
    parser.add_argument("--mode", choices=("bare", "client"), default="bare")
    parser.add_argument("--rate", type=float, default=43.0, help="calls a second, Poisson arrivals (default 43)")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds before the window (default 3)")
    parser.add_argument("--window", type=float, default=20.0, help="seconds measured (default 20)")
    args = parser.parse_args(argv)
    client = MrtrClient(Router(args.url), capabilities=CAPABILITIES, transport=Transport(read_timeout=30.0))
    one = bare_call(args.url, client.envelope, args.order) if args.mode == "bare" else client_call(client, args.order)
    calls = 0

    def counted() -> None:
        nonlocal calls
        one()
        calls += 1

    arrivals = random.Random(7)
    settle_until = time.monotonic() + args.settle
    end = settle_until + args.window
    started: tuple[float, int, int] | None = None
    first = 0
    while time.monotonic() < end:
        if started is None and time.monotonic() >= settle_until:
            started, first = own_cpu_and_switches(), calls
            print("window-start", flush=True)
        gevent.sleep(arrivals.expovariate(args.rate))
        gevent.spawn(counted)
    finished, last = own_cpu_and_switches(), calls
    print("window-end", flush=True)
    assert started is not None
    done = last - first
    print(json.dumps({"mode": args.mode, "calls": done, "calls_per_s": round(done / args.window, 1),
                      "cpu_us_per_call": round((finished[0] - started[0]) / done * 1e6, 1),
                      "sleeps_per_call": round((finished[1] - started[1]) / done, 2),
                      "preemptions_per_call": round((finished[2] - started[2]) / done, 2)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
