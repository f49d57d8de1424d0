"""One pass over a run's journal into everything its verdict and reports read: `JournalRead`.

The run folds its records into one live (`harness.run.live_fold.worker`), `report DIR` reads the
journal, or the fold the run saved (`harness.folding.snapshot`), into a fresh one: the same
records in the same order, so both reach the same verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.folding.checks import RunChecks
from harness.folding.figures import RunFigures, is_mapping
from harness.folding.fuzz import FuzzFold
from harness.folding.over_time import Timeline
from harness.folding.snapshot import read_snapshot
from harness.folding.top_errors import ErrorTable
from harness.journal.plain import TRANSIENT
from harness.journal.records import WORKER_RECORDS, RecordType, is_worker_part
from harness.journal.segments import part_exists
from harness.journal.writer import JournalDamage, JournalView, fold_journal_from

Fold = Callable[[Mapping[str, Any]], None]
MAX_FOREIGN_NAMES = 20
"""Distinct (part, type) names kept in `JournalRead.foreign`; more are counted under the part's `more`."""


@dataclass
class JournalRead(JournalView):
    """One pass over the journal parts, into everything the reports need; what could not be read is counted.

    A run folds its records into one as it writes them (every part's, the workers' too), so
    its end writes the results without reading the journal again; `report DIR` reads the
    journal into a fresh one, the same records in the same order.
    """

    figures: RunFigures = field(default_factory=RunFigures)
    checks: RunChecks = field(default_factory=RunChecks)
    timeline: Timeline = field(default_factory=Timeline)
    errors: ErrorTable = field(default_factory=ErrorTable)
    fuzz: FuzzFold = field(default_factory=FuzzFold)
    parts: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    records: int = 0
    unreadable: int = 0
    """Lines that are not a record, or records the figures could not take: the verdict was decided without them."""
    torn: int = 0
    """Torn last lines (a part cut mid-write, as a SIGKILL leaves it): the normal end of a killed run's journal."""
    foreign: dict[str, int] = field(default_factory=dict)
    """Records no worker writes found in a worker's part, by part and type (`"journal-w1.jsonl: reconciliation"`):
    forged or damaged, never folded, also counted in `unreadable`. Any at all and the verdict is not trusted."""
    _by_kind: dict[Any, list[Fold]] = field(default_factory=dict, repr=False, compare=False, metadata=TRANSIENT)
    deferred: list[Mapping[str, Any]] | None = field(default=None, repr=False, compare=False, metadata=TRANSIENT)
    """When a list: the records that are no flow's own (run events, rejections, checks, chaos) are put here instead
    of folded, for the reader that folds one stretch of a journal among several (`harness.folding.parallel`)."""

    def as_dict(self) -> dict[str, Any]:
        return {"parts": self.parts, "missing": self.missing, "records": self.records, "unreadable": self.unreadable,
                "torn": self.torn}

    def __getstate__(self) -> dict[str, Any]:
        """Sent to the run without the table of bound folds (`harness.run.live_fold.worker`); rebuilt on use."""
        return {**self.__dict__, "_by_kind": {}}

    def add(self, record: Any) -> None:
        """Fold one record: counted in `records`, or in `unreadable` when it could not be taken."""
        if type(record) is not dict and not is_mapping(record):  # JSON's own dict without a call, once per record
            self.unreadable += 1
            return
        try:
            kind = record.get("type")
            for fold in self._by_kind.get(kind) or self._folds(kind):  # a `type` that is no key: TypeError
                fold(record)
        except (KeyError, TypeError, ValueError):
            self.unreadable += 1
            return
        self.records += 1

    def fold_for(self, part: str) -> Callable[[Any], None]:
        """What folds the records of the journal part named `part`: `add`, or for a worker's part (`is_worker_part`)
        `add` of the records a worker writes only (`WORKER_RECORDS`), any other counted as foreign."""
        if not is_worker_part(part):
            return self.add

        def add_from_worker(record: Any) -> None:
            if type(record) is not dict and not is_mapping(record):
                self.add(record)  # no record at all: counted there
                return
            kind = record.get("type")
            if type(kind) is str and kind in WORKER_RECORDS:
                self.add(record)
            else:
                self.add_foreign(part, kind)

        return add_from_worker

    def add_foreign(self, part: str, kind: Any) -> None:
        """A record in worker part `part` of a type no worker writes: damage, named by part and type."""
        self.unreadable += 1
        name = f"{part}: {kind}" if type(kind) is str and kind.isidentifier() and len(kind) <= 40 else \
            f"{part}: a record of no worker's type"
        if name in self.foreign or len(self.foreign) < MAX_FOREIGN_NAMES:
            self.foreign[name] = self.foreign.get(name, 0) + 1
        else:
            self.foreign[f"{part}: more"] = self.foreign.get(f"{part}: more", 0) + 1

    def foreign_line(self) -> str | None:
        """The foreign records in one line, or None when there are none."""
        if not self.foreign:
            return None
        listed = ", ".join(f"{count} {name.replace(': ', ' `', 1)}`" for name, count in self.foreign.items())
        return (f"a worker's journal part holds records no worker writes ({listed}): forged or damaged, so "
                "the verdict is not trusted")

    def _folds(self, kind: Any) -> list[Fold]:
        """The folds that read records of `kind`: a flow's own records go straight to each fold's method for that
        kind, skipping the folds that would only drop them; any other record to every fold's `add`."""
        found = self._by_kind.get(kind)
        if found is None:
            everything: list[Fold] = [self.figures.add, self.timeline.add, self.checks.add, self.errors.add,
                                      self.fuzz.add]
            routes: dict[Any, list[Fold]] = {
                RecordType.START: [self.figures.add_start, self.timeline.add_start],
                RecordType.ROUND: [self.figures.add_round, self.timeline.add_round, self.errors.add_round,
                                   self.fuzz.add_round],
                RecordType.FLOW: [self.figures.add_flow, self.timeline.add_flow, self.fuzz.add_flow]}
            if self.deferred is not None and kind not in routes:
                everything = [self.deferred.append]
            found = self._by_kind[kind] = routes.get(kind, everything)
        return found

    def count_damage(self, damage: JournalDamage) -> None:
        """Add the lines a read of the journal skipped (not JSON, torn) to the records it could not take."""
        self.unreadable += damage.unreadable
        self.torn += damage.torn

    def name_parts(self, paths: Iterable[Path]) -> None:
        """For a read folded live: the parts as `read_run` would list them (present ones, missing ones)."""
        self.parts, self.missing = [], []
        for path in paths:
            (self.parts if part_exists(path) else self.missing).append(str(path))


def read_saved(folder: Path, parts: Sequence[Path]) -> JournalRead | None:
    """The fold the run saved (`harness.folding.snapshot`), brought up to the journal's end, with the lines after it
    that are not a record counted; None when there is none that matches the journal."""
    damage = JournalDamage()
    saved = read_snapshot(folder, parts, JournalRead, damage)
    if saved is not None:
        saved.count_damage(damage)
    return saved


def read_run(journal_paths: Iterable[Path]) -> JournalRead:
    """Read every part once. A missing part, a line that is not a record or a record the figures cannot take is
    counted, never fatal: results are written in every case, and a half-written journal is the normal case after
    a kill. A part that is no journal at all (binary) is `UnreadableJournal` (exit 2)."""
    read = JournalRead()
    damage = JournalDamage()
    for path in journal_paths:
        if not part_exists(path):
            read.missing.append(str(path))
            continue
        read.parts.append(str(path))
        fold_journal_from(path, 0, read.fold_for(path.name), damage)
    read.count_damage(damage)
    return read
