"""The hunt's shrinker on synthetic properties, its minimal scenario and its page: no processes, each test cheap
(milliseconds each; the whole file about a second, most of it the shipped scenarios read twice)."""

from __future__ import annotations

import io
import itertools
import json
import math
import random
import re
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import partial
from html import escape
from pathlib import Path
from typing import Any

import pytest

from harness.cli.main import main
from harness.config.durations import parse_duration
from harness.config.scenario import parse_scenario
from harness.hunt.minimal import minimal_scenario, write_minimal
from harness.hunt.model import Failure, HuntResult, Schedule, Trial, chaos_step, step_table
from harness.hunt.page import coverage_line, render_page
from harness.hunt.shrink import Budget, KOfN, duration_text, fails_the_same, found_rate, reproduce, same_failure, shrink
from harness.triage.on_call_catalogue import reproducers

FAILURE = Failure("unexplained", "-32602")
"""As the search names it: unexplained rejections have no logged reason."""


def _steps(*tables: dict[str, Any]) -> tuple[Any, ...]:
    """`[[chaos]]` tables as the hunt holds its steps: each its action's model."""
    return tuple(chaos_step(table) for table in tables)


def _renames(*names: str) -> tuple[Any, ...]:
    """Steps told apart by their `name`, which the shrinker leaves alone (a string has no simpler value)."""
    return _steps(*({"action": "rename", "at": f"{index + 1}s", "name": name} for index, name in enumerate(names)))


def _names(schedule: Schedule) -> set[str]:
    return {step.name for step in schedule.steps}


def _both_a_and_b(schedule: Schedule) -> bool:
    return {"A", "B"} <= _names(schedule)


class Counted:
    """A predicate that counts its calls."""

    def __init__(self, predicate: Callable[[Schedule], bool]) -> None:
        self.predicate, self.calls = predicate, 0

    def __call__(self, schedule: Schedule) -> bool:
        self.calls += 1
        return self.predicate(schedule)


def test_fewer_steps_is_exactly_the_pair_and_one_minimal() -> None:
    start = Schedule(_renames("C", "D", "A", "E", "F", "G", "B", "H"), duration=20.0)
    result = shrink(start, FAILURE, _both_a_and_b)
    assert _names(result.schedule) == {"A", "B"}
    assert result.stopped_by == "done"
    for index in range(len(result.schedule.steps)):  # 1-minimal: any one step less passes
        fewer = result.schedule.steps[:index] + result.schedule.steps[index + 1:]
        assert not _both_a_and_b(Schedule(fewer, result.schedule.duration))
    assert all(step.at == 0 for step in result.schedule.steps)  # `at` earlier: at once


def test_no_chaos_at_all_when_the_property_breaks_without_it() -> None:
    result = shrink(Schedule(_renames("A", "B", "C"), duration=10.0), FAILURE, lambda schedule: True)
    assert result.schedule.steps == ()


def test_windows_shrink_to_the_boundary_that_still_fails() -> None:
    def property_(schedule: Schedule) -> bool:
        pauses = [step for step in schedule.steps if step.action == "pause"]
        return any(step.duration >= 3.0 and schedule.duration >= step.at + step.duration
                   for step in pauses)

    start = Schedule(_steps({"action": "pause", "at": 5.0, "duration": 10.0, "replica": 2}), duration=30.0)  # drawn
    result = shrink(start, FAILURE, property_)
    timed = [tried.what for tried in result.path if re.match(r"step 1 \(pause\): (at|duration) ", tried.what)]
    assert timed and all(re.fullmatch(r"step 1 \(pause\): (at|duration) [0-9.ms]+s -> [0-9.ms]+s", what)
                         for what in timed), timed  # a duration says its unit on both sides, drawn or shrunk
    (step,) = result.schedule.steps
    assert 3.0 <= step.duration <= 3.0 * 1.1 + 0.1
    assert step.at == 0
    assert step.replica == 1  # fewer replicas: the second is not needed
    assert 3.0 <= result.schedule.duration <= 3.5
    assert property_(result.schedule)


def test_a_hunt_step_is_its_action_s_model_and_is_written_back_with_the_keys_it_was_drawn_with() -> None:
    """The draw holds each step as its action's model; written back (a trial's scenario.toml, hunt.jsonl, the minimal
    scenario) it is the keys it was drawn with, no default added, `action` and `at` first, and reads back the same."""
    from harness.config.chaos import CHAOS_ACTIONS, FAULT_KEYS, ChaosAction
    from harness.hunt.draw import Space, draw_schedule

    actions = tuple(action for action in CHAOS_ACTIONS if action != "command")
    space = Space(actions=actions, replicas=(1, 2, 3), replica_count=3, duration=20.0, max_steps=4, ttl=600.0,
                  name="shop")
    drawn = [step for index in range(150) for step in draw_schedule(space, 11, index).steps]
    assert {step.action for step in drawn} == set(actions)
    for step in drawn:
        assert isinstance(step, ChaosAction)
        table = step_table(step)
        assert list(table)[:2] == ["action", "at"] and set(table) == step.model_fields_set
        assert chaos_step(json.loads(json.dumps(table))) == step  # as hunt.jsonl holds it
        if step.action == "network":  # its own fault's keys, no other fault's (their defaults)
            assert set(table) & set().union(*FAULT_KEYS.values()) <= FAULT_KEYS[table["fault"]]


def test_parameters_simplify_and_invalid_candidates_never_run() -> None:
    steps = _steps({"action": "network", "at": "2s", "duration": "4s", "fault": "reset", "toxicity": 0.3},
                   {"action": "clock-skew", "at": "1s", "replica": 3, "offset": "2m"},
                   {"action": "rotate-keys", "at": "3s", "order": "minter-first", "phase_gap": "5s"})

    def property_(schedule: Schedule) -> bool:  # the skew above a minute, a fault that loses answers; the rest free
        return any(step.action == "clock-skew" and step.offset > 60 for step in schedule.steps) and any(
            step.action == "network" and step.fault not in ("latency", "bandwidth") for step in schedule.steps) \
            and len(schedule.steps) == 3

    result = shrink(Schedule(steps, duration=20.0, arrival_rate=8.0), FAILURE, property_)
    network, skew, rotation = result.schedule.steps
    assert network.toxicity == 1.0 and network.replica == 1 and network.fault == "reset"  # latency, bandwidth: held
    assert skew.replica == 1 and 60 < skew.offset <= 60 * 1.1 + 0.2
    assert rotation.order == "correct" and rotation.phase_gap == 0  # the rotation's mistake was not the bug
    assert "rotate-keys order: correct fails as minter-first did" in result.irrelevant
    assert not any("fault" in said or "offset" in said for said in result.irrelevant)
    assert result.schedule.arrival_rate == pytest.approx(0.1)
    # a reset fault takes no `delay`: such a candidate fails validation and is never run
    assert not any("delay" in step_table(step) for tried in result.path for step in tried.schedule.steps)
    assert not any("delay" in tried.what for tried in result.path)


def test_literals_go_towards_the_mildest_that_still_fails_and_what_did_not_matter_is_said() -> None:
    """A kill and a truncated answer, where any bounce of r2 and any lost answer break it: the kill becomes a restart,
    the truncation the mildest fault that still loses an answer (a reset), and the shrink says so; which replica is
    the bug (r2), so it stays, and is not said to be irrelevant."""
    steps = _steps({"action": "kill", "at": "1s", "replica": 2},
                   {"action": "network", "at": "0s", "duration": "1.5s", "fault": "truncate", "after": 3,
                    "replica": 1})

    def property_(schedule: Schedule) -> bool:
        return any(step.action in ("kill", "restart") and step.replica == 2 for step in schedule.steps) and any(
            step.action == "network" and step.fault not in ("latency", "bandwidth") for step in schedule.steps)

    result = shrink(Schedule(steps, duration=6.0), FAILURE, property_)
    bounce, network = result.schedule.steps
    assert bounce.action == "restart" and bounce.replica == 2
    assert network.fault == "reset" and "after" not in step_table(network)
    assert "kill: a restart fails as the kill did" in result.irrelevant
    assert "network fault: reset fails as truncate did" in result.irrelevant
    assert "restart at: 0s fails as 1s did" in result.irrelevant  # when it came did not matter either
    assert not any("replica" in said for said in result.irrelevant)
    tried = [step.what for step in result.path if "fault" in step.what]
    assert tried[:3] == ["step 2 (network): fault truncate -> latency", "step 2 (network): fault truncate -> bandwidth",
                         "step 2 (network): fault truncate -> reset"]


def test_a_subset_of_replicas_shrinks_to_one_replica_first_and_the_ones_dropped_are_said() -> None:
    """A restart of r2+r4 and a kill of r1+r3+r4 where only a bounce of r4 and a kill of r3 with another replica
    break it: each subset tries every single replica first, then the smaller subsets; r2 did not matter, nor r1 or r4
    of the kill (any two of its replicas with r3), and the shrink says so."""
    steps = _steps({"action": "restart", "at": "1s", "replicas": [2, 4]},
                   {"action": "kill", "at": "2s", "replicas": [1, 3, 4]})

    def property_(schedule: Schedule) -> bool:
        named = [(step.action, step.named()) for step in schedule.steps]
        return ("restart", 4) in named and any(action == "kill" and isinstance(whom, tuple) and 3 in whom
                                               for action, whom in named)

    result = shrink(Schedule(steps, duration=6.0), FAILURE, property_)
    restart, kill = result.schedule.steps
    assert (restart.replica, restart.replicas) == (4, None), "r4 alone, as `replica`"
    assert kill.action == "kill" and kill.replicas == [1, 3], "no single replica failed: the smallest subset that did"
    tried = [step.what for step in result.path if "replicas" in step.what]
    assert tried[:2] == ["step 1 (restart): replicas r2+r4 -> r2", "step 1 (restart): replicas r2+r4 -> r4"]
    assert tried[2:6] == [f"step 2 (kill): replicas r1+r3+r4 -> {kept}" for kept in
                          ("r1", "r3", "r4", "r1+r3")], "single replicas, then pairs, in order"
    assert "restart replicas: r2 did not matter (r4 alone fails as r2+r4 did)" in result.irrelevant
    assert "kill replicas: r4 did not matter (r1+r3 fails as r1+r3+r4 did)" in result.irrelevant


def test_an_optional_window_shrinks_like_any_other_and_a_harsher_when_shorter_key_stays() -> None:
    """token-expiry's `duration` may be left out (until the run ends), so its type is `PositiveDuration | None`: the
    draw drew it as a duration, and the shrink, reading the same field facts, shortens it too (it once did not)."""
    steps = _steps({"action": "token-expiry", "at": "1s", "lifetime": "2s", "duration": "12s"})

    def property_(schedule: Schedule) -> bool:
        return any(step.action == "token-expiry" and (step.duration or 86400.0) >= 4.0 for step in schedule.steps)

    result = shrink(Schedule(steps, duration=20.0), FAILURE, property_)
    (shrunk,) = result.schedule.steps
    assert 4.0 <= shrunk.duration <= 4.0 * 1.1 + 0.1
    assert shrunk.lifetime == 2.0  # a shorter lifetime is a harsher fault: left as drawn


def test_rate_shrinks_to_where_it_still_fails() -> None:
    def property_(schedule: Schedule) -> bool:
        return (schedule.arrival_rate or 0) >= 2.0

    result = shrink(Schedule((), duration=10.0, arrival_rate=8.0), FAILURE, property_)
    assert result.schedule.arrival_rate is not None and 2.0 <= result.schedule.arrival_rate <= 2.3


def test_every_candidate_run_is_recorded_once() -> None:
    counted = Counted(_both_a_and_b)
    result = shrink(Schedule(_renames("A", "C", "B", "D"), duration=10.0), FAILURE, counted)
    assert sum(step.runs for step in result.path) == counted.calls == result.runs
    keys = [repr(step.schedule) for step in result.path]
    assert len(keys) == len(set(keys))  # no candidate run twice
    assert all(step.accepted == _both_a_and_b(step.schedule) for step in result.path)
    assert all(step.what for step in result.path)
    assert result.path[-1].schedule == result.schedule or not result.path[-1].accepted
    assert any(step.what.startswith("dropped step") for step in result.path)


def test_it_stops_within_its_budget_of_runs() -> None:
    counted = Counted(_both_a_and_b)
    start = Schedule(_renames(*"CDAEFGBH"), duration=20.0)
    result = shrink(start, FAILURE, counted, Budget(runs=7))
    assert counted.calls <= 7 and result.stopped_by == "runs"
    assert _both_a_and_b(result.schedule)  # the best so far still fails

    flaky = KOfN(Counted(_both_a_and_b), k=2, n=3)
    result = shrink(start, FAILURE, flaky, Budget(runs=10))
    assert flaky.run_once.calls <= 10 and result.runs <= 10  # type: ignore[attr-defined]


def test_it_stops_within_its_budget_of_time() -> None:
    now = [0.0]

    def slow(schedule: Schedule) -> bool:
        now[0] += 1.0  # each run takes a second on this clock
        return _both_a_and_b(schedule)

    counted = Counted(slow)
    result = shrink(Schedule(_renames(*"CDAEFGBH"), duration=20.0), FAILURE, counted, Budget(seconds=5.0),
                    clock=lambda: now[0])
    assert counted.calls == 5 and result.stopped_by == "time" and result.seconds == 5.0


def test_k_of_n_stops_as_soon_as_it_is_decided() -> None:
    always, never = Counted(lambda schedule: True), Counted(lambda schedule: False)
    schedule = Schedule((), duration=1.0)
    assert KOfN(always).votes(schedule) == (votes := KOfN(always).votes(schedule)) and votes.fails
    assert votes.runs == 2 and votes.failed == 2  # two failures of three: decided after two
    votes = KOfN(never).votes(schedule)
    assert not votes.fails and votes.runs == 2  # no failure in two: two of three can no longer be reached
    answers = iter([True, False, True])
    votes = KOfN(lambda schedule: next(answers)).votes(schedule)
    assert votes.fails and (votes.failed, votes.runs) == (2, 3)
    with pytest.raises(ValueError):
        KOfN(always, k=4, n=3)


def test_a_flaky_property_still_shrinks_to_the_pair() -> None:
    """Fails with probability 0.8 when A and B are both there, never otherwise; 2 of 3 keeps the shrink on track.
    The seed is fixed, so this is deterministic."""
    draw = random.Random(36)

    def flaky(schedule: Schedule) -> bool:
        return _both_a_and_b(schedule) and draw.random() < 0.8

    result = shrink(Schedule(_renames(*"CDAEFGBH"), duration=20.0), FAILURE, KOfN(flaky))
    assert _names(result.schedule) == {"A", "B"}
    assert any(0 < step.failed < step.runs for step in result.path)  # a flaky run was outvoted on the way
    assert all(step.runs <= 3 for step in result.path)


def test_same_failure_means_same_kind_name_and_signature() -> None:
    assert same_failure(FAILURE, [Failure("invariant", "no_double_release"), Failure("unexplained", "-32602")])
    assert not same_failure(FAILURE, [Failure("unexplained", "expired")])
    assert not same_failure(FAILURE, [Failure("expectation", "-32602")])
    on_r1 = Failure("unexplained", "-32602", replicas=("r1",))
    assert same_failure(on_r1, [Failure("unexplained", "-32602", replicas=("r1", "r2"))])
    assert not same_failure(on_r1, [Failure("unexplained", "-32602", replicas=("r2",))])
    runs = iter([[FAILURE], [Failure("unexplained", "expired")]])
    predicate = fails_the_same(FAILURE, lambda schedule: next(runs))
    schedule = Schedule((), duration=1.0)
    assert predicate(schedule) and not predicate(schedule)


def test_reproduce_counts_every_run() -> None:
    answers = iter([True, False] * 5)
    assert reproduce(Schedule((), duration=1.0), lambda schedule: next(answers), runs=10) == (5, 10)


# --- the minimal failing scenario ---------------------------------------------------------------

ORIGINAL = """\
#:schema ../../docs/scenario.schema.json
# the user's own comment
name = "shop-under-chaos"
seed = 3
duration = "30s"
time_scale = 60

[target]
replicas = 3
keyring = "file"
ttl = "10m"
overrides = [{ replica = 2, clock_offset = "1s" }]

[load]
arrival_rate = 8
routing = "other-replica"

[[flows]]
kind = "refund"
amount = "above-limit"

[leads]
think = { dist = "lognormal", median = "1m", p95 = "4m" }

[[chaos]]
at = "5s"
action = "pause"
replica = 2

[[chaos]]
at = "8s"
action = "rotate-keys"
order = "retire-early"

[hypothesis]
"chaos_failures{action='pause'}" = "== 0"
completed_ratio = ">= 0.5"

[reproduces]
"rejections{reason='expired'}" = "> 0"

[expect]
completed_ratio = ">= 0.95"
"rejections{reason='unknown key'}" = "== 0"
"chaos_failures{action='pause'}" = "== 0"
"round_duration" = ["p(95) < 2s", "max < 10s"]
"""

MINIMAL = Schedule(_steps({"action": "rotate-keys", "at": "1.5s", "order": "retire-early", "phase_gap": "0s"},
                          {"action": "network", "at": "0s", "duration": "2s", "fault": "reset", "replica": 1}),
                   duration=6.0, arrival_rate=2.0)


def _found(failure: Failure, minimal: Schedule = MINIMAL) -> HuntResult:
    found = Schedule(minimal.steps, duration=minimal.duration + 4.0, arrival_rate=minimal.arrival_rate)  # shrunk
    trial = Trial(index=12, seed=4242, schedule=found, purpose="search", failures=(failure,))
    return HuntResult(scenario="shop-under-chaos", seed=7, trials=[trial], found=trial, failure=failure,
                      minimal=minimal, reproduction=(9, 10), stopped_by="found")


def _header(text: str) -> str:
    """The comment header as one line of text."""
    return " ".join(line.removeprefix("# ") for line in text.split("\nname = ")[0].splitlines()[1:])


def test_the_minimal_scenario_validates_and_holds_the_schedule(tmp_path: Path) -> None:
    text = minimal_scenario(ORIGINAL, _found(FAILURE))
    scenario = parse_scenario(text, "minimal.toml")
    assert text.startswith("#:schema ../../docs/scenario.schema.json\n")
    assert [(step.action, step.at) for step in scenario.chaos] == [("rotate-keys", 1.5), ("network", 0.0)]
    assert scenario.chaos[0].phase_gap == 0 and scenario.chaos[1].replica == 1  # type: ignore[attr-defined]
    assert scenario.duration == 6.0 and scenario.load.arrival_rate == 2.0 and scenario.seed == 4242
    assert scenario.target.replica_count == 3 and scenario.time_scale == 60  # the user's own, kept
    assert scenario.load.routing == "other-replica" and scenario.leads == parse_scenario(ORIGINAL).leads
    assert scenario.reproduces == {"unexplained_rejections": "> 0"}  # no logged reason: that is what it means
    assert scenario.expect["completed_ratio"] == ">= 0.95"  # the user's healthy outcome ...
    assert scenario.expect["unexplained_rejections"] == "== 0"  # ... with the hunt's property
    assert scenario.expect["invariant_violations"] == "== 0"
    assert "chaos_failures{action='pause'}" not in scenario.expect  # the pause was shrunk away
    assert set(scenario.hypothesis) == {"completed_ratio"}
    header = _header(text)
    assert "-32602 rejections the clients saw that no replica's log line explains" in header
    assert "seed 7, trial 12" in header and "(seed 4242), reproduced it in 9 of 10 runs" in header
    assert "`mrtr-harness run --reproduce minimal.toml`" in header and "`mrtr-harness run minimal.toml`" in header
    assert text.index("[reproduces]") < text.index("[expect]")
    reason = Failure("expectation", "rejections{reason='unknown key'}")
    path = write_minimal(tmp_path / "minimal.toml", ORIGINAL, _found(reason))
    assert main(["validate", str(path)]) == 0  # once through the command line, in this process
    assert str(path) in reproducers(tmp_path)["unknown key"]  # in the catalogue, triage names it for the reason


def test_the_failure_is_stated_by_its_kind() -> None:
    invariant = parse_scenario(minimal_scenario(ORIGINAL, _found(Failure("invariant", "no_double_release"))))
    assert invariant.reproduces == {"invariant_violations{invariant='no_double_release'}": "> 0"}
    expectation = parse_scenario(minimal_scenario(ORIGINAL, _found(Failure("expectation", "completed_ratio"))))
    assert expectation.reproduces == {"completed_ratio": "< 0.95"}
    assert expectation.expect["completed_ratio"] == ">= 0.95"
    cut_short = _found(FAILURE)
    cut_short.shrink_stopped_by = "runs"
    assert "the shrink's budget of runs ran out first: maybe not minimal" in _header(
        minimal_scenario(ORIGINAL, cut_short))
    reason = parse_scenario(minimal_scenario(ORIGINAL, _found(Failure("expectation",
                                                                      "rejections{reason='unknown key'}"))))
    assert reason.reproduces == {"rejections{reason='unknown key'}": "> 0"}  # "!= 0" of a count, as triage reads it
    several = minimal_scenario(ORIGINAL, _found(Failure("expectation", "round_duration")))
    assert parse_scenario(several).reproduces is None  # any of two conditions: no threshold says it
    assert "mrtr-harness run minimal.toml` (exit 1: the failure reproduced" in _header(several)
    no_chaos = parse_scenario(minimal_scenario(ORIGINAL, _found(FAILURE, Schedule((), duration=4.0))))
    assert no_chaos.chaos == [] and no_chaos.load.arrival_rate == 8


def test_a_hostile_failure_name_stays_in_its_comment() -> None:
    hostile = Failure("unexplained", "x\n[target]\nreplicas = 99\r\u2028MCP_CLIENT_SECRET=hunter2hunter2")
    text = minimal_scenario(ORIGINAL, _found(hostile))
    assert parse_scenario(text).target.replica_count == 3
    assert "hunter2hunter2" not in text
    assert parse_scenario(text).reproduces == {"unexplained_rejections": "> 0"}  # no reason the harness knows
    assert all(line.startswith("#") for line in text.split("\nname = ")[0].splitlines())


# --- the hunt page ------------------------------------------------------------------------------

HOSTILE = "<script>alert('x')</script>"


def test_the_page_says_what_broke_the_shrink_path_and_coverage() -> None:
    start = Schedule(_renames(*"CDAEFGBH"), duration=20.0, arrival_rate=4.0)
    shrunk = shrink(start, FAILURE, _both_a_and_b)
    search = Trial(index=3, seed=99, schedule=start, purpose="search", failures=(FAILURE,),
                   reasons={"unknown key": 41, HOSTILE: 1}, exit_code=1, seconds=21.5, folder="trials/3")
    result = HuntResult(scenario=HOSTILE, seed=7, trials=[search], found=search, failure=FAILURE,
                        shrink_path=shrunk.path, shrink_stopped_by=shrunk.stopped_by, minimal=shrunk.schedule,
                        reproduction=(9, 10),
                        coverage={("rename", "r1", "early"): 3, ("pause", "r2", "late"): 1,
                                  (HOSTILE, HOSTILE, HOSTILE): 2}, stopped_by="found")
    html = render_page(result)
    assert "<script>" not in html and "&lt;script&gt;" in html  # everything read is escaped
    verdict = html.index("found: -32602 rejections")
    assert verdict < html.index("The failing trial") < html.index("The shrink path") < html.index("Coverage")
    assert "the minimal scenario as handed over reproduced it in 9 of 10 runs (90 %)" in html
    accepted = [step for step in shrunk.path if step.accepted]
    assert all(escape(step.what) in html for step in accepted)  # each accepted shrink is a row
    assert "Candidates that passed" in html and "dropped steps" in html
    assert "it ended when no smaller candidate failed the same way (1-minimal)" in html
    assert "3 actions (" in coverage_line(result) and "3 combinations tried 6 times" in coverage_line(result)
    assert 'class="heat" style="background:rgba(' in html
    assert "http" not in html.replace("http-equiv", "")  # nothing fetched


def test_what_did_not_matter_is_said_in_the_minimal_scenario_and_on_the_page() -> None:
    said = ("rotate-keys order: correct fails as retire-early did", "kill: a restart fails as the kill did")
    result = replace(_found(FAILURE), irrelevant=said)
    header = _header(minimal_scenario(ORIGINAL, result))
    assert f"What did not matter (each tried, and it failed the same way): {'; '.join(said)}." in header
    assert escape("rotate-keys order: correct fails as retire-early did") in render_page(result)
    assert "What did not matter" not in _header(minimal_scenario(ORIGINAL, _found(FAILURE)))


def test_the_page_when_nothing_broke() -> None:
    held = Trial(index=1, seed=5, schedule=Schedule(_renames("A"), duration=5.0), purpose="search")
    result = HuntResult(scenario="shop", seed=7, trials=[held], coverage={("rename", "r1", "early"): 1},
                        stopped_by="trials")
    html = render_page(result)
    assert "nothing broke within the budget (1 trial, stopped by trials)" in html
    assert "The failing trial" not in html and "The shrink path" not in html
    assert coverage_line(result) == "1 trial: 1 action (rename) on 1 replica at 1 timing, 1 combination tried 1 time"


def _hunt_of(text: str) -> Any:
    """A hunt of the scenario `text` (nothing started): its `fits` is what the shrinker asks of a candidate."""
    from harness.hunt.search import Hunt
    from harness.hunt.trial import Base

    return Hunt(Base(tomllib.loads(text), parse_scenario(text), "original.toml"), stream=io.StringIO())


HUNTED = ORIGINAL.replace("[hypothesis]\n\"chaos_failures{action='pause'}\" = \"== 0\"\n", "[hypothesis]\n").replace(
    "\"chaos_failures{action='pause'}\" = \"== 0\"\n", "")
"""ORIGINAL as a hunt takes it: no threshold that selects a chaos action (validate refuses those in a hunt)."""


def test_candidates_the_scenario_cannot_run_are_skipped() -> None:
    fits = _hunt_of(HUNTED).fits
    assert fits(MINIMAL)
    assert not fits(Schedule(_steps({"action": "pause", "at": "0s", "replica": 4}), duration=5.0))  # 3 replicas
    assert not fits(Schedule(_steps({"action": "revoke", "at": "0s"}), duration=5.0))  # the shop issues no tokens here

    staged = HUNTED.replace('routing = "other-replica"', 'routing = "other-replica"\nstages = [{ duration = "8s", '
                                                         'target = 4 }]')
    start = Schedule(_steps({"action": "kill", "at": "1s", "replica": 3}), duration=20.0)
    result = shrink(start, FAILURE, lambda schedule: True, fits=_hunt_of(staged).fits)
    assert result.schedule.steps == () and result.schedule.duration >= 8.0  # the stages last 8 s: no shorter run
    assert all(step.schedule.duration >= 8.0 for step in result.path)  # none shorter was run


def test_durations_are_written_as_a_scenario_reads_them() -> None:
    for seconds in (0.0, 0.1, 2.5, 12.345, 60.0, 2_592_000.0):
        assert parse_duration(duration_text(seconds)) == pytest.approx(seconds)
    assert duration_text(2.5) == "2.5s" and duration_text(2_592_000.0) == "2592000s"


SCENARIOS = sorted((Path(__file__).resolve().parents[1] / "scenarios").rglob("*.toml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[path.stem for path in SCENARIOS])
def test_every_shipped_scenario_survives_the_minimal_writer(path: Path) -> None:
    """Each shipped scenario's shape (hosts, auth, commands, overrides, stages) is written back unchanged, its own
    chaos as the schedule: only the name, description, seed and the two threshold tables differ."""
    text = path.read_text(encoding="utf-8")
    original = parse_scenario(text)
    schedule = Schedule(tuple(original.chaos), original.duration)
    failure = Failure("invariant", "no_double_release")
    written = parse_scenario(minimal_scenario(text, _found(failure, schedule)))
    changed = {"name", "description", "seed", "reproduces", "expect"}
    assert written.model_dump(exclude=changed) == original.model_dump(exclude=changed)
    assert set(original.expect) <= set(written.expect)


def test_against_a_found_rate_of_3_of_3_one_passing_run_drops_a_candidate() -> None:
    """The found schedule failed all its replays: a candidate that passes once fails far less often, and is dropped
    at once, where a fixed 2 of 3 would keep it after two more failures (and the shrink drift to the flakiest)."""
    schedule = Schedule((), duration=1.0)
    first, second = iter([False, True, True]), iter([False, True, True])
    assert KOfN(lambda schedule: next(first)).votes(schedule).fails  # 2 of 3: kept
    votes = KOfN(lambda schedule: next(second), rate=found_rate((3, 3))).votes(schedule)
    assert not votes.fails and votes.runs == 1
    votes = KOfN(Counted(lambda schedule: True), rate=found_rate((3, 3))).votes(schedule)
    assert votes.fails and votes.runs == 2  # failing as the found one does still costs two runs


def test_against_a_flaky_found_rate_the_test_is_no_stricter_than_the_found_schedule_itself() -> None:
    """Found failing 2 of 3 replays: a candidate failing 2 of 3 is as flaky as it, and kept."""
    schedule = Schedule((), duration=1.0)
    for answers in (iter([False, True, True]), iter([True, False, True])):
        votes = KOfN(lambda schedule, runs=answers: next(runs), rate=found_rate((2, 3))).votes(schedule)
        assert votes.fails and (votes.failed, votes.runs) == (2, 3)
    assert found_rate(None) is None and found_rate((0, 3)) == 0.1 and found_rate((3, 3)) == 0.95


def _next(answers: Iterator[bool], schedule: Schedule) -> bool:
    return next(answers)


def _kept(rate: float, found: float | None) -> float:
    """The chance a candidate that fails at `rate` is kept, against a found schedule's rate (None: 2 of 3 alone),
    summed exactly over every sequence of runs."""
    kept = set()  # the sequences of runs that decided "kept" (a decision after two runs is one sequence, not two)
    for outcomes in itertools.product((True, False), repeat=3):
        answers = iter(outcomes)
        votes = KOfN(partial(_next, answers), rate=found).votes(Schedule((), 1.0))
        if votes.fails:
            kept.add(outcomes[:votes.runs])
    return sum(math.prod(rate if failed else 1 - rate for failed in runs) for runs in kept)


def test_against_a_reliable_find_a_flakier_candidate_is_kept_about_half_as_often() -> None:
    """Found failing 3 of 3 replays: a candidate failing 6 runs in 10 is kept 36 % of the time, not 65 %, while
    one as reliable as the found schedule is still kept 9 times in 10."""
    reliable = found_rate((3, 3))
    assert _kept(0.6, None) == pytest.approx(0.648) and _kept(0.6, reliable) == pytest.approx(0.36)
    assert _kept(0.95, reliable) == pytest.approx(0.9025)


def test_a_shrink_whose_every_round_made_progress_does_not_claim_1_minimal(monkeypatch) -> None:
    """With one round allowed, the first round drops steps and so changed the schedule: a next round might have
    changed it again, so it ends as "rounds" (maybe not minimal), not "done"."""
    monkeypatch.setattr("harness.hunt.shrink._MAX_ROUNDS", 1)
    result = shrink(Schedule(_renames(*"CDAEFGBH"), duration=20.0), FAILURE, _both_a_and_b)
    assert result.stopped_by == "rounds" and _names(result.schedule) == {"A", "B"}
    monkeypatch.setattr("harness.hunt.shrink._MAX_ROUNDS", 8)
    assert shrink(Schedule(_renames(*"CDAEFGBH"), duration=20.0), FAILURE, _both_a_and_b).stopped_by == "done"
    header = _header(minimal_scenario(ORIGINAL, replace(_found(FAILURE), shrink_stopped_by="rounds")))
    assert "the shrink's rounds ran out while it still made progress: maybe not minimal" in header
