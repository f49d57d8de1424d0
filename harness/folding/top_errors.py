"""The top errors of a run: what the servers said when rounds failed, counted, from the journal.

A rejection count says something broke; the server's words say what. Every failed round
with a message journals it (`error` on its `round` record), and this fold groups those
rounds by flow, tool, round and the message's pattern (ids, numbers, UUIDs and quoted
values as placeholders, `harness.mrtr.error_text.error_pattern`), so "order O-1001 has no
item 'box'" and "order O-1002 has no item 'tape'" are one row of two. The closing table,
report.html and summary.json all show these rows.

A group also keeps a few example trace ids (`TRACE_EXAMPLES`): those of its latest rounds whose record carries
the `trace_id` of the round's client span (tracing on: docs/tracing.md), to paste into a tracing backend.
Bounded, whatever the count; the latest by the rounds' own time, so every order of reading keeps the same.

A round that carried the person's decline and got the tool's refusal back (`expected` on
its record instead of `error`) is no error: it is grouped the same way and shown apart,
as an expected answer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from harness.journal.records import RecordType, advance_time_zero
from harness.journal.writer import JournalView
from harness.mrtr.error_text import error_pattern

GROUPS_MAX = 1000
"""Distinct groups a table keeps (of errors, and of expected answers): a server that words every error apart (an id
the pattern does not know, random text) must not grow the fold without bound. The rounds of any group past it are
counted in one row of their own, `OVERFLOW_MESSAGE`, so every failed round is still counted."""
OVERFLOW_MESSAGE = f"(errors in more than {GROUPS_MAX} distinct groups: the rest, counted together)"
TOP_ERRORS = 10
"""Rows a report shows: the errors that matter are the frequent ones; the journal has every one."""
TRACE_EXAMPLES = 3
"""Trace ids a group keeps: a few to look up, never every one."""
_TRACE_ID: Final = re.compile(r"[0-9a-f]{32}")
_NO_TRACE: Final = "0" * 32


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
    trace_ids: tuple[str, ...] = ()
    """The trace ids of its latest rounds that carried one, newest first (at most `TRACE_EXAMPLES`)."""

    def as_dict(self) -> dict[str, Any]:
        return {"count": self.count, "flow": self.flow, "tool": self.tool, "round": self.round,
                "message": self.message, "example": self.example,
                "first": None if self.first is None else round(self.first, 3),
                "last": None if self.last is None else round(self.last, 3),
                "trace_ids": list(self.trace_ids)}


@dataclass
class _Seen:
    count: int
    example: str
    first: float
    last: float
    traced: list[tuple[float, str]] = field(default_factory=list)
    """(round time, trace id) of the latest rounds that carried one, newest first: at most `TRACE_EXAMPLES`."""

    def merge(self, other: _Seen) -> None:
        """The group as later records saw it too (`harness.folding.merging`): the first example stays."""
        self.count += other.count
        self.first, self.last = min(self.first, other.first), max(self.last, other.last)
        for t, trace_id in other.traced:
            self.note_trace(t, trace_id)

    def note_trace(self, t: float, trace_id: Any) -> None:
        """Keep `trace_id` if it is one (32 lowercase hex, not all zeros) and among the latest by `t`."""
        if not isinstance(trace_id, str) or trace_id == _NO_TRACE or _TRACE_ID.fullmatch(trace_id) is None:
            return
        traced = self.traced
        if len(traced) >= TRACE_EXAMPLES and (t, trace_id) <= traced[-1]:
            return
        traced.append((t, trace_id))
        traced.sort(reverse=True)
        del traced[TRACE_EXAMPLES:]


@dataclass
class ErrorTable(JournalView):
    """Failed rounds with a message, grouped by (flow, tool, round, pattern), in one pass over the journal."""

    started: float | None = None
    groups: dict[tuple[str, str, int, str], _Seen] = field(default_factory=dict)
    expected: dict[tuple[str, str, int, str], _Seen] = field(default_factory=dict)
    """Expected answers (a tool error answering the person's decline): grouped alike, shown apart."""

    def merge(self, theirs: ErrorTable) -> None:
        """The table of the records after this one's too (`harness.folding.merging`), still within `GROUPS_MAX`."""
        from harness.folding.merging import merge_fields

        merge_fields(self, theirs)
        for groups in (self.groups, self.expected):
            _bound(groups)

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
                           self._since(seen.last), tuple(trace_id for _, trace_id in seen.traced))
                for (flow, tool, number, pattern), seen in ranked[:limit]]

    def _since(self, t: float) -> float | None:
        return None if self.started is None else t - self.started


def _count(groups: dict[tuple[str, str, int, str], _Seen], record: Mapping[str, Any], message: str) -> None:
    """One more round with `message` in its group (flow, tool, round, the message's pattern)."""
    t = float(record["t"])
    key = (str(record.get("flow")), str(record.get("tool")), int(record.get("round") or 0), error_pattern(message))
    seen = groups.get(key)
    if seen is None and len(groups) >= GROUPS_MAX:
        key = _OVERFLOW
        seen = groups.get(key)
    if seen is None:
        seen = groups[key] = _Seen(1, message, t, t)
    else:
        seen.count += 1
        seen.first, seen.last = min(seen.first, t), max(seen.last, t)
    if "trace_id" in record:
        seen.note_trace(t, record["trace_id"])


_OVERFLOW: Final = ("*", "*", 0, OVERFLOW_MESSAGE)
"""The group of every round past `GROUPS_MAX` groups."""


def _bound(groups: dict[tuple[str, str, int, str], _Seen]) -> None:
    """Fold the groups past `GROUPS_MAX` (the latest made) into the overflow group."""
    if len(groups) <= GROUPS_MAX:
        return
    rest = groups.pop(_OVERFLOW, None)
    for key in list(groups)[GROUPS_MAX:]:
        seen = groups.pop(key)
        if rest is None:
            rest = seen
        else:
            rest.merge(seen)
    if rest is not None:
        groups[_OVERFLOW] = rest
