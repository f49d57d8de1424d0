"""A validation error in the user's words: what is wrong with which key, never pydantic's own phrasing.

pydantic says "Extra inputs are not permitted" for a typo, "Input tag 'scale' found using
'action' does not match any of the expected tags" for an unknown action, and "Input should
be greater than 0" for a zero; a reader of a scenario file wants the key, what it may be,
and the closest right spelling. Every error of a file is worded, not only the first.
"""

from __future__ import annotations

import difflib
import typing
from typing import Any

from pydantic import BaseModel

WORDED: dict[str, str] = {
    "missing": "is required",
    "string_type": "must be text (in quotes)",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "list_type": "must be a list, e.g. [\"...\"]",
    "dict_type": "must be a table",
    "model_type": "must be a table",
    "model_attributes_type": "must be a table",
    "finite_number": "must be a finite number",
}
"""pydantic's error types that need no value to be said plainly."""

PATTERNS: dict[str, str] = {
    r"^[A-Za-z_][A-Za-z0-9_]*$": "must be an environment variable's name: letters, digits and _, not starting with "
                                 "a digit (the NAME of the variable, not its value)",
    r"^[a-z0-9][a-z0-9_-]*$": "must be lower-case letters, digits, _ and -, starting with a letter or digit",
    r"^[A-Za-z0-9-]+$": "must be an HTTP header's name: letters, digits and -",
    r"^[\x21-\x7e]+$": "must be printable ASCII without spaces",
    r"^[A-Za-z0-9_.-]+$": "must be letters, digits, _, . and - (it names a folder)",
    r"^[A-Za-z0-9][A-Za-z0-9_.-]*$": "must be letters, digits, _, . and -, starting with a letter or digit (a "
                                     "server name a command is given)",
}
"""Every `pattern` of the scenario models, as a person says it (a test checks none is missing)."""


def worded(error: dict[str, Any], fields: list[str], elsewhere: Elsewhere | None = None) -> str:
    """One pydantic error as a sentence; `fields`: the keys its table accepts (for a did-you-mean); `elsewhere`:
    the table's kind and the other kinds that take an unknown key (`elsewhere_at`)."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    location = [part for part in error["loc"] if isinstance(part, str)]
    key = location[-1] if location else ""
    if kind == "extra_forbidden":
        keys = f"; the keys here are {', '.join(fields)}" if fields else ""
        if elsewhere is not None and elsewhere[1]:
            tag, others = elsewhere
            return f"a {tag!r} takes no {key!r} (it is a key of {', '.join(others)}){keys}"
        own = [name for name in fields if name not in _TAG_FIELDS]  # its tag is right, or this table had none
        return f"unknown key {key!r}{did_you_mean(key, own) or keys}"
    if kind == "union_tag_invalid":
        tags = _tags(ctx.get("expected_tags"))
        return f"{ctx.get('discriminator', '').strip(chr(39))} = {ctx.get('tag')!r} is not one of: " \
               f"{', '.join(tags)}{did_you_mean(str(ctx.get('tag')), tags)}"
    if kind == "union_tag_not_found":
        return f"needs {str(ctx.get('discriminator', '')).strip(chr(39))} = one of its kinds"
    if kind == "string_pattern_mismatch":
        # The value is not echoed: a secret pasted where its variable's name goes must not reach the terminal.
        return PATTERNS.get(str(ctx.get("pattern")), f"does not have the form {ctx.get('pattern')} (a regular "
                                                     "expression)")
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}, not {error.get('input')!r}"
    if kind in WORDED:
        return WORDED[kind]
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        words = {"greater_than": "above", "greater_than_equal": "at least", "less_than": "below",
                 "less_than_equal": "at most"}[kind]
        bound = next(iter(ctx.values()), "")
        return f"must be {words} {_number(bound)}, not {_number(error.get('input'))}"
    message = str(error["msg"]).removeprefix("Value error, ")
    return message.replace("Input should be", "must be").replace("String should", "must")


def did_you_mean(value: str, names: list[str] | tuple[str, ...]) -> str:
    """`; did you mean 'x'?` for the name closest to `value`, or nothing when none is close."""
    close = difflib.get_close_matches(value, list(names), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _number(value: Any) -> str:
    """1000000.0 as 1,000,000 and 0.0 as 0: a bound as the user would write it."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"
    return repr(value)


def _tags(text: Any) -> list[str]:
    return [part.strip().strip("'") for part in str(text or "").split(",") if part.strip()]


def fields_at(model: type[BaseModel], location: list[Any], tags: frozenset[str]) -> list[str]:
    """The keys the table at `location` (its parent's path in the file) accepts, for a did-you-mean."""
    candidates: list[type[BaseModel]] = [model]
    for part in location:
        if isinstance(part, int):
            continue
        nested: list[type[BaseModel]] = []
        for candidate in candidates:
            if part in candidate.model_fields:
                nested += _models_in(candidate.model_fields[part].annotation)
            elif part in _tags_of(candidate) or candidate.__name__ == part:
                nested.append(candidate)
        if nested:
            candidates = nested
        elif part not in tags and not part.endswith("Flow"):
            return []
    return sorted({name for candidate in candidates for name in candidate.model_fields})


Elsewhere = tuple[str, list[str]]
"""A union member's tag (a chaos action, a flow kind) and the other members' tags that take a given key."""


def elsewhere_at(model: type[BaseModel], location: list[Any], tags: frozenset[str], key: str) -> Elsewhere | None:
    """For a key unknown to the union member at `location` (a restart step's `duration`): the member's tag and the
    tags of its siblings that take the key, so the error says where it belongs rather than a lookalike of its own.
    None when `location` ends in no union member."""
    candidates: list[type[BaseModel]] = [model]
    for n, part in enumerate(location):
        if isinstance(part, int):
            continue
        if part in tags and n == len(location) - 1:
            others = sorted({tag for candidate in candidates if key in _keys(candidate)
                             for tag in _tags_of(candidate) if tag != part})
            return part, others
        nested = [inner for candidate in candidates if part in candidate.model_fields
                  for inner in _models_in(candidate.model_fields[part].annotation)]
        if not nested:
            return None
        candidates = nested
    return None


def _keys(model: type[BaseModel]) -> set[str]:
    """The keys a model's table accepts, as the file writes them (a field's alias, else its name)."""
    return {info.alias or name for name, info in model.model_fields.items()}


_TAG_FIELDS: tuple[str, ...] = ("kind", "action", "dist")
"""The keys that choose a union member: never the did-you-mean of a key the chosen member lacks."""


def _tags_of(model: type[BaseModel]) -> tuple[str, ...]:
    """The tags a union member answers to (its `kind`, `action` or `dist` literal)."""
    for name in _TAG_FIELDS:
        info = model.model_fields.get(name)
        if info is not None:
            return tuple(arg for arg in typing.get_args(info.annotation) if isinstance(arg, str))
    return ()


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in _models_in(arg)]
