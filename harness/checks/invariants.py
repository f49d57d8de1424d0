"""Nothing lost, nothing paid twice: the ledger invariants, checked from the shop's ledger and the journal.

Whatever the clients believed, the ledger is what happened: a refund released twice or
paid twice shows there. The journal says what each flow's lead answered, so together
they prove that nothing was released without an accepted answer, that every confirmed
flow's refund went out and that every declined or abandoned one is still held. A
violation fails the run whatever the thresholds say.

Only this run's refunds are judged: the ledger rows whose quote one of this run's flows
created (the `quote_id` on its journal `flow` record). A store that outlives runs (the
compose stack's Redis) holds earlier runs' refunds, and their history is not this run's
doing. A target that declares a ledger which then cannot be read fails `ledger_readable`:
an unread ledger proves nothing, so it must never pass as "not checked".

`no_mutant_accepted` judges the fuzzer: every mutated requestState a `fuzz` flow sent
must have been refused, never run, never answered with a 5xx, never left to hang; and
with a ledger, no mutant may have released its flow's refund.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from harness.config.mutations import Mutation
from harness.journal.figures import Fields
from harness.load.mutations import FINDINGS

MUTANT_FINDINGS = frozenset(answer.value for answer in FINDINGS)
REPLAY_COMPLETED = Mutation.REPLAY_COMPLETED.value

INVARIANTS = (
    "ledger_readable",
    "no_double_release",
    "no_double_payout",
    "no_release_without_accept",
    "one_outcome_per_flow",
    "confirmed_refund_released",
    "declined_refund_still_held",
    "no_mutant_accepted",
)
JOURNAL_INVARIANTS = ("one_outcome_per_flow", "no_mutant_accepted")
"""The invariants judged from the journal alone."""
LEDGER_INVARIANTS = tuple(name for name in INVARIANTS if name not in JOURNAL_INVARIANTS)
"""The invariants that need the target's ledger: unchecked when the target declares none."""

_REFUND_FLOWS = {"refund", "replay", "tamper", "change-args"}
_NOT_ANSWERED_YES = {"declined", "cancelled", "abandoned"}
_RELEASED = ("requested", "paid")
EXAMPLES = 5


@dataclass
class InvariantTally:
    name: str
    checked: bool = True
    violations: int = 0
    examples: list[str] = field(default_factory=list)

    def violate(self, example: str) -> None:
        self.violations += 1
        if len(self.examples) < EXAMPLES:
            self.examples.append(example)


def check_invariants(ledger: list[dict[str, Any]] | None, starts: Iterable[Fields],
                     flows: Iterable[Fields], *, ledger_error: str | None = None) -> list[InvariantTally]:
    """Every invariant's result, judged on this run's flows and the ledger rows of the quotes they created.

    `ledger` None with `ledger_error` None: the target declares no ledger, so the ledger
    invariants are unchecked. `ledger` None with `ledger_error` set: the declared ledger
    could not be read, a `ledger_readable` violation naming the error.
    """
    starts, flows = list(starts), list(flows)
    results = {name: InvariantTally(name) for name in INVARIANTS}
    _one_outcome_per_flow(results["one_outcome_per_flow"], starts, flows)
    _no_mutant_accepted(results["no_mutant_accepted"], flows)
    if ledger is None:
        for name in LEDGER_INVARIANTS:
            results[name].checked = False
        if ledger_error is not None:
            results["ledger_readable"].checked = True
            results["ledger_readable"].violate(f"the target's ledger could not be read: {ledger_error}")
        return list(results.values())
    ours = this_runs_refunds(ledger, flows)
    for row in ours:
        if row["released"] > 1:
            results["no_double_release"].violate(_refund(row) + f" released {row['released']} times")
        if row["paid"] > 1:
            results["no_double_payout"].violate(_refund(row) + f" paid {row['paid']} times")
    _release_needs_accept(results["no_release_without_accept"], ours, flows)
    _mutants_left_ledger_alone(results["no_mutant_accepted"], ours, flows)
    _flows_match_ledger(results, {row["quote_id"]: row for row in ours}, flows)
    return list(results.values())


def this_runs_refunds(ledger: list[dict[str, Any]], flows: Iterable[Fields]) -> list[dict[str, Any]]:
    """The ledger rows whose quote a flow of this run created; earlier runs' refunds are left out."""
    quotes = {flow["quote_id"] for flow in flows if flow.get("quote_id")}
    return [row for row in ledger if row.get("quote_id") in quotes]


def ledger_violations(ledger: list[dict[str, Any]]) -> int:
    """The live check a run can afford while it goes: double releases and payouts only.

    It reads the whole ledger: flows still in flight have not journaled their quotes yet.
    """
    return sum(1 for row in ledger if row["released"] > 1 or row["paid"] > 1)


def _refund(row: dict[str, Any]) -> str:
    return f"{row['refund_id']} (quote {row['quote_id']})"


def _one_outcome_per_flow(result: InvariantTally, starts: list[Fields], flows: list[Fields]) -> None:
    started = Counter(record["flow_id"] for record in starts)
    ended = Counter(record["flow_id"] for record in flows)
    for flow_id in started.keys() | ended.keys():
        if started[flow_id] != 1 or ended[flow_id] != 1:
            result.violate(f"{flow_id}: started {started[flow_id]} times, ended {ended[flow_id]} times")


def _release_needs_accept(result: InvariantTally, ours: list[dict], flows: list[Fields]) -> None:
    """A refund this run's journal says was held is released only if some flow on its quote accepted."""
    held = {flow["quote_id"] for flow in flows if flow.get("held") and flow.get("quote_id")}
    accepted = {flow.get("quote_id") for flow in flows if "accept" in (flow.get("answers") or [])}
    for row in ours:
        if row["quote_id"] in held and row["released"] and row["quote_id"] not in accepted:
            result.violate(_refund(row) + " released with no accepted answer")


def _flows_match_ledger(results: dict[str, InvariantTally], by_quote: dict[str, dict], flows: list[Fields]) -> None:
    for flow in flows:
        if flow.get("flow") not in _REFUND_FLOWS or not flow.get("held") or flow.get("quote_id") not in by_quote:
            continue
        row = by_quote[flow["quote_id"]]
        if flow["outcome"] == "completed" and row["status"] not in _RELEASED:
            results["confirmed_refund_released"].violate(
                f"{flow['flow_id']}: completed, but {row['refund_id']} is {row['status']}")
        if flow["outcome"] in _NOT_ANSWERED_YES and row["status"] != "needs_confirmation":
            results["declined_refund_still_held"].violate(
                f"{flow['flow_id']}: {flow['outcome']}, but {row['refund_id']} is {row['status']}")


def _no_mutant_accepted(result: InvariantTally, flows: list[Fields]) -> None:
    """A fuzz flow's mutant that the tool ran on, that got a 5xx or that hung to the timeout (`mutant_answer`).

    Checked in every run, as `one_outcome_per_flow` is: the journal it reads is always
    there, and a run without fuzz flows accepted no mutant.
    """
    for flow in flows:
        if flow.get("mutant_answer") in MUTANT_FINDINGS:
            result.violate(f"{flow.get('mutation')}: {flow['flow_id']} {flow['mutant_answer']} "
                           f"({flow.get('mutant_detail')}, {flow.get('mutant_length')} characters)")


def _mutants_left_ledger_alone(result: InvariantTally, ours: list[dict], flows: list[Fields]) -> None:
    """A mutant that released its flow's refund changed the ledger, whatever the client saw.

    Except a replay: its flow's valid retry released the refund first (a second release
    is `no_double_release`'s to catch).
    """
    released = {row["quote_id"]: row for row in ours if row["released"]}
    for flow in flows:
        if flow.get("mutant_answer") is None or flow.get("mutation") == REPLAY_COMPLETED:
            continue
        row = released.get(flow.get("quote_id"))
        if row is not None:
            result.violate(f"{flow.get('mutation')}: {flow['flow_id']} left {row['refund_id']} {row['status']}")
