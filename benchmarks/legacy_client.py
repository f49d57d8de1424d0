"""What a 2025-era host's call costs against a 2026-07-28 one's, on the same replica in the same run.

A `[[hosts]]` entry with a 2025 protocol runs the SDK's own `Client` (`harness.mrtr.legacy`):
per call it opens a session (initialize, initialized), sends `tools/call`, answers the
server's `elicitation/create` on the call's stream, and ends the session (DELETE). The
2026-07-28 host's `MrtrClient` sends one stateless POST per round. This measures one
`issue_refund` call on an order above the refund limit, which asks once and releases, both
ways, against one replica started with `--serve-2025` (so both eras are served, in SSE
mode): the load process's CPU per call (`time.process_time()`, gevent patched first, as a
load process is), the replica's CPU per call (`/proc/<pid>/stat`) and the wall time per
call, with `--concurrency` greenlets each. The quotes are made before each window, so only
the issue call is measured. Windows alternate (modern, legacy, modern, ...), `--repeat` of
each, since the machine is shared.

Run from the repository root:

    python -m benchmarks.legacy_client [--calls 150] [--repeat 3] [--concurrency 4]

It prints the figures and writes them to `results/benchmarks/legacy_client-<utc>.json`.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()  # a load process: patch first, once

import argparse
import statistics
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import gevent.pool

from benchmarks.cpu import machine_facts, window
from benchmarks.runs import write_figures
from harness.mrtr.client import MrtrClient, RoundRecord
from harness.mrtr.legacy import QUESTION_KEY, LegacyClient, LegacyLoop
from harness.mrtr.outcome import Outcome
from harness.mrtr.routing import Router


def release(record: RoundRecord) -> dict[str, Any]:
    return {key: {"action": "accept", "content": {"release": True}} for key in record.input_requests or {}}


def quotes(client: MrtrClient, orders: list[str], count: int) -> list[str]:
    """`count` fresh quotes on held orders (each issue call needs its own)."""
    made = []
    for index in range(count):
        result = client.call_tool("quote_refund", {"order_id": orders[index % len(orders)]}, lambda record: None)
        made.append(result.result["structuredContent"]["quote_id"])  # type: ignore[index]
    return made


def measure(call: Callable[[str], Outcome], quote_ids: list[str], concurrency: int, pids: dict[str, int]
            ) -> dict[str, Any]:
    outcomes: list[Outcome] = []
    pool = gevent.pool.Pool(concurrency)
    with window(pids) as measured:
        for quote_id in quote_ids:
            pool.spawn(lambda q=quote_id: outcomes.append(call(q)))
        pool.join()
    calls = len(quote_ids)
    return {"calls": calls, "completed": sum(outcome is Outcome.COMPLETE for outcome in outcomes),
            "client_us_per_call": round(measured.own / calls * 1e6),
            "replica_us_per_call": round(measured.processes["replica"] / calls * 1e6),
            "wall_ms_per_call": round(measured.wall / calls * 1e3 * concurrency, 2),
            "cores": measured.cores()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=150)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    started = datetime.now(UTC)
    from harness.shop.orders import build_orders
    from harness.targets.local_deployment import LocalDeployment, ReplicaOptions

    held = build_orders().order_ids(needs_confirmation=True)
    runs: dict[str, list[dict[str, Any]]] = {"2026-07-28": [], "2025": []}
    with tempfile.TemporaryDirectory(prefix="legacy-client-") as tmp:
        deployment = LocalDeployment(Path(tmp), replicas=1)
        try:
            deployment.start([ReplicaOptions(serve_2025=True)])
            url, replica = deployment.replica_urls[0], deployment.replicas[0]
            assert replica.pid is not None
            pids = {"replica": replica.pid}
            modern = MrtrClient(Router([url], "round-robin"), capabilities={"elicitation": {"form": {}, "url": {}}})
            legacy = LegacyClient(Router([url], "round-robin"), LegacyLoop(), elicitation=True)

            def modern_call(quote_id: str) -> Outcome:
                return modern.call_tool("issue_refund", {"quote_id": quote_id}, release).outcome

            def legacy_call(quote_id: str) -> Outcome:
                steps = legacy.call_steps("issue_refund", {"quote_id": quote_id},
                                          lambda record: {QUESTION_KEY: {"action": "accept",
                                                                         "content": {"release": True}}})
                try:
                    while True:
                        next(steps)
                except StopIteration as done:
                    return done.value.outcome  # type: ignore[no-any-return]

            measure(legacy_call, quotes(modern, held, 10), args.concurrency, pids)  # warm both paths up
            measure(modern_call, quotes(modern, held, 10), args.concurrency, pids)
            for _ in range(args.repeat):
                for era, call in (("2026-07-28", modern_call), ("2025", legacy_call)):
                    figures = measure(call, quotes(modern, held, args.calls), args.concurrency, pids)
                    runs[era].append(figures)
                    print(era, figures, flush=True)
        finally:
            deployment.stop()
    summary = {era: {key: statistics.median(run[key] for run in windows)
                     for key in ("client_us_per_call", "replica_us_per_call", "wall_ms_per_call")}
               for era, windows in runs.items()}
    ratios = {key: round(summary["2025"][key] / summary["2026-07-28"][key], 2) for key in summary["2025"]}
    print("median per call:", summary, "\n2025 / 2026-07-28:", ratios)
    write_figures("legacy_client", {"machine": machine_facts(), "args": vars(args), "started": started.isoformat(),
                                    "windows": runs, "median": summary, "ratio_2025_to_modern": ratios}, started)


if __name__ == "__main__":
    main()
