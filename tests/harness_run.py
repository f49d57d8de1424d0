"""Running `mrtr-harness run` as a user does, in a subprocess, and reading what it left behind."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.journal import read_journal

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"


@dataclass
class Finished:
    code: int
    output: str
    folder: Path | None

    @property
    def summary(self) -> dict[str, Any]:
        assert self.folder is not None, self.output
        return json.loads((self.folder / "summary.json").read_text())

    def journal(self) -> list[dict[str, Any]]:
        assert self.folder is not None
        return list(read_journal(self.folder / "journal.jsonl"))


def run_harness(scenario: Path, results: Path, *args: str, timeout: float = 180) -> Finished:
    process = subprocess.run([sys.executable, "-m", "harness", "run", str(scenario), "--results", str(results),
                              "--quiet", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    folders = sorted(path for path in results.iterdir() if path.is_dir()) if results.exists() else []
    return Finished(process.returncode, process.stdout + process.stderr, folders[-1] if folders else None)
