"""The journal's record types: the one contract between a run and everything that reports on it.

A run writes one JSON object per line (`harness.journal.writer.Journal`); summary.json, the
verdict, JUnit, report.html, `mrtr-harness report`, capacity sweeps and the expiry
study read those lines back. Every record type and every `run` event is defined here,
once, as a `TypedDict` with constants for its `type` and `event`: writers build them
(so a type checker holds every writer to the schema), readers compare against the same
constants (so nobody spells `"load-started"` by hand). TypedDicts rather than classes
because a load process writes two or three records per MRTR round: a dict is what
`orjson` encodes fastest, and what a reader gets back from a line anyway.

Every record has `type` and `t` (wall-clock seconds since the epoch). `docs/journal.md`
is generated from this module (`python -m harness.cli.reference`).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Literal, NotRequired, TypedDict

from harness.vocabulary import FlowOutcome as FlowOutcome  # the journal's records are read with it


class RecordType(StrEnum):
    """The `type` field of every record."""

    RUN = "run"
    START = "start"
    ROUND = "round"
    FLOW = "flow"
    CHAOS = "chaos"
    COMMAND = "command"
    REJECTION = "rejection"
    UNASKED = "unasked"
    HYPOTHESIS = "hypothesis"
    INVARIANT = "invariant"
    RECONCILIATION = "reconciliation"
    HEALTH = "health"
    COLD_START = "cold_start"


WORKER_RECORDS = frozenset({RecordType.START, RecordType.ROUND, RecordType.FLOW, RecordType.COMMAND})
"""The records a Locust worker writes into its part of the journal (`journal-w<i>.jsonl`): its flows and their
commands. Any other record in a worker's part (a `reconciliation`, a `run end`) is no worker's: forged or damaged,
read as damage, never folded."""


def worker_part(index: int) -> str:
    """The file name of worker `index`'s part of the journal."""
    return f"journal-w{index}.jsonl"


def is_worker_part(name: str) -> bool:
    """Whether a journal part's file name is a worker's: `worker_part`'s, or any other name a reader could take for
    one (`journal-w01.jsonl`), so that no part named like a worker's is read as the run's own."""
    return name.startswith("journal-w")


class RunEvent(StrEnum):
    """The `event` field of a `run` record: the run's own timeline."""

    START = "start"
    LOAD_STARTED = "load-started"
    LOAD_EXTENDED = "load-extended"
    LOAD_STOPPED = "load-stopped"
    CPU = "cpu"
    ERROR = "error"
    LOGS_LOST = "logs-lost"
    LOGS = "logs"
    END = "end"


class EndStatus(StrEnum):
    """How the run itself says it ended (the `status` of its `run end` record).

    The verdict may be harsher (a completed run whose thresholds failed is `failed`), never
    milder; a journal with no `run end` at all was cut off (a SIGKILL) and reads as interrupted.
    """

    COMPLETED = "completed"
    ABORTED = "aborted"
    INTERRUPTED = "interrupted"
    ERRORED = "errored"


class ChaosPhase(StrEnum):
    """The `phase` of a `chaos` record: an action's start, then its end (with how it went)."""

    START = "start"
    END = "end"


# --- the run's timeline ------------------------------------------------------------------------


class RunStarted(TypedDict):
    """The first record: which scenario ran, with which seed, for how long."""

    type: Literal[RecordType.RUN]
    event: Literal[RunEvent.START]
    t: float
    run_id: str
    scenario: str
    seed: int
    duration: float
    judged: NotRequired[str]
    """The scenario's table the run judges: `expect`, or `reproduces` (`run --reproduce`); absent: `expect`."""


class LoadStarted(TypedDict):
    """The load runs from here: the run's time zero (workers take a while to be ready)."""

    type: Literal[RecordType.RUN]
    event: Literal[RunEvent.LOAD_STARTED]
    t: float


class LoadExtended(TypedDict):
    """The load runs past `duration` because a chaos action is still running."""

    type: Literal[RecordType.RUN]
    event: Literal[RunEvent.LOAD_EXTENDED]
    t: float
    reason: str
    action: str | None


class LoadStopped(TypedDict):
    """No new flows from here; flows in flight get the grace period."""

    type: Literal[RecordType.RUN]
    event: Literal[RunEvent.LOAD_STOPPED]
    t: float
    reason: str


class CpuUsed(TypedDict):
    """The harness's CPU per round beside the replicas', over the load window.

    The harness's CPU is the run process's and its live fold process's together (not a
    worker's). `harness_startup_seconds` is the harness's CPU before that window: from the
    process's start to the load's (imports, the scenario, the target brought up).
    """

    type: Literal[RecordType.RUN]
    event: Literal[RunEvent.CPU]
    t: float
    rounds: int
    harness_seconds: float
    harness_per_round_ms: float | None
    harness_startup_seconds: float
    replicas_measured: list[str]
    replica_seconds: float
    replica_per_round_ms: float | None
    harness_to_replica: NotRequired[float]


class HarnessErrorRecord(TypedDict):
    """The harness itself failed (exit 4): the cause in one line, the traceback in a file of the results folder."""

    type: Literal[RecordType.RUN]
    event: Literal[RunEvent.ERROR]
    t: float
    error: str
    traceback_file: str | None


class RunEnded(TypedDict):
    """The last record of a run that ended by itself (not by SIGKILL)."""

    type: Literal[RecordType.RUN]
    event: Literal[RunEvent.END]
    t: float
    status: EndStatus
    reason: str | None
    target_error: NotRequired[str | None]


class LogsLost(TypedDict):
    """A replica's log source failed or ended while the run still followed it: `replica` (the source's label) is
    unobserved from `t`, and reconciliation does not judge the client rejections of that span (`not_judged`)."""

    type: Literal[RecordType.RUN]
    event: Literal[RunEvent.LOGS_LOST]
    t: float
    replica: str
    source: str
    why: str


class LogsRead(TypedDict):
    """What each log source read, as the collector stopped: per source its `source`, `replica`, `lines`, `bad`
    (lines the parser could not read, skipped), `cut` (lines longer than 64 KiB, read cut) and `unobserved_from`
    (when it was lost; null: followed to the end)."""

    type: Literal[RecordType.RUN]
    event: Literal[RunEvent.LOGS]
    t: float
    sources: list[dict[str, Any]]


# --- flows ----------------------------------------------------------------------------------


class FlowStarted(TypedDict):
    """A flow began (`scheduled`: its intended start in the open model; `late`: it started late; `host`: the
    `[[hosts]]` entry its lead sits behind).

    `protocol`: the revision its host speaks, when it is a 2025 one (absent: 2026-07-28).
    With spans exported (docs/metrics.md), `trace_id` (32 lowercase hex): the flow's OpenTelemetry trace, whose
    flow span's id is the trace id's last 16 hex digits; and `lead`: the lead's index among the run's leads. The
    run's live fold builds the flow's spans from these and its rounds' records.
    """

    type: Literal[RecordType.START]
    t: float
    flow_id: str
    flow: str
    scheduled: float | None
    late: bool
    host: NotRequired[str]
    protocol: NotRequired[str]
    trace_id: NotRequired[str]
    lead: NotRequired[int]


class RoundDone(TypedDict):
    """One POST of a flow, written as soon as its answer is read.

    `latency` counts from `intended` (coordinated-omission safe), `server_time` from `sent`;
    `outcome` is a `harness.mrtr.Outcome` value; `code` the JSON-RPC code or failure class
    (null on success); `replica` the replica that served it: the one its answer names in `X-Served-By`
    (a balancer's backend), else the label of the URL it was sent to (`balancer` behind one URL).
    `error`: what a failed round said (a tool error's text, a JSON-RPC error's message, an HTTP
    error's status and body excerpt), at most 200 characters, secrets replaced by placeholders.
    `expected` instead of `error`: an expected outcome, not an error. The round carried the
    person's decline or cancel, and the tool answered it with a tool error (the shop's
    `Nobody confirmed refund ...`, its policy for a refund nobody confirmed): the call ended
    as the person chose. Its `code` is null, so `client_errors`, the top errors and
    `compare` do not count it; reports list it apart, under expected answers.
    `crossed` (round 2 and later): whether another replica than the one that answered the call's
    previous round served it, so that the state crossed replicas (what a run with no sticky
    sessions exists to exercise).
    `redispatched_from`: the replica the round was routed to when no connection to it could be
    opened (down or restarting) and the round went to `replica` instead, as a health-checking
    balancer would send it; absent when it went where it was routed. During a restart, an
    `unknown key` that `replica` logs for such a round is the down replica's state arriving
    elsewhere, not a key problem of `replica`.
    `host`: the `[[hosts]]` entry whose client sent it (`default` with no `[[hosts]]`). A 2025 host's
    call is one round: its questions travel over its session, as `elicitation/create` requests, and
    its `latency` and `server_time` include the lead's think time (the call stays open meanwhile).
    `auth_retry`: the round is the resend of the one before it, which the server answered 401
    `invalid_token` (`outcome` `unauthorized`): the lead's token was renewed and the round sent
    once more, with the same state and answers. Absent on every other round.
    `state_bytes`: the length of the `requestState` the answer carried (an `input_required` round's, the
    state the next round echoes); absent when it carried none.
    `output_mismatch`: a completed round whose result is not shown to conform to the `outputSchema` its tool
    declared in tools/list (`harness.load.output_contracts`): where and which keyword failed, never the value, or
    that tools/list could not be read (the count fails closed); absent when it conforms.
    With spans exported (docs/metrics.md), every round carries `span_id` (16 lowercase hex: its OpenTelemetry
    client span, whose `traceparent` the request carried), `request_id` (its JSON-RPC id) and `server` (the `host:port`
    it was sent to): the run's live fold builds the round's span from them. A failed round also carries its trace's
    `trace_id` (32 hex): paste the two into a tracing backend to find the round and, under it, the server's
    span. Every flow with a failed round is exported, so a failed round's ids are always found there; another
    round's span is there when its flow was kept (the flow record's `trace_id`).
    """

    type: Literal[RecordType.ROUND]
    t: float
    flow_id: str
    flow: str
    tool: str
    round: int
    replica: str
    intended: float
    sent: float
    latency: float
    server_time: float
    outcome: str
    http_status: int | None
    code: str | None
    error: NotRequired[str]
    expected: NotRequired[str]
    crossed: NotRequired[bool]
    redispatched_from: NotRequired[str]
    host: NotRequired[str]
    auth_retry: NotRequired[bool]
    state_bytes: NotRequired[int]
    output_mismatch: NotRequired[str]
    trace_id: NotRequired[str]
    span_id: NotRequired[str]
    request_id: NotRequired[int]
    server: NotRequired[str]


class CallSummary(TypedDict):
    """One tool call inside a flow record: rounds per call is measured from these."""

    tool: str
    rounds: int
    outcome: str


class FlowEnded(TypedDict):
    """Exactly one per started flow: how it ended (`outcome` is a `FlowOutcome` value).

    `interrupted_by_run`: the flow was still in flight when the run stopped, and the run
    journaled its end (from its table of flows in flight) rather than the flow itself.
    The shop's flows add what they learned (`order_id`, `quote_id`, `held`, `refund_id`).
    A `fuzz` flow that sent its mutant adds `mutation` (its class), `mutant_answer`
    (`rejected`, `accepted`, `server_error` or `other`: `harness.load.mutations.answer_of`),
    `mutant_round`, `mutant_length` (characters sent) and `mutant_detail` (how it was made);
    never the mutant itself. One that drew a class it found it could not send (cross-principal when
    every lead's token stands for the same principal) adds `mutation_skipped` (that class) and
    `mutation_skipped_why`, and sends another class if it has one. One that drew an envelope class
    (`harness.load.envelope`) adds `envelope_mutation`, `envelope_answer` (`as_required`, `otherwise` or
    `no_answer`), `envelope_length` (bytes sent) and, when answered otherwise, `envelope_got` (what came).
    A `race` flow that raced its answer adds `race` (the probe: `twin` or `retry`), `race_at` (when the two
    calls went out), and for the two calls in order `race_answers` (`harness.load.races.RaceAnswer`),
    `race_watch` (`ok`, `slow` or `hung`) and `race_replicas`; `race_overlapped` (both were on the wire at
    once) and, when both got an answer, `race_agreed` (they tell one story: docs/running.md, "Race probes").
    `host`: the `[[hosts]]` entry its
    lead sits behind. `trace_id` (32 lowercase hex): the flow's OpenTelemetry trace, when its spans were
    exported (every flow with a failure, and the sampled share of the rest: docs/metrics.md).
    """

    type: Literal[RecordType.FLOW]
    t: float
    flow_id: str
    flow: str
    outcome: str
    rounds: int
    duration: float
    server_time: float
    think_time: float
    answers: list[str]
    calls: list[CallSummary]
    late: bool
    interrupted_by_run: NotRequired[bool]
    order_id: NotRequired[str]
    quote_id: NotRequired[str]
    held: NotRequired[bool]
    refund_id: NotRequired[str | None]
    replay: NotRequired[str]
    unanswerable: NotRequired[str]
    error: NotRequired[str]
    mutation: NotRequired[str]
    mutant_answer: NotRequired[str]
    mutant_round: NotRequired[int]
    mutant_length: NotRequired[int]
    mutant_detail: NotRequired[str]
    mutation_skipped: NotRequired[str]
    mutation_skipped_why: NotRequired[str]
    envelope_mutation: NotRequired[str]
    envelope_answer: NotRequired[str]
    envelope_length: NotRequired[int]
    envelope_got: NotRequired[str]
    race: NotRequired[str]
    race_at: NotRequired[float]
    race_answers: NotRequired[list[str]]
    race_watch: NotRequired[list[str]]
    race_replicas: NotRequired[list[str]]
    race_overlapped: NotRequired[bool]
    race_agreed: NotRequired[bool]
    host: NotRequired[str]
    trace_id: NotRequired[str]


# --- chaos, logs and checks ----------------------------------------------------------------------


class ChaosStarted(TypedDict):
    type: Literal[RecordType.CHAOS]
    phase: Literal[ChaosPhase.START]
    t: float
    action: str
    target: str
    detail: dict[str, Any]


class ChaosEnded(TypedDict):
    """`ok` false for a failed, unsupported, cut-short or never-started action (a chaos failure)."""

    type: Literal[RecordType.CHAOS]
    phase: Literal[ChaosPhase.END]
    t: float
    action: str
    target: str
    ok: bool
    error: str | None
    seconds: float
    detail: dict[str, Any]


class CommandRan(TypedDict):
    """One `[target.commands]` command (or a `command` action's) a chaos action ran, on one replica or on all.

    `name`: the command's name (`restart`, `add-key`, ..., `command`, `rollback`); `argv` as run,
    placeholders filled (a key is named by `{key_id}`, its fingerprint; `{key_file}` is a path);
    `exit_code` null when it could not start or ran out of time (`error` says which);
    `output`: the end of its stdout and stderr, on one line, through the harness's scrubber (a key,
    token or secret the harness holds shown as `<token 1a2b3c4d5e6f>`, its kind and fingerprint;
    anything else that looks like one replaced); `ready`: false when the replica's URL did not
    accept connections again in time.
    """

    type: Literal[RecordType.COMMAND]
    t: float
    action: str
    name: str
    target: str
    argv: list[str]
    exit_code: int | None
    seconds: float
    output: str
    ok: bool
    error: str | None
    ready: NotRequired[bool]


class RejectionLogged(TypedDict):
    """A replica logged a requestState rejection (`t`: the log line's own time when it has one).

    `trace_id`: the trace id (32 lowercase hex) of the request it refused, when the line carried one (the shop's
    replicas write it on every line logged inside a traced request: docs/tracing.md).
    """

    type: Literal[RecordType.REJECTION]
    t: float
    replica: str
    reason: str
    method: str
    trace_id: NotRequired[str]


class UnaskedLogged(TypedDict):
    """A replica logged that it refused a call with -32021: the client did not declare a capability the call needs
    (it cannot answer the server's input requests). Read by a reason adapter's `[unasked]` line
    (`harness.logs.adapters`); `capability`: the one the line names, when it does."""

    type: Literal[RecordType.UNASKED]
    t: float
    replica: str
    method: str
    capability: NotRequired[str]


class HypothesisProbed(TypedDict):
    """The steady-state hypothesis probed `before`, `during` or `after` the chaos.

    `window`: the flows it judged, those that ended `from` .. `to` seconds into the run (a `rate` is over those
    seconds). `detail`: one item per condition, with `judged` false and `why` when it could not be judged (no
    samples, no flow ended in the window); `ok` is false when a judged condition failed, or when the window's
    last probe has a condition not judged and the scenario does not say `hypothesis_unjudged = "pass"`.
    """

    type: Literal[RecordType.HYPOTHESIS]
    t: float
    phase: str
    ok: bool
    detail: list[dict[str, Any]]
    window: NotRequired[dict[str, float]]


class InvariantChecked(TypedDict):
    """One invariant's result; `checked` false when there was nothing to check it against."""

    type: Literal[RecordType.INVARIANT]
    t: float
    invariant: str
    checked: bool
    violations: int
    detail: list[str]


class Reconciled(TypedDict):
    """Every -32602 the clients saw, matched to a line a replica logged.

    `unexplained`: client rejections no logged line accounts for (a failure);
    `unmatched_logged`: logged lines no client rejection of this run accounts for
    (other clients, or the run's own lines the log lost the time of).
    """

    type: Literal[RecordType.RECONCILIATION]
    t: float
    client_rejections: int
    logged: int
    matched: int
    unexplained: int
    unmatched_logged: int
    examples: dict[str, list[str]]
    no_adapter: NotRequired[int]
    """Of `unexplained`: those on a replica whose log gave no line the run's reason adapter reads ("unexplained (no
    adapter for this server)": `[target] log_adapter`), apart from a line the adapter should have read and did not."""
    not_judged: NotRequired[int]
    """Client rejections in a span where the log of their replica was unobserved (`LogsLost`): neither explained nor
    unexplained, since the line that would explain them could not be read."""
    unobserved: NotRequired[list[dict[str, Any]]]
    """Each lost log source: its `replica`, `from` (when it was lost) and `why`."""
    settled_early: NotRequired[int]
    """Unmatched items counted before their partner could have come, because the matching held its bound
    (`harness.folding.reconcile.HELD`): each may be one unexplained too many, never one too few."""
    unasked: NotRequired[dict[str, Any]]
    """The -32021 refusals the clients saw, matched the same way to the lines a replica logged for them (`unasked`
    records): `client`, `logged`, `matched`, `unexplained`; informational (a host that cannot answer input requests
    is the host's to fix, counted by host), never a failure."""


class HealthSampled(TypedDict):
    """One replica's health at `t`, sampled through its target every few seconds while the load runs.

    `source` says where it was read: `proc` (the process on this machine), `docker-stats` (the container's stats
    through the engine) or `prometheus` (its `process_*` metrics, scraped from `[target] health_urls`). A figure
    the source does not give is absent; a replica that could not be read at a sample has no record then.
    """

    type: Literal[RecordType.HEALTH]
    t: float
    replica: str
    rss_mb: float
    source: str
    cpu_seconds: NotRequired[float]
    """CPU seconds the replica has used since it started (a restart starts again from 0)."""
    open_fds: NotRequired[int]
    threads: NotRequired[int]


class ColdStarted(TypedDict):
    """One server process's cold start: from its spawn to its first answer (a stdio target's `tools/list`), in
    seconds. One per process the target started: each replica at the start, each restart, each per-client one."""

    type: Literal[RecordType.COLD_START]
    t: float
    """When it answered first."""
    replica: str
    pid: int
    seconds: float


Record = (RunStarted | LoadStarted | LoadExtended | LoadStopped | CpuUsed | HarnessErrorRecord | LogsLost | LogsRead
          | RunEnded | FlowStarted
          | RoundDone | FlowEnded | ChaosStarted | ChaosEnded | CommandRan | RejectionLogged | UnaskedLogged
          | HypothesisProbed | InvariantChecked | Reconciled | HealthSampled | ColdStarted)
"""Anything a writer may journal."""

RECORDS: tuple[type, ...] = (RunStarted, LoadStarted, LoadExtended, LoadStopped, CpuUsed, HarnessErrorRecord, LogsLost,
                             LogsRead, RunEnded,
                             FlowStarted, RoundDone, FlowEnded, ChaosStarted, ChaosEnded, CommandRan, RejectionLogged,
                             UnaskedLogged, HypothesisProbed, InvariantChecked, Reconciled, HealthSampled, ColdStarted)
"""Every record type, in the order the schema documents them."""


def is_run_event(record: Mapping[str, Any], event: RunEvent) -> bool:
    """Whether a record read back is the `run` record of `event`."""
    return record.get("type") == RecordType.RUN and record.get("event") == event


def advance_time_zero(zero: float | None, record: Mapping[str, Any]) -> float | None:
    """The run's time zero once `record` is read: the load's start once known, until then the run's start.

    The one definition every reader uses (figures, the HTML timeline, capacity steps):
    a run's duration, rates and chaos times all count from the moment the load ran, not
    from when the harness began bringing the target up.
    """
    if record.get("type") != RecordType.RUN:
        return zero
    event = record.get("event")
    if event == RunEvent.LOAD_STARTED:
        return float(record["t"])
    if event == RunEvent.START and zero is None:
        return float(record["t"])
    return zero
