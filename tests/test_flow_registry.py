"""The registry of flow kinds: each kind is one model (config) and its steps (load), never one alone.

The model's declaration gives the scenario's union, the rounds the disk estimate counts, whether the
load loads the shop's orders, its leads' profile, its label and its rules across the scenario;
docs/architecture.md's worked example of adding a kind is run here as written.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest
from pydantic import TypeAdapter, ValidationError

from harness.config import flows
from harness.config.flows import FLOW_KINDS, FlowKind, FlowSpec, Rounds
from harness.config.scenario import Scenario, parse_scenario
from harness.config.strict import ScenarioError
from harness.config.target import TargetConfig
from harness.load import shop_flows
from harness.load.client_stack import _shop_orders
from harness.load.flow import FLOW_STEPS, steps_of
from harness.load.kinds import unmatched

ROOT = Path(__file__).resolve().parent.parent

REQUIRED = {"call": {"tool": "echo"}}
"""The keys a kind needs besides `kind`."""


def entry(name: str) -> FlowKind:
    return TypeAdapter(FlowSpec).validate_python({"kind": name, **REQUIRED.get(name, {})})


@pytest.fixture
def restored() -> Iterator[None]:
    """The registries as they were, whatever kinds a test declared."""
    kinds, steps = dict(FLOW_KINDS), dict(FLOW_STEPS)
    yield
    FLOW_KINDS.clear()
    FLOW_KINDS.update(kinds)
    FLOW_STEPS.clear()
    FLOW_STEPS.update(steps)


def test_every_kind_has_one_set_of_steps():
    assert unmatched() == []
    assert set(FLOW_STEPS) == set(FLOW_KINDS.values())
    assert list(FLOW_KINDS) == ["refund", "return", "payout", "replay", "tamper", "change-args", "call", "fuzz",
                               "race"]


def test_a_kind_declared_without_steps_is_named(restored):
    class Quote(FlowKind):
        kind: Literal["quote"]

        def rounds(self, target: TargetConfig) -> Rounds:
            return Rounds((1,))

        def needs_shop_orders(self) -> bool:
            return True

    assert FLOW_KINDS["quote"] is Quote
    assert unmatched() == ["quote"]


def test_steps_of_a_model_that_is_no_kind_are_named(restored):
    class Unregistered(FlowKind):
        """No literal `kind`: a base, not a kind."""

    steps_of(Unregistered)(lambda flow, spec, at: iter(()))
    assert unmatched() == ["Unregistered (steps of no kind)"]


@pytest.mark.parametrize("left_out", ["rounds", "needs_shop_orders"])
def test_a_kind_that_leaves_out_a_declaration_is_refused_when_defined(restored, left_out):
    body = {"rounds": lambda self, target: Rounds((1,)), "needs_shop_orders": lambda self: True}
    del body[left_out]
    with pytest.raises(TypeError, match=f"flow kind Quote does not declare {left_out}"):
        type("Quote", (FlowKind,), {"__annotations__": {"kind": Literal["quote"]}, **body})
    assert "quote" not in FLOW_KINDS


def test_a_second_set_of_steps_for_one_kind_is_refused():
    model = next(iter(FLOW_STEPS))
    with pytest.raises(TypeError, match="two sets of steps"):
        steps_of(model)(lambda flow, spec, at: iter(()))


def test_the_union_is_the_registrys():
    union = typing.get_args(typing.get_args(FlowSpec)[0])
    assert list(union) == list(dict.fromkeys(FLOW_KINDS.values()))
    for name, model in FLOW_KINDS.items():
        flow = entry(name)
        assert type(flow) is model and flow.kind == name
    with pytest.raises(ValidationError):
        TypeAdapter(FlowSpec).validate_python({"kind": "quote"})


def test_each_kind_says_what_the_rest_reads_of_it():
    shop, elsewhere = TargetConfig(), TargetConfig(kind="external", urls=["http://127.0.0.1:1/mcp"])
    for name in FLOW_KINDS:
        flow = entry(name)
        for target in (shop, elsewhere):
            rounds = flow.rounds(target)
            assert rounds.calls or rounds.sent, name
            assert all(each >= 1 for each in rounds.calls) and rounds.sent >= 0, name
        assert isinstance(flow.needs_shop_orders(), bool) and flow.label(), name
    on_the_shop = {name for name in FLOW_KINDS if entry(name).needs_shop_orders()}
    assert on_the_shop == {"refund", "return", "payout", "replay", "tamper", "change-args", "fuzz", "race"}
    assert not TypeAdapter(FlowSpec).validate_python({"kind": "fuzz", "tool": "echo"}).needs_shop_orders()
    assert {name for name in FLOW_KINDS if entry(name).breaks_target} == {"fuzz"}
    assert {name for name in FLOW_KINDS if entry(name).settles_refunds} == {"refund", "replay", "tamper", "change-args",
                                                                             "race"}


def test_a_kinds_rule_across_the_scenario_is_kept_at_validate():
    text = """name = "x"
duration = "10s"
[target]
kind = "external"
urls = ["http://127.0.0.1:1/mcp"]
[load]
arrival_rate = 4
[[flows]]
kind = "fuzz"
tool = "echo"
mutations = ["cross-principal"]
"""
    with pytest.raises(ScenarioError, match="none of these mutations can be sent: cross-principal") as raised:
        parse_scenario(text)
    assert "flows" in str(raised.value) and "mutations" in str(raised.value)


def test_the_load_loads_the_shops_orders_only_for_kinds_that_need_them():
    def scenario(flows: str) -> Scenario:
        return parse_scenario(f"""name = "x"
duration = "10s"
[target]
kind = "external"
urls = ["http://127.0.0.1:1/mcp"]
[load]
arrival_rate = 4
{flows}""")

    elsewhere = scenario('[[flows]]\nkind = "call"\ntool = "echo"\n[[flows]]\nkind = "fuzz"\ntool = "echo"\n')
    assert _shop_orders(elsewhere) is None
    orders = _shop_orders(scenario('[[flows]]\nkind = "call"\ntool = "echo"\n[[flows]]\nkind = "return"\n'))
    assert orders is not None and orders.all


def test_the_scenario_reference_has_a_section_for_every_kind():
    text = (ROOT / "docs" / "scenario.md").read_text()
    headings = re.findall(r"^### kind = (.+)$", text[text.index("## [[flows]] by kind"):].split("\n## ")[0], re.M)
    named = [name.strip('"') for heading in headings for name in heading.split(" | ")]
    assert named == list(FLOW_KINDS)


def example(label: str) -> str:
    """A Python block of docs/architecture.md's "Adding a flow kind", by its marker."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    found = re.search(rf"<!-- example: {label} -->\n```python\n(.*?)```", text, re.S)
    assert found is not None, label
    return found.group(1)


def test_the_worked_example_of_adding_a_kind_is_two_files_that_suffice(restored):
    """The example's two blocks, run as written (the repository's own text, not input) in the namespaces of the
    two files it names: the model registers, its steps register, and nothing else is needed."""
    model_file = {**vars(flows), "TargetConfig": TargetConfig}
    exec(compile(example("model"), "config/flows.py (example)", "exec"), model_file)
    quote = model_file["QuoteFlow"]
    assert FLOW_KINDS["quote"] is quote and unmatched() == ["quote"]
    exec(compile(example("steps"), "load/shop_flows.py (example)", "exec"),
         {**vars(shop_flows), "QuoteFlow": quote})
    assert unmatched() == [] and FLOW_STEPS[quote].__name__ == "quote"
    flow = quote(kind="quote")
    assert flow.label() == "quote" and flow.needs_shop_orders() and flow.rounds(TargetConfig()) == Rounds((1,))
