"""Instructions per flow of a real `mrtr-harness run`, counted by callgrind: a figure the machine's noise cannot move.

The flows/s of `benchmarks/flows_per_second.py` are the target's figure, but on a shared
two-core machine one run's rate moves by a fifth with the neighbours. Valgrind's callgrind
counts the instructions a process executes (user space only: what the kernel does for a
`send` is not counted), the same for the same work whatever else the machine does.

Each side is a real `mrtr-harness run` (the harness of this checkout, or of `--code`) under
`valgrind --tool=callgrind --trace-children=yes` against two stub servers (not under
valgrind), the closed model with 16 agents, leads answering at once. Instrumentation starts
off; once the journal has 200 flows, `callgrind_control -i on` switches it on in the run
process and in its live fold process (where the code has one) for `--window` seconds, then
off. The figure is each process's instructions in the window divided by the flows the
journal finished in it. Under valgrind a run goes about 50 times slower; the counts per
flow are what the same code executes at full speed, apart from costs that are per second
rather than per flow (the journal's batches, Locust's stats ticks), which weigh more here.

    python -m benchmarks.instructions [--code DIR] [--window 20]

Needs valgrind (Debian's `valgrind`). Raw figures go to `results/benchmarks/instructions-<utc>.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.cpu import machine_facts
from benchmarks.flows_per_second import SERVERS, servers, stub_scenario
from benchmarks.runs import REPO_ROOT, fold_pid, write_figures
from harness.journal.segments import part_lines

WARM_FLOWS = 200
"""Flows the journal must hold before the window opens (the agents spawned, the imports done)."""
START_TIMEOUT = 600.0


def flows_in(journal: Path) -> int:
    return sum(line.count(b'"type":"flow"') for line in part_lines(journal))


def control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], capture_output=True, check=False)


def one_side(code: Path, scenario_text: str, window: float, work: Path, env: dict[str, str] | None = None
             ) -> dict[str, Any]:
    """One run of `code` under callgrind (the scenario's text; `env`: its environment, this one's by default):
    instructions per flow of the run process and of its fold process."""
    scenario = work / "scenario.toml"
    scenario.write_text(scenario_text)
    results = work / "results"
    out = work / "callgrind.out.%p"
    run = subprocess.Popen(["valgrind", "--tool=callgrind", "--trace-children=yes", "--instr-atstart=no",
                            f"--callgrind-out-file={out}", sys.executable, "-m", "harness", "run", str(scenario),
                            "--quiet", "--results", str(results)],
                           cwd=code, env={**(os.environ if env is None else env), "PYTHONPATH": str(code)},
                           stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        journal = wait_for_flows(run, results)
        fold = fold_pid(run.pid)
        pids = [run.pid, *([fold] if fold is not None else [])]
        for pid in pids:
            control("-i", "on", str(pid))
        first = flows_in(journal)
        time.sleep(window)
        for pid in pids:
            control("-i", "off", str(pid))
        flows = flows_in(journal) - first
        for pid in pids:
            control("-d", str(pid))
        time.sleep(2)
    finally:
        run.send_signal(signal.SIGTERM)
        try:
            run.wait(600)
        except subprocess.TimeoutExpired:
            run.kill()
            run.wait(60)
    counted = {pid: instructions(work, pid) for pid in pids}
    load, fold = counted[run.pid], sum(counted[pid] for pid in pids[1:])
    return {"code": str(code), "window_s": window, "flows": flows,
            "load_instructions_per_flow": round(load / flows) if flows else None,
            "fold_instructions_per_flow": round(fold / flows) if flows and len(pids) > 1 else None,
            "harness_instructions_per_flow": round((load + fold) / flows) if flows else None}


def wait_for_flows(run: subprocess.Popen[bytes], results: Path) -> Path:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if run.poll() is not None:
            raise RuntimeError(f"the run under valgrind exited with {run.returncode} before its window")
        journals = list(results.glob("*/journal.jsonl")) if results.is_dir() else []
        if journals and flows_in(journals[0]) >= WARM_FLOWS:
            return journals[0]
        time.sleep(1)
    raise RuntimeError(f"no {WARM_FLOWS} flows within {START_TIMEOUT:g} s under valgrind")


def instructions(work: Path, pid: int) -> int:
    """The instructions callgrind counted for `pid` (the largest `summary`/`totals` over its dumps)."""
    total = 0
    for path in work.glob(f"callgrind.out.{pid}*"):
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith(("summary:", "totals:")):
                total = max(total, int(line.split()[1]))
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, default=None, help="another checkout, measured after this one")
    parser.add_argument("--window", type=float, default=20.0, help="seconds counted in each run (default 20)")
    args = parser.parse_args(argv)
    sides = [REPO_ROOT, *([args.code.resolve()] if args.code else [])]
    figures: dict[str, Any] = {"benchmark": "instructions", "machine": machine_facts(),
                               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "sides": []}
    with servers(SERVERS["stub"], 2) as running:
        for code in sides:
            with tempfile.TemporaryDirectory(prefix="instructions-") as tmp:
                side = one_side(code, stub_scenario(3600, [server.url for server in running]), args.window,
                                Path(tmp))
            figures["sides"].append(side)
            print(json.dumps(side), flush=True)
    write_figures("instructions", figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
