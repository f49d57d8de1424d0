"""The shop's refund ledger, as a run reads it: the rows `GET {api}/ledger` lists, or why it could not be read.

A target whose deployment has the shop's API supplies its ledger check (`Target.ledger_check`);
a target without one supplies None, and the ledger invariants are then unchecked. The run
reads it for the invariants at its end and, with `abort_on_violation`, while the load runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LEDGER_TIMEOUT = 30.0
"""Seconds one read of the ledger may take: a whole ledger, at the end of a long run."""


@dataclass(frozen=True)
class LedgerRead:
    """The ledger's refund rows, or (rows None) why they could not be read."""

    refunds: list[dict[str, Any]] | None
    error: str | None = None


class LedgerCheck:
    """The shop's ledger behind one API base URL."""

    def __init__(self, api_url: str) -> None:
        self.api_url = api_url

    def read(self) -> LedgerRead:
        import httpx  # only a target with a ledger needs it, and only here: the load's start-up does not

        try:
            response = httpx.get(f"{self.api_url}/ledger", timeout=LEDGER_TIMEOUT)
            response.raise_for_status()
            return LedgerRead(response.json()["refunds"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            return LedgerRead(None, f"GET {self.api_url}/ledger: {type(exc).__name__}: {exc}")

    def doubled(self) -> int | None:
        """Refunds released or paid more than once, in the whole ledger; None when it could not be read.

        The live check a run can afford while it goes: flows in flight have not journaled their
        quotes yet, so it cannot tell this run's refunds from the others.
        """
        refunds = self.read().refunds
        if refunds is None:
            return None
        return sum(1 for row in refunds if row["released"] > 1 or row["paid"] > 1)


class LedgerAtApi:
    """For a target that knows the shop API's base URL (`api_url`; None: a deployment without it): its ledger."""

    api_url: str | None

    def ledger_check(self) -> LedgerCheck | None:
        return LedgerCheck(self.api_url) if self.api_url else None


class NewDoubles:
    """`abort_on_violation`'s check: a refund released or paid twice since the run first read the ledger.

    What the ledger held at the first read (another run's doing, on a shared store) is
    counted as already there; only a new double release or payout counts.
    """

    def __init__(self, check: LedgerCheck) -> None:
        self.check = check
        self.before: int | None = None

    def mark(self) -> None:
        """Read what the ledger holds now, before the load."""
        self.before = self.check.doubled()

    def grew(self) -> bool:
        now = self.check.doubled()
        if now is None:
            return False
        if self.before is None:
            self.before = now
            return False
        return now > self.before
