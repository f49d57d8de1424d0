"""What a scenario field is, said once (`harness.config.fields`): the draw, the shrink, the schema and the reference
read the same answer, so a field none of them can read is caught here, not in a hunt."""

from __future__ import annotations

import json
import random

from harness.cli.reference import _type_of
from harness.config.chaos import CHAOS_ACTIONS, NetworkAction, SetTtl, TokenExpiry
from harness.config.compare import LatencyTolerance
from harness.config.fields import is_duration, is_percentage, model_facts
from harness.config.scenario_schema import DURATION_TEXT, json_schema
from harness.hunt.draw import Space, draw_step


def test_each_chaos_field_is_one_kind_the_hunt_can_read():
    kinds = {(model.__name__, name): facts.kind for model in set(CHAOS_ACTIONS.values())
             for name, facts in model_facts(model).items()}
    assert "other" not in {kind for (model, name), kind in kinds.items() if model != "CommandAction"}
    assert kinds["TokenExpiry", "duration"] == kinds["PauseAction", "duration"] == "duration"
    assert kinds["NetworkAction", "after"] == "duration-or-count"  # bytes for truncate, seconds for cut-slow
    assert kinds["NetworkAction", "toxicity"] == kinds["Revoke", "share"] == "share"
    assert kinds["RotateKeys", "order"] == "literal" and kinds["SetTtl", "replica"] == "replica"
    assert model_facts(NetworkAction)["duration"].window and not model_facts(NetworkAction)["delay"].window
    assert model_facts(SetTtl)["ttl"].harsher_when_shorter and model_facts(TokenExpiry)["lifetime"].harsher_when_shorter


def test_an_optional_duration_is_a_duration_to_the_draw_the_schema_and_the_reference():
    facts = model_facts(TokenExpiry)["duration"]
    assert facts.kind == "duration" and facts.optional and facts.lower_strict
    space = Space(actions=("token-expiry",), replicas=(1,), replica_count=1, duration=20.0, max_steps=1, ttl=600.0,
                  name="shop")
    drawn = [draw_step(space, random.Random(seed)).duration for seed in range(40)]  # type: ignore[attr-defined]
    assert any(isinstance(value, float) and 0 < value <= 20.0 for value in drawn) and None in drawn
    written = json.dumps(json_schema()["$defs"]["TokenExpiry"]["properties"]["duration"])
    assert json.dumps(DURATION_TEXT) in written  # "90s" is taken as a file writes it
    assert _type_of(TokenExpiry.model_fields["duration"], []) == "duration"


def test_a_percentage_is_not_a_share_and_a_share_is_not_a_percentage():
    tolerance = LatencyTolerance.model_fields["p95"]
    assert is_percentage(tolerance.metadata)
    assert not is_duration(tolerance.metadata)
    assert not is_percentage(NetworkAction.model_fields["toxicity"].metadata)


def test_the_hunt_s_coverage_says_whom_a_step_acts_on_as_the_journal_does():
    """One answer to "whom does this step act on" (`ChaosAction.whom`): the coverage cell of a drawn step and the
    journal's target label of the same step, validated, agree, and each is a cell of the space's coverage."""
    from harness.hunt.coverage import cells as coverage_cells
    from harness.hunt.coverage import step_cell
    from harness.hunt.draw import draw_schedule

    labels = ["r1", "r2", "r3"]
    actions = tuple(action for action in CHAOS_ACTIONS if action != "command")
    space = Space(actions=actions, replicas=(1, 2, 3), replica_count=3, duration=20.0, max_steps=4, ttl=600.0,
                  name="shop")
    cells = set(coverage_cells(space, labels))
    for index in range(60):
        schedule = draw_schedule(space, 7, index)
        for step in schedule.steps:
            name, whom, when = step_cell(step, labels, schedule.duration)
            assert (step.action, step.journal_target(labels)) == (name.split()[0], whom), step
            assert (name, whom, when) in cells
    # each replica, every one, the authorization server, and of three replicas each pair (a minority of two or more,
    # and all but one)
    assert {whom for _, whom, _ in cells} == {"r1", "r2", "r3", "all", "auth", "r1+r2", "r1+r3", "r2+r3"}
