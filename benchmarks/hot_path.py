"""Where a load process's time goes on a two-round flow: py-spy samples of a real `mrtr-harness run`.

`benchmarks/instructions.py` says how much a flow costs, the same on a busy machine; this says
where it goes. One real run (`python -m harness run`, the harness of this checkout or of
`--code`) of the scenario `benchmarks/flows_per_second.py` uses against two stub servers
(closed model, 16 agents, leads answering at once) runs under `py-spy record` (the run
process only: the fold process is `benchmarks/instructions.py`'s), sampled `--rate` times a
second for `--seconds`. The samples of the load's start (imports, the first second) are left
out: only stacks under a Locust user's greenlet, the hub and the journal's threads count.
Printed: each function's share of the counted samples, its own (the leaf) and with what it
calls, grouped by function (line numbers dropped).

    python -m benchmarks.hot_path [--code DIR] [--seconds 20] [--rate 200] [--top 40]

Needs py-spy (`pip install -e '.[dev]'`). A sample is wall time on the CPU, kernel time of a
system call included (a `send` on loopback wakes the server's side): shares, not microseconds.
Raw figures go to `results/benchmarks/hot_path-<utc>.json`.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.flows_per_second import SERVERS, servers, stub_scenario
from benchmarks.runs import REPO_ROOT, write_figures

LOAD_ROOTS = ("run_user (locust/user/users.py", "Hub.run (gevent/hub.py", "Compressor._loop")
"""Frames under which a sample is the load's work (a user's greenlet, the event loop, the journal's compressor)."""
_PATH = re.compile(r" \([^()]*?/(?:site-packages|lib/python3\.\d+)/")
_LINE = re.compile(r":\d+\)$")


def frame_name(frame: str) -> str:
    """`function (path/to/module.py:123)` as `function (module path)`: a function's samples together."""
    return _LINE.sub(")", _PATH.sub(" (", frame))


def shares(raw: str) -> dict[str, Any]:
    """Own and inclusive shares of the load's samples per function, from py-spy's raw (collapsed) output."""
    own: Counter[str] = Counter()
    within: Counter[str] = Counter()
    counted = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [frame_name(frame) for frame in stack.split(";")]
        if not any(root in frame for frame in frames for root in LOAD_ROOTS):
            continue
        counted += int(count)
        own[frames[-1]] += int(count)
        for frame in set(frames):
            within[frame] += int(count)
    return {"samples": counted,
            "own": {name: round(n / counted, 4) for name, n in own.most_common()} if counted else {},
            "inclusive": {name: round(n / counted, 4) for name, n in within.most_common()} if counted else {}}


def py_spy() -> str:
    """The py-spy beside this Python (a venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() else "py-spy"


def profile(code: Path, seconds: float, rate: int, urls: list[str], work: Path) -> str:
    scenario = work / "scenario.toml"
    scenario.write_text(stub_scenario(seconds, urls))
    out = work / "profile.txt"
    subprocess.run([py_spy(), "record", "--rate", str(rate), "--format", "raw", "--output", str(out), "--",
                    sys.executable, "-m", "harness", "run", str(scenario), "--quiet", "--results", str(work / "runs")],
                   cwd=code, env={**os.environ, "PYTHONPATH": str(code)},
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=seconds + 120)
    return out.read_text()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, default=REPO_ROOT, help="the checkout whose harness runs")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=int, default=200, help="samples a second")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args(argv)
    with servers(SERVERS["stub"], 2) as running, tempfile.TemporaryDirectory(prefix="hot-path-") as tmp:
        figures = shares(profile(args.code.resolve(), args.seconds, args.rate, [s.url for s in running], Path(tmp)))
    figures.update(code=str(args.code.resolve()), seconds=args.seconds, rate=args.rate)
    write_figures("hot_path", figures)
    print(f"{figures['samples']} samples of the load")
    for kind in ("own", "inclusive"):
        print(f"--- {kind}")
        for name, share in list(figures[kind].items())[:args.top]:
            print(f"{100 * share:5.1f}%  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
