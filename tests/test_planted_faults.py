"""The planted latent faults the search benchmark hunts (`harness.shop.planted`, `benchmarks.planted_rates`).

Each is off unless `MRTR_SHOP_PLANTED` names it, and no shipped scenario or catalogue entry names
one; a replica's record of its lives tells a restart from a kill and takes hold only after the
schedule its fault needs; the exact per-trial trigger rate of the `random` drawer agrees with a
Monte-Carlo of the drawer itself over many seeds (no processes), and each is at most 1%. One real
test: the two-fault knob holds a run with no chaos and breaks a run with its two faults.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks.hunt_search import scenario_text
from benchmarks.planted_rates import TRIGGERS, Cell, Trigger, schedule_triggers, trigger_rate
from harness.config.scenario import Scenario
from harness.hunt.draw import Space, draw_schedule
from harness.hunt.toml_file import document
from harness.shop.planted import PARTNER_PAUSE, PLANTED, PLANTED_ENV, PlantedGuard, planted_guard, planted_names
from tests.harness_run import ROOT

ARGS = SimpleNamespace(trials=60, trial_duration="4s", reproduce=None, shrink_runs=None)


def _space() -> Space:
    return Space.of(Scenario.model_validate(tomllib.loads(scenario_text(ARGS, "random", 1))))  # type: ignore[arg-type]


def test_each_planted_fault_is_off_unless_named() -> None:
    assert planted_names({}) == frozenset()
    assert planted_guard("file:/nowhere/ring", "r1", {}) is None
    assert planted_names({PLANTED_ENV: "kill-twice-r3, pause-amnesia-r1"}) == {"kill-twice-r3", "pause-amnesia-r1"}
    with pytest.raises(ValueError, match="no planted fault"):
        planted_names({PLANTED_ENV: "kill-twice"})
    with pytest.raises(ValueError, match="file: key ring"):
        planted_guard("ephemeral", "r1", {PLANTED_ENV: "kill-twice-r3"})


def test_no_shipped_scenario_names_a_planted_fault() -> None:
    shipped = [*ROOT.glob("scenarios/**/*.toml"), *ROOT.glob("docs/**/*.toml")]
    assert shipped
    for path in shipped:
        text = path.read_text(encoding="utf-8")
        assert PLANTED_ENV not in text, path
        assert not [name for name in PLANTED if name in text], path


def _life(folder: Path, label: str, names: set[str], *, clean: bool) -> PlantedGuard:
    guard = PlantedGuard(frozenset(names), label, folder)
    if clean:
        guard.stopped()
    return guard


@pytest.mark.parametrize(("fault", "label", "ends", "holds"), [
    ("kill-twice-r3", "r3", [False, False], True),
    ("kill-twice-r3", "r3", [False, True], False),
    ("kill-twice-r3", "r2", [False, False], False),
    ("restart-then-kill-r2", "r2", [True, False], True),
    ("restart-then-kill-r2", "r2", [False, True], False),
    ("restart-then-kill-r2", "r2", [True, True], False),
])
def test_a_replica_takes_hold_only_after_its_schedule(tmp_path: Path, fault: str, label: str, ends: list[bool],
                                                      holds: bool) -> None:
    """Earlier lives ending clean (a restart) or not (a kill); the next life refuses others' states when it holds,
    and still opens what it minted since."""
    for clean in ends:
        _life(tmp_path, label, {fault}, clean=clean)
    guard = _life(tmp_path, label, {fault}, clean=False)
    assert guard.refuses("sealed-elsewhere") is holds
    guard.sealed("sealed-here")
    assert guard.refuses("sealed-here") is False


def test_the_two_fault_knob_needs_both(tmp_path: Path) -> None:
    fault = {"kill-r1-with-pause-r2"}
    _life(tmp_path, "r1", fault, clean=False)
    first = _life(tmp_path, "r1", fault, clean=False)
    assert first.refuses("state") is False  # killed once, but r2 never paused
    (tmp_path / "planted-r2.json").write_text('{"lives": [null], "gap": 2.05}', encoding="utf-8")
    assert first.refuses("state") is True


@pytest.mark.parametrize(("lives", "paused", "holds"), [
    ([False], [0], True),  # paused, then killed in the same life
    ([False, False], [1], True),  # killed, then paused in the next life and killed again
    ([False, True], [1], False),  # killed, then paused in the next life, which ended in a restart
    ([True], [0], False),  # paused, then restarted: no kill
    ([False], [], False),  # killed, never paused long
])
def test_the_holdout_takes_hold_only_after_a_pause_then_a_kill(tmp_path: Path, lives: list[bool], paused: list[int],
                                                               holds: bool) -> None:
    (tmp_path / "planted-r2.json").write_text(json.dumps({"lives": lives, "gap": 2.5 if paused else 0.0,
                                                          "paused": paused}), encoding="utf-8")
    guard = PlantedGuard(frozenset({"pause-then-kill-r2"}), "r2", tmp_path)
    assert guard.refuses("sealed-elsewhere") is holds


_LIFE = """\
import sys, time
from pathlib import Path
from harness.shop.planted import PlantedGuard
guard = PlantedGuard(frozenset({"pause-then-kill-r2"}), "r2", Path(sys.argv[1]))
print("ready", flush=True)
time.sleep(60)
"""


def _paused_life(folder: Path, *, kill_while_paused: bool) -> list[int]:
    """A real replica life of r2 (its own process, its heartbeat running), stopped with SIGSTOP for longer than the
    holdout's gap; then killed while still stopped, or resumed until its record notes the pause and killed. Returns
    the lives its record says a long pause was noticed in."""
    child = subprocess.Popen([sys.executable, "-c", _LIFE, str(folder)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        os.kill(child.pid, signal.SIGSTOP)
        time.sleep(PARTNER_PAUSE + 0.3)  # the gap the heartbeat sees is at least this long
        if not kill_while_paused:
            os.kill(child.pid, signal.SIGCONT)
            deadline = time.monotonic() + 10
            while not json.loads((folder / "planted-r2.json").read_text())["paused"]:
                assert time.monotonic() < deadline, "the resumed life never noted its pause"
                time.sleep(0.05)
    finally:
        child.kill()
        child.wait(timeout=10)
    return json.loads((folder / "planted-r2.json").read_text())["paused"]


def test_a_life_notes_a_long_pause_once_resumed_and_one_killed_while_paused_never_does(tmp_path: Path) -> None:
    """The holdout needs the pause to have ended before the kill: a life killed while stopped never notices its gap,
    so the next life holds; a life resumed notes it, so the life after its kill forgets its keys."""
    (tmp_path / "frozen").mkdir()
    assert _paused_life(tmp_path / "frozen", kill_while_paused=True) == []
    assert PlantedGuard(frozenset({"pause-then-kill-r2"}), "r2", tmp_path / "frozen").refuses("state") is False
    (tmp_path / "resumed").mkdir()
    assert _paused_life(tmp_path / "resumed", kill_while_paused=False) == [0]
    assert PlantedGuard(frozenset({"pause-then-kill-r2"}), "r2", tmp_path / "resumed").refuses("state") is True


def test_each_random_trigger_rate_is_at_most_one_percent() -> None:
    space = _space()
    for fault in PLANTED:
        rate = trigger_rate(space, TRIGGERS[fault])
        assert 0.001 < rate <= 0.01, (fault, rate)


WIDE = [Trigger("wide-pause", Cell("pause", 2, 2.0), None, TRIGGERS["pause-amnesia-r1"].rule),
        Trigger("wide-pair", Cell("restart", 1), Cell("pause", 3, 1.5), TRIGGERS["restart-then-kill-r2"].rule)]
"""Commoner schedules built the same way, so the Monte-Carlo checks the sums at rates it can resolve sharply."""


def test_the_exact_rates_match_a_monte_carlo_of_the_drawer() -> None:
    space = _space()
    draws = 30000
    schedules = [draw_schedule(space, seed, index) for seed in range(1, 31) for index in range(draws // 30)]
    for trigger in [*TRIGGERS.values(), *WIDE]:
        exact = trigger_rate(space, trigger)
        seen = sum(schedule_triggers(schedule, trigger) for schedule in schedules) / len(schedules)
        spread = math.sqrt(exact * (1 - exact) / len(schedules))
        assert abs(seen - exact) <= 4.5 * spread, (trigger.fault, exact, seen)


def _run(scenario: Path, results: Path, planted: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, **{PLANTED_ENV: planted})
    return subprocess.run([sys.executable, "-m", "harness", "run", str(scenario), "--results", str(results)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_the_two_fault_knob_holds_without_chaos_and_breaks_with_both_faults(tmp_path: Path) -> None:
    """A real embedded shop, three replicas: with no chaos the planted two-fault knob's run passes its `[expect]`;
    with a kill of r1 and a 2.5 s pause of r2 it fails, on `unknown key` rejections."""
    data = tomllib.loads(scenario_text(ARGS, "random", 1))
    data.pop("hunt")
    data["duration"] = "8s"
    calm = tmp_path / "calm.toml"
    calm.write_text(document(data), encoding="utf-8")
    held = _run(calm, tmp_path / "calm", "kill-r1-with-pause-r2")
    assert held.returncode == 0, held.stdout[-1500:] + held.stderr[-1500:]
    data["chaos"] = [{"action": "kill", "at": "1s", "replica": 1},
                     {"action": "pause", "at": "1.5s", "replica": 2, "duration": "2.5s"}]
    both = tmp_path / "both.toml"
    both.write_text(document(data), encoding="utf-8")
    broke = _run(both, tmp_path / "both", "kill-r1-with-pause-r2")
    assert broke.returncode == 1, broke.stdout[-1500:] + broke.stderr[-1500:]
    assert "unknown key" in broke.stdout + broke.stderr
    [folder] = (tmp_path / "both").iterdir()
    assert "planted fault took hold on r1" in (folder / "target" / "logs" / "r1.log").read_text(encoding="utf-8")
