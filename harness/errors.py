"""The harness's errors and its exit codes: one tree, mapped to a code in one place (`harness.cli.main`).

    MrtrHarnessError
    ├── UsageError          exit 2: a bad scenario, command line, results folder or input file
    │     (ScenarioError, NotResults, ...: each defined next to the code that finds it)
    └── TargetDown          exit 3: the target (or a log source, a token endpoint) cannot be started or reached
          (TargetError, ...)

Anything else that escapes a command is the harness's own failure: exit 4. Stdlib only, so
the configuration leaf and the reference shop can raise these without loading the runtime.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["ExitCode", "MrtrHarnessError", "TargetDown", "UsageError", "exit_code_of"]


class ExitCode(IntEnum):
    """The process exit codes (docs/exit-codes.md); CI branches on these, so they never change meaning."""

    PASSED = 0
    FAILED = 1  # thresholds, invariants, reconciliation, hypothesis, a regression, a run that aborted itself
    USAGE = 2  # a bad scenario, command line or input
    TARGET = 3  # the target could not be started or reached
    HARNESS = 4  # the harness itself failed (results still written, status `errored`)
    INTERRUPTED = 130  # Ctrl-C, SIGTERM, or a run cut off (its journal has no end): never a verdict


class MrtrHarnessError(Exception):
    """An error the harness expected and can explain in one line; its class says which exit code it is."""

    exit_code: ExitCode = ExitCode.HARNESS


class UsageError(MrtrHarnessError, ValueError):
    """The user's input cannot be used as given: the message says what to change."""

    exit_code = ExitCode.USAGE


class TargetDown(MrtrHarnessError, RuntimeError):
    """Something the run needs outside the harness could not be started or reached."""

    exit_code = ExitCode.TARGET


def exit_code_of(error: BaseException) -> ExitCode:
    """The exit code an error that ends a command stands for: its class's, or HARNESS for anything unexpected."""
    return error.exit_code if isinstance(error, MrtrHarnessError) else ExitCode.HARNESS
