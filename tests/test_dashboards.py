"""The shipped dashboards and Prometheus config, checked as files and against the real thing.

Grafana cannot run here, so every query of every panel (and of the chaos annotation,
and every template variable) is evaluated by a real Prometheus that scraped a real
embedded run with chaos, through its HTTP API, using the shipped `prometheus.yml` with
only its intervals rewritten and its file_sd files written by the test.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.metrics.instrument import RejectionCounter
from harness.metrics.registry import RunMetrics
from tests.harness_run import ROOT
from tests.services import free_port, prometheus_server, require_binary, stop_process

DASHBOARDS = ROOT / "dashboards"
PROMETHEUS_YML = DASHBOARDS / "prometheus.yml"
ALERTS = DASHBOARDS / "alerts"
PROVISIONING = DASHBOARDS / "grafana" / "provisioning"
DASHBOARD_FILES = sorted((DASHBOARDS / "grafana" / "dashboards").glob("*.json"))

JOBS = ("mrtr-harness", "mrtr-replicas")
UNITS = {"s", "reqps", "percentunit", "short", "none"}
TIME_PANELS = {"timeseries", "heatmap"}
SCRAPE = "1s"
RATE_INTERVAL = "4s"  # what Grafana computes for a 1 s scrape interval: 4 x scrape
RUN_SECONDS = 12
LINGER = "5s"

SCENARIO = f"""
name = "dashboards"
seed = 5
duration = "{RUN_SECONDS}s"
time_scale = 60
grace = "3s"

[target]
kind = "embedded"
replicas = 3
store = "sqlite"
keyring = "ephemeral"       # per-process keys: retries on another replica fail with `unknown key`
ttl = "10m"

[load]
model = "open"
arrival_rate = 4
ramp = "2s"
routing = "round-robin"

[[flows]]
kind = "refund"
weight = 6

[[flows]]
kind = "return"
weight = 2

[[flows]]
kind = "payout"
weight = 1

[leads]
think = {{ dist = "lognormal", median = "20s", p95 = "1m" }}
decline = 0.05
url_completion = {{ dist = "constant", value = "10s" }}

[[chaos]]
at = "4s"
action = "restart"
replica = 1
"""


# --- the dashboards as data ----------------------------------------------------------------------

def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def all_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows' children included."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def query_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    return (panel for panel in all_panels(dashboard) if panel["type"] != "row")


def prometheus_annotations(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for a in dashboard["annotations"]["list"] if a.get("datasource", {}).get("type") == "prometheus"]


def annotation_expr(annotation: dict[str, Any]) -> str:
    return annotation.get("expr") or annotation.get("target", {}).get("expr", "")


def variable_query(variable: dict[str, Any]) -> str:
    query = variable["query"]
    return query["query"] if isinstance(query, dict) else query


def provisioned_datasource_uid() -> str:
    text = (PROVISIONING / "datasources" / "prometheus.yml").read_text()
    uids = re.findall(r"^\s+uid:\s*(\S+)\s*$", text, re.M)
    assert len(uids) == 1, uids
    assert re.search(r"^\s+type:\s*prometheus\s*$", text, re.M)
    return uids[0]


def every_expr(dashboard: dict[str, Any]) -> Iterator[str]:
    for panel in query_panels(dashboard):
        for target in panel["targets"]:
            yield target["expr"]
    for annotation in prometheus_annotations(dashboard):
        yield annotation_expr(annotation)
    for variable in dashboard["templating"]["list"]:
        yield variable_query(variable)


def test_there_are_dashboards_for_overview_latency_and_mrtr():
    titles = {load(path)["title"] for path in DASHBOARD_FILES}
    assert {"MRTR harness: overview", "MRTR harness: latency", "MRTR harness: MRTR"} <= titles


def test_every_dashboard_has_unique_panel_ids_and_a_schema_grafana_accepts():
    uids = [load(path)["uid"] for path in DASHBOARD_FILES]
    assert len(uids) == len(set(uids)), uids
    for path in DASHBOARD_FILES:
        dashboard = load(path)
        assert 36 <= dashboard["schemaVersion"] <= 39, (path.name, dashboard["schemaVersion"])  # Grafana 10 and 11
        assert dashboard["id"] is None and dashboard["title"] and len(dashboard["uid"]) <= 40
        ids = [panel["id"] for panel in all_panels(dashboard)]
        assert len(ids) == len(set(ids)), (path.name, ids)
        assert all(isinstance(i, int) and i > 0 for i in ids), (path.name, ids)
        for panel in query_panels(dashboard):
            assert panel["targets"], (path.name, panel["title"])
            refs = [target["refId"] for target in panel["targets"]]
            assert len(refs) == len(set(refs)), (path.name, panel["title"], refs)


def test_every_datasource_reference_matches_the_provisioned_uid():
    expected = {"type": "prometheus", "uid": provisioned_datasource_uid()}
    for path in DASHBOARD_FILES:
        dashboard = load(path)
        for panel in query_panels(dashboard):
            assert panel["datasource"] == expected, (path.name, panel["title"])
            for target in panel["targets"]:
                assert target["datasource"] == expected, (path.name, panel["title"], target["refId"])
        for variable in dashboard["templating"]["list"]:
            assert variable["datasource"] == expected, (path.name, variable["name"])
        for annotation in dashboard["annotations"]["list"]:
            if not annotation.get("builtIn"):
                assert annotation["datasource"] == expected, (path.name, annotation["name"])


def test_panels_tile_the_24_column_grid_without_overlapping():
    for path in DASHBOARD_FILES:
        boxes = []
        for panel in load(path)["panels"]:
            grid = panel["gridPos"]
            assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24, (path.name, panel["title"])
            for other_title, other in boxes:
                apart = (grid["x"] + grid["w"] <= other["x"] or other["x"] + other["w"] <= grid["x"]
                         or grid["y"] + grid["h"] <= other["y"] or other["y"] + other["h"] <= grid["y"])
                assert apart, (path.name, panel["title"], other_title)
            boxes.append((panel["title"], grid))


def test_panels_use_base_units_and_percentiles_from_histogram_buckets():
    for path in DASHBOARD_FILES:
        for panel in query_panels(load(path)):
            unit = panel["fieldConfig"]["defaults"].get("unit")
            if panel["type"] != "heatmap":
                assert unit in UNITS, (path.name, panel["title"], unit)
            for override in panel["fieldConfig"]["overrides"]:
                for prop in override["properties"]:
                    if prop["id"] == "unit":
                        assert prop["value"] in UNITS, (path.name, panel["title"], prop)
            for target in panel["targets"]:
                expr = target["expr"]
                for quantile in re.finditer(r"histogram_quantile\(([^,]+),\s*sum by \(([^)]*)\)", expr):
                    assert "le" in [label.strip() for label in quantile.group(2).split(",")], expr
                if "histogram_quantile" in expr:
                    assert "_bucket{" in expr, expr
                assert not re.search(r"quantile=|percentile|_ms\b|_milliseconds", expr), expr


def test_every_metric_a_dashboard_queries_is_one_the_harness_or_a_replica_exports():
    run_metrics = RunMetrics(flows=["refund"], replicas=["r1"])
    run_metrics.preset(actions=["restart"], invariants=["released_once"], hosts=["default"])
    run_metrics.flow_started("refund")
    run_metrics.flow_finished("refund", "completed", 1.0)
    run_metrics.call_done("refund", 2)
    run_metrics.round_done("refund", 1, 0.1, "-32602")
    run_metrics.thought(1.0)
    run_metrics.late_start()
    run_metrics.rejection("r1", "expired")
    run_metrics.chaos_action("restart", time.time())
    from prometheus_client import CollectorRegistry

    replica_registry = CollectorRegistry()
    RejectionCounter(replica_registry)
    exported = {sample.name for registry in (run_metrics.registry, replica_registry)
                for family in registry.collect() for sample in family.samples}
    for path in DASHBOARD_FILES:
        for expr in every_expr(load(path)):
            for name in re.findall(r"\b(mrtr_[a-z0-9_]+)", expr):
                assert name in exported, (path.name, name)
    for rule in alert_rules():
        for name in re.findall(r"\b(mrtr_[a-z0-9_]+)", rule["expr"]):
            assert name in exported, (rule["alert"], name)


def test_every_dashboard_shows_chaos_actions_as_annotations_on_every_time_panel():
    for path in DASHBOARD_FILES:
        dashboard = load(path)
        chaos = [a for a in prometheus_annotations(dashboard) if "mrtr_chaos_" in annotation_expr(a)]
        assert len(chaos) == 1 and chaos[0]["enable"] and not chaos[0].get("hide"), path.name
        assert "filter" not in chaos[0], path.name  # shown on every panel
        assert any(panel["type"] in TIME_PANELS for panel in query_panels(dashboard)), path.name


def test_dashboards_select_a_run_by_its_run_id_label():
    for path in DASHBOARD_FILES:
        dashboard = load(path)
        names = [variable["name"] for variable in dashboard["templating"]["list"]]
        assert "run_id" in names, path.name
        for expr in every_expr(dashboard):
            if expr.startswith("label_values(mrtr_flows_started_total, run_id"):
                continue
            for selector in re.findall(r"\b(?:mrtr_[a-z0-9_]+|up)\{([^}]*)\}", expr):
                assert 'run_id=~"$run_id"' in selector, (path.name, expr)


def test_provisioning_loads_the_dashboards_from_files():
    text = (PROVISIONING / "dashboards" / "mrtr.yml").read_text()
    assert re.search(r"^apiVersion:\s*1\s*$", text, re.M)
    assert re.search(r"^\s+type:\s*file\s*$", text, re.M)
    assert re.search(r"^\s+path:\s*/\S+\s*$", text, re.M)


def test_the_prometheus_config_and_example_targets_pass_promtool(tmp_path):
    promtool = require_binary("promtool")
    (tmp_path / "targets").mkdir()
    (tmp_path / "prometheus.yml").write_text(PROMETHEUS_YML.read_text())
    for example in (DASHBOARDS / "targets" / "examples").glob("*.json"):
        (tmp_path / "targets" / example.name).write_text(example.read_text())
    checked = subprocess.run([promtool, "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True,
                             text=True, timeout=30, cwd="/")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    config = PROMETHEUS_YML.read_text()
    for job in JOBS:
        assert re.search(rf"^\s+- job_name:\s*{job}\s*$", config, re.M), job
    settings = re.sub(r"#.*", "", config)
    assert "static_configs" not in settings and not re.search(r"\d+\.\d+\.\d+\.\d+:\d+|localhost:\d+", settings)
    assert settings.count("file_sd_configs") == len(JOBS)


# --- against a real Prometheus that scraped a real run ------------------------------------------

@dataclass
class ScrapedRun:
    prometheus: str
    run_id: str
    start: float
    end: float  # the last scrape of the harness (it lingers after writing its results)
    replicas: dict[str, int]
    output: str
    folder: Path | None = None

    def chaos_started(self, action: str) -> float:
        """When the run's journal says the action started: the annotation must sit there."""
        assert self.folder is not None
        from harness.journal.writer import read_journal

        return next(r["t"] for r in read_journal(self.folder / "journal.jsonl")
                    if r["type"] == "chaos" and r["action"] == action and r["phase"] == "start")

    def api(self, endpoint: str, **params: Any) -> Any:
        response = httpx.post(f"{self.prometheus}/api/v1/{endpoint}", data=params, timeout=10.0)
        body = response.json()
        assert body["status"] == "success", (endpoint, params, body)
        return body["data"]


def shortened_config(shipped: str) -> str:
    """The shipped config with only its intervals shortened: jobs, file_sd paths and relabelling stay."""
    text = re.sub(r"(scrape_interval|evaluation_interval|scrape_timeout|refresh_interval):\s*\S+",
                  rf"\1: {SCRAPE}", shipped)
    assert text.count("job_name") == shipped.count("job_name")
    return text


SERVING = re.compile(r"serving http://127\.0\.0\.1:(\d+)/mcp")


def _replica_ports(folder: Path) -> dict[str, int]:
    """Each replica's port, from the line it logged when it started serving."""
    ports = {}
    for log in sorted((folder / "target" / "logs").glob("r*.log")):
        found = SERVING.search(log.read_text(errors="replace"))
        if found:
            ports[log.stem] = int(found.group(1))
    return ports


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScrapedRun]:
    tmp = tmp_path_factory.mktemp("dashboards")
    config_dir = tmp / "prometheus"
    targets = config_dir / "targets"
    targets.mkdir(parents=True)
    (config_dir / "prometheus.yml").write_text(shortened_config(PROMETHEUS_YML.read_text()))
    scenario = tmp / "dashboards.toml"
    scenario.write_text(SCENARIO)
    results = tmp / "results"
    port = free_port()
    with prometheus_server(config_dir) as prometheus:
        log = open(tmp / "harness.log", "wb")  # noqa: SIM115 - the harness's output, for its life
        started = time.time()
        process = subprocess.Popen([sys.executable, "-m", "harness", "run", str(scenario), "--results", str(results),
                                    "--quiet", "--metrics-port", str(port), "--metrics-linger", LINGER,
                                    "--prometheus-targets", str(targets)],
                                   cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        try:
            process.wait(timeout=RUN_SECONDS + 90)
        finally:
            stop_process(process)
        (folder,) = [path for path in results.iterdir() if path.is_dir()]
        run_id, replicas = folder.name, _replica_ports(folder)
        assert not list(targets.glob("*.json")), "the run removes its scrape targets when it ends"
        output = (tmp / "harness.log").read_text(errors="replace")
        assert process.returncode in (0, 1), output  # 1: a threshold; never a bad scenario or a dead target
        run = ScrapedRun(prometheus, run_id, started, 0.0, replicas, output, folder)
        up = run.api("query_range", query=f'up{{job="mrtr-harness", run_id="{run_id}"}} == 1',
                     start=started, end=time.time(), step="1s")["result"]
        assert up, f"Prometheus never scraped the harness\n{output}"
        run.end = max(float(t) for series in up for t, _ in series["values"])
        yield run


def substitute(expr: str, run: ScrapedRun, variables: dict[str, str] | None = None) -> str:
    """What Grafana sends for this expression: built-in intervals and template variables filled in."""
    values = {"__rate_interval": RATE_INTERVAL, "__interval": SCRAPE, "__interval_ms": "1000",
              "__range": f"{math.ceil(run.end - run.start)}s", "__range_s": str(math.ceil(run.end - run.start)),
              "run_id": run.run_id, "flow": ".*", "replica": ".*", "host": ".*", **(variables or {})}
    text = re.sub(r"\$(\w+)", lambda match: values[match.group(1)], expr)
    assert "$" not in text, text
    return text


def samples(data: dict[str, Any]) -> list[float]:
    if data["resultType"] == "matrix":
        return [float(v) for series in data["result"] for _, v in series["values"]]
    return [float(series["value"][1]) for series in data["result"]]


def evaluate(run: ScrapedRun, expr: str, *, instant: bool) -> list[float]:
    if instant:
        return samples(run.api("query", query=expr, time=run.end))
    return samples(run.api("query_range", query=expr, start=run.start, end=run.end, step="1s"))


def test_every_target_is_scraped_with_the_run_id_from_its_file_sd_file(scraped):
    result = scraped.api("query", query=f'max_over_time(up{{run_id="{scraped.run_id}"}}[5m])', time=scraped.end)
    seen = {(series["metric"]["job"], series["metric"].get("replica")) for series in result["result"]
            if series["value"][1] == "1"}
    assert seen == {("mrtr-harness", None), ("mrtr-replicas", "r1"), ("mrtr-replicas", "r2"),
                    ("mrtr-replicas", "r3")}, (seen, scraped.output)


def test_every_panel_query_of_every_dashboard_returns_data_after_a_chaos_run(scraped):
    replicas = sorted(scraped.replicas)
    empty = []
    checked = 0
    for path in DASHBOARD_FILES:
        for panel in query_panels(load(path)):
            repeat = panel.get("repeat")
            assignments = [{repeat: value} for value in replicas] if repeat == "replica" else [{}]
            assert repeat in (None, "replica"), (path.name, panel["title"], repeat)
            for variables in assignments:
                for target in panel["targets"]:
                    expr = substitute(target["expr"], scraped, variables)
                    values = evaluate(scraped, expr, instant=target.get("instant", False))
                    checked += 1
                    if not any(math.isfinite(value) for value in values):
                        empty.append(f"{path.name} / {panel['title']} / {target['refId']} {variables}: {expr}")
    assert checked > 40
    assert not empty, "queries without data:\n" + "\n".join(empty)


def test_the_chaos_annotation_marks_the_restart_inside_the_run(scraped):
    for path in DASHBOARD_FILES:
        for annotation in prometheus_annotations(load(path)):
            data = scraped.api("query_range", query=substitute(annotation_expr(annotation), scraped),
                               start=scraped.start, end=scraped.end, step=annotation.get("step", "10s"))
            assert data["result"], (path.name, annotation["name"])
            actions = {series["metric"]["action"] for series in data["result"]}
            assert actions == {"restart"}, actions
            assert annotation["useValueForTime"]  # the value is when the action started, in ms
            when = {float(v) / 1000 for series in data["result"] for _, v in series["values"]}
            assert len(when) == 1, when
            assert abs(when.pop() - scraped.chaos_started("restart")) < 1.0, path.name


def test_every_template_variable_lists_the_run_and_its_values(scraped):
    expected = {"run_id": scraped.run_id, "flow": "refund", "replica": "r1", "host": "default"}
    for path in DASHBOARD_FILES:
        for variable in load(path)["templating"]["list"]:
            query = substitute(variable_query(variable), scraped)
            found = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
            assert found, (path.name, query)
            series = scraped.api("series", **{"match[]": found.group(1)}, start=scraped.start, end=scraped.end)
            values = {labels.get(found.group(2)) for labels in series}
            assert expected[variable["name"]] in values, (path.name, variable["name"], values)


def test_both_counts_of_rejections_show_unknown_key_after_the_restart(scraped):
    """The log collector's count (harness job) and the replicas' own /metrics (replicas job) agree on the reason."""
    for job in JOBS:
        data = scraped.api("query", time=scraped.end, query=(
            f'sum by (reason) (max_over_time(mrtr_request_state_rejections_total{{job="{job}", '
            f'run_id="{scraped.run_id}"}}[5m])) > 0'))
        reasons = {series["metric"]["reason"] for series in data["result"]}
        assert "unknown key" in reasons, (job, reasons, scraped.output)


# --- the alert rules ------------------------------------------------------------------------------


def alert_rules() -> list[dict[str, Any]]:
    import yaml

    groups = yaml.safe_load((ALERTS / "mrtr.rules.yml").read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_the_alert_rules_pass_promtool_and_page_on_what_their_unit_tests_say():
    promtool = require_binary("promtool")
    for command in (["check", "rules", "mrtr.rules.yml"], ["test", "rules", "mrtr.rules.test.yml"]):
        checked = subprocess.run([promtool, *command], capture_output=True, text=True, timeout=60, cwd=ALERTS)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout


def test_the_alert_rules_name_only_reasons_the_harness_knows_and_point_at_the_runbook():
    from harness.mrtr.reasons import TAMPERING_OR_CLIENT_BUG
    from harness.vocabulary import REASONS

    for rule in alert_rules():
        for alternatives in re.findall(r'reason=~?"([^"]+)"', rule["expr"]):
            assert set(alternatives.split("|")) <= set(REASONS), (rule["alert"], alternatives)
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
    paging = next(rule for rule in alert_rules() if rule["alert"] == "MrtrStateTamperingOrClientBug")
    assert set(re.search(r'reason=~"([^"]+)"', paging["expr"])[1].split("|")) == set(TAMPERING_OR_CLIENT_BUG)
    assert "docs/on-call.md" in paging["annotations"]["description"]
