"""How fast `mrtr-harness triage` reads a big log, and in how much memory.

An on-call engineer points triage at a day of logs (`--once`) or at a busy deployment's
stream; it must keep up and must not grow with the log. This script writes a log of
`--lines` lines (default 1,000,000) in the shapes a deployment really prints: the shop's
plain lines, JSON records, rich console records wrapped at 80 columns (two physical lines
each), and a rejection every `--every` lines in each of the three shapes, rotating
through every reason the SDK logs. Then it runs the real command in a child process,

    python -m harness triage --once --json --file LOG        (and the same log on --stdin)

and reports lines per second (wall time of the child, start-up included) and the child's
peak RSS (`wait4`'s ru_maxrss), next to a baseline child that reads a ten-line log (the
interpreter and its imports), and the log's size. The counts triage prints are checked
against what was written, so a fast wrong answer cannot pass. Raw figures go to
`results/benchmarks/triage_throughput-<utc>.json`.

Run from the repository root:

    python benchmarks/triage_throughput.py [--lines 1000000] [--every 100]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # `python benchmarks/triage_throughput.py` puts benchmarks/ first, not the root
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.cpu import machine_facts
from benchmarks.runs import write_figures
from harness.mrtr.reasons import REASONS

REPLICAS = ("r1", "r2", "r3")

NOISE = (
    "2026-11-30T05:12:57.{ms:03d}Z INFO replica={replica} harness.shop.server: issue_refund round 1 for quote "
    "Q-{n} asked the lead (form elicitation)",
    "2026-11-30T05:12:57.{ms:03d}Z INFO replica={replica} mcp.server.streamable_http: POST /mcp 200 tools/call "
    "issue_refund in 4.1 ms",
    '{{"time": "2026-11-30T05:12:57.{ms:03d}Z", "level": "INFO", "logger": "harness.shop.api", "message": '
    '"refund R-{n} held for confirmation", "pod": "shop-{replica}"}}',
    "2026-11-30T05:12:57.{ms:03d}Z DEBUG replica={replica} harness.shop.store: quote Q-{n} stored (sqlite, 0.3 ms)",
    # a rich console record, wrapped at 80 columns: two physical lines
    "                    INFO     quote Q-{n} for order O-{n}: EUR 234.56,      server.py:118\n"
    "                             needs confirmation above the policy limit          ",
)


def rejection(shape: int, reason: str, replica: str, ms: int) -> str:
    """The SDK's rejection line in one of its three shapes (as the tests produce them for real)."""
    if shape == 0:
        return (f"2026-11-30T05:12:57.{ms:03d}Z WARNING replica={replica} mcp.server.request_state: "
                f"requestState rejected on tools/call: {reason}")
    if shape == 1:
        return json.dumps({"time": f"2026-11-30T05:12:57.{ms:03d}Z", "level": "WARNING",
                           "logger": "mcp.server.request_state",
                           "message": f"requestState rejected on tools/call: {reason}", "pod": replica})
    return (f"                    WARNING  requestState rejected on       request_state.py:263\n"
            f"                             tools/call: {reason:<38}")


def write_log(path: Path, lines: int, every: int) -> tuple[Counter[tuple[str, str]], int]:
    """Write about `lines` physical lines; returns the rejections written by (reason, replica) and the line count."""
    expected: Counter[tuple[str, str]] = Counter()
    written = 0
    n = 0
    with path.open("w", buffering=1 << 20) as out:
        while written < lines:
            n += 1
            replica = REPLICAS[n % len(REPLICAS)]
            if n % every == 0:
                k = n // every
                reason, shape = REASONS[k % len(REASONS)], k % 3
                text = rejection(shape, reason, replica, n % 1000)
                # rich lines carry no replica: the file has none either, so they count as "unknown"
                expected[(reason, "unknown" if shape == 2 else replica)] += 1
            else:
                text = NOISE[n % len(NOISE)].format(ms=n % 1000, replica=replica, n=n)
            out.write(text + "\n")
            written += text.count("\n") + 1
    return expected, written


def run_triage(*args: str, stdin: Path | None = None) -> dict[str, Any]:
    """One child `python -m harness triage --once --json ...`: its JSON, exit code, wall seconds and peak RSS."""
    command = [sys.executable, "-m", "harness", "triage", "--once", "--json", *args]
    with tempfile.TemporaryFile() as out, (stdin.open("rb") if stdin else open(os.devnull, "rb")) as source:
        started = time.perf_counter()
        child = subprocess.Popen(command, stdin=source, stdout=out, stderr=subprocess.PIPE, cwd=REPO_ROOT)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        stderr = child.stderr.read().decode() if child.stderr else ""
        out.seek(0)
        text = out.read().decode()
    if child.returncode not in (0, 1):
        raise SystemExit(f"triage exited with {child.returncode}: {stderr}")
    return {"result": json.loads(text), "exit_code": child.returncode, "wall_seconds": wall,
            "peak_rss_mib": usage.ru_maxrss / 1024, "cpu_seconds": usage.ru_utime + usage.ru_stime}


def check(result: dict[str, Any], expected: Counter[tuple[str, str]], lines: int) -> None:
    counted = Counter({(reason, replica): n for reason, replicas in result["by_reason_and_replica"].items()
                       for replica, n in replicas.items()})
    if counted != expected:
        raise SystemExit(f"wrong counts: expected {dict(expected)}, triage said {dict(counted)}")
    if result["lines"] != lines:
        raise SystemExit(f"wrong line count: wrote {lines}, triage read {result['lines']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000, help="physical lines in the log (default 1,000,000)")
    parser.add_argument("--every", type=int, default=100, help="one rejection every N records (default 100)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mrtr-triage-bench-") as tmp:
        folder = Path(tmp)
        small, big = folder / "small.log", folder / "big.log"
        small_expected, small_lines = write_log(small, 10, args.every)
        started = time.perf_counter()
        expected, lines = write_log(big, args.lines, args.every)
        print(f"wrote {lines:,} lines, {sum(expected.values()):,} rejections, "
              f"{big.stat().st_size / 2**20:.1f} MiB in {time.perf_counter() - started:.1f} s", flush=True)
        baseline = run_triage("--file", str(small))
        check(baseline["result"], small_expected, small_lines)
        runs = {}
        for name, run_args, stdin in (("file", ("--file", str(big)), None), ("stdin", ("--stdin",), big)):
            run = run_triage(*run_args, stdin=stdin)
            check(run["result"], expected, lines)
            run["lines_per_second"] = lines / run["wall_seconds"]
            runs[name] = run
            print(f"--{name}: {run['lines_per_second']:,.0f} lines/s ({run['wall_seconds']:.2f} s wall, "
                  f"{run['cpu_seconds']:.2f} s CPU), peak RSS {run['peak_rss_mib']:.1f} MiB "
                  f"(baseline {baseline['peak_rss_mib']:.1f} MiB), exit {run['exit_code']}", flush=True)
        size_mib = big.stat().st_size / 2**20
    started = datetime.now(UTC)
    record = {
        "benchmark": "triage_throughput", "date": started.strftime("%Y%m%dT%H%M%SZ"), "lines": lines,
        "rejections": sum(expected.values()),
        "log_mib": size_mib, "every": args.every,
        "machine": machine_facts(),
        "baseline": {key: value for key, value in baseline.items() if key != "result"},
        "runs": {name: {key: value for key, value in run.items() if key != "result"} for name, run in runs.items()},
    }
    write_figures("triage_throughput", record, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
