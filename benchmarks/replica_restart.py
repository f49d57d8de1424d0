"""How long a replica restart takes on the process backend: forked from the zygote against a new interpreter.

The project's target: a replica restart is serving again in under 2 s. Both ways are measured
in the same run, alternating, on one deployment each (one replica, sqlite store,
ephemeral keys, so each restart really makes a new key): `stop` is SIGTERM until the
process is gone, `ready` is start until `/healthz` answers, `total` is both, as a chaos
`restart` sees it.

    python -m benchmarks.replica_restart [--restarts 10]

Prints the figures and writes JSON to `results/benchmarks/`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.cpu import load_average, machine_facts
from benchmarks.runs import write_figures
from harness.targets.local_deployment import LocalDeployment, ReplicaOptions


def restart_once(deployment: LocalDeployment) -> dict[str, float]:
    started = time.monotonic()
    ready = deployment.restart_replica(0)
    return {"total": time.monotonic() - started, "ready": ready}


def summarise(samples: list[dict[str, float]]) -> dict[str, float]:
    totals = sorted(sample["total"] for sample in samples)
    readies = sorted(sample["ready"] for sample in samples)
    return {"total_median": statistics.median(totals), "total_max": totals[-1],
            "ready_median": statistics.median(readies), "ready_max": readies[-1], "n": len(samples)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--restarts", type=int, default=10, help="restarts per way (default 10)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as forked_dir, tempfile.TemporaryDirectory() as fresh_dir:
        forked = LocalDeployment(Path(forked_dir), replicas=1, fork_replicas=True)
        fresh = LocalDeployment(Path(fresh_dir), replicas=1, fork_replicas=False)
        samples: dict[str, list[dict[str, float]]] = {"forked": [], "interpreter": []}
        load_before = load_average()
        try:
            for deployment in (forked, fresh):
                deployment.start([ReplicaOptions(keyring="ephemeral")])
            for _ in range(args.restarts):  # alternating, so both see the same noise
                samples["forked"].append(restart_once(forked))
                samples["interpreter"].append(restart_once(fresh))
        finally:
            forked.stop()
            fresh.stop()
    result = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_facts(),
        "load_average_before_after": [round(load_before, 2), round(load_average(), 2)],
        **{way: summarise(rows) for way, rows in samples.items()},
        "samples": samples,
    }
    result["ratio_total_median"] = round(result["forked"]["total_median"] / result["interpreter"]["total_median"], 3)
    for way in ("forked", "interpreter"):
        figures = result[way]
        print(f"{way:12} restart total median {figures['total_median']:.2f} s (max {figures['total_max']:.2f}), "
              f"ready after start median {figures['ready_median']:.2f} s (max {figures['ready_max']:.2f})")
    print(f"forked / interpreter (median total): {result['ratio_total_median']}")
    write_figures("replica_restart", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
