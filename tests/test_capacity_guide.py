"""docs/capacity-planning.md says what the shipped `scenarios/capacity.toml` holds, and what a sweep of it prints.

The guide quotes the scenario's blocks and its TTL advice: a change to the file (a TTL, a
think time, an SLO) that the guide does not follow fails here instead of misleading the
user who sizes a deployment from it.
"""

from __future__ import annotations

import re
from pathlib import Path

from harness.capacity.expiry import predicted_share, recommend_ttl
from harness.capacity.report import slo_text
from harness.config.durations import format_duration
from harness.config.scenario import load_scenario
from tests.harness_run import ROOT

GUIDE = ROOT / "docs" / "capacity-planning.md"
SCENARIO = ROOT / "scenarios" / "capacity.toml"
DEFAULT_EXPIRY_TARGET = 0.01  # `capacity --expiry-target`'s default, which the sample ran with


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)


def test_every_toml_block_in_the_guide_is_quoted_verbatim_from_the_shipped_scenario():
    shipped = SCENARIO.read_text(encoding="utf-8")
    blocks = _blocks("toml")
    assert blocks, "the guide quotes no part of scenarios/capacity.toml"
    for block in blocks:
        assert block in shipped, f"not in scenarios/capacity.toml as written:\n{block}"
    quoted = "".join(blocks)
    for key in ("ttl =", "think =", "completed_ratio =", '"round_duration" ='):
        assert key in quoted, f"the guide does not quote the scenario's {key}"


def test_the_guides_prose_states_the_shipped_ttl():
    scenario = load_scenario(Path(SCENARIO))
    minutes = scenario.target.ttl / 60
    assert f"a {minutes:g}-minute TTL" in GUIDE.read_text(encoding="utf-8")


def test_the_sample_output_and_the_ttl_warning_match_what_the_shipped_scenario_gives_now():
    """The sample's SLO line and its TTL statement are recomputed from the file: a new SLO, TTL or think
    time makes the pasted output stale, and this fails until a new sweep's output replaces it."""
    scenario = load_scenario(Path(SCENARIO))
    think, ttl = scenario.leads.think, scenario.target.ttl
    [sample] = [block for block in _blocks("text") if block.startswith("capacity sweep of ")]
    assert f"capacity of {scenario.name} (completed); SLO: {slo_text(scenario.expect)}\n" in sample
    predicted = f"{predicted_share(think, ttl):.1%}"
    # the recommendation adds the held steps' p95 round latency (milliseconds) to the think quantile
    recommended = format_duration(recommend_ttl(think, DEFAULT_EXPIRY_TARGET, overhead=0.05))
    statement = (f"The TTL of {format_duration(ttl)} does not fit the leads ({think}): {predicted} of states are "
                 f"predicted to expire per retry")
    assert statement in sample
    assert f"A TTL of {recommended} would keep expiries under 1.0%." in sample
    warning = " ".join(GUIDE.read_text(encoding="utf-8").split("## The shipped sweep's TTL advice is expected")[1]
                       .split("\n## ")[0].split())
    assert statement.removesuffix(" per retry") in warning and f"{recommended} would keep" in warning, warning
    assert f"P(think > {format_duration(ttl)}) = {predicted}" in warning


def test_the_sample_shows_the_command_that_produced_it():
    [command] = [block.strip() for block in _blocks("sh") if "--step 10s" in block]
    assert command.startswith("mrtr-harness capacity scenarios/capacity.toml ")
    [sample] = [block for block in _blocks("text") if block.startswith("capacity sweep of ")]
    assert sample.splitlines()[1].startswith("estimated duration: "), sample  # before the first step's line
    steps = re.findall(r"^\[(\d+)/≤?(\d+)\] 1 replica at (\S+) flows/s", sample, re.M)
    assert [rate for *_, rate in steps] == command.split("--rates ")[1].split()[0].split(",")
