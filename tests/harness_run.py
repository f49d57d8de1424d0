"""Running `mrtr-harness run` as a user does, in a subprocess, and reading what it left behind."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zstandard
from jsonschema import Draft202012Validator

from harness.journal.writer import read_journal

KEY_LINE = re.compile(rb"^[0-9a-f]{64}$", re.MULTILINE)
"""What a ring key looks like in a file (`harness.mrtr.keys.new_key`): 64 hex characters on a line."""

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
SUMMARY_SCHEMA = ROOT / "docs" / "summary.schema.json"


def valid_summary(path: Path) -> dict[str, Any]:
    """A summary.json as the run wrote it, checked against the shipped JSON Schema (docs/summary.md) first: every
    test reading a real run's summary checks that the schema describes it."""
    document = json.loads(path.read_text())
    Draft202012Validator(json.loads(SUMMARY_SCHEMA.read_text())).validate(document)
    return document


@dataclass
class Finished:
    code: int
    output: str
    folder: Path | None

    @property
    def summary(self) -> dict[str, Any]:
        assert self.folder is not None, self.output
        return valid_summary(self.folder / "summary.json")

    def journal(self) -> list[dict[str, Any]]:
        assert self.folder is not None
        return list(read_journal(self.folder / "journal.jsonl"))


def run_harness(scenario: Path, results: Path, *args: str, timeout: float = 180,
                python_options: tuple[str, ...] = (), env: dict[str, str] | None = None) -> Finished:
    """`mrtr-harness run` as a user runs it; `python_options` go to the run's own interpreter only (e.g.
    `("-X", "importtime")`: the processes the run starts do not inherit them); `env`: variables set for the run."""
    process = subprocess.run([sys.executable, *python_options, "-m", "harness", "run", str(scenario), "--results",
                              str(results), "--quiet", *args], capture_output=True, text=True, timeout=timeout,
                             cwd=ROOT, env={**os.environ, **(env or {})})
    folders = sorted(path for path in results.iterdir() if path.is_dir()) if results.exists() else []
    return Finished(process.returncode, process.stdout + process.stderr, folders[-1] if folders else None)


def imported_modules(output: str) -> set[str]:
    """The modules a process run with `-X importtime` imported, read from its stderr."""
    return {line.split("|")[2].strip() for line in output.splitlines() if line.startswith("import time:")
            and not line.rstrip().endswith("package")}


def key_files(folder: Path) -> list[Path]:
    """Files under `folder` holding something that looks like a sealing key (there should be none)."""
    return [path for path in folder.rglob("*") if path.is_file() and KEY_LINE.search(readable_bytes(path))]


JWT = re.compile(rb"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*")
"""An access token as the shop's authorization server (and most others) issues it: a JWT."""


def readable_bytes(path: Path) -> bytes:
    """A file's bytes as a reader of it sees them: a journal's closed segment (`.zst`) and a rotated log (`.gz`)
    decompressed, so a secret inside one is found as in a plain file."""
    if path.suffix == ".zst":
        with open(path, "rb") as compressed:
            return zstandard.ZstdDecompressor().stream_reader(compressed).read()
    if path.suffix == ".gz":
        return gzip.decompress(path.read_bytes())
    return path.read_bytes()


def leaks(finished: Finished, values: dict[str, str], *, jwts: bool = True) -> list[tuple[str, str]]:
    """Where a secret left the run: (file or "output", what) for each of `values` (name -> value) found in any
    file of the results folder or in the run's output, and with `jwts` for any JWT found there (every token a
    run against the shop used is one)."""
    texts = [(str(path.relative_to(finished.folder)), readable_bytes(path))
             for path in sorted(finished.folder.rglob("*")) if path.is_file()] if finished.folder else []
    texts.append(("output", finished.output.encode()))
    found = [(where, name) for where, text in texts for name, value in values.items() if value.encode() in text]
    return found + [(where, "a JWT") for where, text in texts if jwts and JWT.search(text)]
