"""The hunt judges only what was observed: a trial whose logs lost a replica, or whose chaos did not act, is
"not judged", never a finding (so never shrunk into a minimal.toml that blames the server). And what it judges is the
property: the must-nevers, the steady state during and after the chaos (a failure of its own kind, its window and
condition its name), `[expect]` only when the hunt counts it; a control trial's steady state over its whole run."""

from __future__ import annotations

import json
from pathlib import Path

from harness.config.scenario import parse_scenario
from harness.config.thresholds import parse_thresholds
from harness.folding.checks import RunChecks
from harness.folding.figures import RunFigures
from harness.folding.reconcile import Matching
from harness.hunt.model import Failure, Schedule, Trial
from harness.hunt.search import outcome
from harness.hunt.trial import Property, judge
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


def trial_folder(tmp_path: Path, records: list[dict], *, reconcile_with_loss: bool = True, name: str = "trial",
                 expect: dict[str, str] | None = None) -> Path:
    """A trial's results folder with the summary.json the run writes from these journal records (judged by
    `expect`)."""
    matching = Matching.from_records(records if reconcile_with_loss else
                                     [record for record in records if record.get("event") != "logs-lost"])
    journal = [{"type": "run", "event": "start", "t": T0 - 10, "run_id": "t", "scenario": "hunted", "seed": 1,
                "duration": 10.0},
               {"type": "run", "event": "load-started", "t": T0 - 5}, *records,
               dict(matching.reconcile(("r1", "r2"))),
               {"type": "run", "event": "end", "t": T0 + 20, "status": "completed", "reason": None}]
    figures = RunFigures.from_records(journal)
    verdict = decide(figures, parse_thresholds(expect or {}), RunChecks.from_records(journal))
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


def probe(phase: str, *conditions: tuple[str, str, bool, bool]) -> dict:
    """A steady-state probe as the run journals it: each condition (key, condition, passed, judged)."""
    detail = [{"threshold": key, "condition": condition, "observed": 0.5 if judged else None, "passed": passed,
               "judged": judged, **({} if judged else {"why": "no flow ended in the window"})}
              for key, condition, passed, judged in conditions]
    ok = all(passed for _, _, passed, _ in conditions)
    return {"type": "hypothesis", "t": T0 + 8, "phase": phase, "ok": ok, "detail": detail,
            "window": {"from": 2.0, "to": 8.0}}


def test_a_steady_state_that_failed_after_the_chaos_is_a_failure_of_its_own_kind_with_its_window_and_condition(
        tmp_path):
    """Today's `not judged` for a deployment that did not come back: now the property's own failure, named by its
    window and condition, so the shrink keeps the same one."""
    folder = trial_folder(tmp_path, [probe("before", ("completed_ratio", "ratio >= 0.95", True, True)),
                                     probe("during", ("completed_ratio", "ratio >= 0.95", True, True)),
                                     probe("after", ("completed_ratio", "ratio >= 0.95", False, True),
                                           ("round_duration", "p(95) < 1", True, True))])
    judged = judge(folder, steps=0, judged_by=Property())
    assert judged.failures == (Failure("hypothesis", "after: completed_ratio ratio >= 0.95"),)
    assert judged.unjudged is None and judged.status == "deviated"
    trial = Trial(index=3, seed=1, schedule=Schedule((), 10.0), purpose="search", exit_code=1,
                  failures=judged.failures)
    assert outcome(trial, judged.status) == "failed"


def test_a_steady_state_that_failed_before_the_chaos_or_could_not_be_judged_is_no_finding(tmp_path):
    before = trial_folder(tmp_path, [probe("before", ("completed_ratio", "ratio >= 0.95", False, True)),
                                     probe("after", ("completed_ratio", "ratio >= 0.95", False, True))], name="before")
    judged = judge(before, steps=0, judged_by=Property())
    assert judged.failures == () and judged.unjudged is not None
    assert "failed before the chaos began" in judged.unjudged and "no fair start" in judged.unjudged
    empty = trial_folder(tmp_path, [probe("after", ("completed_ratio", "ratio >= 0.95", False, False))],
                         name="empty")
    judged = judge(empty, steps=0, judged_by=Property())
    assert judged.failures == () and judged.unjudged == (
        "not judged: the steady state after the chaos could not be judged (completed_ratio ratio >= 0.95: no flow "
        "ended in the window)")
    short = trial_folder(tmp_path, [probe("before", ("completed_ratio", "ratio >= 0.95", False, False)),
                                    probe("during", ("completed_ratio", "ratio >= 0.95", False, False)),
                                    probe("after", ("completed_ratio", "ratio >= 0.95", True, True))], name="short")
    judged = judge(short, steps=0, judged_by=Property())  # nothing ended before or during: the after window judged
    assert judged.failures == () and judged.unjudged is None


def test_expect_counts_only_when_the_hunt_says_so_and_a_control_judges_the_steady_state_over_its_whole_run(
        tmp_path):
    """smoke.toml's `rejections == 0` under chaos: by default held (said as not part of the property), a find only
    with `[hunt] expect = true`; in a control trial, whose [expect] holds the [hypothesis], the steady state's
    condition is a `no chaos` failure of its own kind."""
    folder = trial_folder(tmp_path, [rejected_round(T0 + 9, "r1"), {"type": "rejection", "t": T0 + 8.99,
                                                                     "replica": "r1", "reason": "expired",
                                                                     "method": "tools/call"}],
                          expect={"rejections": "== 0"})
    held = judge(folder, steps=0, judged_by=Property())
    assert held.failures == () and held.unjudged is None and held.uncounted == ("rejections",)
    assert outcome(Trial(index=1, seed=1, schedule=Schedule((), 10.0), purpose="search", exit_code=1),
                   held.status) == "held"
    counted = judge(folder, steps=0, judged_by=Property(expect=True))
    assert counted.failures == (Failure("expectation", "rejections", replicas=("r1",), reasons=("expired",)),)
    control = judge(folder, steps=0, judged_by=Property(steady_state=frozenset({("rejections", "count == 0")})))
    assert control.failures == (Failure("hypothesis", "no chaos: rejections count == 0"),)
