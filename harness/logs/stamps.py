"""When a log line says it was written: the timestamp at its start, or in its JSON record.

A run counts only its own rejections, and reconciliation matches a client's rejection
to the logged line by time, so a line's own time is worth more than the time it was
read (a command such as `kubectl logs` may replay a backlog in a burst). Best effort:
a line without a readable time gives None and is kept.

Read: ISO 8601 / RFC 3339 at the start (`2026-11-30T05:12:57.934Z`, `...+01:00`, and
Python's default `2026-11-30 05:12:57,934`), rich's console column (`[11/30/26
05:12:57]`), and a JSON record's `time`, `timestamp`, `ts` or `@timestamp` (a string as
above, or a number of seconds, milliseconds, microseconds or nanoseconds since the
epoch). A time without a zone is local time, as Python's logging and rich write it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Final

TIME_KEYS: Final = ("time", "timestamp", "ts", "@timestamp")
"""JSON fields that hold when the record was written, most common first."""

_ISO = re.compile(r"\s*\[?(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?(Z|z|[+-]\d\d:?\d\d)?")
_RICH = re.compile(r"\s*\[(\d\d)/(\d\d)/(\d\d) (\d\d):(\d\d):(\d\d)\]")
"""rich's default `log_time_format` (`[%x %X]` in the C locale): month/day/two-digit year, local time."""


def line_time(text: str) -> float | None:
    """Seconds since the epoch of the timestamp `text` starts with, or None."""
    match = _ISO.match(text)
    if match is not None:
        year, month, day, hour, minute, second, fraction, zone = match.groups()
        return _epoch(int(year), int(month), int(day), int(hour), int(minute), int(second), fraction, zone)
    match = _RICH.match(text)
    if match is not None:
        month, day, year, hour, minute, second = (int(part) for part in match.groups())
        return _epoch(2000 + year, month, day, hour, minute, second, None, None)
    return None


def record_time(record: dict[str, Any]) -> float | None:
    """Seconds since the epoch of a JSON record's own time field, or None."""
    for key in TIME_KEYS:
        value = record.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            return _epoch_number(float(value))
        if isinstance(value, str):
            stamp = line_time(value)
            if stamp is not None:
                return stamp
    return None


def _epoch(year: int, month: int, day: int, hour: int, minute: int, second: int, fraction: str | None,
           zone: str | None) -> float | None:
    try:
        moment = datetime(year, month, day, hour, minute, min(second, 59))
    except ValueError:
        return None
    if zone is not None:
        moment = moment.replace(tzinfo=_zone(zone))
    seconds = moment.timestamp()  # naive: local time
    if fraction:
        seconds += int(fraction) / 10 ** len(fraction)
    return seconds


def _zone(text: str) -> timezone:
    if text in ("Z", "z"):
        return UTC
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    return timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))


def _epoch_number(value: float) -> float | None:
    """A number of seconds, ms, µs or ns since the epoch, by its size (any of them from 1973 to 5138)."""
    for scale in (1.0, 1e3, 1e6, 1e9):
        seconds = value / scale
        if 1e8 <= seconds < 1e11:
            return seconds
    return None
