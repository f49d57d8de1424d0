"""Import Locust first in a load process (it patches gevent on import), without gevent's repeated package scans.

A load process (`run`, `worker`, `capacity`) must import Locust before anything opens a
socket or a thread: Locust's import runs `gevent.monkey.patch_all()`. While patching,
gevent asks `importlib.metadata.entry_points(group=...)` for plugins about 25 times
(before and after each module it patches), and each call reads the metadata of every
installed distribution again: about 0.08 s of a load process's start-up CPU on the
reference VM (`benchmarks/startup.py`), for a list that cannot change while the import
runs. Here the installed entry points are read once, and every query gevent makes during
the import is answered from that one reading; the function is put back afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from typing import Any

__all__ = ["import_locust"]


def import_locust() -> None:
    """Import Locust (gevent patched as Locust does it); a no-op once it is imported."""
    import sys

    if "locust" in sys.modules:
        return
    with _entry_points_read_once():
        import locust  # noqa: F401 - its import patches gevent


@contextmanager
def _entry_points_read_once() -> Iterator[None]:
    """While inside: `importlib.metadata.entry_points` answers from one reading of the installed packages."""
    original = metadata.entry_points
    everything = original()

    def entry_points(**params: Any) -> Any:
        return everything.select(**params) if params else everything

    metadata.entry_points = entry_points
    try:
        yield
    finally:
        metadata.entry_points = original
