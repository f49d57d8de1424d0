"""The Grafana dashboards checked against Grafana's own dashboard schema (grafana-foundation-sdk), offline.

Grafana cannot run here; `test_dashboards.py` proves every panel's query against a real
Prometheus. This proves the JSON itself is what Grafana's schema describes: each dashboard is
read into the SDK's `Dashboard` model and written back, and every key must survive the round
trip. A misspelt key (`fieldConfigs`, `gridpos`) or a panel field the schema does not have is
dropped by the model, and named here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

from tests.harness_run import ROOT

DASHBOARDS = sorted((ROOT / "dashboards" / "grafana" / "dashboards").glob("*.json"))

LEFT_TO_GRAFANA = {"id", "builtIn", "step", "tagKeys", "textFormat", "titleFormat", "useValueForTime", "definition",
                   "maxPerRow"}
"""Keys Grafana's UI itself writes and reads that the schema leaves out or to the data source plugin: the
dashboard's database `id`, the built-in annotation's marker, a Prometheus annotation's query fields, a query
variable's `definition` (its text form) and a repeated row's `maxPerRow`."""


def key_paths(value: Any, prefix: str = "") -> set[str]:
    """Every key of a JSON document as a path (`.panels[3].gridPos.h`)."""
    found: set[str] = set()
    if isinstance(value, dict):
        for key, inner in value.items():
            found |= {f"{prefix}.{key}"} | key_paths(inner, f"{prefix}.{key}")
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found |= key_paths(inner, f"{prefix}[{index}]")
    return found


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda path: path.name)
def test_every_key_of_the_dashboard_is_in_grafana_s_dashboard_schema(path: Path) -> None:
    document = json.loads(path.read_text())
    read = Dashboard.from_json(document)
    written = json.loads(JSONEncoder().encode(read))
    dropped = sorted(key for key in key_paths(document) - key_paths(written)
                     if key.rsplit(".", 1)[-1] not in LEFT_TO_GRAFANA)
    assert not dropped, f"{path.name}: keys Grafana's schema does not know: {dropped}"
    assert written["panels"] and all(panel.get("type") for panel in written["panels"])


def test_the_check_names_a_key_the_schema_does_not_know() -> None:
    document = json.loads(DASHBOARDS[0].read_text())
    document["panels"][0]["fieldConfigs"] = document["panels"][0].get("fieldConfig", {})
    written = json.loads(JSONEncoder().encode(Dashboard.from_json(document)))
    assert ".panels[0].fieldConfigs" in key_paths(document) - key_paths(written)
