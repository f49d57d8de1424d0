"""A hunt's pace and its shrink's cost against the embedded shop, and what it makes of four planted faults.

Two modes, each running the commands users run (`python -m harness hunt` and `run` in child
processes), timed from outside and read back from each hunt's `hunt.jsonl`:

- the pace (default): a hunt of a healthy shop (the `ephemeral-keys` catalogue scenario with its
  key ring shared; `--trials` trials of `--trial-duration`, restarts, kills and pauses drawn,
  which it survives) for trials per minute, side by side with `--runs`
  plain `mrtr-harness run`s of the same scenario and duration (no chaos): how much of a trial is
  the run itself and how much the hunt's overhead (drawing, writing the trial's file, judging,
  the journal); then one hunt of a planted fault (per-process keys behind round-robin) for the
  shrink's cost, its runs and seconds, with the shrink's default bounds unless given;
- `--faults`: a hunt of each of four faults the shop can be configured with, each from its
  catalogue scenario (scenarios/on-call/, its `[[chaos]]` and `[reproduces]` dropped, its
  `[expect]` the property): per-process keys (`ephemeral-keys`), a replica whose clock runs
  ahead (`clock-ahead`), records in one process's memory (`records-in-memory`), and a key
  rotation that retires the old key early (`rotation-retire-early`: the shop is healthy, the
  hunt must draw that rotation's order among the three). Per fault: the trials and seconds the
  search took to find it, the chaos steps the shrink left, the shrink's runs and seconds, and
  the minimal schedule's reproduction rate over `--reproduce` reruns.

    python -m benchmarks.hunt_trials [--trials 20] [--runs 5] [--trial-duration 3s]
    python -m benchmarks.hunt_trials --faults [--only clock-ahead] [--trials 20] [--reproduce 10]

Prints the figures and writes JSON to `results/benchmarks/`. Each hunt's results folder is kept
under a temporary folder named on the terminal until the script ends.
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
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.cpu import load_average, machine_facts
from benchmarks.runs import REPO_ROOT, write_figures
from harness.hunt.toml_file import document

PACE_ACTIONS = ("restart", "kill", "pause")
"""What the pace's hunt draws: actions a shop sharing its key ring survives, so no trial stops the search."""


@dataclass(frozen=True)
class Fault:
    """A planted fault: the catalogue scenario it comes from and the actions the hunt may draw."""

    name: str
    actions: tuple[str, ...] | None
    """None: every action the target can take."""


FAULTS = (Fault("ephemeral-keys", ("restart", "kill")), Fault("clock-ahead", ("restart", "pause")),
          Fault("records-in-memory", ("restart", "kill")), Fault("rotation-retire-early", ("rotate-keys",)))


def hunted(fault: str, bounds: dict[str, Any], **target: Any) -> str:
    """A catalogue scenario as a hunt takes it: no chaos of its own, no [reproduces], `[hunt]` bounds added (no
    control trial and `[expect]` counted, as when its figures were measured, unless `bounds` says otherwise), and
    `target` keys changed (`keyring="file"`: the fault taken out)."""
    data = tomllib.loads((REPO_ROOT / "scenarios" / "on-call" / f"{fault}.toml").read_text(encoding="utf-8"))
    for key in ("chaos", "reproduces", "hunt"):
        data.pop(key, None)
    data["target"].update(target)
    data["hunt"] = {"controls": 0, "expect": True, **bounds}
    return document(data)


def shrink_bounds(args: argparse.Namespace) -> dict[str, Any]:
    """The shrink's `[hunt]` keys the command line gave (the hunt's defaults otherwise)."""
    return {key: getattr(args, key) for key in ("shrink_runs", "reruns", "must_fail", "reproduce")
            if getattr(args, key) is not None}


def hunt(scenario: Path, results: Path) -> dict[str, Any]:
    """One `mrtr-harness hunt`: its exit code, wall seconds and hunt.jsonl's records."""
    results.mkdir(parents=True, exist_ok=True)
    before = set(results.iterdir())
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "harness", "hunt", str(scenario), "--results", str(results)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=4 * 3600)
    seconds = time.monotonic() - started
    [folder] = set(results.iterdir()) - before
    records = [json.loads(line) for line in (folder / "hunt.jsonl").read_text().splitlines()]
    if done.returncode not in (0, 1):
        print(done.stderr[-2000:], file=sys.stderr)
    return {"exit_code": done.returncode, "seconds": round(seconds, 1), "folder": str(folder),
            "trials": [record for record in records if record["type"] == "trial"], "end": records[-1],
            "stdout": done.stdout}


def plain_run(scenario: Path, results: Path) -> float:
    """Wall seconds of one `mrtr-harness run` of the scenario."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "harness", "run", str(scenario), "--results", str(results)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"the plain run failed ({done.returncode}): {done.stderr[-500:]}")
    return time.monotonic() - started


def found_and_shrunk(result: dict[str, Any]) -> dict[str, Any]:
    """What a hunt of a planted fault says: found within which trials and seconds, shrunk to what, reproduced how."""
    end, trials = result["end"], result["trials"]
    search = [trial for trial in trials if trial["purpose"] == "search"]
    shrunk = end.get("shrink") or {}
    reproduction = shrunk.get("reproduction")
    return {"exit_code": result["exit_code"], "found_in_trial": end.get("found"),
            "failure": end.get("failure"), "search_seconds": round(sum(trial["seconds"] for trial in search), 1),
            "search_trials": len(search), "shrink_stopped_by": shrunk.get("stopped_by"),
            "shrink_runs": shrunk.get("runs"), "shrink_seconds": shrunk.get("seconds"),
            "steps_found": len(search[-1]["schedule"]["steps"]) if search else None,
            "steps_minimal": len(shrunk["minimal"]["steps"]) if shrunk.get("minimal") else None,
            "minimal_duration": shrunk["minimal"]["duration"] if shrunk.get("minimal") else None,
            "reproduction": f"{reproduction['failed']} of {reproduction['runs']}" if reproduction else None,
            "reproduce_runs": sum(trial["purpose"] == "reproduce" for trial in trials),
            "hunt_seconds": result["seconds"]}


def pace(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    bounds = {"trials": args.trials, "trial_duration": args.trial_duration, "budget": "4h",
              "actions": list(PACE_ACTIONS)}
    scenario = work / "hunt-pace.toml"
    data = tomllib.loads(hunted("ephemeral-keys", bounds, keyring="file"))
    data["duration"] = args.trial_duration  # the plain runs' duration: a trial's
    scenario.write_text(document(data))
    print(f"a hunt of {args.trials} trials of {args.trial_duration} against the healthy shop ...", flush=True)
    searched = hunt(scenario, work / "pace")
    seconds = [trial["seconds"] for trial in searched["trials"] if trial["purpose"] == "search"]
    print(f"{args.runs} plain runs of the same scenario ...", flush=True)
    runs = [plain_run(scenario, work / "runs") for _ in range(args.runs)]
    planted = work / "hunt-planted.toml"
    planted.write_text(hunted("ephemeral-keys", {**bounds, "trials": 5, "actions": ["restart", "kill"],
                                                 **shrink_bounds(args)}))
    print("a hunt of a planted fault (per-process keys) for the shrink's cost ...", flush=True)
    shrunk = hunt(planted, work / "shrink")
    return {"hunt": {"trials": len(seconds), "wall_seconds": searched["seconds"], "exit_code": searched["exit_code"],
                     "stopped_by": searched["end"]["stopped_by"],
                     "trials_per_minute": round(60 * len(seconds) / searched["seconds"], 2),
                     "trial_seconds_median": round(statistics.median(seconds), 2),
                     "trial_seconds_max": round(max(seconds), 2), "coverage": searched["end"]["coverage"]},
            "plain_run": {"runs": len(runs), "seconds_median": round(statistics.median(runs), 2),
                          "seconds_max": round(max(runs), 2),
                          "runs_per_minute": round(60 / statistics.median(runs), 2)},
            "overhead_seconds_per_trial": round(statistics.median(seconds) - statistics.median(runs), 2),
            "shrink": found_and_shrunk(shrunk)}


def faults(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    found = {}
    for fault in FAULTS:
        if args.only and fault.name not in args.only:
            continue
        bounds: dict[str, Any] = {"trials": args.trials, "trial_duration": args.trial_duration, "budget": "4h",
                                  **shrink_bounds(args)}
        if fault.actions is not None:
            bounds["actions"] = list(fault.actions)
        scenario = work / f"{fault.name}.toml"
        scenario.write_text(hunted(fault.name, bounds))
        print(f"hunting {fault.name} ...", flush=True)
        found[fault.name] = {"bounds": bounds, **found_and_shrunk(hunt(scenario, work / fault.name))}
        print(json.dumps(found[fault.name]), flush=True)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", action="store_true", help="hunt the four planted faults instead of the pace")
    parser.add_argument("--only", action="append", choices=[fault.name for fault in FAULTS],
                        help="with --faults: only this fault (repeatable)")
    parser.add_argument("--trials", type=int, default=20, help="trials of each hunt's search (default 20)")
    parser.add_argument("--trial-duration", default="3s", help="each trial's load (default 3s)")
    parser.add_argument("--runs", type=int, default=5, help="plain runs for the baseline (default 5)")
    parser.add_argument("--shrink-runs", type=int, help="the shrink's budget of runs (default: the hunt's, 60)")
    parser.add_argument("--reruns", type=int, help="k of n's n while shrinking (default: the hunt's, 3)")
    parser.add_argument("--must-fail", type=int, help="k of n's k while shrinking (default: the hunt's, 2)")
    parser.add_argument("--reproduce", type=int, help="reruns of the minimal schedule (default: the hunt's, 10)")
    args = parser.parse_args()
    started = datetime.now(UTC)
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="hunt-trials-") as folder:
        print(f"hunts under {folder}", flush=True)
        figures = faults(args, Path(folder)) if args.faults else pace(args, Path(folder))
    result = {"date": started.isoformat(timespec="seconds"), "mode": "faults" if args.faults else "pace",
              "args": {key: value for key, value in vars(args).items()}, "machine": machine_facts(),
              "load_before": load_before, "load_after": load_average(), "figures": figures}
    print(json.dumps(figures, indent=2))
    write_figures("hunt_trials", result, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
