"""The `mrtr-harness` lines of README.md and the guides in docs/, found the way a reader copies them.

Read by tests/test_docs_commands.py (each line parses) and tests/test_guides_run.py (each
line runs here, in the compose stack's test, in another test, or says why not).
"""

from __future__ import annotations

import re

from tests.harness_run import ROOT

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"```[a-z]*\n(.*?)```", re.S)
INDENTED = re.compile(r"(?m)^(?:    |\t)+(mrtr-harness .*)$")


def commands() -> list[tuple[str, str]]:
    """(where, command line) for every `mrtr-harness ...` line in a fenced block of the docs: a line's comment is
    left off, and a line chained with `&&`, `||`, `;` or a pipe gives each `mrtr-harness` part."""
    found = []
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        for block in [*FENCE.findall(text), *INDENTED.findall(FENCE.sub("", text))]:
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split(" # ")[0].strip().removeprefix("$ ")
                for part in re.split(r"\s*(?:&&|\|\|?|;)\s*", line):
                    if part.startswith("mrtr-harness "):
                        found.append((f"{path.relative_to(ROOT)}: {part}", part))
    return found
