"""The tolerances a comparison judges by: the current run's `[compare]` table, then the command line's.

The current run's scenario, not the baseline's: the run being judged says how much it
may drift. `--tolerance round_duration.p95=20%` uses the table's own dotted keys, so
one name means one thing in a file, on the command line and in compare.json.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from harness.config.compare import CompareSettings
from harness.errors import UsageError


class ToleranceError(UsageError):
    """A `--tolerance` or `--significance` the comparison cannot use (bad input: exit 2)."""


def tolerance_keys(settings: CompareSettings | None = None) -> list[str]:
    """Every key `--tolerance` takes (the table's dotted leaves, `significance` aside), for help and errors."""
    return sorted(_leaves((settings or CompareSettings()).model_dump(exclude={"significance"})))


def settle(settings: CompareSettings, tolerances: Sequence[str] = (), significance: float | None = None
           ) -> CompareSettings:
    """`settings` with each `KEY=VALUE` of the command line applied over it, validated as the table is."""
    data = settings.model_dump()
    known = tolerance_keys(settings)
    for item in tolerances:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in known:
            raise ToleranceError(f"--tolerance {item!r}: expected KEY=PERCENT with KEY one of {', '.join(known)}")
        *parents, leaf = key.split(".")
        table = data
        for parent in parents:
            table = table[parent]
        table[leaf] = value.strip()
    if significance is not None:
        data["significance"] = significance
    try:
        return CompareSettings.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise ToleranceError(f"{where}: {error['msg'].removeprefix('Value error, ')}") from None


def _leaves(table: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for name, value in table.items():
        dotted = f"{prefix}{name}"
        keys += _leaves(value, dotted + ".") if isinstance(value, dict) else [dotted]
    return keys
