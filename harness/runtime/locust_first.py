"""Import Locust first in a load process (it patches gevent on import), and only the parts a run uses.

A load process (`run`, `worker`, `capacity`) must import Locust before anything opens a
socket or a thread: Locust's import runs `gevent.monkey.patch_all()`. Two things in that
import are a load process's start-up cost for nothing it uses (`benchmarks/startup.py`
measures both, on a real run):

* while patching, gevent asks `importlib.metadata.entry_points(group=...)` for plugins
  about 25 times, and each call reads the metadata of every installed distribution
  again (about 0.08 s of CPU on the reference VM), for a list that cannot change while
  the import runs. Here it is read once, and each query during the import is answered
  from that reading; the function is put back afterwards;
* Locust imports its web UI (flask, jinja2, werkzeug: about 0.07 s) whatever the user
  runs, and the harness runs Locust headless, always. Here `locust.web` is a stand-in
  until something uses it: making a `WebUI`, or asking the module for any other name,
  imports the real one then (and puts it in `sys.modules`), so nothing that needs the
  web UI goes without it.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from typing import Any

__all__ = ["import_locust"]

WEB = "locust.web"


def import_locust() -> None:
    """Import Locust (gevent patched as Locust does it); a no-op once it is imported."""
    if "locust" in sys.modules:
        return
    _web_ui_on_demand()
    with _entry_points_read_once():
        import locust  # its import patches gevent
    if not hasattr(locust, "web"):  # as an import of the real submodule would have left it
        locust.web = sys.modules[WEB]


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


def _web_ui_on_demand() -> None:
    """Put a stand-in for `locust.web` in `sys.modules` that imports the real module the first time it is used."""
    if WEB in sys.modules:
        return
    stand_in = types.ModuleType(WEB, "Stands in for Locust's web UI until it is used "
                                      "(see harness.runtime.locust_first).")

    def real() -> types.ModuleType:
        if sys.modules.get(WEB) is stand_in:
            del sys.modules[WEB]
        return importlib.import_module(WEB)

    class WebUI:
        """Makes the real `locust.web.WebUI` (importing the web UI then)."""

        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            return real().WebUI(*args, **kwargs)

    def attribute(name: str) -> Any:
        if name.startswith("__"):  # the import system's own questions (`__path__`: is it a package?)
            raise AttributeError(name)
        return getattr(real(), name)

    stand_in.WebUI = WebUI  # type: ignore[attr-defined]
    stand_in.__getattr__ = attribute  # type: ignore[method-assign]
    sys.modules[WEB] = stand_in
