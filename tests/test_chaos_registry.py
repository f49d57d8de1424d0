"""The registry of chaos actions: each action is one model (config) and one handler (chaos), never one alone.

The model's declaration gives the scenario's union, the actions on the authorization server and
the `[target.commands]` table; the handler names the `Target` methods it calls; docs/scenario.md's
table of actions is generated from both.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Literal

import pytest
from pydantic import TypeAdapter, ValidationError

from harness.chaos.schedule import HANDLERS, ChaosRunner, _unhandled, handles
from harness.config.chaos import AUTH_ACTIONS, CHAOS_ACTIONS, COMMAND_NAMES, DEPLOYMENT_COMMANDS, ChaosAction, ChaosStep
from harness.targets.interface import AuthChange, Target

ROOT = Path(__file__).resolve().parent.parent


def test_every_action_has_one_handler_calling_real_target_methods():
    assert _unhandled() == []
    assert set(HANDLERS) == set(CHAOS_ACTIONS.values())
    for model, handler in HANDLERS.items():
        assert handler.run.__name__ in vars(ChaosRunner), model
        for method in handler.uses:
            assert callable(getattr(Target, method, None)), (model.__name__, method)


def test_an_action_declared_without_a_handler_is_named():
    class Flood(ChaosAction):
        action: Literal["flood"]

    try:
        assert CHAOS_ACTIONS["flood"] is Flood
        assert _unhandled() == ["flood"]
    finally:
        del CHAOS_ACTIONS["flood"]
    assert _unhandled() == []


def test_a_second_handler_for_one_action_is_refused():
    model = next(iter(HANDLERS))
    with pytest.raises(TypeError, match="two handlers"):
        handles(model)(lambda runner, step, index: {})


def test_the_union_and_the_vocabulary_are_the_registrys():
    union = typing.get_args(typing.get_args(ChaosStep)[0])
    assert set(union) == set(CHAOS_ACTIONS.values())
    for name in CHAOS_ACTIONS:
        required = {"set-ttl": {"ttl": 1}, "rename": {"name": "x"}, "command": {"command": ["true"]},
                    "network": {"duration": 1, "fault": "down"}}.get(name, {})
        step = TypeAdapter(ChaosStep).validate_python({"at": 0, "action": name, **required})
        assert step.action == name
        assert (step.journal_target(["r1", "r2"]) == "auth") == (name in AUTH_ACTIONS)
    assert {"token-expiry", "revoke", "scope-loss", "auth-down", "subject-drift"} == AUTH_ACTIONS
    for model in CHAOS_ACTIONS.values():
        assert set(model.commands) <= set(COMMAND_NAMES)
        if model.acts_on == "auth":
            assert set(model.commands) <= DEPLOYMENT_COMMANDS
    with pytest.raises(ValidationError):
        TypeAdapter(ChaosStep).validate_python({"at": 0, "action": "flood"})


def test_an_auth_change_names_an_action_on_the_authorization_server():
    assert AuthChange("revoke", share=0.5).action == "revoke"
    with pytest.raises(ValueError, match="restart"):
        AuthChange("restart")


def test_the_scenario_reference_has_a_row_for_every_action():
    text = (ROOT / "docs" / "scenario.md").read_text()
    table = text[text.index("| action | acts on"):].split("\n\n")[0].splitlines()[2:]
    assert [row.split("|")[1].strip().strip("`") for row in table] == list(CHAOS_ACTIONS)
