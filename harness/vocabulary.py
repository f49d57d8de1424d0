"""The words every part of the harness shares: outcomes, rejection reasons, invariants, protocols, keys, labels.

Each is spelled here once and imported by whoever speaks it: the client classifies rounds
by `Outcome`, the journal records `FlowOutcome`s, the shop's log and the harness's
collector name `REASONS`, the checks judge `INVARIANTS`, the configuration refuses a
threshold on a label value none of these has. The standard library only and no harness
import (tests/test_vocabulary.py holds it to that), so the configuration leaf and the
reference shop can use it without loading anything else.
"""

from __future__ import annotations

import enum
from typing import Final, Literal, get_args

__all__ = ["AUTH_OUTCOMES", "HANDSHAKE_REVISIONS", "INVARIANTS", "LABEL_VALUES", "MODERN_REVISION", "OTHER_REASON",
           "REASONS", "TOLERANCE_KEYS", "WATCH_STATES", "FlowOutcome", "Outcome", "ProtocolRevision"]


# --- what a round, and a call, came to --------------------------------------------------------


class Outcome(enum.StrEnum):
    """What one round (or a whole call) came to: Locust's failure table, the Prometheus counters and the journal
    group by it, so it is small, fixed and string-valued (the values are metric labels and journal fields)."""

    COMPLETE = "complete"
    """A result with no `resultType`, or `complete`, and no `isError`."""
    INPUT_REQUIRED = "input_required"
    """An intermediate round: the server asked, or shed load with a state-only answer."""
    TOOL_ERROR = "tool_error"
    """A complete result with `isError: true`: the tool ran and said no."""
    INVALID_STATE = "invalid_state"
    """-32602 (HTTP 400). On a retry this is the SDK's one answer for every rejected `requestState`."""
    MISSING_CAPABILITY = "missing_capability"
    """-32021: the server would have to ask something the client did not declare it can show."""
    HEADER_MISMATCH = "header_mismatch"
    """-32020: a routing header disagrees with the body."""
    JSONRPC_ERROR = "jsonrpc_error"
    """Any other JSON-RPC error; the code is kept next to it."""
    INVALID_RESULT = "invalid_result"
    """An unknown `resultType`, a body that does not parse, or a response for another id."""
    UNAUTHORIZED = "unauthorized"
    """HTTP 401: the server took no access token from the round (none sent, or `invalid_token`: expired,
    revoked, for another resource); the OAuth `error` is kept next to it."""
    FORBIDDEN = "forbidden"
    """HTTP 403: the token is valid but lacks a scope the call needs (`insufficient_scope`)."""
    HTTP_ERROR = "http_error"
    """A non-2xx status without a JSON-RPC error body (a proxy's 502, the SDK's 406/421)."""
    TIMEOUT = "timeout"
    """No answer within the read timeout."""
    CONNECTION_ERROR = "connection_error"
    """Never sent: no connection could be opened, or it broke while the request was being written."""
    ANSWER_LOST = "answer_lost"
    """The request was written, then the connection broke (reset, closed, cut) before a full answer: the server
    may have acted on it. A reset before the request reached the server looks the same to a client (a host
    cannot tell either); the fault proxy's counts say which it was."""
    ROUNDS_EXCEEDED = "rounds_exceeded"
    """The server kept answering `input_required` past the client's round cap."""
    ABANDONED = "abandoned"
    """The simulated person chose not to answer; the client sent no retry."""

    @property
    def is_failure(self) -> bool:
        """Whether Locust should count the call as a failure.

        `abandoned` is the lead's choice, and `input_required` is not an end state, so
        neither is a failure of the system under test.
        """
        return self not in _NOT_FAILURES


_NOT_FAILURES: Final = frozenset({Outcome.COMPLETE, Outcome.INPUT_REQUIRED, Outcome.ABANDONED})

AUTH_OUTCOMES: Final = frozenset({Outcome.UNAUTHORIZED, Outcome.FORBIDDEN})
"""The rounds the server refused for their access token: counted as auth refusals, retried once with a new token."""


class FlowOutcome(enum.StrEnum):
    """How one flow ended: a bounded set, so it can be a metric label and a report column."""

    COMPLETED = "completed"  # the tool finished and did what was asked
    DECLINED = "declined"  # the lead said no; the server's safe default stands
    CANCELLED = "cancelled"  # the lead dismissed the question
    ABANDONED = "abandoned"  # the lead never answered
    UNFINISHED = "unfinished"  # the server gave up (e.g. a payment nobody finished)
    TOOL_ERROR = "tool_error"  # the tool reported an error (no quote, already confirmed, ...)
    REJECTED = "rejected"  # -32602: the server refused the requestState
    ROUNDS_EXCEEDED = "rounds_exceeded"  # still asking after 10 rounds
    ERROR = "error"  # any other protocol or transport failure
    INTERRUPTED = "interrupted"  # still running when the run stopped


# --- why a requestState was refused -----------------------------------------------------------

REASONS: Final[tuple[str, ...]] = (
    "seal",
    "unknown key",
    "malformed",
    "non-string requestState",
    "codec error",
    "minted in the future",
    "expired",
    "request binding",
    "audience",
    "principal drift",
    "principal",
    "principal binding error",
)
"""Every reason mcp 2.3.0's `RequestStateBoundary` logs, in the order it checks them (`harness.mrtr.reasons`
reads them from its log line)."""

OTHER_REASON: Final = "other"
"""A rejection whose reason is not in `REASONS` (a newer SDK, or a custom bind_principal message)."""


# --- what must hold whatever the load did -----------------------------------------------------

INVARIANTS: Final[tuple[str, ...]] = (
    "ledger_readable",
    "no_double_release",
    "no_double_payout",
    "no_release_without_accept",
    "one_outcome_per_flow",
    "confirmed_refund_released",
    "declined_refund_still_held",
    "unasked_refund_still_held",
    "no_mutant_accepted",
    "identical_calls_agree",
    "no_call_hung",
)
"""The invariants a run is judged by (`harness.folding.invariants` checks them)."""


# --- how long the shop's payment page asks ----------------------------------------------------

PAYMENT_ROUNDS: Final = 4
"""After this many URL-mode rounds without the provider seeing the sign-in, pay_refund gives up.

Without a cap, an abandoned payment page asks again on every retry until the client's
10-round limit; counting rounds in the state ends the flow with a result that says so.
A replica started with `--payment-rounds 0` counts nothing: the on-call case of a loop
that never ends.
"""


# --- how the journal lies on disk ------------------------------------------------------------

SEGMENT_BYTES: Final = 64 << 20
"""A journal segment is closed (and compressed) once it holds this many bytes: large enough that compression works
on whole windows and a day's run has a few hundred files, small enough that the plain open segment is a small
share. Here because the journal writes by it and the disk estimate (`harness.config.disk`, a layer below)
counts by it."""


# --- the protocol revisions a host's client may speak -----------------------------------------

ProtocolRevision = Literal["2026-07-28", "2025-06-18", "2025-11-25"]
"""A `[[hosts]]` entry's `protocol`."""

MODERN_REVISION: Final[ProtocolRevision] = "2026-07-28"
"""The stateless revision (the SDK's `LATEST_MODERN_VERSION`): every round carries its capabilities, a question is
an input request."""

HANDSHAKE_REVISIONS: Final[tuple[ProtocolRevision, ...]] = tuple(
    revision for revision in get_args(ProtocolRevision) if revision != MODERN_REVISION)
"""The revisions of the `initialize` handshake: a session, and the server's questions as `elicitation/create`
requests on its stream."""


# --- the keys and labels a user writes --------------------------------------------------------

TOLERANCE_KEYS: Final[tuple[str, ...]] = (
    "completed_ratio", "cpu.harness_per_round_ms", "cpu.replica_per_round_ms", "flows_finished", "flows_per_second",
    "round_duration.p50", "round_duration.p95", "round_duration.p99", "rounds_per_call.mean")
"""The keys `--tolerance` takes: the dotted leaves of the `[compare]` table (`harness.config.compare`), said
here so the command line's help needs no scenario model."""

WATCH_STATES: Final[tuple[str, ...]] = ("ok", "slow", "hung")
"""The race probes' watchdog's classes of a call (`harness.load.races.Watch`; the `watchdog_calls` metric's `state`)."""

LABEL_VALUES: Final[dict[str, tuple[str, ...]]] = {
    "outcome": tuple(outcome.value for outcome in FlowOutcome),
    "reason": (*REASONS, OTHER_REASON),
    "invariant": INVARIANTS,
    "state": WATCH_STATES,
}
"""The values a metric label can have in any run, for the labels whose values the harness fixes: a threshold
selecting any other value would judge nothing."""
