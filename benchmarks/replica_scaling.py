"""Whether two replicas hold a higher arrival rate than one: a real `mrtr-harness capacity` sweep on 1, then 2.

Return flows (two rounds of a replica's CPU each, one call to the shop's API) step up a ladder
of rates about 1.25x apart, so that a level falls between one replica's knee and two's; the
SLO is generous (p95 < 750 ms), so a replica past its knee breaks it by far while a step near
its knee does not. The second replica count starts at the first's highest hold.

This is a timing property of the machine as much as of the code: the harness and the shared
API take part of the two cores, and any other tenant takes more, so the gain of a second
replica shows only on a quiet machine. The sweep measures that other load per step (the
harness's and the target's own processes left out); read the held rates beside it. The test
suite keeps what does not depend on timing: a sweep's step on N replicas runs on N and spreads
its rounds over them (`tests/test_capacity.py`).

    python -m benchmarks.replica_scaling [--rates 50,62,78,97,121,151] [--step 4s]

Prints the highest rate each replica count held and the other load, and writes JSON to
`results/benchmarks/`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.cpu import load_average, machine_facts
from benchmarks.runs import REPO_ROOT, write_figures

SCENARIO = """grace = "1s"
name = "replica-scaling"
seed = 3
duration = "10s"
time_scale = 60
[target]
replicas = 1
[load]
arrival_rate = 20
[[flows]]
kind = "return"
[leads]
think = { dist = "lognormal", median = "6s", p95 = "18s" }
[expect]
"round_duration" = "p(95) < 750ms"
completed_ratio = ">= 0.9"
invariant_violations = "== 0"
"""


def sweep(folder: Path, rates: str, step: str, warmup: str) -> dict:
    """capacity.json of one sweep over 1 and 2 replicas."""
    scenario = folder / "scenario.toml"
    scenario.write_text(SCENARIO)
    subprocess.run([sys.executable, "-m", "harness", "capacity", str(scenario), "--results", str(folder / "results"),
                    "--quiet", "--replicas", "1,2", "--rates", rates, "--step", step, "--warmup", warmup],
                   check=True, cwd=REPO_ROOT, timeout=900)
    [results] = [path for path in (folder / "results").iterdir() if path.is_dir()]
    return json.loads((results / "capacity.json").read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="50,62,78,97,121,151", help="the ladder, flows/s")
    parser.add_argument("--step", default="4s", help="each step's load (default 4s)")
    parser.add_argument("--warmup", default="1s", help="discarded at each step's start (default 1s)")
    args = parser.parse_args()
    started = datetime.now(UTC)
    load_before = load_average()
    with tempfile.TemporaryDirectory() as folder:
        document = sweep(Path(folder), args.rates, args.step, args.warmup)
    held = {row["replicas"]: row["highest_rate_holding_slo"] or 0 for row in document["capacity"]}
    others = [step["other_load_cores"] for step in document["steps"] if step["other_load_cores"] is not None]
    result = {
        "date": started.isoformat(timespec="seconds"), "machine": machine_facts(),
        "load_average_before_after": [round(load_before, 2), round(load_average(), 2)],
        "rates": args.rates, "step": args.step, "warmup": args.warmup, "held": held,
        "other_load_cores_mean": round(sum(others) / len(others), 2) if others else None,
        "steps": [{key: step[key] for key in ("replicas", "rate", "judgement", "round_latency_p95", "throughput",
                                              "other_load_cores", "harness_cpu_cores")} for step in document["steps"]],
    }
    print(f"held: 1 replica {held.get(1, 0):g} flows/s, 2 replicas {held.get(2, 0):g} flows/s; "
          f"other processes used {result['other_load_cores_mean']} cores on average")
    write_figures("replica_scaling", result, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
