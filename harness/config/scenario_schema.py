"""The scenario file's JSON Schema (draft 2020-12), generated from the models that read it, for editors.

An editor that knows the schema (VS Code with Even Better TOML, which is Taplo; JetBrains)
completes keys, shows each key's description and default, and marks an unknown key, a
wrong type or a value outside its enum or range as it is typed, before `validate` runs.
The schema is pydantic's for `Scenario`, adjusted where the file is written otherwise than
the model holds it: a duration is a number of seconds or text such as "90s" or "1h30m", a
`[compare]` tolerance a fraction or text such as "20%", a call's `arguments` one table or a
list of them; defaults read as docs/scenario.md shows them. It checks structure only: what
a model validator decides from several keys together (a chaos step after the end of the
run, an external target without urls), a threshold's meaning, a URL's parts and the range
of a duration written as text are left to `validate`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from harness.config.durations import MAX_SECONDS, format_duration
from harness.config.fields import VALIDATOR_KINDS
from harness.config.flows import one_or_many
from harness.config.scenario import Scenario

SCHEMA_ID = "https://mrtr-harness.invalid/schemas/scenario"
"""The schema's `$id`: a name, not a place to fetch it from (it ships as docs/scenario.schema.json)."""

SCHEMA_FILE = "docs/scenario.schema.json"
"""Where the schema is kept, from the project's root (written and checked by `python -m harness.cli.reference`)."""


def shipped_schema() -> Path:
    """docs/scenario.schema.json of the checkout this harness runs from (missing where it was installed without
    its docs/)."""
    return Path(__file__).resolve().parents[2] / SCHEMA_FILE


DURATION_TEXT = (r"^\s*(?:\+?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
                 r"|(?:\d+(?:\.\d+)? *(?:ms|s|m|h|d) *)+)\s*$")
"""A duration written as text: a number of seconds, or parts such as "1h30m", "90s", "250ms" (spaces between)."""

SHARE_TEXT = r"^\s*\d+(?:\.\d+)?\s*%\s*$"
"""A tolerance written as text: a percentage such as "20%"."""


def _duration(held: JsonSchemaValue) -> JsonSchemaValue:
    """Seconds (0 to 30 days; a count too, for `after`), or text the duration parser reads."""
    if held.get("type") == "number":
        held = {**held, "maximum": MAX_SECONDS}
        if "exclusiveMinimum" not in held:
            held["minimum"] = 0
    return _or_text(held, DURATION_TEXT)


def _share(held: JsonSchemaValue) -> JsonSchemaValue:
    return _or_text(held, SHARE_TEXT)


def _or_text(held: JsonSchemaValue, pattern: str) -> JsonSchemaValue:
    """`held`'s choices (one, or those of its anyOf), and text matching `pattern`."""
    choices = held["anyOf"] if set(held) == {"anyOf"} else [held]
    return {"anyOf": [*choices, {"type": "string", "pattern": pattern}]}


def _one_or_many(held: JsonSchemaValue) -> JsonSchemaValue:
    return {"anyOf": [held, held["items"]]}


_WRITTEN: dict[str, Callable[[JsonSchemaValue], JsonSchemaValue]] = {
    "duration": _duration, "duration-or-count": _duration, "percentage": _share}
"""What a field of each kind a before-validator makes (`harness.config.fields`) takes besides the value it holds:
the schema of the value held, widened."""


def _widening(validator: Callable[..., Any]) -> Callable[[JsonSchemaValue], JsonSchemaValue] | None:
    if validator is one_or_many:
        return _one_or_many
    kind = VALIDATOR_KINDS.get(validator)
    return _WRITTEN.get(kind) if kind is not None else None

_BOUNDS = {"gt": "exclusiveMinimum", "ge": "minimum", "lt": "exclusiveMaximum", "le": "maximum"}
"""pydantic's names of a number's bounds, which it leaves on a field whose number a before-validator reads from
text too, and their JSON Schema keywords."""


class _ScenarioSchema(GenerateJsonSchema):
    """pydantic's JSON Schema of the models, with the forms a scenario file writes that the models convert."""

    def function_before_schema(self, schema: core_schema.BeforeValidatorFunctionSchema) -> JsonSchemaValue:
        held = super().function_before_schema(schema)
        widen = _widening(schema["function"]["function"])
        return widen(held) if widen is not None else held


def _as_written(node: Any) -> None:
    """Walk the schema: a widened key's bounds onto its number, its default as the file writes it ("10m", "20%")."""
    if isinstance(node, list):
        for item in node:
            _as_written(item)
    if not isinstance(node, dict):
        return
    if isinstance(node.get("anyOf"), list):
        _widened(node)
    for value in node.values():
        _as_written(value)


def _widened(node: dict[str, Any]) -> None:
    """One key whose value may be a number or text: its bounds moved onto the number, its default as text."""
    bounds = {_BOUNDS[bound]: node.pop(bound) for bound in list(_BOUNDS) if bound in node}
    for choice in node["anyOf"]:
        if choice.get("type") in ("number", "integer"):
            choice.update(bounds)
            if "exclusiveMinimum" in choice and choice.get("minimum") == 0:
                choice.pop("minimum")
    default = node.get("default")
    patterns = {choice.get("pattern") for choice in node["anyOf"]}
    if isinstance(default, int | float) and not isinstance(default, bool):
        if DURATION_TEXT in patterns:
            node["default"] = format_duration(default)
        elif SHARE_TEXT in patterns:
            node["default"] = f"{default * 100:g}%"


def json_schema() -> dict[str, Any]:
    """The scenario file's schema, with its `$schema` and `$id`."""
    schema = Scenario.model_json_schema(by_alias=True, schema_generator=_ScenarioSchema)
    _as_written(schema)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}


def json_schema_text() -> str:
    """docs/scenario.schema.json as written (and as `mrtr-harness schema` prints it)."""
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
