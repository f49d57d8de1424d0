"""`run --web`: Locust's own web UI for the run, with an MRTR tab, and no control that would break the scenario.

Locust users watch a run in its web UI. The run is started as the scenario says, so the
controls that would change it (start, new user counts, a stats reset) answer 403 and are
hidden; STOP stops the run as Ctrl-C does (the rollback, the teardown and the results
still happen; status interrupted, exit 130). The page is the run's only while a tab of another
site cannot act on it: a request that would change the run (any but GET and HEAD; STOP is
the one honoured) needs the run's control token (`X-MRTR-Token`, printed with the URL, and
put by the page into its own requests) and the same origin (`Origin`, `Sec-Fetch-Site`);
Locust's open CORS (`Access-Control-Allow-Origin: *`) is not served at all; on loopback the
page answers only to a loopback `Host` (no DNS rebinding), and off loopback only to HTTP
Basic with the password in `MRTR_WEB_PASSWORD` (`harness.cli.main` refuses `--web` off
loopback without it). The header's user count reads flows in flight:
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

import hmac
import json
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

from flask import Response, jsonify, request
from locust.env import Environment

from harness._compat.locust import clear_command_line_for_web_ui, page_with_script
from harness.config.scenario import Scenario
from harness.metrics.registry import RunMetrics
from harness.report.html import render_charts_so_far
from harness.report.series import state_size_table
from harness.run.fold.client import FoldLost, FoldProcess
from harness.run.fold.protocol import SoFar, StateSizes

__all__ = ["CHARTS", "TAB", "TOKEN_HEADER", "WEB_PASSWORD_ENV", "LiveRun", "PageGuard", "StateSizeTable",
           "WhileRunning", "charts_so_far", "control_token", "flows_in_flight", "mrtr_rows", "serve_web_ui",
           "state_sizes"]

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
TOKEN_HEADER = "X-MRTR-Token"
"""The header a request that changes the run carries the run's control token in (a header: no other site's page
can set one without CORS, which the page does not serve)."""
WEB_PASSWORD_ENV = "MRTR_WEB_PASSWORD"
"""The variable holding the page's password (HTTP Basic, any user name) when `--web` listens off loopback."""
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods that only read; any other is a control, however the route is named."""
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
"""`Host` names a loopback page answers to (a name another site resolves to 127.0.0.1 is refused)."""


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


@dataclass(frozen=True)
class PageGuard:
    """Who may use the page: the run's control token, and (off loopback) the password every request needs."""

    token: str
    password: str | None = None
    loopback: bool = True

    def refusal(self, method: str, host: str, headers: Any, password: str | None) -> tuple[int, str] | None:
        """(status, why) when a request may not be answered (`password`: its HTTP Basic password); None: it may."""
        if self.loopback and _host_name(host) not in LOOPBACK_HOSTS:
            return 403, f"this page answers only to a loopback address, not {host}"
        if self.password is not None and not _same_secret(password, self.password):
            return 401, f"log in with the password in {WEB_PASSWORD_ENV} (any user name)"
        if method in SAFE_METHODS:
            return None
        if not same_origin(headers, host):
            return 403, "a request from another site's page cannot change this run"
        if not _same_secret(headers.get(TOKEN_HEADER), self.token):
            return 403, f"a request that changes this run needs its control token ({TOKEN_HEADER}, printed with " \
                        "the URL)"
        return None


def control_token() -> str:
    """A fresh per-run token for the page's controls."""
    return secrets.token_urlsafe(24)


def same_origin(headers: Any, host: str) -> bool:
    """Whether a request comes from the page's own origin, as the browser says it (`Sec-Fetch-Site`, `Origin`); a
    request with neither (curl, a script) is taken as such: it must still carry the token."""
    site = headers.get("Sec-Fetch-Site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = headers.get("Origin")
    return origin is None or origin in (f"http://{host}", f"https://{host}")


def _same_secret(given: str | None, expected: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8"))


def _host_name(host: str) -> str | None:
    """The `Host` header's name, without its port (`[::1]:8089` -> `::1`); None when it is none."""
    try:
        return urlsplit(f"//{host}").hostname
    except ValueError:
        return None


def token_script(token: str) -> str:
    """The page's own requests that change the run carry the token: `fetch` (which Locust's page sends STOP with)
    adds the header to every same-origin request but a GET or HEAD."""
    return ("<script>(() => {const token = " + json.dumps(token) + ", fetchFirst = window.fetch.bind(window);"
            "window.fetch = (input, init) => {const request = new Request(input, init);"
            "if (['GET', 'HEAD'].includes(request.method) || new URL(request.url).origin !== location.origin) "
            "return fetchFirst(request);"
            "const headers = new Headers(request.headers); headers.set(" + json.dumps(TOKEN_HEADER) + ", token);"
            "return fetchFirst(new Request(request, {headers}));};})();</script>")


def without_cors(wsgi_app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """Locust's app with no `Access-Control-*` header on any answer (Locust turns on flask-cors for every origin):
    another site's page can neither read the page (and its token) nor pass a preflight."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            kept = [(name, value) for name, value in headers if not name.lower().startswith("access-control-")]
            return start_response(status, kept, exc_info)

        return wsgi_app(environ, start)

    return app


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
