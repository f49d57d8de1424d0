"""The figures a run folded, saved beside its journal, so `report DIR` and `compare` need not read it again.

At its end a run writes `figures.pickle`: what it folded from every journal record as it
wrote it, with the size of each journal part at that moment. A reader takes it only when
every part still has exactly that size (the journal is the truth; a snapshot that does not
match it is ignored) and falls back to one streaming pass over the journal otherwise: a
killed run has no snapshot, a journal appended to after the run does not match it.

The file is read by a restricted unpickler that builds only the figures' own classes (the
modules in `_ALLOWED`, plain containers) and refuses anything else, so a results folder
from elsewhere cannot make `report` run code. A snapshot of another format is ignored.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

SNAPSHOT = "figures.pickle"
FORMAT = 2
"""Raised whenever the folded figures change shape (2: network faults' windows), so an older snapshot is refolded."""
T = TypeVar("T")

_ALLOWED_MODULES = frozenset({
    "harness.report", "harness.report.verdict", "harness.report.series", "harness.report.errors",
    "harness.report.fuzz", "harness.journal.figures", "harness.journal.distributions", "harness.journal.records",
    "harness.config.mutations", "harness.load.mutations", "ddsketch.ddsketch", "ddsketch.mapping", "ddsketch.store",
})
_ALLOWED_NAMES = {"collections": {"Counter", "OrderedDict", "defaultdict", "deque"},
                  "builtins": {"set", "frozenset", "complex", "bytearray", "slice", "range"}}


def write_snapshot(folder: Path, folded: object, parts: Sequence[Path]) -> Path:
    """Save `folded` with the current size of each journal part (flushed by the caller first)."""
    state = {"format": FORMAT, "parts": _sizes(parts), "folded": folded}
    path = folder / SNAPSHOT
    temporary = path.with_suffix(".tmp")
    temporary.write_bytes(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
    temporary.replace(path)
    return path


def read_snapshot(folder: Path, parts: Sequence[Path], kind: type[T]) -> T | None:
    """The saved fold, when it is a `kind` of this format and every journal part has its saved size; else None."""
    path = folder / SNAPSHOT
    if not path.is_file():
        return None
    try:
        state = _Restricted(io.BytesIO(path.read_bytes())).load()
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError, ValueError, IndexError):
        return None
    if not isinstance(state, dict) or state.get("format") != FORMAT or state.get("parts") != _sizes(parts):
        return None
    folded = state.get("folded")
    return folded if isinstance(folded, kind) else None


def _sizes(parts: Sequence[Path]) -> dict[str, int]:
    return {path.name: path.stat().st_size for path in parts if path.is_file()}


class _Restricted(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module in _ALLOWED_MODULES:
            found = super().find_class(module, name)
            if isinstance(found, type):
                return found
        elif name in _ALLOWED_NAMES.get(module, ()):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a run's figures")
