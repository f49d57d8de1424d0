"""Tokens given in a file, one a line: principal i holds line i mod n.

For deployments whose tokens someone else mints (a test tenant's long-lived tokens). Blank
lines and `#` comments are skipped. A file token is never refreshed: there is nothing
to refresh it from; a JWT's `exp` still says when it runs out.
"""

from __future__ import annotations

from pathlib import Path

from harness.auth.errors import AuthInputError
from harness.auth.token import Token, from_value
from harness.secrets import register


def read_tokens(path: Path) -> list[str]:
    """The file's tokens, in order; AuthInputError (exit 2, with the path) for a file missing or empty."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise AuthInputError(f"[target.auth] file {path}: cannot read it: {exc.strerror}") from None
    tokens = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if not tokens:
        raise AuthInputError(f"[target.auth] file {path} holds no token (one token a line)")
    for token in tokens:
        register(token, "token")  # every line is a secret, also those no principal uses
    return tokens


class TokenFile:
    """Principal i's token is line i mod n of the file."""

    refreshable = False

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tokens = read_tokens(path)

    def describe(self) -> str:
        return f"{len(self.tokens)} tokens from {self.path}"

    def fetch(self, principal: int) -> Token:
        return from_value(self.tokens[principal % len(self.tokens)])

    def close(self) -> None:
        pass
