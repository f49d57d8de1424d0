"""A scenario's data (as `tomllib` read it, chaos and knobs changed) written back as a TOML file `run` reads.

A trial's scenario is the user's file with its `[[chaos]]`, duration, seed and name replaced:
written here from the data, so the trial's folder holds a file `mrtr-harness run` reruns
exactly as drawn. Comments are not kept (they were the user's, about another schedule). Top-level
keys first, then tables (dotted headers for nested ones) and arrays of tables; tables inside
an array are inline; values are `harness.config.toml_text`'s. TOML has no null: a None is left out.
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
    _table(data, [], lines)
    return "\n".join(lines).strip("\n") + "\n"


def _table(table: Mapping[str, Any], path: list[str], lines: list[str]) -> None:
    plain = {name: item for name, item in table.items() if item is not None and not _is_table(item)
             and not _is_table_array(item)}
    for name, item in plain.items():
        lines.append(f"{key(name)} = {value(item)}")
    for name, item in table.items():
        if _is_table(item):
            lines += ["", f"[{_dotted([*path, name])}]"]
            _table(item, [*path, name], lines)
        elif _is_table_array(item):
            for entry in item:
                lines += ["", f"[[{_dotted([*path, name])}]]"]
                _table(entry, [*path, name], lines)


def _is_table(item: Any) -> bool:
    return isinstance(item, Mapping)


def _is_table_array(item: Any) -> bool:
    return isinstance(item, list | tuple) and bool(item) and all(isinstance(entry, Mapping) for entry in item)


def _dotted(path: list[str]) -> str:
    return ".".join(key(part) for part in path)
