"""The flow machinery: one piece of support work as tool calls, with a simulated lead answering between rounds.

Every flow writes a `start` record, a `round` record per POST (as soon as its answer is
read, so a flow killed mid-think has left its rounds) and exactly one `flow` record with
its outcome, also when it is interrupted at the end of a run. A flow kind's steps are a
generator over `Flow`, registered with `@steps_of(Model)` beside their model's declaration in
`harness.config.flows`: the generic `call` flow here, the shop's presets in `shop_flows`, the
fuzzer in `fuzz` (`harness.load.kinds` imports them all and refuses a kind without steps).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import gevent

from harness.config.flows import CallFlow, FlowKind, FlowSpec
from harness.config.hosts import DEFAULT_HOST, Host
from harness.config.leads import LeadProfile
from harness.config.scenario import Scenario
from harness.config.think import RandomStream
from harness.journal.records import CallSummary, FlowEnded, FlowOutcome, RecordType, RoundDone
from harness.journal.writer import Journal
from harness.leads.answers import UnanswerableRequest
from harness.leads.lead import Action, Lead
from harness.load.mutations import StatePool
from harness.load.output_contracts import OutputContracts, read_tool_pages
from harness.load.seeding import stream
from harness.logs.parse import clean_label
from harness.metrics.registry import RunMetrics
from harness.mrtr.client import CallResult, CallSteps, LeadAnswer, MrtrClient, Responder, RoundHook, RoundRecord, Steps
from harness.mrtr.outcome import Outcome, OutcomeError
from harness.mrtr.transport import Transport
from harness.telemetry.marks import FlowTrace, Sampling, server_of
from harness.vocabulary import AUTH_OUTCOMES

if TYPE_CHECKING:
    from harness.auth.keeper import LeadTokens
    from harness.load.shop_orders import ShopOrders


class HostClient(Protocol):
    """What a flow calls tools through: `MrtrClient` (a 2026-07-28 host) or `LegacyClient` (a 2025 one)."""

    def call_steps(self, tool: str, arguments: Mapping[str, Any], respond: Responder, *,
                   intended_at: float | None = None, on_round: RoundHook | None = None,
                   lead: int | None = None, trace: FlowTrace | None = None) -> CallSteps: ...

PAGE_TIMEOUT = 10.0
"""Seconds a lead waits for a provider's page to answer."""

RequestHook = Callable[..., None]
"""Locust's `events.request.fire`, or None outside Locust."""

ANSWERED = {Action.DECLINE: FlowOutcome.DECLINED, Action.CANCEL: FlowOutcome.CANCELLED}
_EXPECTED_ANSWERS = frozenset(action.value for action in ANSWERED)


@dataclass
class FlowEnv:
    """What every flow of a run shares: the client, the people, the records, the clocks."""

    scenario: Scenario
    client: MrtrClient
    journal: Journal
    run_metrics: RunMetrics
    shop: ShopOrders | None
    """The shop's orders, for the shop's own flows; None when the scenario has none of them."""
    replica_labels: Mapping[str, str]
    fire_request: RequestHook | None = None
    sleep: Callable[[float], Any] = gevent.sleep
    pages: Transport = field(default_factory=lambda: Transport(read_timeout=PAGE_TIMEOUT))
    """The leads' browser for URL mode's out-of-band pages (its own pools, apart from the rounds')."""
    states: StatePool = field(default_factory=StatePool)
    """Recent first-round states per tool, where the fuzzer's swap classes find another call's state."""
    hosts: Mapping[str, tuple[Host, HostClient]] = field(default_factory=dict)
    """Each host's settings and client, by name; empty: every flow runs on `client`, as the one default host."""
    tokens: LeadTokens | None = None
    """Every principal's OAuth token (`[target.auth]`), which the client's rounds carry; None without auth."""
    sampling: Sampling | None = None
    """The run's sampling when spans are exported (`harness.telemetry.switch`): each flow then draws its trace ids
    and writes them into the journal, whose live fold builds and sends the spans; None when tracing is off."""

    contracts: OutputContracts | None = None
    """Each tool's declared outputSchema and the check of its results; by default read from the client's target."""
    on_flow_end: Callable[[Flow], None] | None = None
    """Sees every flow as its one `flow` record is written (a stdio target's per-client process then stops)."""

    def __post_init__(self) -> None:
        if self.contracts is None:
            client = self.client
            self.contracts = OutputContracts(lambda line: read_tool_pages(
                client.transport, client.router.pick(None), client.envelope.meta_json, client.envelope.base_headers,
                line))
        self._profiles: dict[int, LeadProfile] = {}
        self._served_by: dict[str, str] = {}
        self._host_list = [host for host, _ in self.hosts.values()]
        self._host_weights = [host.weight for host in self._host_list]

    def host_of(self, flow_id: str) -> Host:
        """The host a flow's lead sits behind (`host_for`)."""
        return host_for(self._host_list, self.scenario.seed, flow_id, self._host_weights)

    def client_for(self, host: Host) -> HostClient:
        entry = self.hosts.get(host.name)
        return entry[1] if entry is not None else self.client

    def profile_for(self, spec: FlowSpec) -> LeadProfile:
        """The lead profile of a flow spec, derived once per run (not per flow).

        Keyed by the spec itself (its id: the scenario holds every spec for the whole run),
        since two `call` flows of one scenario may pin different answers.
        """
        key = id(spec)
        if key not in self._profiles:
            self._profiles[key] = spec.lead_profile(self.scenario.leads)
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


def host_for(hosts: Sequence[Host], seed: int, flow_id: str, weights: Sequence[float] | None = None) -> Host:
    """The host a flow's lead sits behind: drawn by weight from (seed, flow id), so one seed fixes it for every
    lead, on any number of workers, and the flow's own stream (its answers, its think times) is untouched."""
    if len(hosts) == 1:
        return hosts[0]
    if not hosts:
        return DEFAULT_HOST
    return stream(seed, "host", flow_id).choices(hosts, weights or [host.weight for host in hosts])[0]


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
    lead is built when it is asked (a profile and the flow's stream are all it holds). `lead` is its
    index among the run's leads (all workers' flows numbered in turn): with `[target.auth]`, whose token
    its rounds carry.
    """

    __slots__ = ("env", "spec", "flow_id", "kind", "rng", "late", "started", "ended", "rounds", "previous_replica",
                 "server_time", "think_time", "thinking_until", "answers", "calls", "facts", "host", "lead", "trace")

    def __init__(self, env: FlowEnv, spec: FlowSpec, flow_id: str, rng: RandomStream, *,
                 late: bool = False, lead: int = 0) -> None:
        self.env = env
        self.lead = lead
        self.spec = spec
        self.flow_id = flow_id
        self.kind = spec.label()
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
        self.host = env.host_of(flow_id)
        """The host the flow's lead sits behind: its client declares, speaks and retries as the host does."""
        self.trace: FlowTrace | None = FlowTrace() if env.sampling is not None else None
        """Its trace id while it runs, when spans are exported (`harness.folding.flow_traces` builds them)."""

    # --- calling tools -------------------------------------------------------------------

    def call(self, tool: str, arguments: Mapping[str, Any], *, intended_at: float | None = None) -> Steps[CallResult]:
        """One tool call through its rounds, the lead answering; every round journaled as it ends."""
        result = yield from self.env.client_for(self.host).call_steps(tool, arguments, self.decide,
                                                                      intended_at=intended_at,
                                                                      on_round=self.record_round, lead=self.lead,
                                                                      trace=self.trace)
        self.server_time += result.server_time
        self.call_done(tool, result.round_count, result.outcome)
        return result

    def call_done(self, tool: str, rounds: int, outcome: Outcome) -> None:
        """Rounds per call: what a resolver that re-asks forever, or a shed, shows up in."""
        self.calls.append(CallSummary(tool=tool, rounds=rounds, outcome=outcome.value))
        self.env.run_metrics.call_done(self.kind, rounds)

    def send(self, tool: str, arguments: Mapping[str, Any], **kwargs: Any) -> RoundRecord:
        """One hand-built round (the adversarial flows' wrong retries), journaled like the others."""
        kwargs.setdefault("lead", self.lead)
        kwargs.setdefault("trace", self.trace)
        record = self.env.client.send_round(tool, arguments, **kwargs)
        self.record_round(tool, record)
        self.server_time += record.server_time
        return record

    def decide(self, record: RoundRecord) -> LeadAnswer | None:
        """The lead decides and answers; the think time (modelled/time_scale real seconds) is the caller's to wait.

        A polling host (`url_retry = "poll"`) does not wait on the person for a round of URL-mode
        questions only: the lead still decides (and, accepting, finishes the page after a while; walking
        away, never), but the host accepts at once and retries after its `poll_every`.
        """
        requests = record.input_requests or {}
        try:
            answer = Lead(self.env.profile_for(self.spec), self.rng).respond(requests)
        except UnanswerableRequest as exc:
            self.facts["unanswerable"] = str(exc)
            self.answers.append("unanswerable")
            return None
        self.answers.append(answer.action.value)
        env = self.env
        polled = self.host.polls and _url_only(requests)
        if answer.action is Action.ABANDON and not polled:
            return None
        for url, delay in answer.url_visits:
            gevent.spawn(self._finish_on_page, url, env.scenario.real(delay))
        if polled:
            accepted = {key: {"action": "accept"} for key in requests}
            return LeadAnswer(accepted, env.scenario.real(self.host.poll_seconds))
        real = env.scenario.real(answer.think_seconds)
        env.run_metrics.thought(real)
        self.think_time += real
        self.thinking_until = time.time() + real
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

    def answered_as_chosen(self, record: RoundRecord) -> bool:
        """Whether a round's tool error is the policy's answer to the person's decline or cancel, sent in this
        very round (`Nobody confirmed refund ...`): the call ended as the person chose, which is no error."""
        return record.outcome is Outcome.TOOL_ERROR and record.sent_responses and bool(self.answers) \
            and self.answers[-1] in _EXPECTED_ANSWERS

    @staticmethod
    def _traced(trace: FlowTrace, record: RoundRecord, failed: bool, done: RoundDone) -> None:
        """The round's span id (and, failed, its trace id) in its record, with what its span needs that the record
        does not say otherwise: the request id and server (the live fold builds the span from these)."""
        done["span_id"] = record.span_id or trace.new_span()  # a 2025 host's round drew none
        done["request_id"] = record.request_id
        done["server"] = server_of(record.replica)
        if failed:
            done["trace_id"] = trace.trace_text
            trace.failed = True

    def record_round(self, tool: str, record: RoundRecord) -> None:
        self.rounds += 1
        expected = self.answered_as_chosen(record)
        failure = None if expected else _failure_code(record)
        message = record.message
        env = self.env
        replica = env.round_label(record)
        done = RoundDone(
            type=RecordType.ROUND, t=record.received_at, flow_id=self.flow_id, flow=self.kind, tool=tool,
            round=record.round, replica=replica, intended=record.intended_at, sent=record.sent_at,
            latency=round(record.latency, 6), server_time=round(record.server_time, 6),
            outcome=record.outcome.value, http_status=record.http_status, code=failure, host=self.host.name)
        if message is not None:
            done["expected" if expected else "error"] = message
        if record.round > 1 and self.previous_replica is not None:
            done["crossed"] = replica != self.previous_replica
        if record.redispatched_from is not None:
            done["redispatched_from"] = env.replica_labels.get(record.redispatched_from, record.redispatched_from)
        if record.auth_retry:
            done["auth_retry"] = True
        if record.request_state is not None:
            done["state_bytes"] = len(record.request_state)
        if record.outcome is Outcome.COMPLETE and record.result is not None and env.contracts is not None:
            credentials = env.client.credentials
            line = credentials.authorization(self.lead) if credentials is not None and self.lead is not None else ""
            mismatch = env.contracts.mismatch(tool, record.result, line)
            if mismatch is not None:
                done["output_mismatch"] = mismatch
        if record.outcome in AUTH_OUTCOMES:
            env.run_metrics.auth_refused(self.kind, tool, record.round, record.outcome.value)
        if self.trace is not None:
            self._traced(self.trace, record, failure is not None, done)
        self.previous_replica = replica
        env.journal.write(done)
        env.run_metrics.round_done(self.kind, record.round, record.latency, failure)
        if failure is not None:
            env.run_metrics.host_round_failed(self.host.name, failure)
        if env.fire_request is not None:
            error = OutcomeError(record.outcome, record.error_code, record.http_status, message) \
                if record.outcome.is_failure and not expected else None
            env.fire_request(request_type="MRTR", name=request_name(tool, record.round),
                             response_time=record.latency * 1000.0, response_length=record.response_bytes,
                             exception=error, context={"flow": self.kind})


_REQUEST_NAMES: dict[tuple[str, int], str] = {}
"""Locust's row names by (tool, round), each made once: a round's request event names its row."""


def request_name(tool: str, number: int) -> str:
    """Locust's row for a tool's round: `issue_refund round 2` (`r2` is a replica everywhere else); rounds past
    the ninth share `round 10+` (a server that never stops asking makes up to 11), so the table stays short."""
    key = (tool, min(number, 10))
    name = _REQUEST_NAMES.get(key)
    if name is None:
        name = _REQUEST_NAMES[key] = f"{tool} round {number}" if number < 10 else f"{tool} round 10+"
    return name


def _url_only(requests: Mapping[str, Any]) -> bool:
    """Whether a round asks URL-mode questions only (what a polling host retries on its own clock)."""
    return bool(requests) and all(isinstance(request, Mapping) and isinstance(request.get("params"), Mapping)
                                  and request["params"].get("mode") == "url" for request in requests.values())


def _failure_code(record: RoundRecord) -> str | None:
    """The code a failed round is counted under: the JSON-RPC code, or the failure class."""
    if not record.outcome.is_failure:
        return None
    if record.error_code is not None:
        return str(record.error_code)
    return record.outcome.value


def outcome_of(call: CallResult, flow: Flow) -> FlowOutcome:
    """A whole call's outcome in the flow's terms: the lead's last answer explains a tool error."""
    last_answer = Action(flow.answers[-1]) if flow.answers and flow.answers[-1] in Action._value2member_map_ \
        else None
    if call.outcome is Outcome.COMPLETE:
        return ANSWERED.get(last_answer, FlowOutcome.COMPLETED) if last_answer else FlowOutcome.COMPLETED
    if call.outcome is Outcome.TOOL_ERROR:
        return ANSWERED.get(last_answer, FlowOutcome.TOOL_ERROR) if last_answer else FlowOutcome.TOOL_ERROR
    return {
        Outcome.ABANDONED: FlowOutcome.ABANDONED,
        Outcome.INVALID_STATE: FlowOutcome.REJECTED,
        Outcome.ROUNDS_EXCEEDED: FlowOutcome.ROUNDS_EXCEEDED,
    }.get(call.outcome, FlowOutcome.ERROR)


def result_of(call: CallResult, flow: Flow) -> dict[str, Any]:
    """The structured result of a call that must succeed for the flow to go on."""
    if call.outcome is not Outcome.COMPLETE:
        raise FlowFailed(outcome_of(call, flow), call)
    return (call.result or {}).get("structuredContent") or {}


def text_of(call: CallResult) -> str:
    content = (call.result or {}).get("content") or [{}]
    return str(content[0].get("text", ""))


Kind = TypeVar("Kind", bound=FlowKind)

FlowSteps = Callable[[Flow, Any, float | None], Steps[FlowOutcome]]
"""A flow kind's steps: the flow, its scenario model, its intended start (None: now) -> its outcome."""

FLOW_STEPS: dict[type[FlowKind], FlowSteps] = {}
"""Each flow kind's model -> its steps, filled by `@steps_of`."""


def steps_of(model: type[Kind]) -> Callable[[Callable[[Flow, Kind, float | None], Steps[FlowOutcome]]],
                                            Callable[[Flow, Kind, float | None], Steps[FlowOutcome]]]:
    """Register the decorated generator as the steps of `model`'s flows: the steps half of a flow kind."""
    def register(steps: Callable[[Flow, Kind, float | None], Steps[FlowOutcome]]
                 ) -> Callable[[Flow, Kind, float | None], Steps[FlowOutcome]]:
        if model in FLOW_STEPS:
            raise TypeError(f"{model.__name__} has two sets of steps")
        FLOW_STEPS[model] = steps
        return steps
    return register


@steps_of(CallFlow)
def generic_call(flow: Flow, spec: CallFlow, intended_at: float | None) -> Steps[FlowOutcome]:
    arguments = flow.rng.choice(spec.arguments)
    return outcome_of((yield from flow.call(spec.tool, arguments, intended_at=intended_at)), flow)



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
            finish(env, flow, FlowOutcome.INTERRUPTED, by_run=True)
        if count % INTERRUPT_BATCH == 0:
            env.journal.flush()  # this loop never yields to the flusher: a million lines would wait in memory
    return len(flows)


def finish(env: FlowEnv, flow: Flow, outcome: FlowOutcome, *, by_run: bool = False) -> None:
    flow.ended = True
    now = time.time()
    duration = now - flow.started
    if flow.thinking_until > now:  # stopped mid-think: only the part thought so far counts
        flow.think_time = max(0.0, flow.think_time - (flow.thinking_until - now))
    record = FlowEnded(type=RecordType.FLOW, t=now, flow_id=flow.flow_id, flow=flow.kind, outcome=outcome.value,
                       rounds=flow.rounds, duration=round(duration, 6), server_time=round(flow.server_time, 6),
                       think_time=round(flow.think_time, 6), answers=flow.answers, calls=flow.calls,
                       late=flow.late, host=flow.host.name, **flow.facts)  # type: ignore[typeddict-item]
    if by_run:
        record["interrupted_by_run"] = True
    if flow.trace is not None and env.sampling is not None \
            and env.sampling.kept(flow.flow_id, flow.trace.failed, outcome.value):
        record["trace_id"] = flow.trace.trace_text  # the live fold, judging the same way, exports its spans
    env.journal.write(record)
    env.run_metrics.flow_finished(flow.kind, outcome.value, duration)
    env.run_metrics.host_flow_finished(flow.host.name, outcome.value)
    if env.on_flow_end is not None:
        env.on_flow_end(flow)
