"""The rules of `[target.commands]`: what placeholders a command gets and how its arguments are read."""

from __future__ import annotations

import re

from harness.config.strict import FieldProblem

OTHER_COMMANDS: dict[str, frozenset[str]] = {"scale": frozenset({"replicas"})}
"""Commands no chaos action runs (`capacity --replicas` scales by `scale`), with their placeholders; each chaos
action declares its own (`harness.config.chaos`)."""

REPLICA_PLACEHOLDERS = frozenset({"replica", "index", "url"})
"""Every command's placeholders for the replica it acts on: `r1`, `0`, its MCP URL. A command that uses none of
them acts on the whole deployment and runs once, not once per replica."""

PLACEHOLDER = re.compile(r"(?<![${])\{([A-Za-z_][A-Za-z0-9_]*)\}(?!\})")
"""`{name}` in a command's argument; `${VAR}` (the shell's) and `{{...}}` (a literal brace) are left alone."""


def placeholders_in(argv: list[str]) -> set[str]:
    """The placeholder names a command's arguments use."""
    return {match.group(1) for arg in argv for match in PLACEHOLDER.finditer(arg)}


def check_command(name: str, argv: list[str], allowed: frozenset[str], where: tuple[str, ...] | None = None) -> None:
    """An empty command, or one with a placeholder this command does not get, is refused (FieldProblem)."""
    if not argv or not argv[0]:
        raise FieldProblem(f"{name} is empty: give an argv list, e.g. [\"kubectl\", \"...\"]",
                           *(where if where is not None else (name,)))
    unknown = sorted(placeholders_in(argv) - allowed)
    if unknown:
        known = ", ".join(f"{{{p}}}" for p in sorted(allowed))
        raise FieldProblem(f"{name} uses unknown placeholder {{{unknown[0]}}} (it gets {known}; write "
                           f"{{{{ and }}}} for a literal brace)", *(where if where is not None else (name,)))


