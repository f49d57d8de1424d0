"""`report DIR` over a journal of many segments in several processes: each segment folded apart, then merged.

A run's journal rolls into segments (`harness.journal.segments`), each a whole number of lines,
so each one can be folded by its own process and the folds merged in stream order
(`harness.folding.merging`) into what one pass in order gives, to the last bit: counters add,
sketches' sums are whole nanoseconds, a timeline's bins are floor divisions from one time zero.

What a segment's fold cannot know alone is read first or last, in this process:
- the timeline's time zero (`anchor`), set by the first timed record: the journal's head is read
  until it is known, and every process starts from it;
- the records that are no flow's own (run events, rejections, invariants, reconciliation, chaos):
  each process hands them back unfolded, and they are folded here in stream order, then merged last.
  Flow records do not depend on them, but for one thing: a network fault's window counts the rounds
  sent into it, which may lie in later segments. A journal with a network fault is read in one pass.

A segment that does not end on a line's end (damage), or a journal smaller than one segment
(`segment_bytes()`: the processes' start would cost more than they save), is read in one pass as
well (`harness.folding.read.read_run`). The processes are forked from this one and die with it
(`harness.processes.children.lifeline`), also on SIGKILL.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path

from harness.folding.merging import merged
from harness.folding.over_time import Timeline
from harness.folding.read import JournalRead
from harness.journal.segments import UnalignedStop, closed_segments, part_exists, part_size, segment_bytes
from harness.journal.writer import JournalDamage, fold_journal_from, read_journal_from
from harness.processes.children import lifeline

MAX_WORKERS = 8
"""Fold processes at most, however many CPUs: each holds its own copy of the report process's memory (forked) and
its stretch's figures, and one process merges what they all send."""
ANCHOR_RECORDS = 100_000
"""Records read for the timeline's time zero before giving up on the split (a journal with no timed flow record
near its head is read in one pass)."""


@dataclass(frozen=True)
class Stretch:
    """Part of one journal part's stream, `start` to `stop` (a closed segment's bounds; `stop` None: to the end)."""

    path: Path
    start: int
    stop: int | None
    anchor: float | None = None


def workers_available() -> int:
    """One fold process per CPU this process may run on, at most `MAX_WORKERS`."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(cpus, MAX_WORKERS)


def read_parallel(journal_paths: Iterable[Path], workers: int) -> JournalRead | None:
    """The journal folded by `workers` processes, segment by segment, and merged; None when it is better read in
    one pass (too small, one CPU, damage at a segment's end, a network fault: see the module)."""
    paths = list(journal_paths)
    stretches = list(_stretches(paths))
    if workers < 2 or len(stretches) < 2 or sum(part_size(path) for path in paths if part_exists(path)) \
            < segment_bytes():
        return None
    anchor = _time_zero(paths)
    if anchor is None:
        return None
    stretches = [replace(stretch, anchor=anchor) for stretch in stretches]
    whole, others = _fresh(anchor, deferring=False), _fresh(anchor, deferring=False)
    context = get_context("fork")
    with ProcessPoolExecutor(min(workers, len(stretches)), mp_context=context, initializer=lifeline()) as pool:
        for folded in pool.map(fold_stretch, stretches):
            if folded is None:
                return None
            for record in folded.deferred or ():
                others.add(record)
            folded.deferred = None
            merged(whole, folded)
    if others.figures.faults:
        return None
    merged(whole, others)
    whole.name_parts(paths)
    return whole


def fold_stretch(stretch: Stretch) -> JournalRead | None:
    """One stretch folded from the journal's time zero, the records that are no flow's own set aside, what its read
    skipped counted (in a worker); None when the stretch did not end on a line's end."""
    read, damage = _fresh(stretch.anchor, deferring=True), JournalDamage()
    try:
        fold_journal_from(stretch.path, stretch.start, read.fold_for(stretch.path.name), damage, stop=stretch.stop)
    except UnalignedStop:
        return None
    read.records -= len(read.deferred or ())  # counted where they are folded
    read.count_damage(damage)
    return read


def _fresh(anchor: float | None, *, deferring: bool) -> JournalRead:
    read = JournalRead(deferred=[] if deferring else None)
    read.timeline.anchor = anchor
    return read


def _stretches(paths: list[Path]) -> Iterator[Stretch]:
    """Each part's closed segments, then its open one, in the order one pass reads them."""
    for path in paths:
        if not part_exists(path):
            continue
        start = 0
        for segment in closed_segments(path):
            yield Stretch(path, segment.start, segment.end)
            start = segment.end
        yield Stretch(path, start, None)


def _time_zero(paths: list[Path]) -> float | None:
    """The timeline's time zero as one pass sets it: at its first binned record (`Timeline.anchor`)."""
    timeline = Timeline()
    seen = 0
    for path in paths:
        if not part_exists(path):
            continue
        for record in read_journal_from(path, 0):
            try:
                timeline.add(record)
            except (KeyError, TypeError, ValueError, AttributeError):
                pass
            if timeline.anchor is not None:
                return timeline.anchor
            seen += 1
            if seen >= ANCHOR_RECORDS:
                return None
    return None

