"""Nothing lost, nothing paid twice: the ledger invariants, checked from the shop's ledger and the journal.

Whatever the clients believed, the ledger is what happened: a refund released twice or
paid twice shows there. The journal says what each flow's lead answered, so together
they prove that nothing was released without an accepted answer, that every confirmed
flow's refund went out and that every declined or abandoned one is still held. A
violation fails the run whatever the thresholds say.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from harness.shop.catalogue import POLICY_LIMIT_CENTS

INVARIANTS = (
    "no_double_release",
    "no_double_payout",
    "no_release_without_accept",
    "one_outcome_per_flow",
    "confirmed_refund_released",
    "declined_refund_still_held",
)
_REFUND_FLOWS = {"refund", "replay", "tamper", "change-args"}
_NOT_ANSWERED_YES = {"declined", "cancelled", "abandoned"}
EXAMPLES = 5


@dataclass
class InvariantResult:
    name: str
    checked: bool = True
    violations: int = 0
    examples: list[str] = field(default_factory=list)

    def violate(self, example: str) -> None:
        self.violations += 1
        if len(self.examples) < EXAMPLES:
            self.examples.append(example)


def check_invariants(ledger: list[dict[str, Any]] | None, starts: Iterable[dict[str, Any]],
                     flows: Iterable[dict[str, Any]]) -> list[InvariantResult]:
    """Every invariant's result; ledger ones are marked unchecked when the target has no shop ledger."""
    starts, flows = list(starts), list(flows)
    results = {name: InvariantResult(name) for name in INVARIANTS}
    _one_outcome_per_flow(results["one_outcome_per_flow"], starts, flows)
    if ledger is None:
        for name in INVARIANTS:
            if name != "one_outcome_per_flow":
                results[name].checked = False
        return list(results.values())
    by_quote = {row["quote_id"]: row for row in ledger}
    for row in ledger:
        if row["released"] > 1:
            results["no_double_release"].violate(f"{row['refund_id']} released {row['released']} times")
        if row["paid"] > 1:
            results["no_double_payout"].violate(f"{row['refund_id']} paid {row['paid']} times")
    _release_needs_accept(results["no_release_without_accept"], ledger, flows)
    _flows_match_ledger(results, by_quote, flows)
    return list(results.values())


def ledger_violations(ledger: list[dict[str, Any]]) -> int:
    """The live check a run can afford while it goes: double releases and payouts only."""
    return sum(1 for row in ledger if row["released"] > 1 or row["paid"] > 1)


def _one_outcome_per_flow(result: InvariantResult, starts: list[dict], flows: list[dict]) -> None:
    started = Counter(record["flow_id"] for record in starts)
    ended = Counter(record["flow_id"] for record in flows)
    for flow_id in started.keys() | ended.keys():
        if started[flow_id] != 1 or ended[flow_id] != 1:
            result.violate(f"{flow_id}: started {started[flow_id]} times, ended {ended[flow_id]} times")


def _release_needs_accept(result: InvariantResult, ledger: list[dict], flows: list[dict]) -> None:
    accepted = {flow.get("quote_id") for flow in flows if "accept" in (flow.get("answers") or [])}
    for row in ledger:
        if row["amount_cents"] > POLICY_LIMIT_CENTS and row["released"] and row["quote_id"] not in accepted:
            result.violate(f"{row['refund_id']} (quote {row['quote_id']}) released with no accepted answer")


def _flows_match_ledger(results: dict[str, InvariantResult], by_quote: dict[str, dict], flows: list[dict]) -> None:
    for flow in flows:
        if flow.get("flow") not in _REFUND_FLOWS or not flow.get("held") or flow.get("quote_id") not in by_quote:
            continue
        row = by_quote[flow["quote_id"]]
        if flow["outcome"] == "completed" and row["status"] not in ("requested", "paid"):
            results["confirmed_refund_released"].violate(
                f"{flow['flow_id']}: completed, but {row['refund_id']} is {row['status']}")
        if flow["outcome"] in _NOT_ANSWERED_YES and row["status"] != "needs_confirmation":
            results["declined_refund_still_held"].violate(
                f"{flow['flow_id']}: {flow['outcome']}, but {row['refund_id']} is {row['status']}")
