"""A failure's signature: what "the same failure" is, beyond a kind and a name.

Each trial is judged from the summary.json the run's own writer makes from journal records (as
tests/test_hunt_unjudged.py does), so the signature is read off what a real trial leaves; the
parsers of the summary's text get Hypothesis properties. No process; about a second in all.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from harness.config.scenario import parse_scenario
from harness.config.thresholds import Judged, parse_thresholds
from harness.folding.checks import RunChecks
from harness.folding.figures import RunFigures
from harness.folding.invariants import FlowChecks
from harness.folding.reconcile import Matching
from harness.hunt.model import Failure
from harness.hunt.shrink import same_failure
from harness.hunt.signature import SHAPE_LIMIT, invariant_failure, observed_on, replica_of, shape
from harness.hunt.trial import judge
from harness.report.summary_json import summary
from harness.report.verdict import decide
from tests.test_reconcile import T0, logged, rejected_round

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

[expect]
rejections = "== 0"
"rejections{reason='expired'}" = "== 0"
"""


def trial(tmp_path: Path, name: str, records: list[dict]) -> Path:
    """A trial's results folder with the summary.json the run writes from these journal records."""
    scenario = parse_scenario(SCENARIO)
    journal = [{"type": "run", "event": "start", "t": T0 - 10, "run_id": "t", "scenario": "hunted", "seed": 1,
                "duration": 10.0},
               {"type": "run", "event": "load-started", "t": T0 - 5}, *records,
               dict(Matching.from_records(records).reconcile(("r1", "r2"))),
               {"type": "run", "event": "end", "t": T0 + 20, "status": "completed", "reason": None}]
    figures = RunFigures.from_records(journal)
    verdict = decide(figures, parse_thresholds(scenario.judged_table(Judged.EXPECT)), RunChecks.from_records(journal))
    folder = tmp_path / name
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps(summary(scenario, figures, verdict, {}), default=str))
    return folder


def double_release(refund: str, quote: str, times: int) -> dict:
    return {"type": "invariant", "t": T0 + 15, "invariant": "no_double_release", "violations": 1, "checked": True,
            "detail": [f"{refund} (quote {quote}) released {times} times"]}


def lost_outcome(flow: str) -> dict:
    return {"type": "invariant", "t": T0 + 15, "invariant": "one_outcome_per_flow", "violations": 1, "checked": True,
            "detail": [f"{flow}: started 1 times, ended 0 times"]}


def test_unexplained_rejections_are_the_same_failure_only_on_a_replica_they_were_seen_on(tmp_path):
    on_r1 = judge(trial(tmp_path, "a", [rejected_round(T0 + 9, "r1")])).failures
    again_on_r1 = judge(trial(tmp_path, "b", [rejected_round(T0 + 3, "r1", "w1-000007")])).failures
    on_r2 = judge(trial(tmp_path, "c", [rejected_round(T0 + 9, "r2")])).failures
    [unexplained] = [failure for failure in on_r1 if failure.kind == "unexplained"]
    assert str(unexplained) == "unexplained -32602 on r1"
    assert same_failure(unexplained, again_on_r1)
    assert not same_failure(unexplained, on_r2)  # -32602 alone would call these the same


def test_an_invariant_is_the_same_failure_only_in_the_same_shape(tmp_path):
    found = judge(trial(tmp_path, "a", [double_release("RF-0003", "q-8f2a", 2)])).failures
    again = judge(trial(tmp_path, "b", [double_release("RF-0917", "q-00c1", 3)])).failures
    assert [str(failure) for failure in found] == ["invariant no_double_release (released N times)"]
    assert same_failure(found[0], again)  # other ids, another count above one: the same break
    lost = judge(trial(tmp_path, "c", [lost_outcome("w0-000004")])).failures[0]
    doubled = judge(trial(tmp_path, "d", [{**lost_outcome("w0-000004"),
                                           "detail": ["w0-000004: started 2 times, ended 1 times"]}])).failures
    assert lost.detail == ("started 1 times, ended 0 times",)
    assert not same_failure(lost, doubled)  # a flow lost is not a flow run twice


def released_twice_on(*replicas: str, flow: str = "w0-000001", quote: str = "q-1") -> list[dict]:
    """The invariant records a run journals for a refund whose rounds went to these replicas, accepted once and
    released twice by the ledger, as the run's own checks (`FlowChecks`) make them from its journal records."""
    checks = FlowChecks()
    checks.add({"type": "start", "t": T0, "flow_id": flow, "flow": "refund"})
    for number, replica in enumerate(replicas, 1):
        checks.add({"type": "round", "t": T0 + number, "flow_id": flow, "round": number, "replica": replica})
    checks.add({"type": "flow", "t": T0 + 9, "flow_id": flow, "flow": "refund", "outcome": "completed",
                "quote_id": quote, "held": True, "answers": ["accept"]})
    ledger = [{"refund_id": "R-00007", "order_id": "O-1", "quote_id": quote, "amount_cents": 20_000,
               "status": "requested", "released": 2, "paid": 0, "release_conflicts": 0, "payout_conflicts": 0}]
    return [{"type": "invariant", "t": T0 + 15, "invariant": result.name, "violations": result.violations,
             "checked": result.checked, "detail": result.examples or None}
            for result in checks.results(ledger) if result.violations]


def test_an_invariant_carries_the_replica_its_break_was_observed_on(tmp_path):
    """Where it broke is part of it: a double release whose flow's last round was on r2 is not the same failure as one
    last seen on r1, though its kind, name and shape agree; one with no replica said matches either."""
    on_r2 = judge(trial(tmp_path, "a", released_twice_on("r1", "r2"))).failures
    assert [str(failure) for failure in on_r2] == ["invariant no_double_release (released N times) on r2"]
    again = judge(trial(tmp_path, "b", released_twice_on("r2", "r2", flow="w1-000042", quote="q-9"))).failures
    assert same_failure(on_r2[0], again)
    on_r1 = judge(trial(tmp_path, "c", released_twice_on("r2", "r1"))).failures
    assert not same_failure(on_r2[0], on_r1), "kind, name and shape alone would call these the same"
    unsaid = judge(trial(tmp_path, "d", [double_release("RF-0003", "q-8f2a", 2)])).failures
    assert unsaid[0].replicas == () and same_failure(unsaid[0], on_r1)


def test_a_rejection_key_carries_the_reasons_it_counted_and_where_they_were_logged(tmp_path):
    expired = trial(tmp_path, "a", [rejected_round(T0 + 9, "r2"), logged(T0 + 9, "r2", "expired")])
    unknown = trial(tmp_path, "b", [rejected_round(T0 + 9, "r2"), logged(T0 + 9, "r2", "unknown key")])
    found = judge(expired).failures
    assert [str(failure) for failure in found] == ["expectation rejections (expired) on r2",
                                                   "expectation rejections{reason='expired'} on r2"]
    assert not same_failure(found[0], judge(unknown).failures)  # rejections == 0, broken by another reason


@given(st.text(max_size=300))
def test_any_unexplained_example_gives_a_short_label_or_none(text):
    replica = replica_of(text)
    assert replica is None or (0 < len(replica) <= 64 and "\n" not in replica)


@given(st.text(max_size=2000))
def test_any_invariant_example_has_a_one_line_shape_within_its_limit(text):
    said = shape(text)
    assert len(said) <= SHAPE_LIMIT and "\n" not in said and "\r" not in said and said == said.strip()


@given(st.text(max_size=2000))
def test_any_invariant_example_gives_a_short_replica_or_none_and_a_failure(text):
    replica = observed_on(text)
    assert replica is None or (0 < len(replica) <= 64 and "\n" not in replica)
    failure = invariant_failure("no_double_release", [text, f"{text} (last round on r3)", None, 7])
    assert "r3" in failure.replicas and all(len(said) <= SHAPE_LIMIT for said in failure.detail)


def test_a_failure_is_the_same_when_a_part_is_unsaid_on_either_side():
    bare = Failure("unexplained", "-32602")
    assert bare.same_as(Failure("unexplained", "-32602", replicas=("r2",)))
    assert Failure("unexplained", "-32602", replicas=("r1", "r2")).same_as(Failure("unexplained", "-32602",
                                                                                    replicas=("r2",)))
    assert not bare.same_as(Failure("expectation", "-32602"))


def test_a_steady_state_broken_during_or_after_the_chaos_is_one_failure_but_not_one_broken_without_chaos():
    """A busy machine ends a broken flow after the chaos where a quiet one ended it during: the replay of a trial that
    failed during the chaos, failing after it on the same condition, reproduced it. Another condition, or a failure
    with no chaos at all (a control's), is another failure."""
    during = Failure("hypothesis", "during: completed_ratio ratio >= 0.95")
    assert during.same_as(Failure("hypothesis", "after: completed_ratio ratio >= 0.95"))
    assert not during.same_as(Failure("hypothesis", "after: round_duration p(95) < 1s"))
    assert not during.same_as(Failure("hypothesis", "no chaos: completed_ratio ratio >= 0.95"))
    assert not during.same_as(Failure("expectation", "during: completed_ratio ratio >= 0.95"))
    assert str(during) == "hypothesis during: completed_ratio ratio >= 0.95"  # the window is still said
