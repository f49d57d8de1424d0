"""`mrtr-harness hunt`: drawing schedules from the chaos registry, the `[hunt]` bounds, and real hunts of the shop.

The drawing and bounds tests start no process (under a second each; the two that refuse flags
run the command, about 3 s each, and start nothing): the same seed draws the same schedules,
and every step drawn, for every action and over many seeds, builds a scenario the scenario
model accepts. The hunts run the command as a user does, against the embedded shop (a trial
of 3 s costs about 8 s: the shop starts and stops each time): one with a planted fault
(per-process keys behind other-replica routing: a state minted on one replica is opened by another, so
every schedule's trial fails its `[expect]`) finds a failing trial, shrinks it, hands over a
minimal scenario that `validate` passes and `run --reproduce` reproduces, and exits 1 (end to
end, about 70 s: 7 trials and a rerun); a healthy shop with 2 short trials exits 0 and says its
coverage (about 25 s); Ctrl-C during a trial's pause exits 130 with the journal ended and no
process left (about 12 s); Ctrl-C during the shrink still hands over the found schedule, marked
cut short, and exits 130 (about 25 s).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from html import escape
from pathlib import Path
from typing import Any

import pytest

from harness.config.chaos import CHAOS_ACTIONS
from harness.config.hunt import NEVER_DRAWN, drawable_actions
from harness.config.scenario import parse_scenario
from harness.config.strict import ScenarioError
from harness.hunt.draw import Space, draw_schedule, timing, trial_seed
from harness.hunt.model import Failure, Schedule, Trial
from harness.hunt.trial import Base, TrialDamaged, read_summary, trial_scenario
from harness.processes.children import alive, descendants
from tests.harness_run import ROOT
from tests.services import sigint_default

SHOP = """\
name = "{name}"
seed = 5
duration = "10s"
time_scale = 60

[target]
replicas = 2
{target}
[load]
arrival_rate = 3
routing = "{routing}"

[[flows]]
kind = "refund"
amount = "above-limit"

[leads]
think = {{ dist = "constant", value = "6s" }}
{rest}
"""

AUTH = """\
[target.auth]
kind = "client-credentials"
client_id = "harness"
client_secret_env = "HUNT_TEST_SECRET"
"""


PLANTED = {"target": 'keyring = "ephemeral"\n', "routing": "other-replica"}
"""The planted fault: per-process keys, and every round after the first sent to the other replica, so every flow's
answer reaches a replica that cannot open its state (`unknown key`) whatever the machine's load. Round-robin crosses
only as the flows happen to interleave: on a busy machine the flows run one after another and may never cross."""


def _scenario_file(tmp_path: Path, name: str = "hunted", target: str = "", rest: str = "",
                   routing: str = "round-robin") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(SHOP.format(name=name, target=target, rest=rest, routing=routing))
    return path


def _hunt(*args: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", "hunt", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def _harness(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def _journal(results: Path) -> list[dict[str, Any]]:
    [folder] = [path for path in results.iterdir() if path.name.endswith("-hunt-hunted")]
    return [json.loads(line) for line in (folder / "hunt.jsonl").read_text().splitlines()]


# --- drawing (no process) ---------------------------------------------------------------------------


@pytest.fixture
def every_action(tmp_path: Path) -> Base:
    """A shop with its own authorization server and three replicas: every action but `command` can be drawn."""
    return Base.read(_scenario_file(tmp_path, target=AUTH,
                                    rest="[hunt]\nmax_steps = 4\ntrial_duration = \"6s\"\n"))


def test_every_action_but_command_is_drawable_against_a_shop_with_its_own_authorization_server(every_action):
    assert set(drawable_actions(every_action.scenario)) == set(CHAOS_ACTIONS) - NEVER_DRAWN


def test_without_target_auth_no_action_on_the_authorization_server_is_drawn(tmp_path):
    scenario = Base.read(_scenario_file(tmp_path)).scenario
    drawn = drawable_actions(scenario)
    assert "restart" in drawn and "network" in drawn
    assert not {name for name in drawn if CHAOS_ACTIONS[name].acts_on == "auth"} and "command" not in drawn


def test_the_same_seed_draws_the_same_schedules_and_another_seed_others(every_action):
    space = Space.of(every_action.scenario)
    first = [draw_schedule(space, 11, index) for index in range(1, 30)]
    assert first == [draw_schedule(space, 11, index) for index in range(1, 30)]
    assert first != [draw_schedule(space, 12, index) for index in range(1, 30)]
    assert trial_seed(11, 3) == trial_seed(11, 3) != trial_seed(11, 4)


def test_every_drawn_step_of_every_action_builds_a_scenario_the_model_accepts(every_action):
    """400 schedules of up to 4 steps: each trial's TOML is read back by the scenario model (a step that would not
    validate raises), its chaos is the schedule as drawn, and every drawable action and timing third was drawn."""
    space = Space.of(every_action.scenario)
    actions, timings = set(), set()
    for seed in range(40):
        for index in range(1, 11):
            schedule = draw_schedule(space, seed, index)
            assert 1 <= len(schedule.steps) <= 4
            assert all(0 <= step.at <= schedule.duration for step in schedule.steps)
            scenario, text = trial_scenario(every_action, schedule, trial_seed(seed, index), "drawn")
            assert list(scenario.chaos) == list(schedule.steps)  # the models, as drawn
            assert scenario.duration == 6.0 and scenario.hunt is None
            assert parse_scenario(text).chaos == scenario.chaos  # the file reruns exactly as drawn
            actions |= {step.action for step in schedule.steps}
            timings |= {timing(step.at, schedule.duration) for step in schedule.steps}
    assert actions == set(space.actions)
    assert timings == {"early", "middle", "late"}


def test_a_schedule_the_scenario_cannot_run_does_not_fit(every_action):
    """What the shrinker asks before running a candidate: a replica the target lacks, a step after the end."""
    from harness.hunt.model import Schedule, chaos_step
    from harness.hunt.search import Hunt

    hunt = Hunt(every_action, stream=sys.stderr)
    assert hunt.fits(Schedule((chaos_step({"action": "restart", "at": 1.0, "replica": 2}),), 6.0))
    assert not hunt.fits(Schedule((chaos_step({"action": "restart", "at": 1.0, "replica": 3}),), 6.0))
    assert not hunt.fits(Schedule((chaos_step({"action": "restart", "at": 9.0}),), 6.0))


def test_a_window_drawn_ends_within_the_trial(every_action):
    space = Space.of(every_action.scenario)
    for index in range(1, 200):
        for step in draw_schedule(space, 3, index).steps:
            duration = getattr(step, "duration", None)
            if isinstance(duration, float):
                assert step.at + duration <= space.duration + 0.1, step


def test_a_damaged_summary_stops_the_hunt_as_the_harness_error_it_is(tmp_path):
    for text in ("not json", json.dumps({"status": "failed"}), json.dumps([1, 2])):
        (tmp_path / "summary.json").write_text(text)
        with pytest.raises(TrialDamaged):
            read_summary(tmp_path / "summary.json")


# --- validate refuses bad [hunt] bounds ------------------------------------------------------------


@pytest.mark.parametrize("hunt,words", [
    ('actions = ["restart", "kil"]', "'kil' is no chaos action"),
    ('actions = ["command"]', "runs a command only you can write"),
    ('actions = ["revoke"]', "revoke cannot be drawn against this target: it acts on the authorization server"),
    ("actions = []", "names no action"),
    ("replicas = [3]", "replica 3 is not there: the target has 2"),
    ("replicas = [1, 1]", "replica 1 is named twice"),
    ("max_steps = 0", "must be at least 1"),
    ("trials = 0", "must be at least 1"),
    ('trial_duration = "20m"', "does not fit in the budget"),
    ('budget = "0s"', "must be above 0"),
    ("reruns = 2\nmust_fail = 3", "must_fail (3) is more than reruns (2)"),
    ("reruns = 3\nshrink_runs = 2", "shrink_runs (2) is less than reruns (3)"),
    ("reproduce = -1", "must be at least 0"),
    ('shrink_budget = "0s"', "must be above 0"),
    ('surprise = 1', "unknown key 'surprise'"),
])
def test_validate_refuses_bad_hunt_bounds_naming_the_key_and_line(tmp_path, hunt, words):
    path = _scenario_file(tmp_path, rest=f"[hunt]\n{hunt}\n")
    with pytest.raises(ScenarioError) as refused:
        Base.read(path)
    assert words in str(refused.value) and "hunt." in str(refused.value)
    assert f"{path}:" in str(refused.value)  # the file, and the line where it could be found


def test_a_threshold_on_one_action_is_refused_in_a_hunted_scenario(tmp_path):
    path = _scenario_file(tmp_path, rest="[expect]\n\"chaos_failures{action='restart'}\" = \"== 0\"\n\n[hunt]\n"
                                         "trials = 2\n\n[[chaos]]\naction = \"restart\"\nat = \"1s\"\n")
    with pytest.raises(ScenarioError, match="a hunt draws its own chaos"):
        Base.read(path)


def test_a_hunt_against_a_remote_host_not_allowed_is_refused_with_exit_2(tmp_path):
    path = tmp_path / "remote.toml"
    path.write_text(SHOP.format(name="remote", routing="round-robin", target='kind = "external"\nurls = ["http://staging.example:8000/mcp"]\n'
                                "[target.commands]\nrestart = [\"true\"]\n", rest="").replace("replicas = 2\n", ""))
    done = _hunt(str(path), "--results", str(tmp_path / "results"))
    assert done.returncode == 2 and "chaos against remote host staging.example: refused" in done.stderr, done.stderr
    assert not (tmp_path / "results").exists()


def test_each_flags_help_names_its_hunt_keys_default_as_the_settings_model_has_it():
    """The help text writes the defaults out (building the parser imports no model); they are the model's own."""
    import re

    from harness.cli.main import build_parser
    from harness.config.durations import format_duration
    from harness.config.fields import is_duration
    from harness.config.hunt import HuntSettings

    (commands,) = [action for action in build_parser()._actions if action.choices and "hunt" in action.choices]
    helps = " ".join(action.help or "" for action in commands.choices["hunt"]._actions)
    said = dict(re.findall(r"\[hunt\] (\w+), default ([^;)]+)", helps))
    assert len(said) == 14, said
    for key, text in said.items():
        field = HuntSettings.model_fields[key]
        default = field.default
        expected = format_duration(default) if is_duration(field.metadata) else str(default).lower() \
            if isinstance(default, bool) else f"{default:g}" if isinstance(default, float) else str(default)
        assert text == expected, key


def test_a_bad_flag_is_refused_as_the_table_would_be_with_exit_2_before_anything_starts(tmp_path):
    path = _scenario_file(tmp_path)
    done = _hunt(str(path), "--trials", "0", "--results", str(tmp_path / "results"))
    assert done.returncode == 2 and "hunt.trials: must be at least 1" in done.stderr, done.stderr
    done = _hunt(str(path), "--actions", "restart,kil", "--results", str(tmp_path / "results"))
    assert done.returncode == 2 and "did you mean 'kill'?" in done.stderr, done.stderr
    assert not (tmp_path / "results").exists()


# --- real hunts against the embedded shop ------------------------------------------------------------


@pytest.mark.timeout(600)  # a hunt, a shrink and reruns: over 60 s alone, several times that on a busy CI
def test_a_hunt_finds_the_planted_fault_shrinks_it_and_hands_over_a_minimal_scenario_that_reproduces(tmp_path):
    """End to end (about 70 s): per-process keys behind other-replica routing (`PLANTED`), which `[expect]` forbids
    (`unknown key`), with no control trial (it would fail without chaos: the next test) and `[expect]` counted
    (`expect = true`). The search's first trial (two pauses) fails; pauses, not restarts: a paused replica keeps the
    rounds sent to it, so every run crosses replicas however busy the machine (two slow restarts can leave one
    replica up through a whole trial, and then nothing crosses). The shrink (2 of 2 runs, at most 4 runs: each
    dropped step) drops its chaos; the minimal schedule is rerun twice for its rate; minimal.toml passes `validate`
    and `run --reproduce` reproduces it (exit 0); hunt.html names the failure; the hunt exits 1 and its journal
    holds every trial and the shrink's outcome. The shrink's budget, not minimality, ends it: a shorter run is
    flaky, and 2 of 2 would decide it only with more runs than this test spends."""
    path = _scenario_file(tmp_path, **PLANTED,
                          rest="[expect]\n\"rejections{reason='unknown key'}\" = \"== 0\"\n\n"
                               "[hunt]\ntrials = 3\ntrial_duration = \"3s\"\nactions = [\"pause\"]\n"
                               "reruns = 2\nmust_fail = 2\nshrink_runs = 4\nreproduce = 2\ncontrols = 0\n"
                               "expect = true\n")
    done = _hunt(str(path), "--results", str(tmp_path / "results"))
    assert done.returncode == 1, done.stdout + done.stderr
    failure = "expectation rejections{reason='unknown key'} on r1, r2"  # its signature: where it was logged
    assert f"found: trial 1 failed ({failure})" in done.stdout
    [folder] = list((tmp_path / "results").iterdir())
    assert f"minimal: {folder / 'minimal.toml'} (reproduced in 2 of 2 runs; the shrink's budget of runs ran out " \
           "first: maybe not minimal)" in done.stdout
    assert f"page: {folder / 'hunt.html'}" in done.stdout
    records = _journal(tmp_path / "results")
    start, search, end = records[0], records[1], records[-1]
    trials = records[1:-1]
    assert start["type"] == "start" and start["actions"] == ["pause"] and start["seed"] == 5
    assert search["purpose"] == "search" and search["outcome"] == "failed" and search["exit_code"] == 1
    assert {"kind": "expectation", "name": "rejections{reason='unknown key'}", "replicas": ["r1", "r2"],
            "reasons": [], "detail": []} in search["failures"]
    assert search["reasons"]["unknown key"] > 0 and search["schedule"]["duration"] == 3.0
    assert [trial["purpose"] for trial in trials] == ["search"] + ["replay"] * 2 + ["shrink"] * 4 + ["reproduce"] * 2
    assert end["type"] == "end" and end["stopped_by"] == "found" and end["found"] == 1
    shrunk = end["shrink"]
    assert shrunk["stopped_by"] == "runs" and shrunk["runs"] == 4 and len(search["schedule"]["steps"]) == 2
    assert [step["what"] for step in shrunk["path"]] == ["dropped step 1 (pause)"] * 2
    assert shrunk["minimal"]["steps"] == [] and shrunk["minimal"]["duration"] == 3.0  # it fails with no chaos at all
    assert shrunk["reproduction"] == {"failed": 2, "runs": 2}
    assert end["minimal_file"] == "minimal.toml" and end["page"] == "hunt.html"
    rerun = parse_scenario((folder / search["folder"] / "scenario.toml").read_text())  # the trial reruns as drawn
    assert rerun.seed == search["seed"] and [step.model_dump(exclude_defaults=True) for step in rerun.chaos] == \
        search["schedule"]["steps"]

    minimal = folder / "minimal.toml"
    failed_with = [trial["seed"] for trial in trials if trial["purpose"] == "shrink" and trial["outcome"] == "failed"
                   and trial["schedule"] == shrunk["minimal"]]
    handed = parse_scenario(minimal.read_text())
    assert handed.seed == failed_with[0] != search["seed"]  # a seed the minimal schedule failed with, not the found's
    reproductions = [trial for trial in trials if trial["purpose"] == "reproduce"]
    assert {(trial["seed"], trial["outcome"], trial["judged"]) for trial in reproductions} == \
        {(handed.seed, "reproduced", "reproduces")}  # the file as handed over, judged as `run --reproduce` judges it
    assert all("-hunted-minimal" in trial["folder"] for trial in reproductions)
    assert _harness("validate", str(minimal)).returncode == 0
    reproduced = _harness("run", "--reproduce", str(minimal), "--results", str(tmp_path / "reruns"))
    assert reproduced.returncode == 0, reproduced.stdout + reproduced.stderr  # the failure reproduced
    page = (folder / "hunt.html").read_text()
    assert escape("found: [expect] rejections{reason='unknown key'}") in page and "The shrink path" in page


def test_a_healthy_shop_holds_two_controls_and_two_short_trials_exits_0_and_says_its_coverage(tmp_path):
    """Restarts and kills of a shop sharing its key ring (about 25 s): two control trials without chaos, then the
    search; nothing breaks the default property. Before the first trial the hunt says its whole bound (the shrink
    and the reproduction a find would add), its property ([expect] not part of it, said so), and each action it
    left out and why."""
    path = _scenario_file(tmp_path, rest="[expect]\ncompleted_ratio = \">= 0.5\"\n\n"
                                         "[hunt]\ntrials = 2\ntrial_duration = \"3s\"\n")
    done = _hunt(str(path), "--actions", "restart,kill", "--seed", "4", "--results", str(tmp_path / "results"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nothing broke in 2 trials after 2 without chaos" in done.stdout
    assert "coverage: " in done.stdout and "acted on a round in flight in 2 trials (restart " in done.stdout
    residual = "0 failures in 2 judged trials: the per-trial failure rate of schedules drawn so is below 77.6%"
    assert residual in done.stdout  # what "nothing broke" is worth, on the terminal, the page and the journal
    start = done.stderr.split("[1/2] control no chaos: held", 1)[0]
    assert "[2/2] control no chaos: held" in done.stderr
    assert ("2 control trials without chaos, then up to 2 trials of 3s within 15m; a find then takes up to 60 shrink "
            "runs within 15m and 10 reproduction runs (up to 40 backing off): at most 104 runs") in start
    assert ("property: no invariant violated; no unexplained -32602; recovery not judged: the scenario has no "
            "[hypothesis]") in start
    assert "[expect] (completed_ratio >= 0.5) is not part of it" in start
    assert "left out: pause, " in start and "(not in [hunt] actions)" in start
    assert "left out: command (it runs a command only you can write)" in start
    assert "(it acts on the authorization server, and the target has no [target.auth])" in start
    records = _journal(tmp_path / "results")
    assert [record["type"] for record in records] == ["start", "trial", "trial", "control", "trial", "trial", "end"]
    assert [record["purpose"] for record in records if record["type"] == "trial"] == ["control"] * 2 + ["search"] * 2
    assert records[0]["most_runs"] == 104 and records[0]["left_out"]["pause"] == "not in [hunt] actions"
    assert records[3]["held"] == 2 and records[3]["failed"] is None
    assert all(record["outcome"] == "held" and record["failures"] == [] for record in records
               if record["type"] == "trial")
    assert all(record["schedule"]["steps"] == [] for record in records[1:3])
    assert records[-1]["stopped_by"] == "trials" and records[-1]["coverage"] and records[-1]["without_chaos"] is None
    assert records[-1]["shrink"] is None and records[-1]["minimal_file"] is None and records[-1]["page"] == "hunt.html"
    assert records[-1]["judged"] == 2 and records[-1]["residual_risk"] == round(1 - 0.05 ** (1 / 2), 6)
    [folder] = list((tmp_path / "results").iterdir())
    assert f"page: {folder / 'hunt.html'}" in done.stdout
    page = (folder / "hunt.html").read_text()
    assert "nothing broke within the budget (2 trials, stopped by trials)" in page and "Coverage" in page
    said = done.stdout.split("coverage: ", 1)[1].splitlines()[0]
    assert escape(said) in page  # the page's coverage, out of what the bounds allowed, is the terminal's
    assert escape(residual) in page
    assert "[1/2] search " in done.stderr and "[2/2] search " in done.stderr  # a line per trial on the terminal


@pytest.mark.timeout(300)
def test_a_shop_that_fails_without_chaos_is_reported_so_and_neither_searched_nor_shrunk(tmp_path):
    """Per-process keys behind other-replica routing break every multi-round flow under load alone (about 15 s): the
    first control trial's steady state, judged over its whole run, fails; the hunt says "fails without chaos" (exit 1),
    journals a control record and ends there: no search trial, no shrink, no minimal.toml; the page has its own
    section."""
    path = _scenario_file(tmp_path, **PLANTED,
                          rest="[hypothesis]\ncompleted_ratio = \">= 0.9\"\n\n"
                               "[hunt]\ntrials = 3\ntrial_duration = \"3s\"\nactions = [\"restart\"]\n")
    done = _hunt(str(path), "--results", str(tmp_path / "results"))
    assert done.returncode == 1, done.stdout + done.stderr
    [folder] = list((tmp_path / "results").iterdir())
    failure = "hypothesis no chaos: completed_ratio ratio >= 0.9"
    records = _journal(tmp_path / "results")
    control = records[1]
    assert f"fails without chaos: control trial 1 failed ({failure}) with no chaos at all; nothing was searched: " \
           f"{folder / control['folder'] / 'scenario.toml'}" in done.stdout
    assert [record["type"] for record in records] == ["start", "trial", "control", "end"]
    assert control["purpose"] == "control" and control["schedule"]["steps"] == [] and control["outcome"] == "failed"
    assert ("hypothesis", "no chaos: completed_ratio ratio >= 0.9") in [(failure["kind"], failure["name"])
                                                                       for failure in control["failures"]]
    assert records[2]["failed"] == 1 and records[2]["trials"] == [1]
    end = records[-1]
    assert end["stopped_by"] == "fails without chaos" and end["found"] is None and end["shrink"] is None
    assert end["without_chaos"]["trial"] == 1 and end["minimal_file"] is None
    assert not (folder / "minimal.toml").exists()
    assert "[1/3] search" not in done.stderr
    rerun = parse_scenario((folder / control["folder"] / "scenario.toml").read_text())
    assert rerun.chaos == [] and rerun.expect["completed_ratio"] == ">= 0.9"  # it reruns as judged
    page = (folder / "hunt.html").read_text()
    assert "<h2>Fails without chaos</h2>" in page and "fails without chaos: the steady state" in page


def test_a_control_trial_judges_the_steady_state_as_its_expect_merged_with_the_scenarios(tmp_path):
    base = Base.read(_scenario_file(tmp_path, rest="[expect]\ncompleted_ratio = \">= 0.5\"\n\n[hypothesis]\n"
                                                   "completed_ratio = \">= 0.9\"\n\"round_duration\" = "
                                                   "\"p(95) < 1s\"\n"))
    scenario, _ = trial_scenario(base, Schedule((), 10.0), 1, "control", control=True)
    assert scenario.expect == {"completed_ratio": [">= 0.5", ">= 0.9"], "round_duration": "p(95) < 1s"}
    assert trial_scenario(base, Schedule((), 10.0), 1, "search")[0].expect == {"completed_ratio": ">= 0.5"}


def test_an_external_target_says_which_actions_it_leaves_out_for_want_of_a_command(tmp_path):
    """A hunt of an external target without `[target.commands]` draws network faults only: said before the first
    trial, action by action, with the command it would need."""
    import io

    from harness.hunt.search import Hunt

    path = tmp_path / "outside.toml"
    path.write_text(SHOP.format(name="outside", routing="round-robin", target='kind = "external"\nurls = ["http://127.0.0.1:9/mcp"]\n',
                                rest="").replace("replicas = 2\n", ""))
    hunt = Hunt(Base.read(path), stream=io.StringIO())
    assert hunt.space.actions == ("network",)
    left = hunt.left_out()
    assert left["restart"] == "an external target takes it only through [target.commands] restart"
    assert left["kill"].endswith("[target.commands] kill") and "network" not in left


@pytest.mark.timeout(420)  # up to 240 s for the trial's chaos on a busy CI, 90 s to stop
def test_ctrl_c_during_a_trial_rolls_it_back_ends_the_journal_and_exits_130(tmp_path):
    """SIGINT once the trial's first pause started (its journal says so; about 10 s): the run's own machinery ends
    the trial (the replica resumed, the shop stopped), the hunt writes its end, exits 130, and no process it
    started is left."""
    path = _scenario_file(tmp_path, rest="[hunt]\ntrials = 2\ntrial_duration = \"6s\"\nactions = [\"pause\"]\n"
                                         "controls = 0\n")
    code, out, err, seen = _interrupted(path, tmp_path / "results", trials=1)
    assert code == 130, out + err
    records = _journal(tmp_path / "results")
    assert records[-1]["type"] == "end" and records[-1]["stopped_by"] == "interrupted"
    trial = records[1]
    assert trial["outcome"] == "interrupted" and trial["exit_code"] == 130
    summary = json.loads((next((tmp_path / "results").iterdir()) / trial["folder"] / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert any(row["action"] == "pause" for row in summary["chaos"])
    assert sum("harness.targets.zygote" in line for line in seen.values()) >= 3, seen  # the zygote and 2 replicas
    assert _left_behind(seen) == [], "a process the hunt started outlived it"


@pytest.mark.timeout(420)  # up to 240 s for four trials' chaos on a busy CI, 90 s to stop
def test_ctrl_c_during_the_shrink_still_hands_over_the_smallest_failing_schedule_marked_and_exits_130(tmp_path):
    """SIGINT once the first shrink candidate's restart started (about 25 s): the candidate's run is stopped as
    `run` stops, the hunt writes minimal.toml (the found trial's schedule: no smaller one had failed yet), its header
    and the page saying the shrink was cut short, ends its journal and exits 130, leaving no process."""
    path = _scenario_file(tmp_path, **PLANTED,
                          rest="[expect]\n\"rejections{reason='unknown key'}\" = \"== 0\"\n\n"
                               "[hunt]\ntrials = 3\ntrial_duration = \"3s\"\nactions = [\"restart\"]\n"
                               "controls = 0\nexpect = true\nreruns = 2\nmust_fail = 1\n")
    # the search's chaos, its 2 replays' (one failing suffices: a busy machine may spare one), a shrink candidate's
    code, out, err, seen = _interrupted(path, tmp_path / "results", trials=4)
    assert code == 130, out + err
    records = _journal(tmp_path / "results")
    search, shrinking, end = records[1], records[4], records[-1]
    assert [record["purpose"] for record in records[2:4]] == ["replay", "replay"]
    assert search["outcome"] == "failed" and shrinking["purpose"] == "shrink" and shrinking["exit_code"] == 130
    assert end["stopped_by"] == "interrupted" and end["shrink"]["stopped_by"] == "interrupted"
    assert end["shrink"]["minimal"] == search["schedule"] and end["shrink"]["reproduction"] is None
    [folder] = list((tmp_path / "results").iterdir())
    minimal = (folder / "minimal.toml").read_text()
    assert "the shrink was cut short: interrupted" in " ".join(minimal.split("\n# "))
    assert [step.action for step in parse_scenario(minimal).chaos] == ["restart", "restart"]
    assert "cut short (interrupted)" in (folder / "hunt.html").read_text()
    assert f"not shrunk: {folder / 'minimal.toml'} (reproduction rate not measured; the shrink was cut short: " \
           "interrupted, before a smaller schedule failed)" in out
    assert sum("harness.targets.zygote" in line for line in seen.values()) >= 3, seen  # the zygote and 2 replicas
    assert _left_behind(seen) == [], "a process the hunt started outlived it"


def _interrupted(path: Path, results: Path, trials: int) -> tuple[int, str, str, dict[tuple[int, str], str]]:
    """A hunt sent SIGINT once `trials` trials' chaos started (within 240 s: a busy CI runs a trial in 20 s): its
    exit code, stdout, stderr, and
    every process seen below it while it ran, with its command line (sampled from /proc by parent PID until it
    exited: the zygote and the replicas it forks never name the results folder in their command line)."""
    out_file, err_file = results.parent / "hunt.out", results.parent / "hunt.err"
    with open(out_file, "wb") as out, open(err_file, "wb") as err:
        process = subprocess.Popen([sys.executable, "-m", "harness", "hunt", str(path), "--results", str(results)],
                                   cwd=ROOT, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                   preexec_fn=sigint_default)
    seen: dict[tuple[int, str], str] = {}
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and _chaos_started(results) < trials and process.poll() is None:
            seen |= _below(process.pid, seen)
            time.sleep(0.1)
        assert _chaos_started(results) == trials, f"{trials} trials' chaos never started"
        os.kill(process.pid, signal.SIGINT)
        deadline = time.monotonic() + 90
        while process.poll() is None:  # what it starts while it stops (a trial's wind-down) is watched too
            assert time.monotonic() < deadline, "the hunt did not stop within 90 s of SIGINT"
            seen |= _below(process.pid, seen)
            time.sleep(0.1)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, out_file.read_text(), err_file.read_text(), seen


def _chaos_started(results: Path) -> int:
    """How many trials' journals say their chaos started."""
    return sum('"type":"chaos","phase":"start"' in journal.read_text(errors="replace")
               for journal in results.glob("*-hunt-hunted/trials/*/journal.jsonl"))


def _below(pid: int, known: dict[tuple[int, str], str]) -> dict[tuple[int, str], str]:
    """Every process below `pid` now and not `known` yet, each as (PID, start time) -> its command line: a PID the
    kernel hands out again later is another process."""
    found = {}
    for child in descendants(pid):
        if (started := _started(child)) and (child, started) not in known:
            found[(child, started)] = _cmdline(child)
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _started(pid: int) -> str:
    """A live process's start time (field 22 of /proc/PID/stat, in clock ticks since boot), or "" when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return ""
    fields = stat.rsplit(b")", 1)[-1].split()
    return fields[19].decode() if len(fields) > 19 and alive(pid) else ""


def _left_behind(seen: dict[tuple[int, str], str], within: float = 5.0) -> list[str]:
    """The processes of `seen` still alive `within` seconds after the hunt exited (the kernel ends what the
    lifeline holds as soon as its parent is gone; a process that outlives that leaked), with their command lines."""
    deadline = time.monotonic() + within
    while (left := {(pid, started) for pid, started in seen if _started(pid) == started}) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    return [f"{pid}: {seen[(pid, started)]}" for pid, started in sorted(left)]


def _flaky_below(seconds: float, failure: Failure) -> Any:
    """A stand-in for real trials: a schedule shorter than `seconds` fails 3 runs in 10, a longer one every run."""
    calls: dict[float, int] = {}

    def run(schedule: Schedule) -> tuple[Failure, ...]:
        calls[schedule.duration] = calls.get(schedule.duration, 0) + 1
        if schedule.duration >= seconds or calls[schedule.duration] % 10 in (1, 4, 7):
            return (failure,)
        return ()

    return run


@pytest.mark.parametrize(("steady_from", "handed_over", "rate"), [(1.0, 1.0, (10, 10)), (9.0, 0.5, (3, 10))],
                         ids=["backs-off-to-a-reliable-one", "none-reliable-keeps-the-best"])
def test_a_minimal_schedule_that_reproduces_too_rarely_is_backed_off_along_the_shrink_path(
        tmp_path, steady_from, handed_over, rate):
    """The shortest run that still fails 2 of 3 may reproduce 3 times in 10: the hunt then hands over the first
    larger schedule of its shrink path that reproduces 8 of 10; when none does, the best rate it saw."""
    import io

    from harness.hunt.search import Hunt

    hunt = Hunt(Base.read(_scenario_file(tmp_path)), stream=io.StringIO())
    failure = Failure("invariant", "no_double_release")
    found = Schedule(steps=(), duration=3.0)
    hunt.result.found = Trial(index=1, seed=1, schedule=found, purpose="search", failures=(failure,))
    hunt.result.failure = failure
    runs = _flaky_below(steady_from, failure)
    hunt._run_file = lambda text, schedule, *, seed: bool(runs(schedule))  # type: ignore[method-assign]
    path = [Schedule(steps=(), duration=seconds) for seconds in (2.0, 1.0, 0.5)]  # accepted, oldest first
    hunt.result.trials = [hunt.result.found, *(Trial(index=index, seed=100 + index, schedule=schedule,
                                                     purpose="shrink", failures=(failure,))
                                               for index, schedule in enumerate(path, 2))]
    hunt._reproduce(path[-1], path[:-1])
    assert hunt.result.minimal is not None and hunt.result.minimal.duration == handed_over
    assert hunt.result.reproduction == rate


def test_with_nothing_accepted_the_hunt_never_says_shrunk_nor_backing_off(tmp_path):
    """A shrink that accepted nothing hands over the schedule found: the terminal says "not shrunk" and, its rate
    under the bar, that no larger schedule is left (not "backing off"); the page and the minimal scenario's header
    never say "shrunk to"."""
    import io

    from harness.hunt.minimal import minimal_scenario
    from harness.hunt.page import verdict_line
    from harness.hunt.search import Hunt

    said = io.StringIO()
    path = _scenario_file(tmp_path)
    hunt = Hunt(Base.read(path), stream=said)
    failure = Failure("invariant", "no_double_release")
    found = Schedule(steps=(), duration=3.0)
    hunt.result.found = Trial(index=1, seed=1, schedule=found, purpose="search", failures=(failure,))
    hunt.result.failure, hunt.result.minimal = failure, found
    runs = _flaky_below(9.0, failure)
    hunt._run_file = lambda text, schedule, *, seed: bool(runs(schedule))  # type: ignore[method-assign]
    hunt.result.trials = [hunt.result.found]
    hunt._reproduce(found, [])
    assert hunt.result.reproduction == (3, 10) and not hunt.result.shrunk
    assert "reproducing the schedule found (not shrunk)" in said.getvalue()
    assert "backing off" not in said.getvalue() and "no larger schedule is left to back off to" in said.getvalue()
    assert verdict_line(hunt.result).endswith("; not shrunk: no smaller schedule failed the same way")
    header = " ".join(minimal_scenario(path.read_text(), hunt.result).split("\n# "))
    assert "shrunk to" not in header and "not shrunk (no smaller schedule failed the same way)" in header


# --- a real hunt of a deployment the harness did not start ------------------------------------------

EXTERNAL = """\
name = "hunted"
seed = 2
duration = "10s"
time_scale = 60
grace = "25s"
hypothesis_unjudged = "pass"

[target]
kind = "external"
urls = {urls}
logs = {logs}
ready_timeout = "30s"

[target.commands]
restart = ["sh", "{folder}/restart.sh", "{{replica}}", "tests.servers.refund_desk"]

[load]
arrival_rate = 6
routing = "same-replica"

[[flows]]
kind = "call"
tool = "refund_item"
arguments = {{ order_id = "O-1001" }}
answers = {{ sku = ["mug", "tee"] }}

[leads]
think = {{ dist = "constant", value = "4m" }}
decline = 0
cancel = 0
abandon = 0

[expect]
"rejections{{reason='unknown key'}}" = "== 0"

[hypothesis]
completed_ratio = ">= 0.95"

[hunt]
trials = 2
trial_duration = "3s"
actions = ["restart"]
max_steps = 2
reruns = 1
must_fail = 1
shrink_runs = 3
reproduce = 1
"""


@pytest.fixture
def desk(tmp_path):
    """Two replicas of a server this project did not write (each with its own per-process key), started and
    restarted by the user's shell scripts, their PIDs in files; stopped by PID."""
    from tests.test_chaos_commands import Replicas

    started = Replicas(tmp_path / "replicas")
    try:
        yield started
    finally:
        started.stop()


@pytest.mark.timeout(600)  # a hunt, a shrink and reruns: over 60 s alone, several times that on a busy CI
def test_a_hunt_of_an_external_deployment_restarts_it_by_its_commands_and_shrinks_to_the_restart(desk, tmp_path):
    """An external target hunts through `[target.commands]` as `run` does (about 80 s). Its two control trials
    hold (same-replica routing never crosses keys without a restart). Seed 2's first search trial draws one restart
    of r1 at 2.0 s, while r1's calls wait on their leads: its new process holds no key the earlier states were
    sealed with, so they are rejected (`unknown key`, explained by its log, and `[expect]` not counted): the flows
    fail, and the steady state ([hypothesis]) does not come back, a failure of its own kind. The shrink's first
    candidate drops the restart and holds, so the minimal schedule keeps that restart; minimal.toml names the
    deployment and its commands, and passes `validate`. The harness ran the user's script, so the replica's process
    is a new one."""
    from tests.test_chaos_commands import toml_list

    urls = [desk.start(name, "tests.servers.refund_desk") for name in ("r1", "r2")]
    desk.wait_ready()
    first_pid = desk.pid("r1")
    path = tmp_path / "hunted.toml"
    logs = [f"file:{desk.log(name)}@{name}" for name in ("r1", "r2")]
    path.write_text(EXTERNAL.format(urls=toml_list(urls), logs=toml_list(logs), folder=desk.folder))

    done = _hunt(str(path), "--results", str(tmp_path / "results"), timeout=240)

    assert done.returncode == 1, done.stdout + done.stderr
    records = _journal(tmp_path / "results")
    trials = [record for record in records if record["type"] == "trial"]
    assert [trial["outcome"] for trial in trials[:2]] == ["held", "held"] and trials[0]["purpose"] == "control"
    search = trials[2]
    assert search["purpose"] == "search" and search["outcome"] == "failed"
    assert search["schedule"]["steps"] == [{"action": "restart", "at": 2.0, "replica": 1}]
    # the steady state failed during or after the chaos (on a busy machine, in both windows: each its own failure)
    assert {failure["kind"] for failure in search["failures"]} == {"hypothesis"}, search["failures"]
    assert {failure["name"].partition(": ")[2] for failure in search["failures"]} == {"completed_ratio ratio >= 0.95"}
    assert search["reasons"]["unknown key"] > 0
    assert desk.pid("r1") != first_pid, "the restart command started a new process"
    [folder] = list((tmp_path / "results").iterdir())
    trial_journal = [json.loads(line) for line in (folder / search["folder"] / "journal.jsonl").read_text()
                     .splitlines()]
    ran = [(r["name"], r["target"], r["exit_code"]) for r in trial_journal if r["type"] == "command"]
    assert ran == [("restart", "r1", 0)]
    end = records[-1]
    shrunk = end["shrink"]
    purposes = [trial["purpose"] for trial in trials]
    first_shrink = purposes.index("shrink")  # the found schedule is replayed first (reruns = must_fail = 1)
    assert purposes[3:first_shrink] == ["replay"] and trials[3]["outcome"] == "failed"
    assert trials[first_shrink]["schedule"]["steps"] == [] and trials[first_shrink]["outcome"] == "held"
    assert [step["action"] for step in shrunk["minimal"]["steps"]] == ["restart"]
    minimal = parse_scenario((folder / "minimal.toml").read_text())
    assert minimal.target.kind == "external" and minimal.target.urls == urls
    assert [step.action for step in minimal.chaos] == ["restart"] and "restart" in minimal.target.commands
    assert _harness("validate", str(folder / "minimal.toml")).returncode == 0


def test_a_shop_on_ephemeral_keys_is_not_drawn_a_rotation_it_cannot_take_and_is_told_why(tmp_path):
    """rotate-keys cannot act on replicas that keep ephemeral keys (no ring): drawn, it would only waste trials as
    "not judged"; the hunt leaves it out and says why."""
    from harness.config.hunt import action_problem

    ephemeral = parse_scenario(_scenario_file(tmp_path, target='keyring = "ephemeral"\n').read_text())
    assert "rotate-keys" not in drawable_actions(ephemeral)
    assert "no ring to rotate" in (action_problem("rotate-keys", ephemeral) or "")
    ringed = parse_scenario(_scenario_file(tmp_path).read_text())
    assert "rotate-keys" in drawable_actions(ringed)
