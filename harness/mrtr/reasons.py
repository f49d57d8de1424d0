"""The reasons the SDK gives, only in its log, for refusing a `requestState`.

The client always sees the same `-32602 "Invalid or expired requestState"`; the real
reason exists only in one WARNING line on logger `mcp.server.request_state`:
`requestState rejected on <method>: <reason>`. This module is the single parser of that
line (the reasons themselves are `harness.vocabulary`'s), shared by the replica's metrics, the
run's log collector and `triage`.
"""

from __future__ import annotations

import re
from typing import Final

from harness.vocabulary import OTHER_REASON as OTHER_REASON
from harness.vocabulary import REASONS as REASONS

REQUEST_STATE_LOGGER: Final = "mcp.server.request_state"

TAMPERING_OR_CLIENT_BUG: Final = frozenset({"seal", "request binding", "malformed", "non-string requestState"})
"""Reasons that mean someone changed a token or a client misbehaves, never a slow person."""

_LINE = re.compile(r"requestState rejected on (?P<method>[\w/]+): (?P<reason>.+?)\s*$")


def parse_rejection(message: str) -> tuple[str, str] | None:
    """Return (method, reason) from a line that holds an SDK rejection, else None.

    Works on the bare log message and on a whole formatted line around it. A reason the
    SDK may add later is reported as `OTHER_REASON` rather than dropped, so it still counts.
    """
    parts = rejection_parts(message)
    return None if parts is None else (parts[0], normalise_reason(parts[1]))


def rejection_parts(message: str) -> tuple[str, str] | None:
    """(method, the reason as logged) from a line that holds an SDK rejection, else None.

    The logged text is what triage shows for a reason it does not know (`OTHER_REASON`).
    """
    if "requestState rejected on " not in message:
        return None
    match = _LINE.search(message)
    if match is None:
        return None
    return match["method"], match["reason"].strip().strip('"')


BIND_PRINCIPAL_RETURNED: Final = "bind_principal returned"
"""How the message of a `bind_principal` that returned a non-string starts (`... X, expected str or None`)."""

_BY_COMPACT: Final = {reason.replace(" ", ""): reason for reason in REASONS}


def normalise_reason(text: str) -> str:
    """Map a logged reason onto `REASONS`; `bind_principal returned X, ...` counts as principal binding error.

    Whitespace is not significant: a console that wraps a long message (rich folds it
    mid-word in narrow columns) gives the reason back with its spaces moved or gone.
    """
    text = text.strip().strip('"')
    if text in REASONS:
        return text
    compact = "".join(text.split())
    if compact in _BY_COMPACT:
        return _BY_COMPACT[compact]
    if compact.startswith(BIND_PRINCIPAL_RETURNED.replace(" ", "")):
        return "principal binding error"
    return OTHER_REASON
