"""`[[load.stages]]`: the load over time as k6's stages say it, checked where a user would look.

The open model's intended rate is checked statistically on the arrival clock itself (a fixed
seed, simulated time, no waiting); the closed model's agents and the whole path through a real
run on the embedded shop are checked on the journal.
"""

from __future__ import annotations

import math

import pytest

from harness.config.scenario import parse_scenario
from harness.config.strict import ScenarioError
from harness.load.plan import arrival_times
from harness.load.seeding import stream
from tests.harness_run import run_harness

SPIKE = """
name = "stages"
seed = {seed}
duration = "{duration}"

[load]
{level}
stages = [
  {{ duration = "20s", target = 10 }},                  # linear from the start level to 10/s
  {{ duration = "10s", shape = "hold" }},               # 10/s
  {{ duration = "10s", target = 40, shape = "step" }},  # a spike: 40/s at once
  {{ duration = "20s", target = 0 }},                   # back down to nothing
]

[[flows]]
kind = "refund"
"""


def spike(seed: int = 7, duration: str = "60s", level: str = "arrival_rate = 2"):
    return parse_scenario(SPIKE.format(seed=seed, duration=duration, level=level))


def intended(load, start: float, end: float, step: float = 0.01) -> float:
    """Flows the stages intend between two moments: the integral of the level (midpoint rule)."""
    steps = round((end - start) / step)
    return sum(load.level_at(start + (n + 0.5) * step) for n in range(steps)) * step


@pytest.mark.parametrize("seed", [1, 7, 42])
def test_arrivals_follow_the_stages_within_the_poisson_noise(seed):
    load = spike(seed).load
    times = list(arrival_times(load, stream(seed, "worker", 0, "arrivals"), 0.0))
    for start in range(0, 60, 5):  # every 5 s window: the count is Poisson with the integral as its mean
        mean = intended(load, start, start + 5)
        count = sum(1 for t in times if start <= t < start + 5)
        assert abs(count - mean) <= 4 * math.sqrt(mean) + 1, (start, count, mean)
    assert not [t for t in times if t >= 60], "the last stage ends at 0: nothing arrives after it"


def test_the_levels_move_as_k6_moves_them_between_stages():
    load = spike().load
    assert [load.level_at(t) for t in (0, 10, 20, 25, 30, 35, 40, 50, 60, 99)] == \
        [2, 6, 10, 10, 40, 40, 40, 20, 0, 0]
    assert load.stage_bounds() == [(0, 20, 10), (20, 30, 10), (30, 40, 40), (40, 60, 0)]


def test_a_spike_starting_inside_a_long_gap_is_not_skipped():
    """Drawn at the peak and thinned, the first arrival of a spike comes within the spike, not a gap later."""
    load = parse_scenario(SPIKE.replace('target = 10 }', 'target = 0.01 }').format(
        seed=3, duration="60s", level="arrival_rate = 0.01")).load
    times = list(arrival_times(load, stream(3, "worker", 0, "arrivals"), 0.0))
    assert sum(1 for t in times if 30 <= t < 40) > 300


@pytest.mark.parametrize(("change", "words"), [
    (('duration = "60s"', 'duration = "50s"'), "the stages last 60s, longer than the run's duration (50s)"),
    (('shape = "hold"', 'shape = "hold", target = 3'), "a hold stage keeps the previous level: leave out target"),
    (("target = 40, ", "target = -40, "), "load.stages[3].target: must be at least 0, not -40"),
    (('target = 40, shape = "step"', 'shape = "step"'), "a step stage needs target"),
    (("arrival_rate = 2", "arrival_rate = 2\nramp = \"5s\""), "ramp and stages do not go together"),
])
def test_stages_that_cannot_run_are_refused_naming_the_field(change, words):
    text = SPIKE.format(seed=1, duration="60s", level="arrival_rate = 2").replace(*change)
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(text)
    assert words in str(refused.value)
    assert "load.stages" in str(refused.value) or "load.ramp" in str(refused.value)


CLOSED = """
name = "closed-stages"
seed = 5
duration = "12s"
grace = "5s"

[load]
model = "closed"
stages = [
  {{ duration = "4s", target = 4, shape = "step" }},
  {{ duration = "4s", target = 1, shape = "step" }},
]

[[flows]]
kind = "refund"
amount = "above-limit"

[leads]
think = {{ dist = "constant", value = "0.5s" }}

[expect]
invariant_violations = "== 0"
"""


def test_the_closed_model_s_agents_follow_the_stages_through_locust_and_every_flow_has_one_end(tmp_path):
    scenario = tmp_path / "closed.toml"
    scenario.write_text(CLOSED.format())
    finished = run_harness(scenario, tmp_path / "results")
    assert finished.code == 0, finished.output
    journal = finished.journal()
    started = min(r["t"] for r in journal if r.get("event") == "load-started")
    starts = {r["flow_id"]: r["t"] - started for r in journal if r["type"] == "start"}
    ends = {r["flow_id"] for r in journal if r["type"] == "flow"}
    assert set(starts) == ends  # exactly one end each, also for the agents Locust stopped at the step down
    busy = [t for t in starts.values() if 1 <= t < 4]
    quiet = [t for t in starts.values() if 6 <= t < 8]
    # four agents, then one: at least twice the starts per second in the first stage (each flow takes ~1 s)
    assert len(busy) >= 2 * len(quiet) > 0, (len(busy), len(quiet))
    page = (finished.folder / "report.html").read_text()
    assert "The stages&#x27; intended load against the flows started" in page or \
        "The stages' intended load against the flows started" in page
    assert "intended (agents)" in page and "flows started per second" in page
