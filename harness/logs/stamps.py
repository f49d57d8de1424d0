"""When a log line says it was written: the timestamp at its start, or in its JSON record.

A run counts only its own rejections, and reconciliation matches a client's rejection
to the logged line by time, so a line's own time is worth more than the time it was
read (a command such as `kubectl logs` may replay a backlog in a burst). Best effort:
a line without a readable time gives None and is kept.

Read: ISO 8601 / RFC 3339 at the start (`2026-11-30T05:12:57.934Z`, `...+01:00`, and
Python's default `2026-11-30 05:12:57,934`), rich's console column (`[11/30/26
05:12:57]`), and a JSON record's `time`, `timestamp`, `ts` or `@timestamp` (a string as
above, or a number of seconds, milliseconds, microseconds or nanoseconds since the
epoch). A time with a zone is exact. A time without one is local time, as Python's logging
and rich write it, unless the caller knows when the line was read (`near`): then it is local
time or UTC, whichever is the later one not after `near` (plus `FUTURE_SLACK`), since a
container usually logs in UTC while the machine reading it may not. docs/architecture.md
says why, and what stays ambiguous.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Final

FUTURE_SLACK: Final = 60.0
"""Seconds a line's own time may read after it was received (clocks a little apart) and still be that time."""

TIME_KEYS: Final = ("time", "timestamp", "ts", "@timestamp")
"""JSON fields that hold when the record was written, most common first."""

_ISO = re.compile(r"\s*\[?(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?(Z|z|[+-]\d\d:?\d\d)?")
_RICH = re.compile(r"\s*\[(\d\d)/(\d\d)/(\d\d) (\d\d):(\d\d):(\d\d)\]")
"""rich's default `log_time_format` (`[%x %X]` in the C locale): month/day/two-digit year, local time."""


def line_time(text: str, near: float | None = None) -> float | None:
    """Seconds since the epoch of the timestamp `text` starts with, or None; `near`: when it was read."""
    match = _ISO.match(text)
    if match is not None:
        year, month, day, hour, minute, second, fraction, zone = match.groups()
        return _epoch(int(year), int(month), int(day), int(hour), int(minute), int(second), fraction, zone, near)
    match = _RICH.match(text)
    if match is not None:
        month, day, year, hour, minute, second = (int(part) for part in match.groups())
        return _epoch(2000 + year, month, day, hour, minute, second, None, None, near)
    return None


def record_time(record: dict[str, Any], near: float | None = None) -> float | None:
    """Seconds since the epoch of a JSON record's own time field, or None; `near`: when it was read."""
    for key in TIME_KEYS:
        value = record.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            try:
                return _epoch_number(float(value))
            except OverflowError:  # an integer too large for a float: no time anyone logged
                return None
        if isinstance(value, str):
            stamp = line_time(value, near)
            if stamp is not None:
                return stamp
    return None


def _epoch(year: int, month: int, day: int, hour: int, minute: int, second: int, fraction: str | None,
           zone: str | None, near: float | None) -> float | None:
    try:
        moment = datetime(year, month, day, hour, minute, min(second, 59))
        if zone is not None:
            seconds = moment.replace(tzinfo=_zone(zone)).timestamp()
        elif near is None:
            seconds = moment.timestamp()  # naive: local time
        else:
            seconds = _local_or_utc(moment, near)
    except (ValueError, OverflowError, OSError):  # no such day, a zone of 24h or more, a moment the clock cannot hold
        return None
    if fraction:
        seconds += int(fraction) / 10 ** len(fraction)
    return seconds


def _local_or_utc(moment: datetime, near: float) -> float:
    """A naive moment read as local time or as UTC: the later reading not after `near`, else the nearer."""
    readings = (moment.timestamp(), moment.replace(tzinfo=UTC).timestamp())
    possible = [seconds for seconds in readings if seconds <= near + FUTURE_SLACK]
    if possible:
        return max(possible)
    return min(readings, key=lambda seconds: seconds - near)


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
