"""What the round loop needs from a lead's OAuth token: a header to add, and a way to ask for a new token.

The round loop knows leads only by their index; the tokens themselves are held and
refreshed elsewhere (`harness.auth.keeper`), off the hot path. So all a round pays for
auth is one lookup of a ready-made header line, which the transport writes after the
others (no dict merged per round: `benchmarks/client_cpu.py --auth`, figures in
`benchmarks/README.md`).
"""

from __future__ import annotations

from typing import Final, Protocol

AUTHORIZATION: Final = "Authorization"

INVALID_TOKEN: Final = "invalid_token"
"""RFC 6750's `error` for a token the resource server does not take (expired, revoked, malformed)."""


class Credentials(Protocol):
    """Each lead's `Authorization` value, and a renewal after the server refused one."""

    def authorization(self, lead: int) -> str:
        """`lead`'s `Authorization: Bearer ...` field line, CRLF included, ready-made: no I/O, no lock."""
        ...

    def renew(self, lead: int, since: float) -> bool:
        """After a 401 `invalid_token` on a round sent at `since`: make sure `lead` holds a token obtained
        after it (blocking this greenlet until one arrives); False when none can be had (refresh is off,
        or the token endpoint failed)."""
        ...

