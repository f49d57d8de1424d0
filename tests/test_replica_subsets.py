"""A chaos step on several replicas at once (`replicas = [1, 3]`): a minority, or all but one.

The model, its validation, whom the journal says it acts on, the draw's subsets and their coverage cells need
no process; one real run restarts two of three replicas of the embedded shop and leaves the third alone.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.config.chaos import CHAOS_ACTIONS, ChaosStep, touches
from harness.config.scenario import ScenarioError, parse_scenario
from harness.folding.figures import FaultWindow
from harness.hunt.coverage import cells, step_cell
from harness.hunt.draw import Space, draw_schedule, subset_sizes
from harness.hunt.model import Schedule, chaos_step, describe, step_table
from tests.harness_run import run_harness

LABELS = ["r1", "r2", "r3"]
SEVERAL = {name for name, model in CHAOS_ACTIONS.items() if model.several}


def _space(replicas: int, *actions: str) -> Space:
    return Space(actions=actions or tuple(sorted(SEVERAL)), replicas=tuple(range(1, replicas + 1)),
                 replica_count=replicas, duration=9.0, max_steps=3, ttl=600.0, name="shop")


# --- the model (no process) ---------------------------------------------------------------------------------------


def test_a_step_names_several_replicas_each_once_in_order_and_the_journal_says_them_joined():
    step = chaos_step({"action": "restart", "at": 1.0, "replicas": [3, 1]})
    assert step.named() == (1, 3) and step.acted_on(3) == [0, 2]
    assert step.journal_target(LABELS) == "r1+r3"
    assert step_table(step) == {"action": "restart", "at": 1.0, "replicas": [1, 3]}
    assert describe_one(step) == "restart r1+r3 @1s"
    network = chaos_step({"action": "network", "at": 0.0, "replicas": [2, 3], "fault": "blackhole", "duration": 1.0})
    assert network.journal_target(LABELS) == "r2+r3" and network.acted_on(3) == [1, 2]


def describe_one(step: ChaosStep) -> str:
    return describe(Schedule(steps=(step,), duration=9.0))


def test_replica_still_names_one_and_none_keeps_the_action_s_default():
    assert chaos_step({"action": "restart", "at": 1.0, "replica": 2}).acted_on(3) == [1]
    assert chaos_step({"action": "restart", "at": 1.0}).acted_on(3) == [0]
    assert chaos_step({"action": "set-ttl", "at": 1.0, "ttl": 60.0}).acted_on(3) == [0, 1, 2]
    assert chaos_step({"action": "rolling-restart", "at": 1.0}).journal_target(LABELS) == "all"


@pytest.mark.parametrize(("table", "words"), [
    ({"action": "restart", "at": 1.0, "replicas": [1, 1]}, "names a replica twice"),
    ({"action": "restart", "at": 1.0, "replicas": [2]}, "at least 2"),
    ({"action": "restart", "at": 1.0, "replicas": [0, 1]}, "greater than or equal to 1"),
    ({"action": "restart", "at": 1.0, "replica": 1, "replicas": [2, 3]}, "not both"),
    ({"action": "rolling-restart", "at": 1.0, "replicas": [1, 2]}, "replicas"),
    ({"action": "rotate-keys", "at": 1.0, "replicas": [1, 2]}, "replicas"),
])
def test_a_bad_subset_or_one_on_an_action_that_cannot_take_one_is_refused(table, words):
    with pytest.raises(ValidationError, match=words):
        chaos_step(table)


def test_a_scenario_naming_a_replica_it_does_not_have_in_replicas_is_refused_naming_the_key():
    text = SHOP.format(replicas=2, subset="[1, 3]")
    with pytest.raises(ScenarioError, match=r"names replica 3 in `replicas`, but there are 2"):
        parse_scenario(text)
    assert parse_scenario(SHOP.format(replicas=3, subset="[1, 3]")).chaos[0].journal_target(LABELS) == "r1+r3"


def test_a_fault_window_on_several_replicas_counts_the_rounds_sent_to_them_only():
    assert touches("r1+r3", "r3") and touches("all", "r2") and not touches("r1+r3", "r2")
    window = FaultWindow(start=0.0, target="r1+r3")
    for replica in ("r1", "r2", "r3"):
        window.add({"sent": 1.0, "replica": replica, "outcome": "ok"})
    assert window.by_replica() == {"r1": {"ok": 1}, "r3": {"ok": 1}}


# --- the draw and its coverage (no process) -----------------------------------------------------------------------


def test_the_sizes_drawn_are_a_minority_of_two_or_more_and_all_but_one():
    assert [subset_sizes(count) for count in (1, 2, 3, 4, 5, 7)] == [[], [], [2], [3], [2, 4], [2, 3, 6]]


def test_three_replicas_draw_every_pair_for_each_action_that_can_act_on_several_and_only_for_those():
    """Over many seeds every (action, pair) is drawn, every drawn scenario validates, and an action that cannot act
    on several never names them."""
    on_replicas = sorted(name for name, model in CHAOS_ACTIONS.items() if model.acts_on != "auth" and name != "command")
    space = _space(3, *on_replicas)
    drawn: Counter[tuple[str, tuple[int, ...]]] = Counter()
    for seed in range(60):
        for index in range(1, 11):
            for step in draw_schedule(space, seed, index).steps:
                subset = getattr(step, "replicas", None)
                if subset is not None:
                    drawn[(step.action, tuple(subset))] += 1
    assert {action for action, _ in drawn} == SEVERAL
    assert {subset for _, subset in drawn} == {(1, 2), (1, 3), (2, 3)}
    assert {"restart", "kill", "pause", "network", "set-ttl"} <= SEVERAL
    assert not SEVERAL & {"rolling-restart", "rotate-keys", "command"}


def test_two_replicas_draw_no_subset_so_their_schedules_are_unchanged():
    space = _space(2)
    assert all(getattr(step, "replicas", None) is None
               for seed in range(20) for index in range(1, 11) for step in draw_schedule(space, seed, index).steps)


def test_five_replicas_draw_minorities_of_two_and_all_but_one():
    space = _space(5, "restart")
    sizes = {len(step.replicas) for seed in range(40) for index in range(1, 11)
             for step in draw_schedule(space, seed, index).steps if step.replicas}
    assert sizes == {2, 4}


def test_a_subset_is_a_coverage_cell_of_its_own():
    space = _space(3, "restart")
    restart_cells = {whom for _, whom, _ in cells(space, LABELS)}
    assert restart_cells == {"r1", "r2", "r3", "r1+r2", "r1+r3", "r2+r3"}
    step = chaos_step({"action": "restart", "at": 8.0, "replicas": [1, 3]})
    assert step_cell(step, LABELS, 9.0) == ("restart", "r1+r3", "late")


# --- one real run -------------------------------------------------------------------------------------------------

SHOP = """\
name = "two-of-three"
seed = 3
duration = "8s"
time_scale = 60

[target]
replicas = {replicas}

[load]
arrival_rate = 2
routing = "round-robin"

[[flows]]
kind = "refund"
amount = "above-limit"

[leads]
think = {{ dist = "constant", value = "6s" }}

[[chaos]]
at = "1s"
action = "restart"
replicas = {subset}
"""


def test_a_restart_of_two_of_three_replicas_restarts_those_two_and_leaves_the_third(tmp_path: Path):
    scenario = tmp_path / "two-of-three.toml"
    scenario.write_text(SHOP.format(replicas=3, subset="[1, 3]"))
    finished = run_harness(scenario, tmp_path / "results", timeout=150)
    assert finished.code == 0, finished.output
    [end] = [record for record in finished.journal() if record["type"] == "chaos" and record["phase"] == "end"
             and record["action"] == "restart"]
    assert end["target"] == "r1+r3" and end["ok"] is True, end
    assert len(end["detail"]["ready_after"]) == 2
    starts = {log.stem: len(re.findall(r"Started server process \[\d+\]", log.read_text()))
              for log in (finished.folder / "target" / "logs").glob("r*.log")}
    assert starts == {"r1": 2, "r2": 1, "r3": 2}, starts
