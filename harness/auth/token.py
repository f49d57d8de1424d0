"""One access token as the harness holds it: the value, when it was obtained, when it runs out.

The value never leaves this object except as the `Authorization` header of a round: its
`repr` and everything the harness writes name it by its fingerprint. Every token is
registered as a secret of the process when it is made (`harness.secrets`), whatever its
source, so a server or a command that echoes it shows only that fingerprint; it is forgotten
when the object goes (a refreshed token replaced it), so a soak's registry stays the tokens held.
"""

from __future__ import annotations

import json
import re
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Final

import jwt

from harness.auth.errors import TokenEndpointError
from harness.mrtr.credentials import AUTHORIZATION
from harness.secrets import fingerprint, forget, register

TOKEN_TEXT: Final = re.compile(r"[\x21-\x7e]+")
"""What a bearer token may be (RFC 6750's b64token is narrower): a CR or LF would split the request."""


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Token:
    """An access token; `expires_at` (epoch seconds) is None when nobody said how long it lasts."""

    value: str = field(repr=False)
    obtained_at: float
    expires_at: float | None = None
    authorization: str = field(init=False, repr=False)
    """The field line `Authorization: Bearer <value>` with its CRLF, built once: the whole cost of auth on a
    round is reading this."""

    def __post_init__(self) -> None:
        if not TOKEN_TEXT.fullmatch(self.value):
            raise TokenEndpointError(f"a token (fingerprint {fingerprint(self.value)}) is not printable ASCII "
                                     "without spaces: it cannot go in a header")
        register(self.value, "token")
        weakref.finalize(self, forget, self.value)
        object.__setattr__(self, "authorization", f"{AUTHORIZATION}: Bearer {self.value}\r\n")

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.value)

    def holder(self) -> str:
        """Whom the token stands for, as far as a client can tell: a JWT's issuer, client and subject when it names a
        subject (two tokens of one subject are one principal to the server), else the token itself, by fingerprint."""
        claims = jwt_claims(self.value)
        if claims is not None and claims.get("sub") is not None:
            return json.dumps([claims.get("iss"), claims.get("client_id", claims.get("azp")), claims["sub"]])
        return self.fingerprint

    def due(self, margin: float) -> float | None:
        """When to refresh it: `margin` seconds before it expires (never sooner than half its life); None: never."""
        if self.expires_at is None:
            return None
        life = self.expires_at - self.obtained_at
        return self.expires_at - min(margin, life / 2)


def from_value(value: str, now: float | None = None) -> Token:
    """A token given as text (a file's line, a command's output): a JWT's `exp` says when it expires."""
    return Token(value, time.time() if now is None else now, jwt_expiry(value))


def from_response(response: dict[str, Any], now: float) -> Token:
    """A token endpoint's answer (RFC 6749 section 5.1): `access_token`, and `expires_in` when given."""
    expires_in = response.get("expires_in")
    expires_at = now + float(expires_in) if isinstance(expires_in, int | float) and expires_in > 0 else None
    value = str(response["access_token"])
    return Token(value, now, expires_at if expires_at is not None else jwt_expiry(value))


def jwt_expiry(value: str) -> float | None:
    """A JWT's `exp` claim, read without checking the signature (that is the resource server's job); None for
    an opaque token or a JWT without one."""
    claims = jwt_claims(value)
    exp = claims.get("exp") if claims is not None else None
    return float(exp) if isinstance(exp, int | float) else None


def jwt_claims(value: str) -> dict[str, Any] | None:
    """A JWT's claims, read without checking the signature (the resource server's job); None for an opaque token."""
    if value.count(".") != 2:
        return None
    try:
        claims = jwt.decode(value, options={"verify_signature": False})
    except jwt.PyJWTError:
        return None
    return claims if isinstance(claims, dict) else None
