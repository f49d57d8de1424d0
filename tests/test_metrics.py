"""The metrics a load process updates at every round: lockless, and exposed exactly as prometheus_client's own."""

from __future__ import annotations

import random
import re

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from harness.metrics.lockless import LocklessCounter, LocklessGauge, LocklessHistogram
from harness.metrics.registry import ROUND_BUCKETS, RunMetrics

CREATED = re.compile(rb"(_created\{[^}]*\}|_created) [0-9.e+]+")


def _exposition(registry: CollectorRegistry) -> bytes:
    """The text a scrape gets, with the creation times (which differ by construction) masked."""
    return CREATED.sub(rb"\1 <time>", generate_latest(registry))


def _update(counter, gauge, histogram, values: list[float]) -> None:
    for n, value in enumerate(values):
        flow = ("refund", "return")[n % 2]
        counter.labels(flow=flow).inc()
        counter.labels(flow=flow).inc(2.5)
        gauge.labels(flow=flow).inc()
        if n % 3 == 0:
            gauge.labels(flow=flow).dec()
        histogram.labels(flow=flow, round=str(1 + n % 3)).observe(value)
    gauge.labels(flow="payout").set(7)


def test_lockless_metrics_expose_what_prometheus_clients_own_do():
    """The same updates into both kinds, values on bucket bounds and past the last one included: the same scrape."""
    values = [random.Random(5).uniform(0, 40) for _ in range(2_000)] + list(ROUND_BUCKETS) + [0.0, 31.0, 1e9]
    registries = []
    for counter_kind, gauge_kind, histogram_kind in ((Counter, Gauge, Histogram),
                                                     (LocklessCounter, LocklessGauge, LocklessHistogram)):
        registry = CollectorRegistry()
        _update(counter_kind("mrtr_x_total", "x", ["flow"], registry=registry),
                gauge_kind("mrtr_y", "y", ["flow"], registry=registry),
                histogram_kind("mrtr_z_seconds", "z", ["flow", "round"], buckets=ROUND_BUCKETS, registry=registry),
                values)
        registries.append(registry)
    library, lockless = (_exposition(registry) for registry in registries)
    assert b'le="0.005"' in library and b'le="+Inf"' in library and b"mrtr_y{" in library
    assert lockless == library


def test_the_run_metrics_a_round_updates_reach_the_scrape():
    """A round, an answer and a flow through `RunMetrics` as a load process makes them, and as a master replays them."""
    local = RunMetrics(flows=["refund"])
    worker = RunMetrics(flows=["refund"], buffer=True)
    master = RunMetrics(flows=["refund"])
    for metrics in (local, worker):
        metrics.flow_started("refund")
        metrics.round_done("refund", 1, 0.012, None)
        metrics.thought(2.0)
        metrics.round_done("refund", 2, 0.3, "-32602")
        metrics.call_done("refund", 2)
        metrics.flow_finished("refund", "completed", 2.4)
        metrics.host_flow_finished("default", "completed")
    master.apply(worker.drain())
    for metrics in (local, master):
        value = metrics.registry.get_sample_value
        assert value("mrtr_flows_started_total", {"flow": "refund"}) == 1
        assert value("mrtr_flows_in_flight", {"flow": "refund"}) == 0
        assert value("mrtr_round_duration_seconds_bucket", {"flow": "refund", "round": "1", "le": "0.025"}) == 1
        assert value("mrtr_round_duration_seconds_bucket", {"flow": "refund", "round": "2", "le": "0.25"}) == 0
        assert value("mrtr_round_duration_seconds_count", {"flow": "refund", "round": "2"}) == 1
        assert value("mrtr_client_errors_total", {"flow": "refund", "code": "-32602"}) == 1
        assert value("mrtr_rounds_per_call_sum", {"flow": "refund"}) == 2
        assert value("mrtr_think_time_seconds_sum") == 2.0
        assert value("mrtr_flows_finished_total", {"flow": "refund", "outcome": "completed"}) == 1
        assert value("mrtr_host_flows_finished_total", {"host": "default", "outcome": "completed"}) == 1
