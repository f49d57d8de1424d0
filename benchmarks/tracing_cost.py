"""Tracing on against off: the harness's CPU per MRTR round (its load process and its fold), side by side.

The question (issue 33): with OpenTelemetry on, is the whole harness process tree's CPU per round at
most 1.10 times what it is with tracing off? Each measurement is a real `mrtr-harness run` in a child
process, against two stub servers (`benchmarks/stub_server.py`: two rounds a flow, a few tens of µs a
round) that refuse a seeded 1% of continuation rounds with -32602 and log each refusal, so the run
reconciles them and tracing keeps every flow that had one, plus its seeded share of the rest. "On"
is the same run with `OTEL_EXPORTER_OTLP_ENDPOINT` pointing at an OTLP/HTTP receiver (oteltap) in
this script's process: the harness exports its spans and its metrics there. The receiver's CPU is
the backend's, not the harness's: it shows under "others".

The variants alternate (off, on / on, off / ...) so both see the same machine, and each pair's ratio
is printed; the figure is the median of the pairs' ratios of the harness's CPU per round (load
process + fold, sampled from /proc as in `benchmarks/flows_per_second.py`, over the load's window
less its first second).

    python -m benchmarks.tracing_cost [--seconds 15] [--pairs 3] [--reject 0.01] [--code DIR]
    python -m benchmarks.tracing_cost --instructions [--window 20] [--code DIR]

`--arrival-rate N` runs the open model at N flows a second instead of the closed model at top speed: both
variants then do the same work a second, and a load process with headroom is measured rather than one
that takes a whole core either way.

With `--instructions`, the same two runs (off, then on) are counted by callgrind instead
(`benchmarks/instructions.py`: user-space instructions per flow of the load process and its fold over
`--window` seconds under valgrind): the work tracing adds, which the machine's neighbours cannot move.
CPU time on this 2-core machine also counts the contention the "on" run brings with it (its fold's
extra work and the receiver share the cores with a load process that needs one whole): a slower
instruction is counted as more CPU. Under valgrind a run goes about 50 times slower, so per-second
costs (the exporters' timers) weigh more there than at full speed.

Raw figures go to `results/benchmarks/tracing_cost-<utc>.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.cpu import load_average, machine_facts
from benchmarks.flows_per_second import figures_of, sample_until_exit
from benchmarks.runs import REPO_ROOT, RESULTS, write_figures
from benchmarks.soak import SCENARIO, log_sources, stub_servers
from tests.otlp import OtlpReceiver, otlp_receiver


def scenario_text(seconds: float, urls: list[str], logs: list[str], arrival_rate: float | None) -> str:
    """The soak's scenario against the stubs, the refusals' logs read; with `arrival_rate`, the open model at that
    rate of flows a second instead of 16 closed-model agents as fast as they go."""
    text = SCENARIO.format(seconds=seconds, urls=json.dumps(urls), logs=f"\nlogs = {json.dumps(logs)}")
    if arrival_rate is not None:
        closed = 'model = "closed"\nusers = 16\n'
        if closed not in text:
            raise SystemExit("the soak's scenario no longer names its closed model as this benchmark expects")
        text = text.replace(closed, f"arrival_rate = {arrival_rate!r}\n")
    return text


def harness_env(otlp: str | None) -> dict[str, str]:
    """This environment without OpenTelemetry's variables; with `otlp`, export to that endpoint (tracing on)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    if otlp is not None:
        env.update(OTEL_EXPORTER_OTLP_ENDPOINT=otlp, OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf")
    return env


@contextmanager
def stubs_and_receiver(reject: float) -> Iterator[tuple[list[str], list[str], OtlpReceiver]]:
    """Two stub servers refusing `reject` of continuation rounds (their URLs and log sources) and a receiver."""
    with tempfile.TemporaryDirectory(prefix="tracing-cost-logs-") as logs_dir, \
            stub_servers(2, reject, Path(logs_dir)) as running, otlp_receiver() as receiver:
        yield [server.url for server in running], log_sources(Path(logs_dir), 2), receiver


def one_run(code: Path, seconds: float, urls: list[str], logs: list[str], otlp: str | None,
            arrival_rate: float | None = None) -> dict[str, Any]:
    """One `mrtr-harness run` of `code`'s harness; with `otlp`, exporting to that endpoint. Its window's figures."""
    folder = RESULTS / "runs"
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tracing-cost-") as tmp:
        scenario = Path(tmp) / "scenario.toml"
        scenario.write_text(scenario_text(seconds, urls, logs, arrival_rate))
        env = {**harness_env(otlp), "PYTHONPATH": str(code)}
        before = set(folder.iterdir())
        child = subprocess.Popen([sys.executable, "-m", "harness", "run", str(scenario), "--quiet",
                                  "--results", str(folder)], cwd=code, env=env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        samples, (_, stderr) = sample_until_exit(child, [])
    (made,) = set(folder.iterdir()) - before
    figures = figures_of(made, samples, child.returncode, stderr, users=16, rounds_per_flow=2)
    if arrival_rate is not None:
        figures.pop("users", None)
        figures["arrival_rate"] = arrival_rate
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="load duration of each run (default 15)")
    parser.add_argument("--pairs", type=int, default=3, help="pairs of runs, off and on (default 3)")
    parser.add_argument("--reject", type=float, default=0.01,
                        help="share of continuation rounds the stubs refuse (default 0.01)")
    parser.add_argument("--code", type=Path, default=REPO_ROOT, help="the checkout whose harness runs")
    parser.add_argument("--arrival-rate", type=float, default=None,
                        help="flows a second in the open model (default: 16 closed-model agents at top speed)")
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions per flow under callgrind instead of CPU time per round")
    parser.add_argument("--window", type=float, default=20.0, help="with --instructions: seconds counted (default 20)")
    args = parser.parse_args(argv)
    if args.instructions:
        if args.arrival_rate is not None:  # under valgrind a run goes about 50 times slower: no rate of thousands
            parser.error("--instructions counts the closed model only: leave out --arrival-rate")
        return instructions(args)
    started = datetime.now(UTC)
    pairs: list[dict[str, Any]] = []
    with stubs_and_receiver(args.reject) as (urls, logs, receiver):
        for number in range(args.pairs):
            order = ("off", "on") if number % 2 == 0 else ("on", "off")
            pair: dict[str, Any] = {}
            for variant in order:
                spans_before = len(receiver.spans())
                figures = one_run(args.code, args.seconds, urls, logs, receiver.url if variant == "on" else None,
                                  args.arrival_rate)
                figures["spans_received"] = len(receiver.spans()) - spans_before
                pair[variant] = figures
            off, on = pair["off"]["cpu_us_per_round"]["harness"], pair["on"]["cpu_us_per_round"]["harness"]
            pair["ratio"] = round(on / off, 3) if off and on else None
            pairs.append(pair)
            print(f"pair {number + 1}: off {off} µs/round ({pair['off']['rounds_per_s']} rounds/s), "
                  f"on {on} µs/round ({pair['on']['rounds_per_s']} rounds/s, {pair['on']['spans_received']} spans "
                  f"received), ratio {pair['ratio']}", flush=True)
    ratios = [pair["ratio"] for pair in pairs if pair["ratio"] is not None]
    median = statistics.median(ratios) if ratios else None
    print(f"median on/off ratio of the harness's CPU per round: {median}")
    write_figures("tracing_cost", {"machine": machine_facts(), "load_average": load_average(),
                                    "args": {key: str(value) for key, value in vars(args).items()},
                                    "pairs": pairs, "median_ratio": median}, started)
    return 0 if len(ratios) == args.pairs else 1


def instructions(args: argparse.Namespace) -> int:
    """Off, then on, each a run under callgrind: instructions per flow, and on's ratio to off."""
    from benchmarks.instructions import one_side

    started = datetime.now(UTC)
    sides: dict[str, Any] = {}
    with stubs_and_receiver(args.reject) as (urls, logs, receiver):
        text = scenario_text(3600, urls, logs, None)  # the closed model: valgrind could not keep a rate
        for variant in ("off", "on"):
            env = harness_env(receiver.url if variant == "on" else None)
            with tempfile.TemporaryDirectory(prefix="tracing-cost-") as tmp:
                sides[variant] = one_side(args.code, text, args.window, Path(tmp), env)
            sides[variant]["spans_received"] = len(receiver.spans())
            print(variant, json.dumps(sides[variant]), flush=True)
    ratios = {key: round(sides["on"][key] / sides["off"][key], 3)
              for key in ("load_instructions_per_flow", "fold_instructions_per_flow", "harness_instructions_per_flow")
              if sides["on"].get(key) and sides["off"].get(key)}
    print(f"on/off instructions per flow: {ratios}")
    write_figures("tracing_cost", {"mode": "instructions", "machine": machine_facts(),
                                    "args": {key: str(value) for key, value in vars(args).items()},
                                    "sides": sides, "ratios": ratios}, started)
    return 0 if "harness_instructions_per_flow" in ratios else 1


if __name__ == "__main__":
    sys.exit(main())
