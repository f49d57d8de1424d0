"""Every number the harness exports, defined once: names, help, units and label sets.

The names are a contract with `dashboards/` (docs/metrics.md lists them): prefix `mrtr_`, base
units, `_total` on counters, histograms rather than summaries, bounded labels only (a
flow kind, an outcome, a round number up to 10, a replica label, a reason; never a flow,
order or user id). Every label value known in advance is pre-set to zero, so a panel
shows a flat zero instead of "no data".

Locust workers keep the same objects and also buffer every update; the buffer goes to
the master in `report_to_master` and the master replays it (`apply`), so the master's
exporter counts exactly what every worker did, histograms included.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gevent.monkey import get_original
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.metrics import MetricWrapperBase

from harness._compat.prometheus import label_names, use_value_lock
from harness.config.metric_table import METRICS
from harness.journal.writer import FlowOutcome
from harness.metrics.lockless import LocklessCounter, LocklessGauge, LocklessHistogram
from harness.mrtr.reasons import OTHER_REASON, REASONS

use_value_lock(get_original("threading", "Lock"))
"""Each value of a prometheus_client metric guards itself with `threading.Lock`; in a load process gevent's
patching has made that name a greenlet-aware lock written in Python, and a load process updates several values
per round. No update can switch greenlets while it holds the lock (it is arithmetic on a float), so the
operating system's lock, what the name meant before the patching, is as safe there and cheaper (figures in
benchmarks/README.md). Values made after this import use it (outside a patched process the two are the same
lock)."""

ROUND_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Round latency: dense around the usual 250 ms per-round SLO, out to the client timeout."""

DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
"""Think time and flow duration: real seconds, from instant answers to an hour-long lead."""

ROUNDS_BUCKETS = tuple(float(n) for n in range(1, 11))
"""Rounds per call: one bucket per round up to the client's cap of 10."""

MAX_ROUND_LABEL = 10

LABEL_VALUES_MAX = 100
"""Distinct values a label the target controls may take on one metric (`code`: a server's JSON-RPC codes; `replica`:
the replica a log line names): past it, an update is counted under `OVERFLOW_LABEL` and in
`mrtr_label_overflow_total`, so a hostile server cannot grow the exporter (and Prometheus) without bound."""
OVERFLOW_LABEL = "other"

HOST_CODES = ("-32021", "-32603", "-32600", "-32602")
"""The codes pre-set to zero for every host: what a host's kind shows first (a client that cannot ask, a 2025
client given an input request, a 2025 client asked on a server with no back-channel, a rejected state)."""


class RunMetrics:
    """The harness's metrics on one registry, plus the update buffer a Locust worker ships."""

    def __init__(self, registry: CollectorRegistry | None = None, *, flows: Iterable[str] = (),
                 replicas: Iterable[str] = (), buffer: bool = False) -> None:
        self.registry = registry or CollectorRegistry()
        self._buffer: list[tuple[Any, ...]] | None = [] if buffer else None
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._distinct: dict[tuple[str, str], set[str]] = {}
        """The values each bounded label has taken, by (metric, label): at most `LABEL_VALUES_MAX`."""
        self._define()
        _check_exported(self)
        self.preset(flows=flows, replicas=replicas)

    def _define(self) -> None:
        r = self.registry
        # Updated on the load's hot path (every round, flow or answer): lockless (`harness.metrics.lockless`).
        self.flows_started = LocklessCounter("mrtr_flows_started_total", "Flows started, by flow kind.", ["flow"],
                                             registry=r)
        self.flows_finished = LocklessCounter("mrtr_flows_finished_total", "Flows finished, by flow kind and outcome.",
                                              ["flow", "outcome"], registry=r)
        self.flows_in_flight = LocklessGauge("mrtr_flows_in_flight",
                                             "Flows started and not finished (most wait on a lead).", ["flow"],
                                             registry=r)
        self.rounds_per_call = LocklessHistogram("mrtr_rounds_per_call", "POST rounds one MRTR call took.", ["flow"],
                                                 buckets=ROUNDS_BUCKETS, registry=r)
        self.round_duration = LocklessHistogram("mrtr_round_duration_seconds",
                                                "Time per POST round, from its intended send time to its answer.",
                                                ["flow", "round"], buckets=ROUND_BUCKETS, registry=r)
        self.think_time = LocklessHistogram("mrtr_think_time_seconds", "Real seconds a lead thought before answering.",
                                            buckets=DURATION_BUCKETS, registry=r)
        self.flow_duration = LocklessHistogram("mrtr_flow_duration_seconds",
                                               "Real seconds from a flow's start to its end.", ["flow"],
                                               buckets=DURATION_BUCKETS, registry=r)
        self.client_errors = LocklessCounter("mrtr_client_errors_total",
                                             "Rounds that failed, by flow and JSON-RPC code or failure class (not a "
                                             "tool error answering a person's decline: that is an expected "
                                             "outcome).", ["flow", "code"], registry=r)
        self.auth_refusals = LocklessCounter("mrtr_auth_refusals_total",
                                             "Rounds the resource server refused for their access token "
                                             "(unauthorized: 401) or its scopes (forbidden: 403), by flow, tool and "
                                             "round.", ["flow", "tool", "round", "outcome"], registry=r)
        self.token_refreshes = Counter("mrtr_token_refreshes_total",
                                       "Access tokens renewed after the first ones (before expiry, or after a 401), "
                                       "by outcome: ok; expired_on_arrival (the new token had run out, or would "
                                       "within a second: asked for again no sooner than a second later, warned "
                                       "once); or failed (the old token is kept).", ["outcome"], registry=r)
        for outcome in ("ok", "expired_on_arrival", "failed"):
            self.token_refreshes.labels(outcome=outcome)
        self.rejections = Counter("mrtr_request_state_rejections_total",
                                  "requestState rejections by the reason the replica logged.", ["replica", "reason"],
                                  registry=r)
        self.unexplained = Counter("mrtr_unexplained_rejections_total",
                                   "-32602 answers no logged reason accounts for.", registry=r)
        self.unmatched_logged = Counter("mrtr_unmatched_logged_rejections_total",
                                        "Logged rejections no -32602 of this run accounts for (other clients).",
                                        registry=r)
        self.late_starts = LocklessCounter("mrtr_flow_starts_late_total",
                                           "Open-model flows that started later than scheduled (the generator fell "
                                           "behind).", registry=r)
        self.chaos_actions = Counter("mrtr_chaos_actions_total", "Chaos actions run, by action.", ["action"],
                                     registry=r)
        self.chaos_last = Gauge("mrtr_chaos_last_action_timestamp_seconds", "When each chaos action last started.",
                                ["action"], registry=r)
        self.replicas_up = Gauge("mrtr_replicas_up", "Replicas answering their health check.", registry=r)
        self.invariant_violations = Counter("mrtr_invariant_violations_total", "Ledger invariant violations found.",
                                            ["invariant"], registry=r)
        self.host_flows = LocklessCounter("mrtr_host_flows_finished_total",
                                          "Flows finished, by the host their lead sits behind (`[[hosts]]`) and "
                                          "outcome.", ["host", "outcome"], registry=r)
        self.label_overflow = Counter("mrtr_label_overflow_total",
                                      f"Updates whose label value the target chose was past {LABEL_VALUES_MAX} "
                                      "distinct values of that label, counted under `other` instead, by metric and "
                                      "label.", ["metric", "label"], registry=r)
        self.host_errors = LocklessCounter("mrtr_host_client_errors_total",
                                           "Rounds that failed, by host and JSON-RPC code or failure class (-32021: "
                                           "the host's client declared no mode the server needed to ask in).",
                                           ["host", "code"], registry=r)

    def preset(self, *, flows: Iterable[str] = (), replicas: Iterable[str] = (), actions: Iterable[str] = (),
               invariants: Iterable[str] = (), hosts: Iterable[str] = ()) -> None:
        """Create the label sets known in advance at zero (for each host, every outcome and `HOST_CODES`)."""
        for host in hosts:
            for outcome in FlowOutcome:
                self.host_flows.labels(host=host, outcome=outcome.value)
            for code in HOST_CODES:
                self.host_errors.labels(host=host, code=code)
        for flow in flows:
            self.flows_started.labels(flow=flow)
            self.flows_in_flight.labels(flow=flow)
            self.rounds_per_call.labels(flow=flow)
            for outcome in FlowOutcome:
                self.flows_finished.labels(flow=flow, outcome=outcome.value)
        for replica in replicas:
            replica = self._bounded("mrtr_request_state_rejections_total", "replica", replica)
            for reason in (*REASONS, OTHER_REASON):
                self.rejections.labels(replica=replica, reason=reason)
        for action in actions:
            self.chaos_actions.labels(action=action)
        for invariant in invariants:
            self.invariant_violations.labels(invariant=invariant)

    # --- updates: each one applied here and, on a worker, buffered for the master -------------
    # Each calls its `_do_` method directly (a load process makes several per round) and
    # buffers the same update as a tuple that `apply` replays on the master.

    def flow_started(self, flow: str) -> None:
        self._do_flow_started(flow)
        if self._buffer is not None:
            self._buffer.append(("flow_started", flow))

    def flow_finished(self, flow: str, outcome: str, duration: float) -> None:
        self._do_flow_finished(flow, outcome, duration)
        if self._buffer is not None:
            self._buffer.append(("flow_finished", flow, outcome, duration))

    def call_done(self, flow: str, rounds: int) -> None:
        self._do_call_done(flow, rounds)
        if self._buffer is not None:
            self._buffer.append(("call_done", flow, rounds))

    def round_done(self, flow: str, round_number: int, latency: float, failure_code: str | None) -> None:
        self._do_round_done(flow, round_number, latency, failure_code)
        if self._buffer is not None:
            self._buffer.append(("round_done", flow, round_number, latency, failure_code))

    def host_flow_finished(self, host: str, outcome: str) -> None:
        self._do_host_flow_finished(host, outcome)
        if self._buffer is not None:
            self._buffer.append(("host_flow_finished", host, outcome))

    def host_round_failed(self, host: str, code: str) -> None:
        self._do_host_round_failed(host, code)
        if self._buffer is not None:
            self._buffer.append(("host_round_failed", host, code))

    def _do_host_flow_finished(self, host: str, outcome: str) -> None:
        self._child(self.host_flows, host, outcome).inc()

    def _do_host_round_failed(self, host: str, code: str) -> None:
        self._child(self.host_errors, host, self._bounded("mrtr_host_client_errors_total", "code", code)).inc()

    def auth_refused(self, flow: str, tool: str, round_number: int, outcome: str) -> None:
        self._do_auth_refused(flow, tool, round_number, outcome)
        if self._buffer is not None:
            self._buffer.append(("auth_refused", flow, tool, round_number, outcome))

    def token_refreshed(self, outcome: str) -> None:
        self._do_token_refreshed(outcome)
        if self._buffer is not None:
            self._buffer.append(("token_refreshed", outcome))

    def thought(self, seconds: float) -> None:
        self._do_thought(seconds)
        if self._buffer is not None:
            self._buffer.append(("thought", seconds))

    def late_start(self) -> None:
        self._do_late_start()
        if self._buffer is not None:
            self._buffer.append(("late_start",))

    def _do_flow_started(self, flow: str) -> None:
        self._child(self.flows_started, flow).inc()
        self._child(self.flows_in_flight, flow).inc()

    def _do_flow_finished(self, flow: str, outcome: str, duration: float) -> None:
        self._child(self.flows_finished, flow, outcome).inc()
        self._child(self.flows_in_flight, flow).dec()
        self._child(self.flow_duration, flow).observe(duration)

    def _do_call_done(self, flow: str, rounds: int) -> None:
        self._child(self.rounds_per_call, flow).observe(rounds)

    def _child(self, metric: Any, *labels: str) -> Any:
        """A labelled child, looked up once: `labels()` re-validates its arguments on every call."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def _do_round_done(self, flow: str, round_number: int, latency: float, failure_code: str | None) -> None:
        self._child(self.round_duration, flow, str(min(round_number, MAX_ROUND_LABEL))).observe(latency)
        if failure_code is not None:
            code = self._bounded("mrtr_client_errors_total", "code", failure_code)
            self._child(self.client_errors, flow, code).inc()

    def _do_auth_refused(self, flow: str, tool: str, round_number: int, outcome: str) -> None:
        self._child(self.auth_refusals, flow, tool, str(min(round_number, MAX_ROUND_LABEL)), outcome).inc()

    def _do_token_refreshed(self, outcome: str) -> None:
        self._child(self.token_refreshes, outcome).inc()

    def _do_thought(self, seconds: float) -> None:
        self.think_time.observe(seconds)

    def _do_late_start(self) -> None:
        self.late_starts.inc()

    # --- updates only the master (or the local process) makes --------------------------------

    def rejection(self, replica: str, reason: str) -> None:
        replica = self._bounded("mrtr_request_state_rejections_total", "replica", replica)
        self.rejections.labels(replica=replica, reason=reason).inc()

    def _bounded(self, metric: str, label: str, value: str) -> str:
        """`value`, or `OVERFLOW_LABEL` (counted) once `label` of `metric` has taken `LABEL_VALUES_MAX` others."""
        seen = self._distinct.setdefault((metric, label), set())
        if value in seen:
            return value
        if len(seen) < LABEL_VALUES_MAX:
            seen.add(value)
            return value
        self.label_overflow.labels(metric=metric, label=label).inc()
        return OVERFLOW_LABEL

    def chaos_action(self, action: str, started_at: float) -> None:
        self.chaos_actions.labels(action=action).inc()
        self.chaos_last.labels(action=action).set(started_at)

    # --- the worker-to-master channel -----------------------------------------------------------

    def drain(self) -> list[tuple[Any, ...]]:
        """The updates since the last drain, for `report_to_master`; empties the buffer."""
        if self._buffer is None:
            return []
        updates, self._buffer = self._buffer, []
        return updates

    def apply(self, updates: Iterable[Any]) -> None:
        """Replay a worker's updates on the master's metrics (never re-buffered)."""
        for update in updates:
            getattr(self, f"_do_{update[0]}")(*update[1:])


def _check_exported(run_metrics: RunMetrics) -> None:
    """Refuse a live counterpart `harness.config.metric_table` names that is not defined here, or that has a label
    the metric it counts cannot be selected on: the table is the one declaration of a metric."""
    exposed = {}
    for value in vars(run_metrics).values():
        if isinstance(value, MetricWrapperBase):
            family = next(iter(value.describe()))
            exposed[family.name + ("_total" if family.type == "counter" else "")] = label_names(value)
    for metric in METRICS.values():
        for name in metric.exported:
            if name not in exposed or not set(exposed[name]) <= set(metric.labels):
                raise TypeError(f"metric {metric.name!r}: its live counterpart {name!r} is not defined by RunMetrics "
                                f"with labels among {metric.labels} (defined: {exposed.get(name)})")
