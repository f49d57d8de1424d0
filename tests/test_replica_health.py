"""A replica's health: read from /proc and from a real Prometheus page, folded, fitted, judged by its bound."""

from __future__ import annotations

import os
import random
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, ProcessCollector, generate_latest
from scipy import stats

from harness.config.thresholds import ThresholdError, parse_threshold
from harness.folding.figures import RunFigures
from harness.folding.health import MAX_POINTS, fit_slope, t_quantile
from harness.folding.thresholds import evaluate
from harness.processes.health import process_health
from harness.targets.health import from_exposition


def test_a_process_health_is_its_memory_cpu_descriptors_and_threads():
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        with open(os.devnull) as _:
            health = process_health(os.getpid())
            assert health is not None
            assert health.rss_bytes > 10 * 1024 * 1024  # a Python with pytest loaded
            assert health.threads >= 2  # this one and the worker
            assert health.open_fds is not None and health.open_fds >= 4  # stdin, stdout, stderr, devnull
            assert health.cpu_seconds > 0
    finally:
        stop.set()
        worker.join()


def test_a_real_process_collector_page_reads_as_the_process_it_describes():
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    Counter("mcp_calls", "calls", registry=registry).inc()
    health = from_exposition(generate_latest(registry).decode())
    mine = process_health(os.getpid())
    assert health is not None and mine is not None and health.source == "prometheus"
    assert abs(health.rss_mb - mine.rss_bytes / 2**20) < 50
    assert health.open_fds is not None and health.cpu_seconds is not None


def test_a_page_without_resident_memory_or_that_does_not_parse_is_no_sample():
    assert from_exposition("process_open_fds 12\n") is None
    assert from_exposition("process_resident_memory_bytes{ 1\n") is None
    assert from_exposition("process_resident_memory_bytes NaN\n") is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400) | st.builds(lambda name, value: f"{name} {value}\n",
                                         st.sampled_from(["process_resident_memory_bytes", "process_threads",
                                                          "process_open_fds", "process_cpu_seconds_total"]),
                                         st.text(max_size=20)))
def test_any_page_reads_as_a_sample_or_none_never_an_error(text):
    health = from_exposition(text)
    assert health is None or (health.rss_mb >= 0 and health.source == "prometheus")


@pytest.mark.parametrize("df", [3, 5, 10, 30, 100, 1000])
def test_the_t_quantile_is_students_within_half_a_percent(df):
    assert t_quantile(0.975, df) == pytest.approx(stats.t.ppf(0.975, df), rel=0.005)


def test_the_fitted_interval_holds_the_true_slope():
    rng = random.Random(7)
    points = [(t * 2.0, 100 + 0.5 * t * 2.0 + rng.gauss(0, 3)) for t in range(120)]
    slope = fit_slope(points)
    assert slope is not None and slope.low < 30 < slope.high  # 0.5 MB/s is 30 MB/min


def _journal(mb_per_minute: float, noise: float, seconds: int = 300, seed: int = 1) -> list[dict[str, object]]:
    rng = random.Random(seed)
    start = 1_700_000_000.0
    records: list[dict[str, object]] = [{"type": "run", "event": "load-started", "t": start}]
    for i in range(0, seconds, 2):
        for replica in ("r1", "r2"):
            grow = mb_per_minute if replica == "r2" else 0.0
            records.append({"type": "health", "t": start + i, "replica": replica, "source": "proc",
                            "rss_mb": 80 + grow * i / 60 + rng.gauss(0, noise), "threads": 4, "open_fds": 20})
    return records


def _judge(records: list[dict[str, object]], condition: str = "< 5") -> tuple[bool, float | None]:
    [result] = evaluate([parse_threshold("replica_rss_growth", condition)], RunFigures.from_records(records))
    return result.passed, result.observed


def test_a_leak_above_the_threshold_fails_and_a_flat_replica_passes():
    passed, observed = _judge(_journal(50.0, noise=1.0))
    assert not passed and observed == pytest.approx(50, rel=0.05)
    assert _judge(_journal(0.0, noise=1.0))[0]
    [flat] = evaluate([parse_threshold("replica_rss_growth{replica='r1'}", "< 5")],
                      RunFigures.from_records(_journal(50.0, noise=1.0)))
    assert flat.passed


def test_less_than_fails_only_when_the_lower_bound_is_above():
    """A slope of 6 too noisy to tell from 5 passes `< 5` (its lower bound is below 5); measured sharp, it fails."""
    noisy = _journal(6.0, noise=0.0, seconds=120)
    for n, record in enumerate(r for r in noisy if r.get("replica") == "r2"):
        record["rss_mb"] = float(record["rss_mb"]) + (30 if n % 2 else -30)  # type: ignore[arg-type]
    slopes = RunFigures.from_records(noisy).slopes("replica_rss_growth", {"replica": "r2"})
    assert slopes[0].low < 5 < slopes[0].per_minute
    assert _judge(noisy)[0]
    assert not _judge(_journal(6.0, noise=0.1, seconds=120))[0]


def test_no_samples_after_the_warm_up_fails_closed():
    passed, observed = _judge(_journal(0.0, noise=1.0, seconds=6))
    assert not passed and observed is None


def test_a_long_run_keeps_a_bounded_series():
    figures = RunFigures.from_records(_journal(1.0, noise=1.0, seconds=20_000))
    assert len(figures.health.replicas["r1"].points) <= MAX_POINTS


@pytest.mark.parametrize("condition", ["== 5", "rate < 5", "count < 5"])
def test_a_slope_takes_a_bound_and_no_aggregate(condition):
    with pytest.raises(ThresholdError, match="slope in MB per minute"):
        parse_threshold("replica_rss_growth", condition)


EXTERNAL = ('name = "v"\nduration = "30s"\n[load]\narrival_rate = 2\n[[flows]]\nkind = "refund"\n'
            '[target]\nkind = "external"\nurls = ["http://127.0.0.1:{mcp}/mcp", "http://127.0.0.1:{mcp}/mcp"]\n')


def test_an_external_replica_s_health_is_scraped_from_its_metrics_url():
    """A real metrics endpoint (prometheus_client's own server, with its process collector) read as a replica."""
    from prometheus_client import start_http_server

    from harness.config.scenario import parse_scenario
    from harness.processes.children import free_port
    from harness.targets.external import ExternalTarget

    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        port = server.server_address[1]
        text = EXTERNAL.format(mcp=port) + f'health_urls = ["http://127.0.0.1:{port}/metrics", ' \
                                           f'"http://127.0.0.1:{free_port()}/metrics"]\n'
        health = ExternalTarget(parse_scenario(text)).replica_health()
    finally:
        server.shutdown()
        thread.join(timeout=10)
    assert set(health) == {"r1"}  # nothing listens at r2's: no sample, not a zero
    assert health["r1"].source == "prometheus" and health["r1"].rss_mb > 10


def test_health_urls_name_one_url_per_replica_of_an_external_target():
    from harness.config.scenario import parse_scenario
    from harness.config.strict import ScenarioError

    with pytest.raises(ScenarioError, match="one metrics URL per replica"):
        parse_scenario(EXTERNAL.format(mcp=9) + 'health_urls = ["http://127.0.0.1:9/metrics"]\n')


def _night(mb_per_minute: float, noise: float) -> object:
    from harness.compare.samples import RunSamples

    return RunSamples.from_records(_journal(mb_per_minute, noise=noise))


@pytest.mark.parametrize(("before", "after", "verdicts"), [
    ((0.0, 0.05), (0.5, 0.05), ["pass"]),  # apart, significant, but well under a leak: no regression
    ((0.0, 1.0), (50.0, 1.0), ["regression"]),
    ((50.0, 1.0), (0.0, 1.0), ["improved"]),
])
def test_the_nightly_gate_fails_on_a_leak_not_on_noise(before, after, verdicts):
    from harness.compare.comparison import JUDGES, _Judge
    from harness.config.compare import CompareSettings

    rows = JUDGES["replica_rss_growth"](_Judge(CompareSettings()), _night(*before), _night(*after))
    assert [row.verdict.value for row in rows] == verdicts


def test_the_nightly_gate_judges_only_nights_that_both_fitted_a_slope():
    from harness.compare.comparison import JUDGES, _Judge
    from harness.compare.samples import RunSamples
    from harness.config.compare import CompareSettings

    without = RunSamples.from_records([{"type": "run", "event": "load-started", "t": 1.0}])
    assert JUDGES["replica_rss_growth"](_Judge(CompareSettings()), without, _night(50.0, 1.0)) == []
