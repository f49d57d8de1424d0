"""Where a run's (or a sweep's) results go: one fresh folder per run, named by its UTC start and name.

Apart from `harness.report`, whose writers a run needs only at its end: a run makes its
folder first thing, and its start-up should not pay for importing the HTML and JUnit writers.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path


def results_folder(root: Path, name: str) -> Path:
    """`<root>/<utc>-<name>`, made fresh (with a suffix when two start in the same second). The name is claimed by
    making the folder, never checked first: two processes that start at once under one root each get their own."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    root.mkdir(parents=True, exist_ok=True)
    suffix = 1
    while True:
        folder = root / (f"{stamp}-{name}" if suffix == 1 else f"{stamp}-{name}-{suffix}")
        try:
            folder.mkdir()
        except FileExistsError:
            suffix += 1
            continue
        return folder
