"""`--workers 2`: Locust's own master and workers give the same accounting as one process."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from tests.harness_run import SCENARIOS, Finished, run_harness

SMOKE = SCENARIOS / "smoke.toml"


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
    }


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
