"""`run --web`: Locust's own web UI for the run, with an MRTR tab, and no control that would break the scenario.

Locust users watch a run in its web UI. The run is started as the scenario says, so the
controls that would change it (start, stop, new user counts, a stats reset) answer 403.
The MRTR tab goes through Locust's documented extension seam for its web UI (an extended
tab and table in `template_args`, the rows added to `/stats/requests` after each request):
rejections by reason and replica, rounds per call, flows in flight waiting on leads, the
chaos actions so far and the reconciliation so far. Its numbers are the run's Prometheus
metrics (`harness.metrics.registry`), the same counts `/metrics` and summary.json show.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from flask import Response, jsonify, request
from locust.env import Environment

from harness._compat.locust import clear_command_line_for_web_ui
from harness.metrics.registry import RunMetrics

__all__ = ["TAB", "mrtr_rows", "serve_web_ui"]

TAB = "mrtr"
COLUMNS = [{"key": "section", "title": "What"}, {"key": "label", "title": "Of"}, {"key": "value", "title": "Count"}]
BLOCKED = {("POST", "/swarm"), ("POST", "/stop"), ("GET", "/stop"), ("POST", "/stats/reset"),
           ("GET", "/stats/reset"), ("POST", "/user")}
"""Locust's controls: the scenario's timeline decides when the load starts, changes and stops."""


def serve_web_ui(env: Environment, host: str, port: int, rows: Callable[[], list[dict[str, Any]]]) -> Any:
    """Start Locust's web UI on host:port for a run already started; the MRTR tab shows `rows()`.

    Locust's web UI reads the process's command line as Locust's own (its extra UI options,
    on every page load); this process's is the harness's, already parsed, so Locust is handed
    an empty one instead of failing on `--web` (`harness._compat.locust`).
    """
    clear_command_line_for_web_ui()
    web_ui = env.create_web_ui(host=host, port=port, delayed_start=True)
    web_ui.template_args["extendedTabs"] = [{"title": "MRTR", "key": TAB}]
    web_ui.template_args["extendedTables"] = [{"key": TAB, "structure": COLUMNS}]
    app = web_ui.app
    assert app is not None, "Locust made its web UI without a Flask app"

    @app.before_request
    def refuse_controls() -> Response | None:
        if (request.method, request.path) in BLOCKED:
            answer = jsonify(success=False, message="this run follows its scenario: start, stop and user counts "
                                                    "are the scenario's (mrtr-harness run)")
            answer.status_code = 403
            return answer
        return None

    @app.after_request
    def add_mrtr_rows(response: Response) -> Response:
        if request.path == "/stats/requests" and response.is_json:
            body = response.get_json()
            body["extended_stats"] = [{"key": TAB, "data": rows()}]
            response.set_data(json.dumps(body))
        return response

    web_ui.start()
    return web_ui


def mrtr_rows(metrics: RunMetrics, started: float | None) -> list[dict[str, Any]]:
    """The tab's rows, from the run's metrics: what a person on call looks at while the run goes."""
    samples = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
               for family in metrics.registry.collect() for sample in family.samples}
    rows: list[dict[str, Any]] = []

    def of(name: str) -> list[tuple[dict[str, str], float]]:
        return [(dict(labels), value) for (sample, labels), value in sorted(samples.items()) if sample == name]

    logged = sum(value for _, value in of("mrtr_request_state_rejections_total"))
    for labels, value in of("mrtr_request_state_rejections_total"):
        if value:
            rows.append(_row("rejections", f"{labels['reason']} on {labels['replica']}", value))
    rows.append(_row("rejections", "all", logged))
    rows += _rounds_per_call(of("mrtr_rounds_per_call_bucket"))
    for labels, value in of("mrtr_flows_in_flight"):
        rows.append(_row("in flight (most wait on a lead)", labels["flow"], value))
    last = {labels["action"]: value for labels, value in of("mrtr_chaos_last_action_timestamp_seconds")}
    for labels, value in of("mrtr_chaos_actions_total"):
        at = last.get(labels["action"])
        when = f", last at {at - started:.1f}s" if at and started else ""
        rows.append(_row("chaos actions", f"{labels['action']}{when}", value))
    client = sum(value for labels, value in of("mrtr_client_errors_total") if labels.get("code") == "-32602")
    rows += [_row("reconciliation", "client -32602 answers", client),
             _row("reconciliation", "logged rejections", logged),
             _row("reconciliation", "unexplained (matched when the load stops)",
                  sum(value for _, value in of("mrtr_unexplained_rejections_total"))),
             _row("reconciliation", "unmatched logged",
                  sum(value for _, value in of("mrtr_unmatched_logged_rejections_total")))]
    return rows


def _rounds_per_call(buckets: list[tuple[dict[str, str], float]]) -> list[dict[str, Any]]:
    """A cumulative histogram's buckets as calls per number of rounds, per flow (empty ones left out)."""
    rows = []
    by_flow: dict[str, list[tuple[float, float]]] = {}
    for labels, value in buckets:
        by_flow.setdefault(labels["flow"], []).append((float(labels["le"]), value))
    for flow, counts in sorted(by_flow.items()):
        below = 0.0
        for bound, cumulative in sorted(counts):
            if cumulative > below:
                label = f"{flow}: more rounds" if bound == float("inf") else f"{flow}: {bound:g} rounds"
                rows.append(_row("rounds per call", label, cumulative - below))
            below = cumulative
    return rows


def _row(section: str, label: str, value: float) -> dict[str, Any]:
    return {"section": section, "label": label, "value": int(value) if float(value).is_integer() else value}
