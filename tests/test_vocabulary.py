"""The vocabulary is a leaf under every other module: the standard library only, nothing of the harness.

The configuration and the reference shop import it without loading anything else; one import
of a third party or of the harness here would make each of them pay for it (or form a cycle).
Read from the source, so an import in a function or under TYPE_CHECKING counts as well.
"""

from __future__ import annotations

import ast
import sys

from tests.harness_run import ROOT

VOCABULARY = ROOT / "harness" / "vocabulary.py"


def imported_roots(source: str) -> set[str]:
    """The top-level names of every module `source` imports (a relative import counts as the harness)."""
    roots = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots.add("harness" if node.level else (node.module or "").partition(".")[0])
    return roots


def test_the_probe_sees_a_harness_and_a_third_party_import():
    source = "import enum\nfrom pydantic import BaseModel\ndef f():\n    from . import errors\n"
    assert imported_roots(source) - set(sys.stdlib_module_names) == {"pydantic", "harness"}


def test_the_vocabulary_imports_the_standard_library_only():
    roots = imported_roots(VOCABULARY.read_text())
    assert roots - {"__future__"} <= set(sys.stdlib_module_names), roots
