"""The steady-state hypothesis is judged on each window's own span, and what it cannot judge does not pass.

A probe's rates are over its window's seconds, not the run's; the chaos's window gets a last
probe when the chaos ends, however short it was; a condition with nothing to observe is shown
"not judged" and makes a window's last probe not steady unless `hypothesis_unjudged = "pass"`.
The probe's arithmetic is pinned on constructed figures; the run's windows on short real runs.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harness.folding.figures import RunFigures
from harness.journal.writer import Journal, read_journal
from harness.run.hypothesis import MIN_FLOWS, SteadyState, Window
from tests.harness_run import ROOT, run_harness
from tests.services import sigint_default
from tests.test_run import report_text

T0 = 1_800_000_000.0


def _flow(t: float, flow: str = "refund", outcome: str = "completed") -> dict[str, Any]:
    return {"type": "flow", "t": t, "flow": flow, "flow_id": f"{flow}-{t}", "outcome": outcome, "duration": 1.0}


def _error_round(t: float) -> dict[str, Any]:
    return {"type": "round", "t": t, "flow": "refund", "tool": "issue_refund", "round": 1, "latency": 0.01,
            "outcome": "error", "code": -32603, "replica": "r1", "crossed": None}


def _window_late_in_a_run(flows: int, errors: int) -> RunFigures:
    """A run's figures 40 s long, with a window from 30 s to 35 s holding `flows` flows and `errors` failed rounds
    (and, before it, as many of each again: they are not the window's)."""
    figures = RunFigures()
    figures.add({"type": "run", "event": "load-started", "t": T0})
    for n in range(flows):
        figures.add(_flow(T0 + 1 + n * 25 / flows))
    for n in range(errors):
        figures.add(_error_round(T0 + 1 + n * 25 / errors))
    window = figures.window(T0 + 30)
    for n in range(flows):
        figures.add(_flow(T0 + 30 + n * 5 / flows))
    for n in range(errors):
        figures.add(_error_round(T0 + 30 + n * 5 / errors))
    figures.close(window)
    for n in range(flows):
        figures.add(_flow(T0 + 35 + n * 5 / flows))
    return window


def _probes(journal: Journal) -> list[dict[str, Any]]:
    journal.flush()
    return [record for record in read_journal(journal.path) if record["type"] == "hypothesis"]


@pytest.fixture
def journal(tmp_path: Path):
    journal = Journal(tmp_path / "journal.jsonl")
    yield journal
    journal.close()


def test_a_rate_in_a_window_late_in_the_run_is_over_the_window_s_own_seconds(journal):
    """20 failed rounds in the 5 s from 30 s to 35 s are 4/s, which `rate < 1` does not allow; 50 flows in the same
    5 s are 10/s, which `rate >= 5` does. Over the run's 35 s the first would read 0.57/s and the second 1.4/s."""
    window = _window_late_in_a_run(flows=50, errors=20)
    span = Window(30.0, 35.0)
    assert SteadyState({"client_errors": "rate < 1"}, journal).probe("during", window, span) is False
    assert SteadyState({"flows_finished": "rate >= 5"}, journal).probe("during", window, span) is True
    errors, finished = (probe["detail"][0] for probe in _probes(journal))
    assert (errors["observed"], errors["passed"], errors["judged"]) == (4.0, False, True)
    assert (finished["observed"], finished["passed"], finished["judged"]) == (10.0, True, True)
    assert _probes(journal)[0]["window"] == {"from": 30.0, "to": 35.0}


def test_a_condition_with_no_samples_is_not_judged_and_a_window_s_last_probe_is_then_not_steady(tmp_path):
    """No payout ended in the window: its completed ratio has nothing to observe. The window's last probe is not
    steady by default, though the refunds held; with `hypothesis_unjudged = "pass"` it is. An earlier probe of a
    window still open judges what it can (the payouts may end later in the window)."""
    window = RunFigures().window(T0)
    for n in range(MIN_FLOWS * 2):
        window.add(_flow(T0 + n * 0.1))
    table = {"completed_ratio{flow='refund'}": ">= 0.9", "completed_ratio{flow='payout'}": ">= 0.9"}
    span = Window(0.0, 2.0)
    journal = Journal(tmp_path / "journal.jsonl")
    try:
        assert SteadyState(table, journal).probe("during", window, span) is False
        assert SteadyState(table, journal, unjudged="pass").probe("during", window, span) is True
        assert SteadyState(table, journal).probe("during", window, Window(0.0, 2.0, last=False)) is True
        probes = _probes(journal)
    finally:
        journal.close()
    for probe in probes:
        refund, payout = probe["detail"]
        assert (refund["observed"], refund["passed"], refund["judged"]) == (1.0, True, True)
        assert (payout["observed"], payout["passed"], payout["judged"], payout["why"]) == \
            (None, False, False, "no samples")


def test_few_flows_wait_for_the_window_s_last_probe_which_judges_them_and_none_is_not_judged(journal):
    """Fewer than MIN_FLOWS flows: an earlier probe of the open window says nothing (later ones hold these flows
    too, and one unlucky flow is no deviation); the last one judges them as they are, one failure of three
    included. A window no flow ended in is not judged, and not steady unless the scenario lets it pass."""
    window = RunFigures().window(T0)
    for n in range(2):
        window.add(_flow(T0 + n * 0.1))
    window.add(_flow(T0 + 0.5, outcome="error"))
    table = {"completed_ratio": ">= 0.9"}
    assert SteadyState(table, journal).probe("during", window, Window(0.0, 1.5, last=False)) is None
    assert _probes(journal) == []
    assert SteadyState(table, journal).probe("during", window, Window(0.0, 1.5)) is False
    (item,) = _probes(journal)[0]["detail"]
    assert (item["observed"], item["judged"]) == (pytest.approx(2 / 3), True)
    empty = RunFigures().window(T0)
    assert SteadyState({"client_errors": "count == 0"}, journal).probe("during", empty, Window(0.0, 1.5)) is False
    assert SteadyState({"client_errors": "count == 0"}, journal, unjudged="pass").probe(
        "during", empty, Window(0.0, 1.5)) is True
    for probe in _probes(journal)[1:]:
        (item,) = probe["detail"]
        assert (item["observed"], item["judged"], item["why"]) == (0.0, False, "no flow ended in the window")


def test_a_window_with_no_time_in_it_is_not_judged(journal):
    """An "after" window that opens when the load's flows have all ended has no seconds to take a rate over."""
    window = _window_late_in_a_run(flows=50, errors=0)
    assert SteadyState({"flows_finished": "rate >= 5"}, journal).probe("after", window, Window(35.0, 35.0)) is False
    (item,) = _probes(journal)[0]["detail"]
    assert (item["judged"], item["why"]) == (False, "the window has no time in it")


SHORT_CHAOS = """
name = "short-chaos"
seed = 11
duration = "6s"
time_scale = 60
grace = "1s"
{unjudged}

[target]
replicas = 2

[load]
arrival_rate = 24

[[flows]]
kind = "refund"

[leads]
think = {{ dist = "constant", value = "3s" }}             # 0.05 s real

[[chaos]]
at = "3s"
action = "network"
fault = "latency"
delay = "10ms"
replica = 1
duration = "1500ms"         # shorter than the probes' tick

[hypothesis]
flows_finished = ["count >= 1", "rate > 0"]
"round_duration{{round='9'}}" = "p(95) < 1s"   # no call of a refund takes nine rounds: never a sample
"""

EMPTY = "round_duration{round='9'}"
EMPTY_SHOWN = "round_duration{round='9'} p(95) < 1s not judged (no samples)"


def _short_chaos(tmp_path: Path, unjudged: str = "") -> Any:
    scenario = tmp_path / "short-chaos.toml"
    scenario.write_text(SHORT_CHAOS.format(unjudged=unjudged))
    return run_harness(scenario, tmp_path / "results", timeout=120)


@pytest.fixture(scope="module")
def short_chaos(tmp_path_factory):
    return _short_chaos(tmp_path_factory.mktemp("short-chaos"))


def _hypothesis(finished: Any) -> tuple[float, list[dict[str, Any]]]:
    journal = finished.journal()
    started = next(r["t"] for r in journal if r["type"] == "run" and r["event"] == "load-started")
    return started, [r for r in journal if r["type"] == "hypothesis"]


def test_a_chaos_shorter_than_the_tick_gets_a_during_probe_over_its_own_span(short_chaos):
    """The fault lasts 1.5 s; its window is probed once, when it ends, from its start to its end, and the rate there
    is the window's count over the window's seconds (over the run's 4.5 s it would be a third of that)."""
    journal = short_chaos.journal()
    started, probes = _hypothesis(short_chaos)
    (during,) = [probe for probe in probes if probe["phase"] == "during"]
    chaos = [r["t"] - started for r in journal if r["type"] == "chaos" and r["action"] == "network"]
    window = during["window"]
    assert window["from"] - 0.001 <= min(chaos) and max(chaos) <= window["to"] + 0.001, (window, chaos)
    assert window["to"] - window["from"] < 4.5
    count, rate = (item["observed"] for item in during["detail"] if item["threshold"] == "flows_finished")
    assert count >= 1 and rate == pytest.approx(count / (window["to"] - window["from"]), rel=1e-2)
    assert [probe["phase"] for probe in probes] == ["before", "during", "after"]
    after = probes[-1]["window"]
    assert after["from"] == pytest.approx(window["to"], abs=0.002)


def test_a_chaos_cut_short_by_ctrl_c_is_probed_up_to_the_cut_and_after_opens_there(tmp_path):
    """Ctrl-C while a 30 s fault still runs: its "during" window is judged up to the cut (not left unprobed, not
    stretched to its scheduled end), and "after" opens where it closed."""
    scenario = tmp_path / "cut.toml"
    scenario.write_text(SHORT_CHAOS.format(unjudged="").replace('duration = "6s"', 'duration = "60s"')
                        .replace('duration = "1500ms"', 'duration = "30s"'))
    results = tmp_path / "results"
    process = subprocess.Popen([sys.executable, "-m", "harness", "run", str(scenario), "--results", str(results),
                                "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                               preexec_fn=sigint_default)
    try:
        deadline = time.monotonic() + 90
        journal = None
        while time.monotonic() < deadline and process.poll() is None:
            found = list(results.glob("*/journal.jsonl")) if results.exists() else []
            if found and b'"type":"chaos"' in found[0].read_bytes():
                journal = found[0]
                break
            time.sleep(0.1)
        assert journal is not None, "the fault never started"
        process.send_signal(signal.SIGINT)
        output = process.communicate(timeout=90)[0]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, output
    records = list(read_journal(journal))
    started = next(r["t"] for r in records if r["type"] == "run" and r["event"] == "load-started")
    chaos_start = next(r["t"] for r in records if r["type"] == "chaos") - started
    probes = [r for r in records if r["type"] == "hypothesis"]
    phases = [probe["phase"] for probe in probes]
    assert phases[0] == "before" and phases[-1] == "after" and "during" in phases, phases
    last_during = [probe for probe in probes if probe["phase"] == "during"][-1]["window"]
    assert last_during["to"] == pytest.approx(probes[-1]["window"]["from"], abs=0.002)
    assert chaos_start - 0.001 <= last_during["to"] < chaos_start + 30


def test_an_empty_selector_is_shown_not_judged_and_fails_the_run_by_default(short_chaos):
    """No call takes nine rounds: every window's condition on ninth rounds is not judged, so none is steady, and the
    run fails; the terminal, summary.json and report.html say "not judged", not "passed"."""
    assert short_chaos.code == 1, short_chaos.output
    _, probes = _hypothesis(short_chaos)
    assert [probe["ok"] for probe in probes] == [False, False, False]
    for probe in probes:
        empty = next(item for item in probe["detail"] if item["threshold"] == EMPTY)
        assert (empty["judged"], empty["why"]) == (False, "no samples")
    summary = short_chaos.summary
    assert [(probe["phase"], probe["ok"], probe["judged"]) for probe in summary["hypothesis"]] == \
        [("before", False, False), ("during", False, False), ("after", False, False)]
    assert any("steady state during chaos" in problem and "not judged (no samples)" in problem
               for problem in summary["problems"]), summary["problems"]
    assert "✗ steady state during chaos" in short_chaos.output
    assert EMPTY_SHOWN in short_chaos.output
    page = report_text(short_chaos.folder / "report.html")
    assert EMPTY_SHOWN in page


def test_an_empty_selector_passes_when_the_scenario_says_unjudged_conditions_pass(tmp_path):
    finished = _short_chaos(tmp_path, unjudged='hypothesis_unjudged = "pass"')
    assert finished.code == 0, finished.output
    _, probes = _hypothesis(finished)
    assert [probe["phase"] for probe in probes] == ["before", "during", "after"]
    assert all(probe["ok"] for probe in probes)
    assert [probe["judged"] for probe in finished.summary["hypothesis"]] == [False, False, False]
    assert "- steady state during chaos" in finished.output  # shown as neither held nor failed
    assert EMPTY_SHOWN in finished.output
    page = report_text(finished.folder / "report.html")
    assert "not judged during chaos" in page
