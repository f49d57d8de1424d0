"""report.html: one self-contained page a person opens offline to see what the run did and why it passed or not.

Everything is inline (CSS, SVG), with no scripts, fonts or links to anywhere: the file is
opened from a CI artefact or a laptop with no network, and must look the same in ten
years. Every time plot shares the x axis (seconds since the run start) and draws every
chaos action, so a spike can be read against the action that caused it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from harness.atomic_files import write_atomically
from harness.config.load import Load
from harness.config.scenario import Scenario
from harness.folding.figures import RunFigures
from harness.folding.fuzz import COLUMNS, ENVELOPE_COLUMNS
from harness.folding.top_errors import ErrorGroup
from harness.foreign_text import html as escape  # foreign text: escaped, controls shown, capped
from harness.load.envelope import EnvelopeAnswer
from harness.load.mutations import FINDINGS
from harness.report import svg
from harness.report.series import (
    Bins,
    ChaosAction,
    Timeline,
    chaos_actions,
    flow_names,
    ordered_outcomes,
    replica_health_series,
    replica_rss_slopes,
    request_state_bytes,
    round_latency,
    rounds_histogram,
    rounds_per_call,
)
from harness.report.verdict import (
    RunStatus,
    RunVerdict,
    condition_text,
    describe_detail,
    format_seconds,
    observed_text,
)
from harness.report.wording import describe_chaos, describe_fault_rounds, format_slope, window_text

_X_LABEL = "seconds since the run start"
_STATUS_COLOURS = {RunStatus.COMPLETED: "#1a7f37", RunStatus.DEVIATED: "#9a6700"}
# The rules every report page shares (this one and capacity.html); each page lays them out with its own between.
PAGE_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1000px;padding:1em 1.5em;
color:#1f2328}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.15em;margin:1.6em 0 .5em;border-bottom:1px solid #d0d7de}
"""
META_CSS = """\
.meta{color:#57606a}.meta span{margin-right:1.2em}
"""
TABLE_CSS = """\
table{border-collapse:collapse;margin:.4em 0 1em}th,td{border:1px solid #d0d7de;padding:.25em .6em;text-align:left}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
"""
CHART_CSS = """\
svg.chart{display:block;margin:.6em 0;max-width:100%;height:auto}
"""
_CSS = (PAGE_CSS
        + ".status{display:inline-block;padding:.15em .6em;border-radius:4px;color:#fff;font-weight:600}\n"
        + META_CSS + TABLE_CSS
        + ".pass{color:#1a7f37;font-weight:600}.fail{color:#cf222e;font-weight:600}.skip{color:#9a6700}\n"
        + CHART_CSS
        + "ul.problems{color:#cf222e}\n"
        + "td.trace code{font-size:.85em;user-select:all;white-space:nowrap}\n")


def write_html(path: Path, scenario: Scenario, figures: RunFigures, verdict: RunVerdict, *,
               timeline: Timeline | None = None) -> Path:
    """Write report.html. Pass the journal's `Timeline`: `RunFigures` alone has no times for rounds and flows."""
    return write_atomically(path, render_html(scenario, figures, verdict, timeline or Timeline()))


def render_html(scenario: Scenario, figures: RunFigures, verdict: RunVerdict, timeline: Timeline) -> str:
    actions = chaos_actions(figures.chaos, timeline.origin, figures.faults)
    body = [_header(scenario, figures, verdict), _problems(verdict),
            "<h2>Over the run</h2>", *_time_plots(scenario, figures, timeline, actions),
            "<h2>Rounds per call</h2>", *_rounds_plots(figures),
            *_health_section(figures, actions), *_cold_start_section(verdict),
            "<h2>Thresholds</h2>", _thresholds_table(verdict),
            "<h2>Invariants</h2>", _invariants_table(verdict),
            "<h2>Reconciliation</h2>", _reconciliation_table(verdict),
            *_hypothesis_section(verdict),
            *_fuzz_section(verdict), *_output_contracts_section(verdict), *_races_section(figures),
            "<h2>Rejections by reason and replica</h2>", _rejections_table(figures),
            "<h2>Flows by outcome</h2>", _flows_table(figures),
            "<h2>Flows and failed rounds by host</h2>", _hosts_table(figures),
            "<h2>Top errors</h2>", _top_errors_table(verdict),
            *_expected_answers_section(verdict),
            "<h2>Rounds per call and round latency</h2>", _spreads_table(figures),
            "<h2>Chaos actions</h2>", _chaos_table(actions)]
    return page(f"{scenario.name}: {verdict.status.value}", _CSS, body)


def render_charts_so_far(scenario: Scenario, figures: RunFigures, timeline: Timeline, refresh: int) -> str:
    """The web UI's charts over time (`run --web`): report.html's plots of the run so far, the chaos actions
    marked, on a page that reloads itself every `refresh` seconds."""
    actions = chaos_actions(figures.chaos, timeline.origin, figures.faults)
    bins = timeline.bins(figures.duration)
    in_flight = svg.line_chart([svg.Series("in flight", _points(bins, timeline.in_flight(bins)))],
                               title=f"Flows in flight, most waiting on a lead (at each {bins.width:g} s bin's end)",
                               x_label=_X_LABEL, y_label="flows", markers=_markers(actions),
                               x_max=bins.width * bins.count, counts=True)
    body = [f"<header><h1>{escape(scenario.name)}: the run so far</h1>"
            f'<p class="meta">reloads every {refresh} s; report.html has the whole run when it ends</p></header>',
            "<h2>Over the run</h2>", *_time_plots(scenario, figures, timeline, actions), in_flight,
            "<h2>Rounds per call</h2>", *_rounds_plots(figures)]
    return page(f"{scenario.name}: the run so far", _CSS, body, refresh=refresh)


def page(title: str, css: str, body: Sequence[str], refresh: int | None = None) -> str:
    """One self-contained HTML document: inline CSS, no scripts, nothing fetched when opened offline (a live page
    reloads itself every `refresh` seconds)."""
    reload = f'<meta http-equiv="refresh" content="{refresh}">\n' if refresh else ""
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n{reload}'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{escape(title)}</title>\n<style>{css}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")


# --- header -------------------------------------------------------------------------------------


def _header(scenario: Scenario, figures: RunFigures, verdict: RunVerdict) -> str:
    colour = _STATUS_COLOURS.get(verdict.status, "#cf222e")
    started = (datetime.fromtimestamp(verdict.started, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
               if verdict.started is not None else "unknown")
    meta = [("judged by", f"[{verdict.judged.value}]"), ("run", verdict.run_id or "unknown"),
            ("seed", str(scenario.seed)), ("started", started),
            ("duration", f"{figures.duration:.1f} s"), ("flows", str(figures.flows)),
            ("rounds", str(figures.rounds))]
    description = f"<p>{escape(scenario.description)}</p>" if scenario.description else ""
    return (f"<header><h1>{escape(scenario.name)} "
            f'<span class="status" style="background:{colour}">{escape(verdict.status.value)}</span></h1>'
            f'<p class="meta"><span>exit code <b>{int(verdict.exit_code)}</b></span>'
            + "".join(f"<span>{escape(name)} <b>{escape(value)}</b></span>" for name, value in meta)
            + f"</p>{description}</header>")


def _problems(verdict: RunVerdict) -> str:
    if not verdict.problems:
        return '<p class="pass">Every threshold, invariant and check passed.</p>'
    return '<ul class="problems">' + "".join(f"<li>{escape(p)}</li>" for p in verdict.problems) + "</ul>"


# --- plots --------------------------------------------------------------------------------------


def _markers(actions: Sequence[ChaosAction]) -> list[svg.Marker]:
    """One marker per chaos action, at its start (or its end, when the start was lost)."""
    markers = []
    for action in actions:
        x = action.start if action.start is not None else action.end
        markers.append(svg.Marker(max(0.0, x or 0.0), action.label(), until=action.end, failed=action.ok is False))
    return markers


def _time_plots(scenario: Scenario, figures: RunFigures, timeline: Timeline,
                actions: Sequence[ChaosAction]) -> list[str]:
    bins = timeline.bins(figures.duration)
    markers = _markers(actions)
    x_max = bins.width * bins.count
    per = "second" if bins.width == 1 else f"{bins.width:g} s"
    binned = f"{bins.width:g} s bins"
    flows = [svg.Series(outcome, _points(bins, rates)) for outcome, rates in timeline.flow_rates(bins).items()]
    latency = [svg.Series(name, _points(bins, [None if v is None else v * 1000 for v in values]))
               for name, values in timeline.latency_percentiles(bins).items()]
    plots = [svg.line_chart(flows, title=f"Flows finished per second, by outcome ({binned})", x_label=_X_LABEL,
                            y_label="flows/s", markers=markers, x_max=x_max),
             svg.line_chart(latency, title=f"Round latency p50 / p95 / p99 ({binned})", x_label=_X_LABEL,
                            y_label="latency (ms)", markers=markers, x_max=x_max)]
    if scenario.load.stages:
        plots.append(_stages_plot(scenario.load, timeline, bins, markers, x_max))
    by_replica = timeline.rejection_counts(bins) or {"": {}}
    for replica, reasons in by_replica.items():
        title = f"Rejections on {replica} by reason ({binned})" if replica else "Rejections by reason (none logged)"
        series = [svg.Series(reason, _points(bins, counts)) for reason, counts in reasons.items()]
        plots.append(svg.line_chart(series, title=title, x_label=_X_LABEL, y_label=f"rejections per {per}",
                                    markers=markers, x_max=x_max, counts=True))
    return plots


def _health_section(figures: RunFigures, actions: Sequence[ChaosAction]) -> list[str]:
    """Each replica's resident memory, CPU, descriptors and threads over the run (its `health` records), and the
    memory slope `replica_rss_growth` judges; nothing when the target gave no health."""
    series = replica_health_series(figures)
    if not series:
        return []
    markers = _markers(actions)
    charts = [("rss_mb", "Resident memory by replica", "MB"), ("cpu_percent", "CPU by replica (% of one core)", "%"),
              ("open_fds", "Open file descriptors by replica", "descriptors"), ("threads", "Threads by replica",
                                                                                "threads")]
    plots = [svg.line_chart([svg.Series(replica, figures_of[name]) for replica, figures_of in series.items()],
                            title=title, x_label=_X_LABEL, y_label=unit, markers=markers,
                            counts=name in ("open_fds", "threads"))
             for name, title, unit in charts]
    rows = [[cell(replica),
             *([cell(format_slope(slope.per_minute), True),
                cell(f"{format_slope(slope.low)} to {format_slope(slope.high)}", True),
                cell(slope.samples, True), cell(f"{slope.warm_up:.0f} s", True)] if slope is not None
               else [cell("no fit (too few samples after the warm-up)"), cell(""), cell(""), cell("")])]
            for replica, slope in replica_rss_slopes(figures).items()]
    return ["<h2>Replica health</h2>", *plots,
            table(["replica", "memory growth (MB/min)", "95% interval", "samples fitted", "warm-up left out"], rows)]


def _stages_plot(load: Load, timeline: Timeline, bins: Bins, markers: list[svg.Marker], x_max: float) -> str:
    """The stages' aim against what the load did, bin by bin: flows/s (open model) or agents (closed)."""
    aimed = [sum(load.level_at(bins.width * (index + (n + 0.5) / 10)) for n in range(10)) / 10
             for index in range(bins.count)]
    unit = "flows/s" if load.model == "open" else "agents"
    series = [svg.Series(f"intended ({unit})", _points(bins, aimed)),
              svg.Series("flows started per second", _points(bins, timeline.start_rates(bins)))]
    return svg.line_chart(series, title=f"The stages' intended load against the flows started ({bins.width:g} s bins)",
                          x_label=_X_LABEL, y_label=unit if load.model == "open" else "agents, flows/s",
                          markers=markers, x_max=x_max)


def _points(bins: Bins, values: Sequence[float | None]) -> list[tuple[float, float | None]]:
    return list(zip(bins.centres(), values, strict=True))


def _rounds_plots(figures: RunFigures) -> list[str]:
    """A histogram of rounds per call, 1..10, a bar per flow: a bar at 10 means the server never stopped asking."""
    categories = [*(str(n) for n in range(1, 10)), "10+"]
    groups = [(flow, rounds_histogram(figures, flow)) for flow in flow_names(figures)]
    return [svg.bar_chart(categories, groups, title="Rounds per call, by flow", x_label="rounds in the call",
                          y_label="calls")]


# --- tables -------------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], empty: str = "none") -> str:
    """An HTML table from pre-escaped cells (callers use `cell`/`_mark`), headers escaped here."""
    if not rows:
        return f'<p class="meta">{escape(empty)}</p>'
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def cell(value: object, numeric: bool = False, css: str | None = None) -> str:
    """One escaped cell; `numeric` right-aligns it, `css` adds a class of the page's own (e.g. a judgement)."""
    text = "" if value is None else str(value)
    classes = " ".join(c for c in ("num" if numeric else None, css) if c)
    return f'<td class="{classes}">{escape(text)}</td>' if classes else f"<td>{escape(text)}</td>"


def _mark(passed: bool | None, unknown: str = "not checked") -> str:
    if passed is None:
        return f'<td class="skip">{escape(unknown)}</td>'
    return '<td class="pass">✓ pass</td>' if passed else '<td class="fail">✗ fail</td>'


def _thresholds_table(verdict: RunVerdict) -> str:
    rows = [[_mark(item.passed), cell(item.threshold.key), cell(condition_text(item)), cell(observed_text(item))]
            for item in verdict.thresholds]
    return table(["", "threshold", "condition", "observed"], rows, "no thresholds")


def _invariants_table(verdict: RunVerdict) -> str:
    rows = [[_mark(result.passed if result.checked or not result.passed else None), cell(name),
             cell(result.violations, numeric=True),
             cell(describe_detail(result.examples, 400))]
            for name, result in sorted(verdict.invariants.items())]
    return table(["", "invariant", "violations", "examples"], rows, "no invariants checked")


def _reconciliation_table(verdict: RunVerdict) -> str:
    result = verdict.reconciliation
    if result is None:
        return '<p class="skip">Not reconciled: the journal has no reconciliation record.</p>'
    examples = "; ".join(result.examples.get("unexplained", []) + result.examples.get("unmatched_logged", []))
    return table(["", "client rejections (-32602)", "logged reasons", "matched", "unexplained", "unmatched logged",
                  "from re-dispatched rounds", "examples"],
                 [[_mark(result.passed), cell(result.client_rejections, True), cell(result.logged, True),
                   cell(result.matched, True), cell(result.unexplained, True), cell(result.unmatched_logged, True),
                   cell(result.from_redispatched_rounds, True), cell(examples)]])


def _hypothesis_section(verdict: RunVerdict) -> list[str]:
    if not verdict.hypothesis:
        return []
    rows = [[_mark(probe.mark, "not judged"), cell(f"{probe.phase} chaos"),
             cell(window_text(probe.window, _since(probe.t, verdict))), cell(describe_detail(probe.detail, 400))]
            for probe in verdict.hypothesis]
    return ["<h2>Steady-state hypothesis</h2>", table(["", "probe", "window", "thresholds"], rows)]


def _since(t: float | None, verdict: RunVerdict) -> float | None:
    return t - verdict.started if t is not None and verdict.started is not None else None


def _rejections_table(figures: RunFigures) -> str:
    by_reason = figures.rejections_by_reason()
    replicas = sorted({replica for counts in by_reason.values() for replica in counts})
    rows = [[cell(reason), *(cell(counts.get(replica, 0), True) for replica in replicas),
             cell(sum(counts.values()), True)] for reason, counts in sorted(by_reason.items())]
    return table(["reason", *replicas, "total"], rows, "no rejections logged")


def _flows_table(figures: RunFigures) -> str:
    by_flow = figures.outcomes()
    outcomes = ordered_outcomes(o for counts in by_flow.values() for o in counts)
    rows = [[cell(flow), *(cell(counts.get(outcome, 0), True) for outcome in outcomes),
             cell(sum(counts.values()), True)] for flow, counts in sorted(by_flow.items())]
    return table(["flow", *outcomes, "total"], rows, "no flows finished")


def _hosts_table(figures: RunFigures) -> str:
    """Each host's flows by outcome and failed rounds by code: a host whose client cannot ask shows here."""
    hosts = figures.hosts()
    outcomes = ordered_outcomes(o for row in hosts.values() for o in row["outcomes"])
    codes = sorted({code for row in hosts.values() for code in row["errors"]})
    rows = [[cell(host), *(cell(row["outcomes"].get(outcome, 0), True) for outcome in outcomes),
             cell(row["flows"], True), *(cell(row["errors"].get(code, 0), True) for code in codes)]
            for host, row in hosts.items()]
    return table(["host", *outcomes, "total", *(f"errors {code}" for code in codes)], rows, "no flows finished")


def _fuzz_section(verdict: RunVerdict) -> list[str]:
    """The mutants by class (only in a run with fuzz flows); a class any of whose mutants was run is marked ✗."""
    fuzz = verdict.fuzz
    if not fuzz:
        return []
    rows = [[_mark(not any(row.counts[answer] for answer in FINDINGS)), cell(row.mutation),
             *(cell(row.counts[column], True) for column in COLUMNS),
             cell(", ".join(f"{reason} {count}" for reason, count in sorted(row.reasons.items())) or "-"),
             cell(", ".join(row.expected_reasons) or "-"), cell("; ".join(row.findings))] for row in fuzz.rows]
    rows += [[_mark(None, "skipped"), cell(mutation), *(cell("", True) for _ in COLUMNS), cell(why), cell(""),
              cell("")] for mutation, why in sorted(fuzz.skipped.items())]
    shown = ["<h2>Fuzzed requestStates</h2>",
             table(["", "mutation", *COLUMNS, "reasons logged", "expected", "findings"], rows, "no mutant sent")]
    if fuzz.envelope:
        envelope = [[_mark(not (row.counts[EnvelopeAnswer.OTHERWISE] + row.counts[EnvelopeAnswer.NO_ANSWER])),
                     cell(row.mutation), *(cell(row.counts[column], True) for column in ENVELOPE_COLUMNS),
                     cell(row.required), cell(", ".join(f"{got} {count}" for got, count in sorted(row.got.items()))
                                              or "-"), cell(row.sdk_deviation or "-")] for row in fuzz.envelope]
        shown += ["<h2>Fuzzed JSON-RPC envelopes</h2>",
                  table(["", "mutation", *ENVELOPE_COLUMNS, "required", "answered instead", "the SDK's deviation"],
                        envelope, "no envelope mutant sent")]
    return shown if fuzz.rows or fuzz.skipped else shown[2:]


def _cold_start_section(verdict: RunVerdict) -> list[str]:
    """Each replica label's server processes, spawn to first answer (a stdio target's; none: no section)."""
    if not verdict.cold_start:
        return []
    rows = [[cell(replica), cell(row["count"], True), *(cell(_seconds(row[key]), True) for key in ("p50", "p95",
                                                                                                   "max"))]
            for replica, row in verdict.cold_start.items()]
    return ["<h2>Cold start (spawn to first answer)</h2>", table(["replica", "processes", "p50", "p95", "max"], rows)]


def _output_contracts_section(verdict: RunVerdict) -> list[str]:
    """The tools whose completed results broke the outputSchema they declared (only when one did)."""
    if not verdict.output_contracts:
        return []
    rows = [[_mark(False), cell(tool), cell(row["mismatches"], True), cell(str(row["example"]))]
            for tool, row in verdict.output_contracts.items()]
    return ["<h2>Output contracts</h2>", table(["", "tool", "mismatches", "first"], rows, "")]


def _races_section(figures: RunFigures) -> list[str]:
    """The race probes, one row per probe: races, how their answers agreed, the watchdog (only when a race ran)."""
    races = figures.races.table(figures.chaos)
    if races is None:
        return []
    rows = [[_mark(not row["disagreed"] and not row["watchdog"]["hung"]), cell(probe), cell(row["raced"], True),
             cell(row["agreed"], True), cell(row["disagreed"], True), cell(row["not_judged"], True),
             cell(row["two_replicas"], True), cell(row["watchdog"]["ok"], True), cell(row["watchdog"]["slow"], True),
             cell(row["watchdog"]["hung"], True)] for probe, row in races["by_probe"].items()]
    rotation = races["during_rotation"]
    said = (f"During a key rotation: {rotation['raced']} races, {rotation['disagreed']} disagreed."
            if rotation["exercised"] else f"During a key rotation: not exercised ({rotation['why']}).")
    examples = "".join(f"<li>{escape(example)}</li>" for example in races["examples"])
    return ["<h2>Race probes</h2>",
            table(["", "probe", "raced", "agreed", "disagreed", "not judged", "two replicas", "ok", "slow", "hung"],
                  rows, ""), f"<p>{escape(said)}</p>", *([f"<ul>{examples}</ul>"] if examples else [])]


def _top_errors_table(verdict: RunVerdict) -> str:
    """What the servers said most often when rounds failed; the first message seen is in the cell's title."""
    return _groups_table(verdict.top_errors, "no failed round carried a message")


def _expected_answers_section(verdict: RunVerdict) -> list[str]:
    """Tool errors that answered a person's decline or cancel: expected outcomes, apart from the errors."""
    if not verdict.expected_answers:
        return []
    return ["<h2>Expected answers</h2>",
            '<p class="skip">A decline or cancel the tool refused as its policy says: the call ended as the person '
            "chose. Not errors, and not counted in client_errors.</p>",
            _groups_table(verdict.expected_answers, "")]


def _groups_table(groups: Sequence[ErrorGroup], empty: str) -> str:
    """One row per group; with a column of example trace ids when any group has one (tracing was on)."""
    traced = any(group.trace_ids for group in groups)
    rows = [[cell(group.count, True), cell(group.flow), cell(group.tool), cell(group.round, True),
             cell(_at(group.first), True), cell(_at(group.last), True),
             f'<td title="{escape(group.example)}">{escape(group.message)}</td>',
             *([_trace_ids_cell(group.trace_ids)] if traced else [])]
            for group in groups]
    headers = ["count", "flow", "tool", "round", "first (s)", "last (s)", "message"]
    return table([*headers, "trace ids (latest)"] if traced else headers, rows, empty)


def _trace_ids_cell(trace_ids: Sequence[str]) -> str:
    """Trace ids one per line, each selectable whole, to paste into Tempo, Jaeger or Honeycomb."""
    return '<td class="trace">' + "<br>".join(f"<code>{escape(trace_id)}</code>" for trace_id in trace_ids) + "</td>"


def _spreads_table(figures: RunFigures) -> str:
    """Per flow and round: latency p50/p95/p99, the size of the request state the round's answer carried, and per
    flow the rounds a call took."""
    rounds = rounds_per_call(figures)
    states = request_state_bytes(figures)
    rows = []
    for flow, per_round in round_latency(figures).items():
        spread = rounds[flow]
        calls = f"p50 {plain(spread['p50'])}, p95 {plain(spread['p95'])}, max {plain(spread['max'])}"
        for number, latency in per_round.items():
            size = states.get(flow, {}).get(number)
            state = f"p50 {plain(size['p50'])}, max {plain(size['max'])}" if size else ""
            rows.append([cell(flow), cell(number, True), cell(latency["count"], True),
                         *(cell(_seconds(latency[p]), True) for p in ("p50", "p95", "p99")), cell(state, True),
                         cell(calls)])
    return table(["flow", "round", "rounds seen", "p50", "p95", "p99", "requestState (bytes)", "rounds per call"],
                 rows, "no rounds")


def _chaos_table(actions: Sequence[ChaosAction]) -> str:
    rows = [[_mark(action.ok, "no end"), cell(action.action), cell(action.target or ""),
             cell(_at(action.start), True), cell(_at(action.end), True), cell(_chaos_detail(action))]
            for action in actions]
    return table(["", "action", "target", "start (s)", "end (s)", "detail"], rows, "no chaos actions")


def _chaos_detail(action: ChaosAction) -> str:
    """What the action did, and for a network fault the rounds sent into its window by outcome."""
    return "; ".join(text for text in (describe_chaos(action.detail), describe_fault_rounds(action.rounds)) if text)


def _seconds(value: float | int | None) -> str:
    return "" if value is None else format_seconds(float(value))


def plain(value: float | int | None) -> str:
    return "-" if value is None else f"{value:g}"


def _at(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"
