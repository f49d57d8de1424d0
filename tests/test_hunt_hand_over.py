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
