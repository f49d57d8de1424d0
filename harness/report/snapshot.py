"""The figures a run folded, saved beside its journal, so `report DIR` and `compare` need not read it again.

A run writes `figures.pickle` every minute while it runs and once more at its end: what it
folded from every journal record as it wrote it, with the size of each journal part at
that moment and the bytes just before that size. A reader takes it when every part still
has exactly that size; when parts only grew past it (a run killed after its last
snapshot, or one still running), it takes the snapshot and folds only the records after
those sizes; otherwise (a part shorter, or not the bytes it had) it ignores the snapshot
and falls back to one streaming pass over the journal, which is the truth.

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

from harness.journal.writer import JournalDamage, JournalView, read_journal_from

SNAPSHOT = "figures.pickle"
_END = 256
"""Bytes before each saved size kept with the snapshot, to know the journal is the one it was saved from."""
FORMAT = 5
"""Raised whenever the folded figures change shape (2: network faults' windows; 3: the journal's unreadable and
torn lines counted; 4: `RunFigures.by_host`; 5: the rounds refused for their OAuth token or scope, and
those resent), so an older snapshot is refolded."""
V = TypeVar("V", bound=JournalView)

_ALLOWED_MODULES = frozenset({
    "harness.report", "harness.report.verdict", "harness.report.series", "harness.report.errors",
    "harness.report.fuzz", "harness.journal.figures", "harness.journal.distributions", "harness.journal.records",
    "harness.config.mutations", "harness.load.mutations", "ddsketch.ddsketch", "ddsketch.mapping", "ddsketch.store",
})
_ALLOWED_NAMES = {"collections": {"Counter", "OrderedDict", "defaultdict", "deque"},
                  "builtins": {"set", "frozenset", "complex", "bytearray", "slice", "range"}}


def write_snapshot(folder: Path, folded: object, parts: Sequence[Path], sizes: dict[str, int] | None = None) -> Path:
    """Save `folded` with the size of each journal part it covers and the bytes before it: `sizes` (by file name)
    when the caller folded up to known sizes, else each part's size now (flushed by the caller first)."""
    sizes = _sizes(parts) if sizes is None else sizes
    state = {"format": FORMAT, "parts": sizes, "ends": _ends(parts, sizes), "folded": folded}
    path = folder / SNAPSHOT
    temporary = path.with_suffix(".tmp")
    temporary.write_bytes(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
    temporary.replace(path)
    return path


def read_snapshot(folder: Path, parts: Sequence[Path], kind: type[V], damage: JournalDamage | None = None
                  ) -> V | None:
    """The saved fold, brought up to the journal's end; None when it is no `kind` of this format or does not
    match the journal (a part shorter than saved, or not the bytes it had there).

    The records after the saved sizes are folded into it part by part, as one pass over the journal would;
    the lines there that are not a record are counted in `damage`.
    """
    path = folder / SNAPSHOT
    if not path.is_file():
        return None
    try:
        state = _Restricted(io.BytesIO(path.read_bytes())).load()
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError, ValueError, IndexError):
        return None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        return None
    saved, folded = state.get("parts"), state.get("folded")
    if not isinstance(folded, kind) or not isinstance(saved, dict) or not _continues(parts, saved, state.get("ends")):
        return None
    for part in parts:
        offset = saved.get(part.name, 0)
        if part.is_file() and part.stat().st_size > offset:
            for record in read_journal_from(part, offset, damage):
                folded.add(record)
    return folded


def _continues(parts: Sequence[Path], saved: dict[str, int], ends: Any) -> bool:
    """Whether the journal is the saved one with records after it: every saved part as long as saved or longer,
    with the bytes it had before that size."""
    sizes = _sizes(parts)
    if not set(saved) <= set(sizes) or any(sizes[name] < size for name, size in saved.items()):
        return False
    return ends == _ends([part for part in parts if part.name in saved], saved)


def _ends(parts: Sequence[Path], sizes: dict[str, int]) -> dict[str, bytes]:
    """The `_END` bytes before each part's size: what tells the same journal from another one of that length."""
    ends = {}
    for part in parts:
        size = sizes.get(part.name)
        if size is None:
            continue
        with open(part, "rb") as file:
            file.seek(max(size - _END, 0))
            ends[part.name] = file.read(min(size, _END))
    return ends


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
