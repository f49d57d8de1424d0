"""Which on-call catalogue scenario reproduces a reason, read from the catalogue itself.

Each catalogue scenario (`scenarios/on-call/*.toml`) states the reason it reproduces in its
`[expect]` table (`"rejections{reason='unknown key'}" = "> 0"`). Triage names those files
beside its advice, so the engineer holding a spike can rerun the failure on the embedded shop.
Read from the files (TOML, parsed only, never run), so the advice cannot drift from the
catalogue; a file that does not parse is passed over, and where the catalogue is not
there (an install without the project's folder) triage names none.
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections import defaultdict
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
CATALOGUE = PROJECT / "scenarios" / "on-call"
_WHOLE_RUN_REASON = re.compile(r"^rejections\{\s*reason\s*=\s*'([^']+)'\s*\}$")
"""An `[expect]` key counting one reason over every replica (a replica selector narrows, not reproduces)."""


@functools.cache
def reproducers(folder: Path = CATALOGUE) -> dict[str, tuple[str, ...]]:
    """Reason -> the catalogue files (relative to the project, sorted) that expect it `> 0`."""
    found: defaultdict[str, list[str]] = defaultdict(list)
    for path in sorted(folder.glob("*.toml")):
        for reason in _reasons_reproduced(path):
            found[reason].append(_shown(path))
    return {reason: tuple(paths) for reason, paths in found.items()}


def _reasons_reproduced(path: Path) -> list[str]:
    try:
        expect = tomllib.loads(path.read_text(encoding="utf-8")).get("expect", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return []
    if not isinstance(expect, dict):
        return []
    return [match.group(1) for key, condition in expect.items()
            if (match := _WHOLE_RUN_REASON.match(key.strip())) and isinstance(condition, str)
            and condition.replace(" ", "") == ">0"]


def _shown(path: Path) -> str:
    """The path as a command from the project's root names it (the README's convention)."""
    try:
        return str(path.relative_to(PROJECT))
    except ValueError:
        return str(path)


def rerun_line(reason: str) -> str | None:
    """`mrtr-harness run FILE` for the first scenario that reproduces `reason` (and the others), or None."""
    files = reproducers().get(reason, ())
    if not files:
        return None
    others = f" (also: {', '.join(Path(file).name for file in files[1:])})" if len(files) > 1 else ""
    return f"mrtr-harness run {files[0]}{others}"
