"""A log source that fails or ends before the run does is an outcome of its own: the replica went unobserved from
then, and reconciliation over that span is "not judged" (exit 3), never "unexplained" (a false exit 1)."""

from __future__ import annotations

import json
import sys
import time

import pytest

from harness.config.logs import LogSource
from harness.errors import ExitCode
from harness.folding.checks import RunChecks
from harness.folding.figures import RunFigures
from harness.folding.reconcile import Matching
from harness.logs.collector import Collector, LostSource
from harness.report.verdict import RunStatus, decide
from tests.harness_run import run_harness
from tests.test_chaos_commands import RESTART_SCENARIO, Replicas, toml_list
from tests.test_logs import wait_for
from tests.test_reconcile import T0, logged, rejected_round


def lost(t: float, replica: str, why: str = "command 'kubectl logs' exited with code 0") -> dict:
    return {"type": "run", "event": "logs-lost", "t": t, "replica": replica, "source": "command 'kubectl logs'",
            "why": why}


def test_a_command_source_that_ends_while_followed_is_lost_from_when_it_ended_and_said_once(tmp_path):
    said: list[LostSource] = []
    collector = Collector(lambda event: None, since=time.time(), on_lost=said.append)
    before = time.time()
    command = f"{sys.executable} -c \"print('bye'); raise SystemExit(3)\""
    collector.follow(LogSource("command", command, "r2"))
    try:
        wait_for(lambda: bool(said), "the source's end")
    finally:
        collector.stop(settle=0.1)
    (gone,) = said
    assert gone.replica == "r2" and before <= gone.t <= time.time()
    assert "exited with code 3" in gone.why
    (read,) = collector.sources()
    assert (read.lines, read.unobserved_from, read.why) == (1, gone.t, gone.why)


def test_a_source_stopped_with_the_run_is_not_lost(tmp_path):
    said: list[LostSource] = []
    collector = Collector(lambda event: None, since=time.time(), on_lost=said.append)
    collector.follow(LogSource("command", f"{sys.executable} -c \"import time; time.sleep(60)\"", "r1"))
    collector.follow(LogSource("file", str(tmp_path / "r2.log"), "r2"))
    collector.stop(settle=0.1)
    assert said == [] and collector.lost == []
    assert [read.unobserved_from for read in collector.sources()] == [None, None]


def reconcile(records: list[dict], replicas: tuple[str, ...] = ("r1", "r2")) -> dict:
    return dict(Matching.from_records(records).reconcile(replicas))


def test_rejections_after_a_replicas_log_was_lost_are_not_judged_and_those_before_still_are() -> None:
    result = reconcile([rejected_round(T0 + 1, "r1"), lost(T0 + 5, "r1"), rejected_round(T0 + 9, "r1", "f2"),
                        rejected_round(T0 + 9, "r2", "f3")])
    assert (result["unexplained"], result["not_judged"]) == (2, 1)  # r1 before the loss, and r2 (still observed)
    assert result["unobserved"] == [{"replica": "r1", "from": T0 + 5,
                                     "why": "command 'kubectl logs' exited with code 0"}]


def test_a_lost_source_that_read_every_replica_leaves_every_later_rejection_not_judged() -> None:
    result = reconcile([lost(T0, "log1"), rejected_round(T0 + 1, "r1"), rejected_round(T0 + 2, "r2", "f2"),
                        rejected_round(T0 + 3, "r2", "f3"), logged(T0 + 3, "r2")])
    assert (result["matched"], result["unexplained"], result["not_judged"]) == (1, 0, 2)


def verdict_of(records: list[dict]):
    run = [{"type": "run", "event": "start", "t": T0 - 10, "run_id": "x", "scenario": "s", "seed": 1,
            "duration": 10.0},
           {"type": "run", "event": "load-started", "t": T0 - 5}]
    reconciled = dict(Matching.from_records(records).reconcile(("r1", "r2")))
    end = [reconciled, {"type": "run", "event": "end", "t": T0 + 20, "status": "completed", "reason": None}]
    journal = [*run, *records, *end]
    return decide(RunFigures.from_records(journal), [], RunChecks.from_records(journal))


def test_a_run_whose_rejections_fell_where_a_log_was_unobserved_exits_3_naming_the_replica_and_when() -> None:
    verdict = verdict_of([lost(T0 + 5, "r1"), rejected_round(T0 + 9, "r1")])
    assert verdict.status is RunStatus.ABORTED and verdict.exit_code is ExitCode.TARGET
    assert verdict.reason is not None and "not judged" in verdict.reason and "r1 from " in verdict.reason
    assert verdict.reconciliation is not None and verdict.reconciliation.unexplained == 0


def test_an_unexplained_rejection_the_logs_saw_still_fails_the_run_beside_one_not_judged() -> None:
    verdict = verdict_of([lost(T0 + 5, "r1"), rejected_round(T0 + 9, "r1"), rejected_round(T0 + 9, "r2", "f2")])
    assert verdict.exit_code is ExitCode.FAILED and verdict.status is RunStatus.FAILED


def test_a_lost_log_with_no_rejection_after_it_judges_everything() -> None:
    verdict = verdict_of([rejected_round(T0 + 1, "r1"), logged(T0 + 1, "r1"), lost(T0 + 5, "r1")])
    assert verdict.exit_code is ExitCode.PASSED
    assert verdict.reconciliation is not None and verdict.reconciliation.unobserved[0]["replica"] == "r1"


# --- a whole run -------------------------------------------------------------------------------


@pytest.fixture
def desk(tmp_path):
    started = Replicas(tmp_path / "replicas")
    try:
        yield started
    finally:
        started.stop()


def test_a_run_whose_log_command_ends_early_says_whose_log_went_unobserved_and_exits_3_not_1(desk, tmp_path):
    """r1's log is read by a command that gives up after a second (as `kubectl logs -f` does when its pod goes):
    the restart's `unknown key` rejections come later, where nobody read r1's log. At 512d30e they were
    "unexplained" and the run failed the target (exit 1)."""
    urls = [desk.start(name, "tests.servers.refund_desk") for name in ("r1", "r2")]
    desk.wait_ready()
    logs = [f"command:timeout 1 tail -n 0 -F {desk.log('r1')}", f"file:{desk.log('r2')}@r2"]
    scenario = tmp_path / "restart.toml"
    scenario.write_text(RESTART_SCENARIO.format(urls=toml_list(urls), logs=toml_list(logs), folder=desk.folder))

    finished = run_harness(scenario, tmp_path / "results")

    assert finished.code == ExitCode.TARGET, finished.output
    journal = finished.journal()
    (gone,) = [record for record in journal if record.get("event") == "logs-lost"]
    assert gone["replica"] == "log1" and "exited with code 124" in gone["why"]
    summary = json.loads((finished.folder / "summary.json").read_text())
    assert summary["status"] == "aborted" and "not judged" in summary["reason"]
    assert "threshold rejections{reason='unknown key',replica='r1'}" in summary["reason"]  # the log that would count
    reconciliation = summary["reconciliation"]
    assert reconciliation["not_judged"] > 0 and reconciliation["unexplained"] == 0
    assert reconciliation["unobserved"] == [{"replica": "log1", "from": gone["t"], "why": gone["why"]}]
    sources = {source["replica"]: source for source in summary["rejections"]["log_sources"]}
    assert sources["log1"]["unobserved_from"] == gone["t"] and sources["r2"]["unobserved_from"] is None


def test_a_log_source_that_cannot_start_is_the_sources_failure_exit_3_not_the_harness(desk, tmp_path):
    """At 512d30e the run said "harness error: SourceError: cannot start ..." and exited 4."""
    urls = [desk.start("r1", "tests.servers.refund_desk")]
    desk.wait_ready()
    scenario = tmp_path / "restart.toml"
    logs = toml_list(["command:/nonexistent/logger -f"])
    scenario.write_text(RESTART_SCENARIO.format(urls=toml_list(urls), logs=logs, folder=desk.folder))

    finished = run_harness(scenario, tmp_path / "results")

    assert finished.code == ExitCode.TARGET, finished.output
    assert "cannot start '/nonexistent/logger'" in finished.output and "harness error" not in finished.output
