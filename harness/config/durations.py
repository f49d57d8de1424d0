"""Durations as people write them in scenario files and on the command line ("90s", "10m", "1h30m", "250ms").

One parser for every place a duration is read, so "2m" means the same thing in a
lead's think time, a TTL and a chaos schedule.
"""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import BeforeValidator, Field

from harness.errors import UsageError

MAX_SECONDS = 30 * 86400.0
"""The longest duration anything takes (a run, a TTL, a lead's think time): beyond, it is a typo."""
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(text: str | int | float) -> float:
    """Return seconds for "90s", "10m", "1h30m", "250ms" or a bare number of seconds.

    Raises ValueError with the offending text, so a scenario error can name it; "inf" and
    "nan" are refused, since a run, a TTL or a wait that never ends is never what was meant.
    """
    if isinstance(text, bool):
        raise ValueError(f"not a duration: {text!r}")
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        compact = text.strip().replace(" ", "")
        try:
            seconds = float(compact)
        except ValueError:
            parts = _PART.findall(compact)
            if not parts or "".join(n + u for n, u in parts) != compact:
                raise ValueError(f"not a duration: {text!r} (write e.g. '90s', '10m', '1h30m', '250ms')") from None
            seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not math.isfinite(seconds):
        raise ValueError(f"a duration must be finite: {text!r}")
    if seconds < 0:
        raise ValueError(f"a duration cannot be negative: {text!r}")
    if seconds > MAX_SECONDS:
        raise ValueError(f"a duration of at most 30 days, not {text!r} ({seconds / 86400:,.0f} days)")
    return seconds


def parse_duration_text(value: object) -> object:
    """A duration written as text ("2s") as seconds, any other value as it is: for a key that also takes a count
    (a network fault's `after`: bytes for truncate, idle seconds for cut-slow)."""
    return parse_duration(value) if isinstance(value, str) else value


def parse_duration_option(option: str, text: str) -> float:
    """`parse_duration` for a command-line option: the error names the option (`--window: not a duration ...`)."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}") from None


def format_duration(seconds: float) -> str:
    """Short human form for reports and progress lines: 0.25s, 5s, 12.3s, 10m, 1h30m (three digits at most
    under a minute: a progress line's 5.00176s is noise)."""
    if seconds < 60:
        return f"{seconds:.3g}s"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "") + (f"{secs}s" if secs else "")
    return text or "0s"


Duration = Annotated[float, BeforeValidator(parse_duration)]
"""A pydantic field type: accepts "90s", "10m", or a number of seconds; holds finite seconds, 0 or more."""

PositiveDuration = Annotated[float, BeforeValidator(parse_duration), Field(gt=0)]
"""A `Duration` that must be above zero: for lengths where zero means nothing (a run, a TTL, a timeout)."""
