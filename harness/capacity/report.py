"""What a capacity sweep leaves behind: capacity.json, capacity.html (recommendation first), and the plots.

The table has one row per replica count: the highest arrival rate that held the SLO,
and at that rate the p95 round latency, rounds per call, rejections by reason and the
completion share. The plots put throughput and p95 round latency against the offered
load, one line per replica count, with each count's knee marked where a rate broke the
SLO (the highest rate below it that held; a count whose every rate held has none). The
page is one offline file like the runs' report.html, drawn with the same SVG helper;
every step's own report is linked from it.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.atomic_files import write_atomically
from harness.capacity.expiry import ExpiryAssessment
from harness.capacity.search import Judgement, Limit
from harness.capacity.sweep import StepResult, SweepResult, replicas_text
from harness.config.durations import format_duration
from harness.config.thresholds import parse_thresholds
from harness.foreign_text import html as escape  # foreign text: escaped, controls shown, capped
from harness.report import svg
from harness.report.html import CHART_CSS, META_CSS, PAGE_CSS, TABLE_CSS, cell, page, plain, table

SCHEMA = 1
CLIP_AT_SLO = 4.0
"""The latency plot stops at this many times the SLO: a broken step's seconds would flatten the rest."""
BUSY_MACHINE = 0.5
"""Cores used by other processes during a step above which the report says the machine was busy."""
JSON_NAME, HTML_NAME, THROUGHPUT_SVG, LATENCY_SVG = "capacity.json", "capacity.html", "throughput.svg", "latency.svg"

_CSS = (PAGE_CSS + META_CSS
        + ".recommendation{background:#f6f8fa;border-left:4px solid #0072B2;padding:.5em 1em;margin:1em 0}\n"
        + ".recommendation p{margin:.4em 0}\n"
        + TABLE_CSS
        + ".hold{color:#1a7f37;font-weight:600}.break{color:#cf222e;font-weight:600}"
          ".saturated{color:#9a6700;font-weight:600}\n"
        + CHART_CSS)


# --- figures shared by every output ----------------------------------------------------------------


def slo_text(expect: dict[str, str | list[str]]) -> str:
    """A scenario's `[expect]` table on one line: the SLO every step must hold."""
    if not expect:
        return "no thresholds (every step holds unless an invariant fails)"
    return ", ".join(f"{key} {'; '.join([value] if isinstance(value, str) else value)}"
                     for key, value in expect.items())


def capacity_rows(result: SweepResult) -> list[dict[str, Any]]:
    """One row per replica count: its limit, and the figures of the step at its highest held rate."""
    rows = []
    for replicas in result.replicas:
        limit = result.limits.get(replicas, Limit(None, None, None))
        knee = result.step_at(replicas, limit.held)
        rows.append({
            "replicas": replicas,
            "highest_rate_holding_slo": limit.held,
            "limit_found": limit.found,
            "first_break": limit.broke,
            "generator_saturated_at": limit.saturated,
            "round_latency_p95": knee.latency_p95 if knee else None,
            "rounds_per_call": knee.rounds_per_call if knee else None,
            "rejections_by_reason": knee.rejections if knee else None,
            "completion_share": knee.completion if knee else None,
            "throughput": round(knee.throughput, 3) if knee and knee.throughput is not None else None,
            "note": _note(limit),
        })
    return rows


def _note(limit: Limit) -> str:
    if limit.held is None and limit.broke is not None:
        return f"broke already at {limit.broke:g} flows/s, the lowest rate tried"
    if limit.held is None and limit.saturated is not None:
        return f"the load generator saturated at {limit.saturated:g} flows/s before any step held"
    if limit.held is None:
        return "no step judged"
    if limit.found:
        return f"limit between {limit.held:g} and {limit.broke:g} flows/s"
    if limit.saturated is not None:
        return (f"the load generator saturated at {limit.saturated:g} flows/s: the server's limit is above "
                f"{limit.held:g} flows/s, not found")
    return f"held every rate tried: the limit is above {limit.held:g} flows/s"


def recommendation(result: SweepResult) -> list[str]:
    """The short statement that opens the report: replicas for the peak, saturation, and the TTL."""
    lines = [_capacity_statement(result)]
    saturated = [step for step in result.steps if step.generator_saturated]
    if saturated:
        lines.append(f"The load generator saturated at {_where(saturated)}: those steps say nothing about the "
                     f"server's limit (run the load from more processes, or on another machine, to go higher).")
    rising = [step for step in result.steps if step.judgement is Judgement.HOLD and step.still_rising]
    if rising:
        lines.append(f"Round latency was still rising at the end of {_where(rising)}: the queue may not have "
                     f"settled; hold each step longer (--step) before relying on "
                     f"{'it' if len(rising) == 1 else 'them'}.")
    busy = [step.other_cores for step in result.steps if step.other_cores is not None]
    if busy and max(busy) >= BUSY_MACHINE and any(step.judgement is not None for step in result.steps):
        lines.append(f"Other processes on this machine used up to {max(busy):.1f} cores during the steps: the "
                     f"rates found are lower than on a quiet machine.")
    if result.expiry is not None:
        lines.append(_ttl_statement(result.expiry))
    if result.status != "completed":
        lines.append(f"The sweep did not finish ({result.status}: {result.error}); the figures cover the steps "
                     f"that ran.")
    return lines


def _capacity_statement(result: SweepResult) -> str:
    plan = result.plan
    held = {n: result.limits[n].held for n in result.replicas if n in result.limits}
    slo = f"within the SLO ({slo_text(result.scenario.expect)})"
    if not any(step.judgement is not None for step in result.steps):
        return "No step ran to the end, so no capacity was measured."
    if not any(rate is not None for rate in held.values()):
        return f"No step held {slo}; try lower rates."
    best = ", ".join(f"{replicas_text(n)}: {_at_least(result, n)}{rate:g} flows/s"
                     for n, rate in held.items() if rate is not None)
    if plan.peak is None:
        return f"Highest arrival rate held {slo}: {best}."
    needed = plan.peak * (1 + plan.headroom)
    enough = [n for n, rate in held.items() if rate is not None and rate >= needed]
    if enough:
        n = min(enough)
        rate = held[n]
        assert rate is not None
        step = result.step_at(n, rate)
        p95 = f" at p95 round latency {_ms(step.latency_p95)}" if step and step.latency_p95 is not None else ""
        return (f"{replicas_text(n)} hold{'s' * (n == 1)} the planned peak of {plan.peak:g} flows/s with "
                f"{rate / plan.peak - 1:.0%} headroom (asked: {plan.headroom:.0%}): "
                f"{_at_least(result, n)}{rate:g} flows/s held{p95}, {slo}. Highest rates held: {best}.")
    bare = [n for n, rate in held.items() if rate is not None and rate >= plan.peak]
    if bare:
        n = min(bare)
        return (f"{replicas_text(n)} hold{'s' * (n == 1)} the planned peak of {plan.peak:g} flows/s but "
                f"without the {plan.headroom:.0%} headroom asked (held {held[n]:g} flows/s, needed {needed:g}); "
                f"try more replicas. Highest rates held: {best}.")
    most = max(result.replicas)
    return (f"No replica count tried holds the planned peak of {plan.peak:g} flows/s {slo}; highest rates held: "
            f"{best}. More than {most} replicas (or cheaper rounds) are needed.")


def _where(steps: list[StepResult]) -> str:
    """`1 replica at 20 flows/s, 2 replicas at 40 flows/s`: the steps a statement is about."""
    return ", ".join(f"{replicas_text(s.replicas)} at {s.rate:g} flows/s" for s in steps)


def _at_least(result: SweepResult, replicas: int) -> str:
    limit = result.limits.get(replicas)
    return "at least " if limit is not None and limit.held is not None and not limit.found else ""


def _ttl_statement(expiry: ExpiryAssessment) -> str:
    measured = expiry.measured
    seen = (f"measured {measured.share:.1%} of {measured.retries} retries" if measured.share is not None
            else "no retries measured")
    latency = expiry.predicted_with_latency
    if latency is not None and latency - expiry.predicted >= 0.01:
        seen += f", {latency:.1%} once the retries' own latency is added: the server's delays expired the rest"
    head = (f"The TTL of {format_duration(expiry.ttl)} {'fits' if expiry.fits else 'does not fit'} the leads "
            f"({expiry.think}): {expiry.predicted:.1%} of states are predicted to expire per retry ({seen}; "
            f"target {expiry.target:.1%}).")
    if not math.isfinite(expiry.recommended_ttl):
        return head + " No finite TTL keeps expiries under the target for this think-time distribution."
    verb = "would keep" if not expiry.fits else "is the shortest round TTL keeping"
    return head + f" A TTL of {format_duration(expiry.recommended_ttl)} {verb} expiries under {expiry.target:.1%}."


def document(result: SweepResult) -> dict[str, Any]:
    """capacity.json: the plan, every step, the table and the TTL assessment."""
    scenario = result.scenario
    return {
        "schema": SCHEMA,
        "kind": "capacity",
        "scenario": {"name": scenario.name, "seed": scenario.seed, "target": scenario.target.kind,
                     "time_scale": scenario.time_scale, "ttl_seconds": scenario.target.ttl,
                     "think": str(scenario.leads.think), "slo": scenario.expect},
        "status": result.status,
        "error": result.error,
        "started": result.started,
        "finished": result.finished,
        "plan": json.loads(result.plan.model_dump_json()),
        "warmup_seconds": result.plan.warmup_for(scenario.load.ramp),
        "recommendation": recommendation(result),
        "capacity": capacity_rows(result),
        "expiry": result.expiry.as_dict() if result.expiry else None,
        "steps": [step.as_dict(result.folder) for step in result.steps],
    }


# --- plots -----------------------------------------------------------------------------------------


def _knees(result: SweepResult) -> list[svg.Marker]:
    """A knee where a rate broke the SLO, at the highest rate below it that held. Where every rate tried held
    (or the generator saturated first), nothing broke: the highest rate is no knee, and none is drawn."""
    knees = []
    for n, limit in sorted(result.limits.items()):
        if limit.broke is None:
            continue
        if limit.held is None:
            knees.append(svg.Marker(limit.broke, f"{n}r broke at its lowest rate, {limit.broke:g}/s"))
        else:
            knees.append(svg.Marker(limit.held, f"knee {n}r: {limit.held:g}/s, broke at {limit.broke:g}/s"))
    return knees


def _lines(result: SweepResult, value) -> list[svg.Series]:
    series = []
    for n in result.replicas:
        steps = sorted((s for s in result.steps if s.replicas == n), key=lambda s: s.rate)
        if steps:
            series.append(svg.Series(replicas_text(n), [(s.rate, value(s)) for s in steps]))
    return series


def plots(result: SweepResult) -> tuple[str, str]:
    """(throughput, latency) SVGs against the offered load, one line per replica count, knees marked."""
    top = max((s.rate for s in result.steps), default=1.0)
    offered = svg.Series("offered (ideal)", [(0.0, 0.0), (top, top)])
    throughput = svg.line_chart([*_lines(result, lambda s: s.throughput), offered],
                                title="Completed flows per second against the offered load (steady window)",
                                x_label="offered load (arrival rate, flows/s)", y_label="completed flows/s",
                                markers=_knees(result), x_max=top)
    slos = _latency_slos(result)
    ceiling = CLIP_AT_SLO * max(limit for _, limit in slos) if slos else math.inf
    clipped = any(s.latency_p95 is not None and s.latency_p95 > ceiling for s in result.steps)
    latency = _lines(result, lambda s: None if s.latency_p95 is None else min(s.latency_p95, ceiling) * 1000)
    for label, limit in slos:
        latency.append(svg.Series(label, [(0.0, limit * 1000), (top, limit * 1000)]))
    title = "p95 round latency against the offered load (steady window)"
    if clipped:
        title += f", drawn up to {ceiling * 1000:g} ms"
    chart = svg.line_chart(latency, title=title,
                           x_label="offered load (arrival rate, flows/s)", y_label="p95 round latency (ms)",
                           markers=_knees(result), x_max=top)
    return throughput, chart


def _latency_slos(result: SweepResult) -> list[tuple[str, float]]:
    """Round-latency thresholds with an upper bound, drawn as horizontal lines."""
    lines = []
    for threshold in parse_thresholds(result.scenario.expect):
        if threshold.metric != "round_duration":
            continue
        for condition in threshold.conditions:
            if condition.op in ("<", "<=") and condition.aggregate.startswith("p("):
                lines.append((f"SLO {condition.aggregate} < {condition.value * 1000:g}ms", condition.value))
    return lines


def _standalone(chart: str) -> str:
    return chart.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1) + "\n"


# --- HTML ------------------------------------------------------------------------------------------


def render_html(result: SweepResult, charts: tuple[str, str]) -> str:
    scenario = result.scenario
    started = datetime.fromtimestamp(result.started, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    meta = [("status", result.status), ("started", started), ("steps", str(len(result.steps))),
            ("step", format_duration(result.plan.step)),
            ("warm-up discarded", format_duration(result.plan.warmup_for(scenario.load.ramp))),
            ("seed", str(scenario.seed)), ("time scale", f"{scenario.time_scale:g}")]
    body = [f"<header><h1>Capacity: {escape(scenario.name)}</h1>"
            f'<p class="meta">' + "".join(f"<span>{escape(k)} <b>{escape(v)}</b></span>" for k, v in meta)
            + "</p></header>",
            '<section class="recommendation">' + "".join(f"<p>{escape(line)}</p>" for line in recommendation(result))
            + "</section>",
            "<h2>Highest arrival rate holding the SLO, per replica count</h2>",
            f'<p class="meta">SLO: {escape(slo_text(result.scenario.expect))}. Figures at that rate, over the '
            f"steady window (rejections over the whole step).</p>",
            _capacity_table(result),
            "<h2>Throughput and latency against the offered load</h2>", *charts,
            "<h2>Think time against TTL</h2>", _expiry_section(result),
            "<h2>Steps</h2>", _steps_table(result)]
    return page(f"capacity: {scenario.name}", _CSS, body)


def _capacity_table(result: SweepResult) -> str:
    rows = []
    for row in capacity_rows(result):
        rpc = row["rounds_per_call"] or {}
        rows.append([cell(row["replicas"], True), cell(_rate(row["highest_rate_holding_slo"]), True),
                     cell(_ms(row["round_latency_p95"]), True),
                     cell(f"mean {plain(rpc.get('mean'))}, p95 {plain(rpc.get('p95'))}" if rpc else "-"),
                     cell(_reasons(row["rejections_by_reason"])), cell(_share(row["completion_share"]), True),
                     cell(plain(row["throughput"]), True), cell(row["note"])])
    return table(["replicas", "highest rate holding the SLO (flows/s)", "p95 round latency", "rounds per call",
                   "rejections by reason", "completion share", "completed flows/s", "note"], rows, "no step ran")


def _expiry_section(result: SweepResult) -> str:
    expiry = result.expiry
    if expiry is None:
        return '<p class="meta">not assessed</p>'
    summary = table(["lead think time", "TTL", "predicted share expiring", "with the measured retry latency",
                      "measured", "tolerance", f"TTL for < {expiry.target:.1%}"],
                     [[cell(expiry.think), cell(format_duration(expiry.ttl)), cell(_share(expiry.predicted), True),
                       cell(_share(expiry.predicted_with_latency), True),
                       cell(f"{_share(expiry.measured.share)} ({expiry.measured.expired} of "
                             f"{expiry.measured.retries} retries, {expiry.measured_from})", True),
                       cell(f"±{expiry.tolerance:.1%}" if math.isfinite(expiry.tolerance) else "-", True),
                       cell(format_duration(expiry.recommended_ttl) if math.isfinite(expiry.recommended_ttl)
                             else "none finite")]])
    explain = ("<p class=\"meta\">Predicted share = P(think &gt; TTL) from the lead model: the TTL clock starts when "
               "the replica mints the state and the lead's think time is taken for the whole gap to the retry "
               "(the response's trip, the retry's trip and queueing are ignored); beside it, the same with each "
               "retry's measured round latency added to the think time. Measured share = the replicas' "
               "logged <code>expired</code> rejections / retries sent. Tolerance: 3 binomial standard errors "
               "+ 2 points.</p>")
    rows = [[cell(s.replicas, True), cell(_rate(s.rate), True), cell(s.expiry.states, True),
             cell(s.expiry.retries, True), cell(s.expiry.expired, True), cell(_share(s.expiry.share), True),
             cell(_share(s.expiry_predicted_with_latency), True), cell(s.expiry.unanswered, True)]
            for s in result.steps]
    per_step = table(["replicas", "rate", "states minted", "retries", "expired", "measured share",
                       "predicted with its retry latency", "no retry (abandoned or cut off)"], rows)
    return summary + explain + per_step


def _steps_table(result: SweepResult) -> str:
    rows = []
    for step in result.steps:
        judgement = step.judgement.value if step.judgement else step.status
        link = f'<td><a href="{escape(str(step.folder.relative_to(result.folder)))}/report.html">report</a></td>' \
            if step.folder.is_relative_to(result.folder) else cell(str(step.folder))
        rows.append([cell(step.replicas, True), cell(_rate(step.rate), True),
                     cell(judgement, css=judgement if isinstance(step.judgement, Judgement) else None),
                     cell(plain(round(step.offered, 2) if step.offered is not None else None), True),
                     cell(plain(round(step.throughput, 2) if step.throughput is not None else None), True),
                     cell(_ms(step.latency_p50), True), cell(_ms(step.latency_p95), True),
                     cell(_share(step.completion), True),
                     cell(f"{step.harness_cores:.0%}" if step.harness_cores is not None else "-", True),
                     cell(_share(step.late_share), True),
                     cell(f"{step.other_cores:.2f}" if step.other_cores is not None else "-", True),
                     cell("; ".join(step.reasons)), link])
    return table(["replicas", "rate", "judgement", "arrivals/s", "completed/s", "p50", "p95", "completed",
                   "harness CPU (of a core)", "late starts", "other load (cores)", "why", ""], rows, "no step ran")


# --- text for the terminal -------------------------------------------------------------------------


def render_text(result: SweepResult) -> str:
    lines = [f"capacity of {result.scenario.name} ({result.status}); SLO: {slo_text(result.scenario.expect)}",
             f"{'replicas':>8}  {'held (flows/s)':>14}  {'p95':>8}  {'rounds/call':>11}  {'completed':>9}  "
             f"rejections / note"]
    for row in capacity_rows(result):
        rpc = row["rounds_per_call"] or {}
        lines.append(f"{row['replicas']:>8}  {_rate(row['highest_rate_holding_slo']):>14}  "
                     f"{_ms(row['round_latency_p95']):>8}  {plain(rpc.get('mean')):>11}  "
                     f"{_share(row['completion_share']):>9}  {_reasons(row['rejections_by_reason'])}; {row['note']}")
    lines += ["", *recommendation(result)]
    return "\n".join(lines)


def write_report(result: SweepResult) -> dict[str, Path]:
    """Write capacity.json, capacity.html and the two SVG plots into the sweep's folder."""
    folder = result.folder
    charts = plots(result)
    paths = {"json": folder / JSON_NAME, "html": folder / HTML_NAME, "throughput": folder / THROUGHPUT_SVG,
             "latency": folder / LATENCY_SVG}
    write_atomically(paths["json"], json.dumps(document(result), indent=2, sort_keys=True, default=str) + "\n")
    write_atomically(paths["throughput"], _standalone(charts[0]))
    write_atomically(paths["latency"], _standalone(charts[1]))
    write_atomically(paths["html"], render_html(result, charts))
    return paths


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}ms" if value >= 0.01 else f"{value * 1000:.1f}ms"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _reasons(table: dict[str, int] | None) -> str:
    if table is None:
        return "-"
    return ", ".join(f"{reason} {count}" for reason, count in table.items()) or "none"
