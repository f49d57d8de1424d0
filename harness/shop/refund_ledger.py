"""The shop's refund ledger: refunds, their status transitions, and how often each happened.

The ledger is the ground truth the harness's invariants read at the end of a run: a
refund released twice or paid twice shows here whatever the clients believed. Every
transition is a compare-and-set on the shared store, so two replicas (or a replayed
retry) racing to release the same refund cannot both win, and the loser is counted
as a conflict: the 409 that stopped it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from harness.shop.orders import POLICY_LIMIT_CENTS, format_cents
from harness.shop.store import Store


class RefundStatus(StrEnum):
    NEEDS_CONFIRMATION = "needs_confirmation"  # held: a lead must confirm it
    REQUESTED = "requested"  # released: the refund is on its way
    CANCELLED = "cancelled"  # a held refund withdrawn
    PAID = "paid"  # paid out through the payment provider


class Conflict(Exception):
    """A transition asked of a refund that is not in the state it requires: the API's 409."""

    def __init__(self, refund: Refund, wanted: str) -> None:
        super().__init__(f"refund {refund.refund_id} is {refund.status}, so it cannot be {wanted}")
        self.refund = refund


@dataclass(frozen=True, slots=True)
class Refund:
    refund_id: str
    order_id: str
    quote_id: str
    amount_cents: int
    status: RefundStatus

    def public(self) -> dict[str, Any]:
        """The refund as the API and the MCP tools show it."""
        return {**asdict(self), "status": str(self.status), "amount": format_cents(self.amount_cents)}

    def encode(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def decode(cls, text: str) -> Refund:
        data = json.loads(text)
        return cls(**{**data, "status": RefundStatus(data["status"])})


# Store namespaces: one place so the ledger listing and the transitions agree.
_REFUND, _BY_QUOTE, _SEQUENCE = "refund", "refund-by-quote", "sequence"
_COUNTERS = ("released", "paid", "release_conflicts", "payout_conflicts")


class Ledger:
    """Refund records and transition counters on a shared store."""

    def __init__(self, store: Store, *, release_guard: bool = True) -> None:
        """`release_guard=False`: a release of a refund already released succeeds and is counted again (a
        system of record with no compare-and-set on it), so only the replicas' once-only record stops a replay."""
        self.release_guard = release_guard
        self._store = store

    def create(self, order_id: str, quote_id: str, amount_cents: int) -> tuple[Refund, bool]:
        """Create the refund for a quote, or return the one that quote already made.

        Idempotent per quote, so a tool that runs again on every round (or on another
        replica) finds the same refund instead of making a second one. A refund at or
        under the policy limit is released at once; above it, it is held.
        """
        existing = self._store.get(_BY_QUOTE, quote_id)
        if existing is not None:
            return self.get_required(existing), False
        refund_id = f"R-{self._store.incr(_SEQUENCE, 'refund'):05d}"
        held = amount_cents > POLICY_LIMIT_CENTS
        status = RefundStatus.NEEDS_CONFIRMATION if held else RefundStatus.REQUESTED
        refund = Refund(refund_id, order_id, quote_id, amount_cents, status)
        if not self._store.add(_BY_QUOTE, quote_id, refund_id):
            return self.get_required(self._store.get(_BY_QUOTE, quote_id) or ""), False  # lost a race: theirs
        self._store.put(_REFUND, refund_id, refund.encode())
        if not held:
            self._store.incr("released", refund_id)
        return refund, True

    def get(self, refund_id: str) -> Refund | None:
        text = self._store.get(_REFUND, refund_id)
        return Refund.decode(text) if text is not None else None

    def get_required(self, refund_id: str) -> Refund:
        refund = self.get(refund_id)
        if refund is None:
            raise KeyError(refund_id)
        return refund

    def confirm(self, refund_id: str) -> Refund:
        """Release a held refund; anything else is a Conflict (and is counted)."""
        if not self.release_guard and self.get_required(refund_id).status == RefundStatus.REQUESTED:
            self._store.incr("released", refund_id)  # released again: the money goes out twice
            return self.get_required(refund_id)
        return self._transition(refund_id, RefundStatus.NEEDS_CONFIRMATION, RefundStatus.REQUESTED, "released",
                                "release_conflicts", "confirmed")

    def cancel(self, refund_id: str) -> Refund:
        """Withdraw a held refund; anything else is a Conflict."""
        return self._transition(refund_id, RefundStatus.NEEDS_CONFIRMATION, RefundStatus.CANCELLED, None, None,
                                "cancelled")

    def pay(self, refund_id: str) -> Refund:
        """Pay out a released refund; a second payout is a Conflict (and is counted)."""
        return self._transition(refund_id, RefundStatus.REQUESTED, RefundStatus.PAID, "paid", "payout_conflicts",
                                "paid")

    def _transition(self, refund_id: str, source: RefundStatus, target: RefundStatus, counter: str | None,
                    conflict_counter: str | None, wanted: str) -> Refund:
        before = self.get_required(refund_id)
        if before.status == source:
            after = Refund(before.refund_id, before.order_id, before.quote_id, before.amount_cents, target)
            if self._store.swap(_REFUND, refund_id, before.encode(), after.encode()):
                if counter is not None:
                    self._store.incr(counter, refund_id)
                return after
            before = self.get_required(refund_id)  # somebody else moved it first
        if conflict_counter is not None:
            self._store.incr(conflict_counter, refund_id)
        raise Conflict(before, wanted)

    def entries(self) -> list[dict[str, Any]]:
        """Every refund with how many times it was released and paid, for the invariant checks."""
        counts = {name: dict(self._store.items(name)) for name in _COUNTERS}
        rows = []
        for refund_id, text in self._store.items(_REFUND):
            refund = Refund.decode(text)
            row = refund.public()
            row.update({name: int(counts[name].get(refund_id, 0)) for name in _COUNTERS})
            rows.append(row)
        rows.sort(key=lambda row: row["refund_id"])
        return rows
