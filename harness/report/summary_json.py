"""summary.json: every figure of the run and every check with its verdict, for machines and later comparison.

It is the report a nightly job archives and a script diffs between runs, so it carries
the numbers themselves (seconds, counts), never rendered text alone, and only what the
journal holds: no keys, no tokens, no request states.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.atomic_files import write_atomically
from harness.config.scenario import Scenario
from harness.folding.figures import RunFigures
from harness.report.series import ordered_outcomes, request_state_bytes, round_latency, rounds_per_call
from harness.report.summary_schema import SCHEMA_VERSION
from harness.report.verdict import RunVerdict

SCHEMA = SCHEMA_VERSION
"""Bumped when a key changes meaning, so a script comparing runs can tell (the layout: `summary_schema`)."""


def write_summary(path: Path, scenario: Scenario, figures: RunFigures, verdict: RunVerdict,
                  extra: dict[str, Any] | None = None, journal: dict[str, Any] | None = None) -> Path:
    """Write summary.json (pretty, sorted keys: it is read by people and diffed between runs).

    `journal`: how the journal read (its parts, records, `unreadable` lines and `torn` last lines).
    """
    document = summary(scenario, figures, verdict, extra or {}, journal)
    return write_atomically(path, json.dumps(document, indent=2, sort_keys=True, default=str) + "\n")


def summary(scenario: Scenario, figures: RunFigures, verdict: RunVerdict, extra: dict[str, Any],
            journal: dict[str, Any] | None = None) -> dict[str, Any]:
    """The summary as a dict: the verdict, the figures behind it, and the caller's `extra`."""
    return {
        "schema": SCHEMA,
        "run_id": verdict.run_id,
        "scenario": {"name": scenario.name, "seed": scenario.seed, "description": scenario.description},
        **verdict.as_dict(),
        "started": verdict.started,
        "duration": round(figures.duration, 3),
        "flows": _flows(figures),
        "hosts": _hosts(figures),
        "rounds_per_call": rounds_per_call(figures),
        "crossed_replicas": _crossed(figures),
        "redispatched_rounds": figures.redispatched["rounds"],
        "auth": _auth(figures),
        "round_latency_seconds": round_latency(figures),
        "request_state_bytes": request_state_bytes(figures),
        "rejections": _rejections(figures, verdict),
        "chaos": [action.as_dict() for action in verdict.chaos],
        "top_errors": [group.as_dict() for group in verdict.top_errors],
        "expected_answers": [group.as_dict() for group in verdict.expected_answers],
        "fuzz": verdict.fuzz.as_dict() if verdict.fuzz else None,
        "output_contracts": verdict.output_contracts,
        "races": figures.races.table(figures.chaos),
        "journal": journal,
        "replica_health": _replica_health(figures),
        "cold_start_seconds": figures.cold_starts(),
        "extra": extra,
    }


def _replica_health(figures: RunFigures) -> dict[str, Any]:
    """Per replica: its samples, first and last memory, last descriptors and threads, and the fitted slope."""
    table: dict[str, Any] = {}
    for replica, series in sorted(figures.health.replicas.items()):
        slope = figures.health.rss_growth(replica, figures.started)
        first, last = series.points[0], series.points[-1]
        table[replica] = {"samples": len(series.points), "source": series.source, "rss_mb_first": round(first[1], 3),
                          "rss_mb_last": round(last[1], 3), "open_fds_last": last[3], "threads_last": last[4],
                          "rss_growth": slope.as_dict() if slope is not None else None}
    return table


def _crossed(figures: RunFigures) -> dict[str, Any]:
    """Continuation rounds (round 2 and later) and how many another replica than the previous round's served:
    how often the run made a state cross replicas (none behind a sticky balancer, for instance)."""
    crossed, continuations = figures.crossings()
    return {"continuations": continuations, "crossed": crossed,
            "share": round(crossed / continuations, 4) if continuations else None}


def _auth(figures: RunFigures) -> dict[str, Any]:
    """Rounds the resource server refused (401 `unauthorized`, 403 `forbidden`), each way and by flow, tool and
    round, and the rounds resent after a 401 renewed the lead's token; zeros in a run without auth."""
    totals = {"unauthorized": 0, "forbidden": 0}
    for (_, _, _, outcome), count in figures.auth_refusals.items():
        totals[outcome] = totals.get(outcome, 0) + count
    return {**totals, "retried": sum(figures.auth_retries.values()),
            "by_round": [{"flow": flow, "tool": tool, "round": number, "outcome": outcome, "count": count}
                         for (flow, tool, number, outcome), count in sorted(figures.auth_refusals.items())]}


def _flows(figures: RunFigures) -> dict[str, Any]:
    """Flows by kind and outcome, with totals each way, so no reader has to add them up."""
    by_flow = figures.outcomes()
    by_outcome: dict[str, int] = {}
    for outcomes in by_flow.values():
        for outcome, count in outcomes.items():
            by_outcome[outcome] = by_outcome.get(outcome, 0) + count
    return {"total": figures.flows,
            "by_flow": {flow: {outcome: outcomes[outcome] for outcome in ordered_outcomes(outcomes)}
                        for flow, outcomes in sorted(by_flow.items())},
            "by_outcome": {outcome: by_outcome[outcome] for outcome in ordered_outcomes(by_outcome)}}


def _hosts(figures: RunFigures) -> dict[str, Any]:
    """Per host (`[[hosts]]`; `default` without them): its flows, by outcome, and its failed rounds, by code."""
    return {host: {"flows": row["flows"],
                   "by_outcome": {outcome: row["outcomes"][outcome] for outcome in ordered_outcomes(row["outcomes"])},
                   "errors_by_code": dict(sorted(row["errors"].items()))}
            for host, row in figures.hosts().items()}


def _rejections(figures: RunFigures, verdict: RunVerdict) -> dict[str, Any]:
    """Rejections the replicas logged, by reason and replica, next to what the clients saw."""
    reconciliation = verdict.reconciliation
    return {"total_logged": sum(figures.rejections.values()),
            "by_reason": figures.rejections_by_reason(),
            "client_rejections": reconciliation.client_rejections if reconciliation else figures.client_rejections,
            "unexplained": reconciliation.unexplained if reconciliation else figures.unexplained,
            "reconciled": reconciliation is not None,
            "log_sources": verdict.log_sources}
