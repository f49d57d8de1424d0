"""The replica knobs chaos turns are one table: every place that spells a knob reads it, and misses none.

A knob (TTL, server name, clock offset, store) is a field of `ReplicaChange` (what chaos asks a
target for), `ReplicaOptions` (what the embedded and docker targets start a replica with) and the
replica's `ReplicaSettings`, an option of `shop replica`, a flag the docker target rewrites, and,
for the command target (a Kubernetes deployment), the `[target.commands]` entry of the action
that turns it. These tests fail when one of them misses a knob or spells it otherwise.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

import pytest

from harness.config.chaos import CHAOS_ACTIONS, COMMAND_NAMES, ChaosAction, knob_commands
from harness.config.durations import parse_duration
from harness.config.replica_knobs import KNOBS, REPLICA_KNOBS
from harness.shop.replica import ReplicaSettings, parse_args
from harness.targets.interface import ReplicaChange
from harness.targets.local_deployment import ReplicaOptions, replica_args


def test_every_knob_is_a_field_of_the_change_the_options_and_the_replica_s_settings():
    assert {field.name for field in dataclasses.fields(ReplicaChange)} == set(KNOBS)
    options = {field.name for field in dataclasses.fields(ReplicaOptions)}
    assert set(KNOBS) <= options
    assert set(KNOBS) <= set(ReplicaSettings.model_fields)


def test_every_knob_is_turned_by_one_chaos_action_and_its_command_takes_the_new_value():
    turned = [model.turns for model in set(CHAOS_ACTIONS.values()) if model.turns is not None]
    assert sorted(turned) == sorted(knob.name for knob in REPLICA_KNOBS if knob.chaos)
    commands = knob_commands()
    assert commands == {"ttl": ("set-ttl", "ttl"), "name": ("rename", "name"), "clock_offset": ("clock-skew", "offset")}
    for knob, (command, placeholder) in commands.items():
        assert CHAOS_ACTIONS[command].turns == knob
        assert COMMAND_NAMES[command] == frozenset({placeholder})


def test_shop_replica_takes_each_knob_by_its_option_with_its_default():
    settings = parse_args(["--port", "8000", "--api", "http://127.0.0.1:8100"])
    assert settings.store == KNOBS["store"].default and settings.name == KNOBS["name"].default
    assert settings.ttl == parse_duration(KNOBS["ttl"].default) and settings.clock_offset == 0.0
    defaults = ReplicaSettings(port=8000, api="http://127.0.0.1:8100")
    assert (defaults.store, defaults.ttl, defaults.name) == (settings.store, settings.ttl, settings.name)
    given = parse_args(["--port", "8000", "--api", "http://127.0.0.1:8100",
                        *KNOBS["store"].argument("memory"), *KNOBS["ttl"].argument("90s"),
                        *KNOBS["name"].argument("shop-eu"), *KNOBS["clock_offset"].argument(-30.0)])
    assert (given.store, given.ttl, given.name, given.clock_offset) == ("memory", 90.0, "shop-eu", -30.0)


def test_every_backend_s_replica_command_sets_each_knob_from_the_options_else_the_deployment_s_own():
    def flags(options: ReplicaOptions) -> dict[str, str]:
        args = replica_args("r1", 8000, "http://127.0.0.1:8100", options, store="sqlite:x.db", keyring="ephemeral",
                            ttl="10m", name="shop")
        return {knob.name: args[args.index(knob.option) + 1] for knob in REPLICA_KNOBS}

    assert flags(ReplicaOptions()) == {"store": "sqlite:x.db", "ttl": "10m", "name": "shop", "clock_offset": "0.0",
                                       "leak": "0.0"}
    changed = ReplicaChange(ttl=2.5, name="shop-eu", clock_offset=120.0, store="memory", leak=50.0).changed()
    assert flags(dataclasses.replace(ReplicaOptions(), **changed)) == {
        "store": "memory", "ttl": "2.5", "name": "shop-eu", "clock_offset": "120.0", "leak": "50.0"}
    for knob in REPLICA_KNOBS:  # what the command line says, the replica reads back
        value = flags(dataclasses.replace(ReplicaOptions(), **{knob.name: changed[knob.name]}))[knob.name]
        settings = parse_args(["--port", "8000", "--api", "http://127.0.0.1:8100", knob.option, value])
        assert getattr(settings, knob.name) == changed[knob.name]


def test_an_action_that_turns_a_knob_the_table_lacks_is_refused_where_it_is_declared():
    with pytest.raises(TypeError, match="'colour' is no replica knob"):
        class Paint(ChaosAction):
            action: Literal["paint"]
            turns: ClassVar[str | None] = "colour"
    with pytest.raises(TypeError, match="one placeholder"):
        class Retime(ChaosAction):
            action: Literal["retime"]
            turns: ClassVar[str | None] = "ttl"
            commands: ClassVar[dict[str, frozenset[str]]] = {"retime": frozenset({"ttl", "replica_count"})}
    assert "paint" not in CHAOS_ACTIONS and "retime" not in CHAOS_ACTIONS
    assert knob_commands()["ttl"] == ("set-ttl", "ttl")


def test_the_kubernetes_replicas_take_each_knob_a_command_turns_from_the_variable_that_command_sets():
    """deploy/kubernetes passes each knob to `shop replica` by its option from a variable; scenarios/kubernetes.toml's
    command for the action that turns the knob sets that variable to its placeholder's value."""
    import tomllib

    import yaml

    from tests.harness_run import ROOT

    [deployment] = [doc for doc in yaml.safe_load_all((ROOT / "deploy" / "kubernetes" / "mcp.yaml").read_text())
                    if doc and doc["kind"] == "Deployment"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    commands = tomllib.loads((ROOT / "scenarios" / "kubernetes.toml").read_text())["target"]["commands"]
    for knob, (command, placeholder) in knob_commands().items():
        value = args[args.index(KNOBS[knob].option) + 1]
        assert value.startswith("$(") and value.endswith(")"), (knob, value)
        script = " ".join(commands[command])
        assert f"{value[2:-1]}=" in script and f"{{{placeholder}}}" in commands[command], (knob, script)


def test_a_replica_restarted_with_every_knob_changed_serves_with_each_new_value(deploy):
    """What the embedded target does on `reconfigure`: the change's knobs into the replica's options, a restart; the
    replica's own /healthz says what it runs with."""
    import json
    import urllib.request

    shop = deploy([ReplicaOptions()], replicas=1)
    change = ReplicaChange(ttl=2.5, name="shop-eu", clock_offset=-30.0, store="memory")
    shop.restart_replica(0, options=dataclasses.replace(shop.options[0], **change.changed()))
    with urllib.request.urlopen(f"{shop.replicas[0].base_url}/healthz", timeout=10) as answer:
        health = json.load(answer)
    assert (health["ttl"], health["name"], health["clock_offset"], health["store"]) == (2.5, "shop-eu", -30.0,
                                                                                         "memory")
