"""A planted memory leak: the replica keeps N MB a minute of what it serves, to prove a leak fails a run.

`shop replica --leak N` (the `leak` knob, `harness.config.replica_knobs`) wraps the replica's app so each HTTP
request keeps a block of written bytes for as long as the process lives: N MB for each minute of serving, where
a minute counts only while requests come (a gap between two requests counts up to `IDLE_AFTER` seconds), so the
replica leaks under load and stands still when idle, as a real leak on a request path does. The bytes are
written, not only reserved, so they are resident (what `replica_rss_growth` fits).
"""

from __future__ import annotations

import time
from typing import Any

IDLE_AFTER = 2.0
"""Seconds between two requests counted as serving at most: a longer gap is idleness, which does not leak."""
_MB = 1024 * 1024


class Leak:
    """What the leak has kept so far, and when it last grew."""

    def __init__(self, mb_per_minute: float) -> None:
        self.per_second = mb_per_minute * _MB / 60
        self.kept: list[bytes] = []
        self.owed = 0.0
        self.last: float | None = None

    def grow(self, now: float) -> None:
        """Keep the bytes owed for the serving time since the last request."""
        if self.last is not None:
            self.owed += self.per_second * min(max(now - self.last, 0.0), IDLE_AFTER)
        self.last = now
        size = int(self.owed)
        if size >= 4096:
            self.kept.append(b"\xa5" * size)  # written bytes: resident, unlike a zeroed allocation
            self.owed -= size


def leaking(app: Any, mb_per_minute: float) -> Any:
    """The app, keeping `mb_per_minute` MB a minute of serving (nothing: the app itself)."""
    if mb_per_minute <= 0:
        return app
    leak = Leak(mb_per_minute)

    async def leaky(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            leak.grow(time.monotonic())
        await app(scope, receive, send)

    return leaky
