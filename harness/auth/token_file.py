"""Tokens given in a file, one a line: principal i holds line i mod n.

For deployments whose tokens someone else mints (a test tenant's long-lived tokens). Blank
lines and `#` comments are skipped. A file token is never refreshed: there is nothing
to refresh it from; a JWT's `exp` still says when it runs out.
"""

from __future__ import annotations

from pathlib import Path

from harness.auth.token import Token, from_value
from harness.secrets import file_secrets


def read_tokens(path: Path) -> list[str]:
    """The file's tokens, in order, each registered; MissingSecret (exit 2, with the path) for a file missing or
    empty."""
    return file_secrets(path, where="[target.auth] file")


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
