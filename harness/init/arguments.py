"""A tool's arguments drawn from its JSON input schema: one valid-looking value per field, and what to pin.

The harness cannot know real values (an order id, a city), so it writes a value of the
right shape for each required field (a default or the first enum value where the schema
has one, else the simplest value its type and bounds allow) and says which fields it had
to make up. Optional fields without a default are left out and named, for the user to add.
Local `$ref`s (`#/$defs/...`, as pydantic writes nested models) are followed; anything the
generator cannot satisfy (a `pattern`, a `not`) is still given a value of its type and
marked for pinning. Deterministic: the same schema always gives the same arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.config import toml_text

_MAX_DEPTH = 8
"""How deep nested objects and `$ref`s are followed before a field is left empty for the user."""
_MAX_SIZE = 64
"""The longest string and array a schema's `minLength` or `minItems` can make: a server's schema cannot make init
write a file of any size (a longer minimum is written this long and marked for pinning)."""

_FORMATS: dict[str, str] = {
    "date": "2026-01-01",
    "date-time": "2026-01-01T00:00:00Z",
    "time": "12:00:00",
    "email": "someone@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "ipv4": "192.0.2.1",
    "hostname": "example.com",
}
"""A value for each string format a tool's schema commonly names (documentation-reserved where one exists)."""


@dataclass
class DrawnArguments:
    """A tool's arguments, and what the user should look at: made-up fields, fields left out."""

    values: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    """Per top-level argument: its type and where its value came from, e.g. "integer, required, made up"."""
    made_up: list[str] = field(default_factory=list)
    """Required arguments whose value is a placeholder, not the schema's own default or choice."""
    optional: dict[str, str] = field(default_factory=dict)
    """Optional arguments left out, with their type (and default)."""
    unsatisfied: list[str] = field(default_factory=list)
    """Arguments the generator could not make valid from the schema (a pattern, a null-only type)."""


def draw_arguments(schema: Mapping[str, Any] | None) -> DrawnArguments:
    """The arguments to send a tool with input schema `schema` (an object schema; None or empty: no arguments)."""
    drawn = DrawnArguments()
    if not isinstance(schema, Mapping):
        return drawn
    properties = schema.get("properties")
    required = schema.get("required") or []
    if not isinstance(properties, Mapping):
        return drawn
    for name, prop in properties.items():
        prop = _resolved(prop, schema, 0)
        kind = _type_name(prop)
        if name in required or "default" in prop:
            source = _source(prop)
            value, satisfied = _value(prop, schema, 0)
            if name not in required:
                drawn.optional[name] = f"{kind}, default {_short(prop['default'])}"
                continue
            drawn.values[name] = value
            drawn.notes[name] = f"{kind}, required, {source}"
            if source == "made up":
                drawn.made_up.append(name)
            if not satisfied:
                drawn.unsatisfied.append(name)
        else:
            drawn.optional[name] = kind
    return drawn


def _source(prop: Mapping[str, Any]) -> str:
    """Where a field's value comes from, in the words the scenario's comment uses."""
    if "default" in prop:
        return "its default"
    if "const" in prop:
        return "its only value"
    if "enum" in prop:
        return f"first of {len(prop['enum'])} choices"
    if prop.get("examples"):
        return "the schema's example"
    return "made up"


def _resolved(prop: Any, root: Mapping[str, Any], depth: int) -> dict[str, Any]:
    """`prop` with a local `$ref` followed (and the first usable branch of anyOf/oneOf taken); {} when unusable."""
    if not isinstance(prop, Mapping):
        return {}
    ref = prop.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/") and depth < _MAX_DEPTH:
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, Mapping) else None
        merged = {**_resolved(target, root, depth + 1), **{k: v for k, v in prop.items() if k != "$ref"}}
        return merged
    for combinator in ("anyOf", "oneOf"):
        branches = prop.get(combinator)
        if isinstance(branches, list) and "type" not in prop and "enum" not in prop and "const" not in prop:
            usable = [_resolved(branch, root, depth + 1) for branch in branches]
            chosen = next((branch for branch in usable if branch.get("type") not in (None, "null")), None)
            if chosen is not None:
                return {**chosen, **{k: v for k, v in prop.items() if k != combinator}}
    return dict(prop)


def _type_name(prop: Mapping[str, Any]) -> str:
    kind = prop.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "enum" if "enum" in prop else "any"
    return str(kind)


def _value(prop: Mapping[str, Any], root: Mapping[str, Any], depth: int) -> tuple[Any, bool]:
    """A value for `prop`, and whether the schema is satisfied by it as far as the generator can tell."""
    if "default" in prop and prop["default"] is not None:
        return prop["default"], True
    if "const" in prop and prop["const"] is not None:
        return prop["const"], True
    if isinstance(prop.get("enum"), list) and any(v is not None for v in prop["enum"]):
        return next(v for v in prop["enum"] if v is not None), True
    examples = prop.get("examples")
    if isinstance(examples, list) and examples and examples[0] is not None:
        return examples[0], True
    kind = _type_name(prop)
    if kind == "object":
        return _object(prop, root, depth)
    if kind == "array":
        return _array(prop, root, depth)
    simple = _SIMPLE.get(kind)
    if simple is None:  # null-only, or no type at all: a string is the likeliest, and the user must look
        return "PIN", False
    value = simple(prop)
    too_long = isinstance(prop.get("minLength"), int) and prop["minLength"] > _MAX_SIZE
    return value, not too_long and not any(key in prop for key in ("pattern", "not", "multipleOf"))


def _object(prop: Mapping[str, Any], root: Mapping[str, Any], depth: int) -> tuple[dict[str, Any], bool]:
    if depth >= _MAX_DEPTH:
        return {}, False
    found = prop.get("properties")
    properties: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    required = prop.get("required") or []
    values: dict[str, Any] = {}
    satisfied = True
    for name in required:
        value, ok = _value(_resolved(properties.get(name, {}), root, depth + 1), root, depth + 1)
        values[name] = value
        satisfied = satisfied and ok
    return values, satisfied


def _array(prop: Mapping[str, Any], root: Mapping[str, Any], depth: int) -> tuple[list[Any], bool]:
    items = _resolved(prop.get("items", {}), root, depth + 1)
    low = prop.get("minItems")
    count = max(1, min(low, _MAX_SIZE) if isinstance(low, int) else 1)
    maximum = prop.get("maxItems")
    if isinstance(maximum, int):
        count = min(count, maximum)
    if count == 0 or depth >= _MAX_DEPTH:
        return [], depth < _MAX_DEPTH
    value, satisfied = _value(items, root, depth + 1)
    satisfied = satisfied and not (isinstance(low, int) and low > _MAX_SIZE)
    if prop.get("uniqueItems") and count > 1:
        return [value], False
    return [value] * count, satisfied


def _string(prop: Mapping[str, Any]) -> str:
    text = _FORMATS.get(str(prop.get("format")), "example")
    low = prop.get("minLength")
    high = prop.get("maxLength")
    if isinstance(low, int) and len(text) < low:
        text = text + "x" * (min(low, _MAX_SIZE) - len(text))
    if isinstance(high, int) and len(text) > high:
        text = text[:high]
    return text


def _number(prop: Mapping[str, Any]) -> float | int:
    integer = _type_name(prop) == "integer"
    low = prop.get("minimum", prop.get("exclusiveMinimum"))
    high = prop.get("maximum", prop.get("exclusiveMaximum"))
    value: float = 1
    if isinstance(low, int | float) and not isinstance(low, bool):
        value = low + (1 if "exclusiveMinimum" in prop and "minimum" not in prop else 0)
    if isinstance(high, int | float) and not isinstance(high, bool) and value > high:
        value = high - (1 if "exclusiveMaximum" in prop and "maximum" not in prop else 0)
    return int(value) if integer else float(value)


_SIMPLE = {
    "string": _string,
    "integer": _number,
    "number": _number,
    "boolean": lambda prop: False,
}


def _short(value: Any) -> str:
    text = toml_text.value(value)
    return text if len(text) <= 40 else text[:37] + "..."
