"""The live fold's interface, in one place: every query the run puts to its fold process, typed with its reply.

Both sides use these types: the run (`harness.run.live_fold.client`) builds a query and gets back
the query's reply type; the fold process (`harness.run.live_fold.worker`) matches on the query's
type to answer it. Adding a query is one class here and one case in the worker.

On the pipe, to the fold: a `Growth` frame (a journal part grew to a size: the hot path,
no pickle), or a `Request` frame (its id, then the pickled query; `ASK` or `TELL` by its
class). An `Ask` query is answered with one `Reply` carrying the request's id, so the run
hands each reply to its own asker; a `Tell` query has no reply (it takes effect where it
stands among the growths, and if it fails, every later request is answered with that
failure). The pickles travel only between the run and the child it started, never read
from anywhere else.
"""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from harness.folding.figures import RoundKey, RunFigures
from harness.folding.invariants import InvariantResult
from harness.folding.over_time import Timeline
from harness.folding.read import JournalRead
from harness.folding.reconcile import TracedReason
from harness.journal.distributions import Counts
from harness.journal.records import Reconciled

R = TypeVar("R", covariant=True)

HEAD = struct.Struct("<cI")
"""A frame to the fold: its kind and the payload's length."""
GROWTH, ASK, TELL = b"G", b"A", b"T"
"""The kinds: a `Growth`; a `Request` of an `Ask`; a `Request` of a `Tell` (known from the frame, so a query that
cannot be read is still answered, or kept as the next answer, as its kind says)."""
SIZE = struct.Struct("<Q")
REQUEST_ID = struct.Struct("<Q")
"""A request's id, first in its payload (before the pickle, so even a request that cannot be read is answered)."""
REPLY_HEAD = struct.Struct("<QI")
"""A reply: the id of the request it answers, and the pickled (ok, value or error text)'s length."""


# --- the queries ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ask(Generic[R]):
    """A query the fold answers with an `R`, after folding every growth the run sent before it."""


@dataclass(frozen=True)
class Tell:
    """A query with no reply: the fold carries it out exactly where it stands among the growths."""


@dataclass(frozen=True)
class Figures(Ask[RunFigures]):
    """The whole run's figures so far (the probe before the chaos)."""


@dataclass(frozen=True)
class OpenWindow(Tell):
    """Open hypothesis window `name`, fed from here on with the rounds and flows that end at or after `since`;
    window `closing` stops being fed at the same record (the chaos's window ends as the one after it opens).

    A `Tell`: sent with no wait after the batch the journal writes now, so no other greenlet can journal records
    that ended after `since` in between."""

    name: str
    since: float
    closing: str | None = None


@dataclass(frozen=True)
class WindowFigures(Ask[RunFigures | None]):
    """The figures of hypothesis window `name` (None if it was never opened)."""

    name: str


Progress = tuple[int, list[tuple[str, int]]]
"""Flows finished, and the three most frequent rejection reasons with their counts."""


@dataclass(frozen=True)
class ProgressCounts(Ask[Progress]):
    """The progress line's counts."""


@dataclass(frozen=True)
class ReplicaRounds(Ask[dict[str, int]]):
    """Rounds each replica served so far (CPU per round)."""


@dataclass(frozen=True)
class StateSizes(Ask[dict[RoundKey, Counts]]):
    """The sizes of the request states the rounds' answers carried so far, by (flow, tool, round): the web UI's
    MRTR tab."""


@dataclass(frozen=True)
class SoFar(Ask[tuple[RunFigures, Timeline]]):
    """The figures and the series over run time so far: the web UI's charts over time."""


@dataclass(frozen=True)
class Reconcile(Ask[Reconciled]):
    """Reconciliation's record: every client -32602 matched to a logged line, same replica first (`replicas`)."""

    replicas: tuple[str, ...]


@dataclass(frozen=True)
class TracedReasons(Ask[list[TracedReason]]):
    """The matched rejections whose rounds were traced, each with its logged reason (the same matching as
    `Reconcile`'s): what the run's reason spans are made of."""

    replicas: tuple[str, ...]


@dataclass(frozen=True)
class Invariants(Ask[list[InvariantResult]]):
    """Every invariant judged on this run's flows and `ledger` (None: no ledger, or `ledger_error` reading it)."""

    ledger: list[dict[str, Any]] | None
    ledger_error: str | None


@dataclass(frozen=True)
class Finish(Ask[JournalRead]):
    """The whole fold, the journal's writers done (`parts`: every part's file name): torn last lines counted, saved
    as `figures.json`, and handed to the run; the fold process then exits."""

    parts: tuple[str, ...]


@dataclass(frozen=True)
class Echo(Ask[Any]):
    """`value` back: an answer that can only be its own request's (how tests check the pipe hands each reply to
    its own asker, with values of any size)."""

    value: Any


# --- the frames ----------------------------------------------------------------------------------


class Growth(NamedTuple):
    """Journal part `part` (its file name) now holds `size` bytes, all written: the fold reads up to there."""

    part: str
    size: int

    def frame(self) -> bytes:
        payload = SIZE.pack(self.size) + self.part.encode()
        return HEAD.pack(GROWTH, len(payload)) + payload

    @classmethod
    def read(cls, payload: bytes) -> Growth:
        (size,) = SIZE.unpack_from(payload)
        return cls(payload[SIZE.size:].decode(), size)


class Request(NamedTuple):
    """One query as the pipe carries it: `id` comes back on its reply (an `Ask`'s), so the run hands each reply
    to its own asker (an asker stopped before its reply came leaves that reply to nobody, never to the next)."""

    id: int
    query: Ask[Any] | Tell

    def frame(self) -> bytes:
        payload = REQUEST_ID.pack(self.id) + pickle.dumps(self.query, protocol=pickle.HIGHEST_PROTOCOL)
        return HEAD.pack(TELL if isinstance(self.query, Tell) else ASK, len(payload)) + payload

    @staticmethod
    def id_of(payload: bytes) -> int:
        """The id of a request frame's payload, readable even when its query is not."""
        return int(REQUEST_ID.unpack_from(payload)[0])

    @classmethod
    def read(cls, payload: bytes) -> Request:
        query = pickle.loads(payload[REQUEST_ID.size:])
        if not isinstance(query, Ask | Tell):
            raise TypeError(f"not a fold query: {type(query).__name__}")
        return cls(cls.id_of(payload), query)


class Reply(NamedTuple):
    """The fold's answer to request `id`: its value when `ok`, else what went wrong, in one line."""

    id: int
    ok: bool
    value: Any

    def frame(self) -> bytes:
        data = pickle.dumps((self.ok, self.value), protocol=pickle.HIGHEST_PROTOCOL)
        return REPLY_HEAD.pack(self.id, len(data)) + data

    @classmethod
    def read(cls, request_id: int, body: bytes) -> Reply:
        ok, value = pickle.loads(body)
        return cls(request_id, bool(ok), value)
