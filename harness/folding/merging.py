"""Two folds of consecutive stretches of one journal, merged into the fold of both: what `report DIR` over several
processes needs (`harness.folding.parallel`).

`merged(mine, theirs)` takes `theirs` as the fold of the records after `mine`'s, and gives what one fold of all of
them in order gives, to the last bit: counters add (a key keeps its place of first sight, since `mine`'s keys come
first), sketches merge exactly (their sums are whole nanoseconds), lists go on with `theirs`, and a plain value
(a string, a flag, a tuple) is the later record's, as a fold in order would leave it. A number that only one of the
two folds can set (the run's own records are folded in one of them only) is the sum of its value and the other's
zero. A dataclass is merged field by field, its `TRANSIENT` fields (a live run's probes) left as they are; an object
with a `merge` of its own is merged by it. Only folds this process made are merged: nothing read from disk.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any


def merged(mine: Any, theirs: Any) -> Any:
    """The fold of `mine`'s records followed by `theirs`'s (see the module); `mine` is changed and returned, and
    `theirs`'s objects may be taken into it."""
    if theirs is None:
        return mine
    if mine is None:
        return theirs
    if isinstance(mine, Counter):
        mine.update(theirs)
        return mine
    if isinstance(mine, dict):
        for key, value in theirs.items():
            mine[key] = merged(mine[key], value) if key in mine else value
        return mine
    if isinstance(mine, list):
        mine.extend(theirs)
        return mine
    merge = getattr(mine, "merge", None)
    if merge is not None:
        merge(theirs)
        return mine
    if dataclasses.is_dataclass(mine) and not isinstance(mine, type):
        merge_fields(mine, theirs)
        return mine
    if type(mine) in (int, float) and type(theirs) in (int, float):
        return mine + theirs
    return theirs


def merge_fields(mine: Any, theirs: Any) -> None:
    """`merged` for each field of a dataclass, but its `TRANSIENT` ones (`harness.journal.plain`)."""
    for field in dataclasses.fields(mine):
        if field.metadata.get("plain", True):  # TRANSIENT says False
            setattr(mine, field.name, merged(getattr(mine, field.name), getattr(theirs, field.name)))
