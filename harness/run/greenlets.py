"""The run's own greenlets (chaos, watch, progress): started so a failure is the harness's, stopped in time.

`gevent.Timeout` is a BaseException: left to itself, a greenlet that will not stop would
escape every handler of the run (and skip the accounting of the flows in flight), so a
stop that times out is an ordinary error, the harness's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent

STOP_TIMEOUT = 30.0
"""Seconds the run's own greenlets get to stop; longer means an overloaded process."""


class OverloadedError(RuntimeError):
    """The load process was too busy to stop its own greenlets: its figures cannot be trusted."""


def background(function: Callable[..., Any], *args: Any,
               failed: Callable[[BaseException | None], None]) -> gevent.Greenlet:
    """`function(*args)` in a greenlet; if it dies of an error, `failed` hears it."""
    greenlet = gevent.spawn(function, *args)
    greenlet.link_exception(lambda dead: failed(dead.exception))
    return greenlet


def stop_greenlets(greenlets: list[gevent.Greenlet], timeout: float = STOP_TIMEOUT) -> None:
    """Kill the run's own greenlets; one that has not stopped after `timeout` is the harness's failure."""
    try:
        gevent.killall(greenlets, block=True, timeout=timeout)
    except gevent.Timeout:
        raise OverloadedError(f"the run's own greenlets did not stop within {timeout:.0f} s: the load process "
                              "was too busy (lower the arrival rate, or spread the load with --workers)") from None
