"""`[[flows]]`: what each flow does (shop presets, races, any tool's `call`, the fuzzer), and the registry of kinds.

A flow kind is declared once, in two halves that share its model:

- here, its config half: the model (its `kind` name(s) and keys), and beside the keys what the
  rest of the harness needs to know of it: the most rounds a flow may send (`rounds`, which the
  disk estimate adds up), whether it acts on the shop's orders (`needs_shop_orders`: the load
  loads the shop's orders only then), and where the defaults do not fit, its metric label
  (`label`), how its leads answer (`lead_profile`), a rule across the scenario's other tables
  (`problem`), what it does to a target beyond load (`breaks_target`, which a remote host must
  allow) and whether the ledger invariants judge the refunds it holds (`settles_refunds`).
  Defining a `FlowKind` subclass with a literal `kind` registers it in `FLOW_KINDS`; one that
  leaves out `rounds` or `needs_shop_orders` is refused then and there. The scenario's union
  (`FlowSpec`) is read off that registry.
- in `harness.load`, its steps half: a generator over the running `Flow`, registered with
  `@steps_of(Model)` (`harness.load.flow`). A kind without steps is refused when
  `harness.load.kinds` is imported.

The configuration stays a leaf (it imports no runtime), so the steps cannot live here; adding a kind
is one model here and its steps there. docs/architecture.md walks through an example.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union

from pydantic import BeforeValidator, Field, field_validator, model_validator

from harness.config.durations import Duration, PositiveDuration
from harness.config.leads import LeadProfile
from harness.config.mutations import (
    DEFAULT_MUTATIONS,
    ENVELOPE_BODY_LIMIT,
    EnvelopeMutation,
    Mutation,
    skipped_mutations,
)
from harness.config.strict import FieldProblem, Strict
from harness.vocabulary import PAYMENT_ROUNDS

if TYPE_CHECKING:
    from harness.config.target import TargetConfig

CALL_ROUNDS = 11
"""The most rounds one call sends: the client's cap of 10 retries, plus the first round
(`harness.mrtr.client.DEFAULT_INPUT_REQUIRED_MAX_ROUNDS`, pinned by tests/test_disk.py)."""


@dataclass(frozen=True)
class Rounds:
    """The most rounds a flow sends when its lead accepts: each call's (the client's round loop, which may resend
    a lost answer), and the rounds it builds by hand (an adversarial or fuzz retry, sent once)."""

    calls: tuple[int, ...]
    sent: int = 0


FLOW_KINDS: dict[str, type[FlowKind]] = {}
"""Every flow kind by its `kind` name, in declaration order: filled as each model is defined."""

DECLARED = ("rounds", "needs_shop_orders")
"""What every kind must say of itself (a method of its own): no default fits them all."""


class FlowKind(Strict):
    """A flow kind's model, with its declaration (the methods and class variables) beside its keys."""

    breaks_target: ClassVar[str] = ""
    """what its flows do to a target beyond load, by name ("fuzzing"), which a remote host must allow; "": nothing."""
    settles_refunds: ClassVar[bool] = False
    """whether a refund it holds is settled by its lead's answer alone, as the ledger invariants check
    (`harness.folding.invariants`): released only on a yes."""

    weight: float = Field(default=1.0, gt=0, allow_inf_nan=False,
                          description="its share of the flows started, relative to the other flows' weights")

    if TYPE_CHECKING:
        kind: str

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        kind = cls.model_fields.get("kind")
        if kind is None or typing.get_origin(kind.annotation) is not Literal:
            return
        missing = [name for name in DECLARED if getattr(cls, name) is getattr(FlowKind, name)]
        if missing:
            raise TypeError(f"flow kind {cls.__name__} does not declare {', '.join(missing)}")
        for name in typing.get_args(kind.annotation):
            FLOW_KINDS[name] = cls

    def rounds(self, target: TargetConfig) -> Rounds:
        """The most rounds a flow of this kind sends against `target` when its lead accepts (declared by each)."""
        raise NotImplementedError

    def needs_shop_orders(self) -> bool:
        """Whether the flow picks orders from the shop's orders table (declared by each kind)."""
        raise NotImplementedError

    def label(self) -> str:
        """The flow's bounded metric label: its kind."""
        return self.kind

    def lead_profile(self, profile: LeadProfile) -> LeadProfile:
        """How the flow's leads answer: the `[leads]` table's profile, as it is."""
        return profile

    def problem(self, target: TargetConfig) -> tuple[str, str] | None:
        """What makes this flow impossible against `target`, and its key at fault; None: nothing."""
        return None


def _releases(profile: LeadProfile) -> LeadProfile:
    """Refund leads who accept mean "release": the form's one field is answered yes (unless `[leads]` says)."""
    if "release" in profile.overrides:
        return profile
    return profile.model_copy(update={"overrides": {**profile.overrides, "release": True}})


class RefundFlow(FlowKind):
    """quote_refund then issue_refund: one round at or under the limit, two above it."""

    kind: Literal["refund"]
    settles_refunds: ClassVar[bool] = True
    amount: Literal["any", "above-limit", "below-limit"] = Field(
        default="any", description="which orders: above the policy limit (held, a lead must confirm), below it "
                                   "(released at once), or any")

    def rounds(self, target: TargetConfig) -> Rounds:
        """quote_refund (1), then issue_refund (1 at or below the limit, 2 above)."""
        return Rounds((1, 1 if self.amount == "below-limit" else 2))

    def needs_shop_orders(self) -> bool:
        """It refunds the shop's orders."""
        return True

    def lead_profile(self, profile: LeadProfile) -> LeadProfile:
        """Its leads release the refund when they accept."""
        return _releases(profile)


class ReturnFlow(FlowKind):
    """record_return through its resolver form."""

    kind: Literal["return"]

    def rounds(self, target: TargetConfig) -> Rounds:
        """record_return's form: 2."""
        return Rounds((2,))

    def needs_shop_orders(self) -> bool:
        """It returns a line of the shop's orders."""
        return True


class PayoutFlow(FlowKind):
    """A refund under the limit, then pay_refund in URL mode with the lead finishing on the page."""

    kind: Literal["payout"]

    def rounds(self, target: TargetConfig) -> Rounds:
        """quote, issue, then pay_refund's URL-mode rounds (`payment_rounds` + 1, or the client's cap with 0)."""
        payment = PAYMENT_ROUNDS if target.payment_rounds is None else target.payment_rounds
        return Rounds((1, 1, payment + 1 if payment else CALL_ROUNDS))

    def needs_shop_orders(self) -> bool:
        """It refunds and pays the shop's orders."""
        return True


class AdversarialFlow(FlowKind):
    """A refund whose retry is sent wrong on purpose, for the on-call catalogue."""

    kind: Literal["replay", "tamper", "change-args"]
    settles_refunds: ClassVar[bool] = True

    def rounds(self, target: TargetConfig) -> Rounds:
        """A quote call, then issue_refund's rounds sent by hand: tamper 2, replay 3, change-args 2 after a second
        quote call."""
        return {"tamper": Rounds((1,), 2), "replay": Rounds((1,), 3)}.get(self.kind, Rounds((1, 1), 2))

    def needs_shop_orders(self) -> bool:
        """It refunds the shop's held orders."""
        return True

    def lead_profile(self, profile: LeadProfile) -> LeadProfile:
        """Its leads release the refund when they accept."""
        return _releases(profile)


def _no_arguments() -> list[dict[str, Any]]:
    """One call with no arguments: a tool that takes none."""
    return [{}]


def one_or_many(value: Any) -> Any:
    """One table of arguments is a list of one."""
    return [value] if isinstance(value, dict) else value


Arguments = Annotated[list[dict[str, Any]], BeforeValidator(one_or_many)]
"""A tool's arguments: one table, or a list of them to pick from."""


class CallFlow(FlowKind):
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

    def rounds(self, target: TargetConfig) -> Rounds:
        """One call, whose server is not known before the run: the client's cap."""
        return Rounds((CALL_ROUNDS,))

    def needs_shop_orders(self) -> bool:
        """It calls any server's tool with its own arguments."""
        return False

    def label(self) -> str:
        """Its `name`, or its tool's."""
        return self.name or self.tool

    def lead_profile(self, profile: LeadProfile) -> LeadProfile:
        """Its `answers` pin what its leads type, over the `[leads]` table's own."""
        if not self.answers:
            return profile
        return profile.model_copy(update={"overrides": {**profile.overrides, **self.answers}})


class FuzzFlow(FlowKind):
    """A real first round, then a retry with a mutated requestState: every mutant must get -32602.

    Against the shop (no `tool`): a held refund's `issue_refund`. Against any other server:
    `tool` and `arguments`, as a `call` flow takes them.
    """

    kind: Literal["fuzz"]
    breaks_target: ClassVar[str] = "fuzzing"
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
    envelope: list[EnvelopeMutation] = Field(
        default_factory=list, description="JSON-RPC envelope mutants to send too, drawn with `mutations` (one per "
                                          "flow): each must get the answer JSON-RPC 2.0 and MCP's streamable HTTP "
                                          "require (docs/fuzz.md); default: none")
    envelope_body_limit: int = Field(default=ENVELOPE_BODY_LIMIT, gt=0, le=64 * 1024 * 1024,
                                     description="bytes the server takes in one body: oversize-body sends one more, "
                                                 "which must get HTTP 413 (default: the SDK's 4 MiB)")
    swap_tool: str | None = Field(default=None, min_length=1,
                                  description="with `tool`: another tool whose first-round state swap-tool sends "
                                              "(the shop: record_return)")
    swap_tool_arguments: dict[str, Any] = Field(default_factory=dict, description="swap_tool's arguments")
    answers: dict[str, Any] = Field(default_factory=dict,
                                    description="what the lead answers on the retry, as a `call` flow's `answers` "
                                                "(the lead always answers: it never declines, cancels or abandons)")

    @field_validator("mutations", "envelope")
    @classmethod
    def _each_once(cls, mutations: list[Any]) -> list[Any]:
        if len(set(mutations)) != len(mutations):
            raise ValueError("names a class twice")
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

    def rounds(self, target: TargetConfig) -> Rounds:
        """On the shop, 2 quote calls and 3 rounds sent by hand (swap-flow's); on a tool, 3 sent."""
        return Rounds((1, 1), 3) if self.tool is None else Rounds((), 3)

    def needs_shop_orders(self) -> bool:
        """Without `tool` it fuzzes a held refund of the shop's."""
        return self.tool is None

    def label(self) -> str:
        """Its `name`."""
        return self.name

    def lead_profile(self, profile: LeadProfile) -> LeadProfile:
        """A mutant should carry an answer that would act: the lead always accepts (and releases, on the shop)."""
        release = {} if self.tool else {"release": True}
        return profile.model_copy(update={"decline": 0.0, "cancel": 0.0, "abandon": 0.0,
                                          "overrides": {**profile.overrides, **release, **self.answers}})

    def problem(self, target: TargetConfig) -> tuple[str, str] | None:
        """None of its classes can be sent against `target`: refused, saying why for each."""
        principal = target.sends_principal
        if self.runnable(principal):
            return None
        return ("none of these mutations can be sent: " + "; ".join(
            f"{mutation.value}: {why}" for mutation, why in self.skipped(principal).items()), "mutations")


RaceProbe = Literal["twin", "retry"]
"""A race flow's probes: `twin`, the same sealed state answered twice at once on two replicas; `retry`, the same
answer sent again to the same replica while the first is still in flight (a host retrying its original)."""

RACE_PROBES: tuple[RaceProbe, ...] = typing.get_args(RaceProbe)


class RaceFlow(FlowKind):
    """A held refund's one answer sent twice at once: at most one release, identical calls agree, none hangs.

    The first round of `issue_refund` asks; the lead says yes once, and that same answer with the same sealed
    `requestState` goes out twice, racing (the `probes`). Each of the two calls is watched: `ok`, `slow` past
    `slow_after`, `hung` past `hung_after` (or timed out); a hung call fails the run (`no_call_hung`), and two
    answers that tell different stories fail `identical_calls_agree` (docs/running.md, "Race probes").
    """

    kind: Literal["race"]
    settles_refunds: ClassVar[bool] = True
    probes: list[RaceProbe] = Field(default_factory=lambda: list(RACE_PROBES), min_length=1,
                                    description="the races to run, one per flow, picked at random (seeded): twin "
                                                "(two replicas at once), retry (the same replica again while the "
                                                "first is in flight); default: both")
    retry_after: Duration = Field(default=0.002, ge=0, le=1,
                                  description="retry: how long after the original its copy is sent, real (at most "
                                              "1s: it must still be in flight)")
    slow_after: PositiveDuration = Field(default=2.0, description="the watchdog: a raced call answered later than "
                                                                  "this is slow, real")
    hung_after: PositiveDuration = Field(default=10.0, description="the watchdog: a raced call not answered by then "
                                                                   "is hung (and stopped), real; so is one that "
                                                                   "timed out ([load] timeout)")

    @field_validator("probes")
    @classmethod
    def _each_probe_once(cls, probes: list[str]) -> list[str]:
        if len(set(probes)) != len(probes):
            raise ValueError("names a probe twice")
        return probes

    def rounds(self, target: TargetConfig) -> Rounds:
        """A quote call, then issue_refund's rounds sent by hand: the question, and the answer twice."""
        return Rounds((1,), 3)

    def needs_shop_orders(self) -> bool:
        """It races the answer to one of the shop's held refunds."""
        return True

    def lead_profile(self, profile: LeadProfile) -> LeadProfile:
        """The answer raced must act: the lead always accepts, and releases."""
        return profile.model_copy(update={"decline": 0.0, "cancel": 0.0, "abandon": 0.0,
                                          "overrides": {**profile.overrides, "release": True}})

    @model_validator(mode="after")
    def _hung_after_slow(self) -> RaceFlow:
        if self.hung_after <= self.slow_after:
            raise FieldProblem(f"must be longer than slow_after ({self.slow_after:g}s): a hung call is a slow one "
                               "that never ended", "hung_after")
        return self


if TYPE_CHECKING:
    FlowSpec = FlowKind
else:
    FlowSpec = Annotated[Union[tuple(dict.fromkeys(FLOW_KINDS.values()))],  # noqa: UP007 - built at run time
                         Field(discriminator="kind")]
"""One `[[flows]]` entry: the union of every registered kind, told apart by `kind`."""


