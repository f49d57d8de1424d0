"""The standard library's regular-expression parser (`re._parser`, private, 3.11+), read to judge a pattern.

A user's log adapter brings its own patterns; each must run in time linear in a line's length. Whether it
does is read off the parsed pattern (never run): a quantifier inside a quantified group, a backreference,
or an unbounded run at its start is not. The parser's module and constants are private to `re`, so they
are reached here alone (tests/test_compat.py holds every other module to public imports).
"""

from __future__ import annotations

import re._constants as _sre_constants  # type: ignore[import-not-found]
import re._parser as _sre_parse  # type: ignore[import-not-found]
from typing import Any, Final

__all__ = ["nonlinear_problem"]

_UNBOUNDED: Final = _sre_constants.MAXREPEAT
_REPEATS: Final = frozenset({_sre_constants.MAX_REPEAT, _sre_constants.MIN_REPEAT, _sre_constants.POSSESSIVE_REPEAT})
_BACKREFERENCES: Final = frozenset({_sre_constants.GROUPREF, _sre_constants.GROUPREF_EXISTS})


def nonlinear_problem(text: str) -> str | None:
    """Why `text`, a pattern, could take more than linear time (in a few words), or None when it cannot; `re.error`
    when it is no pattern."""
    parsed = list(_sre_parse.parse(text))
    problem = _nonlinear(parsed, inside_repeat=False)
    if problem is None and _starts_with_run(parsed):
        problem = "it starts with an unbounded run (each position of a line would rescan it): start with a literal"
    return problem

def _nonlinear(items: list[tuple[Any, Any]], *, inside_repeat: bool) -> str | None:
    for op, arg in items:
        if op in _BACKREFERENCES:
            return "a backreference"
        if op in _REPEATS:
            low, high, body = arg
            if inside_repeat and high != low:
                return "a nested quantifier"
            found = _nonlinear(list(body), inside_repeat=inside_repeat or high == _UNBOUNDED or high > 1)
            if found is not None:
                return found
        else:
            for sub in _subpatterns(op, arg):
                found = _nonlinear(sub, inside_repeat=inside_repeat)
                if found is not None:
                    return found
    return None


def _subpatterns(op: Any, arg: Any) -> list[list[tuple[Any, Any]]]:
    """The sub-patterns of one parsed item: a group's body, a branch's alternatives, a lookaround's body."""
    if op == _sre_constants.SUBPATTERN:
        return [list(arg[-1])]
    if op == _sre_constants.BRANCH:
        return [list(branch) for branch in arg[1]]
    if op in (_sre_constants.ASSERT, _sre_constants.ASSERT_NOT):
        return [list(arg[1])]
    if op == _sre_constants.ATOMIC_GROUP:
        return [list(arg)]
    return []


def _starts_with_run(items: list[tuple[Any, Any]]) -> bool:
    """Whether the pattern (or one of its leading alternatives) opens with an unbounded repeat."""
    for op, arg in items:
        if op == _sre_constants.AT:
            continue  # an anchor (`^`, `\\b`) takes no characters: look at what follows it
        if op in _REPEATS:
            return bool(arg[1] == _UNBOUNDED) or _starts_with_run(list(arg[2]))
        if op == _sre_constants.SUBPATTERN:
            return _starts_with_run(list(arg[-1]))
        if op == _sre_constants.BRANCH:
            return any(_starts_with_run(list(branch)) for branch in arg[1])
        return False
    return False
