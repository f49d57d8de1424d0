"""Nothing lost, nothing paid twice: the ledger invariants, checked from the shop's ledger and the journal.

Whatever the clients believed, the ledger is what happened: a refund released twice or
paid twice shows there. The journal says what each flow's lead answered, so together
they prove that nothing was released without an accepted answer, that every confirmed
flow's refund went out and that every declined or abandoned one is still held, as is every
one whose lead was never asked (a host that cannot ask: -32021, -32603). A
violation fails the run whatever the thresholds say.

Only this run's refunds are judged: the ledger rows whose quote one of this run's flows
created (the `quote_id` on its journal `flow` record). A store that outlives runs (the
compose stack's Redis) holds earlier runs' refunds, and their history is not this run's
doing. A target that declares a ledger which then cannot be read fails `ledger_readable`:
an unread ledger proves nothing, so it must never pass as "not checked".

The journal side is folded as records come (`FlowChecks`): `one_outcome_per_flow` holds
only the flows in flight (a start adds one, its end removes it) and the replica of each one's
latest round, the mutant check counts as it goes, and what the ledger checks keep is one entry
per quote a refund flow created (two flag bits) plus, for refund flows that held a refund and
settled, and for mutants, a (flow id, outcome or mutation, quote id) tuple (a settled one also
its last round's replica): nothing for a flow without a quote. docs/figures.md gives the figure.
An example names where its break was observed when a round of its flow was seen: `(last round
on r2)`, the replica that answered the flow's last round, which the hunt's failure signature
reads (`harness.hunt.signature`).

`no_mutant_accepted` judges the fuzzer: every mutated requestState a `fuzz` flow sent
must have been refused, never run, never answered with a 5xx, never left to hang; and
with a ledger, no mutant may have released its flow's refund.

`identical_calls_agree` and `no_call_hung` judge the race probes (`race` flows, `harness.load.races`): the two
identical answers a flow raced must tell one story (one released, the other refused as already answered; or
the same refusal twice), and no raced call may be left hanging past its watchdog. Both are unchecked in a run
with no race. At most one release per refund under a race is `no_double_release`'s, from the ledger.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.config.flows import FLOW_KINDS
from harness.config.mutations import Mutation
from harness.journal.records import RecordType
from harness.load.mutations import FINDINGS
from harness.vocabulary import INVARIANTS as INVARIANTS

MUTANT_FINDINGS = frozenset(answer.value for answer in FINDINGS)
REPLAY_COMPLETED = Mutation.REPLAY_COMPLETED.value

MUTANT_INVARIANT = "no_mutant_accepted"
"""The fuzzer's invariant: it applies to a run whose flows sent mutants."""
RACE_INVARIANTS = ("identical_calls_agree", "no_call_hung")
"""The race probes' invariants: checked only in a run where a race flow raced."""
JOURNAL_INVARIANTS = ("one_outcome_per_flow", MUTANT_INVARIANT, *RACE_INVARIANTS)
"""The invariants judged from the journal alone."""
LEDGER_INVARIANTS = tuple(name for name in INVARIANTS if name not in JOURNAL_INVARIANTS)
"""The invariants that need the target's ledger: unchecked when the target declares none."""

_REFUND_FLOWS = frozenset(name for name, model in FLOW_KINDS.items() if model.settles_refunds)
"""The kinds whose held refunds are settled by their leads' answers alone (`FlowKind.settles_refunds`)."""
_NOT_ANSWERED_YES = {"declined", "cancelled", "abandoned"}
_RELEASED = ("requested", "paid")
_UNASKED = "unasked"
"""A refund flow that held a refund and ended with no answer at all: its host's client could not be asked
(-32021: it declared no mode the shop needed; -32603: a 2025 client given an input request)."""
EXAMPLES = 5


@dataclass
class InvariantResult:
    """One invariant: how often it was broken, and a few examples to start debugging from.

    The same type where it is judged (`FlowChecks.results`), journaled (an `invariant` record, its
    `detail` the examples) and read back for the verdict (`harness.folding.checks.RunChecks`).
    """

    name: str
    violations: int = 0
    examples: list[str] = field(default_factory=list)
    checked: bool = True
    """False when the target has nothing to check it against (no shop ledger)."""

    @property
    def passed(self) -> bool:
        return self.violations == 0

    def violate(self, example: str) -> None:
        self.violations += 1
        if len(self.examples) < EXAMPLES:
            self.examples.append(example)

    def as_dict(self) -> dict[str, Any]:
        return {"invariant": self.name, "checked": self.checked, "violations": self.violations,
                "passed": self.passed, "detail": self.examples or None}


_HELD, _ACCEPTED = 1, 2


@dataclass
class FlowChecks:
    """The journal side of the invariants, folded one start and one flow record at a time."""

    in_flight: dict[str, int] = field(default_factory=dict)
    """Starts seen per flow id not yet ended: a flow's entry goes when its outcome comes."""
    one_outcome: InvariantResult = field(default_factory=lambda: InvariantResult("one_outcome_per_flow"))
    mutants: InvariantResult = field(default_factory=lambda: InvariantResult(MUTANT_INVARIANT))
    agreed: InvariantResult = field(default_factory=lambda: InvariantResult("identical_calls_agree", checked=False))
    hung: InvariantResult = field(default_factory=lambda: InvariantResult("no_call_hung", checked=False))
    """The race probes' invariants: checked once a race flow has raced."""
    last_round_on: dict[str, str] = field(default_factory=dict)
    """The replica that answered the latest round of each flow in flight (gone when its outcome comes): where a break
    of that flow was observed, which its example says (`LAST_ROUND_ON`)."""
    quotes: dict[str, int] = field(default_factory=dict)
    """Each quote this run's flows created: _HELD if a flow held its refund, _ACCEPTED if a lead accepted it."""
    settled: list[tuple[str, str, str, str | None]] = field(default_factory=list)
    """(flow id, outcome, quote id, the replica of its last round) of refund flows that held a refund and then
    completed or said no."""
    mutated: list[tuple[str, str, str]] = field(default_factory=list)
    """(mutation, flow id, quote id) of mutated flows that had a quote (replays aside)."""

    def add(self, record: Mapping[str, Any]) -> None:
        kind = record.get("type")
        if kind == RecordType.ROUND:
            self.round(record)
        elif kind == RecordType.START:
            self.start(record)
        elif kind == RecordType.FLOW:
            self.end(record)

    def round(self, record: Mapping[str, Any]) -> None:
        """A round of a flow in flight: its replica is where that flow was last seen."""
        flow_id, replica = record.get("flow_id"), record.get("replica")
        if flow_id in self.in_flight and isinstance(replica, str):
            self.last_round_on[flow_id] = replica

    def start(self, record: Mapping[str, Any]) -> None:
        flow_id = record["flow_id"]
        self.in_flight[flow_id] = self.in_flight.get(flow_id, 0) + 1

    def end(self, flow: Mapping[str, Any]) -> None:
        started = self.in_flight.pop(flow["flow_id"], 0)
        replica = self.last_round_on.pop(flow["flow_id"], None)
        if started != 1:
            self.one_outcome.violate(f"{flow['flow_id']}: started {started} times, ended 1 times{_on(replica)}")
        if flow.get("mutant_answer") in MUTANT_FINDINGS:
            self.mutants.violate(f"{flow.get('mutation')}: {flow['flow_id']} {flow['mutant_answer']} "
                                 f"({flow.get('mutant_detail')}, {flow.get('mutant_length')} characters)")
        if flow.get("race") is not None:
            self._raced(flow)
        quote = flow.get("quote_id")
        if not quote:
            return
        marks = self.quotes.get(quote, 0)
        if flow.get("held"):
            marks |= _HELD
        if "accept" in (flow.get("answers") or []):
            marks |= _ACCEPTED
        self.quotes[quote] = marks
        outcome = flow["outcome"]
        if flow.get("flow") in _REFUND_FLOWS and flow.get("held") and \
                (outcome == "completed" or outcome in _NOT_ANSWERED_YES):
            self.settled.append((flow["flow_id"], outcome, quote, replica))
        elif flow.get("flow") in _REFUND_FLOWS and flow.get("held") and not flow.get("answers"):
            self.settled.append((flow["flow_id"], _UNASKED, quote, replica))  # -32021, -32603: nobody was asked
        if flow.get("mutant_answer") is not None and flow.get("mutation") != REPLAY_COMPLETED:
            self.mutated.append((str(flow.get("mutation")), flow["flow_id"], quote))

    def _raced(self, flow: Mapping[str, Any]) -> None:
        """A race flow's two calls: do their answers agree, and did either hang?"""
        self.agreed.checked = self.hung.checked = True
        answers, watch = flow.get("race_answers"), flow.get("race_watch")
        where = f"{flow['flow_id']} {flow.get('race')} on {_listed(flow.get('race_replicas'))}"
        if flow.get("race_agreed") is False:
            self.agreed.violate(f"{where}: {_listed(answers)} ({flow.get('refund_id') or flow.get('quote_id')})")
        hung = [index for index, state in enumerate(watch if isinstance(watch, list) else []) if state == "hung"]
        for index in hung:
            self.hung.violate(f"{where}: call {index + 1} hung")

    def results(self, ledger: list[dict[str, Any]] | None, *, ledger_error: str | None = None) -> list[InvariantResult]:
        """Every invariant's result, judged on this run's flows and the ledger rows of the quotes they created.

        `ledger` None with `ledger_error` None: the target declares no ledger, so the ledger
        invariants are unchecked. `ledger` None with `ledger_error` set: the declared ledger
        could not be read, a `ledger_readable` violation naming the error.
        """
        results = {name: InvariantResult(name) for name in INVARIANTS}
        one_outcome = results["one_outcome_per_flow"] = _copy(self.one_outcome)
        for flow_id, started in self.in_flight.items():
            one_outcome.violate(f"{flow_id}: started {started} times, ended 0 times"
                                f"{_on(self.last_round_on.get(flow_id))}")
        results[MUTANT_INVARIANT] = _copy(self.mutants)
        results["identical_calls_agree"], results["no_call_hung"] = _copy(self.agreed), _copy(self.hung)
        if ledger is None:
            for name in LEDGER_INVARIANTS:
                results[name].checked = False
            if ledger_error is not None:
                results["ledger_readable"].checked = True
                results["ledger_readable"].violate(f"the target's ledger could not be read: {ledger_error}")
            return list(results.values())
        ours = [row for row in ledger if row.get("quote_id") in self.quotes]
        seen_on = {quote: replica for _, _, quote, replica in self.settled if replica is not None}
        for row in ours:
            on = _on(seen_on.get(row["quote_id"]))
            if row["released"] > 1:
                results["no_double_release"].violate(_refund(row) + f" released {row['released']} times{on}")
            if row["paid"] > 1:
                results["no_double_payout"].violate(_refund(row) + f" paid {row['paid']} times{on}")
            if self.quotes[row["quote_id"]] == _HELD and row["released"]:
                results["no_release_without_accept"].violate(_refund(row) + f" released with no accepted answer{on}")
        released = {row["quote_id"]: row for row in ours if row["released"]}
        for mutation, flow_id, quote in self.mutated:
            if quote in released:
                row = released[quote]
                results[MUTANT_INVARIANT].violate(f"{mutation}: {flow_id} left {row['refund_id']} {row['status']}")
        self._settled_match_ledger(results, {row["quote_id"]: row for row in ours})
        return list(results.values())

    def _settled_match_ledger(self, results: dict[str, InvariantResult], by_quote: dict[str, dict]) -> None:
        for flow_id, outcome, quote, replica in self.settled:
            row = by_quote.get(quote)
            if row is None:
                continue
            on = _on(replica)
            if outcome == "completed" and row["status"] not in _RELEASED:
                results["confirmed_refund_released"].violate(
                    f"{flow_id}: completed, but {row['refund_id']} is {row['status']}{on}")
            if outcome in _NOT_ANSWERED_YES and row["status"] != "needs_confirmation":
                results["declined_refund_still_held"].violate(
                    f"{flow_id}: {outcome}, but {row['refund_id']} is {row['status']}{on}")
            if outcome == _UNASKED and row["status"] != "needs_confirmation":
                results["unasked_refund_still_held"].violate(
                    f"{flow_id}: its lead was never asked, but {row['refund_id']} is {row['status']}{on}")


def check_invariants(ledger: list[dict[str, Any]] | None, starts: Iterable[Mapping[str, Any]],
                     flows: Iterable[Mapping[str, Any]], *, ledger_error: str | None = None) -> list[InvariantResult]:
    """`FlowChecks.results` over lists of start and flow records (every start, then every flow)."""
    checks = FlowChecks()
    for start in starts:
        checks.start(start)
    for flow in flows:
        checks.end(flow)
    return checks.results(ledger, ledger_error=ledger_error)


LAST_ROUND_ON = " (last round on {replica})"
"""How an example says where its break was observed: the replica that answered the flow's last round (for a refund,
the flow that settled it); absent when no round of it was seen (`harness.hunt.signature` reads it back)."""


def _on(replica: str | None) -> str:
    return LAST_ROUND_ON.format(replica=replica) if replica else ""


def _copy(result: InvariantResult) -> InvariantResult:
    return InvariantResult(result.name, result.violations, list(result.examples), result.checked)


def _listed(values: Any) -> str:
    """A record's list of two (answers, replicas) as `a / b`."""
    return " / ".join(str(value) for value in values) if isinstance(values, list) else "?"


def _refund(row: dict[str, Any]) -> str:
    return f"{row['refund_id']} (quote {row['quote_id']})"
