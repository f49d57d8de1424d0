"""What summary.json holds, typed: the models its JSON Schema (docs/summary.schema.json) and docs/summary.md are
generated from.

A script that gates on a run parses summary.json; these models say every key it can rely
on, with its type and meaning. `python -m harness.cli.reference` writes the schema and the
field reference from them, and the tests validate real runs' summaries (passed, failed,
interrupted) against that schema, so a key the writer adds or changes without them fails.
`schema` is the version: it goes up when a key changes meaning or goes, never for a new
optional key.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.config.thresholds import Judged
from harness.errors import ExitCode
from harness.report.verdict import RunStatus

SCHEMA_VERSION = 1
"""summary.json's `schema`: bumped when a key changes meaning or goes away, so a script comparing runs can tell."""

SCHEMA_ID = f"https://mrtr-harness.invalid/schemas/summary/{SCHEMA_VERSION}"
"""The schema's `$id`: a name, not a place to fetch it from (the schema ships in docs/summary.schema.json)."""


class _Part(BaseModel):
    """A part of the summary: every key it holds is listed, no other is allowed."""

    model_config = ConfigDict(extra="forbid")


class ScenarioInfo(_Part):
    """Which scenario ran."""

    name: str = Field(description="the scenario's `name`")
    seed: int = Field(description="the seed the run used (after --seed)")
    description: str = Field(description="the scenario's `description`")


class ThresholdRow(_Part):
    """One condition of one threshold of the table judged (`[expect]`, or `[reproduces]`), judged."""

    threshold: str = Field(description="the threshold's key as written, e.g. `round_latency{flow='refund'}`")
    condition: str = Field(description="the condition as parsed, e.g. `p(95)<0.25`")
    observed: float | None = Field(description="the value seen; null: no samples (the condition then fails)")
    passed: bool = Field(description="whether the condition held")
    metric: str = Field(description="the metric, without its selector")
    aggregate: str = Field(description="`p(95)`, `avg`, `count`, `ratio`, ...")
    op: str = Field(description="the comparison: `<`, `<=`, `==`, `>=`, `>`")
    expected: float = Field(description="the value compared against, in the metric's unit (seconds for times)")
    text: str = Field(description="the condition as people read it: `p(95) < 250ms`")
    observed_text: str = Field(description="the value seen as people read it: `p(95)=183ms`")


class InvariantRow(_Part):
    """One invariant, checked after the load."""

    invariant: str = Field(description="its name (docs/metrics.md lists them)")
    checked: bool = Field(description="false when it could not be checked (a target that declares no ledger)")
    violations: int = Field(description="how many times it broke")
    passed: bool = Field(description="whether it held")
    detail: Any = Field(description="examples of what broke, or null")


class UnobservedRow(_Part):
    """A replica whose log source failed or ended before the run did."""

    replica: str = Field(description="the source's replica label")
    from_: float | None = Field(alias="from", description="when it was lost (Unix seconds): unobserved from then on")
    why: str = Field(description="what ended it: the command's exit, the error")


class LogSourceRow(_Part):
    """What one log source read."""

    source: str = Field(description="the source (a file, a command, a container's labels)")
    replica: str = Field(description="its replica label")
    lines: int = Field(description="lines read")
    bad: int = Field(description="lines the parser could not read: skipped (an impossible stamp, JSON nested too deep)")
    cut: int = Field(description="lines longer than 64 KiB: read cut to it")
    unobserved_from: float | None = Field(description="when it was lost (Unix seconds); null: read to the run's end")
    why: str | None = Field(description="what ended it, when it was lost")


class ReconciliationRow(_Part):
    """Every -32602 a client saw, matched with a rejection a replica logged."""

    client_rejections: int = Field(description="-32602 answers the clients saw")
    logged: int = Field(description="rejections the replicas logged")
    matched: int = Field(description="client rejections paired with a logged one")
    unexplained: int = Field(description="client rejections no logged line explains (fails the run)")
    no_adapter: int = Field(default=0, description=(
        "of `unexplained`: \"unexplained (no adapter for this server)\", on replicas whose log gave no line the run's "
        "reason adapter reads (`[target] log_adapter`); absent in summaries from before it"))
    unmatched_logged: int = Field(description="logged rejections no client saw")
    from_redispatched_rounds: int = Field(description="client rejections from rounds the harness re-dispatched")
    settled_early: int = Field(description="rejections matched before the logs were read to the end")
    examples: dict[str, list[str]] = Field(description="a few of each: `unexplained`, `unmatched_logged`")
    passed: bool = Field(description="whether every client rejection was explained")
    not_judged: int = Field(default=0, description=(
        "client rejections that fell where a replica's log was unobserved (its log source lost): neither explained "
        "nor unexplained; above 0 the run cannot pass (status aborted, exit 3); absent in summaries from before it"))
    unobserved: list[UnobservedRow] = Field(default_factory=list, description="each log source lost during the run")
    judged: bool = Field(default=True, description="not_judged is 0")
    unasked: UnaskedRow | None = Field(default=None, description=(
        "the -32021 refusals (the client did not declare a capability the call needs), matched the same way to the "
        "lines replicas logged for them; present when a client saw one or a replica logged one"))


class UnaskedRow(_Part):
    """The -32021 refusals the clients saw, each matched to a line a replica logged for it (a reason adapter's
    `[unasked]` line). Informational: a host that cannot answer input requests is counted by host, never a failure."""

    client: int = Field(description="-32021 answers the clients saw")
    logged: int = Field(description="-32021 refusals the replicas logged")
    matched: int = Field(description="client refusals paired with a logged line")
    unexplained: int = Field(description="client refusals no logged line explains (the server may log none)")
    not_judged: int = Field(description="client refusals where their replica's log was unobserved")
    examples: list[str] = Field(description="a few unexplained ones")


class HypothesisRow(_Part):
    """One probe of the steady-state hypothesis."""

    phase: Literal["before", "during", "after"] = Field(description="when, against the chaos")
    ok: bool = Field(description="whether the steady state held")
    judged: bool = Field(description="false when a condition had no samples to judge")
    detail: Any = Field(description="each threshold of the probe as judged, or why it could not be")
    t: float | None = Field(description="when the probe ran (Unix seconds)")
    window: dict[str, float] | None = Field(description="the flows it judged: `from` and `to`, seconds into the run")


class FlowCounts(_Part):
    """Flows by kind and outcome, with the totals each way."""

    total: int = Field(description="every flow that ended")
    by_flow: dict[str, dict[str, int]] = Field(description="per flow kind: flows by outcome")
    by_outcome: dict[str, int] = Field(description="flows by outcome (`completed`, `declined`, `interrupted`, ...)")


class HostRow(_Part):
    """One `[[hosts]]` kind (`default` without them)."""

    flows: int = Field(description="flows its leads ran")
    by_outcome: dict[str, int] = Field(description="those flows by outcome")
    errors_by_code: dict[str, int] = Field(description="its failed rounds by JSON-RPC code or failure class")


class Spread(_Part):
    """A distribution: null where there were no samples, never a made-up zero."""

    count: int = Field(description="samples")
    p50: float | None = Field(description="median")
    p95: float | None = Field(description="95th percentile")
    p99: float | None = Field(description="99th percentile")
    max: float | None = Field(default=None, description="largest (rounds per call and request state sizes only)")


class Crossings(_Part):
    """Continuation rounds (round 2 and later) and how many another replica served than the round before."""

    continuations: int = Field(description="continuation rounds")
    crossed: int = Field(description="those served by another replica than the previous round")
    share: float | None = Field(description="crossed / continuations; null without continuations")


class AuthRefusals(_Part):
    """Rounds the resource server refused (zeros in a run without `[target.auth]`)."""

    unauthorized: int = Field(description="401 answers")
    forbidden: int = Field(description="403 answers")
    retried: int = Field(description="rounds resent after a 401 renewed the lead's token")
    by_round: list[dict[str, Any]] = Field(description="per `flow`, `tool`, `round` and `outcome`: the `count`")


class Rejections(_Part):
    """Rejections the replicas logged, next to what the clients saw."""

    total_logged: int = Field(description="rejection lines the replicas logged")
    by_reason: dict[str, Any] = Field(description="logged rejections by reason (and replica)")
    client_rejections: int = Field(description="-32602 answers the clients saw")
    unexplained: int = Field(description="client rejections no logged line explains")
    reconciled: bool = Field(description="whether the reconciliation ran (false when the run ended before it)")
    log_sources: list[LogSourceRow] = Field(default_factory=list, description=(
        "what each replica log source read, as the run stopped reading; absent in summaries from before it"))


class ChaosRow(_Part):
    """One chaos action, from its start to its end."""

    action: str = Field(description="the action (docs/scenario.md lists them)")
    target: str | None = Field(description="what it acted on: a replica, several joined by + (`r1+r3`), `all`, "
                                           "`auth`")
    start: float | None = Field(description="seconds into the run it started")
    end: float | None = Field(description="seconds into the run it ended; null: the run was cut off while it ran")
    ok: bool | None = Field(description="whether it did what it was asked")
    error: str | None = Field(description="why not")
    detail: Any = Field(description="what the action reports (e.g. `ready_after` per replica)")
    rounds: Any = Field(default=None, description="a network fault only: the rounds of its window, by outcome")


class ErrorGroup(_Part):
    """What a server said when rounds failed, counted by flow, tool, round and message."""

    count: int = Field(description="how many rounds")
    flow: str | None = Field(description="the flow kind")
    tool: str | None = Field(description="the tool called")
    round: int | None = Field(description="the round number")
    message: str = Field(description="the message, numbers and ids masked so alike ones group")
    example: str = Field(description="one message as it came")
    first: float | None = Field(description="seconds into the run it was first seen")
    last: float | None = Field(description="seconds into the run it was last seen")
    trace_ids: list[str] = Field(default_factory=list,
                                 description="the trace ids of its latest rounds that carried one (tracing on), newest "
                                             "first: a few to paste into a tracing backend, never every one")


class JournalRead(_Part):
    """How the journal read."""

    parts: list[str] = Field(description="the journal files read (the master's, then each worker's)")
    missing: list[str] = Field(description="parts that were expected and not there")
    records: int = Field(description="records read")
    unreadable: int = Field(description="lines that are no record, or records the figures could not take: damage")
    torn: int = Field(description="last lines cut mid-write (what a kill leaves): not damage")


class Comparison(_Part):
    """`run --baseline DIR` only: the comparison with the baseline, folded into the exit code."""

    baseline: str = Field(description="the baseline's results folder")
    regressed: bool = Field(description="whether anything regressed")
    regressions: list[str] = Field(description="the metrics that regressed")
    exit_code: int = Field(description="the comparison's own exit code (as `compare` gives it)")
    run_exit_code: int = Field(description="the run's exit code before the comparison was folded in")
    files: list[str] = Field(description="what the comparison wrote into the results folder")


class RssGrowth(_Part):
    """A replica's resident-memory slope, fitted by least squares after the warm-up (`replica_rss_growth`)."""

    mb_per_minute: float
    low: float = Field(description="the 95% interval's lower bound (MB/min): `replica_rss_growth = \"< N\"` fails "
                                   "when it is at or above N")
    high: float = Field(description="the 95% interval's upper bound (MB/min)")
    samples: int = Field(description="health samples fitted (those after the warm-up)")
    warm_up_seconds: float = Field(description="seconds of the load's start left out of the fit")


class ReplicaHealthRow(_Part):
    """One replica's health over the run, from its `health` records."""

    samples: int = Field(description="health samples kept (thinned evenly past 1024)")
    source: str | None = Field(default=None, description="where they were read: proc, docker-stats or prometheus")
    rss_mb_first: float = Field(description="resident memory at the first sample (MB)")
    rss_mb_last: float = Field(description="resident memory at the last sample (MB)")
    open_fds_last: int | None = Field(description="open file descriptors at the last sample (null: not read)")
    threads_last: int | None = Field(description="threads at the last sample (null: not read)")
    rss_growth: RssGrowth | None = Field(description="null: too few samples after the warm-up to fit a slope")


class Watchdog(_Part):
    """The race probes' watchdog: raced calls by class (`watchdog_calls`)."""

    ok: int = Field(description="answered within the flow's `slow_after`")
    slow: int = Field(description="answered, later than `slow_after`")
    hung: int = Field(description="not answered by `hung_after` (then stopped), or timed out: fails `no_call_hung`")


class RaceProbeRow(_Part):
    """One race probe's races (`twin`: two replicas at once; `retry`: the same replica while the first is in flight)."""

    raced: int = Field(description="races run")
    agreed: int = Field(description="races whose two answers told one story (one released, one refused as already "
                                    "answered; or the same refusal twice)")
    disagreed: int = Field(description="races whose answers did not: each fails `identical_calls_agree`")
    not_judged: int = Field(description="races where a call got no answer from the server (the watchdog counts it)")
    overlapped: int = Field(description="races whose two calls were on the wire at once")
    two_replicas: int = Field(description="races whose two calls two different replicas answered")
    answers: dict[str, int] = Field(description="races by their answers in the order sent, `released / "
                                                "already_answered` (docs/running.md, Race probes, lists the words)")
    watchdog: Watchdog


class DuringRotation(_Part):
    """The races that began while a `rotate-keys` chaos step ran (to the whole second)."""

    exercised: bool = Field(description="false: no race fell inside a rotation step, or the scenario has none")
    raced: int = Field(description="races that began inside a rotate-keys step")
    disagreed: int = Field(description="of those, races whose answers disagreed")
    steps: int | None = Field(default=None, description="rotate-keys steps the run had (absent: none)")
    why: str | None = Field(default=None, description="why it was not exercised (absent when it was)")


class Races(_Part):
    """The race probes (`race` flows): identical answers sent at once, each call watched (docs/running.md)."""

    raced: int = Field(description="races run, over every probe")
    disagreed: int = Field(description="races whose answers disagreed (`identical_calls_agree`'s violations)")
    by_probe: dict[str, RaceProbeRow] = Field(description="per probe: `twin`, `retry`")
    examples: list[str] = Field(description="the first disagreements: flow, probe, replicas and the two answers")
    during_rotation: DuringRotation
    watchdog: Watchdog


class Summary(_Part):
    """summary.json: a run's verdict, every check behind it and the figures, for machines and later comparison."""

    model_config = ConfigDict(extra="forbid", title="mrtr-harness summary.json")

    schema_version: Literal[1] = Field(alias="schema", description="the version of this layout")
    run_id: str | None = Field(description="the results folder's name")
    scenario: ScenarioInfo
    status: RunStatus = Field(description="how the run ended (docs/exit-codes.md)")
    exit_code: ExitCode = Field(
        description="the process's exit code before a comparison (docs/exit-codes.md); 130: interrupted")
    passed: bool = Field(description="exit_code is 0")
    judged: Judged = Field(default=Judged.EXPECT, description=(
        "which table `thresholds` are: `expect` (the healthy outcome: plain `run`) or `reproduces` (the failure "
        "a scenario reproduces: `run --reproduce`, where passed means it reproduced); written by every run, "
        "absent only in summaries from before it (read them as `expect`)"))
    reason: str | None = Field(description="why the run did not finish, or failed as a whole (null otherwise)")
    problems: list[str] = Field(description="one line per thing that failed, naming it")
    thresholds: list[ThresholdRow] = Field(description="every threshold condition, judged")
    invariants: dict[str, InvariantRow] = Field(description="every invariant, by name")
    reconciliation: ReconciliationRow | None = Field(description="null when the run ended before it")
    hypothesis: list[HypothesisRow] = Field(description="the steady-state probes, in order")
    started: float | None = Field(description="when the load started (Unix seconds)")
    duration: float = Field(description="seconds from the load's start to its end")
    flows: FlowCounts
    hosts: dict[str, HostRow] = Field(description="per host kind")
    rounds_per_call: dict[str, Spread] = Field(description="per flow kind: rounds a call took")
    crossed_replicas: Crossings
    redispatched_rounds: int = Field(description="rounds the harness sent again to another replica")
    auth: AuthRefusals
    round_latency_seconds: dict[str, dict[str, Spread]] = Field(description="per flow kind, per round number")
    request_state_bytes: dict[str, dict[str, Spread]] = Field(default_factory=dict, description=(
        "per flow kind, per round number: the size in bytes of the `requestState` the round's answer carried "
        "(the state the next round sends back), over the rounds that carried one; absent in summaries from "
        "before it"))
    rejections: Rejections
    chaos: list[ChaosRow] = Field(description="every chaos action")
    top_errors: list[ErrorGroup] = Field(description="what servers said most often when rounds failed")
    expected_answers: list[ErrorGroup] = Field(description="tool errors that answered a lead's decline or cancel")
    fuzz: dict[str, Any] | None = Field(description="the fuzzer's table (`by_mutation`, `skipped`, `by_envelope`); "
                                                    "null without one")
    output_contracts: dict[str, dict[str, Any]] = Field(default_factory=dict, description=(
        "per tool whose completed results broke the `outputSchema` it declared in tools/list: `mismatches` (how "
        "many) and `example` (the first: where, and which keyword); empty when every result conformed"))
    races: Races | None = Field(default=None, description=(
        "the race probes' table: races by probe and how their answers agreed, the races during a key rotation, "
        "and the watchdog's classes of the raced calls; null without a race flow, absent in summaries from "
        "before it"))
    journal: JournalRead | None
    replica_health: dict[str, ReplicaHealthRow] = Field(default_factory=dict, description=(
        "per replica label: its resident memory, descriptors and threads over the run and the memory slope "
        "`replica_rss_growth` judges; empty when the target gave no health (an external target without "
        "`health_urls`), absent in summaries from before it"))
    cold_start_seconds: dict[str, Spread] = Field(default_factory=dict, description=(
        "per replica label: its server processes' cold starts, from spawn to first answer, in seconds (`count` "
        "processes, `max` the slowest; the `cold_start` metric); a stdio target's (per-client processes under "
        "`client`), empty for a target whose processes the harness does not start over stdio, absent in "
        "summaries from before it"))
    extra: dict[str, Any] = Field(description="`cpu` (harness and replica CPU per round), and what a caller adds")
    compare: Comparison | None = Field(default=None, description="present after `run --baseline DIR` only")


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of summary.json, from `Summary`."""
    schema = Summary.model_json_schema(by_alias=True)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}


def json_schema_text() -> str:
    """docs/summary.schema.json as written."""
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
