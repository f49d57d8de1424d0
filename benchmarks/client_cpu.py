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
* `stub`: the stub server (`benchmarks/stub_server.py`), its two-round `confirm`, a few tens
  of µs a round: the client's own CPU is the most of what the machine does.
* `canned` (with `--auth` only): no server; the stub's two rounds answered from memory by the
  real transport cut off at the socket, so the figure is the client's own work alone (the
  upper bound of what auth adds, which a socket and a server only dilute).

`--auth` measures what OAuth adds to the client: windows alternate between a client with no
credentials and one whose every round carries its lead's `Authorization: Bearer` token
(`harness.auth.keeper.LeadTokens`, 20 principals, tokens from a file: the server is not
asked to verify them, so only the client's side is measured), and the figure is the ratio of
the client's CPU per round with auth to without, window pair by window pair.

Each window is repeated (`--repeat`), because the machine is shared and noisy; every
window also records what the rest of the machine used. A bare keep-alive request on a
gevent socket (no pool, no parser, no JSON) is measured after the windows, as the floor
any gevent-based client pays per round on this machine.

`--whole-run N` then measures the whole load process in a real run, N times: `mrtr-harness
run` (a child process) on the smoke scenario (embedded shop, three replicas, leads thinking,
journal, metrics, Locust, the log collector) at `--rate` flows/s (default 16) for
`--seconds`. This script samples the run's process and each replica the zygote forked from
`/proc` every 0.5 s, and takes the load's middle as the window (`--skip` seconds after the
load started to 3 s before it stops): the harness's CPU per round against the replicas'
CPU per round, side by side, on the same rounds (the journal's round records inside the
window). That figure counts everything a load process does, not only the client; it says
how many replica cores one harness core drives in a real run. The run's own `cpu` record
(load start to stop, ramp and grace included) is kept beside it. `--code DIR` alternates
whole runs of another checkout (the code before a change) with this one's.

Run from the repository root:

    python -m benchmarks.client_cpu [--server shop|garden] [--flows 200] [--repeat 3] [--concurrency 8]
                                    [--sse] [--auth] [--whole-run 2 [--rate 16] [--seconds 40] [--code DIR]]
                                    [--no-client-alone]

It prints the figures and writes them as JSON to `results/benchmarks/client_cpu-<utc>.json`.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()  # a load process, like a Locust worker: patch first, once

import argparse
import secrets
import shlex
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import gevent.pool

from benchmarks.cpu import machine_facts, window
from benchmarks.runs import (
    ChildRun,
    ProcessSample,
    embedded_target_pids,
    interpolate,
    load_average,
    machine_busy_seconds,
    process_sample,
    write_figures,
)
from harness.mrtr.client import MrtrClient, RoundRecord
from harness.mrtr.outcome import Outcome
from harness.mrtr.routing import Router
from harness.mrtr.transport import HttpAnswer, Transport
from harness.mrtr.wire import CallFrame, Envelope

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
        quote = client.call_tool("quote_refund", {"order_id": held_orders[index % len(held_orders)]}, nobody,
                                 lead=index)
        if quote.outcome is not Outcome.COMPLETE:
            return quote.round_count, f"quote {quote.outcome.value}"
        quote_id = (quote.result or {}).get("structuredContent", {}).get("quote_id")
        issue = client.call_tool("issue_refund", {"quote_id": quote_id}, release, lead=index)
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

    result = client.call_tool("plan_bed", {"bed_id": f"BENCH-{index}"}, answer, lead=index)
    return result.round_count, result.outcome.value


def stub_flow(client: MrtrClient, index: int) -> tuple[int, str]:
    """confirm: one question (release), then the result."""

    def release(record: RoundRecord) -> dict[str, Any]:
        return {key: {"action": "accept", "content": {"release": True}} for key in record.input_requests or {}}

    result = client.call_tool("confirm", {"item": f"X-{index}"}, release, lead=index)
    return result.round_count, result.outcome.value


@contextmanager
def shop_server(sse: bool) -> Iterator[Server]:
    from harness.shop.orders import build_orders
    from harness.targets.local_deployment import LocalDeployment, ReplicaOptions

    held = build_orders().order_ids(needs_confirmation=True)
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


@contextmanager
def stub_server(sse: bool) -> Iterator[Server]:
    from tests.servers import start_server

    if sse:
        raise SystemExit("the stub server answers JSON only")
    server = start_server("benchmarks.stub_server")
    try:
        yield Server(server.url, {"replica": server.pid}, stub_flow, ("confirm", {"item": "FLOOR"}))
    finally:
        server.stop()


class CannedTransport(Transport):
    """The real transport up to the socket (route, head, header lines, bytes), answered from memory: the stub's
    two rounds, question then result. What is left is the client's own work, without the kernel's."""

    QUESTION = (b'"result":{"resultType":"input_required","requestState":"stub1.1","inputRequests":{"confirm":'
                b'{"method":"elicitation/create","params":{"mode":"form","message":"Release it?","requestedSchema":'
                b'{"type":"object","properties":{"release":{"type":"boolean"}},"required":["release"]}}}}}}')
    DONE = b'"result":{"content":[{"type":"text","text":"done"}]}}'

    def _send(self, endpoint: Any, request: bytes, sse: Any) -> HttpAnswer:
        start = request.index(b'"id":', request.index(b"\r\n\r\n")) + 5
        request_id = request[start:request.index(b",", start)]
        result = self.DONE if b'"requestState"' in request else self.QUESTION
        return HttpAnswer(200, "application/json", b'{"jsonrpc":"2.0","id":' + request_id + b"," + result)


@contextmanager
def canned_server(sse: bool) -> Iterator[Server]:
    """No server: `--auth --server canned` runs the stub's flow on `CannedTransport` (see `auth_overhead`)."""
    yield Server("http://127.0.0.1:9/mcp", {}, stub_flow, ("confirm", {"item": "FLOOR"}))


SERVERS = {"shop": shop_server, "garden": garden_server, "stub": stub_server, "canned": canned_server}


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
        "client_to_replica": round(per_round["client"] / per_round["replica"], 3) if "replica" in per_round else None,
        "cores": spent.cores(),
        "load_average": spent.load_average,
    }


def bare_request(envelope: Envelope, url: str, tool: str, arguments: dict[str, Any]) -> tuple[tuple[str, int], bytes]:
    """A round-1 request to `url` as the bytes a flow sends, built by hand: (the address to connect to, the bytes)."""
    host, _, path = url.removeprefix("http://").partition("/")
    address, _, port = host.rpartition(":")
    frame = CallFrame(envelope, tool, arguments)
    body = frame.body(1)
    head = f"POST /{path} HTTP/1.1\r\nHost: {host}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in frame.headers.items())
    return (address, int(port)), f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


def read_bare_answer(sock: socket.socket) -> bytes:
    """Read one answer up to its Content-Length, by hand (no parser, no JSON); returns its head."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    fields, _, rest = data.partition(b"\r\n\r\n")
    length = next(int(line[15:]) for line in fields.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    while len(rest) < length:
        rest += sock.recv(65536)
    return fields


def socket_floor(client: MrtrClient, url: str, tool: str, arguments: dict[str, Any], requests: int) -> float:
    """CPU µs of a bare keep-alive request/response on a gevent socket (no pool, no parser, no JSON).

    The same round-1 request a flow sends, written and read by hand: what any
    gevent-based client must pay per round on this machine, whatever its design.
    """
    address, request = bare_request(client.envelope, url, tool, arguments)
    with socket.create_connection(address) as sock:

        def one() -> None:
            sock.sendall(request)
            read_bare_answer(sock)

        for _ in range(20):
            one()
        before = time.process_time()
        for _ in range(requests):
            one()
        return (time.process_time() - before) / requests * 1e6


AUTH_PRINCIPALS = 20


@contextmanager
def lead_tokens() -> Iterator[Any]:
    """Every principal's token from a file, as `[target.auth] kind = "tokens"` gives them, refreshing on."""
    from harness.auth.keeper import LeadTokens
    from harness.auth.token_file import TokenFile

    with tempfile.TemporaryDirectory(prefix="client-cpu-tokens-") as tmp:
        path = Path(tmp) / "leads.tokens"
        path.write_text("".join(f"{secrets.token_urlsafe(32)}\n" for _ in range(AUTH_PRINCIPALS)))
        tokens = LeadTokens(TokenFile(path), AUTH_PRINCIPALS)
        tokens.start()
        try:
            yield tokens
        finally:
            tokens.stop()


def auth_overhead(args: argparse.Namespace) -> dict[str, Any]:
    """Windows alternating without and with auth on one server: the client's CPU per round, each way, and their
    ratio per pair (with ÷ without)."""
    with SERVERS[args.server](args.sse) as server, lead_tokens() as tokens:
        transport = (CannedTransport if args.server == "canned" else Transport)(read_timeout=FLOW_TIMEOUT)
        clients = {"off": MrtrClient(Router(server.url), capabilities=CAPABILITIES, transport=transport),
                   "on": MrtrClient(Router(server.url), capabilities=CAPABILITIES, transport=transport,
                                    credentials=tokens)}
        for client in clients.values():
            _, warm = run_flows(server, client, 0, args.warmup, args.concurrency)
            if set(warm) != {Outcome.COMPLETE.value}:
                raise SystemExit(f"warm-up failed: {warm}")
        pairs = []
        for repeat in range(args.repeat):
            pair = {}
            for name in ("off", "on") if repeat % 2 == 0 else ("on", "off"):  # ABBA: a drift cancels out
                pair[name] = measure_window(server, clients[name], args.warmup + repeat * args.flows, args.flows,
                                            args.concurrency)
                print(f"  auth {name}:" + _window_line(pair[name]), flush=True)
            pair["ratio"] = round(pair["on"]["cpu_us_per_round"]["client"] / pair["off"]["cpu_us_per_round"]["client"],
                                  3)
            pairs.append(pair)
        transport.close()
    ratios = [pair["ratio"] for pair in pairs]
    per_round = {name: sum(pair[name]["cpu_us_per_round"]["client"] * pair[name]["rounds"] for pair in pairs)
                 / sum(pair[name]["rounds"] for pair in pairs) for name in ("off", "on")}
    return {"server": args.server, "principals": AUTH_PRINCIPALS, "concurrency": args.concurrency, "pairs": pairs,
            "ratio": {"min": min(ratios), "median": statistics.median(ratios), "max": max(ratios)},
            "client_us_per_round": {name: round(value, 2) for name, value in per_round.items()},
            "pooled_ratio": round(per_round["on"] / per_round["off"], 3),
            "all_complete": all(set(pair[name]["outcomes"]) == {Outcome.COMPLETE.value}
                                for pair in pairs for name in ("off", "on"))}


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
    replica = f", replica {cpu['replica']:,.0f}{others}; ratio {w['client_to_replica']:.3f}" if "replica" in cpu else ""
    return (f"  {w['rounds']} rounds in {w['wall_s']:.1f} s: client {cpu['client']:,.1f} µs/round{replica}; "
            f"cores {w['cores']}; "
            f"load {w['load_average'][0]}-{w['load_average'][1]}; outcomes {w['outcomes']}")


# --- the whole harness, in a real run -----------------------------------------------------------------


def fast_smoke(path: Path, rate: int, seconds: int) -> None:
    """The smoke scenario (embedded shop, three replicas) at `rate` flows/s for `seconds`."""
    text = (REPO_ROOT / "scenarios" / "smoke.toml").read_text()
    fast = text.replace("arrival_rate = 4 ", f"arrival_rate = {rate} ").replace('duration = "30s"',
                                                                               f'duration = "{seconds}s"')
    if fast.count(f"arrival_rate = {rate} ") != 1 or fast.count(f'duration = "{seconds}s"') != 1:
        raise SystemExit("scenarios/smoke.toml changed: the whole-run scenario can no longer be derived from it")
    path.write_text(fast)


def whole_run(code: Path, work: Path, rate: int, seconds: int, skip: float, tail: float,
              env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """`mrtr-harness run` on the fast smoke scenario, its process and each replica sampled from `/proc`.

    The window is the load's middle (`skip` seconds after the load started to `tail` seconds
    before it stops: no ramp, no wind-down); rounds are the journal's round records inside it,
    each served by one replica, so the replicas' CPU per round is their CPU summed over the
    rounds they served together. `env`: variables for the run (and the replicas it starts) beside this one's.
    """
    scenario = work / "fast.toml"
    fast_smoke(scenario, rate, seconds)
    child = ChildRun(scenario, work / f"results-{time.monotonic_ns()}", code=code, env=env or {}).start()
    child.watch(lambda run: run.event("load-started") is not None, every=0.2, timeout=180)
    started = child.event("load-started")
    if started is None:
        exit_code, stderr = child.finish(timeout=60)
        raise SystemExit(f"the run never started its load (exit {exit_code}): {stderr}")
    pids = {"harness": child.pid, **embedded_target_pids(child.pid)}
    replicas = [name for name in pids if name.startswith("replica")]
    opened, closed = started["t"] + skip, started["t"] + seconds - tail
    samples: dict[str, list[ProcessSample]] = {name: [] for name in pids}
    machine: list[tuple[float, float]] = []

    def look() -> None:
        for name, pid in pids.items():
            sample = process_sample(pid)
            if sample is not None:
                samples[name].append(sample)
        machine.append((time.time(), machine_busy_seconds()))

    child.watch(lambda run: machine[-1][0] > closed + 0.5 if machine else False, every=0.5,
                timeout=seconds + 120, on_tick=look)
    exit_code, stderr = child.finish(timeout=seconds + 180)
    wall = closed - opened
    spent = {name: interpolate(taken, closed, "cpu") - interpolate(taken, opened, "cpu")
             for name, taken in samples.items() if len(taken) >= 2}
    in_window = [record for record in child.records if record.get("type") == "round" and opened <= record["t"] < closed]
    rounds = len(in_window)
    completed = sum(1 for record in in_window if record.get("outcome") == Outcome.COMPLETE.value)
    flows = sum(1 for record in child.records if record.get("type") == "start" and opened <= record["t"] < closed)
    busy = [value for at, value in machine if opened <= at <= closed]
    replica_cpu = sum(spent.get(name, 0.0) for name in replicas)
    harness_ms = spent["harness"] / rounds * 1000 if rounds else None
    replica_ms = replica_cpu / rounds * 1000 if rounds else None
    own = child.event("cpu") or {}
    return {
        "exit_code": exit_code, "stderr_tail": stderr.strip().splitlines()[-2:],
        "results": str(child.folder.relative_to(work)) if child.folder else None,
        "window_s": round(wall, 1), "rounds": rounds, "completed_rounds": completed, "flows_started": flows,
        "output_mismatches": sum(1 for record in child.records if "output_mismatch" in record),
        "harness_cpu_s": round(spent["harness"], 3), "replicas_cpu_s": round(replica_cpu, 3),
        "api_cpu_s": round(spent.get("api", 0.0), 3), "replicas_sampled": len(replicas),
        "harness_ms_per_round": round(harness_ms, 3) if harness_ms else None,
        "replica_ms_per_round": round(replica_ms, 3) if replica_ms else None,
        "harness_to_replica": round(harness_ms / replica_ms, 3) if harness_ms and replica_ms else None,
        "cores": {"harness": round(spent["harness"] / wall, 2), "replicas": round(replica_cpu / wall, 2),
                  "machine": round((busy[-1] - busy[0]) / (len(busy) - 1) / 0.5, 2) if len(busy) > 1 else None},
        "run_own_cpu_record": {key: own.get(key) for key in ("rounds", "harness_per_round_ms", "replica_per_round_ms",
                                                             "harness_to_replica", "harness_startup_seconds")},
        "load_average": round(load_average(), 2),
    }


def whole_runs(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """`--whole-run` runs of each code (this checkout, and each `--code`), alternating."""
    codes = {"this": REPO_ROOT, **{f"code:{path}": path.resolve() for path in args.code}}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in codes}
    with tempfile.TemporaryDirectory(prefix="client-cpu-run-") as tmp:
        for _ in range(args.whole_run):
            for name, code in codes.items():
                run = whole_run(code, Path(tmp), args.rate, args.seconds, args.skip, 3.0)
                runs[name].append(run)
                print(f"  whole run, {name}: exit {run['exit_code']}, {run['rounds']} rounds in {run['window_s']} s; "
                      f"harness {run['harness_ms_per_round']} ms/round, replicas {run['replica_ms_per_round']} "
                      f"ms/round, ratio {run['harness_to_replica']}; cores {run['cores']}; load average "
                      f"{run['load_average']}", flush=True)
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=sorted(SERVERS), default="shop", help="server under test (default shop)")
    parser.add_argument("--flows", type=int, default=200, help="flows per measured window (3 rounds each)")
    parser.add_argument("--repeat", type=int, default=3, help="measured windows, back to back (default 3)")
    parser.add_argument("--warmup", type=int, default=40, help="flows before measuring (default 40)")
    parser.add_argument("--concurrency", type=int, default=8, help="greenlets running flows at once (default 8)")
    parser.add_argument("--sse", action="store_true", help="run the replica in SSE mode")
    parser.add_argument("--auth", action="store_true",
                        help="instead: client CPU per round with an OAuth token per lead against without")
    parser.add_argument("--whole-run", type=int, default=0, metavar="N",
                        help="then run the whole harness N times on the smoke scenario at --rate (default 0)")
    parser.add_argument("--rate", type=int, default=16, help="flows/s of the whole runs (default 16)")
    parser.add_argument("--seconds", type=int, default=40, help="load duration of each whole run (default 40)")
    parser.add_argument("--skip", type=float, default=10.0,
                        help="seconds after the load's start left out of a whole run's window (default 10)")
    parser.add_argument("--code", type=Path, action="append", default=[],
                        help="another checkout of the harness whose whole runs alternate with this one's")
    parser.add_argument("--no-client-alone", action="store_true", help="only the whole runs")
    args = parser.parse_args(argv)
    if min(args.flows, args.repeat, args.warmup, args.concurrency) < 1 or args.whole_run < 0:
        parser.error("counts must be positive")
    started = datetime.now(UTC)
    figures: dict[str, Any] = {
        "benchmark": "client_cpu",
        "command": shlex.join(["python", "-m", "benchmarks.client_cpu", *(sys.argv[1:] if argv is None else argv)]),
        "date": started.isoformat(timespec="seconds"),
        "machine": machine_facts(),
        "settings": vars(args) | {"code": [str(path) for path in args.code]},
    }
    alone: dict[str, Any] = {"all_complete": True}
    if args.auth:
        print(f"auth off and on against one {args.server} replica ({args.flows} flows a window, {args.repeat} pairs, "
              f"{args.concurrency} greenlets):", flush=True)
        figures["auth"] = alone = auth_overhead(args)
        print(f"auth: client CPU per round with ÷ without {alone['ratio']['min']:.3f}-{alone['ratio']['max']:.3f} "
              f"by pair (median {alone['ratio']['median']:.3f}), {alone['pooled_ratio']:.3f} over every window "
              f"({alone['client_us_per_round']['on']:.1f} against {alone['client_us_per_round']['off']:.1f} µs; "
              "goal <= 1.05)")
    elif not args.no_client_alone:
        print(f"client alone against one {args.server} replica ({args.flows} flows x {args.repeat}, "
              f"{args.concurrency} greenlets):", flush=True)
        figures["client_alone"] = alone = client_alone(args)
        print(f"client alone: ratio {alone['ratio']['min']:.3f}-{alone['ratio']['max']:.3f} "
              f"(median {alone['ratio']['median']:.3f}; goal <= 0.1); bare gevent socket floor "
              f"{alone['gevent_socket_floor_cpu_us_per_request']:,.0f} µs/request "
              f"({min(alone['floor_to_replica']):.3f}-{max(alone['floor_to_replica']):.3f} of the replica's round)")
    if args.whole_run:
        print(f"whole harness, {args.whole_run} run(s) of the smoke scenario at {args.rate} flows/s for "
              f"{args.seconds} s (window: the load's middle):", flush=True)
        figures["whole_run"] = whole_runs(args)
    figures["duration_s"] = round((datetime.now(UTC) - started).total_seconds(), 1)
    write_figures("client_cpu", figures, started)
    failed = not alone["all_complete"] or any(run["exit_code"] != 0 for runs in figures.get("whole_run", {}).values()
                                              for run in runs)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
