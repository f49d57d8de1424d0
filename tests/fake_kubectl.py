"""A stand-in for `kubectl` over a folder that plays a cluster's pods (no cluster can run on a test machine).

`$FAKE_CLUSTER/pods/NAME` is a pod: a log file of `TIMESTAMP LINE` lines, as `kubectl logs --timestamps` prints.
It understands the two commands `harness.logs.kubernetes` runs:

- `get pods --selector=S --watch --output=name`: prints `pod/NAME` for every pod there, then for each pod that
  appears or changes, until `$FAKE_CLUSTER/watch-exit` holds an exit code (it is then removed);
- `logs pod/NAME --follow --timestamps --all-containers --since-time=T`: exit 1 when the pod is not there, else
  its lines stamped at or after T, following the file until the pod is gone or its file replaced (exit 0, as a stream
  ends when its container stops).

Each invocation appends its argv to `$FAKE_CLUSTER/calls` and its environment's names to `$FAKE_CLUSTER/env`.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

POLL = 0.02


def main(argv: list[str]) -> int:
    cluster = Path(os.environ["FAKE_CLUSTER"])
    with (cluster / "calls").open("a") as calls:
        calls.write(" ".join(argv) + "\n")
    with (cluster / "env").open("a") as env:
        env.write(" ".join(sorted(os.environ)) + "\n")
    args = [arg for arg in argv if not arg.startswith("--namespace=")]
    if args[:2] == ["get", "pods"]:
        return watch(cluster)
    if args[:1] == ["logs"]:
        since = next(arg.split("=", 1)[1] for arg in args if arg.startswith("--since-time="))
        return follow(cluster / "pods" / args[1].removeprefix("pod/"), since)
    return 2


def watch(cluster: Path) -> int:
    seen: dict[str, float] = {}
    while True:
        exit_file = cluster / "watch-exit"
        if exit_file.exists():
            code = int(exit_file.read_text() or 0)
            exit_file.unlink()
            return code
        for pod in sorted((cluster / "pods").iterdir()):
            try:
                changed = pod.stat().st_mtime
            except FileNotFoundError:
                continue
            if pod.name not in seen or changed > seen[pod.name] + 0.5:
                seen[pod.name] = changed
                print(f"pod/{pod.name}", flush=True)
        time.sleep(POLL)


def follow(pod: Path, since: str) -> int:
    try:
        log = pod.open()
    except FileNotFoundError:
        print(f'Error from server (NotFound): pods "{pod.name}" not found', file=sys.stderr)
        return 1
    with log:
        while True:
            line = log.readline()
            if line.endswith("\n"):
                if line.split(" ", 1)[0] >= since:  # RFC 3339 in UTC with nanoseconds, compared as text; inclusive
                    sys.stdout.write(line)
                    sys.stdout.flush()
                continue
            try:
                if os.stat(pod).st_ino != os.fstat(log.fileno()).st_ino:
                    return 0  # the pod's container was replaced: this stream ends
            except FileNotFoundError:
                return 0
            time.sleep(POLL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
