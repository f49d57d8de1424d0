"""The rollback's debts: what chaos changed and must put back, newest last, paid newest first.

One `RollbackDebts` per run: `ChaosRunner` owes a `command` step's `rollback` on it, and
`CommandTarget` owes each change made by command (a resume, a TTL set back, a rotation
finished forward) on the same one, so the rollback undoes them in the reverse order they were made.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass

__all__ = ["RollbackDebts"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Debt:
    what: str
    """what paying it puts back, as the rollback's record says it."""
    how: Callable[[], object]
    key: Hashable = None
    """what pays it off early (a resume that ran, a rotation done); None: only the rollback does."""


class RollbackDebts:
    """What the rollback owes, newest last."""

    def __init__(self) -> None:
        self._owed: list[_Debt] = []

    def __len__(self) -> int:
        return len(self._owed)

    def owe(self, what: str, how: Callable[[], object], key: Hashable = None) -> None:
        """Something the rollback must put back (`key`: what pays it off early, see `paid`)."""
        self._owed.append(_Debt(what, how, key))

    def paid(self, key: Hashable) -> None:
        """The debts under `key` were paid by the action itself: the rollback owes them no more."""
        self._owed = [debt for debt in self._owed if debt.key is None or debt.key != key]

    def pay(self) -> tuple[list[str], list[str]]:
        """Every debt, newest first; one that fails is reported and the others still run: (undone, errors)."""
        undone: list[str] = []
        errors: list[str] = []
        while self._owed:
            debt = self._owed.pop()
            try:
                debt.how()
                undone.append(debt.what)
            except Exception as exc:  # noqa: BLE001 - each debt is tried; the failure is reported
                logger.warning("the rollback could not put back %s: %s", debt.what, exc)
                errors.append(f"{type(exc).__name__}: {exc}")
        return undone, errors
