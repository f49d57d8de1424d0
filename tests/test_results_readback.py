"""Every folder `run` writes reads back: its scenario.json round-trips through the scenario model.

`run` writes the scenario it ran as scenario.json (`model_dump_json`); `report`, `compare`,
`history` and `run --baseline` read it back (`harness.report.results_scenario`). Every shipped
scenario and every chaos action and network fault of the registry is dumped as `run` dumps it
and loaded as `report` loads it; a real run with a network fault is reported, compared and used
as a baseline; a damaged scenario.json is named in one line.
"""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from harness.config.chaos import CHAOS_ACTIONS, NetworkFaultKind
from harness.config.scenario import Scenario, load_scenario
from harness.hunt.draw import Space, draw_step
from harness.hunt.model import Schedule, chaos_step
from harness.hunt.trial import Base, trial_scenario
from harness.report import results_scenario
from tests.harness_run import ROOT, SCENARIOS, run_harness
from tests.test_report import write_run

SHIPPED = sorted(SCENARIOS.rglob("*.toml"))

EVERY_ACTION = """\
name = "readback"
duration = "10s"
time_scale = 60
[target]
replicas = 2
[target.auth]
kind = "client-credentials"
client_id = "harness"
client_secret_env = "READBACK_TEST_SECRET"
[load]
arrival_rate = 3
[[flows]]
kind = "refund"
"""

COMMAND_STEP = {"action": "command", "at": 1.0, "replica": 2, "command": ["echo", "{replica}", "{url}"],
                "rollback": ["echo", "back"]}
"""`command` is never drawn by a hunt (it runs an argv only its user writes): given here."""


def _as_run_writes(scenario: Scenario, folder: Path) -> Path:
    """A results folder holding the scenario as `run` writes it, and a journal part (an empty one)."""
    folder.mkdir(parents=True)
    (folder / "scenario.json").write_text(scenario.model_dump_json(indent=2), encoding="utf-8")
    (folder / "journal.jsonl").touch()
    return folder


@pytest.mark.parametrize("path", SHIPPED, ids=[str(path.relative_to(SCENARIOS)) for path in SHIPPED])
def test_every_shipped_scenario_reads_back_from_the_scenario_json_run_writes(path: Path, tmp_path: Path) -> None:
    scenario = load_scenario(path)
    assert results_scenario(_as_run_writes(scenario, tmp_path / "run")) == scenario


def test_every_chaos_action_and_every_network_fault_reads_back(tmp_path: Path) -> None:
    """Steps of every action in the registry, drawn as a hunt draws them (each key from its declaration, 30 seeds
    each), and every network fault with its own keys: each trial's scenario dumped as `run` does reads back equal."""
    source = tmp_path / "every.toml"
    source.write_text(EVERY_ACTION)
    base = Base.read(source)
    space = Space.of(base.scenario)
    steps = [chaos_step(COMMAND_STEP)]
    for action in space.actions:
        only = dataclasses.replace(space, actions=(action,))
        steps += [draw_step(only, random.Random(seed)) for seed in range(30)]
    faults = {getattr(step, "fault", None) for step in steps if step.action == "network"}
    assert faults == set(typing.get_args(NetworkFaultKind))
    assert {step.action for step in steps} == set(CHAOS_ACTIONS)
    for n, step in enumerate(steps):
        scenario, _ = trial_scenario(base, Schedule((step,), 10.0), 1, f"step-{n}")
        assert results_scenario(_as_run_writes(scenario, tmp_path / f"step-{n}")) == scenario, step


@pytest.mark.parametrize("name", ["balancer-timeout", "latency-expiry", "lost-answer-retry", "reset-after-question"])
def test_a_folder_written_before_with_every_fault_key_at_its_default_still_reads_back(name: str,
                                                                                      tmp_path: Path) -> None:
    """scenario.json as `run` wrote it before (every network fault's key, the others' at their defaults): the
    nights already on disk are still reports, baselines and history."""
    scenario = load_scenario(SCENARIOS / "on-call" / f"{name}.toml")
    folder = _as_run_writes(scenario, tmp_path / "run")
    data = json.loads((folder / "scenario.json").read_text())
    data["chaos"][0] = {**json.loads(scenario.chaos[0].model_dump_json(round_trip=True)),
                        "delay": 1.0, "jitter": 0.0, "direction": "both", "rate": 1024, "when": "before-answer",
                        "after": None, **data["chaos"][0]}
    (folder / "scenario.json").write_text(json.dumps(data), encoding="utf-8")
    assert results_scenario(folder) == scenario


def _harness(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_a_run_with_a_network_fault_is_reported_compared_and_a_baseline(tmp_path: Path) -> None:
    """The shipped reset-after-question, run for real: `report` rebuilds its verdict, `compare` reads it, and a
    second run takes it for its baseline (none exits 2 on its own scenario.json)."""
    scenario = SCENARIOS / "on-call" / "reset-after-question.toml"
    first = run_harness(scenario, tmp_path / "first", "--reproduce")
    assert first.code == 0 and first.folder is not None, first.output

    report = _harness("report", str(first.folder))
    assert report.returncode == 0, report.stderr
    assert "scenario.json" not in report.stderr
    compared = _harness("compare", str(first.folder), str(first.folder))
    assert compared.returncode == 0, compared.stdout + compared.stderr

    second = run_harness(scenario, tmp_path / "second", "--reproduce", "--baseline", str(first.folder))
    assert second.code in (0, 1), second.output
    assert second.summary["compare"]["baseline"] == str(first.folder), second.output
    assert "scenario.json" not in second.output


DAMAGE = [  # (what is written as scenario.json, the field and words the one line names)
    (lambda data: data["chaos"][0].update(delay=2.0), "chaos[1]: fault 'reset' takes no delay"),
    (lambda data: data.update(duration="soon"), "duration:"),
    (lambda data: data.pop("flows"), "flows: is required"),
]


@pytest.mark.parametrize(("damage", "words"), DAMAGE, ids=["another-faults-key", "bad-duration", "no-flows"])
def test_a_damaged_scenario_json_is_named_in_one_line(tmp_path: Path, damage: typing.Any, words: str) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    data = json.loads(load_scenario(SCENARIOS / "on-call" / "reset-after-question.toml").model_dump_json())
    damage(data)
    (folder / "scenario.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    write_run(folder / "journal.jsonl")

    for args in (("report", str(folder)), ("compare", str(folder), str(folder))):
        done = _harness(*args)
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.strip().splitlines()
        assert line.startswith(f"mrtr-harness {args[0]}: {folder / 'scenario.json'}: "), line
        assert words in line and line.endswith("not a scenario this harness reads"), line
        assert "pydantic" not in line and "input_value" not in line


def test_a_scenario_json_that_is_no_json_is_named_in_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    write_run(folder / "journal.jsonl")
    for content in (b"{not json", b"\xff\xfe\x00garbage", b"[1, 2]"):
        (folder / "scenario.json").write_bytes(content)
        done = _harness("report", str(folder))
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.strip().splitlines()
        assert line.startswith(f"mrtr-harness report: {folder / 'scenario.json'}: "), line
        assert "pydantic" not in line
