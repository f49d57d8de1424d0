"""The top errors of a run: what the servers said when rounds failed, counted, from the journal.

A rejection count says something broke; the server's words say what. Every failed round
with a message journals it (`error` on its `round` record), and this fold groups those
rounds by flow, tool, round and the message's pattern (ids, numbers, UUIDs and quoted
values as placeholders, `harness.mrtr.error_text.error_pattern`), so "order O-1001 has no
item 'box'" and "order O-1002 has no item 'tape'" are one row of two. The closing table,
report.html and summary.json all show these rows.

A round that carried the person's decline and got the tool's refusal back (`expected` on
its record instead of `error`) is no error: it is grouped the same way and shown apart,
as an expected answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.journal.records import RecordType, advance_time_zero
from harness.journal.writer import JournalView
from harness.mrtr.error_text import error_pattern

TOP_ERRORS = 10
"""Rows a report shows: the errors that matter are the frequent ones; the journal has every one."""


@dataclass(frozen=True)
class ErrorGroup:
    """One row: how often an error was seen where, when first and last (seconds since the run's time zero)."""

    count: int
    flow: str
    tool: str
    round: int
    message: str
    """The pattern: what varied from one flow to the next replaced by placeholders."""
    example: str
    """The first message seen, as journaled (already scrubbed of secrets)."""
    first: float | None
    last: float | None

    def as_dict(self) -> dict[str, Any]:
        return {"count": self.count, "flow": self.flow, "tool": self.tool, "round": self.round,
                "message": self.message, "example": self.example,
                "first": None if self.first is None else round(self.first, 3),
                "last": None if self.last is None else round(self.last, 3)}


@dataclass
class _Seen:
    count: int
    example: str
    first: float
    last: float


@dataclass
class ErrorTable(JournalView):
    """Failed rounds with a message, grouped by (flow, tool, round, pattern), in one pass over the journal."""

    started: float | None = None
    groups: dict[tuple[str, str, int, str], _Seen] = field(default_factory=dict)
    expected: dict[tuple[str, str, int, str], _Seen] = field(default_factory=dict)
    """Expected answers (a tool error answering the person's decline): grouped alike, shown apart."""

    def add(self, record: Mapping[str, Any]) -> None:
        if record.get("type") != RecordType.ROUND:
            self.started = advance_time_zero(self.started, record)
            return
        self.add_round(record)

    def add_round(self, record: Mapping[str, Any]) -> None:
        """`add` for a `round` record (`harness.folding.read` routes each kind straight to its own)."""
        message = record.get("error")
        if message and isinstance(message, str):
            _count(self.groups, record, message)
        message = record.get("expected")
        if message and isinstance(message, str):
            _count(self.expected, record, message)

    def top(self, limit: int = TOP_ERRORS) -> list[ErrorGroup]:
        """The `limit` most frequent errors, most frequent first (then the earliest)."""
        return self._ranked(self.groups, limit)

    def top_expected(self, limit: int = TOP_ERRORS) -> list[ErrorGroup]:
        """The most frequent expected answers, as `top` ranks errors."""
        return self._ranked(self.expected, limit)

    def _ranked(self, groups: dict[tuple[str, str, int, str], _Seen], limit: int) -> list[ErrorGroup]:
        ranked = sorted(groups.items(), key=lambda item: (-item[1].count, item[1].first, item[0]))
        return [ErrorGroup(seen.count, flow, tool, number, pattern, seen.example, self._since(seen.first),
                           self._since(seen.last))
                for (flow, tool, number, pattern), seen in ranked[:limit]]

    def _since(self, t: float) -> float | None:
        return None if self.started is None else t - self.started


def _count(groups: dict[tuple[str, str, int, str], _Seen], record: Mapping[str, Any], message: str) -> None:
    """One more round with `message` in its group (flow, tool, round, the message's pattern)."""
    t = float(record["t"])
    key = (str(record.get("flow")), str(record.get("tool")), int(record.get("round") or 0), error_pattern(message))
    seen = groups.get(key)
    if seen is None:
        groups[key] = _Seen(1, message, t, t)
        return
    seen.count += 1
    seen.first, seen.last = min(seen.first, t), max(seen.last, t)
