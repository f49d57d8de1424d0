"""A command that prints one lead's token: `["get-token", "{lead}"]`, run again before the token runs out.

For deployments whose tokens come from a tool of their own (a cloud CLI, a vault). The
command's first non-blank line is the token; a JWT's `exp` says when to run it again.
Its output is never written anywhere: a failure says only the exit code (and names no
output, which may hold the token).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import Final

from harness.auth.errors import TokenEndpointError
from harness.auth.token import Token, from_value

LEAD_PLACEHOLDER: Final = "{lead}"
COMMAND_TIMEOUT: Final = 30.0
"""Seconds the command may take to print a token."""


class TokenCommand:
    """Runs the command with `{lead}` filled in for each principal."""

    refreshable = True

    def __init__(self, argv: Sequence[str], timeout: float = COMMAND_TIMEOUT) -> None:
        self.argv = list(argv)
        self.timeout = timeout

    def describe(self) -> str:
        return f"command {self.argv[0]}"

    def fetch(self, principal: int) -> Token:
        argv = [part.replace(LEAD_PLACEHOLDER, str(principal)) for part in self.argv]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout, check=False,
                                  stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise TokenEndpointError(f"token command {self.argv[0]} not found") from None
        except subprocess.TimeoutExpired:
            raise TokenEndpointError(f"token command {self.argv[0]} printed no token within "
                                     f"{self.timeout:g}s") from None
        except OSError as exc:
            raise TokenEndpointError(f"token command {self.argv[0]} could not run: {exc.strerror}") from None
        lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
        if done.returncode != 0 or not lines:
            raise TokenEndpointError(f"token command {self.argv[0]} for lead {principal} exited "
                                     f"{done.returncode} without a token (its output is not shown: it may "
                                     "hold secrets)")
        return from_value(lines[0])

    def close(self) -> None:
        pass
