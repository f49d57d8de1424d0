"""What the fault proxy costs with no fault active: the load process's CPU per round, proxy on against off.

Two variants of one scenario (the embedded shop, 2 replicas, an open model at `--rate`
flows/s of above-limit refunds, leads thinking 0.33 s), run alternately as real
`mrtr-harness run` child processes in one sitting, so both see the same machine:

* off: no network step, so no proxy; the load talks to the replicas;
* on: one `network` step at the very end of the load (`toxicity = 0`, for 0.1 s), so the
  run puts a proxy in front of each replica and the load talks through it, with no fault
  set for all but the last tenth of a second (and then one that hits nothing).

Each run's own `run cpu` record gives the figures: the load process's CPU per round
(the proxy's greenlets run in it) and the replicas' CPU per round. The ratio on/off of the
harness's figure is the proxy's overhead; the replicas' figure should not move.

    python -m benchmarks.proxy_overhead [--seconds 30] [--rate 8] [--repeat 3]

Raw figures go to `results/benchmarks/proxy_overhead-<utc>.json`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.cpu import load_average, machine_facts
from benchmarks.runs import REPO_ROOT, write_figures
from harness.journal.writer import read_journal

SCENARIO = """
name = "proxy-overhead-{variant}"
seed = 7
duration = "{seconds}s"
time_scale = 60
[target]
kind = "embedded"
replicas = 2
store = "sqlite"
[load]
model = "open"
arrival_rate = {rate}
routing = "round-robin"
[[flows]]
kind = "refund"
amount = "above-limit"
[leads]
think = {{ dist = "constant", value = "20s" }}
"""

AT_THE_END = """
[[chaos]]
action = "network"
at = "{at}s"
duration = "0.1s"
fault = "latency"
delay = 0
toxicity = 0
"""


def run_once(variant: str, seconds: int, rate: float, folder: Path) -> dict[str, Any]:
    """One real run of the variant; its `run cpu` record and what the machine did meanwhile."""
    text = SCENARIO.format(variant=variant, seconds=seconds, rate=rate)
    if variant == "on":
        text += AT_THE_END.format(at=seconds - 0.1)
    folder.mkdir(parents=True, exist_ok=True)
    scenario = folder / f"{variant}.toml"
    scenario.write_text(text)
    results = folder / f"results-{variant}"
    before = load_average()
    process = subprocess.run([sys.executable, "-m", "harness", "run", str(scenario), "--results", str(results),
                              "--quiet"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=seconds + 120)
    if process.returncode != 0:
        raise SystemExit(f"{variant}: the run exited {process.returncode}:\n{process.stdout}{process.stderr}")
    (run,) = sorted(path for path in results.iterdir() if path.is_dir())
    records = list(read_journal(run / "journal.jsonl"))
    (cpu,) = [r for r in records if r.get("type") == "run" and r.get("event") == "cpu"]
    proxied = "network faults through proxies" in process.stderr + process.stdout
    if proxied != (variant == "on"):
        raise SystemExit(f"{variant}: the proxy was {'on' if proxied else 'off'}")
    return {"variant": variant, "load_average_before": before, "load_average_after": load_average(),
            **{key: cpu[key] for key in ("rounds", "harness_seconds", "harness_per_round_ms", "replica_seconds",
                                         "replica_per_round_ms")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--rate", type=float, default=8.0)
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    started = datetime.now(UTC)
    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        for index in range(options.repeat):
            for variant in ("off", "on") if index % 2 == 0 else ("on", "off"):
                figures = run_once(variant, options.seconds, options.rate, Path(scratch) / f"{index}")
                runs.append(figures)
                print(f"{variant:>3}: {figures['rounds']} rounds, harness {figures['harness_per_round_ms']} ms/round,"
                      f" replicas {figures['replica_per_round_ms']} ms/round", flush=True)
    median = {variant: {key: statistics.median(r[key] for r in runs if r["variant"] == variant)
                        for key in ("harness_per_round_ms", "replica_per_round_ms")} for variant in ("off", "on")}
    ratio = median["on"]["harness_per_round_ms"] / median["off"]["harness_per_round_ms"]
    print(f"harness CPU per round, proxy on / off (medians): {ratio:.3f}")
    write_figures("proxy_overhead", {"started": started.isoformat(), "options": vars(options),
                                     "machine": machine_facts(), "runs": runs, "median": median,
                                     "harness_on_over_off": round(ratio, 3)}, started)


if __name__ == "__main__":
    main()
