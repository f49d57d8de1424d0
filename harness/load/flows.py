"""One flow = one piece of support work: tool calls with a simulated lead answering between rounds.

Every flow writes a `start` record, a `round` record per POST (as soon as its answer is
read, so a flow killed mid-think has left its rounds) and exactly one `flow` record with
its outcome, also when it is interrupted at the end of a run. The shop's refund, return
and payout flows are presets on top of the generic `call` flow's machinery; the
adversarial flows send a retry wrong on purpose for the on-call catalogue, and the
`fuzz` flow sends it wrong in every way `harness.load.mutations` knows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gevent

from harness.config.flows import (
    AdversarialFlow,
    CallFlow,
    FlowSpec,
    FuzzFlow,
    PayoutFlow,
    RefundFlow,
    ReturnFlow,
    flow_label,
)
from harness.config.leads import LeadProfile
from harness.config.mutations import Mutation
from harness.config.scenario import Scenario
from harness.config.target import TargetConfig
from harness.journal.records import CallSummary, FlowEnded, FlowOutcome, FlowStarted, RecordType, RoundDone
from harness.journal.writer import Journal
from harness.leads.answers import UnanswerableRequest
from harness.leads.lead import Action, Lead
from harness.leads.seeding import RandomStream
from harness.load.mutations import Mutant, StatePool, answer_of, mutate_token
from harness.logs.parse import clean_label
from harness.metrics.registry import RunMetrics
from harness.mrtr.client import CallResult, LeadAnswer, MrtrClient, RoundRecord, Steps, drive
from harness.mrtr.outcome import Outcome, OutcomeError
from harness.mrtr.transport import Transport

if TYPE_CHECKING:
    from harness.shop.catalogue import Catalogue

PAGE_TIMEOUT = 10.0
"""Seconds a lead waits for a provider's page to answer."""

RequestHook = Callable[..., None]
"""Locust's `events.request.fire`, or None outside Locust."""

_ANSWERED = {Action.DECLINE: FlowOutcome.DECLINED, Action.CANCEL: FlowOutcome.CANCELLED}


@dataclass
class FlowEnv:
    """What every flow of a run shares: the client, the people, the records, the clocks."""

    scenario: Scenario
    client: MrtrClient
    journal: Journal
    run_metrics: RunMetrics
    catalogue: Catalogue | None
    """The shop's orders, for the shop's own flows; None when the scenario has none of them."""
    replica_labels: Mapping[str, str]
    fire_request: RequestHook | None = None
    sleep: Callable[[float], Any] = gevent.sleep
    pages: Transport = field(default_factory=lambda: Transport(read_timeout=PAGE_TIMEOUT))
    """The leads' browser for URL mode's out-of-band pages (its own pools, apart from the rounds')."""
    states: StatePool = field(default_factory=StatePool)
    """Recent first-round states per tool, where the fuzzer's swap classes find another call's state."""

    def __post_init__(self) -> None:
        catalogue = self.catalogue
        self.held_orders = catalogue.order_ids(needs_confirmation=True) if catalogue else []
        self.small_orders = catalogue.order_ids(needs_confirmation=False) if catalogue else []
        self.all_orders = catalogue.order_ids() if catalogue else []
        self._profiles: dict[int, LeadProfile] = {}
        self._served_by: dict[str, str] = {}

    def profile_for(self, spec: FlowSpec) -> LeadProfile:
        """The lead profile of a flow spec, derived once per run (not per flow).

        Keyed by the spec itself (its id: the scenario holds every spec for the whole run),
        since two `call` flows of one scenario may pin different answers.
        """
        key = id(spec)
        if key not in self._profiles:
            self._profiles[key] = lead_profile(self.scenario.leads, spec)
        return self._profiles[key]

    def round_label(self, record: RoundRecord) -> str:
        """The replica a round is counted under: the one its answer names (`X-Served-By`: behind a balancer,
        the backend that served it), else its URL's label. At most `SERVED_BY_LABELS` names, then `other`:
        the label reaches metrics, and a header that says something new on every answer must not blow
        them up."""
        served_by = record.served_by
        if served_by is not None:
            label = self._served_by.get(served_by)
            if label is None:
                fresh = clean_label(served_by) if len(self._served_by) < SERVED_BY_LABELS else None
                label = self._served_by[served_by] = fresh or "other"
            return label
        return self.replica_labels.get(record.replica, record.replica)


def url_labels(urls: list[str], labels: list[str]) -> dict[str, str]:
    """The replica label a round's URL stands for; behind one balancer URL nobody can tell, and the journal says so."""
    if len(urls) == len(labels):
        return dict(zip(urls, labels, strict=True))
    return {url: "balancer" for url in urls}


SERVED_BY_LABELS = 64
"""Distinct `X-Served-By` names a run counts rounds under; any further one is `other`."""


class FlowFailed(Exception):
    """A step of the flow ended the flow early, with this outcome."""

    def __init__(self, outcome: FlowOutcome, call: CallResult | None = None) -> None:
        super().__init__(outcome.value)
        self.outcome = outcome
        self.call = call


class Flow:
    """One running flow: its rounds and what it learned (quote, refund, answers).

    Slotted and small: 100,000 of them wait on leads at once in one load process. Its
    lead is built when it is asked (a profile and the flow's stream are all it holds).
    """

    __slots__ = ("env", "spec", "flow_id", "kind", "rng", "late", "started", "ended", "rounds", "previous_replica",
                 "server_time", "think_time", "thinking_until", "answers", "calls", "facts")

    def __init__(self, env: FlowEnv, spec: FlowSpec, flow_id: str, rng: RandomStream, *,
                 late: bool = False) -> None:
        self.env = env
        self.spec = spec
        self.flow_id = flow_id
        self.kind = flow_label(spec)
        self.rng = rng
        self.late = late
        self.started = time.time()
        self.ended = False
        """True once its one `flow` record is written (by the flow, or by the run that interrupted it)."""
        self.rounds = 0
        self.previous_replica: str | None = None  # who answered the latest round: a flow's calls run in turn
        self.server_time = 0.0
        self.think_time = 0.0
        self.thinking_until = 0.0
        """When the lead's current thought ends: a flow stopped mid-think counts only the part thought."""
        self.answers: list[str] = []
        self.calls: list[CallSummary] = []
        self.facts: dict[str, Any] = {}

    # --- calling tools -------------------------------------------------------------------

    def call(self, tool: str, arguments: Mapping[str, Any], *, intended_at: float | None = None) -> Steps[CallResult]:
        """One tool call through its rounds, the lead answering; every round journaled as it ends."""
        result = yield from self.env.client.call_steps(tool, arguments, self.decide, intended_at=intended_at,
                                                       on_round=self.record_round)
        self.server_time += result.server_time
        self.call_done(tool, result.round_count, result.outcome)
        return result

    def call_done(self, tool: str, rounds: int, outcome: Outcome) -> None:
        """Rounds per call: what a resolver that re-asks forever, or a shed, shows up in."""
        self.calls.append(CallSummary(tool=tool, rounds=rounds, outcome=outcome.value))
        self.env.run_metrics.call_done(self.kind, rounds)

    def send(self, tool: str, arguments: Mapping[str, Any], **kwargs: Any) -> RoundRecord:
        """One hand-built round (the adversarial flows' wrong retries), journaled like the others."""
        record = self.env.client.send_round(tool, arguments, **kwargs)
        self.record_round(tool, record)
        self.server_time += record.server_time
        return record

    def decide(self, record: RoundRecord) -> LeadAnswer | None:
        """The lead decides and answers; the think time (modelled/time_scale real seconds) is the caller's to wait."""
        try:
            answer = Lead(self.env.profile_for(self.spec), self.rng).respond(record.input_requests or {})
        except UnanswerableRequest as exc:
            self.facts["unanswerable"] = str(exc)
            self.answers.append("unanswerable")
            return None
        self.answers.append(answer.action.value)
        if answer.action is Action.ABANDON:
            return None
        env = self.env
        real = env.scenario.real(answer.think_seconds)
        env.run_metrics.thought(real)
        self.think_time += real
        self.thinking_until = time.time() + real
        for url, delay in answer.url_visits:
            gevent.spawn(self._finish_on_page, url, env.scenario.real(delay))
        return LeadAnswer(answer.input_responses, real)

    def respond(self, record: RoundRecord) -> Steps[Mapping[str, Any] | None]:
        """The lead answers a hand-sent round: the answers, after the think time; None to walk away."""
        reply = self.decide(record)
        if reply is None:
            return None
        if reply.think_seconds > 0:
            yield reply.think_seconds
        return reply.responses

    def _finish_on_page(self, url: str, delay: float) -> None:
        """The out-of-band step of URL mode: the lead finishes on the provider's page after a while.

        Whatever the page answers is ignored: a page that is down is the server's problem
        to report on the next round. (A bad URL from the server fails the same way.)
        """
        self.env.sleep(delay)
        try:
            self.env.pages.visit(url)
        except ValueError:
            pass

    def record_round(self, tool: str, record: RoundRecord) -> None:
        self.rounds += 1
        failure = _failure_code(record)
        message = record.message
        env = self.env
        replica = env.round_label(record)
        done = RoundDone(
            type=RecordType.ROUND, t=record.received_at, flow_id=self.flow_id, flow=self.kind, tool=tool,
            round=record.round, replica=replica, intended=record.intended_at, sent=record.sent_at,
            latency=round(record.latency, 6), server_time=round(record.server_time, 6),
            outcome=record.outcome.value, http_status=record.http_status, code=failure)
        if message is not None:
            done["error"] = message
        if record.round > 1 and self.previous_replica is not None:
            done["crossed"] = replica != self.previous_replica
        self.previous_replica = replica
        env.journal.write(done)
        env.run_metrics.round_done(self.kind, record.round, record.latency, failure)
        if env.fire_request is not None:
            error = OutcomeError(record.outcome, record.error_code, record.http_status, message) \
                if record.outcome.is_failure else None
            env.fire_request(request_type="MRTR", name=f"{tool} r{min(record.round, 10)}",
                             response_time=record.latency * 1000.0, response_length=0, exception=error,
                             context={"flow": self.kind})


def _failure_code(record: RoundRecord) -> str | None:
    """The code a failed round is counted under: the JSON-RPC code, or the failure class."""
    if not record.outcome.is_failure:
        return None
    if record.error_code is not None:
        return str(record.error_code)
    return record.outcome.value


def lead_profile(profile: LeadProfile, spec: FlowSpec) -> LeadProfile:
    """Refund leads who accept mean "release": the form's one field is answered yes.

    A `call` flow's `answers` pin what its leads type, over the `[leads]` table's own.
    """
    if isinstance(spec, RefundFlow | AdversarialFlow) and "release" not in profile.overrides:
        return profile.model_copy(update={"overrides": {**profile.overrides, "release": True}})
    if isinstance(spec, CallFlow) and spec.answers:
        return profile.model_copy(update={"overrides": {**profile.overrides, **spec.answers}})
    if isinstance(spec, FuzzFlow):  # a mutant should carry an answer that would act: the lead always accepts
        release = {} if spec.tool else {"release": True}
        return profile.model_copy(update={"decline": 0.0, "cancel": 0.0, "abandon": 0.0,
                                          "overrides": {**profile.overrides, **release, **spec.answers}})
    return profile


def outcome_of(call: CallResult, flow: Flow) -> FlowOutcome:
    """A whole call's outcome in the flow's terms: the lead's last answer explains a tool error."""
    last_answer = Action(flow.answers[-1]) if flow.answers and flow.answers[-1] in Action._value2member_map_ \
        else None
    if call.outcome is Outcome.COMPLETE:
        return _ANSWERED.get(last_answer, FlowOutcome.COMPLETED) if last_answer else FlowOutcome.COMPLETED
    if call.outcome is Outcome.TOOL_ERROR:
        return _ANSWERED.get(last_answer, FlowOutcome.TOOL_ERROR) if last_answer else FlowOutcome.TOOL_ERROR
    return {
        Outcome.ABANDONED: FlowOutcome.ABANDONED,
        Outcome.INVALID_STATE: FlowOutcome.REJECTED,
        Outcome.ROUNDS_EXCEEDED: FlowOutcome.ROUNDS_EXCEEDED,
    }.get(call.outcome, FlowOutcome.ERROR)


def _require(call: CallResult, flow: Flow) -> dict[str, Any]:
    """The structured result of a call that must succeed for the flow to go on."""
    if call.outcome is not Outcome.COMPLETE:
        raise FlowFailed(outcome_of(call, flow), call)
    return (call.result or {}).get("structuredContent") or {}


def _text(call: CallResult) -> str:
    content = (call.result or {}).get("content") or [{}]
    return str(content[0].get("text", ""))


# --- the flows ------------------------------------------------------------------------------

def _quote(flow: Flow, held: bool | None, intended_at: float | None) -> Steps[str]:
    orders = {True: flow.env.held_orders, False: flow.env.small_orders}.get(held) if held is not None else None
    order_id = flow.rng.choice(orders if orders else flow.env.all_orders)
    quote = _require((yield from flow.call("quote_refund", {"order_id": order_id}, intended_at=intended_at)), flow)
    flow.facts.update(order_id=order_id, quote_id=quote["quote_id"], held=quote["needs_confirmation"])
    return str(quote["quote_id"])


def refund(flow: Flow, spec: RefundFlow, intended_at: float | None) -> Steps[FlowOutcome]:
    held = {"above-limit": True, "below-limit": False}.get(spec.amount)
    quote_id = yield from _quote(flow, held, intended_at)
    call = yield from flow.call("issue_refund", {"quote_id": quote_id})
    if call.outcome is Outcome.COMPLETE:
        flow.facts["refund_id"] = ((call.result or {}).get("structuredContent") or {}).get("refund_id")
    return outcome_of(call, flow)


def record_return(flow: Flow, spec: ReturnFlow, intended_at: float | None) -> Steps[FlowOutcome]:
    assert flow.env.catalogue is not None, "the shop's flows run with the shop's catalogue"
    order = flow.env.catalogue.get(flow.rng.choice(flow.env.all_orders))
    assert order is not None
    sku = flow.rng.choice(order.lines).sku
    call = yield from flow.call("record_return", {"order_id": order.order_id, "sku": sku}, intended_at=intended_at)
    return outcome_of(call, flow)


def payout(flow: Flow, spec: PayoutFlow, intended_at: float | None) -> Steps[FlowOutcome]:
    quote_id = yield from _quote(flow, False, intended_at)
    refund_id = _require((yield from flow.call("issue_refund", {"quote_id": quote_id})), flow)["refund_id"]
    flow.facts["refund_id"] = refund_id
    call = yield from flow.call("pay_refund", {"refund_id": refund_id})
    if call.outcome is Outcome.COMPLETE and _text(call).startswith("Not paid"):
        return _ANSWERED.get(Action(flow.answers[-1]), FlowOutcome.UNFINISHED) if flow.answers \
            else FlowOutcome.UNFINISHED
    return outcome_of(call, flow)


def generic_call(flow: Flow, spec: CallFlow, intended_at: float | None) -> Steps[FlowOutcome]:
    arguments = flow.rng.choice(spec.arguments)
    return outcome_of((yield from flow.call(spec.tool, arguments, intended_at=intended_at)), flow)


def adversarial(flow: Flow, spec: AdversarialFlow, intended_at: float | None) -> Steps[FlowOutcome]:
    """A held refund whose retry is replayed, tampered with, or sent with other arguments."""
    quote_id = yield from _quote(flow, True, intended_at)
    arguments = {"quote_id": quote_id}
    first = flow.send("issue_refund", arguments)
    if first.outcome is not Outcome.INPUT_REQUIRED:
        flow.call_done("issue_refund", 1, first.outcome)
        return outcome_of(CallResult.of([first]), flow)
    answers = yield from flow.respond(first)
    if answers is None:
        return FlowOutcome.ABANDONED
    state = first.request_state or ""
    if spec.kind == "tamper":
        position = flow.rng.randrange(40, max(41, len(state) - 4))  # inside the ciphertext, not the key id
        state = state[:position] + ("A" if state[position] != "A" else "B") + state[position + 1:]
    elif spec.kind == "change-args":
        arguments = {"quote_id": (yield from _quote(flow, True, None))}
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


EXPIRY_MARGIN = 1.0
"""Real seconds an `expired` mutant is held past the TTL, so clocks a little apart still see it expired."""


def fuzz(flow: Flow, spec: FuzzFlow, intended_at: float | None) -> Steps[FlowOutcome]:
    """A real first round, then the retry with one mutated requestState (`harness.load.mutations`).

    The class is drawn first from the flow's own stream, then the mutation itself, so the
    same seed sends the same mutants. What the flow learns (`mutation`, `mutant_answer`,
    the mutant's length and a description) goes on its `flow` record; the mutant does not.
    A class that needs another call which did not go as planned (a replay whose valid
    retry did not complete, a swap with no other state to be had) sends nothing, and the
    flow's record then carries no `mutation`.
    """
    target = flow.env.scenario.target
    mutation = flow.rng.choice(spec.runnable(target.principal_header is not None))
    if spec.tool is None:
        tool, arguments = "issue_refund", {"quote_id": (yield from _quote(flow, True, intended_at))}
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
                      headers=_as_another_principal(target) if mutation is Mutation.CROSS_PRINCIPAL else None)
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


def _as_another_principal(target: TargetConfig) -> dict[str, str]:
    """The principal header of a round sent as someone else: the run's principal with `-other` appended."""
    assert target.principal_header is not None, "cross-principal is only run with a principal header"
    return {target.principal_header: f"{target.principal}-other"}


def _other_arguments(flow: Flow, spec: FuzzFlow, arguments: dict[str, Any]) -> Steps[dict[str, Any]]:
    """Arguments of another call to the same tool: another held refund's quote, or another of `arguments`."""
    if spec.tool is None:
        orders = flow.env.held_orders or flow.env.all_orders
        quote = _require((yield from flow.call("quote_refund", {"order_id": flow.rng.choice(orders)})), flow)
        return {"quote_id": quote["quote_id"]}
    return flow.rng.choice([other for other in spec.arguments if other != arguments])


def _swap_tool(flow: Flow, spec: FuzzFlow) -> tuple[str, dict[str, Any]]:
    """Another tool to mint a state with: `swap_tool`, or the shop's record_return on an order of the catalogue."""
    if spec.swap_tool is not None:
        return spec.swap_tool, spec.swap_tool_arguments
    catalogue = flow.env.catalogue
    assert catalogue is not None, "the shop's fuzz flow runs with the shop's catalogue"
    order = catalogue.get(flow.rng.choice(flow.env.all_orders))
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


FLOWS: dict[str, Callable[[Flow, Any, float | None], Steps[FlowOutcome]]] = {
    "refund": refund,
    "return": record_return,
    "payout": payout,
    "call": generic_call,
    "replay": adversarial,
    "tamper": adversarial,
    "change-args": adversarial,
    "fuzz": fuzz,
}


def flow_steps(env: FlowEnv, spec: FlowSpec, flow_id: str, rng: RandomStream,
               scheduled: float | None = None, late: bool = False,
               in_flight: dict[str, Flow] | None = None) -> Steps[FlowOutcome]:
    """One flow to its end, as steps (it yields each wait), journaling exactly one outcome for it.

    While it runs it is in `in_flight` (the load plan's table), so a run that stops with
    flows still waiting on their leads journals their ends itself, in bulk (`interrupt`),
    instead of waiting for each flow to be stopped; a flow whose end is already journaled
    writes nothing more when it is stopped (its greenlet killed mid-round, or its parked
    steps closed).
    """
    flow = Flow(env, spec, flow_id, rng, late=late)
    env.journal.write(FlowStarted(type=RecordType.START, t=flow.started, flow_id=flow_id, flow=flow.kind,
                                  scheduled=scheduled, late=late))
    env.run_metrics.flow_started(flow.kind)
    if in_flight is not None:
        in_flight[flow_id] = flow
    outcome = FlowOutcome.INTERRUPTED
    try:
        outcome = yield from FLOWS[spec.kind](flow, spec, scheduled)
    except FlowFailed as failed:
        outcome = failed.outcome
    except (gevent.GreenletExit, GeneratorExit):
        outcome = FlowOutcome.INTERRUPTED
        raise
    except Exception as exc:  # noqa: BLE001 - a bug in a flow must be an outcome, not vanish with its greenlet
        flow.facts["error"] = f"{type(exc).__name__}: {exc}"
        outcome = FlowOutcome.ERROR
    finally:
        if in_flight is not None:
            in_flight.pop(flow_id, None)
        if not flow.ended:
            _finish(env, flow, outcome)
    return outcome


def run_flow(env: FlowEnv, spec: FlowSpec, flow_id: str, rng: RandomStream,
             scheduled: float | None = None, late: bool = False,
             in_flight: dict[str, Flow] | None = None) -> FlowOutcome:
    """Run one flow to its end in the calling greenlet, sleeping its waits (the closed model's agents)."""
    return drive(flow_steps(env, spec, flow_id, rng, scheduled, late, in_flight), env.sleep)


INTERRUPT_BATCH = 10_000
"""Flows journaled as interrupted between two writes of the journal (a few MB of lines)."""


def interrupt(env: FlowEnv, flows: list[Flow]) -> int:
    """Journal every flow in `flows` as interrupted by the run, now; returns how many.

    One record each, written from the run's table rather than by each flow as it is
    stopped: 100,000 flows waiting on leads are accounted for in about a second, and none
    is lost because stopping it was slow.
    """
    for count, flow in enumerate(flows, 1):
        if not flow.ended:
            _finish(env, flow, FlowOutcome.INTERRUPTED, by_run=True)
        if count % INTERRUPT_BATCH == 0:
            env.journal.flush()  # this loop never yields to the flusher: a million lines would wait in memory
    return len(flows)


def _finish(env: FlowEnv, flow: Flow, outcome: FlowOutcome, *, by_run: bool = False) -> None:
    flow.ended = True
    now = time.time()
    duration = now - flow.started
    if flow.thinking_until > now:  # stopped mid-think: only the part thought so far counts
        flow.think_time = max(0.0, flow.think_time - (flow.thinking_until - now))
    record = FlowEnded(type=RecordType.FLOW, t=now, flow_id=flow.flow_id, flow=flow.kind, outcome=outcome.value,
                       rounds=flow.rounds, duration=round(duration, 6), server_time=round(flow.server_time, 6),
                       think_time=round(flow.think_time, 6), answers=flow.answers, calls=flow.calls,
                       late=flow.late, **flow.facts)  # type: ignore[typeddict-item]
    if by_run:
        record["interrupted_by_run"] = True
    env.journal.write(record)
    env.run_metrics.flow_finished(flow.kind, outcome.value, duration)
