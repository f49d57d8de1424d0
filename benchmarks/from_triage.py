"""From an incident's logs to a scenario that reproduces it: `hunt --from-triage` on each on-call cause, timed.

For each on-call catalogue scenario (`scenarios/on-call/`, or those `--causes` names), as on-call
would meet it: the incident is the scenario run as it stands (`run --reproduce`, exit 0: its
replicas logged the failure); `triage --once --json` over its replicas' logs is the triage
output; the deployment is the same scenario without its chaos and its verdict tables
(`[[chaos]]`, `[reproduces]`, `[expect]`: what on-call knows is the deployment, not the chaos);
then one real `mrtr-harness hunt` of that deployment `--from-triage` the triage output, in a
child process, timed from outside. Read back from its hunt.json: whether it found a failure
that is one of the triaged reasons (an incident whose replicas logged no rejection, a double
release, has nothing to steer by: said, no hunt), found one whose replay did not hold (flaky, not
a reproduction), failed without chaos (its control trial failed: the deployment alone logs them,
which the hunt says instead of searching), or found nothing; its wall seconds, and the trials'
seconds up to its find and up to its replay; the handed-over file's reproduction rate.

    python -m benchmarks.from_triage [--causes ephemeral-keys ...] [--trials 20] [--reproduce 10]
        [--shrink-runs 60]

The auth causes' runs get `MCP_CLIENT_SECRET` from the caller, or a random one of the script's own.

Prints a line per cause and the median hunt minutes of the causes reproduced; writes the raw JSON
to `results/benchmarks/`.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
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
from benchmarks.runs import REPO_ROOT, write_figures
from harness.hunt.toml_file import document

ON_CALL = REPO_ROOT / "scenarios" / "on-call"
LEFT_OUT = ("chaos", "reproduces", "expect", "hunt")
"""What the hunted deployment drops from the incident's scenario: the chaos is what the hunt must find."""


SECRET_ENV = "MCP_CLIENT_SECRET"
"""The auth causes' scenarios name this variable for the client secret; the embedded shop's authorization server
takes whatever it holds, so a run of the benchmark's own sets one when the caller has none (never in a file)."""
_SECRET = secrets.token_urlsafe(24)


def _harness(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, SECRET_ENV: os.environ.get(SECRET_ENV) or _SECRET}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


def incident(cause: str, work: Path) -> Path | None:
    """Run the cause's scenario as it stands and triage its replicas' logs: the triage file, or None when the run
    did not reproduce its failure (then there is no incident to start from)."""
    ran = _harness("run", "--reproduce", str(ON_CALL / f"{cause}.toml"), "--results", str(work / "incident"),
                   timeout=900)
    if ran.returncode != 0:
        return None
    logs = sorted((work / "incident").glob("*/target/logs/*.log"))
    triaged = _harness("triage", "--once", "--json", "--file", *map(str, logs), timeout=300)
    if triaged.returncode not in (0, 1) or not triaged.stdout.strip():
        return None
    path = work / "triage.json"
    path.write_text(triaged.stdout, encoding="utf-8")
    return path


def deployment(cause: str, work: Path) -> Path:
    """The cause's scenario without its chaos and verdict tables, written as TOML."""
    data = tomllib.loads((ON_CALL / f"{cause}.toml").read_text(encoding="utf-8"))
    path = work / f"{cause}-deployment.toml"
    path.write_text(document({key: value for key, value in data.items() if key not in LEFT_OUT}), encoding="utf-8")
    return path


def hunted(cause: str, work: Path, triage: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One hunt of the deployment steered by the triage file: its outcome, wall seconds and reproduction rate."""
    by_reason = json.loads(triage.read_text(encoding="utf-8")).get("by_reason", {})
    counted = {reason for reason, count in by_reason.items() if isinstance(count, int) and count > 0}
    if not counted:  # the incident is not a logged rejection (a double release): nothing to steer a hunt by
        return {"outcome": "no rejection logged", "triaged": []}
    flags = ["--trials", str(args.trials)]
    for flag, value in (("--reproduce", args.reproduce), ("--shrink-runs", args.shrink_runs)):
        if value is not None:
            flags += [flag, str(value)]
    results = work / "hunt"
    started = time.monotonic()
    done = _harness("hunt", str(deployment(cause, work)), "--from-triage", str(triage), *flags, "--results",
                    str(results), timeout=4 * 3600)
    seconds = time.monotonic() - started
    summaries = list(results.glob("*/hunt.json"))
    if done.returncode not in (0, 1) or len(summaries) != 1:
        return {"outcome": "error", "exit_code": done.returncode, "seconds": round(seconds, 1),
                "error": done.stderr[-1500:]}
    summary = json.loads(summaries[0].read_text(encoding="utf-8"))
    control = summary.get("without_chaos")
    failures = control["failures"] if control is not None else [summary.get("failure") or {}]
    failure = "; ".join(str(failed.get("name", "")) for failed in failures)
    reasons = sorted(reason for reason in counted if f"reason='{reason}'" in failure)
    if control is not None:
        outcome = "fails without chaos" + ("" if reasons else " (another failure)")
    elif summary.get("stopped_by") == "found":
        outcome = "reproduced" if reasons else "found another failure"
        replay = (summary.get("shrink") or {}).get("replay") or {}
        if reasons and (summary.get("shrink") or {}).get("stopped_by") == "flaky":  # its own schedule did not hold
            outcome = f"found once, flaky (replayed {replay.get('failed')} of {replay.get('runs')})"
    else:
        outcome = "not found"
    return {"outcome": outcome, "exit_code": done.returncode, "seconds": round(seconds, 1),
            **milestones(summaries[0].parent / "hunt.jsonl", ((control or summary.get("found")) or {}).get("trial")),
            "set_aside_as_flaky": len(summary.get("flaky") or []), "failure": failure,
            "triaged": sorted(counted), "reasons": reasons, "reproduction": summary.get("reproduction"),
            "stopped_by": summary.get("stopped_by"), "from_triage": summary.get("from_triage")}


def milestones(journal: Path, found_index: int | None) -> dict[str, float | None]:
    """The hunt's trial seconds summed up to its find (`found_index`: the search trial found or the failed control),
    and up to the end of that find's replay: when the hunt held a schedule that fails, and one whose failure it had
    seen again (finds set aside as flaky before it are counted in its time); the shrink and the reproduction runs
    come after."""
    records = [json.loads(line) for line in journal.read_text(encoding="utf-8").splitlines()]
    spent, found, replayed = 0.0, None, None
    for record in records:
        if record.get("type") != "trial":
            continue
        spent += float(record.get("seconds") or 0)
        if found is None and record.get("index") == found_index and record.get("purpose") in ("search", "control"):
            found = spent
        if found is not None and record.get("purpose") == "replay":
            replayed = spent
    return {"seconds_to_find": round(found, 1) if found is not None else None,
            "seconds_to_replayed": round(replayed, 1) if replayed is not None else None}


def main() -> int:
    causes = sorted(path.stem for path in ON_CALL.glob("*.toml"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--causes", nargs="+", choices=causes, default=causes, help="default: every on-call cause")
    parser.add_argument("--trials", type=int, default=20, help="search trials each hunt may run (default 20)")
    parser.add_argument("--reproduce", type=int, help="reruns of the handed-over file (default: the hunt's)")
    parser.add_argument("--shrink-runs", type=int, help="the shrink's budget of runs (default: the hunt's)")
    args = parser.parse_args()
    started = datetime.now(UTC)
    load_before = load_average()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="from-triage-") as scratch:
        for cause in args.causes:
            work = Path(scratch) / cause
            work.mkdir()
            triage = incident(cause, work)
            row = {"cause": cause, **(hunted(cause, work, triage, args) if triage is not None
                                      else {"outcome": "no incident"})}
            rows.append(row)
            print(json.dumps({key: row.get(key) for key in ("cause", "outcome", "seconds", "seconds_to_find",
                                                            "seconds_to_replayed", "failure", "reproduction")}),
                  flush=True)
    reproduced = [row["seconds"] for row in rows if row["outcome"] == "reproduced"]
    median = round(statistics.median(reproduced) / 60, 2) if reproduced else None
    print(f"reproduced {len(reproduced)} of {len(rows)} causes; median hunt minutes of those: {median}")
    alone = [row["seconds"] for row in rows if row["outcome"] == "fails without chaos"]
    either = reproduced + alone
    median_either = round(statistics.median(either) / 60, 2) if either else None
    print(f"the deployment alone logged the triaged reasons for {len(alone)} more (its control trial); median hunt "
          f"minutes over all {len(either)}: {median_either}")
    write_figures("from_triage", {"date": started.isoformat(timespec="seconds"), "args": vars(args),
                                  "machine": machine_facts(), "load_before": load_before,
                                  "load_after": load_average(), "median_minutes": median,
                                  "median_minutes_with_controls": median_either, "causes": rows}, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
