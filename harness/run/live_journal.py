"""The run's journal and its live fold, made together, because each needs the other.

The journal tells the fold each batch it wrote (`FoldProcess.grown`); the fold has the
journal write out what it still holds before every request (`FoldProcess.flush`), so the
fold answers after folding every record written before the question.
"""

from __future__ import annotations

from pathlib import Path

from harness.journal.segments import segment_bytes
from harness.journal.writer import Journal
from harness.run.live_fold.client import FoldProcess

JOURNAL_FILE = "journal.jsonl"


def journal_and_fold(folder: Path, save_every: float) -> tuple[Journal, FoldProcess]:
    """The journal in `folder` (rolled into segments, `harness.journal.segments`) and the fold of it (not started),
    wired to each other."""
    fold = FoldProcess(folder, save_every)
    journal = Journal(folder / JOURNAL_FILE, on_flush=fold.grown, segment_bytes=segment_bytes())
    fold.flush = journal.flush
    return journal, fold
