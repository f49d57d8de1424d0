"""`run --web`: Locust's own web UI for the run, with an MRTR tab, and no control that would break the scenario.

Locust users watch a run in its web UI. The run is started as the scenario says, so the
controls that would change it (start, new user counts, a stats reset) answer 403 and are
hidden; STOP stops the run as Ctrl-C does (the rollback, the teardown and the results
still happen; status interrupted, exit 130), asked from the page's own origin with the run's
control token (`harness.run.page_guard`: no other site's tab can stop the run, and off
loopback nobody without the page's password). The header's user count reads flows in flight:
in the open model Locust's one "user" is the arrivals process. Locust's rows are each tool's
rounds (`issue_refund round 2`), their sizes the answers' bytes.
The MRTR tab goes through Locust's documented extension seam for its web UI (an extended
tab and table in `template_args`, the rows added to `/stats/requests` after each request):
rejections by reason and replica, rounds per call, flows in flight waiting on leads, the
size of the request states the rounds carried, the chaos actions so far and the
reconciliation so far; a link on every page opens the charts over time (`CHARTS`, report.html's
plots of the run so far, from the run's live fold). Its counts are the run's Prometheus metrics
(`harness.metrics.registry`), the same counts `/metrics` and summary.json show; the request
states' sizes come from the run's live fold.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from flask import Response, jsonify, request
from locust.env import Environment

from harness._compat.locust import clear_command_line_for_web_ui, page_with_script
from harness.config.scenario import Scenario
from harness.metrics.registry import RunMetrics
from harness.report.html import render_charts_so_far
from harness.report.series import state_size_table
from harness.run.live_fold.client import FoldLost, FoldProcess
from harness.run.live_fold.protocol import SoFar, StateSizes
from harness.run.page_guard import PageGuard, token_script, without_cors

__all__ = ["CHARTS", "TAB", "LiveRun", "StateSizeTable", "WhileRunning", "charts_so_far", "flows_in_flight",
           "mrtr_rows", "serve_web_ui", "state_sizes"]

TAB = "mrtr"
COLUMNS = [{"key": "section", "title": "What"}, {"key": "label", "title": "Of"}, {"key": "value", "title": "Count"}]
BLOCKED = {("POST", "/swarm"), ("POST", "/stats/reset"), ("GET", "/stats/reset"), ("POST", "/user")}
"""Locust's controls: the scenario's timeline decides when the load starts and changes."""
STOP = ("POST", "/stop")
"""Locust's STOP: the run stops as Ctrl-C stops it (a POST, as Locust's own route takes: never a link's GET)."""
STOPPED_FROM_THE_PAGE = "stopped from the web UI (STOP)"
"""The reason a run stopped by STOP gives (summary.json's `reason`)."""
CHARTS = "/mrtr/charts"
"""The MRTR charts over time: rejections by replica and reason, flows and latency, rounds per call, chaos marked."""
CHARTS_REFRESH = 5
"""Seconds between the charts page's reloads."""
CHARTS_LINK = (f'<a href="{CHARTS}" target="_blank" style="position:fixed;right:1em;bottom:1em;z-index:9999;'
               'background:#fff;padding:.3em .6em;border:1px solid #888;border-radius:4px">MRTR charts over time</a>')
"""The way to the charts from every page of the web UI."""


@dataclass(frozen=True)
class LiveRun:
    """What the page reads of the run, and the one thing it may do to it."""

    rows: Callable[[], list[dict[str, Any]]]
    """The MRTR tab's rows."""
    in_flight: Callable[[], int]
    """Flows in flight now: the header's count."""
    stop: Callable[[str], None]
    """Stop the run as Ctrl-C does, for the reason given."""
    charts: Callable[[], str]
    """The charts page (`CHARTS`)."""


def serve_web_ui(env: Environment, host: str, port: int, run: LiveRun, guard: PageGuard) -> Any:
    """Start Locust's web UI on host:port for a run already started; the MRTR tab shows `run.rows()`; `guard` says
    who may use it.

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
    app.wsgi_app = without_cors(app.wsgi_app)  # type: ignore[method-assign]

    @app.route(CHARTS)
    def mrtr_charts() -> Response:
        return Response(run.charts(), mimetype="text/html")

    @app.before_request
    def refuse_controls() -> Response | None:
        basic = request.authorization
        refused = guard.refusal(request.method, request.host, request.headers,
                                basic.password if basic is not None and basic.type == "basic" else None)
        if refused is not None:
            status, why = refused
            answer = jsonify(success=False, message=why)
            answer.status_code = status
            if status == 401:
                answer.headers["WWW-Authenticate"] = 'Basic realm="mrtr-harness run", charset="UTF-8"'
            return answer
        if (request.method, request.path) == STOP:
            run.stop(STOPPED_FROM_THE_PAGE)
            return jsonify(success=True, message="the run stops as on Ctrl-C: rollback, then its results")
        if (request.method, request.path) in BLOCKED:
            answer = jsonify(success=False, message="this run follows its scenario: start and user counts "
                                                    "are the scenario's (mrtr-harness run)")
            answer.status_code = 403
            return answer
        return None

    @app.after_request
    def add_mrtr_parts(response: Response) -> Response:
        if request.path == "/stats/requests" and response.is_json:
            body = response.get_json()
            body["extended_stats"] = [{"key": TAB, "data": run.rows()}]
            body["user_count"] = run.in_flight()
            response.set_data(json.dumps(body))
        elif request.path == "/" and response.mimetype == "text/html":
            response.direct_passthrough = False
            page = page_with_script(response.get_data(as_text=True), CHARTS_LINK + token_script(guard.token))
            response.set_data(page)
        return response

    web_ui.start()
    return web_ui


StateSizeTable = dict[str, dict[str, dict[str, float | int | None]]]
"""Per flow, per round number: the spread of the request states' sizes (`harness.report.series.state_size_table`)."""

T = TypeVar("T")


class WhileRunning(Generic[T]):
    """An answer of the run's live fold for the page: asked at most every `every` seconds however many pages poll,
    and only while the load runs; the last answer once it has ended (the fold then finishes, the journal closes)."""

    def __init__(self, ask: Callable[[], T], running: Callable[[], bool], first: T, every: float = 2.0) -> None:
        self.ask, self.running, self.answer, self.every = ask, running, first, every
        self.asked = -every

    def __call__(self) -> T:
        now = time.monotonic()
        if self.running() and now - self.asked >= self.every:
            self.asked = now
            try:
                self.answer = self.ask()
            except FoldLost:  # the run hears of it where it asks the fold itself
                pass
        return self.answer


def state_sizes(fold: FoldProcess) -> StateSizeTable:
    """The sizes of the request states the rounds' answers carried so far, per flow and round."""
    return state_size_table(fold.ask(StateSizes()))


def charts_so_far(fold: FoldProcess, scenario: Scenario) -> str:
    """The charts page: report.html's plots over time, of the run so far."""
    figures, timeline = fold.ask(SoFar())
    return render_charts_so_far(scenario, figures, timeline, refresh=CHARTS_REFRESH)


def flows_in_flight(metrics: RunMetrics) -> int:
    """Flows started and not yet ended, over every flow kind (most wait on a lead)."""
    return int(sum(sample.value for family in metrics.registry.collect() for sample in family.samples
                   if sample.name == "mrtr_flows_in_flight"))


def mrtr_rows(metrics: RunMetrics, started: float | None, sizes: StateSizeTable | None = None
              ) -> list[dict[str, Any]]:
    """The tab's rows, from the run's metrics (and the request states' sizes, per flow and round, from its fold):
    what a person on call looks at while the run goes."""
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
    for flow, by_round in sorted((sizes or {}).items()):
        for number, size in sorted(by_round.items(), key=lambda item: int(item[0])):
            for statistic in ("p50", "max"):
                if size.get(statistic) is not None:
                    rows.append(_row("requestState size (bytes)", f"{flow} round {number} {statistic}",
                                     float(size[statistic] or 0)))
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
