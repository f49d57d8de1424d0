"""The scenario file's JSON Schema, as an editor uses it: every shipped scenario points at it and passes it, and the
structural mistakes `validate` refuses are marked by it too.

The schema (docs/scenario.schema.json, printed by `mrtr-harness schema`) is checked here with
the `jsonschema` package, a draft 2020-12 validator as an editor's is, on each file as
`tomllib` reads it. The bad-input table is tests/test_scenario_validation.py's: each row is
either structural (the schema marks it) or one only `validate` can see (the keys together, a
threshold's meaning, a URL's parts, a duration's size written as text), and which is said here
row by row. Costs: one `mrtr-harness schema` subprocess; the rest is in-process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from harness.cli.reference import _default_of, _sections
from harness.config.durations import parse_duration
from harness.config.scenario import Scenario
from harness.config.scenario_schema import DURATION_TEXT, SCHEMA_ID, SHARE_TEXT, shipped_schema
from harness.init.writer import schema_directive
from tests.harness_run import ROOT
from tests.test_scenario_validation import BASE, BROKEN

SCHEMA_PATH = (ROOT / "docs" / "scenario.schema.json").resolve()
SCENARIOS = sorted((ROOT / "scenarios").rglob("*.toml"))

STRUCTURAL = {
    # an unknown key, or a key of another kind of table
    "unknown-top-level-key", "unknown-target-key", "unknown-load-key", "unknown-chaos-key", "unknown-flow-key",
    "a-pause-key-on-a-restart", "a-call-key-on-a-refund",
    # a value outside its choices
    "unknown-action", "unknown-flow-kind", "unknown-target-kind", "unknown-model", "unknown-routing",
    "unknown-keyring", "unknown-store", "unjudged-neither-fail-nor-pass",
    # a wrong type, or text that is no duration
    "rate-as-text", "replicas-as-text", "seed-as-text", "a-threshold-that-is-a-number", "grace-not-a-duration",
    "chaos-at-a-negative-time", "endless-duration", "endless-grace",
    # a number outside its range, a name that does not fit its pattern
    "endless-rate", "rate-of-a-trillion", "negative-rate", "no-replicas", "too-many-replicas",
    "time-scale-below-1", "weight-zero", "zero-ttl", "stage-rate-of-a-billion", "a-bad-variable-name",
    "auth-secret-in-the-file",
    # a required key missing
    "no-duration", "no-flows",
}
"""The rows of the bad-input table the schema marks; every other row is one only `validate` can refuse."""


@cache
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def errors(data: dict[str, Any]) -> list[str]:
    return [f"{'.'.join(map(str, error.absolute_path))}: {error.message[:200]}"
            for error in Draft202012Validator(schema()).iter_errors(data)]


def test_the_schema_is_draft_2020_12_with_a_stable_id():
    Draft202012Validator.check_schema(schema())
    assert schema()["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema()["$id"] == SCHEMA_ID == "https://mrtr-harness.invalid/schemas/scenario"


def test_the_printed_schema_is_what_docs_scenario_schema_json_holds():
    printed = subprocess.run([sys.executable, "-m", "harness", "schema"], capture_output=True, text=True,
                             cwd=ROOT, timeout=60, check=False)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == SCHEMA_PATH.read_text(encoding="utf-8")


def test_the_catalogue_is_all_there():
    assert len(SCENARIOS) >= 30 and any(path.parent.name == "on-call" for path in SCENARIOS)


@pytest.mark.parametrize("path", SCENARIOS, ids=[str(path.relative_to(ROOT)) for path in SCENARIOS])
def test_every_shipped_scenario_points_at_the_schema_and_passes_it(path: Path):
    text = path.read_text(encoding="utf-8")
    directive, _, _ = text.partition("\n")
    assert directive.startswith("#:schema "), f"{path} does not start with the schema directive"
    assert (path.parent / directive.removeprefix("#:schema ")).resolve() == SCHEMA_PATH
    assert errors(tomllib.loads(text)) == []


@pytest.mark.parametrize("name", list(BROKEN))
def test_each_structural_row_of_the_bad_input_table_fails_the_schema_and_no_other_row_does(name: str):
    (old, new), _, _ = BROKEN[name]
    found = errors(tomllib.loads(BASE.replace(old, new, 1)))
    if name in STRUCTURAL:
        assert found, f"{name}: the schema takes what validate refuses for its shape"
    else:
        assert not found, f"{name}: marked by the schema, but listed as one only validate sees: {found}"


def test_the_base_scenario_of_the_table_passes_and_the_structural_rows_are_rows_of_it():
    assert errors(tomllib.loads(BASE)) == []
    assert set(BROKEN) >= STRUCTURAL and len(STRUCTURAL) >= 30


DURATIONS = ["90s", "10m", "1h30m", "250ms", " 2m ", "1h 30m", "1.5s", "30", "0.25", "2d", "1e3", "+5"]
NOT_DURATIONS = ["soon", "-5s", "10 minutes", "5x", "s", "", "1.s", "inf", "nan", "5s5"]


@pytest.mark.parametrize("text", DURATIONS)
def test_a_duration_the_loader_reads_fits_the_schema(text: str):
    assert parse_duration(text) >= 0
    grace = schema()["properties"]["grace"]
    assert not list(Draft202012Validator(grace).iter_errors(text)), text


@pytest.mark.parametrize("text", NOT_DURATIONS)
def test_text_the_loader_refuses_as_a_duration_does_not_fit_the_schema(text: str):
    with pytest.raises(ValueError):
        parse_duration(text)
    assert list(Draft202012Validator({"type": "string", "pattern": DURATION_TEXT}).iter_errors(text)), text


def test_durations_and_tolerances_are_numbers_in_range_or_text_and_arguments_one_table_or_many():
    target = schema()["$defs"]["TargetConfig"]["properties"]
    assert not errors({**tomllib.loads(BASE), "compare": {"completed_ratio": "5%", "significance": 0.05}})
    assert errors({**tomllib.loads(BASE), "compare": {"completed_ratio": "5"}})  # a tolerance is a percentage
    ttl = Draft202012Validator(target["ttl"])
    assert not list(ttl.iter_errors(600)) and not list(ttl.iter_errors("10m"))
    assert list(ttl.iter_errors(0)) and list(ttl.iter_errors(31 * 86400))  # above zero, at most 30 days
    assert {"type": "string", "pattern": SHARE_TEXT} in schema()["$defs"]["CompareSettings"]["properties"][
        "completed_ratio"]["anyOf"]
    one_table = {**tomllib.loads(BASE), "flows": [{"kind": "call", "tool": "t", "arguments": {"a": 1}}]}
    many = {**one_table, "flows": [{"kind": "call", "tool": "t", "arguments": [{"a": 1}, {"a": 2}]}]}
    assert errors(one_table) == [] and errors(many) == []


def test_every_default_in_the_schema_is_the_one_docs_scenario_md_shows_and_fits_its_key():
    """The schema's defaults read as the reference's do ("10s", "20%"), and each validates against its own key."""
    checked = 0
    for section in _sections(Scenario):
        for model in [section.model] if section.model is not None else section.variants:
            node = schema() if model is Scenario else schema()["$defs"][model.__name__]
            for name, info in model.model_fields.items():
                key = node["properties"][info.alias or name]
                shown = _default_of(info)
                if info.is_required() or info.default_factory is not None:
                    assert "default" not in key, (model.__name__, name)
                    continue
                assert "default" in key, (model.__name__, name)
                expected = None if shown == "none" else json.loads(shown.strip("`"))
                assert key["default"] == expected, (model.__name__, name, key["default"], shown)
                fits = Draft202012Validator({**key, "$defs": schema()["$defs"]}).iter_errors(key["default"])
                assert not list(fits), (model.__name__, name)
                checked += 1
    assert checked >= 80


def test_init_points_a_file_written_anywhere_at_the_checkouts_schema_and_says_how_to_write_one_without_it(
        tmp_path: Path):
    """`mrtr-harness init -o FILE` writes the path from FILE's folder (tests/test_init.py checks a whole file)."""
    assert shipped_schema() == SCHEMA_PATH
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    directive = schema_directive(deep)
    assert directive.startswith("#:schema ") and directive.endswith("\n")
    assert (deep / directive.removeprefix("#:schema ").strip()).resolve() == SCHEMA_PATH
    assert schema_directive(ROOT / "scenarios") == "#:schema ../docs/scenario.schema.json\n"
    # installed without docs/: a copy beside the file, which the header says `mrtr-harness schema` prints
    assert schema_directive(deep, tmp_path / "absent.json") == "#:schema scenario.schema.json\n"
