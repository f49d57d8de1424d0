"""The search's power, measured: how soon each strategy finds each planted latent fault, and what it hands over.

Five planted faults (`harness.shop.planted`, turned on through `MRTR_SHOP_PLANTED`, which no
scenario can set) each hold with no chaos and take hold only after a specific schedule of
restarts, kills and pauses (the fifth, `pause-then-kill-r2`, planted after lineage's probes were
written, as a holdout); `benchmarks.planted_rates` gives the exact per-trial chance that the
`random` strategy's drawer draws it (printed first, no runs; each must be at most 1%). Then, per
fault, strategy and seed 1..N, one real `mrtr-harness hunt` in a child process, with the same
scenario (the `ephemeral-keys` catalogue scenario with its key ring shared, so the healthy shop
survives every drawn step; its `[expect]` the property), trial length and budget of trials; read
back from the hunt's hunt.json and hunt.jsonl: the search trials and seconds to the first find
(censored at the budget when none), the shrink's runs, the final steps, the reproduction rate.
`--healthy` adds hunts of the shop with no planted fault: false finds, and the trials to
lineage's certificate.

    python -m benchmarks.hunt_search [--seeds 10] [--first-seed 1] [--trials 60] [--faults kill-twice-r3 ...]
        [--strategies random lineage] [--healthy] [--trial-duration 4s] [--reproduce 10] [--keep DIR]

Prints the figures and writes the raw JSON to `results/benchmarks/`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
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
from benchmarks.hunt_trials import hunted
from benchmarks.planted_rates import TRIGGERS, trigger_rate
from benchmarks.runs import REPO_ROOT, write_figures
from harness.config.scenario import Scenario
from harness.hunt.draw import Space
from harness.shop.planted import PLANTED, PLANTED_ENV

ACTIONS = ("restart", "kill", "pause", "network")
"""What every hunt draws: the steps the planted faults need, which the healthy shop (a shared key ring) survives."""
STRATEGIES = ("random", "swarm", "cover", "lineage")
HEALTHY = "healthy"


def scenario_text(args: argparse.Namespace, strategy: str, seed: int) -> str:
    """The hunted scenario: `ephemeral-keys` with a shared ring, the same bounds for every fault and strategy."""
    bounds: dict[str, Any] = {"trials": args.trials, "trial_duration": args.trial_duration, "budget": "4h",
                              "actions": list(ACTIONS), "max_steps": 2, "strategy": strategy, "seed": seed,
                              "controls": 1}
    if args.reproduce is not None:
        bounds["reproduce"] = args.reproduce
    if args.shrink_runs is not None:
        bounds["shrink_runs"] = args.shrink_runs
    return hunted("ephemeral-keys", bounds, keyring="file")


def exact_rates(args: argparse.Namespace) -> dict[str, float]:
    """Each planted fault's per-trial trigger rate under `random`, from the drawer's distribution (no runs)."""
    space = Space.of(Scenario.model_validate(tomllib.loads(scenario_text(args, "random", 1))))
    return {fault: trigger_rate(space, TRIGGERS[fault]) for fault in PLANTED}


def hunt(scenario: Path, results: Path, planted: str | None) -> dict[str, Any]:
    """One real `mrtr-harness hunt` (its own child process): exit code, wall seconds, hunt.json and trial records."""
    results.mkdir(parents=True, exist_ok=True)
    env = {key: value for key, value in os.environ.items() if key != PLANTED_ENV}
    if planted is not None:
        env[PLANTED_ENV] = planted
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "harness", "hunt", str(scenario), "--results", str(results)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=4 * 3600, env=env)
    seconds = time.monotonic() - started
    folders = [path.parent for path in results.glob("*/hunt.json")]
    if done.returncode not in (0, 1) or len(folders) != 1:
        return {"exit_code": done.returncode, "seconds": round(seconds, 1), "error": done.stderr[-1500:]}
    summary = json.loads((folders[0] / "hunt.json").read_text(encoding="utf-8"))
    records = [json.loads(line) for line in (folders[0] / "hunt.jsonl").read_text(encoding="utf-8").splitlines()]
    return {"exit_code": done.returncode, "seconds": round(seconds, 1), "summary": summary,
            "trials": [record for record in records if record.get("type") == "trial"]}


def figures(result: dict[str, Any], budget: int) -> dict[str, Any]:
    """What one hunt says: found at which search trial (None: censored at the budget), after how many search seconds,
    the shrink's runs, the final steps, the reproduction; a certificate and when."""
    if "summary" not in result:
        return {"exit_code": result["exit_code"], "error": result.get("error"), "hunt_seconds": result["seconds"]}
    summary, trials = result["summary"], result["trials"]
    search = [trial for trial in trials if trial.get("purpose") == "search"]
    found = summary.get("found")
    shrink = summary.get("shrink") or {}
    minimal = shrink.get("minimal") or {}
    reproduction = summary.get("reproduction")
    found_at = next((number for number, trial in enumerate(search, 1) if trial.get("index") == found["trial"]),
                    None) if found else None
    return {"exit_code": result["exit_code"], "stopped_by": summary.get("stopped_by"),
            "controls": summary.get("controls"), "without_chaos": summary.get("without_chaos") is not None,
            "found_at_trial": found_at, "censored_at": None if found_at else len(search),
            "search_seconds": round(sum(float(trial.get("seconds") or 0) for trial in search[:found_at or None]), 1),
            "failure": summary.get("failure"), "shrink_runs": shrink.get("runs"),
            "steps_found": len(found["schedule"]["steps"]) if found else None,
            "steps_final": len(minimal["steps"]) if minimal.get("steps") is not None else (
                len(found["schedule"]["steps"]) if found else None),
            "reproduction": reproduction, "certificate": summary.get("certificate"),
            "search_trials": len(search), "hunt_seconds": result["seconds"]}


def median_trials(values: list[int | None], budget: int) -> int:
    """The median trials to the find, a censored hunt (None) counted one past the budget."""
    return statistics.median_low(sorted(value if value is not None else budget + 1 for value in values))


def median_or_censored(values: list[int | None], budget: int) -> str:
    """The median trials to the find, said (`>` the budget when the median is censored)."""
    middle = median_trials(values, budget)
    return f">{budget}" if middle > budget else str(middle)


def random_median_floor(rate: float) -> int | None:
    """The fewest trials `random`'s median to a find can be: a trial finds the fault only if it draws the schedule
    the fault needs (at `rate`, independently per trial), so the trials to a find are at least geometric at that
    rate, whose median is the smallest n with 1 - (1 - rate)^n >= 1/2. The target is measured against this floor,
    which spares the hours of random hunts a censored median would need and can only flatter random."""
    return math.ceil(math.log(0.5) / math.log1p(-rate)) if rate > 0 else None  # None: random never draws it


def verdict(fault: str, strategy: str, found: list[int | None], budget: int, rates: dict[str, float]) -> str:
    """One line per fault and strategy: its median trials to the find, and for a planted fault, that median against
    a fifth of random's floor (`random_median_floor`)."""
    said = (f"{fault} / {strategy}: found in {sum(v is not None for v in found)} of {len(found)} seeds, median "
            f"trials {median_or_censored(found, budget)} (budget {budget})")
    if fault not in rates:
        return said
    floor = random_median_floor(rates[fault])
    if floor is None:
        return said + "; random never draws its schedule at this trial length"
    within = median_trials(found, budget) <= floor / 5
    return said + (f"; random's median is at least {floor} (exact, from its rate): "
                   f"{'within' if within else 'not within'} a fifth of it ({floor / 5:.1f})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10, help="hunt seeds 1..N per fault and strategy (default 10)")
    parser.add_argument("--first-seed", type=int, default=1,
                        help="start at this seed instead (the rest of 1..N, after a run cut short; default 1)")
    parser.add_argument("--trials", type=int, default=60, help="search trials each hunt may run (default 60)")
    parser.add_argument("--trial-duration", default="4s", help="each trial's load (default 4s)")
    parser.add_argument("--faults", nargs="*", choices=sorted(PLANTED), default=sorted(PLANTED),
                        help="the planted faults to hunt (none: only --healthy)")
    parser.add_argument("--strategies", nargs="+", choices=STRATEGIES, default=list(STRATEGIES))
    parser.add_argument("--healthy", action="store_true", help="also hunt the shop with no planted fault")
    parser.add_argument("--reproduce", type=int, help="reruns of the handed-over file (default: the hunt's)")
    parser.add_argument("--shrink-runs", type=int, help="the shrink's budget of runs (default: the hunt's)")
    parser.add_argument("--rates-only", action="store_true", help="print the exact trigger rates and stop")
    parser.add_argument("--keep", type=Path, help="keep each hunt's folder under this one (default: a temporary "
                                                  "folder, removed at the end)")
    args = parser.parse_args()
    rates = exact_rates(args)
    for fault, rate in rates.items():
        floor = random_median_floor(rate)
        print(f"{fault}: random draws its schedule in {rate:.4%} of trials (exact, {args.trial_duration} trials); "
              + (f"its median trials to a find are at least {floor}" if floor else "it never finds it"))
    over = [fault for fault, rate in rates.items() if rate > 0.01 and fault in args.faults]
    if over:
        print(f"over 1% per trial at this trial length, so not a latent fault to hunt: {', '.join(over)}",
              file=sys.stderr)
        return 1
    if args.rates_only:
        return 0
    started = datetime.now(UTC)
    rows: list[dict[str, Any]] = []
    targets = [*args.faults, *([HEALTHY] if args.healthy else [])]
    with contextlib.ExitStack() as stack:
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            work = Path(tempfile.mkdtemp(prefix="hunt-search-", dir=args.keep))
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hunt-search-")))
        print(f"hunts under {work}", flush=True)
        for fault in targets:
            for strategy in args.strategies:
                for seed in range(args.first_seed, args.seeds + 1):
                    scenario = work / f"{fault}-{strategy}-{seed}.toml"
                    scenario.write_text(scenario_text(args, strategy, seed), encoding="utf-8")
                    result = hunt(scenario, work / f"{fault}-{strategy}-{seed}", None if fault == HEALTHY else fault)
                    row = {"fault": fault, "strategy": strategy, "seed": seed, **figures(result, args.trials)}
                    rows.append(row)
                    print(json.dumps({key: row[key] for key in ("fault", "strategy", "seed", "exit_code")
                                      if key in row} | {key: row.get(key) for key in
                                                        ("found_at_trial", "search_seconds", "shrink_runs",
                                                         "steps_final", "reproduction")}), flush=True)
    summary = {(row["fault"], row["strategy"]): [] for row in rows}  # type: dict[tuple[str, str], list[Any]]
    for row in rows:
        summary[(row["fault"], row["strategy"])].append(row.get("found_at_trial"))
    for (fault, strategy), found in summary.items():
        print(verdict(fault, strategy, found, args.trials, rates))
    write_figures("hunt_search", {"started": started.isoformat(), "machine": machine_facts(),
                                  "load_average": load_average(),
                                  "arguments": {key: str(value) if isinstance(value, Path) else value
                                                for key, value in vars(args).items()},
                                  "exact_rates": rates, "hunts": rows,
                                  "random_median_floor": {fault: random_median_floor(rate)
                                                          for fault, rate in rates.items()}})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
