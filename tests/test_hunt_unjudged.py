"""The hunt judges only what was observed: a trial whose logs lost a replica, or whose chaos did not act, is
"not judged", never a finding (so never shrunk into a minimal.toml that blames the server)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.config.scenario import parse_scenario
from harness.folding.checks import RunChecks
from harness.folding.figures import RunFigures
from harness.folding.reconcile import Matching
from harness.hunt.model import Schedule, Trial
from harness.hunt.search import outcome
from harness.hunt.trial import judge
from harness.report.summary_json import summary
from harness.report.verdict import decide
from tests.test_lost_log_source import lost
from tests.test_reconcile import T0, rejected_round

SCENARIO = """
name = "hunted"
duration = "10s"

[target]
kind = "embedded"
replicas = 2

[load]
arrival_rate = 1

[[flows]]
kind = "refund"
"""


def trial_folder(tmp_path: Path, records: list[dict], *, reconcile_with_loss: bool = True, name: str = "trial") -> Path:
    """A trial's results folder with the summary.json the run writes from these journal records."""
    matching = Matching.from_records(records if reconcile_with_loss else
                                     [record for record in records if record.get("event") != "logs-lost"])
    journal = [{"type": "run", "event": "start", "t": T0 - 10, "run_id": "t", "scenario": "hunted", "seed": 1,
                "duration": 10.0},
               {"type": "run", "event": "load-started", "t": T0 - 5}, *records,
               dict(matching.reconcile(("r1", "r2"))),
               {"type": "run", "event": "end", "t": T0 + 20, "status": "completed", "reason": None}]
    figures = RunFigures.from_records(journal)
    verdict = decide(figures, [], RunChecks.from_records(journal))
    folder = tmp_path / name
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps(summary(parse_scenario(SCENARIO), figures, verdict, {}),
                                                    default=str))
    return folder


def test_a_trial_whose_logs_lost_a_replica_is_not_judged_and_no_finding(tmp_path):
    logs = {"type": "run", "event": "logs", "t": T0 + 15, "sources": [
        {"source": "command 'kubectl logs'", "replica": "r1", "lines": 3, "bad": 0, "cut": 0,
         "unobserved_from": T0 + 5, "why": "exited with code 0"}]}
    folder = trial_folder(tmp_path, [lost(T0 + 5, "r1"), rejected_round(T0 + 9, "r1"), logs],
                          reconcile_with_loss=False)  # as 512d30e reconciled it: every later rejection unexplained
    judged = judge(folder, steps=0)
    assert judged.failures == () and judged.unjudged is not None and "r1" in judged.unjudged
    trial = Trial(index=1, seed=1, schedule=Schedule((), 10.0), purpose="search", exit_code=1,
                  unjudged=judged.unjudged)
    assert outcome(trial, judged.status) == "not judged"


def test_a_trial_whose_chaos_did_not_act_is_not_judged_whatever_else_broke(tmp_path):
    chaos = [{"type": "chaos", "t": T0 + 1, "phase": "start", "action": "restart", "target": "r1"},
             {"type": "chaos", "t": T0 + 2, "phase": "end", "action": "restart", "target": "r1", "ok": False,
              "error": "no such replica"}]
    folder = trial_folder(tmp_path, [*chaos, rejected_round(T0 + 9, "r1")])
    judged = judge(folder, steps=1)
    assert judged.failures == () and judged.unjudged is not None and "restart" in judged.unjudged
    rollback = [{"type": "chaos", "t": T0 + 15, "phase": "start", "action": "rollback", "target": "all"},
                {"type": "chaos", "t": T0 + 15, "phase": "end", "action": "rollback", "target": "all", "ok": True}]
    never_ran = judge(trial_folder(tmp_path, [rejected_round(T0 + 9, "r1"), *rollback], name="never-ran"), steps=1)
    assert never_ran.unjudged == "not judged: its chaos did not act as drawn (1 of 1 never ran)"


def test_a_trial_that_saw_everything_is_judged_as_before(tmp_path):
    judged = judge(trial_folder(tmp_path, [rejected_round(T0 + 9, "r1")]), steps=0)
    assert judged.unjudged is None and [str(failure) for failure in judged.failures] == ["unexplained -32602 on r1"]
