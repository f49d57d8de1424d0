"""Output contracts: every tool result checked against the `outputSchema` its tool declared in tools/list.

MCP says a tool that declares an `outputSchema` MUST return `structuredContent` that conforms to it.
A load process reads the declarations once, on the first completed call (a `tools/list`, its pages
followed up to `MAX_PAGES`), and then checks every completed round's result: a result with
`isError` is exempt, a tool that declared nothing is not checked. A mismatch is said in a line
that names where and which keyword failed, never the value (a tool's output is the server's data).

The schemas are foreign text: validated as JSON Schema first (one that is not counts every result
of its tool as a mismatch, saying so), checked with `jsonschema` (a dependency of the MCP SDK),
which resolves no remote `$ref`. A flat object schema of primitive fields (what a typed tool's return
model usually gives, the shop's among them) is first checked by `surely_conforms`, a few µs against
jsonschema's 25-30 (benchmarks/README.md): only a value it is sure of passes there, and jsonschema
judges every other. When tools/list cannot be read, a completed result cannot be shown
to conform: it counts as a mismatch that says so (`UNCHECKED`), so a gate on the count fails closed
rather than passing on nothing checked, and the load process reads tools/list again after
`RETRY_AFTER` seconds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from gevent.lock import BoundedSemaphore

from harness.mrtr.transport import HttpAnswer, RoundTransport
from harness.mrtr.wire import ACCEPT, JSON_CONTENT_TYPE, MCP_METHOD_HEADER

MAX_PAGES: Final = 20
RETRY_AFTER: Final = 10.0
DETAIL_LIMIT: Final = 200
_NOT_VALID = "its outputSchema is not a valid JSON Schema"
UNCHECKED: Final = "not checked: tools/list could not be read"

Checker = Callable[[Any], str | None]


def mismatch_of(validator: Any, structured: Any) -> str | None:
    """The first way `structured` breaks the schema, as `path: keyword` (None: it conforms)."""
    error = next(iter(sorted(validator.iter_errors(structured), key=lambda e: list(e.absolute_path))), None)
    if error is None:
        return None
    path = "/".join(str(part) for part in error.absolute_path) or "structuredContent"
    return f"{path}: fails {error.validator}"[:DETAIL_LIMIT]


_FLAT_KEYWORDS: Final = frozenset({"type", "properties", "required", "additionalProperties", "title", "description"})
_FIELD_KEYWORDS: Final = frozenset({"type", "title", "description", "default"})
_SURE_TYPES: Final[dict[str, Callable[[Any], bool]]] = {
    "string": lambda value: isinstance(value, str),
    "boolean": lambda value: isinstance(value, bool),
    "null": lambda value: value is None,
    "integer": lambda value: isinstance(value, int) and not isinstance(value, bool),  # 1.0: left to jsonschema
    "number": lambda value: isinstance(value, int | float) and not isinstance(value, bool),
    "object": lambda value: isinstance(value, dict),
    "array": lambda value: isinstance(value, list),
}
"""Each JSON Schema type as every draft reads a JSON value of it (a value in doubt is not sure)."""


def surely_conforms(schema: Mapping[str, Any]) -> Callable[[Any], bool] | None:
    """A quick check of a flat object schema whose fields each name their type: True only when a value surely
    conforms (False: jsonschema must judge it). None when the schema says more than such a check can read.

    jsonschema walks the schema anew on every call (a few µs per field); this reads it once.
    """
    properties, required = schema.get("properties", {}), schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not schema.keys() <= _FLAT_KEYWORDS or schema.get("type") != "object" or not isinstance(properties, Mapping) \
            or not isinstance(required, list) or not isinstance(extra, bool):
        return None
    fields: dict[str, tuple[Callable[[Any], bool], ...]] = {}
    for name, field in properties.items():
        kinds = field.get("type") if isinstance(field, Mapping) and field.keys() <= _FIELD_KEYWORDS else None
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not isinstance(kinds, list) or not kinds or not all(kind in _SURE_TYPES for kind in kinds):
            return None
        fields[name] = tuple(_SURE_TYPES[kind] for kind in kinds)
    needed = tuple(required)

    def sure(value: Any) -> bool:
        return isinstance(value, dict) and all(name in value for name in needed) \
            and (extra or value.keys() <= fields.keys()) \
            and all(any(is_kind(value[name]) for is_kind in kinds) for name, kinds in fields.items() if name in value)
    return sure


def checker_for(schema: object) -> Checker:
    """A check of one tool's results against its declared schema (the schema itself is checked first)."""
    from jsonschema import validators
    from jsonschema.exceptions import SchemaError

    if not isinstance(schema, Mapping):
        return lambda _: _NOT_VALID
    try:
        cls = validators.validator_for(schema)
        cls.check_schema(schema)
    except (SchemaError, TypeError, ValueError, RecursionError):
        return lambda _: _NOT_VALID
    validator = cls(schema)
    sure = surely_conforms(schema)

    def check(result: Any) -> str | None:
        if not isinstance(result, Mapping) or result.get("isError"):
            return None
        if "structuredContent" not in result:
            return "no structuredContent, though the tool declared an outputSchema"
        if sure is not None and sure(result["structuredContent"]):
            return None
        try:
            return mismatch_of(validator, result["structuredContent"])
        except RecursionError:
            return "structuredContent nested too deep to check"
    return check


def declared_schemas(pages: list[object]) -> dict[str, Checker]:
    """The checkers of the tools that declare an outputSchema, from tools/list results as read."""
    checkers: dict[str, Checker] = {}
    for page in pages:
        tools = page.get("tools") if isinstance(page, Mapping) else None
        for tool in tools if isinstance(tools, list) else []:
            if isinstance(tool, Mapping) and isinstance(tool.get("name"), str) and "outputSchema" in tool:
                checkers[tool["name"]] = checker_for(tool["outputSchema"])
    return checkers


class OutputContracts:
    """The run's view of each tool's declared output, read once per load process, and the check of a result."""

    def __init__(self, read_pages: Callable[[str], list[object] | None], clock: Callable[[], float] = time.monotonic):
        self._read_pages = read_pages
        self._clock = clock
        self._checkers: dict[str, Checker] | None = None
        self._failed_at: float | None = None
        self._reading = BoundedSemaphore()

    def mismatch(self, tool: str, result: Any, line: str = "") -> str | None:
        """How a completed round's result breaks its tool's declared outputSchema (None: it conforms, or none).

        `line`: the `Authorization` field line tools/list goes with, when it must be read now.
        """
        checkers = self._load(line)
        if checkers is None:
            return UNCHECKED
        check = checkers.get(tool)
        return check(result) if check is not None else None

    def _load(self, line: str) -> dict[str, Checker] | None:
        """The checkers, read now if need be; the flows that need them meanwhile wait for the one read."""
        if self._checkers is not None:
            return self._checkers
        with self._reading:
            if self._checkers is not None:
                return self._checkers
            if self._failed_at is not None and self._clock() - self._failed_at < RETRY_AFTER:
                return None
            pages = self._read_pages(line)
            if pages is None:
                self._failed_at = self._clock()
                return None
            self._checkers = declared_schemas(pages)
            return self._checkers


def read_tool_pages(transport: RoundTransport, url: str, meta_json: str, headers: Mapping[str, str],
                    line: str = "") -> list[object] | None:
    """tools/list's result pages from one replica (None: it did not answer with them)."""
    sent = {**headers, "Content-Type": JSON_CONTENT_TYPE, "Accept": ACCEPT, MCP_METHOD_HEADER: "tools/list"}
    pages: list[object] = []
    cursor: object = None
    for number in range(MAX_PAGES):
        params: dict[str, Any] = {"_meta": json.loads(meta_json)}
        if cursor is not None:
            params["cursor"] = cursor
        body = json.dumps({"jsonrpc": "2.0", "id": number + 1, "method": "tools/list", "params": params}).encode()
        answer = transport.post(url, body, sent, None, line)
        result = _result(answer)
        if result is None:
            return None
        pages.append(result)
        cursor = result.get("nextCursor")
        if not isinstance(cursor, str) or not cursor:
            break
    return pages


def _result(answer: object) -> dict[str, Any] | None:
    if not isinstance(answer, HttpAnswer) or answer.status != 200:
        return None
    text = answer.body.decode("utf-8", "replace")
    if answer.content_type.startswith("text/event-stream"):
        text = next((line[5:].strip() for line in text.splitlines() if line.startswith("data:")), "")
    try:
        message = json.loads(text)
    except (ValueError, RecursionError):
        return None
    result = message.get("result") if isinstance(message, dict) else None
    return result if isinstance(result, dict) else None
