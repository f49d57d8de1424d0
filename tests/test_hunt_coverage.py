"""The hunt's coverage and what "nothing broke" is worth: cells with parameters, counted where chaos met rounds.

No process starts here (the hunt that says all of it on the terminal, its journal and its page is
`tests/test_hunt_search.py::test_a_healthy_shop_holds_two_short_trials_exits_0_and_says_its_coverage`):
the cells come from the actions' declarations and agree with what the draw draws; a step counts
only where its trial's summary.json says it met rounds in flight (read as untrusted data: any
JSON gives an answer, never an exception); the residual-risk bound is the exact binomial one;
the health checks say when most trials were not judged or no fault met the load.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.config.chaos import CHAOS_ACTIONS
from harness.hunt.coverage import (
    acted,
    cells,
    count,
    health,
    residual_line,
    residual_record,
    residual_risk,
    step_cell,
    variants,
)
from harness.hunt.draw import Space, draw_schedule
from harness.hunt.model import Failure, HuntResult, Schedule, Trial, chaos_step
from harness.hunt.page import coverage_line, render_page

LABELS = ["r1", "r2"]


def _space(*actions: str, duration: float = 9.0) -> Space:
    return Space(actions=actions, replicas=(1, 2), replica_count=2, duration=duration, max_steps=2, ttl=600.0,
                 name="shop")


def test_a_cell_names_the_parameters_that_choose_what_the_step_does():
    """"A reset mid-answer on replica 2, late" is one cell; a value left out is the default the step acted with."""
    reset = chaos_step({"action": "network", "at": 7.5, "replica": 2, "fault": "reset", "when": "mid-answer",
                        "duration": 1.0})
    assert step_cell(reset, LABELS, 9.0) == ("network fault=reset when=mid-answer", "r2", "late")
    rotation = chaos_step({"action": "rotate-keys", "at": 0.5})
    assert step_cell(rotation, LABELS, 9.0) == ("rotate-keys order=correct", "all", "early")
    skew = chaos_step({"action": "clock-skew", "at": 4.0, "replica": 1, "behind": True})
    assert step_cell(skew, LABELS, 9.0) == ("clock-skew behind=true", "r1", "middle")
    assert step_cell(chaos_step({"action": "restart", "at": 1.0}), LABELS, 9.0) == ("restart", "r1", "early")


def test_each_action_s_variants_are_the_combinations_of_its_own_parameters():
    assert variants("restart") == ["restart"]
    assert variants("rotate-keys") == [f"rotate-keys order={order}"
                                       for order in ("correct", "minter-first", "retire-early")]
    assert variants("clock-skew") == ["clock-skew behind=false", "clock-skew behind=true"]
    network = variants("network")
    assert len(network) == 11  # latency by 3 directions, reset by 3 moments, and 5 faults with no literal of their own
    assert "network fault=reset when=mid-answer" in network and "network fault=down" in network
    assert not any("when=" in name for name in network if "fault=reset" not in name)  # a fault's own keys only


def test_every_drawn_step_is_in_a_cell_and_the_draw_reaches_every_variant():
    """The cells are what the draw can draw: none it cannot reach (coverage out of too many), none missing."""
    actions = tuple(action for action in CHAOS_ACTIONS if action != "command")
    space = _space(*actions, duration=20.0)
    allowed = set(cells(space, LABELS))
    seen = set()
    for index in range(1, 1500):
        schedule = draw_schedule(space, 3, index)
        for step in schedule.steps:
            cell = step_cell(step, LABELS, schedule.duration)
            assert cell in allowed, cell
            seen.add(cell[0])
    assert seen == {name for name, _, _ in allowed}
    assert len(cells(_space("network"), LABELS)) == 11 * 3 * 3  # variants x (r1, r2, all) x thirds


def _summary(folder: Path, chaos: list[dict[str, Any]], duration: float = 9.0, flows: int = 30) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps({"duration": duration, "flows": {"total": flows},
                                                     "chaos": chaos}))
    return folder


def _row(action: str, target: str, start: float, ok: bool | None = True, **more: Any) -> dict[str, Any]:
    return {"action": action, "target": target, "start": start, "end": start + 1.0, "ok": ok, "error": None,
            "detail": None, **more}


LATENCY = chaos_step({"action": "network", "at": 2.0, "replica": 2, "fault": "latency", "duration": 1.0})
RESTART = chaos_step({"action": "restart", "at": 5.0, "replica": 1})


def test_a_network_fault_counts_only_when_a_round_was_sent_into_its_window(tmp_path):
    schedule = Schedule(steps=(LATENCY, RESTART), duration=9.0)
    met = _summary(tmp_path / "met", [_row("network", "r2", 2.0, rounds={"r2": {"complete": 3}}),
                                      _row("restart", "r1", 5.0), _row("rollback", "all", 9.5)])
    assert acted(met, schedule, LABELS) == [True, True]
    empty = _summary(tmp_path / "empty", [_row("network", "r2", 2.0, rounds={}), _row("restart", "r1", 5.0)])
    assert acted(empty, schedule, LABELS) == [False, True]  # no round met the fault: it touched nothing


def test_a_step_that_failed_ran_after_the_load_or_is_missing_counts_nowhere(tmp_path):
    schedule = Schedule(steps=(LATENCY, RESTART), duration=9.0)
    failed = _summary(tmp_path / "failed", [_row("network", "r2", 2.0, ok=False, rounds={"r2": {"complete": 1}}),
                                            _row("restart", "r1", 5.0, ok=None)])
    assert acted(failed, schedule, LABELS) == [False, False]
    late = _summary(tmp_path / "late", [_row("restart", "r1", 9.5)])
    assert acted(late, schedule, LABELS) == [False, False]  # the network row is missing; the restart after the load
    idle = _summary(tmp_path / "idle", [_row("restart", "r1", 5.0)], flows=0)
    assert acted(idle, Schedule(steps=(RESTART,), duration=9.0), LABELS) == [False]  # no load: no round in flight
    other = _summary(tmp_path / "other", [_row("restart", "r2", 5.0)])
    assert acted(other, Schedule(steps=(RESTART,), duration=9.0), LABELS) == [False]  # not whom the step named


def test_a_damaged_or_missing_summary_counts_nothing(tmp_path):
    schedule = Schedule(steps=(RESTART,), duration=9.0)
    assert acted(tmp_path / "nowhere", schedule, LABELS) == [False]
    (tmp_path / "summary.json").write_text("{not json")
    assert acted(tmp_path, schedule, LABELS) == [False]


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                 max_size=4), max_leaves=20)
_ROWS = st.lists(st.fixed_dictionaries({"action": st.sampled_from(["network", "restart", "x"]),
                                        "target": st.sampled_from(["r1", "r2", "all", None]),
                                        "start": st.none() | st.floats(-5, 20, allow_nan=False),
                                        "ok": st.none() | st.booleans(),
                                        "rounds": st.none() | st.dictionaries(st.text(max_size=3), st.dictionaries(
                                            st.text(max_size=3), st.integers(-3, 3), max_size=2), max_size=2)}),
                 max_size=4)


@settings(max_examples=200, deadline=None)
@given(document=_JSON | st.fixed_dictionaries({"duration": st.floats(allow_nan=False), "flows": _JSON,
                                                "chaos": _ROWS | _JSON}))
def test_any_summary_gives_an_answer_per_step_never_an_exception(tmp_path_factory, document):
    """summary.json is read as untrusted data: whatever JSON it holds, each step is counted or not, nothing raises."""
    folder = tmp_path_factory.mktemp("summary")
    (folder / "summary.json").write_text(json.dumps(document))
    schedule = Schedule(steps=(LATENCY, RESTART), duration=9.0)
    answer = acted(folder, schedule, LABELS)
    assert len(answer) == 2 and all(isinstance(met, bool) for met in answer)


def _trial(index: int, folder: str = "", **more: Any) -> Trial:
    return Trial(index=index, seed=index, schedule=Schedule(steps=(LATENCY, RESTART), duration=9.0),
                 purpose="search", folder=folder, **more)


def test_only_a_judged_trial_s_steps_that_met_rounds_are_counted(tmp_path):
    _summary(tmp_path / "t1", [_row("network", "r2", 2.0, rounds={}), _row("restart", "r1", 5.0)])
    coverage: dict[tuple[str, str, str], int] = {}
    count(coverage, _trial(1, "t1"), tmp_path / "t1", LABELS)
    assert coverage == {("restart", "r1", "middle"): 1}
    count(coverage, _trial(2, "t1", unjudged="not judged: its chaos did not act as drawn"), tmp_path / "t1", LABELS)
    assert coverage == {("restart", "r1", "middle"): 1}  # a trial not judged proves nothing


def test_the_residual_risk_is_the_exact_one_sided_binomial_bound():
    """0 failures in n trials: the rate p with (1 - p)^n = 5%; near 3/n (the rule of three)."""
    assert residual_risk(0) is None
    assert residual_risk(1) == 0.95
    for n in (5, 20, 59, 300):
        bound = residual_risk(n)
        assert bound is not None and math.isclose((1 - bound) ** n, 0.05)
    assert round(residual_risk(20) or 0, 4) == 0.1391
    assert 2.9 / 300 < (residual_risk(300) or 0) < 3.0 / 300


def test_the_residual_line_counts_judged_search_trials_only_and_is_silent_on_a_find():
    held = [_trial(index) for index in range(1, 21)]
    unjudged = _trial(21, unjudged="not judged: the log of r1 was lost during the trial")
    errored = _trial(22, exit_code=4)
    shrink = Trial(index=23, seed=1, schedule=Schedule(steps=(), duration=9.0), purpose="shrink")
    result = HuntResult(scenario="shop", seed=1, trials=[*held, unjudged, errored, shrink], stopped_by="trials")
    assert residual_line(result) == ("0 failures in 20 judged trials: the per-trial failure rate of schedules drawn "
                                     "so is below 13.9% (95% upper bound)")
    record = residual_record(result)
    assert record["judged"] == 20 and record["residual_risk"] == round(1 - 0.05 ** (1 / 20), 6)
    nothing = HuntResult(scenario="shop", seed=1, trials=[unjudged], stopped_by="trials")
    assert residual_line(nothing) == "no trial was judged: nothing bounds the failure rate"
    failed = _trial(1, failures=(Failure("invariant", "no_double_refund"),), exit_code=1)
    found = HuntResult(scenario="shop", seed=1, trials=[failed], found=failed, stopped_by="found")
    assert residual_line(found) is None and residual_record(found)["residual_risk"] is None


def test_the_health_checks_say_what_weakens_the_verdict():
    lost = "not judged: the log of r1 was lost during the trial"
    mostly_lost = HuntResult(scenario="shop", seed=1, trials=[_trial(1), _trial(2, unjudged=lost),
                                                              _trial(3, unjudged=lost)],
                             coverage={("restart", "r1", "early"): 1})
    assert health(mostly_lost) == ["most trials not judged (2 of 3): the coverage and the bound count only judged "
                                   "ones"]
    untouched = HuntResult(scenario="shop", seed=1, trials=[_trial(1), _trial(2)])
    assert health(untouched) == ["no fault touched a round in flight: the trials held without chaos meeting the "
                                 "load"]
    assert health(HuntResult(scenario="shop", seed=1, trials=[_trial(1)],
                             coverage={("restart", "r1", "early"): 1})) == []


def test_the_page_and_the_coverage_line_say_the_cells_and_what_nothing_broke_is_worth():
    space = _space("restart", "rotate-keys")
    allowed = cells(space, LABELS)
    assert len(allowed) == 1 * 2 * 3 + 3 * 3 * 3  # restart: r1, r2; rotate-keys: 3 orders on r1, r2, all
    result = HuntResult(scenario="shop", seed=1, trials=[_trial(1)], stopped_by="trials",
                        coverage={("restart", "r1", "middle"): 1, ("rotate-keys order=minter-first", "all", "late"): 2})
    line = coverage_line(result, allowed)
    assert line == ("2 of 33 cells (action and its parameters, replica, early/middle/late) acted on a round in flight "
                    "in 1 trial (restart 1/6, rotate-keys 1/27)")
    html = render_page(result, allowed)
    assert "0 failures in 1 judged trial: the per-trial failure rate" in html and "below 95.0%" in html


def test_the_summary_the_run_writes_says_which_steps_met_rounds(tmp_path):
    """summary.json as the run writes it (`harness.report.summary_json`, from journal records): a network fault on r2
    with a round sent into its window met the load; the same fault where rounds went only to r1 did not; a restart
    that succeeded during the load did."""
    from tests.test_hunt_unjudged import trial_folder
    from tests.test_reconcile import T0

    def fault(start: float, action: str = "network", target: str = "r2") -> list[dict[str, Any]]:
        return [{"type": "chaos", "t": T0 + start, "phase": "start", "action": action, "target": target},
                {"type": "chaos", "t": T0 + start + 1, "phase": "end", "action": action, "target": target,
                 "ok": True}]

    def sent(at: float, replica: str) -> dict[str, Any]:
        return {"type": "round", "t": T0 + at + 0.1, "flow_id": f"w0-{int(at * 10):06d}", "flow": "refund",
                "tool": "refund", "round": 1, "replica": replica, "intended": T0 + at, "sent": T0 + at,
                "latency": 0.1, "server_time": 0.05, "outcome": "complete", "http_status": 200}

    flow = {"type": "flow", "t": T0 + 8, "flow_id": "w0-000001", "flow": "refund", "outcome": "completed"}
    schedule = Schedule(steps=(LATENCY, RESTART), duration=9.0)
    met = trial_folder(tmp_path, [*fault(1.0), sent(1.5, "r2"), *fault(4.0, "restart", "r1"), flow], name="met")
    assert acted(met, schedule, LABELS) == [True, True]
    missed = trial_folder(tmp_path, [*fault(1.0), sent(1.5, "r1"), *fault(4.0, "restart", "r1"), flow],
                          name="missed")
    assert acted(missed, schedule, LABELS) == [False, True]
