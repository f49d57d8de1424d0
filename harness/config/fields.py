"""What a scenario field is, read once off its declaration: a duration, a share, a replica, a literal, ...

Every reader that treats a field by what it is asks here, so none can answer otherwise: the
hunt's draw (`harness.hunt.draw`: which value to draw) and shrink (`harness.hunt.shrink`:
which value is simpler), the scenario's JSON Schema (`harness.config.scenario_schema`: which
text it also takes) and the reference (`harness.cli.reference`: the type column). A field's
kind comes from its type and its validators, never from its name, except `replica` (the
step's replica, 1-based); which durations are a step's own window and which are harsher
when shorter are named here too. It lives with the configuration (not `harness.chaos`) so
the schema, a leaf, can read it.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from harness.config.compare import parse_share
from harness.config.durations import parse_duration, parse_duration_text

__all__ = ["HARSHER_WHEN_SHORTER", "VALIDATOR_KINDS", "WINDOWS", "FieldFacts", "FieldKind", "field_facts",
           "is_duration", "is_percentage", "model_facts", "validated_kind"]

FieldKind = Literal["replica", "replicas", "duration", "duration-or-count", "percentage", "literal", "flag", "text",
                    "share", "count", "number", "other"]
"""replica: the step's replica (1-based); replicas: the step's subset of them (two or more, 1-based); duration:
seconds, or text such as "90s" (`Duration`); duration-or-count: a count, or a duration written as text (a network
fault's `after`); percentage: a fraction written "20%" (a `[compare]` tolerance); literal: one of a few words; flag:
true or false; text: a string; share: a number from 0 up to 1 (a fault's `toxicity`, a revocation's `share`); count:
a whole number; number: any other number."""

WINDOWS = frozenset({"duration", "interval", "phase_gap"})
"""Durations that are a chaos step's own window (how long it lasts, the wait between its parts): a drawn one ends
within the trial. Others (a latency's delay, a clock's offset, a token's lifetime) are drawn around their default."""

HARSHER_WHEN_SHORTER = frozenset({"ttl", "lifetime"})
"""Durations where a shorter value is a harsher fault, not a simpler one: the shrink leaves them as drawn."""


@dataclass(frozen=True)
class FieldFacts:
    """One field of a model, as its declaration says: its kind, whether it may be left out, its bounds, its choices."""

    name: str
    kind: FieldKind
    held: Any
    """The type it holds, unwrapped of None and `Annotated`."""
    optional: bool
    """None is a value it takes."""
    required: bool
    default: Any
    lower: float | None = None
    upper: float | None = None
    lower_strict: bool = False
    """The lower bound is `gt` (the value must be above it), not `ge`."""
    choices: tuple[Any, ...] = ()
    """A literal's words."""

    @property
    def window(self) -> bool:
        """A duration that is the step's own window (`WINDOWS`)."""
        return self.kind == "duration" and self.name in WINDOWS

    @property
    def harsher_when_shorter(self) -> bool:
        """A duration where shorter is harsher (`HARSHER_WHEN_SHORTER`)."""
        return self.kind == "duration" and self.name in HARSHER_WHEN_SHORTER


VALIDATOR_KINDS: dict[Callable[..., Any], FieldKind] = {
    parse_duration: "duration", parse_duration_text: "duration-or-count", parse_share: "percentage"}
"""The kinds a before-validator makes: a field read through one of these parsers is written as text too."""


def validated_kind(metadata: Iterable[Any]) -> FieldKind | None:
    """The kind one of the field's validators makes it (`VALIDATOR_KINDS`); None: none does."""
    for item in metadata:
        kind = VALIDATOR_KINDS.get(getattr(item, "func", None))  # type: ignore[arg-type]
        if kind is not None:
            return kind
    return None


def is_duration(metadata: Iterable[Any]) -> bool:
    """A `Duration` field: its validators include the one duration parser."""
    return validated_kind(metadata) == "duration"


def is_percentage(metadata: Iterable[Any]) -> bool:
    """A `[compare]` tolerance: written "20%", held as the fraction 0.2."""
    return validated_kind(metadata) == "percentage"


@functools.cache
def model_facts(model: type[BaseModel]) -> dict[str, FieldFacts]:
    """Every field of `model`, by name, in declaration order."""
    return {name: field_facts(name, info) for name, info in model.model_fields.items()}


def field_facts(name: str, info: FieldInfo) -> FieldFacts:
    """One field's facts, from its type, its constraints and its validators (its `Annotated` type's too)."""
    held, optional, metadata = _unwrap(info)
    lower, upper, strict = _bounds(metadata)
    default = None if info.is_required() else info.get_default(call_default_factory=False)
    choices = typing.get_args(held) if typing.get_origin(held) is Literal else ()
    return FieldFacts(name=name, kind=_kind(name, held, metadata, lower, upper), held=held, optional=optional,
                      required=info.is_required(), default=default, lower=lower, upper=upper, lower_strict=strict,
                      choices=choices)


def _kind(name: str, held: Any, metadata: list[Any], lower: float | None, upper: float | None) -> FieldKind:
    if name == "replica":
        return "replica"
    if name == "replicas":
        return "replicas"
    validated = validated_kind(metadata)
    if validated is not None:
        return validated
    if typing.get_origin(held) is Literal:
        return "literal"
    simple: dict[Any, FieldKind] = {bool: "flag", str: "text", int: "count"}
    if held in simple:
        return simple[held]
    if held is float:
        return "share" if lower is not None and lower >= 0 and upper == 1.0 else "number"
    return "other"


def _unwrap(info: FieldInfo) -> tuple[Any, bool, list[Any]]:
    """(the field's type, whether it may be None, its constraints and validators, its `Annotated` type's too)."""
    annotation, metadata = info.annotation, list(info.metadata)
    args = typing.get_args(annotation)
    optional = type(None) in args
    if optional:
        rest = [arg for arg in args if arg is not type(None)]
        annotation = rest[0] if len(rest) == 1 else annotation
    if typing.get_origin(annotation) is Annotated:
        annotation, *extra = typing.get_args(annotation)
        metadata += extra
    return annotation, optional, list(_constraints(metadata))


def _constraints(metadata: Iterable[Any]) -> Iterable[Any]:
    for item in metadata:
        yield item
        yield from getattr(item, "metadata", ())  # a Field(...) inside an Annotated alias (Share, PositiveDuration)


def _bounds(metadata: Iterable[Any]) -> tuple[float | None, float | None, bool]:
    """(lower, upper, lower is strict) from the field's constraints."""
    lower = upper = None
    strict = False
    for item in metadata:
        if isinstance(item, Ge):
            lower = float(item.ge)  # type: ignore[arg-type]
        elif isinstance(item, Gt):
            lower, strict = float(item.gt), True  # type: ignore[arg-type]
        elif isinstance(item, Le):
            upper = float(item.le)  # type: ignore[arg-type]
        elif isinstance(item, Lt):
            upper = float(item.lt)  # type: ignore[arg-type]
    return lower, upper, strict
