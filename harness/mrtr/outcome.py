"""The one classification of an MRTR round and of a whole call: `Outcome` (`harness.vocabulary`) from a reply.

Locust's failure table, the Prometheus counters and the journal all group by the
enum, so it is small, fixed and string-valued (the values are metric labels and
journal fields). Error texts built here never carry ids, tokens or timestamps:
Locust groups failures by `repr(error)`, and one unique string per request would
turn its failure table into a log. A server's own message is added as its pattern
(`error_text.error_pattern`: ids, numbers, UUIDs and tokens as placeholders).
"""

from __future__ import annotations

from typing import Final

from harness.mrtr.error_text import error_pattern
from harness.vocabulary import Outcome

__all__ = ["Outcome", "OutcomeError", "describe", "outcome_for_error_code"]


INVALID_PARAMS: Final = -32602
MISSING_REQUIRED_CLIENT_CAPABILITY: Final = -32021
HEADER_MISMATCH: Final = -32020
"""The SDK's codes (`mcp_types`), spelled here: importing `mcp_types` builds its pydantic models (about 0.1 s
of CPU), and a load process needs three integers of it. `tests/test_mrtr_client.py` checks they are the SDK's."""

_BY_ERROR_CODE: Final[dict[int, Outcome]] = {
    INVALID_PARAMS: Outcome.INVALID_STATE,
    MISSING_REQUIRED_CLIENT_CAPABILITY: Outcome.MISSING_CAPABILITY,
    HEADER_MISMATCH: Outcome.HEADER_MISMATCH,
}


def outcome_for_error_code(code: int) -> Outcome:
    """Map a JSON-RPC error code onto the classification (unknown codes are `jsonrpc_error`)."""
    return _BY_ERROR_CODE.get(code, Outcome.JSONRPC_ERROR)


def describe(outcome: Outcome, error_code: int | None = None, http_status: int | None = None) -> str:
    """A stable, id-free text for one outcome: `invalid_state (-32602)`, `http_error (HTTP 502)`.

    The JSON-RPC code is kept because `jsonrpc_error` alone would merge -32603 with a
    server's custom codes; the HTTP status only when there is no code to tell more.
    """
    if error_code is not None:
        return f"{outcome.value} ({error_code})"
    if outcome is Outcome.HTTP_ERROR and http_status is not None:
        return f"{outcome.value} (HTTP {http_status})"
    return outcome.value


class OutcomeError(Exception):
    """An exception to hand to Locust (`response.failure(...)` / `events.request`) for a failed call.

    Its `repr` is built from the classification and the pattern of the server's `message`
    (a round's scrubbed `RoundRecord.message`), so Locust groups equal failures into one
    row however many flows hit them, and two errors that differ only by an order id are
    one row. An HTTP error's message starts with its status, so the status is not repeated.
    """

    def __init__(self, outcome: Outcome, error_code: int | None = None, http_status: int | None = None,
                 message: str | None = None) -> None:
        if message:
            shown_status = None if outcome is Outcome.HTTP_ERROR else http_status
            text = f"{describe(outcome, error_code, shown_status)}: {error_pattern(message)}"
        else:
            text = describe(outcome, error_code, http_status)
        super().__init__(text)
        self.outcome = outcome
        self.error_code = error_code
        self.http_status = http_status
        self.message = message
