"""Answers a lead types into a form, generated from the server's `requestedSchema`.

The harness must answer whatever an MCP server asks, not only the shop's forms, so a
lead fills a form from its schema: the restricted, flat JSON Schema of MCP elicitation
(booleans, strings with enum/oneOf/length/format, numbers and integers with bounds,
multi-select arrays). Every answer is valid against the schema: a load test that sends
garbage measures the server's validation, not its MRTR path.

What a lead cannot answer is an error (`UnanswerableSchema`) when the field is required,
so a flow records "the lead could not answer" instead of sending something invalid, and
is left out when optional, as a person skips a field they do not understand.

Draw order (documented because a seed must reproduce a run): properties in schema order;
per property, first whether to fill an optional one, then whether to keep its default,
then the value itself. A pinned field (`overrides`) draws nothing when pinned to one value,
and exactly one `rng.choice` when pinned to a list of choices, in its place in that order.

A schema's `default` is used as given, as a client pre-fills it: a default that breaks
its own schema is the server's bug, and the harness should surface it, not hide it.
"""

from __future__ import annotations

import datetime as dt
import math
import string
from collections.abc import Callable, Mapping
from typing import Any

from harness.config.think import RandomStream

OPTIONAL_SHARE = 0.5
"""How often a lead fills an optional field: people skip about half of them."""

DEFAULT_SHARE = 0.5
"""How often a lead keeps a prefilled default instead of choosing a value."""

_WORDS = (
    "box", "arrived", "dented", "customer", "called", "twice", "label", "torn", "refund",
    "ok", "checked", "photos", "attached", "courier", "late", "parts", "missing", "see", "ticket",
)
_ALNUM = string.ascii_lowercase + string.digits
_FREE_NUMBER_SPAN = 100.0
"""Width of the range drawn from when a number has no (or only one) bound."""
_DEFAULT_TEXT_SPAN = 40
"""Longest free-text answer when the schema sets no maxLength: a short note, not an essay."""
_UNSUPPORTED_KEYWORDS = ("pattern", "multipleOf", "not", "allOf", "if", "$ref")
"""Constraints the generator cannot honour; a field carrying one is treated as unsupported."""

Answer = str | int | float | bool | list[str]


class UnanswerableRequest(ValueError):
    """The lead cannot answer this input request (unsupported method, mode or shape).

    Defined here, beside its subclass, so a caller can catch every "the lead could not
    answer" case with one except clause.
    """


class UnanswerableSchema(UnanswerableRequest):
    """A required field of a form is of a type or constraint the lead cannot fill validly."""


def answer_form(
    schema: Mapping[str, Any],
    rng: RandomStream,
    overrides: Mapping[str, Any] | None = None,
    *,
    optional_share: float = OPTIONAL_SHARE,
    default_share: float = DEFAULT_SHARE,
) -> dict[str, Any]:
    """Return `content` for an accepted form: valid against `schema`, drawn from `rng`.

    `overrides` pins known fields (the refund flow wants `{"release": True}`, a scenario's
    `answers` a SKU); an override applies only when the schema has that property or
    requires it, so one profile's overrides can serve every form a server asks. A value is
    sent as given; a list is the choices a lead picks one from (`pinned_answer`), so a
    multi-select answer is pinned as a list inside the list.
    Raises UnanswerableSchema when the schema is not a flat object or a required field
    cannot be filled.
    """
    properties, required = _form_shape(schema)
    overrides = overrides or {}
    content: dict[str, Any] = {}
    for name in _field_order(properties, required):
        if name in overrides:
            content[name] = pinned_answer(overrides[name], rng)
            continue
        is_required = name in required
        if not is_required and rng.random() >= optional_share:
            continue
        prop = properties.get(name)
        try:
            if prop is None:
                raise UnanswerableSchema("required but has no property definition")
            content[name] = _answer_property(prop, rng, default_share)
        except UnanswerableSchema as error:
            if is_required:
                raise UnanswerableSchema(f"required field {name!r}: {error}") from None
    return content


def pinned_answer(pinned: Any, rng: RandomStream) -> Any:
    """A pinned field's answer: the value itself, or one of a list of choices (one draw).

    A list means choices, never a value, so "sku = ['mug', 'tee']" reads as a person would
    read it: either of the two. An empty list is refused where the scenario is read.
    """
    if isinstance(pinned, list):
        return rng.choice(pinned)
    return pinned


def _form_shape(schema: Mapping[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """Check the schema is a flat object and return its properties and required names."""
    if not isinstance(schema, Mapping):
        raise UnanswerableSchema(f"requestedSchema must be an object, got {type(schema).__name__}")
    if schema.get("type", "object") != "object":
        raise UnanswerableSchema(f"requestedSchema must have type 'object', got {schema.get('type')!r}")
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        raise UnanswerableSchema("requestedSchema needs 'properties' as an object and 'required' as a list")
    return dict(properties), set(required)


def _field_order(properties: Mapping[str, Any], required: set[str]) -> list[str]:
    """Schema order, then required names without a definition (sorted, for determinism)."""
    return list(properties) + sorted(required - properties.keys())


def _answer_property(prop: Any, rng: RandomStream, default_share: float) -> Answer:
    """One field's value: keep the default some of the time, else draw by the field's type."""
    if not isinstance(prop, Mapping):
        raise UnanswerableSchema("property definition is not an object")
    unsupported = [k for k in _UNSUPPORTED_KEYWORDS if k in prop]
    if unsupported:
        raise UnanswerableSchema(f"unsupported constraint {unsupported[0]!r}")
    if "default" in prop and rng.random() < default_share:
        return prop["default"]
    if "const" in prop:
        return prop["const"]
    if "enum" in prop:
        return _pick_enum(prop["enum"], rng)
    if "oneOf" in prop:
        return _pick_enum(_consts(prop["oneOf"]), rng)
    kind = prop.get("type")
    generator = _GENERATORS.get(kind) if isinstance(kind, str) else None
    if generator is None:
        raise UnanswerableSchema(f"unsupported type {kind!r}")
    return generator(prop, rng)


def _pick_enum(options: Any, rng: RandomStream) -> Any:
    """A single-select answer: one of the listed values."""
    if not isinstance(options, list) or not options:
        raise UnanswerableSchema("an enum needs at least one option")
    return rng.choice(options)


def _consts(items: Any) -> list[Any]:
    """The values of a titled enum (`oneOf`/`anyOf` of `{const, title}`)."""
    if not isinstance(items, list) or not all(isinstance(i, Mapping) and "const" in i for i in items):
        raise UnanswerableSchema("oneOf/anyOf options must each be an object with 'const'")
    return [item["const"] for item in items]


def _answer_boolean(prop: Mapping[str, Any], rng: RandomStream) -> bool:
    return rng.random() < 0.5


def _answer_integer(prop: Mapping[str, Any], rng: RandomStream) -> int:
    """An integer inside every bound, inclusive or exclusive."""
    low, high = _numeric_bounds(prop)
    lo = math.floor(low.value) + 1 if low.exclusive else math.ceil(low.value)
    hi = math.ceil(high.value) - 1 if high.exclusive else math.floor(high.value)
    if lo > hi:
        raise UnanswerableSchema(f"no integer between the bounds {low.value} and {high.value}")
    return rng.randint(lo, hi)


def _answer_number(prop: Mapping[str, Any], rng: RandomStream) -> float:
    """A number inside every bound; rounded to cents when that keeps it inside, as people type."""
    low, high = _numeric_bounds(prop)
    if low.value > high.value or (low.value == high.value and (low.exclusive or high.exclusive)):
        raise UnanswerableSchema(f"no number between the bounds {low.value} and {high.value}")
    for candidate in (rng.uniform(low.value, high.value), (low.value + high.value) / 2.0):
        for value in (round(candidate, 2), candidate):
            if low.admits(value) and high.admits(value):
                return value
    raise UnanswerableSchema(f"no representable number between {low.value} and {high.value}")


class _Bound:
    """One end of a numeric range, remembering whether it is exclusive."""

    def __init__(self, value: float, exclusive: bool, is_low: bool) -> None:
        self.value, self.exclusive, self.is_low = float(value), exclusive, is_low

    def admits(self, x: float) -> bool:
        """True when x is on the allowed side of this bound."""
        if self.is_low:
            return x > self.value if self.exclusive else x >= self.value
        return x < self.value if self.exclusive else x <= self.value


def _numeric_bounds(prop: Mapping[str, Any]) -> tuple[_Bound, _Bound]:
    """Both ends of the allowed range; an open end is placed _FREE_NUMBER_SPAN from the other.

    Accepts 2020-12 numeric `exclusiveMinimum`/`exclusiveMaximum` and draft-4 booleans.
    """
    low = _one_bound(prop, "minimum", "exclusiveMinimum", is_low=True)
    high = _one_bound(prop, "maximum", "exclusiveMaximum", is_low=False)
    if low is None and high is None:
        low = _Bound(0.0, False, True)
    if low is None:
        assert high is not None
        low = _Bound(high.value - _FREE_NUMBER_SPAN, False, True)
    if high is None:
        high = _Bound(low.value + _FREE_NUMBER_SPAN, False, False)
    return low, high


def _one_bound(prop: Mapping[str, Any], inclusive_key: str, exclusive_key: str, is_low: bool) -> _Bound | None:
    """The tighter of the inclusive and exclusive bound on one side, or None if open."""
    candidates: list[_Bound] = []
    exclusive = prop.get(exclusive_key)
    if _is_number(prop.get(inclusive_key)):
        candidates.append(_Bound(prop[inclusive_key], exclusive is True, is_low))
    if _is_number(exclusive):
        assert exclusive is not None
        candidates.append(_Bound(exclusive, True, is_low))
    if not candidates:
        return None
    pick = max if is_low else min
    return pick(candidates, key=lambda b: (b.value, b.exclusive) if is_low else (b.value, not b.exclusive))


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _answer_string(prop: Mapping[str, Any], rng: RandomStream) -> str:
    """Free text or a formatted string whose length fits minLength/maxLength."""
    fmt = prop.get("format")
    shape = _STRING_FORMATS.get(fmt)
    if shape is None:
        raise UnanswerableSchema(f"unsupported string format {fmt!r}")
    min_len = int(prop.get("minLength", 0))
    max_len = int(prop.get("maxLength", min_len + _DEFAULT_TEXT_SPAN))
    return shape(rng, min_len, max_len)


def _free_text(rng: RandomStream, min_len: int, max_len: int) -> str:
    """A short note made of words, cut to a length inside the bounds (at least 1 if allowed)."""
    length = _pick_length(rng, max(min_len, min(1, max_len)), max_len)
    words: list[str] = []
    while len(" ".join(words)) < length:
        words.append(rng.choice(_WORDS))
    text = " ".join(words)[:length]
    return text[:-1] + "." if text.endswith(" ") else text


def _email(rng: RandomStream, min_len: int, max_len: int) -> str:
    return _padded(rng, "lead.", "@example.com", min_len, max_len)


def _uri(rng: RandomStream, min_len: int, max_len: int) -> str:
    return _padded(rng, "https://shop.example/n/", "", min_len, max_len)


def _padded(rng: RandomStream, head: str, tail: str, min_len: int, max_len: int) -> str:
    """head + random alphanumerics + tail, the middle sized so the whole fits the bounds."""
    fixed = len(head) + len(tail)
    middle = _pick_length(rng, max(1, min_len - fixed), min(max_len - fixed, 12 + max(0, min_len - fixed)))
    return head + "".join(rng.choice(_ALNUM) for _ in range(middle)) + tail


def _date(rng: RandomStream, min_len: int, max_len: int) -> str:
    return _fixed(_random_instant(rng).date().isoformat(), min_len, max_len)


def _date_time(rng: RandomStream, min_len: int, max_len: int) -> str:
    return _fixed(_random_instant(rng).strftime("%Y-%m-%dT%H:%M:%SZ"), min_len, max_len)


def _random_instant(rng: RandomStream) -> dt.datetime:
    """A second within the protocol revision's year: plausible, and independent of the clock."""
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    return start + dt.timedelta(seconds=rng.randrange(365 * 86400))


def _fixed(value: str, min_len: int, max_len: int) -> str:
    """A fixed-length format either fits the length bounds or cannot be answered."""
    if not min_len <= len(value) <= max_len:
        raise UnanswerableSchema(f"a {len(value)}-character value does not fit length {min_len}..{max_len}")
    return value


def _pick_length(rng: RandomStream, low: int, high: int) -> int:
    if low > high:
        raise UnanswerableSchema(f"no length fits between {low} and {high}")
    return rng.randint(low, high)


def _answer_array(prop: Mapping[str, Any], rng: RandomStream) -> list[Any]:
    """A multi-select: distinct options, as many as minItems/maxItems allow, in listed order."""
    items = prop.get("items")
    if not isinstance(items, Mapping):
        raise UnanswerableSchema("an array needs 'items' with 'enum' or 'anyOf'")
    if "enum" in items:
        options = list(items["enum"])
    elif "anyOf" in items:
        options = _consts(items["anyOf"])
    else:
        raise UnanswerableSchema("array items must list options with 'enum' or 'anyOf'")
    min_items = int(prop.get("minItems", 0))
    max_items = min(int(prop.get("maxItems", len(options))), len(options))
    count = _pick_length(rng, max(min_items, min(1, max_items)), max_items)
    chosen = set(rng.sample(range(len(options)), count))
    return [options[i] for i in sorted(chosen)]


_GENERATORS: dict[str, Callable[[Mapping[str, Any], RandomStream], Answer]] = {
    "boolean": _answer_boolean,
    "integer": _answer_integer,
    "number": _answer_number,
    "string": _answer_string,
    "array": _answer_array,
}

_STRING_FORMATS: dict[str | None, Callable[[RandomStream, int, int], str]] = {
    None: _free_text,
    "email": _email,
    "uri": _uri,
    "date": _date,
    "date-time": _date_time,
}
