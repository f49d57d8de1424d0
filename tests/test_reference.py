"""The generated reference in docs/ matches the code: a stale document fails here, naming itself.

docs/metrics.md, docs/scenario.md, docs/journal.md and the map in docs/architecture.md are
written by `python -m harness.cli.reference`; a field, metric or module added without running
it leaves a document that lies to its reader.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from pydantic import BaseModel

from harness.capacity import json_fields
from harness.cli.package_map import BEGIN, END, package_map
from harness.cli.reference import CAPACITY_JSON_BEGIN, CAPACITY_JSON_END, DOCUMENTS, SECTIONS, NoSection, splice
from harness.config.scenario import Scenario
from harness.metrics.registry import RunMetrics
from tests.harness_run import ROOT

UNDESCRIBED = {"TargetConfig.logs"}
"""Fields left for now without a description: `logs` belongs to the log-source validation's change."""


def reference(*args: str, root: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.cli.reference", *args, "--root", str(root)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)


def test_the_committed_documents_are_up_to_date():
    result = reference("--check")
    assert result.returncode == 0, result.stderr + "\nrun `python -m harness.cli.reference` and commit docs/"


def test_check_names_a_stale_or_missing_document_and_writing_fixes_it(tmp_path):
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "metrics.md", tmp_path / "docs" / "metrics.md")
    with (tmp_path / "docs" / "metrics.md").open("a") as file:
        file.write("| `mrtr_removed_long_ago_total` | counter | none | A metric the code no longer has. |\n")
    stale = reference("--check", root=tmp_path)
    assert stale.returncode == 1
    assert "docs/metrics.md is stale" in stale.stderr
    assert "docs/scenario.md is stale" in stale.stderr  # missing counts as stale
    assert reference(root=tmp_path).returncode == 0
    assert reference("--check", root=tmp_path).returncode == 0
    written = {str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*") if path.is_file()}
    assert {*DOCUMENTS, *SECTIONS} == written


def test_the_architecture_map_is_checked_and_rewritten_without_touching_the_prose_around_it(tmp_path):
    (tmp_path / "docs").mkdir()
    committed = (ROOT / "docs" / "architecture.md").read_text()
    head, _, rest = committed.partition(BEGIN + "\n")
    _, _, tail = rest.partition(END)
    drifted = head + BEGIN + "\n- `harness/target/`: a package that is no more\n" + END + tail
    (tmp_path / "docs" / "architecture.md").write_text(drifted)
    stale = reference("--check", root=tmp_path)
    assert "docs/architecture.md is stale" in stale.stderr and stale.returncode == 1
    assert reference(root=tmp_path).returncode == 0
    assert (tmp_path / "docs" / "architecture.md").read_text() == committed


def test_the_map_names_every_package_and_module_by_its_docstring(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text('"""The package.\n\nMore than its summary."""\n')
    (package / "a.py").write_text('"""Module a: what it is,\nsaid over two lines.\n\nThen the details."""\n')
    (package / "sub" / "__init__.py").write_text('"""A package inside."""\n')
    (package / "sub" / "b.py").write_text("VALUE = 1\n")
    (package / "loose").mkdir()
    (package / "loose" / "c.py").write_text('"""In a folder with no __init__.py, on the map all the same."""\n')
    assert package_map(package) == ("- `pkg/`: The package.\n"
                                    "  - `a.py`: Module a: what it is, said over two lines.\n"
                                    "- `pkg/loose/`: (no docstring)\n"
                                    "  - `c.py`: In a folder with no __init__.py, on the map all the same.\n"
                                    "- `pkg/sub/`: A package inside.\n"
                                    "  - `b.py`: (no docstring)\n")


def test_a_document_without_the_map_section_says_so():
    with pytest.raises(NoSection):
        splice("# Architecture\n\nNo map here.\n", "- `harness/`\n", BEGIN, END)


def test_the_capacity_guide_lists_every_capacity_json_key_and_a_dropped_one_is_stale(tmp_path):
    """The capacity.json reference in docs/capacity-planning.md has one row per key of `json_fields` (which the
    sweep tests hold against real capacity.json files); a row edited by hand makes the guide stale."""
    committed = (ROOT / "docs" / "capacity-planning.md").read_text()
    section = committed.partition(CAPACITY_JSON_BEGIN + "\n")[2].partition(CAPACITY_JSON_END)[0]
    for title, _, keys in json_fields.PARTS:
        part = section.partition(f"### {title}\n")[2].partition("### ")[0]
        assert [row.split("`")[1] for row in part.splitlines() if row.startswith("| `")] == list(keys), title
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "capacity-planning.md").write_text(committed.replace("| `still_rising` |", "| `rising` |"))
    stale = reference("--check", root=tmp_path)
    assert "docs/capacity-planning.md is stale" in stale.stderr and stale.returncode == 1
    assert reference(root=tmp_path).returncode == 0
    assert (tmp_path / "docs" / "capacity-planning.md").read_text() == committed


def test_the_metrics_reference_names_every_metric_the_exporter_serves():
    exposition = generate_latest(RunMetrics(flows=["refund"], replicas=["r1"]).registry).decode()
    families = re.findall(r"^# TYPE (\S+) (\S+)$", exposition, re.MULTILINE)
    document = (ROOT / "docs" / "metrics.md").read_text()
    assert len(families) >= 10
    for name, kind in families:
        if name.endswith("_created"):
            continue  # the client library's creation timestamps, not metrics of the harness
        assert f"| `{name}` | {kind} |" in document, name


def _models(model: type[BaseModel], seen: set[type[BaseModel]]) -> None:
    seen.add(model)
    for info in model.model_fields.values():
        for candidate in re.findall(r"harness\.[\w.]+\.(\w+)", repr(info.annotation)):
            for module in [name for name in sys.modules if name.startswith("harness.config.")]:
                found = getattr(sys.modules[module], candidate, None)
                if isinstance(found, type) and issubclass(found, BaseModel) and found not in seen:
                    _models(found, seen)


def test_every_scenario_key_is_in_the_reference_with_a_description():
    models: set[type[BaseModel]] = set()
    _models(Scenario, models)
    expected = {"TargetConfig", "Load", "LeadProfile", "RotateKeys", "CallFlow", "LognormalThink"}
    assert expected <= {m.__name__ for m in models}
    document = (ROOT / "docs" / "scenario.md").read_text()
    for model in models:
        for name, info in model.model_fields.items():
            if name in ("kind", "action", "dist"):
                continue  # the discriminators head their sections
            key = info.alias or name
            assert f"| `{key}` |" in document, f"{model.__name__}.{key}"
            if f"{model.__name__}.{name}" not in UNDESCRIBED:
                assert info.description, f"{model.__name__}.{name} has no description"
