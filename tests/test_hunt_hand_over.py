"""What the hunt hands over names how to draw it again, and a fix is verified by what the hunt judged.

minimal.toml's header and hunt.html name the strategy beside the seed (a hunt is drawn again only with both);
when the hunt did not count the scenario's `[expect]` (`[hunt] expect` false, the default), minimal.toml's
"verify a fix" `[expect]` holds the hunt's property alone, and says which of the scenario's keys it left out.
No process is started.
"""

from __future__ import annotations

from dataclasses import replace

from harness.config.chaos import ChaosStep
from harness.config.scenario import parse_scenario
from harness.hunt.minimal import minimal_scenario
from harness.hunt.model import Failure, HuntResult, Schedule, Trial, chaos_step
from harness.hunt.page import render_page

ORIGINAL = """\
name = "shop"
seed = 5
duration = "10s"
time_scale = 60

[target]
replicas = 2

[load]
arrival_rate = 3

[[flows]]
kind = "refund"
amount = "above-limit"

[expect]
rejections = "== 0"
completed_ratio = ">= 0.95"
"""

FAILURE = Failure("invariant", "no_double_release", detail=("released N times",))
STEP: ChaosStep = chaos_step({"action": "network", "at": 1.0, "duration": 1.5, "fault": "truncate", "after": 10.0,
                              "replica": 1})


def _found(**fields: object) -> HuntResult:
    schedule = Schedule((STEP,), duration=3.0)
    trial = Trial(index=7, seed=4242, schedule=schedule, purpose="search", failures=(FAILURE,))
    result = HuntResult(scenario="shop", seed=9, trials=[trial], found=trial, failure=FAILURE, minimal=schedule,
                        reproduction=(8, 10), stopped_by="found", strategy="swarm")
    return replace(result, **fields)  # type: ignore[arg-type]


def _header(text: str) -> str:
    return " ".join(line.removeprefix("# ") for line in text.split("\nname = ")[0].splitlines()[1:])


def test_the_minimal_scenario_and_the_page_name_the_strategy_beside_the_seed():
    text = minimal_scenario(ORIGINAL, _found())
    assert "(seed 9, trial 7, strategy swarm: `hunt --seed 9 --strategy swarm` draws its schedules again)" in \
        _header(text)
    assert "<span>seed <b>9</b></span><span>strategy <b>swarm</b></span>" in render_page(_found())


def test_with_expect_not_counted_a_fix_is_verified_by_the_hunts_property_alone():
    text = minimal_scenario(ORIGINAL, _found(expect_counted=False))
    scenario = parse_scenario(text, "minimal.toml")
    assert scenario.expect == {"unexplained_rejections": "== 0", "invariant_violations": "== 0"}
    assert scenario.reproduces == {"invariant_violations{invariant='no_double_release'}": "> 0"}
    assert ("[expect] holds the hunt's property alone: the scenario's own rejections, completed_ratio was not part of "
            "it ([hunt] expect = false), so it is left out") in _header(text)


def test_with_expect_counted_the_scenarios_own_expect_is_kept():
    scenario = parse_scenario(minimal_scenario(ORIGINAL, _found(expect_counted=True)), "minimal.toml")
    assert scenario.expect == {"rejections": "== 0", "completed_ratio": ">= 0.95", "unexplained_rejections": "== 0",
                               "invariant_violations": "== 0"}


def _hunt(tmp_path):
    import io
    import tomllib

    from harness.hunt.search import Hunt
    from harness.hunt.trial import Base

    text = ORIGINAL.replace('[expect]\nrejections = "== 0"\ncompleted_ratio = ">= 0.95"\n', "")
    stream = io.StringIO()
    hunt = Hunt(Base(tomllib.loads(text), parse_scenario(text), "shop.toml", text), stream=stream)
    hunt.folder = tmp_path / "hunt"
    hunt.folder.mkdir()
    return hunt, stream


def test_hunt_json_of_a_hunt_that_found_nothing_states_how_to_draw_it_again_and_its_residual_risk(tmp_path):
    import json

    hunt, _ = _hunt(tmp_path)
    held = [Trial(index=n, seed=n, schedule=Schedule((STEP,) if n > 1 else (), 3.0),
                  purpose="search" if n > 1 else "control") for n in range(1, 22)]
    hunt.result.trials, hunt.result.stopped_by = held, "trials"
    hunt._hand_over()
    summary = json.loads((hunt.folder / "hunt.json").read_text())
    assert hunt.summary_file == hunt.folder / "hunt.json"
    assert summary["rerun"] == "mrtr-harness hunt shop.toml --seed 5 --strategy random"
    assert summary["stopped_by"] == "trials" and summary["found"] is None and summary["failure"] is None
    assert summary["trials"] == {"control": 1, "search": 20}
    assert summary["controls"] == {"trials": 1, "held": 1, "not_judged": 0, "failed": None}
    assert summary["judged"] == 20 and summary["residual_risk"] == 0.139108 and summary["confidence"] == 0.95
    assert summary["without_chaos"] is None and summary["from_triage"] is None and summary["minimal_file"] is None
    assert summary["page"] == "hunt.html" and summary["bounds"]["trials"] == 20


def test_a_link_planted_at_hunt_json_is_refused_as_the_harness_error_it_is(tmp_path):
    hunt, stream = _hunt(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("mine")
    (hunt.folder / "hunt.json").symlink_to(victim)
    hunt._hand_over()
    assert hunt.result.stopped_by == "harness error" and hunt.summary_file is None
    assert victim.read_text() == "mine" and "hunt.json" in stream.getvalue()
