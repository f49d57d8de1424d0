"""`[[flows]]`: what each flow does (the shop's presets, any tool's `call`, the fuzzer), by weight."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator

from harness.config.mutations import DEFAULT_MUTATIONS, Mutation, skipped_mutations
from harness.config.strict import Strict


class _Flow(Strict):
    weight: float = Field(default=1.0, gt=0, allow_inf_nan=False,
                          description="its share of the flows started, relative to the other flows' weights")


class RefundFlow(_Flow):
    """quote_refund then issue_refund: one round at or under the limit, two above it."""

    kind: Literal["refund"]
    amount: Literal["any", "above-limit", "below-limit"] = Field(
        default="any", description="which orders: above the policy limit (held, a lead must confirm), below it "
                                   "(released at once), or any")


class ReturnFlow(_Flow):
    """record_return through its resolver form."""

    kind: Literal["return"]


class PayoutFlow(_Flow):
    """A refund under the limit, then pay_refund in URL mode with the lead finishing on the page."""

    kind: Literal["payout"]


class AdversarialFlow(_Flow):
    """A refund whose retry is sent wrong on purpose, for the on-call catalogue."""

    kind: Literal["replay", "tamper", "change-args"]


def _no_arguments() -> list[dict[str, Any]]:
    """One call with no arguments: a tool that takes none."""
    return [{}]


def one_or_many(value: Any) -> Any:
    """One table of arguments is a list of one."""
    return [value] if isinstance(value, dict) else value


Arguments = Annotated[list[dict[str, Any]], BeforeValidator(one_or_many)]
"""A tool's arguments: one table, or a list of them to pick from."""


class CallFlow(_Flow):
    """Any tool of any MRTR server: the leads answer whatever it asks, from its schema."""

    kind: Literal["call"]
    tool: str = Field(min_length=1, description="the tool to call")
    arguments: Arguments = Field(default_factory=_no_arguments,
                                            description="its arguments: one table, or a list to pick from at random")
    name: str | None = Field(default=None, description="label for metrics (default: the tool name)")
    answers: dict[str, Any] = Field(
        default_factory=dict,
        description="what the lead answers for a requested-schema property, in any question that has it: a value, "
                    "or a list of values the lead picks one from (seeded); a multi-select answer is a list inside "
                    "the list. Properties not named are answered from the schema")

    @field_validator("answers")
    @classmethod
    def _choices_not_empty(cls, answers: dict[str, Any]) -> dict[str, Any]:
        for name, value in answers.items():
            if isinstance(value, list) and not value:
                raise ValueError(f"answers.{name} is an empty list: give at least one value to pick from")
        return answers


class FuzzFlow(_Flow):
    """A real first round, then a retry with a mutated requestState: every mutant must get -32602.

    Against the shop (no `tool`): a held refund's `issue_refund`. Against any other server:
    `tool` and `arguments`, as a `call` flow takes them.
    """

    kind: Literal["fuzz"]
    tool: str | None = Field(default=None, min_length=1,
                             description="the tool whose state is mutated (default: the shop's issue_refund on a "
                                         "held refund)")
    arguments: Arguments = Field(default_factory=_no_arguments,
                                            description="its arguments (with `tool`): one table, or a list to pick "
                                                        "from; swap-flow and swap-arguments need two or more")
    name: str = Field(default="fuzz", min_length=1, description="label for metrics")
    mutations: list[Mutation] = Field(default_factory=lambda: list(DEFAULT_MUTATIONS), min_length=1,
                                      description="the mutation classes to send, one per flow, picked at random "
                                                  "(seeded); default: all but expired")
    swap_tool: str | None = Field(default=None, min_length=1,
                                  description="with `tool`: another tool whose first-round state swap-tool sends "
                                              "(the shop: record_return)")
    swap_tool_arguments: dict[str, Any] = Field(default_factory=dict, description="swap_tool's arguments")
    answers: dict[str, Any] = Field(default_factory=dict,
                                    description="what the lead answers on the retry, as a `call` flow's `answers` "
                                                "(the lead always answers: it never declines, cancels or abandons)")

    @field_validator("mutations")
    @classmethod
    def _each_once(cls, mutations: list[Mutation]) -> list[Mutation]:
        if len(set(mutations)) != len(mutations):
            raise ValueError("mutations names a class twice")
        return mutations

    def skipped(self, principal: bool) -> dict[Mutation, str]:
        """The chosen classes this flow cannot send, with why: the shop's flow has other quotes and tools to hand.

        `principal`: whether the target names a `principal_header` (cross-principal needs one).
        """
        shop = self.tool is None
        return skipped_mutations(self.mutations, several_arguments=shop or len(self.arguments) > 1,
                                 other_tool=shop or self.swap_tool is not None, principal=principal)

    def runnable(self, principal: bool) -> list[Mutation]:
        """The classes the flow picks from: its `mutations` less those it cannot send, in their given order."""
        skipped = self.skipped(principal)
        return [mutation for mutation in self.mutations if mutation not in skipped]


FlowSpec = Annotated[RefundFlow | ReturnFlow | PayoutFlow | AdversarialFlow | CallFlow | FuzzFlow,
                     Field(discriminator="kind")]


def flow_label(flow: FlowSpec) -> str:
    """The flow's bounded metric label."""
    if isinstance(flow, CallFlow):
        return flow.name or flow.tool
    if isinstance(flow, FuzzFlow):
        return flow.name
    return flow.kind


