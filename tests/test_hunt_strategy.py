"""The search's strategies (`[hunt] strategy`, `--strategy`): random, swarm and cover.

Each strategy is drawn over many seeds with a history of trials made up here (no process):
random draws exactly what the hunt drew before strategies existed, swarm's trials each draw from
their own subset of the actions, cover puts every step in a cell drawn least so far. One real hunt
(`--strategy cover`, about 20 s) checks that the search asks its strategy with the trials so far
and says which strategy it used.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import get_args

import pytest

from harness.config.hunt import StrategyName
from harness.config.scenario import parse_scenario
from harness.config.strict import ScenarioError
from harness.hunt.coverage import cells as coverage_cells
from harness.hunt.coverage import step_cell
from harness.hunt.draw import Space, draw_schedule, trial_seed
from harness.hunt.model import Schedule, Trial, TrialPurpose, chaos_step, describe
from harness.hunt.records import HuntRecordType, TrialRecord
from harness.hunt.strategies.cover import Cover
from harness.hunt.strategies.random import RandomDraw
from harness.hunt.strategies.swarm import Swarm
from harness.hunt.strategy import Strategy, Tried, strategies, strategy_for
from harness.hunt.trial import Base, trial_scenario
from tests.harness_run import ROOT

SHOP = """\
name = "hunted"
seed = 5
duration = "10s"
time_scale = 60

[target]
replicas = 2
{auth}
[load]
arrival_rate = 3
routing = "round-robin"

[[flows]]
kind = "refund"
amount = "above-limit"

[leads]
think = {{ dist = "constant", value = "6s" }}

[hunt]
trial_duration = "6s"
{hunt}
"""

AUTH = """\
[target.auth]
kind = "client-credentials"
client_id = "harness"
client_secret_env = "HUNT_TEST_SECRET"
"""


def _base(tmp_path: Path, hunt: str = "", auth: str = AUTH) -> Base:
    path = tmp_path / "hunted.toml"
    path.write_text(SHOP.format(auth=auth, hunt=hunt))
    return Base.read(path)


def _tried(index: int, schedule: Schedule, purpose: TrialPurpose = "search") -> Tried:
    """A trial as the hunt would hand it to its strategy (held, nothing run here)."""
    record: TrialRecord = {"type": HuntRecordType.TRIAL, "index": index, "seed": 1, "purpose": purpose,
                           "schedule": {"steps": [], "duration": schedule.duration, "arrival_rate": None},
                           "outcome": "held", "failures": [], "reasons": {}, "exit_code": 0, "status": "completed",
                           "problems": [], "folder": f"trials/t{index:03d}", "uncounted_expect": [], "seconds": 7.0}
    return Tried(Trial(index=index, seed=1, schedule=schedule, purpose=purpose), record, Path(record["folder"]))


def _walk(strategy: Strategy, trials: int, controls: int = 2) -> list[Schedule]:
    """The search's schedules, each asked for with the trials before it (controls first) as the hunt asks."""
    history = [_tried(index, Schedule((), strategy.space.duration), "control") for index in range(1, controls + 1)]
    drawn = []
    for _ in range(trials):
        schedule = strategy.next(history)
        drawn.append(schedule)
        history.append(_tried(len(history) + 1, schedule))
    return drawn


@pytest.fixture
def every_action(tmp_path: Path) -> Base:
    """A shop with its own authorization server: every action but `command` can be drawn, up to 4 steps a trial."""
    return _base(tmp_path, "max_steps = 4\n")


# --- the seam -------------------------------------------------------------------------------------------------------


def test_each_strategy_name_the_settings_take_is_one_module_and_the_help_names_it():
    from harness.cli.main import build_parser

    assert set(strategies()) == set(get_args(StrategyName)) == {"random", "swarm", "cover", "lineage"}
    assert all(strategies()[name].name == name for name in strategies())
    (commands,) = [action for action in build_parser()._actions if action.choices and "hunt" in action.choices]
    [flag] = [action for action in commands.choices["hunt"]._actions if "--strategy" in action.option_strings]
    assert flag.help is not None and all(f"{name} (" in flag.help for name in get_args(StrategyName))


def test_an_unknown_strategy_is_refused_in_the_file_and_as_a_flag_with_exit_2_before_anything_starts(tmp_path):
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(SHOP.format(auth="", hunt='strategy = "swarn"\n'))
    assert "strategy" in str(refused.value) and "'swarm'" in str(refused.value)
    path = tmp_path / "hunted.toml"
    path.write_text(SHOP.format(auth="", hunt=""))
    done = subprocess.run([sys.executable, "-m", "harness", "hunt", str(path), "--strategy", "swarn", "--results",
                           str(tmp_path / "results")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and \
        "hunt.strategy: must be one of 'random', 'swarm', 'cover' or 'lineage', not 'swarn'" in done.stderr
    assert not (tmp_path / "results").exists()


def test_the_hunt_asks_the_strategy_the_settings_or_the_flag_name_and_its_first_schedule_is_its_first_trials(tmp_path):
    from harness.hunt.search import Hunt

    path = tmp_path / "hunted.toml"
    path.write_text(SHOP.format(auth="", hunt='strategy = "swarm"\n'))
    assert Hunt(Base.read(path), stream=io.StringIO()).strategy.name == "swarm"
    hunt = Hunt(Base.read(path, {"hunt.strategy": "cover"}), stream=io.StringIO())  # --strategy cover
    assert isinstance(hunt.strategy, Cover)
    first = hunt.strategy.next([_tried(1, Schedule((), 6.0), "control")])
    assert list(hunt.first_scenario().chaos) == list(first.steps)  # what say_remote is asked about is trial 1
    plain = tmp_path / "plain.toml"
    plain.write_text(SHOP.format(auth="", hunt=""))
    assert isinstance(Hunt(Base.read(plain), stream=io.StringIO()).strategy, RandomDraw)  # the default


@pytest.mark.parametrize("name", get_args(StrategyName))
def test_each_strategy_draws_the_same_schedules_from_the_same_seed_and_every_one_validates(every_action, name):
    space = Space.of(every_action.scenario)
    drawn = _walk(strategy_for(name, space, 11, ["r1", "r2"]), 40)
    assert drawn == _walk(strategy_for(name, space, 11, ["r1", "r2"]), 40)
    assert drawn != _walk(strategy_for(name, space, 12, ["r1", "r2"]), 40)
    for index, schedule in enumerate(drawn, 1):
        assert 1 <= len(schedule.steps) <= 4 and schedule.duration == 6.0
        assert [step.at for step in schedule.steps] == sorted(step.at for step in schedule.steps)
        scenario, _ = trial_scenario(every_action, schedule, trial_seed(11, index), "drawn")
        assert list(scenario.chaos) == list(schedule.steps)


# --- random ---------------------------------------------------------------------------------------------------------

SEED_11 = [
    "subject-drift @1.3s 4.7s, rotate-keys correct r1 @4.1s",
    "rolling-restart r2 @2.2s, clock-skew r2 @4.5s",
    "rename r2 @0.3s, network bandwidth r1 @1s 2.3s, memory-records r2 @2.6s, rename r2 @3.5s",
]
"""The first three schedules the hunt drew with seed 11 in the scenario above before strategies existed: pinned, so
that `hunt --seed 11` keeps drawing what it drew."""


def test_random_draws_exactly_what_the_hunt_drew_before_strategies_whatever_the_controls(every_action):
    space = Space.of(every_action.scenario)
    assert [describe(schedule) for schedule in _walk(RandomDraw(space, 11, ["r1", "r2"]), 3)] == SEED_11
    for seed in range(1, 21):
        for controls in (0, 2, 5):
            drawn = _walk(RandomDraw(space, seed, ["r1", "r2"]), 10, controls)
            assert drawn == [draw_schedule(space, seed, index) for index in range(1, 11)]


# --- swarm ----------------------------------------------------------------------------------------------------------


def test_swarm_draws_each_trial_from_its_own_subset_of_the_actions(every_action):
    """200 trials over 10 seeds: each trial's steps come from the actions its trial enabled, never none; an enabled
    set usually leaves some out, each action is in some and out of others, and the sets differ."""
    space = Space.of(every_action.scenario)
    assert len(space.actions) >= 10
    subsets, left_out, enabled_in = set(), Counter[str](), Counter[str]()
    for seed in range(1, 11):
        swarm = Swarm(space, seed, ["r1", "r2"])
        for index, schedule in enumerate(_walk(swarm, 20), 1):
            enabled = swarm.enabled(index)
            assert enabled and set(enabled) <= set(space.actions)
            assert {step.action for step in schedule.steps} <= set(enabled)
            subsets.add(enabled)
            enabled_in.update(enabled)
            left_out.update(set(space.actions) - set(enabled))
    assert len(subsets) > 150
    assert set(enabled_in) == set(left_out) == set(space.actions)
    assert sum(left_out.values()) > 0.3 * 200 * len(space.actions)  # about half of every action left out


# --- cover ----------------------------------------------------------------------------------------------------------


def coverage_keys(schedule: Schedule, labels: list[str]) -> list[tuple[str, str, str]]:
    return [step_cell(step, labels, schedule.duration) for step in schedule.steps]


def test_cover_draws_every_cell_of_a_small_space_before_drawing_any_twice(tmp_path):
    """restart of either of two replicas, rotate-keys (its three orders) of either or all: 33 cells (11 pairs of a
    variant and whom, 3 thirds).
    Over 20 seeds and 30 trials of 1 or 2 steps, after each trial no cell has been drawn twice more than another:
    none twice while one is not drawn yet. The first 33 steps of random leave cells out."""
    base = _base(tmp_path, 'actions = ["restart", "rotate-keys"]\nmax_steps = 2\n', auth="")
    space = Space.of(base.scenario)
    labels = ["r1", "r2"]
    cells = coverage_cells(space, labels)
    assert len(set(cells)) == len(cells) == 33
    random_reached = []
    for seed in range(1, 21):
        drawn: Counter[tuple[str, str, str]] = Counter(dict.fromkeys(cells, 0))
        for schedule in _walk(Cover(space, seed, labels), 40):
            drawn.update(coverage_keys(schedule, labels))
            assert max(drawn.values()) - min(drawn.values()) <= 1, (seed, drawn)  # no cell twice while one never
        assert set(drawn) == set(cells) and sum(drawn.values()) >= 30
        steps = [cell for schedule in _walk(RandomDraw(space, seed, labels), 30) for cell in coverage_keys(
            schedule, labels)][:len(cells)]
        random_reached.append(len(set(steps)))
    assert max(random_reached) < len(cells)  # the same number of random steps never reached them all


def test_cover_counts_what_the_search_drew_not_the_controls_nor_the_shrink(tmp_path):
    """The cells drawn so far are the search trials' alone: a shrink candidate or a control trial moves no cell."""
    base = _base(tmp_path, 'actions = ["restart"]\nmax_steps = 1\n', auth="")
    space = Space.of(base.scenario)
    cover = Cover(space, 3, ["r1", "r2"])
    first = cover.next([])
    shrunk = [_tried(1, first, "shrink"), _tried(2, first, "reproduce"), _tried(3, Schedule((), 6.0), "control")]
    assert sum(cover.drawn(shrunk).values()) == 0
    assert sum(cover.drawn([_tried(1, first)]).values()) == 1


# --- a real hunt ----------------------------------------------------------------------------------------------------


def test_a_hunt_with_the_cover_strategy_says_so_and_draws_its_schedules_from_the_trials_so_far(tmp_path):
    """Two 3 s trials of restarts on a healthy shop (about 20 s): the start line and record name the strategy, and
    each search trial ran the schedule cover gives for the trials before it, as journaled."""
    path = tmp_path / "hunted.toml"
    path.write_text(SHOP.format(auth="", hunt='trials = 2\ncontrols = 1\nmax_steps = 2\n').replace(
        'trial_duration = "6s"', 'trial_duration = "3s"'))
    done = subprocess.run([sys.executable, "-m", "harness", "hunt", str(path), "--strategy", "cover", "--actions",
                           "restart", "--seed", "4", "--results", str(tmp_path / "results")], cwd=ROOT,
                          capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hunt of hunted (seed 4, strategy cover): " in done.stderr
    [folder] = list((tmp_path / "results").iterdir())
    records = [json.loads(line) for line in (folder / "hunt.jsonl").read_text().splitlines()]
    assert records[0]["type"] == "start" and records[0]["strategy"] == "cover"
    assert records[0]["bounds"]["strategy"] == "cover"
    trials = [record for record in records if record["type"] == "trial"]
    assert set(trials[0]) == set(TrialRecord.__annotations__)  # the record is the typed one, every key
    space = Space.of(Base.read(path, {"hunt.actions": ["restart"], "hunt.seed": 4}).scenario)
    cover, history = Cover(space, 4, ["r1", "r2"]), []
    for record in trials:
        schedule = Schedule(tuple(chaos_step(step) for step in record["schedule"]["steps"]),
                            record["schedule"]["duration"])
        if record["purpose"] == "search":
            assert schedule == cover.next(history)
        history.append(_tried(record["index"], schedule, record["purpose"]))
    assert [record["purpose"] for record in trials] == ["control", "search", "search"]
