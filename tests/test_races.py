"""Race probes (`kind = "race"`): one held refund's answer sent twice at once, against the embedded shop.

A healthy shop (a shared once-only record, its API's compare-and-set) releases each raced refund once and
answers the other call "already confirmed", so the run passes, also while its keys rotate. With the
once-only record in each replica's memory and the API's guard off, the twin race releases refunds twice and
the run fails on `no_double_release` and `identical_calls_agree`; a replica that answers nothing for longer
than the watchdog's `hung_after` leaves raced calls hung, which fails `no_call_hung`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from harness.config.cautions import cautions
from harness.config.scenario import ScenarioError, parse_scenario
from harness.folding.merging import merged
from harness.folding.races import RaceFigures
from harness.load.races import RaceAnswer, Watch, agrees, answer_of, watch_of
from harness.mrtr.client import RoundRecord
from harness.mrtr.outcome import Outcome
from harness.vocabulary import WATCH_STATES
from tests.harness_run import run_harness

RACE = """
name = "{name}"
seed = 5
duration = "4s"
time_scale = 60
grace = "3s"

[target]
kind = "embedded"
replicas = 2
{target}

[load]
arrival_rate = 8
timeout = "{timeout}"

[[flows]]
kind = "race"
{flow}

[leads]
think = {{ dist = "constant", value = "{think}" }}

{chaos}
"""

def scenario(name: str = "race", *, target: str = "", flow: str = "", think: str = "6s", timeout: str = "30s",
             chaos: str = "") -> str:
    """A race scenario's text: two replicas, eight flows a second for 4 s, leads thinking `think` (modelled)."""
    return RACE.format(name=name, target=target, flow=flow, think=think, timeout=timeout, chaos=chaos)


ROTATION = """
[[chaos]]  # one TTL of the old key's retirement: 1 s (real)
action = "rotate-keys"
at = "1s"
phase_gap = "0.3s"
"""

BROKEN = """
release_guard = false
overrides = [{ replica = 1, answers_store = "memory" }, { replica = 2, answers_store = "memory" }]
"""

SILENT_REPLICA = """
[[chaos]]  # r2 answers nothing from 2 s to 3.5 s: a raced call sent to it by 3 s hangs past 0.5 s
action = "network"
fault = "blackhole"
at = "2s"
replica = 2
duration = "1.5s"
"""


def _round(outcome: Outcome, result: dict | None = None, took: float = 0.01) -> RoundRecord:
    return RoundRecord(round=2, replica="http://127.0.0.1:1/mcp", request_id=1, intended_at=0.0, sent_at=1.0,
                       received_at=1.0 + took, outcome=outcome, result=result)


def _tool_error(text: str) -> RoundRecord:
    return _round(Outcome.TOOL_ERROR, {"isError": True, "content": [{"type": "text", "text": text}]})


RELEASED = _round(Outcome.COMPLETE, {"structuredContent": {"refund_id": "R-00001", "status": "requested"}})
ONCE_ONLY = _tool_error("Refund R-00001 was already confirmed. Don't send the same answer again.")
CONFLICT = _tool_error("Refund R-00001 is no longer held (requested); the shop's API did not release it again.")


def test_a_raced_answer_reads_in_the_refunds_terms():
    assert answer_of(RELEASED) is RaceAnswer.RELEASED
    assert answer_of(ONCE_ONLY) is answer_of(CONFLICT) is RaceAnswer.ALREADY_ANSWERED
    assert answer_of(_tool_error("There is no quote Q-1.")) is RaceAnswer.TOOL_ERROR
    assert answer_of(_round(Outcome.INVALID_STATE)) is RaceAnswer.INVALID_STATE
    assert answer_of(_round(Outcome.TIMEOUT)) is answer_of(None) is RaceAnswer.NO_ANSWER
    assert answer_of(_round(Outcome.COMPLETE, {"structuredContent": {"status": "needs_confirmation"}})) \
        is RaceAnswer.OTHER


@pytest.mark.parametrize(("first", "second", "expected"), [
    ("released", "already_answered", True),  # the SDK opens the state twice; the once-only record refuses one
    ("already_answered", "released", True),
    ("invalid_state", "invalid_state", True),  # both expired: the same refusal, nothing done
    ("released", "released", False),  # both acted: the once-only record let both through
    ("released", "invalid_state", False),  # the replicas disagree about the state itself (a rotation)
    ("already_answered", "already_answered", False),  # a yes sent, and nothing released
    ("released", "no_answer", None),  # one got no answer: the watchdog's, not judged here
])
def test_two_identical_answers_agree_when_they_tell_one_story(first, second, expected):
    assert agrees(first, second) is expected


def test_the_watchdog_classes_each_call():
    assert [state.value for state in Watch] == list(WATCH_STATES)
    assert watch_of(_round(Outcome.COMPLETE, took=0.1), 2.0) is Watch.OK
    assert watch_of(_round(Outcome.COMPLETE, took=2.5), 2.0) is Watch.SLOW
    assert watch_of(_round(Outcome.TIMEOUT), 2.0) is watch_of(None, 2.0) is Watch.HUNG


def _race(flow_id: str, at: float, answers: list[str], agreed: bool | None, watch=("ok", "ok")) -> dict:
    record = {"type": "flow", "flow_id": flow_id, "flow": "race", "race": "twin", "race_at": at,
              "race_answers": answers, "race_watch": list(watch), "race_replicas": ["r1", "r2"],
              "race_overlapped": True}
    if agreed is not None:
        record["race_agreed"] = agreed
    return record


def _rotation(start: float, end: float) -> list[dict]:
    return [{"type": "chaos", "action": "rotate-keys", "phase": "start", "t": start},
            {"type": "chaos", "action": "rotate-keys", "phase": "end", "t": end}]


def test_races_fold_and_merge_as_one_pass_and_those_inside_a_rotation_are_counted():
    records = [_race("f1", 100.2, ["released", "already_answered"], True),
               _race("f2", 105.5, ["released", "invalid_state"], False),
               _race("f3", 130.0, ["released", "no_answer"], None, ("ok", "hung"))]
    whole, first, second = RaceFigures(), RaceFigures(), RaceFigures()
    for record in records:
        whole.add(record)
    first.add(records[0])
    for record in records[1:]:
        second.add(record)
    assert merged(first, second) == whole
    table = whole.table(_rotation(104.0, 110.0))
    assert table is not None and table["raced"] == 3 and table["disagreed"] == 1
    assert table["by_probe"]["twin"]["not_judged"] == 1 and table["watchdog"] == {"ok": 5, "slow": 0, "hung": 1}
    assert table["examples"] == ["f2 twin on r1 / r2: released / invalid_state"]
    assert table["during_rotation"] == {"exercised": True, "raced": 1, "disagreed": 1, "steps": 1}
    assert whole.during_rotation(_rotation(200.0, 210.0))["exercised"] is False
    assert whole.during_rotation([])["why"] == "the scenario has no rotate-keys chaos step"
    assert RaceFigures().table([]) is None


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=12)
RACE_KEYS = ("race", "race_at", "race_answers", "race_watch", "race_replicas", "race_overlapped", "race_agreed",
             "flow_id")


@settings(max_examples=100, deadline=None)
@given(outcome=st.sampled_from(list(Outcome)), result=st.none() | st.dictionaries(
    st.sampled_from(["structuredContent", "content", "isError"]), JSON, max_size=3))
def test_any_answer_a_server_sends_reads_as_one_of_the_words(outcome, result):
    assert answer_of(_round(outcome, result)) in set(RaceAnswer)


@settings(max_examples=100, deadline=None)
@given(records=st.lists(st.fixed_dictionaries({}, optional=dict.fromkeys(RACE_KEYS, JSON)), min_size=1, max_size=4),
       chaos=st.lists(st.fixed_dictionaries({"action": st.sampled_from(["rotate-keys", "pause"]),
                                             "phase": st.sampled_from(["start", "end"]), "t": st.floats() | JSON}),
                      max_size=4))
@example(records=[{}], chaos=[{"action": "rotate-keys", "phase": "start", "t": float("nan")}])
def test_any_race_record_folds_and_tables_without_breaking(records, chaos):
    figures = RaceFigures()
    for record in records:
        figures.add({**record, "race": record.get("race", "twin")})
    table = figures.table(chaos)
    assert table is not None and table["raced"] == len(records)


@pytest.mark.parametrize(("keys", "message"), [
    ('slow_after = "5s"\nhung_after = "5s"', "must be longer than slow_after"),
    ('probes = ["twin", "twin"]', "names a probe twice"),
])
def test_a_race_flow_with_watchdogs_or_probes_that_make_no_sense_is_refused(keys, message):
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(scenario("bad", flow=keys))


def test_a_twin_probe_against_one_replica_is_said_before_the_run():
    one = parse_scenario(scenario("one").replace("replicas = 2", "replicas = 1"))
    assert any("twin probe" in caution for caution in cautions(one))
    retry_only = parse_scenario(scenario("one", flow='probes = ["retry"]').replace("replicas = 2", "replicas = 1"))
    assert cautions(retry_only) == []
    assert cautions(parse_scenario(scenario("two"))) == []


# --- real runs against the embedded shop ------------------------------------------------------------------


def test_a_healthy_shop_releases_each_raced_refund_once_and_agrees_also_while_its_keys_rotate(tmp_path: Path):
    path = tmp_path / "race.toml"
    path.write_text(scenario(target='ttl = "60s"', chaos=ROTATION))
    finished = run_harness(path, tmp_path / "results", timeout=120)
    assert finished.code == 0, finished.output
    summary = finished.summary
    races = summary["races"]
    twin, retry = races["by_probe"]["twin"], races["by_probe"]["retry"]
    assert twin["raced"] > 0 and retry["raced"] > 0
    assert twin["agreed"] == twin["raced"] and retry["agreed"] == retry["raced"], races
    assert twin["two_replicas"] == twin["raced"] and retry["two_replicas"] == 0
    assert set(twin["answers"]) <= {"released / already_answered", "already_answered / released"}
    assert races["during_rotation"]["exercised"] and races["during_rotation"]["disagreed"] == 0, races
    assert races["watchdog"]["hung"] == 0
    for name in ("identical_calls_agree", "no_call_hung", "no_double_release"):
        assert summary["invariants"][name]["checked"] and summary["invariants"][name]["passed"], name


def test_once_only_records_in_memory_without_the_apis_guard_release_twice_and_a_silent_replica_hangs_calls(
        tmp_path: Path):
    path = tmp_path / "broken.toml"
    # Twins only, their leads thinking 1 s (real): the flows of the first second race before r2 falls silent,
    # those of the next one inside its silence; rounds sent to r2 before a race time out after 2 s.
    path.write_text(scenario("race-broken", target=BROKEN, think="60s", timeout="2s", chaos=SILENT_REPLICA,
                             flow='probes = ["twin"]\nslow_after = "0.2s"\nhung_after = "0.5s"'))
    finished = run_harness(path, tmp_path / "results", timeout=120)
    assert finished.code == 1, finished.output
    summary = finished.summary
    invariants, races = summary["invariants"], summary["races"]
    assert invariants["no_double_release"]["violations"] > 0
    assert invariants["identical_calls_agree"]["violations"] == races["disagreed"] > 0
    assert races["by_probe"]["twin"]["answers"].get("released / released", 0) > 0
    assert any("released / released" in example for example in invariants["identical_calls_agree"]["detail"])
    assert invariants["no_call_hung"]["violations"] == races["watchdog"]["hung"] > 0
    assert races["during_rotation"]["exercised"] is False
    assert {"invariant no_double_release", "invariant identical_calls_agree", "invariant no_call_hung"} <= {
        problem.split(":")[0] for problem in summary["problems"]}
    assert "released / released" in (finished.folder / "report.html").read_text().split("<h2>Race probes</h2>")[1]
