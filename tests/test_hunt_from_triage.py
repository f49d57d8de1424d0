"""`hunt --from-triage`: a triage file's logged reasons steer the hunt to the actions that provoke them.

The reader is fed real `triage --json` output (the triage's own rendering of its own counts) and, as
untrusted input, anything at all (a Hypothesis property: it returns bounded, vocabulary-only counts or refuses
with a usage error, nothing else). The registry test holds every action's `provokes` to the reasons vocabulary,
and every reason chaos can cause to at least one action. The steering tests build the hunt's scenario as the
command does, and start no process; the command's refusal runs it (about 3 s) and starts nothing. Reasons no
drawable action provokes: the control trials alone run, and say whether the deployment logs them as it stands
(one 3 s control each).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.config.chaos import CHAOS_ACTIONS
from harness.config.hunt import drawable_actions
from harness.hunt.from_triage import (
    MOST_BYTES,
    NOT_BY_CHAOS,
    Triaged,
    TriageFileError,
    expect_table,
    parse_triage,
    provokers,
    read_triage,
    steer,
)
from harness.hunt.minimal import reproduces_table
from harness.hunt.model import Failure
from harness.hunt.trial import Property, trial_scenario
from harness.triage.counts import LiveCounts
from harness.triage.display import render_json
from harness.vocabulary import OTHER_REASON, REASONS
from tests.harness_run import ROOT

SHOP = """\
name = "hunted"
seed = 5
duration = "10s"
time_scale = 60

[target]
replicas = 2
keyring = "ephemeral"

[load]
arrival_rate = 3
routing = "round-robin"

[[flows]]
kind = "refund"
amount = "above-limit"

[leads]
think = { dist = "constant", value = "6s" }

[expect]
rejections = "== 0"
"""


def _triage_json(counted: dict[str, dict[str, int]]) -> str:
    """What `triage --once --json` prints for these rejections (reason -> replica -> count): triage's own counts and
    its own rendering."""
    counts = LiveCounts(60.0, by_line_time=True)
    for reason, replicas in counted.items():
        for replica, times in replicas.items():
            for second in range(times):
                counts.add(replica, reason, at=1_700_000_000.0 + second)
    return render_json(counts.snapshot(), exit_code=1)


# --- the registry ----------------------------------------------------------------------------------


def test_every_reason_an_action_provokes_is_one_the_sdk_logs():
    for name, model in CHAOS_ACTIONS.items():
        assert model.provokes <= set(REASONS), (name, model.provokes - set(REASONS))


def test_every_reason_chaos_can_cause_has_an_action_and_the_others_none():
    assert set(REASONS) >= NOT_BY_CHAOS
    for reason in REASONS:
        assert bool(provokers(reason)) != (reason in NOT_BY_CHAOS), reason


# --- the reader ------------------------------------------------------------------------------------


def test_triages_own_json_is_read_by_reason_and_replica(tmp_path):
    path = tmp_path / "rejections.json"
    path.write_text(_triage_json({"unknown key": {"r2": 3, "r1": 1}, "expired": {"r1": 2}}))
    triaged = read_triage(path)
    assert triaged.counts == {"unknown key": 4, "expired": 2}  # the SDK's order, zeros left out
    assert triaged.replicas == {"unknown key": ("r1", "r2"), "expired": ("r1",)}
    assert triaged.ignored == ()


@pytest.mark.parametrize(("text", "words"), [
    ("not json", "not JSON"),
    ("[1, 2]", "no by_reason table"),
    ('{"by_reason": {"expired": true}}', "'expired' is not a count"),
    ('{"by_reason": {"expired": -1}}', "'expired' is not a count"),
    ('{"by_reason": {"expired": 1e3}}', "'expired' is not a count"),
    ("[" * 100_000 + "]" * 100_000, "not JSON"),
    ('{"by_reason": {"expired": 1' + "0" * 5000 + "}}", "not JSON"),
])
def test_anything_but_triages_json_is_refused_as_a_usage_error(text, words):
    with pytest.raises(TriageFileError, match=words) as refused:
        parse_triage(text)
    assert refused.value.exit_code == 2


def test_a_file_larger_than_triage_writes_is_not_read(tmp_path):
    path = tmp_path / "huge.json"
    path.write_text('{"by_reason": {}, "pad": "' + "x" * MOST_BYTES + '"}')
    with pytest.raises(TriageFileError, match="larger than 4 MiB"):
        read_triage(path)


def test_names_from_the_file_are_made_safe_and_unknown_reasons_ignored_and_said():
    triaged = parse_triage(json.dumps({"by_reason": {"expired": 2, "\x1b[2Jowned\nline": 5},
                                       "by_reason_and_replica": {"expired": {"pod\u202e-1\n[x]": 2, "idle": 0}}}))
    assert triaged.counts == {"expired": 2}
    assert triaged.ignored == ("\\x1b[2Jowned line",)
    assert triaged.replicas == {"expired": ("pod\\u202e-1 [x]",)}


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=20), inner,
                                                                                 max_size=4), max_leaves=30)
_TRIAGE_LIKE = st.fixed_dictionaries({"by_reason": st.dictionaries(st.sampled_from([*REASONS, OTHER_REASON])
                                                                   | st.text(max_size=30), _JSON, max_size=14)},
                                     optional={"by_reason_and_replica": st.dictionaries(
                                         st.sampled_from(REASONS) | st.text(max_size=10),
                                         st.dictionaries(st.text(max_size=80), _JSON, max_size=5) | _JSON,
                                         max_size=5)})


@settings(max_examples=300, deadline=None)
@given(st.one_of(_JSON.map(json.dumps), _TRIAGE_LIKE.map(json.dumps), st.binary(max_size=200),
                 st.text(max_size=200)))
def test_the_reader_returns_bounded_vocabulary_counts_or_refuses_whatever_it_is_given(raw):
    try:
        triaged = parse_triage(raw)
    except TriageFileError as refused:
        assert "\n" not in str(refused) and "\x1b" not in str(refused)
        return
    assert set(triaged.counts) <= {*REASONS, OTHER_REASON}
    assert all(isinstance(count, int) and count > 0 for count in triaged.counts.values())
    assert set(triaged.replicas) <= set(triaged.counts)
    for name in [*triaged.ignored, *(label for labels in triaged.replicas.values() for label in labels)]:
        assert len(name) <= 64 and name.isprintable() and "\n" not in name


# --- the steering ----------------------------------------------------------------------------------


def test_the_reasons_narrow_the_actions_and_the_start_line_says_to_which():
    triaged = Triaged({"unknown key": 41, "expired": 3})
    steering = steer(triaged, list(CHAOS_ACTIONS))
    assert steering.actions == ("restart", "kill", "pause", "rolling-restart", "rotate-keys", "set-ttl",
                                "clock-skew", "network")
    assert steering.start_line() == ("from triage: unknown key 41, expired 3 → restart, kill, pause, "
                                     "rolling-restart, rotate-keys, set-ttl, clock-skew, network")
    assert steering.unprovoked == {}
    assert steering.left_out("rename") == "it provokes no reason triage counted"
    assert steering.left_out("kill") is None
    assert steer(triaged, ["kill", "network"]).left_out("rename") is None  # not drawable: not the steering's doing
    assert expect_table(steering) == {"rejections{reason='unknown key'}": "== 0",
                                      "rejections{reason='expired'}": "== 0"}


def test_a_reason_no_drawable_action_provokes_is_said_and_one_no_action_provokes_too():
    steering = steer(Triaged({"audience": 5, "seal": 2, "expired": 1}), ["network", "set-ttl"])
    assert steering.actions == ("set-ttl", "network")
    assert steering.provoked == ("expired",)
    assert steering.unprovoked["audience"] == "only rename provoke audience, which this hunt does not draw"
    assert steering.unprovoked["seal"].startswith("no chaos action provokes seal: a changed token")
    lines = steering.lines()
    assert "from triage: the property gains the logged reasons reproduced: a trial whose replicas log expired fails" \
        in lines
    assert any(line.startswith("from triage: no chaos action provokes seal") for line in lines)


def test_a_file_with_no_rejection_cannot_steer():
    with pytest.raises(TriageFileError, match="counts no rejection"):
        steer(Triaged({}), list(CHAOS_ACTIONS))


def _args(scenario: Path, triage: Path, *flags: str) -> argparse.Namespace:
    from harness.cli.main import build_parser

    return build_parser().parse_args(["hunt", str(scenario), "--from-triage", str(triage), *flags])


def test_the_steered_scenario_draws_only_the_provoking_actions_and_a_logged_reason_fails_its_trials(tmp_path):
    from harness.hunt.cli import _steered

    scenario = tmp_path / "hunted.toml"
    scenario.write_text(SHOP)
    triage = tmp_path / "rejections.json"
    triage.write_text(_triage_json({"unknown key": {"r1": 41}, "seal": {"r2": 2}}))
    base, steering = _steered(_args(scenario, triage))
    assert drawable_actions(base.scenario) == ["restart", "kill", "rolling-restart"]  # no ring on ephemeral keys
    assert steering.unprovoked.keys() == {"seal"}
    hunt = base.scenario.hunt
    assert hunt is not None and hunt.expect  # the logged reasons are counted ...
    assert base.scenario.expect == {"rejections{reason='unknown key'}": "== 0"}  # ... the scenario's own set aside
    assert Property.of(base.scenario, hunt.expect).expect
    assert "rejections{reason='unknown key'}" in base.text  # minimal.toml is written from this text
    failure = Failure("expectation", "rejections{reason='unknown key'}", reasons=("unknown key",))
    assert reproduces_table(failure, base.scenario.expect) == {"rejections{reason='unknown key'}": "> 0"}
    from harness.hunt.draw import Space, draw_schedule

    trial = trial_scenario(base, draw_schedule(Space.of(base.scenario), 5, 1), 1, "t1")[0]
    assert trial.expect == {"rejections{reason='unknown key'}": "== 0"}


def test_with_expect_the_scenarios_own_expect_is_kept_beside_the_logged_reasons(tmp_path):
    from harness.hunt.cli import _steered

    scenario = tmp_path / "hunted.toml"
    scenario.write_text(SHOP)
    triage = tmp_path / "rejections.json"
    triage.write_text(_triage_json({"expired": {"r1": 3}}))
    base, _ = _steered(_args(scenario, triage, "--expect", "--actions", "restart,set-ttl,network"))
    assert drawable_actions(base.scenario) == ["set-ttl", "network"]
    assert base.scenario.expect == {"rejections": "== 0", "rejections{reason='expired'}": "== 0"}


def test_a_hunt_steered_to_no_action_and_no_control_is_refused_with_exit_2_before_anything_starts(tmp_path):
    scenario = tmp_path / "hunted.toml"
    scenario.write_text(SHOP)
    triage = tmp_path / "rejections.json"
    triage.write_text(_triage_json({"seal": {"r1": 2}, "unknown key": {"r2": 1}}))
    done = subprocess.run([sys.executable, "-m", "harness", "hunt", str(scenario), "--from-triage", str(triage),
                           "--actions", "network", "--controls", "0", "--results", str(tmp_path / "results")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert ("from triage: seal 2, unknown key 1: no action this hunt may draw can provoke a reason triage counted"
            in done.stderr)
    assert "only restart, kill, rolling-restart, rotate-keys provoke unknown key" in done.stderr
    assert "no chaos action provokes seal" in done.stderr
    assert "with no control trial nothing would show the deployment logging them without chaos" in done.stderr
    assert not (tmp_path / "results").exists()


def _controls_only(tmp_path: Path, counted: dict[str, dict[str, int]]) -> tuple[subprocess.CompletedProcess[str],
                                                                                dict[str, object]]:
    """A hunt of SHOP (per-process keys, round-robin: it logs `unknown key` with no chaos at all) steered by a triage
    file no drawable action (network only) can provoke: one control trial of 3 s, then its hunt.json."""
    scenario = tmp_path / "hunted.toml"
    scenario.write_text(SHOP)
    triage = tmp_path / "rejections.json"
    triage.write_text(_triage_json(counted))
    done = subprocess.run([sys.executable, "-m", "harness", "hunt", str(scenario), "--from-triage", str(triage),
                           "--actions", "network", "--controls", "1", "--trial-duration", "3s", "--results",
                           str(tmp_path / "results")], cwd=ROOT, capture_output=True, text=True, timeout=240)
    [summary] = list((tmp_path / "results").glob("*/hunt.json"))
    return done, json.loads(summary.read_text())


@pytest.mark.timeout(300)
def test_reasons_no_action_provokes_are_reproduced_by_the_controls_when_the_deployment_logs_them_as_it_stands(
        tmp_path):
    """On-call's triage counted `unknown key`; the hunt may draw only network faults, which cannot provoke it. The
    controls run with it counted, and the deployment logs it without chaos: "fails without chaos", exit 1, the
    reproduction being the deployment itself."""
    done, summary = _controls_only(tmp_path, {"unknown key": {"r2": 7}})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "from triage: so only the control trials run, with unknown key counted" in done.stderr
    assert "fails without chaos: control trial 1 failed (expectation rejections{reason='unknown key'}" in done.stdout
    assert summary["stopped_by"] == "fails without chaos" and summary["trials"] == {"control": 1}, summary


@pytest.mark.timeout(300)
def test_reasons_no_action_provokes_and_the_controls_do_not_log_end_in_one_line_exit_2_after_the_controls(tmp_path):
    """The same deployment, triage counted `seal` (a changed token: no chaos provokes it) and it logs none: the
    control holds, nothing is searched, and the refusal says so (exit 2), not "nothing broke"."""
    done, summary = _controls_only(tmp_path, {"seal": {"r1": 2}})
    assert done.returncode == 2, done.stdout + done.stderr
    assert ("seal 2: no action this hunt may draw can provoke a reason triage counted, so no search could reproduce "
            "it (no chaos action provokes seal") in done.stdout
    assert "; 1 control trial without chaos held, so the deployment alone does not log them either" in done.stdout
    assert "nothing broke" not in done.stdout + done.stderr
    assert summary["stopped_by"] == "nothing to draw" and summary["trials"] == {"control": 1}, summary


# --- a real incident, triaged, then hunted -----------------------------------------------------------

STICKY = """\
name = "hunted"
seed = 5
duration = "8s"
time_scale = 60

[target]
replicas = 2
keyring = "ephemeral"
ttl = "10m"

[load]
arrival_rate = 3
routing = "same-replica"

[[flows]]
kind = "refund"
amount = "above-limit"

[leads]
think = { dist = "constant", value = "4m" }
"""
"""Per-process keys, but every call kept on one replica: healthy without chaos; a replica that restarts while its
leads think loses the key their states were sealed with (`unknown key`)."""


def _harness(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.timeout(600)  # a catalogue run (about 16 s), then a control, a find, its replay, a shrink run and a
def test_a_real_incidents_triage_steers_a_hunt_to_a_minimal_scenario_that_reproduces_its_reason(tmp_path):  # rerun
    incident = _harness("run", str(ROOT / "scenarios/on-call/ephemeral-keys.toml"), "--results", str(tmp_path / "runs"))
    assert incident.returncode == 1, incident.stderr  # its [expect]: no unknown key, which it logs
    [logs] = (tmp_path / "runs").glob("*/target/logs")
    triaged = _harness("triage", "--once", "--json", "--file", *(str(logs / f"r{n}.log") for n in (1, 2, 3)))
    triage = tmp_path / "rejections.json"
    triage.write_text(triaged.stdout)
    counted = json.loads(triaged.stdout)["by_reason"]["unknown key"]
    assert counted > 0, triaged.stdout
    scenario = tmp_path / "hunted.toml"
    scenario.write_text(STICKY)
    done = _harness("hunt", str(scenario), "--from-triage", str(triage), "--controls", "1", "--trials", "3",
                    "--trial-duration", "8s", "--max-steps", "1", "--reruns", "1", "--must-fail", "1",
                    "--shrink-runs", "1", "--reproduce", "1", "--seed", "3", "--results", str(tmp_path / "hunts"),
                    timeout=540)
    assert done.returncode == 1, done.stderr
    assert f"from triage: unknown key {counted} → restart, kill, rolling-restart\n" in done.stderr
    assert "left out: pause, set-ttl, rename, clock-skew, memory-records, network (it provokes no reason triage " \
        "counted)" in done.stderr
    [folder] = (tmp_path / "hunts").iterdir()
    summary = json.loads((folder / "hunt.json").read_text())
    assert summary["stopped_by"] == "found" and summary["strategy"] == "random" and summary["seed"] == 3
    assert summary["failure"]["name"] == "rejections{reason='unknown key'}"
    assert summary["from_triage"]["counts"] == {"unknown key": counted}
    assert summary["from_triage"]["actions"] == ["restart", "kill", "rolling-restart"]
    assert summary["rerun"] == f"mrtr-harness hunt {scenario} --seed 3 --strategy random --from-triage {triage}"
    assert summary["controls"] == {"trials": 1, "held": 1, "not_judged": 0, "failed": None}
    assert summary["minimal_file"] == "minimal.toml" and summary["reproduction"]["runs"] == 1
    assert summary["without_chaos"] is None and summary["residual_risk"] is None  # found: no bound to state
    assert summary["coverage"].startswith("coverage: ")
    assert {step["action"] for step in summary["found"]["schedule"]["steps"]} <= set(summary["from_triage"]["actions"])
    minimal = (folder / "minimal.toml").read_text()
    assert "[reproduces]   # the failure: judged by `run --reproduce`\n\"rejections{reason='unknown key'}\" = \"> 0\"" \
        in minimal
