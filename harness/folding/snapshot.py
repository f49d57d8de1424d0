"""The figures a run folded, saved beside its journal, so `report DIR` and `compare` need not read it again.

A run writes `figures.json` every minute while it runs and once more at its end: what it
folded from every journal record as it wrote it, with the size of each journal part at
that moment and the bytes just before that size. A reader takes it when every part still
has exactly that size; when parts only grew past it (a run killed after its last
snapshot, or one still running), it takes the snapshot and folds only the records after
those sizes; otherwise (a part shorter, or not the bytes it had) it ignores the snapshot
and falls back to one streaming pass over the journal, which is the truth.

The file is data and nothing else: JSON of counters, bins and sketch stores, read back
through `harness.journal.plain`, which takes the shape from the fold's own type
annotations and never looks a name up from the file. A results folder travels (a CI
artifact, a run handed on), so a snapshot that is larger than `MAX_BYTES`, does not parse,
is of another format, or holds a value of the wrong type or sizes that do not match the
journal is ignored with one line on standard error, and the journal is folded instead.
"""

from __future__ import annotations

import base64
import binascii
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import orjson

from harness.atomic_files import write_atomically
from harness.capped_read import TooLarge, read_capped
from harness.journal.plain import NotPlain, from_plain, to_plain
from harness.journal.segments import PartReader, part_exists, part_size
from harness.journal.writer import JournalDamage, JournalView, read_journal_from

SNAPSHOT = "figures.json"
_END = 256
"""Bytes before each saved size kept with the snapshot, to know the journal is the one it was saved from."""
KIND = "mrtr-harness figures"
FORMAT = 15
"""Raised whenever the folded figures change shape (2: network faults' windows; 3: the journal's unreadable and
torn lines counted; 4: `RunFigures.by_host`; 5: the rounds refused for their OAuth token or scope, and
those resent; 6: JSON instead of a pickle; 7: an invariant's examples as a list of lines; 8: the table the
run judged; 9: the request states' sizes; 10: each top error's example trace ids; 11: a sketch's sum in whole
nanoseconds; 12: the foreign records of workers' parts; 13: the replicas' health series; 14: whether the load
began, and -32021's reconciliation; 15: the race probes, stdio cold starts, and the replica of an invariant's
flow), so an older snapshot is refolded."""
MAX_BYTES = 64 << 20
"""A larger snapshot is not read (the fold's figures do not grow with the run: a real one is a small share of it)."""
V = TypeVar("V", bound=JournalView)


class NotASnapshot(ValueError):
    """A snapshot this reader does not take: why, in a few words."""


def write_snapshot(folder: Path, folded: object, parts: Sequence[Path], sizes: dict[str, int] | None = None
                   ) -> Path | None:
    """Save `folded` with the size of each journal part it covers and the bytes before it: `sizes` (by file name)
    when the caller folded up to known sizes, else each part's size now (flushed by the caller first).

    A fold holding a value with no plain form (a journal record of the wrong type kept as is) is not saved:
    one line says so, and a later `report DIR` folds the journal. None then, else the file written.
    """
    sizes = _sizes(parts) if sizes is None else sizes
    path = folder / SNAPSHOT
    ends = {name: base64.b64encode(end).decode() for name, end in _ends(parts, sizes).items()}
    try:
        data = orjson.dumps({"kind": KIND, "format": FORMAT, "parts": sizes, "ends": ends,
                             "folded": to_plain(folded, type(folded))})
    except (NotPlain, TypeError) as exc:  # orjson's error is a TypeError
        print(f"mrtr-harness: the figures were not saved as {path} ({exc}); the journal will be folded instead",
              file=sys.stderr)
        return None
    return write_atomically(path, data)


def read_snapshot(folder: Path, parts: Sequence[Path], kind: type[V], damage: JournalDamage | None = None
                  ) -> V | None:
    """The saved fold, brought up to the journal's end; None when there is none or it is not taken (one line on
    standard error says why: not a snapshot of this format, or not of this journal).

    The records after the saved sizes are folded into it part by part, as one pass over the journal would;
    the lines there that are not a record are counted in `damage`.
    """
    path = folder / SNAPSHOT
    if not path.is_file():
        return None
    try:
        saved, folded = _load(path, parts, kind)
    except NotASnapshot as exc:
        print(f"mrtr-harness: {path} ignored ({exc}); the figures are folded from the journal", file=sys.stderr)
        return None
    for part in parts:
        offset = saved.get(part.name, 0)
        if part_size(part) > offset:
            fold_for = getattr(folded, "fold_for", None)  # a worker's part takes a worker's records only
            add = fold_for(part.name) if fold_for is not None else folded.add
            for record in read_journal_from(part, offset, damage):
                add(record)
    return folded


def _load(path: Path, parts: Sequence[Path], kind: type[V]) -> tuple[dict[str, int], V]:
    """(the saved sizes, the fold) of a snapshot that is of this format and of this journal; else `NotASnapshot`."""
    try:
        data = read_capped(path, MAX_BYTES)
    except OSError as exc:
        raise NotASnapshot(f"unreadable: {exc.strerror}") from None
    except TooLarge:
        raise NotASnapshot(f"larger than {MAX_BYTES >> 20} MiB") from None
    try:
        state = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise NotASnapshot("not JSON") from None
    if type(state) is not dict or state.keys() != {"kind", "format", "parts", "ends", "folded"} \
            or state["kind"] != KIND or state["format"] != FORMAT:
        raise NotASnapshot(f"not a {KIND} snapshot of format {FORMAT}")
    try:
        saved = from_plain(state["parts"], dict[str, int])
        ends = {name: base64.b64decode(end, validate=True) for name, end in from_plain(state["ends"],
                                                                                        dict[str, str]).items()}
        folded = from_plain(state["folded"], kind)
    except (NotPlain, binascii.Error) as exc:
        raise NotASnapshot(f"not the figures' shape: {exc}") from None
    if not _continues(parts, saved, ends):
        raise NotASnapshot("saved from a journal other than this one, or from more of it")
    return saved, folded


def _continues(parts: Sequence[Path], saved: dict[str, int], ends: Any) -> bool:
    """Whether the journal is the saved one with records after it: every saved part as long as saved or longer,
    with the bytes it had before that size."""
    sizes = _sizes(parts)
    if not set(saved) <= set(sizes) or any(sizes[name] < size or size < 0 for name, size in saved.items()):
        return False
    return bool(ends == _ends([part for part in parts if part.name in saved], saved))


def _ends(parts: Sequence[Path], sizes: dict[str, int]) -> dict[str, bytes]:
    """The `_END` bytes before each part's size: what tells the same journal from another one of that length."""
    ends = {}
    for part in parts:
        size = sizes.get(part.name)
        if size is None:
            continue
        reader = PartReader(part, max(size - _END, 0))
        end = b""
        while len(end) < min(size, _END) and (chunk := reader.read(min(size, _END) - len(end))):
            end += chunk
        reader.close()
        ends[part.name] = end
    return ends


def _sizes(parts: Sequence[Path]) -> dict[str, int]:
    """Each part's size: of its stream, whatever of it is compressed (`harness.journal.segments`)."""
    return {path.name: part_size(path) for path in parts if part_exists(path)}
