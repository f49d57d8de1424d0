"""`--workers 2`: Locust's own master and workers give the same accounting as one process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter

import pytest

from harness.journal.distributions import RELATIVE_ERROR
from harness.journal.segments import SEGMENT_ENV, part_size
from harness.report.series import PERCENTILES, percentile
from tests.harness_run import ROOT, SCENARIOS, Finished, run_harness

SMOKE = SCENARIOS / "smoke.toml"
SPOOL_BYTES = 4096
SPOOL_SEGMENTS = {SEGMENT_ENV: str(SPOOL_BYTES)}
"""For workers only: their spools roll every 4 KiB, the master's parts stay whole (read as plain files here)."""
CLUSTER = {"MRTR_CLUSTER_SECRET": "one-secret-for-the-master-and-its-workers"}
"""What an operator sets on every machine of a run whose workers are elsewhere."""


def totals(finished: Finished) -> dict[str, object]:
    """Flows and rounds as the journal parts, the master's metrics, Locust and the summary count them."""
    assert finished.folder is not None
    records = [json.loads(line) for part in sorted(finished.folder.glob("journal*.jsonl"))
               for line in part.read_text().splitlines() if line.strip()]
    prom = (finished.folder / "metrics.prom").read_text()

    def metric(name: str) -> float:
        return sum(float(v) for v in re.findall(rf"^{name}\{{[^}}]*\}} (\S+)$", prom, re.M))

    stats = json.loads((finished.folder / "locust_stats.json").read_text())
    return {
        "starts": sum(r["type"] == "start" for r in records),
        "outcomes": Counter(r["outcome"] for r in records if r["type"] == "flow"),
        "rounds": sum(r["type"] == "round" for r in records),
        "metric_started": metric("mrtr_flows_started_total"),
        "metric_finished": metric("mrtr_flows_finished_total"),
        "metric_rounds": metric("mrtr_round_duration_seconds_count"),
        "locust_requests": sum(entry["num_requests"] for entry in stats),
        "summary_total": finished.summary["flows"]["total"],
        "summary_outcomes": finished.summary["flows"]["by_outcome"],
        "flow_ids": {r["flow_id"] for r in records if r["type"] == "start"},
        "latencies": _latencies(records),
    }


def _latencies(records: list[dict]) -> dict[tuple[str, str], list[float]]:
    """Every round's latency, sorted, per (flow, round number), as the summary keys them."""
    found: dict[tuple[str, str], list[float]] = {}
    for record in records:
        if record["type"] == "round" and record.get("latency") is not None:
            found.setdefault((record["flow"], str(record["round"])), []).append(record["latency"])
    return {key: sorted(values) for key, values in found.items()}


@pytest.mark.parametrize("workers", [0, 2])
def test_every_flow_is_accounted_for_once_in_one_process_and_across_workers(tmp_path, workers):
    finished = run_harness(SMOKE, tmp_path, "--duration", "10s", "--workers", str(workers))
    assert finished.code == 0, finished.output
    counted = totals(finished)
    outcomes = counted["outcomes"]
    assert counted["starts"] > 10
    assert counted["starts"] == sum(outcomes.values()) == counted["summary_total"]
    assert counted["metric_started"] == counted["metric_finished"] == counted["starts"]
    assert counted["rounds"] == counted["metric_rounds"] == counted["locust_requests"]
    assert dict(outcomes) == counted["summary_outcomes"]
    parts = sorted(path.name for path in finished.folder.glob("journal-w*.jsonl"))
    assert parts == [f"journal-w{i}.jsonl" for i in range(workers)]
    if workers:
        assert {flow_id.split("-")[0] for flow_id in counted["flow_ids"]} == {"w0", "w1"}
    # the workers' rounds, merged into one set of figures, give the exact percentiles within the stated 1%
    spreads = {(flow, number): spread for flow, rounds in finished.summary["round_latency_seconds"].items()
               for number, spread in rounds.items()}
    assert spreads.keys() == counted["latencies"].keys()
    for key, ordered in counted["latencies"].items():
        assert spreads[key]["count"] == len(ordered)
        for pct in PERCENTILES:
            assert spreads[key][f"p{pct:g}"] == pytest.approx(percentile(ordered, pct), rel=RELATIVE_ERROR), key


def test_workers_started_elsewhere_share_nothing_on_disk_with_the_master(tmp_path):
    """`run --master` and `worker --master-host` processes, each in its own folder, as on separate machines.

    A third worker is one too many: it is refused, says so, and exits 1. The workers' spools roll every few
    kilobytes (each segment removed once shipped): every flow still reaches the master once.
    """
    from harness.processes.children import free_port

    port = free_port()
    results = tmp_path / "master" / "results"
    master = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", str(SMOKE), "--results", str(results), "--quiet",
         "--duration", "8s", "--master", "--expect-workers", "2", "--master-bind-port", str(port)],
        cwd=ROOT, env={**os.environ, **CLUSTER}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    workers, spools = [], []
    for number in range(3):
        home = tmp_path / f"machine-{number}"
        spools.append(home / "spool")
        spools[-1].mkdir(parents=True)
        workers.append(subprocess.Popen(
            [sys.executable, "-m", "harness", "worker", "--master-host", "127.0.0.1", "--master-port", str(port),
             "--spool", str(spools[-1])],
            cwd=home, env={**os.environ, "PYTHONPATH": str(ROOT), **SPOOL_SEGMENTS, **CLUSTER}, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True))
    try:
        output, _ = master.communicate(timeout=150)
        worker_output = [worker.communicate(timeout=60)[0] for worker in workers]
    finally:
        for process in (master, *workers):
            if process.poll() is None:
                process.kill()
    assert master.returncode == 0, output
    assert sorted(worker.returncode for worker in workers) == [0, 0, 1], worker_output
    assert "waiting for 2 workers" in output
    joined = [text for worker, text in zip(workers, worker_output, strict=True) if worker.returncode == 0]
    refused = next(text for worker, text in zip(workers, worker_output, strict=True) if worker.returncode == 1)
    assert all("scenario smoke" in text and "journal records shipped" in text for text in joined), joined
    assert "the master refused this worker: this run expects 2 workers" in refused, refused
    assert [list(spool.iterdir()) for spool in spools] == [[], [], []]  # shipped whole (or never used): none kept
    folder = next(path for path in results.iterdir() if path.is_dir())
    assert all(part_size(folder / f"journal-w{index}.jsonl") > 3 * SPOOL_BYTES for index in (0, 1))  # spools rolled
    finished = Finished(master.returncode, output, folder)
    counted = totals(finished)
    assert counted["starts"] > 5
    assert counted["starts"] == sum(counted["outcomes"].values()) == counted["summary_total"]
    assert counted["metric_started"] == counted["metric_finished"] == counted["starts"]
    assert counted["rounds"] == counted["metric_rounds"] == counted["locust_requests"]
    assert sorted(path.name for path in folder.glob("journal-w*.jsonl")) == ["journal-w0.jsonl", "journal-w1.jsonl"]
    assert {flow_id.split("-")[0] for flow_id in counted["flow_ids"]} == {"w0", "w1"}
