"""The requestState fuzzer's flow: a real first round, then a retry with a mutated state that must get -32602.

The mutation classes and what each must be answered with are `harness.load.mutations`.
"""

from __future__ import annotations

from typing import Any

from harness.config.flows import FuzzFlow
from harness.config.mutations import EnvelopeMutation, Mutation
from harness.journal.records import FlowOutcome
from harness.load.envelope import send_envelope
from harness.load.flow import Flow, outcome_of, result_of, steps_of
from harness.load.mutations import Mutant, answer_of, mutate_token
from harness.load.shop_flows import quote_order, shop_of
from harness.mrtr.client import CallResult, Steps
from harness.mrtr.outcome import Outcome

EXPIRY_MARGIN = 1.0
"""Real seconds an `expired` mutant is held past the TTL, so clocks a little apart still see it expired."""

SAME_PRINCIPAL = ("every principal's token stands for the same one (equal fingerprints, or JWTs of one subject): a "
                  "tokens file with fewer tokens than principals, or a token command that ignores {lead}; the "
                  "server would rightly serve the retry")
"""Why a cross-principal mutant was not sent with `[target.auth]` (the flow's `mutation_skipped_why`)."""


@steps_of(FuzzFlow)
def fuzz(flow: Flow, spec: FuzzFlow, intended_at: float | None) -> Steps[FlowOutcome]:
    """A real first round, then the retry with one mutated requestState (`harness.load.mutations`).

    The class is drawn first from the flow's own stream, then the mutation itself, so the
    same seed sends the same mutants. What the flow learns (`mutation`, `mutant_answer`,
    the mutant's length and a description) goes on its `flow` record; the mutant does not.
    A class that needs another call which did not go as planned (a replay whose valid
    retry did not complete, a swap with no other state to be had) sends nothing, and the
    flow's record then carries no `mutation`. Cross-principal checks its premise first: with
    `[target.auth]` it goes with the token of a lead who is someone else (`LeadTokens.other_principal`);
    when no lead is, the flow draws another class and its record says which class it skipped and why
    (`mutation_skipped`, `mutation_skipped_why`), so the report does not count a hole that is not there.
    A draw of one of the flow's `envelope` classes sends that broken envelope instead (`harness.load.envelope`).
    """
    target = flow.env.scenario.target
    runnable = spec.runnable(target.sends_principal)
    choices: list[Mutation | EnvelopeMutation] = [*runnable, *spec.envelope]
    drawn = flow.rng.choice(choices)
    if isinstance(drawn, EnvelopeMutation):
        return send_envelope(flow, spec, drawn)
    mutation: Mutation = drawn
    other_lead: int | None = None
    if mutation is Mutation.CROSS_PRINCIPAL and flow.env.tokens is not None:
        other_lead = flow.env.tokens.other_principal(flow.lead)
        if other_lead is None:
            flow.facts.update(mutation_skipped=mutation.value, mutation_skipped_why=SAME_PRINCIPAL)
            runnable = [each for each in runnable if each is not Mutation.CROSS_PRINCIPAL]
            if not runnable:
                return FlowOutcome.ABANDONED
            mutation = flow.rng.choice(runnable)
    if spec.tool is None:
        tool, arguments = "issue_refund", {"quote_id": (yield from quote_order(flow, True, intended_at))}
        intended_at = None
    else:
        tool, arguments = spec.tool, flow.rng.choice(spec.arguments)
    first = flow.send(tool, arguments, intended_at=intended_at)
    state = first.request_state
    if first.outcome is not Outcome.INPUT_REQUIRED or not isinstance(state, str):
        flow.call_done(tool, 1, first.outcome)
        return outcome_of(CallResult.of([first]), flow)
    flow.env.states.add(tool, state, arguments)
    answers = yield from flow.respond(first)
    if answers is None:
        return FlowOutcome.ABANDONED
    client = flow.env.client
    previous, rounds = first, [first]
    if mutation is Mutation.REPLAY_COMPLETED:
        previous = flow.send(tool, arguments, input_responses=answers, request_state=state, round_number=2,
                             replica=client.router.pick(first.replica))
        rounds.append(previous)
        if previous.outcome is not Outcome.COMPLETE:
            flow.call_done(tool, 2, previous.outcome)
            return outcome_of(CallResult.of(rounds), flow)
    mutant, sent_arguments = yield from _mutant(flow, spec, mutation, tool, arguments, state)
    if mutant is None:
        flow.call_done(tool, len(rounds), Outcome.ABANDONED)
        return FlowOutcome.ABANDONED
    number = len(rounds) + 1
    retry = flow.send(tool, sent_arguments, input_responses=answers, request_state=mutant.value,
                      round_number=number, replica=client.router.pick(previous.replica),
                      **(_as_another_principal(flow, other_lead) if mutation is Mutation.CROSS_PRINCIPAL else {}))
    answer = answer_of(mutant, retry.outcome.value, retry.http_status, retry.error_code)
    flow.facts.update(mutation=mutant.mutation.value, mutant_detail=mutant.detail, mutant_length=mutant.length,
                      mutant_round=number, mutant_answer=answer.value)
    flow.call_done(tool, number, retry.outcome)
    return outcome_of(CallResult.of([*rounds, retry]), flow)


def _mutant(flow: Flow, spec: FuzzFlow, mutation: Mutation, tool: str, arguments: dict[str, Any],
            state: str) -> Steps[tuple[Mutant | None, dict[str, Any]]]:
    """The mutant to send and the arguments to send it with; (None, ...) when no such mutant could be had."""
    env, rng = flow.env, flow.rng
    fresh = env.scenario.real(env.scenario.target.ttl) / 2
    if mutation is Mutation.SWAP_ARGUMENTS:
        other_arguments = yield from _other_arguments(flow, spec, arguments)
        return Mutant(mutation, state, "this state, other arguments"), other_arguments
    if mutation is Mutation.SWAP_FLOW:
        other = env.states.other_arguments(tool, arguments, rng, fresh)
        if not other:
            other = _mint(flow, tool, (yield from _other_arguments(flow, spec, arguments)))
        return (Mutant(mutation, other, "another flow's state") if other else None), arguments
    if mutation is Mutation.SWAP_TOOL:
        other = env.states.other_tool(tool, rng, fresh) or _mint(flow, *_swap_tool(flow, spec))
        return (Mutant(mutation, other, "another tool's state") if other else None), arguments
    if mutation is Mutation.REPLAY_COMPLETED:
        return Mutant(mutation, state, "the completed retry's state, again"), arguments
    if mutation is Mutation.CROSS_PRINCIPAL:
        return Mutant(mutation, state, "this state, sent as another principal"), arguments
    if mutation is Mutation.FOREIGN_KEY:
        return Mutant(mutation, env.states.foreign_state(tool, arguments), "sealed under a key of its own"), arguments
    if mutation is Mutation.EXPIRED:
        held = env.scenario.real(env.scenario.target.ttl) + EXPIRY_MARGIN
        yield held
        return Mutant(mutation, state, f"held {held:.1f} s"), arguments
    return mutate_token(mutation, state, rng), arguments


def _as_another_principal(flow: Flow, other_lead: int | None) -> dict[str, Any]:
    """How a round goes as someone else: with `[target.auth]`, `other_lead`'s real token (a lead who is someone
    else); else under the principal header, the run's principal with `-other` appended."""
    target = flow.env.scenario.target
    if other_lead is not None:
        return {"lead": other_lead}
    assert target.principal_header is not None, "cross-principal is only run with a principal or tokens"
    return {"headers": {target.principal_header: f"{target.principal}-other"}}


def _other_arguments(flow: Flow, spec: FuzzFlow, arguments: dict[str, Any]) -> Steps[dict[str, Any]]:
    """Arguments of another call to the same tool: another held refund's quote, or another of `arguments`."""
    if spec.tool is None:
        shop = shop_of(flow)
        orders = shop.held or shop.all
        quote = result_of((yield from flow.call("quote_refund", {"order_id": flow.rng.choice(orders)})), flow)
        return {"quote_id": quote["quote_id"]}
    return flow.rng.choice([other for other in spec.arguments if other != arguments])


def _swap_tool(flow: Flow, spec: FuzzFlow) -> tuple[str, dict[str, Any]]:
    """Another tool to mint a state with: `swap_tool`, or the shop's record_return on one of its orders."""
    if spec.swap_tool is not None:
        return spec.swap_tool, spec.swap_tool_arguments
    orders = shop_of(flow).orders
    assert orders is not None, "the shop's fuzz flow runs with the shop's orders"
    order = orders.get(flow.rng.choice(shop_of(flow).all))
    assert order is not None
    return "record_return", {"order_id": order.order_id, "sku": flow.rng.choice(order.lines).sku}


def _mint(flow: Flow, tool: str, arguments: dict[str, Any]) -> str | None:
    """A first round of another call, for its state (kept in the pool for later flows too)."""
    record = flow.send(tool, arguments)
    state = record.request_state
    if record.outcome is not Outcome.INPUT_REQUIRED or not isinstance(state, str):
        return None
    flow.env.states.add(tool, state, arguments)
    return state


