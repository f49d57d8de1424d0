"""Output contracts on against off: the load process's CPU per completed round, in a real run of the shop.

Every completed tool result is checked against the `outputSchema` its tool declared in tools/list
(`harness.load.output_contracts`, always on). What that costs the load generator is measured on the
path users run: `mrtr-harness run` of the smoke scenario (embedded shop, three replicas, sqlite,
leads thinking, journal, metrics, Locust, the log collector) at `--rate` flows/s for `--seconds`,
in two arms that differ only in what the shop declares:

* `declared`: the shop's tools declare their outputSchema (as always): every completed round is checked;
* `none`: the replicas start with `MRTR_SHOP_NO_OUTPUT_SCHEMA=1` and declare none (their results
  unchanged, `structuredContent` included): the harness reads tools/list once and checks nothing.

The arms alternate (declared, none / none, declared / ...) so both see the same machine; each run
is sampled from `/proc` as `benchmarks/client_cpu.py --whole-run` does (its `whole_run`: the load's
middle, `--skip` seconds after the load started to 3 s before it stops). The figure is the
harness's CPU per completed round (the rounds whose result is checked), each arm's, and their
ratio per pair (declared ÷ none); its median and spread are printed. Beside it, the same ratio of the
replicas' CPU per round, which the check cannot move: how far the machine alone moves a pair.

Beside it, the check alone: `OutputContracts.mismatch` called in this process on the shop's own
quote and refund results against the schemas the SDK derives from the shop's return types, µs per
call (`time.process_time`): the same work without the run's noise, to set against the per-round
figure.

Run from the repository root:

    python -m benchmarks.output_contracts [--runs 3] [--rate 12] [--seconds 20] [--skip 5]

It prints the figures and writes them as JSON to `results/benchmarks/output_contracts-<utc>.json`.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.client_cpu import whole_run  # patches with gevent on import, as a load process is
from benchmarks.cpu import load_average, machine_facts
from benchmarks.runs import REPO_ROOT, write_figures
from harness.load.output_contracts import OutputContracts
from harness.shop.server import NO_OUTPUT_SCHEMA_ENV, Quote, RefundView

ARMS = {"declared": {NO_OUTPUT_SCHEMA_ENV: "0"}, "none": {NO_OUTPUT_SCHEMA_ENV: "1"}}
"""Each arm's environment for the run (the replicas it starts inherit it)."""
CHECKS = 20_000


def per_completed_round(run: dict[str, Any]) -> float | None:
    """The harness's CPU per completed round of one run, in ms (None: no completed round in its window)."""
    return run["harness_cpu_s"] / run["completed_rounds"] * 1000 if run["completed_rounds"] else None


def check_alone() -> dict[str, float]:
    """µs of CPU per `OutputContracts.mismatch` on a conforming quote and refund, the shop's schemas as the SDK
    derives them."""
    from mcp.server.mcpserver.utilities.func_metadata import func_metadata

    def quote_refund() -> Quote: ...
    def issue_refund() -> RefundView: ...

    tools = [{"name": fn.__name__, "inputSchema": {}, "outputSchema": func_metadata(fn).output_schema}
             for fn in (quote_refund, issue_refund)]
    contracts = OutputContracts(lambda line: [{"tools": tools}])
    results = {
        "quote_refund": Quote(quote_id="Q-0123456789", order_id="O-1000", amount="180.00", needs_confirmation=True),
        "issue_refund": RefundView(refund_id="R-0123456789", order_id="O-1000", quote_id="Q-0123456789",
                                   amount="180.00", status="released"),
    }
    figures = {}
    for tool, model in results.items():
        structured = model.model_dump(mode="json")
        result = {"content": [{"type": "text", "text": model.model_dump_json()}], "structuredContent": structured}
        if contracts.mismatch(tool, result) is not None:
            raise SystemExit(f"the shop's {tool} result does not conform to its own schema")
        began = time.process_time()
        for _ in range(CHECKS):
            contracts.mismatch(tool, result)
        figures[tool] = round((time.process_time() - began) / CHECKS * 1e6, 1)
    return figures


def spread(values: list[float]) -> dict[str, float]:
    return {"min": round(min(values), 3), "median": round(statistics.median(values), 3), "max": round(max(values), 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each arm, alternating (default 3)")
    parser.add_argument("--rate", type=int, default=12, help="flows/s of each run (default 12)")
    parser.add_argument("--seconds", type=int, default=20, help="load duration of each run (default 20)")
    parser.add_argument("--skip", type=float, default=5.0,
                        help="seconds after the load's start left out of a run's window (default 5)")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.seconds < args.skip + 5:
        parser.error("--runs must be positive and --seconds at least --skip + 5")
    started = datetime.now(UTC)
    print(f"output contracts, declared against none: {args.runs} pair(s) of runs of the smoke scenario at "
          f"{args.rate} flows/s for {args.seconds} s:", flush=True)
    pairs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="output-contracts-") as tmp:
        for number in range(args.runs):
            pair: dict[str, Any] = {}
            for arm in ("declared", "none") if number % 2 == 0 else ("none", "declared"):
                run = whole_run(REPO_ROOT, Path(tmp), args.rate, args.seconds, args.skip, 3.0, env=ARMS[arm])
                ms = per_completed_round(run)
                run["harness_ms_per_completed_round"] = round(ms, 4) if ms is not None else None
                pair[arm] = run
                print(f"  {arm}: exit {run['exit_code']}, {run['completed_rounds']} completed of {run['rounds']} "
                      f"rounds in {run['window_s']} s; harness {run['harness_ms_per_completed_round']} ms per "
                      f"completed round ({run['harness_ms_per_round']} per round), replicas "
                      f"{run['replica_ms_per_round']} ms/round; cores {run['cores']}; load average "
                      f"{run['load_average']}", flush=True)
            on, off = pair["declared"]["harness_ms_per_completed_round"], pair["none"]["harness_ms_per_completed_round"]
            pair["ratio"] = round(on / off, 3) if on and off else None
            replicas_on, replicas_off = (pair[arm]["replica_ms_per_round"] for arm in ("declared", "none"))
            pair["replica_ratio"] = round(replicas_on / replicas_off, 3) if replicas_on and replicas_off else None
            pairs.append(pair)
            print(f"pair {number + 1}: declared ÷ none {pair['ratio']} (the replicas' CPU per round, which the check "
                  f"does not touch: {pair['replica_ratio']})", flush=True)
    alone = check_alone()
    print(f"the check alone: µs per completed result {alone}", flush=True)
    ratios = [pair["ratio"] for pair in pairs if pair["ratio"] is not None]
    arms = {arm: spread([pair[arm]["harness_ms_per_completed_round"] for pair in pairs
                         if pair[arm]["harness_ms_per_completed_round"]]) for arm in ARMS}
    if ratios:
        print(f"harness ms per completed round: declared {arms['declared']}, none {arms['none']}; "
              f"declared ÷ none by pair {spread(ratios)}")
    write_figures("output_contracts", {
        "benchmark": "output_contracts",
        "command": shlex.join(["python", "-m", "benchmarks.output_contracts",
                               *(sys.argv[1:] if argv is None else argv)]),
        "date": started.isoformat(timespec="seconds"), "machine": machine_facts(),
        "load_average_at_end": round(load_average(), 2), "settings": vars(args), "pairs": pairs,
        "harness_ms_per_completed_round": arms, "ratio": spread(ratios) if ratios else None,
        "check_alone_us": alone, "duration_s": round((datetime.now(UTC) - started).total_seconds(), 1),
    }, started)
    failed = len(ratios) != args.runs or any(pair[arm]["exit_code"] != 0 for pair in pairs for arm in ARMS)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
