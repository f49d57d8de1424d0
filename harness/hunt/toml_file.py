"""A scenario's data (as `tomllib` read it, chaos and knobs changed) written back as a TOML file `run` reads.

The one writer of a hunt's scenario files: each trial's `scenario.toml` (the user's file with its
`[[chaos]]`, duration, seed and name replaced, so `mrtr-harness run` reruns it exactly as drawn)
and the minimal failing scenario. Comments are not kept (they were the user's, about another
schedule). Top-level keys first, then each table (a small flat sub-table inline, `think = { ... }`,
a larger one under a dotted header of its own), then each array of tables, its entries' nested
tables inline; values are `harness.config.toml_text`'s. TOML has no null: a None is left out.
Every shipped scenario survives it unchanged (tests/test_hunt_shrink.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.config.toml_text import key, value


def document(data: Mapping[str, Any], header: str = "") -> str:
    """`data` as a TOML document, `header` lines (each a comment) first."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    if lines:
        lines.append("")
    lines += _document(data)
    return "\n".join(lines).strip("\n") + "\n"


def pairs(table: Mapping[str, Any]) -> list[str]:
    """`key = value` lines of a table (nested tables and arrays inline); a None left out."""
    return [f"{key(str(name))} = {value(item)}" for name, item in table.items() if item is not None]


def _document(data: Mapping[str, Any]) -> list[str]:
    lines = pairs({name: item for name, item in data.items() if not _is_table(item) and not _is_tables(item)})
    for name, item in data.items():
        if _is_table(item):
            lines += _table(key(name), item)
        elif _is_tables(item):
            for entry in item:
                lines += ["", f"[[{key(name)}]]", *pairs(entry)]
    return lines


def _table(header: str, table: Mapping[str, Any]) -> list[str]:
    lines = ["", f"[{header}]", *pairs({name: item for name, item in table.items() if not _own_table(item)})]
    for name, item in table.items():
        if _own_table(item):
            lines += _table(f"{header}.{key(name)}", item)
    return lines


def _own_table(item: Any) -> bool:
    return _is_table(item) and (len(item) > 4 or any(isinstance(entry, Mapping | list) for entry in item.values()))


def _is_table(item: Any) -> bool:
    return isinstance(item, Mapping)


def _is_tables(item: Any) -> bool:
    return isinstance(item, list | tuple) and bool(item) and all(isinstance(entry, Mapping) for entry in item)
