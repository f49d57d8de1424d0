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

_HEAD: Final = "requestState rejected on "
_METHOD = re.compile(r"[\w/]+")
"""The method after the head (`tools/call`). The line is read with `str` methods around this one bounded pattern,
in time linear in its length: the text is a replica's log line, which a target controls."""


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
    start = message.find(_HEAD)
    if start < 0:
        return None
    end = len(message.rstrip())
    last_newline = message.rfind("\n", 0, end)
    while start >= 0:
        method = _METHOD.match(message, start + len(_HEAD))
        if method is not None and message.startswith(": ", method.end()):
            reason_at = method.end() + 2
            if reason_at < len(message) and message[reason_at] != "\n" and last_newline < reason_at:
                reason = message[reason_at:max(end, reason_at + 1)]
                return method[0], reason.strip().strip('"')
        start = message.find(_HEAD, start + 1)
    return None


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
