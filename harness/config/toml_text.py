"""Values written as TOML text: what `init` and a hunt's minimal scenario need to write a scenario, comments and all.

A TOML writer library would drop the comments that make the file a guide; the values they
write (strings, numbers, booleans, arrays, inline tables from a tool's schema) are few
enough to write here. A string is a basic string with every control character escaped, so
whatever a server names its tools or fields, the file reads back as it was written. TOML
has no null: a null inside a table is left out, and inside an array becomes "".
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def string(text: str) -> str:
    """A TOML basic string holding `text` exactly (a lone surrogate, which no TOML string can hold, as U+FFFD)."""
    out = []
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        elif 0xD800 <= ord(char) <= 0xDFFF:  # a lone surrogate (JSON can carry one): no TOML string holds it
            out.append("\\ufffd")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def key(name: str) -> str:
    """A key as TOML takes it: bare when it can be, quoted otherwise."""
    return name if _BARE_KEY.match(name) else string(name)


def value(item: Any) -> str:
    """`item` as a TOML value (inline tables and arrays for nested data)."""
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, int):
        return str(item)
    if isinstance(item, float):
        return repr(item) if math.isfinite(item) else ("nan" if math.isnan(item) else ("inf" if item > 0 else "-inf"))
    if isinstance(item, str):
        return string(item)
    if isinstance(item, Mapping):
        return inline_table(item)
    if isinstance(item, list | tuple):
        return "[" + ", ".join(value("" if entry is None else entry) for entry in item) + "]"
    return string(str(item))


def inline_table(table: Mapping[str, Any]) -> str:
    """`table` as a TOML inline table; null values are left out."""
    entries = [f"{key(str(name))} = {value(entry)}" for name, entry in table.items() if entry is not None]
    return "{ " + ", ".join(entries) + " }" if entries else "{}"
