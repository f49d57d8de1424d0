"""Race probes: one held refund's answer sent twice at once, each call watched, and both answers read as one story.

A `race` flow quotes a held refund, sends `issue_refund`'s first round and lets its lead answer yes,
once; then the same answer with the same sealed `requestState` goes out twice (`RaceFlow.probes`):

- `twin`: both at once, to two different replicas (the state crossed, and both open it);
- `retry`: the original, then `retry_after` later its copy to the same replica while the original is in
  flight (a host that resends its answer).

Whether two identical answers must get the same reply is the SDK's and the server's to say. The SDK's
seal (`mcp.server.request_state`) makes no state single-use: a sealed state opens on every replica that
holds its key until it expires, and a replay never gets -32602 for having been answered. Single use is
the application's: the shop claims each answered state in its shared once-only record before it releases,
and refuses every later claim with a tool error ("already confirmed"), backed by its API's
compare-and-set (409: "no longer held"). So the two calls legitimately differ: one releases, the other
is refused as already answered; that pair, or two identical answers that released nothing (both
expired), is one story (`agrees`). Anything else is counted as a mismatch with an example: both released,
one released while the other's state was refused (-32602: the replicas disagree about the state, as
in a rotation that let one seal with a key the other lacks), neither released while a yes was sent.
A pair where either call got no answer from the server (a timeout, a broken connection, hung) is not
judged for agreement: the watchdog counts it.

The watchdog classifies each of the two calls: `ok`, `slow` (answered after `slow_after`), `hung`
(not answered by `hung_after`, then stopped, or timed out by the client). It all goes on the flow's one
`flow` record (`race*` fields); `harness.folding.races` folds them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

import gevent

from harness.config.flows import RaceFlow
from harness.journal.records import FlowOutcome
from harness.load.flow import Flow, outcome_of, steps_of
from harness.load.shop_flows import HeldQuestion, held_refund_answered
from harness.mrtr.client import CallResult, RoundRecord, Steps
from harness.mrtr.outcome import Outcome


class RaceAnswer(StrEnum):
    """What one raced call came to, in the refund's terms: the words the fold and the reports count by."""

    RELEASED = "released"
    """The refund released: a complete result whose refund is `requested`."""
    ALREADY_ANSWERED = "already_answered"
    """Refused as a state already answered: the once-only record's "already confirmed", or the API's 409."""
    INVALID_STATE = "invalid_state"
    """-32602: the server refused the sealed state itself."""
    TOOL_ERROR = "tool_error"
    """Any other tool error."""
    OTHER = "other"
    """Any other answer from the server (another JSON-RPC error, a complete result that released nothing)."""
    NO_ANSWER = "no_answer"
    """No answer from the server: a broken connection, an HTTP error, a timeout, or hung."""


class Watch(StrEnum):
    """The watchdog's class of one raced call (`WATCH_STATES`, the `watchdog_calls` metric's `state`)."""

    OK = "ok"
    SLOW = "slow"
    HUNG = "hung"


ONCE_ONLY_REFUSALS = ("already confirmed", "did not release it again")
"""The shop's words for a refused second answer: its once-only record's, and its API's 409 passed on."""
_UNANSWERED = frozenset({Outcome.TIMEOUT, Outcome.CONNECTION_ERROR, Outcome.ANSWER_LOST, Outcome.HTTP_ERROR})


def answer_of(record: RoundRecord | None) -> RaceAnswer:
    """One raced call's answer, read from its round (None: it never ended)."""
    if record is None or record.outcome in _UNANSWERED:
        return RaceAnswer.NO_ANSWER
    if record.outcome is Outcome.INVALID_STATE:
        return RaceAnswer.INVALID_STATE
    result = record.result or {}
    if record.outcome is Outcome.COMPLETE:
        structured = result.get("structuredContent")
        released = isinstance(structured, Mapping) and structured.get("status") == "requested"
        return RaceAnswer.RELEASED if released else RaceAnswer.OTHER
    if record.outcome is Outcome.TOOL_ERROR:
        content = result.get("content")
        first = content[0] if isinstance(content, list) and content and isinstance(content[0], Mapping) else {}
        text = str(first.get("text", ""))
        return RaceAnswer.ALREADY_ANSWERED if any(words in text for words in ONCE_ONLY_REFUSALS) \
            else RaceAnswer.TOOL_ERROR
    return RaceAnswer.OTHER


_ONE_STORY = frozenset({RaceAnswer.RELEASED, RaceAnswer.ALREADY_ANSWERED})
_NOTHING_DONE_TWICE = frozenset({RaceAnswer.INVALID_STATE, RaceAnswer.TOOL_ERROR, RaceAnswer.OTHER})


def agrees(first: str, second: str) -> bool | None:
    """Whether two identical calls' answers tell one story (module docstring); None: not judged (one got none)."""
    if RaceAnswer.NO_ANSWER in (first, second):
        return None
    if {first, second} == _ONE_STORY:
        return True
    return first == second and first in _NOTHING_DONE_TWICE


def watch_of(record: RoundRecord | None, slow_after: float) -> Watch:
    """The watchdog's class of a call: hung when it never ended (or the client timed it out), slow past `slow_after`."""
    if record is None or record.outcome is Outcome.TIMEOUT:
        return Watch.HUNG
    return Watch.SLOW if record.received_at - record.sent_at > slow_after else Watch.OK


@steps_of(RaceFlow)
def race(flow: Flow, spec: RaceFlow, intended_at: float | None) -> Steps[FlowOutcome]:
    """A held refund whose one answer is sent twice, racing (the module docstring)."""
    held = yield from held_refund_answered(flow, intended_at)
    if not isinstance(held, HeldQuestion):
        return held
    arguments, first, answers = held.arguments, held.first, held.answers
    probe = flow.rng.choice(spec.probes)
    replicas = _replicas(flow, probe)
    sent = {"input_responses": answers, "request_state": first.request_state or "", "round_number": 2}
    calls = [gevent.spawn(flow.send, "issue_refund", arguments, replica=replicas[0], **sent),
             gevent.spawn_later(spec.retry_after if probe == "retry" else 0.0, flow.send, "issue_refund",
                                arguments, replica=replicas[1], **sent)]
    started = time.time()
    try:
        gevent.joinall(calls, timeout=spec.hung_after)
        records = [call.value if call.successful() else None for call in calls]
    finally:
        for call in calls:  # hung (or the flow stopped): nobody waits for it any more, and its round is never journaled
            if not call.ready():
                call.kill(block=False)
    failed = next((call.exception for call in calls if call.ready() and call.exception is not None), None)
    if failed is not None:
        raise failed  # a bug, not a hang: the flow ends `error`, saying it
    _journal(flow, probe, records, replicas, spec.slow_after, started)
    done = [record for record in records if record is not None]
    for record in done:
        flow.call_done("issue_refund", 2, record.outcome)
    released = next((record for record in done if answer_of(record) is RaceAnswer.RELEASED), None)
    if released is not None:
        flow.facts["refund_id"] = ((released.result or {}).get("structuredContent") or {}).get("refund_id")
        return FlowOutcome.COMPLETED
    return outcome_of(CallResult.of([first, *done]), flow) if done else FlowOutcome.ERROR


def _replicas(flow: Flow, probe: str) -> tuple[str, str]:
    """Where the two calls go: `twin`, two different replicas (drawn; one URL: that one twice); `retry`, one
    replica twice."""
    urls = list(flow.env.client.router.replicas)
    one = flow.rng.choice(urls)
    if probe == "retry" or len(urls) == 1:
        return one, one
    return one, flow.rng.choice([url for url in urls if url != one])


def _journal(flow: Flow, probe: str, records: list[RoundRecord | None], replicas: tuple[str, str], slow_after: float,
             started: float) -> None:
    """The race on the flow's record: its probe, each call's answer, replica and watch, and whether they agree."""
    answers = [answer_of(record).value for record in records]
    facts: dict[str, Any] = {
        "race": probe, "race_at": round(started, 3), "race_answers": answers,
        "race_watch": [watch_of(record, slow_after).value for record in records],
        "race_replicas": [flow.env.round_label(record) if record is not None else flow.env.replica_labels.get(url, url)
                          for record, url in zip(records, replicas, strict=True)],
        "race_overlapped": _overlapped(records)}
    agreed = agrees(*answers)
    if agreed is not None:
        facts["race_agreed"] = agreed
    flow.facts.update(facts)


def _overlapped(records: list[RoundRecord | None]) -> bool:
    """Whether both calls were on the wire at once (each sent before the other's answer came); a hung call's is."""
    one, two = records
    if one is None or two is None:
        return True
    return one.sent_at < two.received_at and two.sent_at < one.received_at
