"""A command that prints one lead's token: `["get-token", "{lead}"]`, run again before the token runs out.

For deployments whose tokens come from a tool of their own (a cloud CLI, a vault). The
command's first non-blank line is the token; a JWT's `exp` says when to run it again.
Its output is never written anywhere: a failure says only the exit code (and names no
output, which may hold the token).

It runs like every process the harness starts: in its own session, on the lifeline
(`harness.processes.children.start_child`: a SIGKILLed harness leaves none running), killed
with its session when it runs out of time. It is given only the allow-list of
`harness.secrets.command_env` and the variables `[target.auth] command_env` names.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import Final

from harness.auth.errors import TokenEndpointError
from harness.auth.token import Token, from_value
from harness.processes.children import kill_session, start_child
from harness.secrets import command_env

LEAD_PLACEHOLDER: Final = "{lead}"
COMMAND_TIMEOUT: Final = 30.0
"""Seconds the command may take to print a token."""


class TokenCommand:
    """Runs the command with `{lead}` filled in for each principal."""

    refreshable = True

    def __init__(self, argv: Sequence[str], timeout: float = COMMAND_TIMEOUT, pass_env: Sequence[str] = ()) -> None:
        self.argv = list(argv)
        self.timeout = timeout
        self.pass_env = list(pass_env)

    def describe(self) -> str:
        return f"command {self.argv[0]}"

    def fetch(self, principal: int) -> Token:
        argv = [part.replace(LEAD_PLACEHOLDER, str(principal)) for part in self.argv]
        try:
            process = start_child(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, env=command_env(self.pass_env))
        except FileNotFoundError:
            raise TokenEndpointError(f"token command {self.argv[0]} not found") from None
        except OSError as exc:
            raise TokenEndpointError(f"token command {self.argv[0]} could not run: {exc.strerror}") from None
        try:
            stdout, _ = process.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise TokenEndpointError(f"token command {self.argv[0]} printed no token within "
                                     f"{self.timeout:g}s") from None
        finally:
            if process.returncode is None:  # timed out, or this greenlet was killed: the session goes too
                kill_session(process)
            if process.stdout is not None:
                process.stdout.close()
        lines = [line.strip() for line in stdout.splitlines() if line.strip()]
        if process.returncode != 0 or not lines:
            raise TokenEndpointError(f"token command {self.argv[0]} for lead {principal} exited "
                                     f"{process.returncode} without a token (its output is not shown: it may "
                                     "hold secrets)")
        return from_value(lines[0])

    def close(self) -> None:
        pass
