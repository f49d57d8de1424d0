"""`mrtr-harness report DIR` from the journal alone, side by side: two checkouts on copies of one results folder.

Each repeat runs the real `report` (`python -m harness report DIR`, a child process) of each
`--code` in turn, alternating which goes first, on its own copy of `--folder` with no
`figures.json` (so it folds the whole journal, as for a killed run or a folder from elsewhere),
and measures wall seconds, flows per second (the folder's finished flows over the wall time),
the report process's peak RSS and the peak of its process tree's RSS summed
(`benchmarks.soak.report_figures`). The ratio of each repeat is the second code's flows/s over
the first's, both measured within a minute of each other on this shared machine.

Run from the repository root (each code from a worktree):

    python -m benchmarks.report_from_journal --folder results/benchmarks/runs/<soak run> \\
        --code /tmp/before --code /tmp/after [--repeat 3]

Raw figures go to `results/benchmarks/report_from_journal-<utc>.json`. Leaves out: `report` from
the saved figures (no fold at all), a journal on a cold page cache (each copy is read once
before it is timed), other machines' core counts.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.cpu import machine_facts
from benchmarks.runs import write_figures
from benchmarks.soak import FLOW_MARK, journal_lines, report_figures


def copy_journal(folder: Path, into: Path) -> Path:
    """The folder's scenario and journal (every segment) copied, no figures.json and no results."""
    copy = into / folder.name
    copy.mkdir()
    for path in folder.iterdir():
        if path.name.startswith("journal") or path.name.startswith("scenario"):
            shutil.copy2(path, copy / path.name)
    for path in copy.glob("journal*"):
        path.read_bytes()  # warm: both codes read it from the page cache
    return copy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, required=True, help="a results folder whose journal is folded")
    parser.add_argument("--code", type=Path, action="append", required=True, help="a checkout (give two)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    if len(args.code) != 2:
        parser.error("give --code twice: the code before, then the code after")
    repeats: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="report-bench-") as tmp:
        copy = copy_journal(args.folder, Path(tmp))
        flows = sum(FLOW_MARK in line for line in journal_lines(copy))
        for repeat in range(args.repeat):
            order = [0, 1] if repeat % 2 == 0 else [1, 0]
            sides: dict[int, dict[str, Any]] = {}
            for side in order:
                (copy / "figures.json").unlink(missing_ok=True)
                sides[side] = report_figures(args.code[side], copy, flows)
                print(f"repeat {repeat + 1} {args.code[side]}: {sides[side]}", flush=True)
            repeats.append({"before": sides[0], "after": sides[1],
                            "ratio": round(sides[1]["flows_per_second"] / sides[0]["flows_per_second"], 3)})
    figures = {"folder": str(args.folder), "flows": flows, "codes": [str(code) for code in args.code],
               "machine": machine_facts(), "repeats": repeats,
               "median_ratio": statistics.median(r["ratio"] for r in repeats),
               "median_after_flows_per_second": statistics.median(r["after"]["flows_per_second"] for r in repeats)}
    path = write_figures("report_from_journal", figures)
    print(json.dumps({key: figures[key] for key in ("flows", "median_ratio", "median_after_flows_per_second")}))
    print(f"raw figures: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
