"""One shop replica's server CPU per request, and the MRTR flows per second it sustains.

Sizing a deployment (how many replica cores a load needs, how many harness cores drive
them) starts from what one replica spends on one round. So this script starts the shop
with ONE replica (sqlite store in a temp dir) and measures, in the same run:

1. CPU per request, by kind: the replica's utime+stime from `/proc/<pid>/stat` before and
   after a fixed number of requests of one kind (`quote_refund`, `issue_refund` round 1,
   `issue_refund` round 2), and the API process's too, because every tool call makes the
   replica call the API over HTTP. A trivial `GET /healthz` on the same replica is the
   floor (HTTP + uvicorn + Starlette, no MCP): the ratio to it shows what the MCP layer
   and the tool add.
2. Flows per second (quote + two-round issue, zero think time) at a few client thread
   counts for a bounded time each, with p50/p95 latency per round and the CPU of this
   load process (`time.process_time()`), so it is visible whether the client was the limit.

Every window also reports the cores the rest of the machine used (`/proc/stat` busy time
minus the shop's own): on a shared machine, a replica that gets less than a core because
neighbours took it is not the same finding as a replica that is the bottleneck.

The client is `httpx.Client` (keep-alive) per thread, rounds posted by hand as in
`tests/test_rejection_reasons.py`. Everything runs on 127.0.0.1; the deployment's
context manager stops every process by PID. Raw figures go to
`results/benchmarks/shop_replica-<utc>.json`.

Run from the repository root:

    python benchmarks/shop_replica.py [--quotes 2000] [--issues 1000] [--threads 4,8,16] [--seconds 10]
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # `python benchmarks/shop_replica.py` puts benchmarks/ first, not the root
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.cpu import machine_facts, machine_seconds, process_cpu_seconds
from benchmarks.runs import write_figures
from harness.shop.orders import build_orders
from harness.targets.local_deployment import LocalDeployment

PROTOCOL = "2026-07-28"
CAPABILITIES = {"elicitation": {"form": {}}}
YES = {"confirm": {"action": "accept", "content": {"release": True}}}
REQUEST_TIMEOUT = 10.0
"""Seconds one round may take; with the per-phase deadline this bounds every loop in time."""
PHASE_CAP = 120.0
"""No fixed-count phase may run longer than this, however slow the machine is."""
MAX_FLOWS = 1_000_000
"""A count bound on the timed phases too, so no loop depends on the clock alone."""


class RoundFailed(RuntimeError):
    """A round did not answer what the shop answers to a well-formed request."""


# --- measuring ---------------------------------------------------------------------------------

@dataclass
class Spent:
    """CPU seconds of the replica, the API, this load process and the whole machine, and wall seconds."""

    replica: float = 0.0
    api: float = 0.0
    client: float = 0.0
    machine: float = 0.0
    steal: float = 0.0
    wall: float = 0.0

    def cores(self) -> dict[str, float]:
        """Average cores busy over the window; `others` is what other processes on the machine took."""
        ours = self.replica + self.api + self.client
        return {"replica": round(self.replica / self.wall, 2), "api": round(self.api / self.wall, 2),
                "client": round(self.client / self.wall, 2),
                "others": round(max(0.0, self.machine - ours) / self.wall, 2),
                "machine": round(self.machine / self.wall, 2), "steal": round(self.steal / self.wall, 2)}


@contextmanager
def spent(replica_pid: int, api_pid: int) -> Iterator[Spent]:
    """Measure a window: the figures are filled in when the `with` block ends."""
    out = Spent()
    before = (process_cpu_seconds(replica_pid), process_cpu_seconds(api_pid), time.process_time(),
              machine_seconds(), time.monotonic())
    yield out
    out.replica = process_cpu_seconds(replica_pid) - before[0]
    out.api = process_cpu_seconds(api_pid) - before[1]
    out.client = time.process_time() - before[2]
    busy, steal = machine_seconds()
    out.machine, out.steal = busy - before[3][0], steal - before[3][1]
    out.wall = time.monotonic() - before[4]


def percentile(values: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile; None for no samples (a phase the machine never got to)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def machine_and_load() -> dict[str, Any]:
    """What a reader needs to compare these figures with another machine's, and how busy it was."""
    return {**machine_facts(), "loadavg_at_start": os.getloadavg()}


# --- one round, by hand --------------------------------------------------------------------------

def post_round(client: httpx.Client, url: str, tool: str, arguments: dict[str, Any], *, request_id: int,
               responses: dict[str, Any] | None = None, state: str | None = None) -> dict[str, Any]:
    """One 2026-07-28 `tools/call` round; returns the JSON-RPC result or raises RoundFailed."""
    params: dict[str, Any] = {"name": tool, "arguments": arguments, "_meta": {
        "io.modelcontextprotocol/protocolVersion": PROTOCOL,
        "io.modelcontextprotocol/clientCapabilities": CAPABILITIES,
        "io.modelcontextprotocol/clientInfo": {"name": "shop-replica-benchmark", "version": "0"}}}
    if responses is not None:
        params["inputResponses"] = responses
    if state is not None:
        params["requestState"] = state
    response = client.post(url, json={"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params},
                           headers={"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": PROTOCOL,
                                    "Mcp-Method": "tools/call", "Mcp-Name": tool})
    if response.status_code != 200:
        raise RoundFailed(f"{tool}: HTTP {response.status_code}: {response.text[:200]}")
    result = response.json().get("result")
    if not isinstance(result, dict) or result.get("isError"):
        raise RoundFailed(f"{tool}: {response.text[:200]}")
    return result


def quote(client: httpx.Client, url: str, order_id: str, request_id: int) -> str:
    """quote_refund: one round; returns the quote id."""
    return post_round(client, url, "quote_refund", {"order_id": order_id}, request_id=request_id)[
        "structuredContent"]["quote_id"]


def ask(client: httpx.Client, url: str, quote_id: str, request_id: int) -> str:
    """issue_refund round 1 on a held order: the replica must ask; returns the requestState."""
    result = post_round(client, url, "issue_refund", {"quote_id": quote_id}, request_id=request_id)
    if result.get("resultType") != "input_required" or "confirm" not in result.get("inputRequests", {}):
        raise RoundFailed(f"issue_refund round 1 did not ask: {str(result)[:200]}")
    return result["requestState"]


def confirm(client: httpx.Client, url: str, quote_id: str, state: str, request_id: int) -> None:
    """issue_refund round 2: the answer and the echoed state; the refund must come back released."""
    result = post_round(client, url, "issue_refund", {"quote_id": quote_id}, request_id=request_id,
                        responses=YES, state=state)
    status = (result.get("structuredContent") or {}).get("status")
    if status != "requested":
        raise RoundFailed(f"issue_refund round 2 did not release: {str(result)[:200]}")


# --- a bounded pool of client threads --------------------------------------------------------------

@dataclass
class PoolRun:
    """What a pool of client threads did: units done, failures, and round latencies by kind."""

    done: int = 0
    failures: int = 0
    first_failure: str | None = None
    latencies: dict[str, list[float]] = field(default_factory=dict)


Work = Callable[[httpx.Client, int, Callable[[str, float], None]], None]
"""One unit of work: (the thread's client, the unit's index, record(kind, seconds))."""


def run_pool(clients: list[httpx.Client], work: Work, *, count: int, seconds: float) -> PoolRun:
    """Run `work` for indexes 0..count-1 on one thread per client (keep-alive, made once per run).

    The clients are made before any measured window: building an `httpx.Client` costs
    milliseconds (its SSL context), which would otherwise be billed to the first requests.

    Stops taking new units at `count` or after `seconds`, whichever comes first; a unit
    in progress finishes (each round is bounded by REQUEST_TIMEOUT), so the pool is
    bounded in count and in time. Latencies are kept per thread and merged at the end,
    so recording them does not contend on a lock.
    """
    deadline = time.monotonic() + seconds
    next_index = iter(range(count))
    index_lock = threading.Lock()
    runs = [PoolRun() for _ in clients]

    def take() -> int | None:
        with index_lock:
            return next(next_index, None) if time.monotonic() < deadline else None

    def worker(client: httpx.Client, run: PoolRun) -> None:
        def record(kind: str, took: float) -> None:
            run.latencies.setdefault(kind, []).append(took)

        while (index := take()) is not None:
            try:
                work(client, index, record)
                run.done += 1
            except (RoundFailed, httpx.HTTPError, KeyError, ValueError) as exc:
                run.failures += 1
                run.first_failure = run.first_failure or f"{type(exc).__name__}: {exc}"

    pool = [threading.Thread(target=worker, args=pair, daemon=True) for pair in zip(clients, runs, strict=True)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(seconds + 4 * REQUEST_TIMEOUT)
    merged = PoolRun(done=sum(r.done for r in runs), failures=sum(r.failures for r in runs),
                     first_failure=next((r.first_failure for r in runs if r.first_failure), None))
    for run in runs:
        for kind, values in run.latencies.items():
            merged.latencies.setdefault(kind, []).extend(values)
    return merged


def timed(record: Callable[[str, float], None], kind: str, call: Callable[[], Any]) -> Any:
    """Run one round and record its latency under `kind`."""
    started = time.perf_counter()
    value = call()
    record(kind, time.perf_counter() - started)
    return value


# --- the phases ----------------------------------------------------------------------------------

@dataclass
class Shop:
    """The one replica under test and what the phases need to drive it."""

    url: str
    healthz: str
    replica_pid: int
    api_pid: int
    held_orders: list[str]
    clients: list[httpx.Client]

    def pool(self, threads: int) -> list[httpx.Client]:
        return self.clients[:threads]


def healthz_work(shop: Shop) -> Work:
    def work(client: httpx.Client, index: int, record: Callable[[str, float], None]) -> None:
        response = timed(record, "healthz", lambda: client.get(shop.healthz))
        if response.status_code != 200:
            raise RoundFailed(f"healthz: HTTP {response.status_code}")
    return work


def flow_work(shop: Shop) -> Work:
    """One whole MRTR flow: quote a held order, be asked, answer: three rounds."""
    def work(client: httpx.Client, index: int, record: Callable[[str, float], None]) -> None:
        order = shop.held_orders[index % len(shop.held_orders)]
        quote_id = timed(record, "quote", lambda: quote(client, shop.url, order, 3 * index))
        state = timed(record, "issue_r1", lambda: ask(client, shop.url, quote_id, 3 * index + 1))
        timed(record, "issue_r2", lambda: confirm(client, shop.url, quote_id, state, 3 * index + 2))
    return work


def per_request(shop: Shop, kind: str, work: Work, count: int, threads: int) -> dict[str, Any]:
    """CPU per request of one kind: a fixed count of that kind alone between two /proc reads."""
    with spent(shop.replica_pid, shop.api_pid) as window:
        run = run_pool(shop.pool(threads), work, count=count, seconds=PHASE_CAP)
    if run.done == 0:
        raise SystemExit(f"{kind}: no request succeeded ({run.first_failure})")
    n = run.done
    return {"kind": kind, "requests": n, "failures": run.failures, "first_failure": run.first_failure,
            "threads": threads, "wall_s": round(window.wall, 3), "requests_per_s": round(n / window.wall, 1),
            "replica_cpu_us": round(window.replica / n * 1e6, 1), "api_cpu_us": round(window.api / n * 1e6, 1),
            "client_cpu_us": round(window.client / n * 1e6, 1), "cores_used": window.cores()}


def measure_cpu_per_request(shop: Shop, *, healthz: int, quotes: int, issues: int, threads: int) -> dict[str, Any]:
    """Each kind measured alone, so its CPU is not a share of a mix: healthz, quote, issue r1, issue r2.

    The quotes of the quote phase (on held orders) are the ones the issue phases use, so
    round 1 and round 2 are each a batch of their own.
    """
    issues = min(issues, quotes)
    quote_ids: list[str | None] = [None] * quotes
    states: list[str | None] = [None] * issues

    def quote_one(client: httpx.Client, index: int, record: Callable[[str, float], None]) -> None:
        order = shop.held_orders[index % len(shop.held_orders)]
        quote_ids[index] = timed(record, "quote", lambda: quote(client, shop.url, order, index))

    def ask_one(client: httpx.Client, index: int, record: Callable[[str, float], None]) -> None:
        quote_id = quote_ids[index]
        if quote_id is None:
            raise RoundFailed("no quote for this index (its quote round failed)")
        states[index] = timed(record, "issue_r1", lambda: ask(client, shop.url, quote_id, index))

    def confirm_one(client: httpx.Client, index: int, record: Callable[[str, float], None]) -> None:
        quote_id, state = quote_ids[index], states[index]
        if quote_id is None or state is None:
            raise RoundFailed("no requestState for this index (its round 1 failed)")
        timed(record, "issue_r2", lambda: confirm(client, shop.url, quote_id, state, index))

    kinds = {"healthz": per_request(shop, "healthz", healthz_work(shop), healthz, threads),
             "quote": per_request(shop, "quote", quote_one, quotes, threads),
             "issue_r1": per_request(shop, "issue_r1", ask_one, issues, threads),
             "issue_r2": per_request(shop, "issue_r2", confirm_one, issues, threads)}
    return {"kinds": kinds, "derived": derive(kinds)}


def derive(kinds: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per MRTR flow (quote + r1 + r2), per POST on average, and ratios to the /healthz floor."""
    rounds = ("quote", "issue_r1", "issue_r2")
    floor = kinds["healthz"]["replica_cpu_us"] or float("nan")
    flow = {who: round(sum(kinds[k][f"{who}_cpu_us"] for k in rounds), 1) for who in ("replica", "api", "client")}
    posts = sum(kinds[k]["requests"] for k in rounds)
    per_post = {who: round(sum(kinds[k][f"{who}_cpu_us"] * kinds[k]["requests"] for k in rounds) / posts, 1)
                for who in ("replica", "api", "client")}
    return {"flow_cpu_us": flow, "per_post_cpu_us": per_post,
            "replica_ratio_to_healthz": {k: round(kinds[k]["replica_cpu_us"] / floor, 2) for k in rounds}
            | {"per_post": round(per_post["replica"] / floor, 2)},
            "client_to_replica_per_post": round(per_post["client"] / per_post["replica"], 3)}


def measure_throughput(shop: Shop, threads: int, seconds: float) -> dict[str, Any]:
    """Whole flows back to back (zero think time) on `threads` threads for `seconds`."""
    with spent(shop.replica_pid, shop.api_pid) as window:
        run = run_pool(shop.pool(threads), flow_work(shop), count=MAX_FLOWS, seconds=seconds)
    flows = max(run.done, 1)
    all_rounds = [value for values in run.latencies.values() for value in values]

    def ms(values: list[float], fraction: float) -> float | None:
        value = percentile(values, fraction)
        return round(value * 1e3, 2) if value is not None else None

    return {"threads": threads, "seconds": seconds, "wall_s": round(window.wall, 3), "flows": run.done,
            "failures": run.failures, "first_failure": run.first_failure,
            "flows_per_s": round(run.done / window.wall, 1), "rounds_per_s": round(len(all_rounds) / window.wall, 1),
            "latency_ms": {"all": {"p50": ms(all_rounds, 0.5), "p95": ms(all_rounds, 0.95)}}
            | {kind: {"p50": ms(values, 0.5), "p95": ms(values, 0.95)} for kind, values in run.latencies.items()},
            "cores_used": window.cores(),
            "cpu_us_per_flow": {"replica": round(window.replica / flows * 1e6, 1),
                                "api": round(window.api / flows * 1e6, 1),
                                "client": round(window.client / flows * 1e6, 1)}}


# --- the run ---------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="Writes results/benchmarks/shop_replica-<utc>.json and prints a table.")
    parser.add_argument("--quotes", type=int, default=2000, help="quote_refund calls measured alone (default 2000)")
    parser.add_argument("--issues", type=int, default=1000,
                        help="two-round issue_refund flows, each round measured as its own batch (default 1000)")
    parser.add_argument("--healthz", type=int, default=2000, help="GET /healthz requests, the floor (default 2000)")
    parser.add_argument("--cpu-threads", type=int, default=4,
                        help="client threads while measuring CPU per request (default 4)")
    parser.add_argument("--threads", default="4,8,16",
                        help="client thread counts for the flows/s phase, comma-separated (default 4,8,16)")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per thread count (default 10)")
    parser.add_argument("--warmup", type=int, default=100, help="whole flows before measuring (default 100)")
    parser.add_argument("--store", default=None,
                        help="the deployment's store (default: sqlite in the temp dir); 'memory' takes sqlite out "
                             "of the picture (one replica, so nothing needs sharing)")
    args = parser.parse_args(argv)
    args.thread_counts = [int(part) for part in args.threads.split(",") if part.strip()]
    if min([args.quotes, args.issues, args.healthz, args.cpu_threads, *args.thread_counts]) < 1 or args.seconds <= 0:
        parser.error("counts, thread counts and --seconds must be positive")
    return args


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start one replica, warm it up, run both measurements; every process stops on the way out."""
    held = build_orders().order_ids(needs_confirmation=True)
    most = max(args.cpu_threads, *args.thread_counts)
    with ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="shop-bench-"))
        # the deployment's context manager stops its processes by PID, before the temp dir goes
        deployment = stack.enter_context(LocalDeployment(Path(tmp), replicas=1, store=args.store))
        clients = [stack.enter_context(httpx.Client(timeout=REQUEST_TIMEOUT)) for _ in range(most)]
        assert deployment.api is not None and deployment.api.pid is not None
        replica = deployment.replicas[0]
        assert replica.pid is not None
        shop = Shop(url=deployment.replica_urls[0], healthz=f"{replica.base_url}/healthz", replica_pid=replica.pid,
                    api_pid=deployment.api.pid, held_orders=held, clients=clients)
        warm = run_pool(shop.pool(most), flow_work(shop), count=max(args.warmup, most), seconds=PHASE_CAP)
        if warm.failures:  # also opens every client's keep-alive connection before measuring
            raise SystemExit(f"warm-up failed: {warm.first_failure}")
        run_pool(shop.pool(most), healthz_work(shop), count=max(args.warmup, most), seconds=PHASE_CAP)
        cpu = measure_cpu_per_request(shop, healthz=args.healthz, quotes=args.quotes, issues=args.issues,
                                      threads=args.cpu_threads)
        throughput = [measure_throughput(shop, threads, args.seconds) for threads in args.thread_counts]
        store = deployment.store.split(":", 1)[0]
    return {"cpu_per_request": cpu, "throughput": throughput, "store": store}


def print_table(figures: dict[str, Any]) -> None:
    cpu, derived = figures["cpu_per_request"]["kinds"], figures["cpu_per_request"]["derived"]
    print(f"\nCPU per request, µs (1 replica, {figures['store']} store, {cpu['quote']['threads']} client threads)")
    print(f"{'kind':<22}{'n':>6}{'replica':>10}{'api':>9}{'client':>9}{'replica/healthz':>17}{'req/s':>8}"
          f"{'others (cores)':>16}")
    for kind, label in (("healthz", "GET /healthz (floor)"), ("quote", "quote_refund"),
                        ("issue_r1", "issue_refund round 1"), ("issue_r2", "issue_refund round 2")):
        row = cpu[kind]
        ratio = row["replica_cpu_us"] / cpu["healthz"]["replica_cpu_us"] if cpu["healthz"]["replica_cpu_us"] else 0
        print(f"{label:<22}{row['requests']:>6}{row['replica_cpu_us']:>10.0f}{row['api_cpu_us']:>9.0f}"
              f"{row['client_cpu_us']:>9.0f}{ratio:>16.1f}x{row['requests_per_s']:>8.0f}"
              f"{row['cores_used']['others']:>16.2f}")
    for label, key in (("per POST (mean)", "per_post_cpu_us"), ("per MRTR flow (3)", "flow_cpu_us")):
        row = derived[key]
        print(f"{label:<22}{'':>6}{row['replica']:>10.0f}{row['api']:>9.0f}{row['client']:>9.0f}")
    print("\nFlows/s, zero think time (quote + 2-round issue)")
    print(f"{'threads':>7}{'flows/s':>9}{'rounds/s':>10}{'p50 ms':>8}{'p95 ms':>8}"
          f"{'cores: replica':>16}{'api':>6}{'client':>8}{'others':>8}{'fail':>6}")
    for row in figures["throughput"]:
        lat, cores = row["latency_ms"]["all"], row["cores_used"]
        print(f"{row['threads']:>7}{row['flows_per_s']:>9.1f}{row['rounds_per_s']:>10.1f}{lat['p50'] or 0:>8.1f}"
              f"{lat['p95'] or 0:>8.1f}{cores['replica']:>16.2f}{cores['api']:>6.2f}{cores['client']:>8.2f}"
              f"{cores['others']:>8.2f}{row['failures']:>6}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = datetime.now(UTC)
    figures: dict[str, Any] = {
        "benchmark": "shop_replica",
        "command": shlex.join(["python", *sys.argv]) if argv is None else shlex.join(["python", __file__, *argv]),
        "date": started.isoformat(timespec="seconds"),
        "machine": machine_and_load(),
        "settings": {k: v for k, v in vars(args).items() if k != "threads"},
    }
    figures |= run(args)
    figures["duration_s"] = round((datetime.now(UTC) - started).total_seconds(), 1)
    write_figures("shop_replica", figures, started)
    print_table(figures)
    print(f"\n{figures['command']}  ({figures['duration_s']} s; {figures['machine']['cpus']} cpus, "
          f"{figures['machine']['cpu_model']})")
    failures = sum(k["failures"] for k in figures["cpu_per_request"]["kinds"].values()) + sum(
        t["failures"] for t in figures["throughput"])
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
