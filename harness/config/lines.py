"""Where in a scenario file a validation error is: its dotted field and, best effort, its line."""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from harness.config.chaos import ChaosStep
from harness.config.flows import FlowSpec
from harness.config.leads import LeadProfile
from harness.config.strict import FieldProblem
from harness.config.think import ThinkTime
from harness.config.worded_errors import elsewhere_at, fields_at, worded


def explain(exc: ValidationError, text: str, source: str, model: type[BaseModel],
            given: Mapping[str, Any] | None = None) -> str:
    """Every error, one a line, as `file:line: field: message` in plain words (`harness.config.worded_errors`).

    A value that fits none of a plain union's types (a threshold is text or a list of text)
    is one line, its alternatives joined: "must be text (in quotes) or a list". `given`: the values the command
    line set (dotted keys, as a flag names its key: `hunt.trial_duration` is `--trial-duration`); an error in one of
    them, or in a key of its table the file does not write (a default it no longer fits), is blamed on the flag
    (`--duration 10x: duration: ...`), not on a line of the file that never held the value.
    """
    said: list[tuple[str, list[str]]] = []
    unions: dict[str, list[str]] = {}
    for error in exc.errors(include_url=False):
        where, message, alternative = _explain_one(error, text, source, model, given or {})
        if alternative and where in unions:
            unions[where].append(message.removeprefix("must be "))
            continue
        said.append((where, [message]))
        if alternative:
            unions[where] = said[-1][1]
    return "\n".join(f"{where}: {' or '.join(messages)}" for where, messages in said)


_TYPE_LABEL = re.compile(r"^(?:str|int|float|bool|list\[.*\]|dict\[.*\])$")
"""How pydantic names a member of a plain union (`str | list[str]`) in an error's location: no key of the file."""


def _explain_one(error: Any, text: str, source: str, model: type[BaseModel],
                 given: Mapping[str, Any]) -> tuple[str, str, bool]:
    """(`file:line: field`, the message, whether it is one alternative of a plain union)."""
    problem = (error.get("ctx") or {}).get("error")
    loc = [*error["loc"], *(problem.where if isinstance(problem, FieldProblem) else ())]
    alternative = len(loc) > 1 and isinstance(loc[-1], str) and bool(_TYPE_LABEL.match(loc[-1]))
    if alternative:
        loc = loc[:-1]
    location = [part for n, part in enumerate(loc) if not _is_union_tag(loc, n)]
    field = _dotted(location) or "(top level)"
    line = _find_line(text, location)
    where = f"{source}:{line}" if line else source
    flags = _flags_behind(field, given, in_file=_written(text, location))
    if flags:
        where = ", ".join(flags)
    fields, elsewhere = [], None
    if error["type"] == "extra_forbidden":
        fields = fields_at(model, list(error["loc"][:-1]), _UNION_TAGS)
        elsewhere = elsewhere_at(model, list(error["loc"][:-1]), _UNION_TAGS, str(error["loc"][-1]))
    return f"{where}: {field}", worded(error, fields, elsewhere), alternative


def _flags_behind(field: str, given: Mapping[str, Any], *, in_file: bool) -> list[str]:
    """The flags (as typed: `--budget 1s`) an error at `field` is theirs: a flag that set `field` (or a table above
    it); else, when the file does not write `field`, the flags that set a key of the same table (a default no longer
    fits the value the flag gave: a small `--budget` against the default `trial_duration`)."""
    own = [dotted for dotted in given if field == dotted or field.startswith(f"{dotted}.")]
    if not own and not in_file:
        table = field.rpartition(".")[0]
        own = [dotted for dotted in given if table and dotted.rpartition(".")[0] == table]
    return [_flag(dotted, given[dotted]) for dotted in own]


def _flag(dotted: str, value: Any) -> str:
    """A dotted key and its value as the command line gave them: `hunt.trial_duration` 10x is `--trial-duration 10x`."""
    flag = "--" + dotted.rpartition(".")[2].replace("_", "-")
    if value is True:
        return flag
    shown = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return f"{flag} {shown}"


def _written(text: str, location: list[Any]) -> bool:
    """Whether the file itself writes the key at `location` (its own line, not only its table's header)."""
    keys = [part for part in location if isinstance(part, str)]
    if not keys:
        return False
    leaf = _key_pattern(keys[-1])
    return any(re.match(rf"^\s*(?:[\w\"'.-]+\s*\.\s*)?{leaf}\s*[=.]", line) for line in text.splitlines())


def _union_tags(*unions: Any) -> frozenset[str]:
    """Every tag of the discriminated unions (flow kinds, chaos actions, think-time distributions).

    pydantic puts the chosen member's tag in an error's location (`chaos.1.rotate-keys.order`);
    the message names the field without it. Read from the unions themselves, so a new action
    or flow kind needs no second list here.
    """
    tags: set[str] = set()
    for union in unions:
        members, field = typing.get_args(union)
        for member in typing.get_args(members):
            tags.update(typing.get_args(member.model_fields[field.discriminator].annotation))
    return frozenset(tags)


_UNION_TAGS = _union_tags(FlowSpec, ChaosStep, ThinkTime)
_UNION_FIELDS = frozenset(name for name, info in LeadProfile.model_fields.items()
                          if info.annotation == typing.get_args(ThinkTime)[0])
"""Fields holding one union value (not a list of them): pydantic puts the tag right after their name."""


def _is_union_tag(loc: list[Any], n: int) -> bool:
    """Whether `loc[n]` is a tag pydantic put in (right after a list index or a union field), not a key of the file.

    By position, not by name alone: `restart` is a chaos action's tag in `chaos.1.restart.at`
    and a key of the file in `target.commands.restart`.
    """
    part = loc[n]
    if not isinstance(part, str) or n == 0:
        return False
    if part.endswith("Flow"):
        return True
    return part in _UNION_TAGS and (isinstance(loc[n - 1], int) or loc[n - 1] in _UNION_FIELDS)


def _dotted(location: list[Any]) -> str:
    text = ""
    for part in location:
        text += f"[{part + 1}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _find_line(text: str, location: list[Any]) -> int | None:
    """Best effort: the line of the failing key inside its table (or array-of-tables entry)."""
    lines = text.splitlines()
    start, end = 0, len(lines)
    keys = [part for part in location if isinstance(part, str)]
    if not keys:
        return None
    depth = _header_depth(lines, keys)
    table, rest = ".".join(keys[:depth]), keys[depth:]
    index = next((part for part in location[1:2] if isinstance(part, int)), None)
    headers = [n for n, line in enumerate(lines) if re.match(rf"^\s*\[\[?\s*{re.escape(table)}\s*\]\]?", line)]
    if headers:
        pick = headers[index] if index is not None and index < len(headers) else headers[0]
        start = pick
        end = next((n for n in range(pick + 1, len(lines)) if re.match(r"^\s*\[", lines[n])), len(lines))
        if not rest:
            return start + 1
    wanted = _key_pattern(rest[-1] if rest else table)
    if not headers and rest:  # a table written as dotted keys in its parent: `expect."completed_ratio" = ...`
        found = _first(lines, rf"^\s*{re.escape(table)}\s*\.\s*{wanted}\s*=")
        if found:
            return found
    for n in range(start, end):
        if re.match(rf"^\s*{wanted}\s*=", lines[n]):
            return n + 1
    if headers:
        return start + 1  # no finer line known: the table's header
    return _first(lines, rf"^\s*{re.escape(table)}\s*[=.]") if rest else None  # `expect = {...}`, `expect.x = `


def _key_pattern(key: str) -> str:
    """A key as TOML may write it: bare, "quoted" or 'literal'."""
    escaped = re.escape(key)
    return rf"(?:{escaped}|\"{escaped}\"|'{escaped}')"


def _first(lines: list[str], pattern: str) -> int | None:
    """The line number of the first line matching `pattern`, or None."""
    return next((n + 1 for n, line in enumerate(lines) if re.match(pattern, line)), None)


def _header_depth(lines: list[str], keys: list[str]) -> int:
    """How many leading keys name the deepest table header the file has (`[target.commands]`: 2), at least 1."""
    for depth in range(len(keys), 1, -1):
        dotted = re.escape(".".join(keys[:depth]))
        if any(re.match(rf"^\s*\[\[?\s*{dotted}\s*\]\]?", line) for line in lines):
            return depth
    return 1
