"""Native threads where gevent's patching replaced them (pinned by tests/test_segments.py's rolls).

A load process runs under gevent's monkey patching, where `threading` and `_thread` start
greenlets. Work that must not run in the hub (compressing a closed journal segment) needs
the interpreter's own threads: gevent keeps them, `gevent.monkey.get_original`, and without
the patching they are `_thread`'s, the standard library's low-level module.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["native_threads"]


def native_threads() -> tuple[Any, Any]:
    """`_thread`'s own start_new_thread and allocate_lock, also where gevent's patching replaced them."""
    if "gevent.monkey" in sys.modules:
        from gevent.monkey import get_original

        return get_original("_thread", "start_new_thread"), get_original("_thread", "allocate_lock")
    import _thread

    return _thread.start_new_thread, _thread.allocate_lock
