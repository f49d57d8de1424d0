"""The leak gate end to end: the shop's `leak` knob makes a replica grow, and `replica_rss_growth` fails the run.

Two real runs of the embedded shop: one healthy, one whose second replica keeps 300 MB a minute while it serves.
The threshold `replica_rss_growth = "< 100"` passes the first and fails the second on that replica alone; the
leaky run compared with the healthy one as its baseline (the nightly gate) regresses on the same metric; and
`report DIR` rebuilds the verdict from the journal alone.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.harness_run import ROOT, Finished, run_harness

SCENARIO = """
name = "leak-gate"
seed = 3
duration = "20s"
time_scale = 60

[target]
kind = "embedded"
replicas = 2
store = "sqlite"
{replica}
[load]
model = "open"
arrival_rate = 6
routing = "round-robin"

[[flows]]
kind = "refund"

[leads]
think = {{ dist = "constant", value = "10s" }}

[expect]
replica_rss_growth = "< 100"
"""
LEAK = "\n[[target.overrides]]\nreplica = 2\nleak = 300\n"


def _run(tmp_path_factory: pytest.TempPathFactory, name: str, replica: str, *args: str) -> Finished:
    folder = tmp_path_factory.mktemp(name)
    scenario = folder / f"{name}.toml"
    scenario.write_text(SCENARIO.format(replica=replica), encoding="utf-8")
    return run_harness(scenario, folder / "results", *args)


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    return _run(tmp_path_factory, "healthy", "")


@pytest.fixture(scope="module")
def leaky(tmp_path_factory, healthy):
    assert healthy.folder is not None, healthy.output
    return _run(tmp_path_factory, "leaky", LEAK)


def _growth(finished: Finished) -> dict[str, dict[str, object]]:
    return {row["threshold"]: row for row in finished.summary["thresholds"] if row["metric"] == "replica_rss_growth"}


def test_a_healthy_shop_passes_the_leak_gate(healthy):
    assert healthy.code == 0, healthy.output
    [row] = _growth(healthy).values()
    assert row["passed"] is True
    health = healthy.summary["replica_health"]
    assert set(health) == {"r1", "r2"}
    for replica in health.values():
        assert replica["source"] == "proc" and replica["samples"] >= 8
        assert replica["threads_last"] >= 1 and replica["open_fds_last"] >= 3
        assert replica["rss_growth"]["low"] < 100


def test_a_leaking_replica_fails_the_leak_gate_by_its_lower_bound(leaky):
    assert leaky.code == 1, leaky.output
    [row] = _growth(leaky).values()
    assert row["passed"] is False
    health = leaky.summary["replica_health"]
    assert health["r2"]["rss_growth"]["low"] > 100  # the bound the threshold judges (docs/nightly-ci.md)
    assert health["r1"]["rss_growth"]["low"] < 100
    assert any("replica_rss_growth" in problem for problem in leaky.summary["problems"])
    page = (leaky.folder / "report.html").read_text(encoding="utf-8")
    assert "Replica health" in page and "Resident memory by replica" in page


def test_the_nightly_gate_regresses_on_the_leak(healthy, leaky, tmp_path):
    """The leaky night judged against the healthy one (--force: the scenarios differ by the planted leak)."""
    compared = subprocess.run([sys.executable, "-m", "harness", "compare", "--force", str(healthy.folder),
                               str(leaky.folder), "--output", str(tmp_path)], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
    assert compared.returncode == 1, compared.stdout + compared.stderr
    rows = [row for row in json.loads((tmp_path / "compare.json").read_text(encoding="utf-8"))["metrics"]
            if row["metric"] == "replica_rss_growth"]
    assert [row["verdict"] for row in rows] == ["regression"], rows


def test_report_rebuilds_the_leak_verdict_from_the_journal_alone(leaky):
    assert leaky.folder is not None
    before = leaky.summary
    (leaky.folder / "figures.json").unlink(missing_ok=True)  # no snapshot: the journal is all there is
    rebuilt = subprocess.run([sys.executable, "-m", "harness", "report", str(leaky.folder)], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
    assert rebuilt.returncode == 1, rebuilt.stdout + rebuilt.stderr
    after = json.loads((leaky.folder / "summary.json").read_text(encoding="utf-8"))
    assert after["replica_health"] == before["replica_health"]
    assert after["thresholds"] == before["thresholds"]
