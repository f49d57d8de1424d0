"""The reference shop's flows: refund, return and payout, and the adversarial retries of the on-call catalogue.

Presets on top of the generic machinery (`harness.load.flow`): each knows the shop's tools
and picks from its orders (`ShopOrders`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.config.flows import AdversarialFlow, PayoutFlow, RefundFlow, ReturnFlow
from harness.journal.records import FlowOutcome
from harness.leads.lead import Action
from harness.load.flow import ANSWERED, Flow, outcome_of, result_of, steps_of, text_of
from harness.load.shop_orders import ShopOrders
from harness.mrtr.client import CallResult, RoundRecord, Steps
from harness.mrtr.outcome import Outcome


def shop_of(flow: Flow) -> ShopOrders:
    assert flow.env.shop is not None, "the shop's flows run with the shop's orders"
    return flow.env.shop


def quote_order(flow: Flow, held: bool | None, intended_at: float | None) -> Steps[str]:
    shop = shop_of(flow)
    orders = {True: shop.held, False: shop.small}.get(held) if held is not None else None
    order_id = flow.rng.choice(orders if orders else shop.all)
    quote = result_of((yield from flow.call("quote_refund", {"order_id": order_id}, intended_at=intended_at)), flow)
    flow.facts.update(order_id=order_id, quote_id=quote["quote_id"], held=quote["needs_confirmation"])
    return str(quote["quote_id"])


@dataclass(frozen=True)
class HeldQuestion:
    """A held refund's first round and its lead's answer: what a flow that sends that answer again needs."""

    arguments: dict[str, str]
    first: RoundRecord
    answers: Mapping[str, Any]


def held_refund_answered(flow: Flow, intended_at: float | None) -> Steps[HeldQuestion | FlowOutcome]:
    """Quote a held refund, ask for it and let the lead answer, without sending the answer; or the flow's outcome
    when the refund was not asked (its first round's outcome) or the lead walked away."""
    arguments = {"quote_id": (yield from quote_order(flow, True, intended_at))}
    first = flow.send("issue_refund", arguments)
    if first.outcome is not Outcome.INPUT_REQUIRED:
        flow.call_done("issue_refund", 1, first.outcome)
        return outcome_of(CallResult.of([first]), flow)
    answers = yield from flow.respond(first)
    if answers is None:
        return FlowOutcome.ABANDONED
    return HeldQuestion(arguments, first, answers)


@steps_of(RefundFlow)
def refund(flow: Flow, spec: RefundFlow, intended_at: float | None) -> Steps[FlowOutcome]:
    held = {"above-limit": True, "below-limit": False}.get(spec.amount)
    quote_id = yield from quote_order(flow, held, intended_at)
    call = yield from flow.call("issue_refund", {"quote_id": quote_id})
    if call.outcome is Outcome.COMPLETE:
        flow.facts["refund_id"] = ((call.result or {}).get("structuredContent") or {}).get("refund_id")
    return outcome_of(call, flow)


@steps_of(ReturnFlow)
def record_return(flow: Flow, spec: ReturnFlow, intended_at: float | None) -> Steps[FlowOutcome]:
    shop = shop_of(flow)
    order = shop.orders.get(flow.rng.choice(shop.all))
    assert order is not None
    sku = flow.rng.choice(order.lines).sku
    call = yield from flow.call("record_return", {"order_id": order.order_id, "sku": sku}, intended_at=intended_at)
    return outcome_of(call, flow)


@steps_of(PayoutFlow)
def payout(flow: Flow, spec: PayoutFlow, intended_at: float | None) -> Steps[FlowOutcome]:
    quote_id = yield from quote_order(flow, False, intended_at)
    refund_id = result_of((yield from flow.call("issue_refund", {"quote_id": quote_id})), flow)["refund_id"]
    flow.facts["refund_id"] = refund_id
    call = yield from flow.call("pay_refund", {"refund_id": refund_id})
    if call.outcome is Outcome.COMPLETE and text_of(call).startswith("Not paid"):
        return ANSWERED.get(Action(flow.answers[-1]), FlowOutcome.UNFINISHED) if flow.answers \
            else FlowOutcome.UNFINISHED
    return outcome_of(call, flow)


@steps_of(AdversarialFlow)
def adversarial(flow: Flow, spec: AdversarialFlow, intended_at: float | None) -> Steps[FlowOutcome]:
    """A held refund whose retry is replayed, tampered with, or sent with other arguments."""
    held = yield from held_refund_answered(flow, intended_at)
    if not isinstance(held, HeldQuestion):
        return held
    arguments, first, answers = held.arguments, held.first, held.answers
    state = first.request_state or ""
    if spec.kind == "tamper":
        position = flow.rng.randrange(40, max(41, len(state) - 4))  # inside the ciphertext, not the key id
        state = state[:position] + ("A" if state[position] != "A" else "B") + state[position + 1:]
    elif spec.kind == "change-args":
        arguments = {"quote_id": (yield from quote_order(flow, True, None))}
    client = flow.env.client
    retry = flow.send("issue_refund", arguments, input_responses=answers, request_state=state, round_number=2,
                      replica=client.router.pick(first.replica))
    flow.call_done("issue_refund", 2, retry.outcome)
    if spec.kind == "replay" and retry.outcome is Outcome.COMPLETE:
        flow.facts["refund_id"] = ((retry.result or {}).get("structuredContent") or {}).get("refund_id")
        again = flow.send("issue_refund", arguments, input_responses=answers, request_state=state, round_number=3,
                          replica=client.router.pick(retry.replica))
        flow.facts["replay"] = again.outcome.value
    return outcome_of(CallResult.of([first, retry]), flow)


