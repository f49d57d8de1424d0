"""MRTR flows per second that one load process drives, and what share of a core it takes doing so.

The question: how many flows one Locust process can drive against a deployment sized not
to be the limit. On a 2-core machine any SDK-based deployment is the limit (a shop
replica spends 5-8 ms of CPU per round, the garden test server about 2 ms, the harness
about 1-1.5 ms), so the default target here is the stub (`benchmarks/stub_server.py`):
a hand-written server for the 2026-07-28 wire at about 0.1 ms per round, whose one tool
asks one form question and completes on the retry (two rounds per flow, like a refund
above the limit). With it the load process, not the server, runs out of CPU first:
a load process near 1.0 core while the server side has headroom is the one-process
ceiling. `--server garden` measures against the garden's three-round `plan_bed`
instead (there the server is the limit).

Each measurement is a real `mrtr-harness run` of a generated scenario, in a child
process: external target (the servers started here), closed model with `--users` agents
working flows back to back, leads answering at once, every part of a run on (Locust,
journal, metrics, live figures, log collector off because the target has no logs).
While it runs, this script samples the CPU of the child (the load process), of its live
fold process (`harness.run.live_fold`, which folds the journal on the other core), of every
server process and of the whole machine (`/proc`) every 0.2 s. The load process's
figures are its own; the fold's are given beside them, and in the harness's total. The
window is taken from the run's own journal: from one second after the first flow started
(past the spawn) to the moment the load stopped. Flows and rounds are the journal's records
inside that window. With `--code`, each run of this checkout is followed by one of the
other, against the same servers, and each pair's flows/s ratio is printed: on a shared
machine the ratio of neighbours in time is steadier than either side's figures.

The floor, in the same session: after each harness run, Locust's own `FastHttpUser` (the
`locust` command on `benchmarks/plain_posts.py`) with as many users, POSTing the
harness's round 1 again and again to the same servers, nothing else on. Its requests/s
and its CPU per request (sampled the same way, over its run less the first second) are
what one Locust process does without MRTR; the harness's rounds/s and flows/s are given
as a ratio of it. `--no-plain` leaves the floor out.

Run from the repository root:

    python -m benchmarks.flows_per_second [--server stub|garden] [--replicas 2] [--users 16,64]
                                          [--seconds 15] [--repeat 2] [--no-plain] [--code DIR]

Raw figures go to `results/benchmarks/flows_per_second-<utc>.json`; the run folders to
`results/benchmarks/runs/`.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.cpu import load_average, machine_busy_seconds, machine_facts, process_cpu_seconds
from benchmarks.runs import RESULTS, fold_pid, write_figures
from harness.journal.writer import read_journal
from tests.servers import Running, start_server

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_EVERY = 0.2
SKIP_SPAWN = 1.0
"""Seconds after the first flow starts before the window opens (the agents are still being spawned)."""
RUN_TIMEOUT = 300.0


@dataclass
class ServerKind:
    module: str
    args: tuple[str, ...]
    flow_toml: str
    rounds_per_flow: int


SERVERS = {
    "stub": ServerKind("benchmarks.stub_server", (), 'kind = "call"\ntool = "confirm"\narguments = { item = "X-1" }\n',
                       2),
    "garden": ServerKind("tests.servers.garden", (),
                         'kind = "call"\ntool = "plan_bed"\narguments = { bed_id = "B-1" }\n',
                         3),
}

SCENARIO = """\
name = "flows-per-second"
seed = 11
duration = "{seconds}s"
grace = "10s"

[target]
kind = "external"
urls = {urls}

[load]
model = "closed"
users = {users}
routing = "round-robin"
timeout = "10s"

[[flows]]
{flow}
[leads]
think = {{ dist = "constant", value = "0s" }}
"""


def stub_scenario(seconds: float, urls: list[str]) -> str:
    """The scenario above against the stub servers, 16 agents and a 1 s grace: the run that
    `benchmarks/instructions.py` counts and `benchmarks/hot_path.py` samples."""
    return SCENARIO.format(seconds=seconds, urls=json.dumps(urls), users=16,
                           flow=SERVERS["stub"].flow_toml).replace('grace = "10s"', 'grace = "1s"')


@contextmanager
def servers(kind: ServerKind, replicas: int,
            extra: Callable[[int], Sequence[str]] = lambda number: ()) -> Iterator[list[Running]]:
    """Start the replicas (one shared state key for the garden; `extra(number)`: replica `number`'s own arguments,
    from 1), stop them by PID on the way out."""
    env = {"GARDEN_REQUEST_STATE_KEY": secrets.token_hex(16)}
    started = [start_server(kind.module, *kind.args, *extra(number), env=env, wait=False)
               for number in range(1, replicas + 1)]
    try:
        for server in started:
            server.wait_ready()
        yield started
    finally:
        for server in started:
            server.stop()


@dataclass
class Sample:
    at: float
    """Wall-clock seconds (`time.time()`, the journal's clock)."""
    load: float
    servers: float
    machine: float
    fold: float = 0.0
    """The load process's live fold process (0 for code that folds in the load process)."""


class FoldFinder:
    """The run's fold process, looked for among the load process's children until found (then by its PID)."""

    def __init__(self, load_pid: int) -> None:
        self.load_pid = load_pid
        self.pid: int | None = None
        self.looks = 0

    def cpu(self) -> float:
        if self.pid is None and self.looks < 50:
            self.looks += 1
            self.pid = fold_pid(self.load_pid)
        if self.pid is None:
            return 0.0
        try:
            return process_cpu_seconds(self.pid)
        except ProcessLookupError:
            return 0.0  # it exits at the run's end; the window closed before


def sample(load_pid: int, server_pids: list[int], fold: FoldFinder | None = None) -> Sample:
    return Sample(time.time(), process_cpu_seconds(load_pid), sum(process_cpu_seconds(p) for p in server_pids),
                  machine_busy_seconds(), fold.cpu() if fold is not None else 0.0)


def at(samples: list[Sample], moment: float, field: str) -> float:
    """A sampled counter at `moment`, interpolated between the two samples around it."""
    times = [s.at for s in samples]
    index = min(max(bisect_left(times, moment), 1), len(samples) - 1)
    before, after = samples[index - 1], samples[index]
    share = (moment - before.at) / (after.at - before.at) if after.at > before.at else 0.0
    low, high = getattr(before, field), getattr(after, field)
    return low + (high - low) * min(max(share, 0.0), 1.0)


def one_run(kind: ServerKind, running: list[Running], users: int, seconds: float,
            code: Path = REPO_ROOT) -> dict[str, Any]:
    """One `mrtr-harness run` (of the harness in `code`) with `users` agents; the figures of its load window."""
    folder = RESULTS / "runs"
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="flows-per-second-") as tmp:
        scenario = Path(tmp) / "scenario.toml"
        scenario.write_text(SCENARIO.format(seconds=seconds, urls=json.dumps([s.url for s in running]),
                                            users=users, flow=kind.flow_toml))
        before = set(folder.iterdir())
        command = [sys.executable, "-m", "harness", "run", str(scenario), "--quiet", "--results", str(folder)]
        child = subprocess.Popen(command, cwd=code, env={**os.environ, "PYTHONPATH": str(code)},
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        samples, (_, stderr) = sample_until_exit(child, [s.pid for s in running])
    (made,) = set(folder.iterdir()) - before
    return figures_of(made, samples, child.returncode, stderr, users, kind.rounds_per_flow)


def sample_until_exit(child: subprocess.Popen[str], server_pids: list[int]) -> tuple[list[Sample], tuple[str, str]]:
    """Sample the child and the servers every `SAMPLE_EVERY` until the child exits (killed, by its PID, at
    `RUN_TIMEOUT`); the samples, and the child's output."""
    samples: list[Sample] = []
    deadline = time.monotonic() + RUN_TIMEOUT
    fold = FoldFinder(child.pid)
    try:
        while child.poll() is None and time.monotonic() < deadline:
            try:
                samples.append(sample(child.pid, server_pids, fold))
            except (FileNotFoundError, ProcessLookupError):
                break  # the child exited between poll() and the read
            time.sleep(SAMPLE_EVERY)
    finally:
        if child.poll() is None:
            child.kill()
        output = child.communicate(timeout=60)
    return samples, output


def plain_run(running: list[Running], users: int, seconds: float) -> dict[str, Any]:
    """Locust's `FastHttpUser` POSTing round 1 with `users` users for `seconds`: requests/s and CPU per request."""
    command = [sys.executable, "-m", "locust", "-f", str(REPO_ROOT / "benchmarks" / "plain_posts.py"), "--headless",
               "--users", str(users), "--spawn-rate", str(users), "--run-time", f"{seconds:g}s", "--json",
               "--only-summary", "--loglevel", "WARNING"]
    env = {**os.environ, "PLAIN_POST_URLS": ",".join(server.url for server in running)}
    child = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    samples, (stdout, stderr) = sample_until_exit(child, [s.pid for s in running])
    entries = json.loads(stdout)
    requests = sum(entry["num_requests"] for entry in entries)
    failures = sum(entry["num_failures"] for entry in entries)
    began = min(entry["start_time"] for entry in entries)
    ended = max(entry["last_request_timestamp"] for entry in entries)
    opened = began + SKIP_SPAWN
    wall = ended - opened
    rate = requests / (ended - began)

    def spent(field: str) -> float:
        return at(samples, ended, field) - at(samples, opened, field)

    load, server, machine = spent("load"), spent("servers"), spent("machine")
    return {"users": users, "exit_code": child.returncode, "requests": requests, "failures": failures,
            "requests_per_s": round(rate, 1),
            "cores": {"locust_process": round(load / wall, 2), "servers": round(server / wall, 2),
                      "others": round(max(0.0, machine - load - server) / wall, 2),
                      "machine": round(machine / wall, 2)},
            "cpu_us_per_request": {"locust_process": round(load / (rate * wall) * 1e6, 1),
                                   "servers": round(server / (rate * wall) * 1e6, 1)},
            "stderr_tail": stderr.strip().splitlines()[-2:] if child.returncode else []}


def figures_of(folder: Path, samples: list[Sample], code: int, stderr: str, users: int,
               rounds_per_flow: int) -> dict[str, Any]:
    records = list(read_journal(folder / "journal.jsonl"))
    starts = [r["t"] for r in records if r["type"] == "start"]
    stopped = next(r["t"] for r in records if r["type"] == "run" and r.get("event") == "load-stopped")
    opened = min(starts) + SKIP_SPAWN
    wall = stopped - opened
    inside = [r for r in records if opened <= r["t"] < stopped]
    flows = [r for r in inside if r["type"] == "flow"]
    rounds = sum(1 for r in inside if r["type"] == "round")
    outcomes: dict[str, int] = {}
    for record in flows:
        outcomes[record["outcome"]] = outcomes.get(record["outcome"], 0) + 1

    def spent(field: str) -> float:
        return at(samples, stopped, field) - at(samples, opened, field)

    load, server, machine, fold = spent("load"), spent("servers"), spent("machine"), spent("fold")
    latencies = sorted(r["latency"] for r in inside if r["type"] == "round")
    return {
        "results": str(folder.relative_to(REPO_ROOT)),
        "exit_code": code,
        "stderr_tail": stderr.strip().splitlines()[-3:],
        "users": users,
        "window_s": round(wall, 2),
        "flows": len(flows),
        "flows_per_s": round(len(flows) / wall, 1),
        "rounds_per_s": round(rounds / wall, 1),
        "rounds_per_flow": round(rounds / len(flows), 2) if flows else None,
        "outcomes": outcomes,
        "round_latency_ms": {"p50": round(latencies[len(latencies) // 2] * 1e3, 1),
                             "p95": round(latencies[int(len(latencies) * 0.95)] * 1e3, 1)} if latencies else None,
        "cores": {"load_process": round(load / wall, 2), "fold_process": round(fold / wall, 2),
                  "servers": round(server / wall, 2),
                  "others": round(max(0.0, machine - load - fold - server) / wall, 2),
                  "machine": round(machine / wall, 2)},
        "cpu_us_per_round": {"load_process": round(load / rounds * 1e6, 1) if rounds else None,
                             "fold_process": round(fold / rounds * 1e6, 1) if rounds else None,
                             "harness": round((load + fold) / rounds * 1e6, 1) if rounds else None,
                             "servers": round(server / rounds * 1e6, 1) if rounds else None},
        "expected_rounds_per_flow": rounds_per_flow,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=sorted(SERVERS), default="stub", help="server under test (default stub)")
    parser.add_argument("--replicas", type=int, default=2,
                        help="server processes, round-robin (default 2; with one URL the harness treats it as a "
                             "balancer and opens a connection per round)")
    parser.add_argument("--users", default="16,64", help="agents per run, comma-separated (default 16,64)")
    parser.add_argument("--seconds", type=float, default=15.0, help="load duration of each run (default 15)")
    parser.add_argument("--repeat", type=int, default=2, help="runs per user count (default 2)")
    parser.add_argument("--code", type=Path, default=None,
                        help="another checkout of the harness (the code before a change): each of its runs follows "
                             "this checkout's, against the same servers")
    parser.add_argument("--no-plain", action="store_true",
                        help="leave out the floor (Locust's FastHttpUser POSTing round 1 after each run)")
    args = parser.parse_args(argv)
    user_counts = [int(part) for part in args.users.split(",") if part.strip()]
    if min([args.replicas, args.repeat, *user_counts]) < 1 or not 3 <= args.seconds <= 120:
        parser.error("counts must be positive and --seconds between 3 and 120")
    kind = SERVERS[args.server]
    started = datetime.now(UTC)
    figures: dict[str, Any] = {
        "benchmark": "flows_per_second",
        "command": shlex.join(["python", "-m", "benchmarks.flows_per_second",
                               *(sys.argv[1:] if argv is None else argv)]),
        "date": started.isoformat(timespec="seconds"),
        "machine": machine_facts(),
        "load_average_before": round(load_average(), 2),
        "settings": vars(args) | {"code": str(args.code) if args.code else None},
        "runs": [],
        "plain": [],
    }
    with servers(kind, args.replicas) as running:
        for users in user_counts:
            for _ in range(args.repeat):
                run = one_run(kind, running, users, args.seconds)
                run["load_average_after"] = round(load_average(), 2)
                figures["runs"].append(run)
                cores = run["cores"]
                print(f"{users:4d} users: {run['flows_per_s']:7.1f} flows/s, {run['rounds_per_s']:7.1f} rounds/s, "
                      f"p50/p95 {run['round_latency_ms']['p50']}/{run['round_latency_ms']['p95']} ms; cores: load "
                      f"process {cores['load_process']:.2f}, fold process {cores['fold_process']:.2f}, "
                      f"servers {cores['servers']:.2f}, others "
                      f"{cores['others']:.2f}; CPU/round: load {run['cpu_us_per_round']['load_process']} µs, "
                      f"servers {run['cpu_us_per_round']['servers']} µs; exit {run['exit_code']}; "
                      f"load avg {run['load_average_after']}", flush=True)
                if args.code is not None:
                    before = one_run(kind, running, users, args.seconds, code=args.code.resolve())
                    before["code"] = str(args.code)
                    before["load_average_after"] = round(load_average(), 2)
                    figures.setdefault("code_runs", []).append(before)
                    before["flows_per_s_ratio"] = round(run["flows_per_s"] / before["flows_per_s"], 3)
                    print(f"{users:4d} users, {args.code}: {before['flows_per_s']:7.1f} flows/s, CPU/round: load "
                          f"{before['cpu_us_per_round']['load_process']} µs; cores: load process "
                          f"{before['cores']['load_process']:.2f}, fold process {before['cores']['fold_process']:.2f}; "
                          f"exit {before['exit_code']}; flows/s this ÷ that {before['flows_per_s_ratio']}", flush=True)
                if not args.no_plain:
                    plain = plain_run(running, users, args.seconds)
                    plain["load_average_after"] = round(load_average(), 2)
                    plain["harness_rounds_to_plain_requests"] = round(run["rounds_per_s"] / plain["requests_per_s"], 3)
                    plain["harness_flows_to_plain_requests"] = round(run["flows_per_s"] / plain["requests_per_s"], 3)
                    figures["plain"].append(plain)
                    print(f"{users:4d} users, FastHttpUser plain POSTs: {plain['requests_per_s']:8.1f} requests/s "
                          f"({plain['failures']} failed); cores: locust {plain['cores']['locust_process']:.2f}, "
                          f"servers {plain['cores']['servers']:.2f}; CPU/request "
                          f"{plain['cpu_us_per_request']['locust_process']} µs; harness rounds/s to requests/s "
                          f"{plain['harness_rounds_to_plain_requests']}, flows/s to requests/s "
                          f"{plain['harness_flows_to_plain_requests']}", flush=True)
    best = max(figures["runs"], key=lambda run: run["flows_per_s"])
    figures["best"] = {"users": best["users"], "flows_per_s": best["flows_per_s"], "cores": best["cores"]}
    per_round = [run["cpu_us_per_round"]["load_process"] for run in figures["runs"]]
    figures["load_cpu_us_per_round"] = {"min": min(per_round), "median": statistics.median(per_round),
                                        "max": max(per_round)}
    if figures.get("code_runs"):
        ratios = [run["flows_per_s_ratio"] for run in figures["code_runs"]]
        figures["flows_per_s_ratio"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
        print(f"flows/s, this checkout ÷ {args.code}, run by run: median {statistics.median(ratios):.3f} "
              f"(from {min(ratios):.3f} to {max(ratios):.3f}, {len(ratios)} pairs)", flush=True)
    figures["duration_s"] = round((datetime.now(UTC) - started).total_seconds(), 1)
    write_figures("flows_per_second", figures, started)
    bad = [run for run in figures["runs"] if set(run["outcomes"]) != {"completed"}]
    bad += [plain for plain in figures["plain"] if plain["exit_code"] or plain["failures"]]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
