"""Trials per minute of a hunt of a healthy shop with `[hunt] reuse` (the default), with `--no-reuse`, and with
`hunt --shares N` (N shares of the same search at once on this machine, merged).

The same scenario as `benchmarks.hunt_trials`'s pace (the `ephemeral-keys` catalogue scenario with
its key ring shared: 3 replicas; restarts, kills and pauses drawn, which it survives), the same seed
and the same number of trials of the same length, no control trials: `python -m harness hunt` in a
child process, timed from outside, its trials read back from `hunt.jsonl`. The settings alternate,
`--rounds` times each (off, on, then the shares), so a load that drifts on a shared machine falls on all.
The shared setting is one `hunt --shares N` command, timed from outside like the others: its shares'
start to the end of their merge, whose folder is the one hunt a user reads; each share forks its
replicas from its own zygote (reuse on).

    python -m benchmarks.hunt_reuse [--trials 6] [--trial-duration 3s] [--rounds 1] [--shares 2]

Prints, per setting, the wall seconds, the trials' median and trials per minute (of the whole
hunt's wall time, its start and end included, as `hunt_trials` counts them), and the ratio; writes
JSON to `results/benchmarks/`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.cpu import load_average, machine_facts
from benchmarks.hunt_trials import PACE_ACTIONS, hunted
from benchmarks.runs import REPO_ROOT, write_figures
from harness.hunt.toml_file import document


def one_hunt(scenario: Path, results: Path, reuse: bool) -> dict[str, Any]:
    """One hunt with reuse on or off: its wall seconds and each trial's seconds, as its journal has them."""
    results.mkdir(parents=True, exist_ok=True)
    before = set(results.iterdir())
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "harness", "hunt", str(scenario), "--results", str(results),
                           "--reuse" if reuse else "--no-reuse"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=3600)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"the hunt (reuse {reuse}) did not hold ({done.returncode}): {done.stderr[-1500:]}")
    [folder] = set(results.iterdir()) - before
    return timed(folder, seconds)


def timed(folder: Path, seconds: float) -> dict[str, Any]:
    """A hunt's wall seconds, and each trial's seconds and the outcomes, as its journal has them."""
    records = [json.loads(line) for line in (folder / "hunt.jsonl").read_text().splitlines()]
    trials = [record for record in records if record["type"] == "trial"]
    return {"wall_seconds": round(seconds, 2), "trial_seconds": [trial["seconds"] for trial in trials],
            "outcomes": sorted({trial["outcome"] for trial in trials})}


def shared_hunt(scenario: Path, results: Path, shares: int) -> dict[str, Any]:
    """The same search as one `hunt --shares N` (reuse on): the wall seconds of that one command, the shares' start
    to the merge's end, and each trial's seconds from the merged journal."""
    results.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "harness", "hunt", str(scenario), "--results", str(results),
                           "--reuse", "--shares", str(shares)], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=3600)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"the shared hunt did not hold ({done.returncode}): {done.stderr[-1500:]}")
    [merged] = results.glob("*-shares/*-merged")
    return {**timed(merged, seconds), "shares": shares}


def summed(hunts: list[dict[str, Any]]) -> dict[str, Any]:
    """Every hunt of one setting together: trials, wall seconds, the median trial and trials per minute."""
    trials = [seconds for hunt in hunts for seconds in hunt["trial_seconds"]]
    wall = sum(hunt["wall_seconds"] for hunt in hunts)
    return {"hunts": len(hunts), "trials": len(trials), "wall_seconds": round(wall, 1),
            "trial_seconds_median": round(statistics.median(trials), 2),
            "trials_per_minute": round(60 * len(trials) / wall, 2),
            "outcomes": sorted({outcome for hunt in hunts for outcome in hunt["outcomes"]})}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=6, help="trials of each hunt (default 6)")
    parser.add_argument("--trial-duration", default="3s", help="each trial's load (default 3s)")
    parser.add_argument("--rounds", type=int, default=1, help="hunts of each setting, alternating (default 1)")
    parser.add_argument("--shares", type=int, default=2,
                        help="hunts at once for the shared setting (default 2; 0 or 1: not run)")
    args = parser.parse_args()
    started = datetime.now(UTC)
    load_before = load_average()
    bounds = {"trials": args.trials, "controls": 0, "trial_duration": args.trial_duration, "budget": "4h",
              "actions": list(PACE_ACTIONS)}
    runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    shared: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="hunt-reuse-") as folder:
        scenario = Path(folder) / "hunt-reuse.toml"
        scenario.write_text(document(tomllib.loads(hunted("ephemeral-keys", bounds, keyring="file"))))
        for round_ in range(args.rounds):
            for reuse in (False, True):
                print(f"round {round_ + 1}: a hunt of {args.trials} trials, reuse {'on' if reuse else 'off'} ...",
                      flush=True)
                runs[reuse].append(one_hunt(scenario, Path(folder) / ("reuse" if reuse else "fresh"), reuse))
            if args.shares > 1:
                print(f"round {round_ + 1}: the same {args.trials} trials as {args.shares} shares at once, merged ...",
                      flush=True)
                shared.append(shared_hunt(scenario, Path(folder) / f"shared-{round_}", args.shares))
    off, on = summed(runs[False]), summed(runs[True])
    figures = {"reuse_off": off, "reuse_on": on,
               "ratio_trials_per_minute": round(on["trials_per_minute"] / off["trials_per_minute"], 2),
               "hunts": {"off": runs[False], "on": runs[True], "shared": shared}}
    if shared:
        figures["shared"] = summed(shared)
        figures["ratio_shared_to_off"] = round(figures["shared"]["trials_per_minute"] / off["trials_per_minute"], 2)
    result = {"date": started.isoformat(timespec="seconds"), "args": vars(args), "machine": machine_facts(),
              "load_before": load_before, "load_after": load_average(), "figures": figures}
    print(json.dumps({key: value for key, value in figures.items() if key != "hunts"}, indent=2))
    write_figures("hunt_reuse", result, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
